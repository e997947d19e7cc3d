/*
 * demo.h - redisync at work, in a few seconds, on a throwaway redis-server.
 *
 *   make demo
 *
 * Each part is one function (see the table `parts` in main.c) that prints a few lines
 * and returns 0 on success, non-zero on failure: the mutex (a counter race, trylock, a
 * crashed holder), then the recursive mutex, the read-write lock (a cache rebuild), the
 * semaphore (a slow API, a crashed permit holder), the countdown latch and rs_inspect.
 *
 * Processes: every child is created with fork() and opens its OWN rs_client_t after the
 * fork (a client opened before fork() only returns RS_EFORK in the child). Children leave
 * with _exit(), so they never run the parent's atexit handlers or flush its stdio twice.
 *
 * Children also die with the demo (PR_SET_PDEATHSIG), every wait in them has a deadline, and
 * the parent reaps them with a time limit (SIGKILL after it), so a misbehaving primitive
 * makes its part fail instead of hanging the demo. Children report what they saw through a
 * small shared memory block (struct shared) that the parent reads after reaping them;
 * concurrency is measured in Redis itself (an INCR/DECR gauge, see gauge()).
 *
 * Exit status: 0 when every part did what it shows, 1 otherwise (in particular when the
 * run with rs_mutex_t lost an update). The server is stopped in every case.
 *
 * What the files of the demo (tools/demo/) share: the settings, the shared memory block,
 * demo_t, the helpers and each part's entry.
 *
 *   main.c     the table of parts, in order, and main()
 *   util.c     printing, time, child processes, the client, plain keys and the gauge
 *   mutex.c    rs_mutex_t: the counter race without and with a lock, trylock, a crash
 *   rmutex.c   rs_rmutex_t: nested helpers
 *   rwlock.c   rs_rwlock_t: a cache rebuilt without a stampede
 *   sem.c      rs_sem_t: a slow API, a crashed permit holder
 *   latch.c    rs_latch_t: a coordinator and a batch of workers
 *   inspect.c  rs_inspect: who holds, who waits
 */
#ifndef REDISYNC_TOOLS_DEMO_H
#define REDISYNC_TOOLS_DEMO_H

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "test_util.h" /* tu_sleep_ms, tu_abs_in (tests/support/, linked in) */
#include "redisync.h"

/* ----- settings ------------------------------------------------------------------------ */
#define NPROC 6                /* processes in the counter race */
#define NINCR 200              /* increments per process */
#define RACE_GAP_US 100        /* sleep between GET and SET: makes the race window visible */
#define CRASH_LEASE_MS 1000    /* lease of the holder that gets kill -9'd */
#define REAP_MS 20000          /* children still running after this are killed (a failure) */
#define WAIT_MS 10000          /* deadline of every blocking call in the later parts */

#define RM_NAME "demo:ledger"  /* part: recursive mutex */
#define RM_PAUSE_MS 200        /* between the unlocks of the nested helpers */

#define RW_NAME "demo:cache"   /* part: read-write lock */
#define RW_READERS 5
#define RW_READ_MS 25          /* serving one request from the cache */
#define RW_REBUILD_MS 200      /* the expensive rebuild */
#define RW_EVENTS 3            /* stale caches: the cold start, then the data changes twice */
#define RW_STEADY_MS 400       /* fresh-cache reading between two events */

#define SEM_NAME "demo:api"    /* part: semaphore */
#define SEM_PERMITS 2
#define SEM_PROCS 6
#define SEM_CALLS 2            /* slow API calls per process */
#define SEM_CALL_MS 150
#define SEM_CRASH_NAME "demo:api-crash"
#define SEM_CRASH_LEASE_MS 800

#define LATCH_NAME "demo:batch" /* part: countdown latch */
#define LATCH_WORKERS 4
#define LATCH_WORK_MS 100       /* worker i works LATCH_WORK_MS + i * LATCH_STEP_MS */
#define LATCH_STEP_MS 60

#define INSP_NAME "demo:inspect" /* part: inspection */
#define INSP_LEASE_MS 5000

/* ----- shared state -------------------------------------------------------------------- */

/* What the children of the later parts report. One MAP_SHARED block, zeroed before every
 * part. Flags that children wait on are atomics; the other fields have one writer and are
 * read by the parent after it reaped that writer. Times are CLOCK_MONOTONIC ms (now_ms),
 * which all processes of the machine share. */
struct shared {
    atomic_int ready;   /* children that have their client and handle */
    atomic_int go;      /* the parent's start signal */
    atomic_int stop;    /* the parent's stop signal */
    /* recursive mutex */
    atomic_int rm_held;     /* the holder is inside all three helpers */
    atomic_int rm_released; /* the holder is about to do its outermost unlock */
    long rm_count[5];       /* rs_inspect count after lock, lock, trylock, unlock, unlock */
    uint64_t rm_fence[3];   /* rs_rmutex_fence at each level */
    uint64_t rm_info_fence; /* rs_inspect's fence at the innermost level */
    int rm_extra_unlock;    /* what an unlock beyond the count returned */
    double rm_t_release, rm_t_wait, rm_t_got;
    int rm_got_early;       /* the waiter got it before the outermost unlock */
    uint64_t rm_w_fence;
    /* read-write lock */
    atomic_int rw_waited;   /* requests that waited for the fresh copy instead of rebuilding */
    atomic_long rw_reads;   /* requests served */
    /* semaphore */
    atomic_int sem_k_held;
    double sem_t_got;
    /* latch */
    atomic_int latch_armed;
    double latch_t_down[LATCH_WORKERS], latch_t_wait, latch_t_open;
    long latch_late_count;
    int latch_late_rc;
    double latch_late_ms;
    /* inspection */
    atomic_int insp_held, insp_release, insp_got, insp_release2;
    char insp_h_id[32], insp_w_id[32];
    uint64_t insp_h_fence, insp_w_fence;
};

typedef struct demo {
    ts_server_t srv;
    char prefix[64]; /* key prefix unique to this run, for the plain keys */
    struct shared *sh;
} demo_t;

/* ----- helpers (util.c) --------------------------------------------------------------- */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double now_ms(void);
int wait_flag(atomic_int *flag, int want, long timeout_ms);
pid_t spawn(demo_t *d, int (*fn)(demo_t *, int), int arg);
int reap_within(const pid_t *pids, int n, long timeout_ms);
int reap(const pid_t *pids, int n);
void kill_all(const pid_t *pids, int n);
rs_client_t *open_client(demo_t *d, long lease_ms);
long long get_ll(redisContext *rc, const char *key);
int set_ll(redisContext *rc, const char *key, long long v);
int increment(redisContext *rc, const char *key);
void key_of(const demo_t *d, char *buf, size_t len, const char *what);
int gauge(redisContext *rc, const demo_t *d, const char *mine, const char *other,
          int delta, long long *other_now);
long long get_key(const demo_t *d, const char *what);

/* ----- the parts (one file each, see above) --------------------------------------------- */
int part_without_lock(demo_t *d);
int part_with_mutex(demo_t *d);
int part_trylock(demo_t *d);
int part_crash(demo_t *d);
int part_rmutex(demo_t *d);
int part_rwlock(demo_t *d);
int part_sem(demo_t *d);
int part_latch(demo_t *d);
int part_inspect(demo_t *d);

#endif
