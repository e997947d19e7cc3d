/*
 * storm.h - the contention benchmark's table of implementations (bench/storm/impls.c) and
 * what the driver (bench/storm/storm.c) needs from each.
 *
 * An implementation is either a redisync primitive, run in forked worker processes of this
 * program (c_ops), or an external worker program that speaks the same line protocol on its
 * stdin/stdout (argv; bench/peers/README.md describes the protocol). Adding a primitive to
 * `make bench` is one entry in storm_impls[].
 */
#ifndef REDISYNC_BENCH_STORM_H
#define REDISYNC_BENCH_STORM_H

#include "redisync.h"

/* One primitive, driven as lock/unlock by one thread of one worker process. */
typedef struct storm_c_ops {
    /* attaches *h to `name` on client c (url: the server's, for the raw baseline, which
     * does not use c); 0 or an error number */
    int (*init)(void **h, rs_client_t *c, const char *url, const char *name);
    int (*lock)(void *h);
    int (*unlock)(void *h);
    int (*destroy)(void *h);
    /* a row of readers and writers (storm_impl_t.readers): the read lock; unlock releases it */
    int (*rdlock)(void *h);
} storm_c_ops_t;

#define STORM_ARGV_MAX 8

enum {
    STORM_REDISYNC, /* a redisync primitive: the targets apply */
    STORM_BASELINE, /* the raw FIFO lock: what Redis and the machine cost, nothing else */
    STORM_PEER      /* run by `make bench-peers` only */
};

typedef struct storm_impl {
    const char *name;        /* as printed in the table, e.g. "redisync mutex" */
    const char *key;         /* word used in the primitive's name/key, e.g. "mutex" */
    int group;               /* STORM_REDISYNC, STORM_BASELINE or STORM_PEER */
    const storm_c_ops_t *c;  /* redisync: forked workers run these */
    /* external worker: argv (before the protocol's own arguments); "@PEERS@" in an
     * argument is replaced with the peers directory */
    const char *argv[STORM_ARGV_MAX];
    const char *settings;    /* retry/lease settings in use, printed under the table */
    /* readers and writers: the odd-numbered workers take c->rdlock, the others c->lock, and
     * readers may hold together; the counted phase tells the scripts of each role apart by
     * the EVALSHA argument at ARGV[role_argv], "r" for a reader's */
    int readers;
    int role_argv;
} storm_impl_t;

extern const storm_impl_t storm_impls[];
extern const int storm_nimpls;

#endif
