/*
 * load.h - what the files of the load test share (make load, make load-ci; tests/load/).
 *
 *   build/redisync-load [--procs P] [--threads T] [--names N] [--seconds D] [--lease-ms L]
 *                       [--sem-size S] [--deadline-ms W] [--mem-tolerance-kib K] [--seed X]
 *                       [--verbose] [--sabotage]
 *
 * One program: main.c is the driver, warm.c its warm-up, worker.c the body of each forked
 * process, redis.c reads the server's INFO and keyspace, report.c prints the table and
 * decides. The driver
 * starts its own redis-server on a free loopback port, forks P processes of T threads that
 * loop for D seconds over N names with a mix of primitives, and checks: no error from any
 * call, every process served, mutual exclusion (in-section counters in shared memory), no
 * lost increment, Redis memory back within K KiB of where it started once every client has
 * closed and the leases have run out, only persistent keys left (fencing counters and
 * semaphore sizes, both with a TTL), no connection left. Exit 0 when all hold, 1 on a
 * violation, 2 when the setup failed.
 *
 * The shared state is one anonymous MAP_SHARED mapping made before fork(), so every
 * process sees the same counters; they are C11 atomics (lock-free on every target we
 * build for, hence valid across processes). Exclusion is checked with counters that
 * each section raises on entry and lowers before unlocking: a value above the limit seen
 * on entry is a violation. Each exclusive section also adds one to a per-name counter with
 * a relaxed load then store (not an atomic add), so broken exclusion also shows as a lost
 * increment at the end.
 */
#ifndef RS_LOAD_H
#define RS_LOAD_H

#include <stdatomic.h>
#include <stdint.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_util.h"

#define LD_PROCS_MAX 256
#define LD_THREADS_MAX 32
#define LD_NAMES_MAX 64
#define LD_HIST 40 /* acquisition wait histogram: bucket b counts waits of 2^(b-1)..2^b us */

/* What an iteration does. The mix is in worker.c (mostly mutex). */
enum { K_MUTEX, K_RDLOCK, K_WRLOCK, K_SEM, K_RMUTEX, K_NKINDS };
extern const char *const ld_kind_names[K_NKINDS];

/* Error codes counted by slot; anything else lands in the last slot. */
#define LD_NERR 15
extern const int ld_err_codes[LD_NERR - 1];
int ld_err_slot(int code);
const char *ld_err_name(int slot);

typedef struct ld_config {
    int procs, threads, names, seconds;
    long lease_ms;
    unsigned sem_size;
    long deadline_ms;     /* of every timed wait: generous, so ETIMEDOUT means starvation */
    long mem_tolerance;   /* bytes */
    unsigned seed;
    int verbose;
    int sabotage;         /* some mutex sections skip the lock: the checks must fail */
    char url[128], prefix[64];
} ld_config_t;

typedef struct ld_proc {
    atomic_long acq[K_NKINDS];
    atomic_long err[LD_NERR];
    atomic_long onlost;
    atomic_long warnings; /* library log lines at RS_LOG_WARN or above */
    atomic_int ready;
} ld_proc_t;

typedef struct ld_name {
    atomic_int in[K_NKINDS];    /* holders inside now (readers and writers apart) */
    atomic_int max[K_NKINDS];   /* the most seen at once */
    atomic_long count[K_NKINDS]; /* exclusive kinds: bumped non-atomically inside */
    atomic_long acq[K_NKINDS];   /* acquisitions, to compare with count */
} ld_name_t;

typedef struct ld_shared {
    atomic_int go;            /* 1: start; -1: abort */
    atomic_llong end_ms;      /* CLOCK_MONOTONIC ms at which the threads stop */
    atomic_long violations[K_NKINDS];
    atomic_long hist[LD_HIST];
    atomic_llong wait_max_us;
    ld_name_t name[LD_NAMES_MAX];
    ld_proc_t proc[LD_PROCS_MAX];
} ld_shared_t;

/* The server's side of the figures. */
typedef struct ld_redis {
    long long mem_cold;             /* right after the server started */
    long long mem_before, mem_peak, mem_after, mem_scripts_after;
    long long calls_total;          /* every command, those run inside scripts included */
    long long calls_client;         /* sent by the clients (EVALSHA, SUBSCRIBE, ...) */
    long long calls_evalsha;        /* EVALSHA and EVAL */
    char top[256];                  /* the busiest commands, "name calls, ..." */
    long keys_after, keys_fence, keys_semsize, keys_other, keys_no_ttl;
    char other_key[128];            /* one unexpected key, for the report */
    long long conns_after;          /* library connections still open */
    double settle_s;                /* how long the keys and memory took to settle */
} ld_redis_t;

/* worker.c: the body of process i; never returns. */
void ld_worker(const ld_config_t *cfg, ld_shared_t *sh, int i) __attribute__((noreturn));

/* warm.c: runs each primitive once through a client of its own, closed on return. */
int ld_warm_up(const ld_config_t *cfg, const ts_server_t *srv);

/* redis.c */
long long ld_used_memory(const ts_server_t *s);
int ld_commandstats(const ts_server_t *s, ld_redis_t *out);
int ld_keys(const ts_server_t *s, ld_redis_t *out);

/* report.c: prints the table; returns the number of failed checks. */
int ld_report(const ld_config_t *cfg, const ld_shared_t *sh, const ld_redis_t *rd,
              int crashed, double run_s);


#endif
