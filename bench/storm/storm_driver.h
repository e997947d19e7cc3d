/*
 * storm_driver.h - what the files of build/redisync-storm share: the row, the worker, the
 * options, the MONITOR tally, and the functions of storm_util.c, storm_worker.c,
 * storm_redis.c, storm_run.c and storm_report.c (storm.c: main).
 */
#ifndef REDISYNC_BENCH_STORM_DRIVER_H
#define REDISYNC_BENCH_STORM_DRIVER_H

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "storm.h"

#define MAX_PROCS 512
#define RTT_OPS 2000
#define RTT_WARMUP 200
#define READY_TIMEOUT_S 180 /* 128 node processes on 2 CPUs take a while to start */
#define DONE_GRACE_S 60     /* after END: waiters still queued finish their turn */

#define TARGET_HANDOFF 3.0  /* median handoff latency, raw round trips */
#define TARGET_CMDS 2.5     /* commands per acquisition at 8 and 32 processes */
#define TARGET_FAIR 0.5     /* min / max acquisitions per process */

/* ===== the worker side (forked, redisync) ============================================== */

typedef struct rec {
    uint64_t t0, t1, t2, t3;
    int w;
} rec_t;

typedef struct worker {
    pid_t pid;
    int to;           /* its stdin */
    int from;         /* its stdout */
    char buf[1024];
    size_t blen;
    char line[1024];  /* last complete line */
    int have_line;
    int eof;
    char file[PATH_MAX];
    long fails;       /* failed acquisitions (peers giving up), per phase */
} worker_t;

typedef struct opts {
    const char *peers_dir;   /* NULL: redisync only */
    int procs[16], nprocs;
    double seconds, monitor_seconds;
    unsigned work_us;
    const char *out_dir;
    const char *only;        /* comma-separated impl keys, or NULL */
} opts_t;

typedef struct row {
    const storm_impl_t *im;
    int procs;
    int ok;
    char why[256];
    double rtt_us, rtt99_us, rtt_load_us; /* measured just before the row; during it */
    /* timed phase */
    double seconds;
    long acq;            /* lock returns inside [START, END) */
    double acq_per_s;
    long min_w, max_w;
    size_t handoffs;     /* acquisitions that were a handoff to a blocked waiter */
    double ho50_us, ho99_us;
    double unlock50_us;  /* the holder's unlock call, t3 - t2 */
    double wait50_ms, wait99_ms; /* lock call to lock return, t1 - t0 */
    double script_us;    /* server time per EVALSHA of the workers (INFO commandstats) */
    double server_us;    /* the same per acquisition: all the workers' EVALSHA time / all
                          * their acquisitions in the timed phase */
    long violations;     /* two holders at once */
    long fails;
    /* counted phase */
    long mon_acq, mon_cmds, mon_inner, mon_fails;
    /* rows of readers and writers: [0] the writers', [1] the readers' acquisitions and the
     * calls inside the scripts they ran */
    long mon_acq_by[2], mon_inner_by[2];
    char mon_names[256];
} row_t;

#define MON_NAMES 12
typedef struct monitor {
    redisContext *c;
    char marker[64];       /* the driver's marker connection, "127.0.0.1:PORT" */
    pthread_t th;
    int started, ended, err;
    long counted, inner;
    int role_argv;         /* storm_impl_t.role_argv: 0, or tally inner calls by role */
    int role;              /* of the last EVALSHA: 1 a reader's */
    long inner_by[2];
    int nn;
    char name[MON_NAMES][24];
    long cnt[MON_NAMES];
} monitor_t;

/* storm_util.c */
extern int g_errors;
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t now_ns(void);
void sleep_until(uint64_t t);
uint64_t quantile(uint64_t *v, size_t n, double q);
double loadavg(void);

/* storm_worker.c */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int c_worker(const storm_impl_t *im, const char *url, const char *name, const char *file,
             int idx);

/* storm_redis.c */
extern char g_one_sha[41];
extern uint64_t *g_rtt_all;
extern size_t g_rtt_n;
extern double g_unit_us;
redisContext *raw_connect(const ts_server_t *srv);
void local_addr(redisContext *c, char *out, size_t len);
int evalsha_stats(redisContext *c, long long *calls, long long *usec);
int rtt_once(redisContext *c);
int rtt_measure(redisContext *c, double *p50, double *p99);
void *monitor_main(void *arg);
int marker(redisContext *c, const char *word);

/* storm_run.c */
int mkdirs(const char *path);
void run_row(row_t *row, const opts_t *o, const ts_server_t *srv, redisContext *rtt,
             redisContext *mark);

/* storm_report.c */
void print_header(void);
void print_row(const row_t *r);
void print_details(const row_t *rows, int nrows);
void print_work(const row_t *rows, int nrows);
void print_targets(const row_t *rows, int nrows, const opts_t *o, double fast_us);
int cmp_row_procs(const void *a, const void *b);
int cmp_row_impl(const void *a, const void *b);
void write_chart(const row_t *rows, int nrows, const opts_t *o, const char *base,
                 const char *title);

#endif
