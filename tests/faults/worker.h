/*
 * worker.h - what the worker's files share (worker.c: the sections of the locks and the
 * latch's rounds; worker_sync.c: once's runs and the barrier's generations; worker_cond.c:
 * the condition variable; worker_async.c: the event-loop workers): the worker's state and
 * its calls on the checker.
 */
#ifndef RS_FAULTS_WORKER_H
#define RS_FAULTS_WORKER_H

#include <stdatomic.h>

#include "faults.h"
#include "redisync.h"

#define LOCK_BOUND_MS 15000  /* a waiter stuck this long is a liveness failure (Redlock:
                                check.c, check_waits) */
#define LATCH_BOUND_MS 15000
#define MAX_NAMES 8
#define SYNC_BOUND_MS 15000 /* once, barrier: a waiter stuck this long is a liveness failure */

typedef struct worker {
    prim_t prim;
    int slot, gen;
    uint64_t rng;
    const char *url, *prefix;
    int data_port, ck_port;
    const char *ports;  /* every port the library may connect to, comma-separated */
    int min_replicas;   /* > 0: lock may return RS_EREPL (a WAIT shortfall, e.g. mid-failover) */
    long lease_ms, timeout_ms;
    int names, sem_size, latch_count;
    long round_ms;
    int64_t t0;
    int start_round;
    int sabotage;      /* self-test of the checks: sometimes skip the lock and claim success */
    uint64_t last_fence;

    rs_client_t *c;
    redisContext *ck;
    char sha_fread[41], sha_fwrite[41], sha_enter[41];
    void *h[MAX_NAMES];
    int64_t last_econn[MAX_NAMES]; /* when a lock/unlock on the name last failed with RS_ECONN */
    int last_lock_rc[MAX_NAMES], last_unlock_rc[MAX_NAMES]; /* for diagnostics */
    int64_t last_lock_t[MAX_NAMES], last_unlock_t[MAX_NAMES];
    uint64_t last_lock_fence[MAX_NAMES];
    long elost;
    long fail_runs;    /* once: runs whose fn failed (a loss of one is told by on_lost only) */
    long api_bad;
    int async_pending; /* > 0: an event-loop worker (worker_async.c) keeping this many
                          requests pending */
} worker_t;

/* worker.c */
extern atomic_long g_onlost;
extern _Atomic int64_t g_lost_t; /* monotonic us of the current section's first on_lost */
extern atomic_long g_onlost_name[MAX_NAMES]; /* on_lost calls per name "nI" */
void count_err(worker_t *w, const char *what, int rc);
void api_bad(worker_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void live_bad(worker_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
long long stop_value(worker_t *w);
int ck_enter(worker_t *w, const char *name, int64_t t, long *net_id);
void ck_event(worker_t *w, char kind, const char *name, uint64_t fence);
int ck_fread(worker_t *w, const char *name, uint64_t fence, long long *v);
int ck_fwrite(worker_t *w, const char *name, uint64_t fence, long long expect);

/* worker_sync.c: until the driver's stop */
void once_loop(worker_t *w);
void barrier_loop(worker_t *w);

/* worker_cond.c: producers and consumers, until the driver's stop */
void cond_loop(worker_t *w);

/* worker_async.c: the mutex through the event-loop API, until the driver's stop */
void async_loop(worker_t *w);

#endif
