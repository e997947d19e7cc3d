/*
 * demo.c - redisync at work, in a few seconds, on a throwaway redis-server.
 *
 *   make demo
 *
 * Each part is one function (see the table `parts` at the bottom) that prints a few lines
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
 */
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

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("   ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void msleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* The absolute CLOCK_REALTIME deadline ms from now, for the timed calls. */
static struct timespec deadline_in(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Waits until *flag >= want; -1 after timeout_ms. */
static int wait_flag(atomic_int *flag, int want, long timeout_ms)
{
    double end = now_ms() + (double)timeout_ms;
    while (atomic_load(flag) < want) {
        if (now_ms() > end)
            return -1;
        msleep(1);
    }
    return 0;
}

/* Forks a child that runs fn(d, arg) and _exits with its result. -1 on failure. The child
 * dies with the demo (SIGKILL when the parent goes), so nothing outlives a failed run. */
static pid_t spawn(demo_t *d, int (*fn)(demo_t *, int), int arg)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        _exit(fn(d, arg));
    }
    if (pid < 0)
        say("fork failed: %s", strerror(errno));
    return pid;
}

/* Waits up to timeout_ms for the children, then SIGKILLs and reaps the rest. Returns how
 * many did not exit with status 0 (killed ones included). */
static int reap_within(const pid_t *pids, int n, long timeout_ms)
{
    int bad = 0, late = 0;
    double end = now_ms() + (double)timeout_ms;
    for (int i = 0; i < n; i++) {
        int st = 0, ok = 0;
        if (pids[i] <= 0) {
            bad++;
            continue;
        }
        for (;;) {
            pid_t r = waitpid(pids[i], &st, WNOHANG);
            if (r == pids[i]) {
                ok = 1;
                break;
            }
            if (r < 0 && errno != EINTR)
                break;
            if (now_ms() > end) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], &st, 0);
                late++;
                break;
            }
            msleep(2);
        }
        if (!ok || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    }
    if (late)
        say("%d process(es) still running after %.0f s were killed", late, timeout_ms / 1e3);
    return bad;
}

/* Waits for the children (at most REAP_MS); returns how many did not exit with status 0. */
static int reap(const pid_t *pids, int n)
{
    return reap_within(pids, n, REAP_MS);
}

/* Kills and reaps the children of a part that gave up. */
static void kill_all(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++)
        if (pids[i] > 0)
            waitpid(pids[i], NULL, 0);
}

/* Opens a client on the demo server (in the calling process). NULL after printing why. */
static rs_client_t *open_client(demo_t *d, long lease_ms)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = d->srv.url;
    cfg.lease_ms = lease_ms;
    rs_client_t *c;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        say("rs_client_open: %s (%s)", rs_strerror(rc), rs_client_lasterror(NULL));
        return NULL;
    }
    return c;
}

/* ----- helpers for the counter race ---------------------------------------------------- */

/* GET key as an integer (nil: 0). -1 on error. */
static long long get_ll(redisContext *rc, const char *key)
{
    redisReply *r = redisCommand(rc, "GET %s", key);
    if (!r)
        return -1;
    long long v = -1;
    if (r->type == REDIS_REPLY_NIL)
        v = 0;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

static int set_ll(redisContext *rc, const char *key, long long v)
{
    redisReply *r = redisCommand(rc, "SET %s %lld", key, v);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* One read-modify-write increment: GET, a short pause, SET. */
static int increment(redisContext *rc, const char *key)
{
    long long v = get_ll(rc, key);
    if (v < 0)
        return -1;
    usleep(RACE_GAP_US);
    return set_ll(rc, key, v + 1);
}

static void key_of(const demo_t *d, char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "%s:%s", d->prefix, what);
}

/* ----- a concurrency gauge in Redis ----------------------------------------------------- */

/* Adds delta to the counter KEYS[1], raises KEYS[2] (its maximum) if need be and returns the
 * counter with the value of another counter KEYS[3], all in one step: a process enters with
 * +1 right after it acquired and leaves with -1 right before it releases, so two processes
 * that were inside at the same time always see each other (at entry or at exit). */
static const char GAUGE_LUA[] =
    "local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
    "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end "
    "return {n, tonumber(redis.call('GET', KEYS[3]) or '0')}";

/* gauge(rc, "readers", "writers", +1, &other): 0 with *other = the other counter; -1 on error. */
static int gauge(redisContext *rc, const demo_t *d, const char *mine, const char *other,
                 int delta, long long *other_now)
{
    char k1[96], k2[104], k3[96];
    key_of(d, k1, sizeof k1, mine);
    snprintf(k2, sizeof k2, "%s:max", k1);
    key_of(d, k3, sizeof k3, other);
    redisReply *r = redisCommand(rc, "EVAL %s 3 %s %s %s %d", GAUGE_LUA, k1, k2, k3, delta);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[1]->type == REDIS_REPLY_INTEGER;
    if (ok)
        *other_now = r->element[1]->integer;
    else
        say("gauge: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* GET of a plain key of this run as an integer (nil: 0), from the parent. -1 on error. */
static long long get_key(const demo_t *d, const char *what)
{
    char key[96];
    key_of(d, key, sizeof key, what);
    redisContext *rc = ts_connect(&d->srv);
    if (!rc)
        return -1;
    long long v = get_ll(rc, key);
    redisFree(rc);
    return v;
}

/* ----- part: the race without a lock --------------------------------------------------- */

static int child_unlocked(demo_t *d, int id)
{
    (void)id;
    char key[96];
    key_of(d, key, sizeof key, "counter:unlocked");
    redisContext *rc = ts_connect(&d->srv);
    if (!rc)
        return 1;
    int err = 0;
    for (int i = 0; i < NINCR && !err; i++)
        err = increment(rc, key) != 0;
    redisFree(rc);
    return err;
}

static int part_without_lock(demo_t *d)
{
    say("%d processes each do %d x (GET counter; sleep %d us; SET counter+1), no lock:",
        NPROC, NINCR, RACE_GAP_US);
    pid_t pids[NPROC];
    double t0 = now_ms();
    for (int i = 0; i < NPROC; i++)
        pids[i] = spawn(d, child_unlocked, i);
    int bad = reap(pids, NPROC);
    double t1 = now_ms();
    char key[96];
    key_of(d, key, sizeof key, "counter:unlocked");
    long long got = ts_cmd_int(&d->srv, "GET %s", key);
    long long want = (long long)NPROC * NINCR;
    if (bad || got < 0) {
        say("a child failed (%d of %d)", bad, NPROC);
        return 1;
    }
    say("without a lock:   counter = %lld of %lld expected: %lld updates lost  (%.0f ms)",
        got, want, want - got, t1 - t0);
    return 0; /* losing updates is what this part shows, not a failure */
}

/* ----- part: the same race with rs_mutex_t --------------------------------------------- */

/* Child exit codes of the locked run. */
#define CHILD_OK 0
#define CHILD_ERR 1
#define CHILD_FENCE 2 /* a fencing token did not rise */

static int child_locked(demo_t *d, int id)
{
    (void)id;
    char key[96], fkey[96], firstkey[96];
    key_of(d, key, sizeof key, "counter:locked");
    key_of(d, fkey, sizeof fkey, "fence:last");
    key_of(d, firstkey, sizeof firstkey, "fence:first");
    rs_client_t *c = open_client(d, 0);
    redisContext *rc = ts_connect(&d->srv);
    rs_mutex_t *m = NULL;
    int status = CHILD_ERR;
    if (!c || !rc)
        goto out;
    int err = rs_mutex_init(&m, c, "demo:counter");
    if (err) {
        say("rs_mutex_init: %s", rs_strerror(err));
        goto out;
    }
    status = CHILD_OK;
    for (int i = 0; i < NINCR && status == CHILD_OK; i++) {
        err = rs_mutex_lock(m);
        if (err) {
            say("rs_mutex_lock: %s (%s)", rs_strerror(err), rs_client_lasterror(c));
            status = CHILD_ERR;
            break;
        }
        /* inside the critical section: the token must be above every earlier holder's */
        uint64_t fence = rs_mutex_fence(m);
        long long last = get_ll(rc, fkey);
        if (last < 0 || fence <= (uint64_t)last)
            status = CHILD_FENCE;
        char fs[32];
        snprintf(fs, sizeof fs, "%" PRIu64, fence);
        redisReply *r = redisCommand(rc, "SET %s %s", fkey, fs);
        if (r)
            freeReplyObject(r);
        r = redisCommand(rc, "SET %s %s NX", firstkey, fs);
        if (r)
            freeReplyObject(r);
        if (increment(rc, key) != 0)
            status = CHILD_ERR;
        err = rs_mutex_unlock(m);
        if (err) {
            say("rs_mutex_unlock: %s (%s)", rs_strerror(err), rs_client_lasterror(c));
            status = CHILD_ERR;
        }
    }
out:
    if (rc)
        redisFree(rc);
    rs_mutex_destroy(m);
    rs_client_close(c);
    return status;
}

static int part_with_mutex(demo_t *d)
{
    say("the same %d x %d increments, each one inside rs_mutex_lock/rs_mutex_unlock:",
        NPROC, NINCR);
    pid_t pids[NPROC];
    double t0 = now_ms();
    for (int i = 0; i < NPROC; i++)
        pids[i] = spawn(d, child_locked, i);
    int fence_bad = 0, err = 0;
    for (int i = 0; i < NPROC; i++) {
        int st;
        if (pids[i] <= 0 || waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st))
            err++;
        else if (WEXITSTATUS(st) == CHILD_FENCE)
            fence_bad++;
        else if (WEXITSTATUS(st) != CHILD_OK)
            err++;
    }
    double t1 = now_ms();
    char key[96], fkey[96], firstkey[96], first[32] = "?", last[32] = "?";
    key_of(d, key, sizeof key, "counter:locked");
    key_of(d, fkey, sizeof fkey, "fence:last");
    key_of(d, firstkey, sizeof firstkey, "fence:first");
    long long got = ts_cmd_int(&d->srv, "GET %s", key);
    long long want = (long long)NPROC * NINCR;
    ts_cmd_str(&d->srv, first, sizeof first, "GET %s", firstkey);
    ts_cmd_str(&d->srv, last, sizeof last, "GET %s", fkey);
    int ok = got == want;
    if (ok)
        say("with rs_mutex_t:  counter = %lld of %lld: no update lost  (%.0f ms, %.0f us per "
            "locked increment)", got, want, t1 - t0, (t1 - t0) * 1e3 / (double)want);
    else
        say("with rs_mutex_t:  counter = %lld of %lld: %lld UPDATES LOST", got, want, want - got);
    if (fence_bad)
        say("fencing tokens:   first %s, last %s: a token did NOT rise above the previous "
            "holder's", first, last);
    else
        say("fencing tokens:   first %s, last %s: they rose with every one of the %lld holds",
            first, last, want);
    if (err)
        say("%d of %d processes reported an error", err, NPROC);
    return ok && !fence_bad && !err ? 0 : 1;
}

/* ----- part: trylock while another process holds --------------------------------------- */

/* Child: trylock must return `expect`; on success it unlocks again. */
static int child_trylock(demo_t *d, int expect)
{
    rs_client_t *c = open_client(d, 0);
    if (!c)
        return 1;
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, "demo:try");
    if (rc == 0) {
        rc = rs_mutex_trylock(m);
        say("  process %d: rs_mutex_trylock = %s%s", (int)getpid(), rc ? "" : "0, ",
            rc == EBUSY ? "EBUSY (held by another process)" : rs_strerror(rc));
        if (rc == 0)
            rs_mutex_unlock(m);
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return rc == expect ? 0 : 1;
}

static int part_trylock(demo_t *d)
{
    rs_client_t *c = open_client(d, 0);
    if (!c)
        return 1;
    rs_mutex_t *m = NULL;
    int fail = 0;
    int rc = rs_mutex_init(&m, c, "demo:try");
    if (rc == 0)
        rc = rs_mutex_lock(m);
    if (rc) {
        say("locking demo:try: %s", rs_strerror(rc));
        fail = 1;
    } else {
        say("process %d holds \"demo:try\" (fence %" PRIu64 "); another process tries:",
            (int)getpid(), rs_mutex_fence(m));
        pid_t p = spawn(d, child_trylock, EBUSY);
        fail |= reap(&p, 1) != 0;
        rc = rs_mutex_unlock(m);
        fail |= rc != 0;
        say("process %d unlocked it; a new process tries:", (int)getpid());
        p = spawn(d, child_trylock, 0);
        fail |= reap(&p, 1) != 0;
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return fail;
}

/* ----- part: a holder killed with kill -9 ---------------------------------------------- */

/* Child: takes the lock with a short lease, writes its fence to the pipe, then hangs. */
static int child_crash(demo_t *d, int wfd)
{
    rs_client_t *c = open_client(d, CRASH_LEASE_MS);
    rs_mutex_t *m = NULL;
    uint64_t fence = 0;
    if (c && rs_mutex_init(&m, c, "demo:crash") == 0 && rs_mutex_lock(m) == 0)
        fence = rs_mutex_fence(m);
    if (write(wfd, &fence, sizeof fence) != (ssize_t)sizeof fence || !fence)
        return 1;
    for (;;)
        pause(); /* until kill -9: no unlock, no close */
}

static int part_crash(demo_t *d)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    pid_t p = spawn(d, child_crash, pfd[1]);
    close(pfd[1]);
    uint64_t dead_fence = 0;
    ssize_t n = p > 0 ? read(pfd[0], &dead_fence, sizeof dead_fence) : -1;
    close(pfd[0]);
    if (n != (ssize_t)sizeof dead_fence || !dead_fence) {
        say("the holder process could not take \"demo:crash\"");
        if (p > 0) {
            kill(p, SIGKILL);
            waitpid(p, NULL, 0);
        }
        return 1;
    }
    say("process %d holds \"demo:crash\" with a %d ms lease (fence %" PRIu64 "); kill -9 it",
        (int)p, CRASH_LEASE_MS, dead_fence);
    rs_client_t *c = open_client(d, 0);
    double t0 = now_ms();
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    rs_mutex_t *m = NULL;
    int rc = c ? rs_mutex_init(&m, c, "demo:crash") : 1;
    if (rc == 0) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 5; /* the lease is 1 s: 5 s means something is wrong */
        rc = rs_mutex_timedlock(m, &dl);
    }
    double t1 = now_ms();
    int fail = 1;
    if (rc == 0) {
        uint64_t f = rs_mutex_fence(m);
        say("process %d got it %.0f ms after the kill (the dead holder's lease ran out), "
            "fence %" PRIu64 " > %" PRIu64 "%s",
            (int)getpid(), t1 - t0, f, dead_fence, f > dead_fence ? "" : "  <-- NOT larger!");
        fail = f <= dead_fence || t1 - t0 > CRASH_LEASE_MS + 500;
        if (t1 - t0 > CRASH_LEASE_MS + 500)
            say("that took longer than the lease (%d ms) + 500 ms", CRASH_LEASE_MS);
        fail |= rs_mutex_unlock(m) != 0;
    } else if (c) {
        say("rs_mutex_timedlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return fail;
}

/* ----- part: the recursive mutex -------------------------------------------------------- */

/* The holder's side: transfer() locks and calls debit(), which locks and calls audit(),
 * which locks with trylock (the holder always gets it). After each lock and unlock the hold
 * count is read back with rs_inspect. */
typedef struct rm_holder {
    demo_t *d;
    rs_client_t *c;
    rs_rmutex_t *m;
    int err;
} rm_holder_t;

static void rm_note(rm_holder_t *x, int step, int level)
{
    rs_info_t info;
    int rc = rs_inspect(x->c, "rmutex", RM_NAME, &info);
    if (rc) {
        say("rs_inspect: %s", rs_strerror(rc));
        x->err = 1;
        return;
    }
    x->d->sh->rm_count[step] = info.count;
    if (level >= 0) {
        x->d->sh->rm_fence[level] = rs_rmutex_fence(x->m);
        x->d->sh->rm_info_fence = info.fence;
    }
}

static int rm_fail(rm_holder_t *x, const char *what, int rc)
{
    say("%s: %s (%s)", what, rs_strerror(rc), rs_client_lasterror(x->c));
    x->err = 1;
    return rc;
}

static void rm_audit(rm_holder_t *x)
{
    int rc = rs_rmutex_trylock(x->m);
    if (rc) {
        rm_fail(x, "audit: rs_rmutex_trylock", rc);
        return;
    }
    rm_note(x, 2, 2);
    atomic_store(&x->d->sh->rm_held, 1);
    /* hold on until the other process is queued, as rs_inspect shows */
    double end = now_ms() + 5000;
    rs_info_t info = {0};
    while (now_ms() < end && (rs_inspect(x->c, "rmutex", RM_NAME, &info) != 0 || !info.waiters))
        msleep(5);
    if (!info.waiters) {
        say("the other process never queued for \"%s\"", RM_NAME);
        x->err = 1;
    }
    msleep(RM_PAUSE_MS);
    if ((rc = rs_rmutex_unlock(x->m)) != 0)
        rm_fail(x, "audit: rs_rmutex_unlock", rc);
    rm_note(x, 3, -1);
}

static void rm_debit(rm_holder_t *x)
{
    int rc = rs_rmutex_lock(x->m);
    if (rc) {
        rm_fail(x, "debit: rs_rmutex_lock", rc);
        return;
    }
    rm_note(x, 1, 1);
    rm_audit(x);
    msleep(RM_PAUSE_MS);
    if ((rc = rs_rmutex_unlock(x->m)) != 0)
        rm_fail(x, "debit: rs_rmutex_unlock", rc);
    rm_note(x, 4, -1);
}

static void rm_transfer(rm_holder_t *x)
{
    int rc = rs_rmutex_lock(x->m);
    if (rc) {
        rm_fail(x, "transfer: rs_rmutex_lock", rc);
        return;
    }
    rm_note(x, 0, 0);
    rm_debit(x);
    msleep(RM_PAUSE_MS);
    x->d->sh->rm_t_release = now_ms();
    atomic_store(&x->d->sh->rm_released, 1);
    if ((rc = rs_rmutex_unlock(x->m)) != 0)
        rm_fail(x, "transfer: rs_rmutex_unlock", rc);
}

static int child_rm_holder(demo_t *d, int unused)
{
    (void)unused;
    rm_holder_t x = {d, open_client(d, 0), NULL, 0};
    if (!x.c)
        return 1;
    int rc = rs_rmutex_init(&x.m, x.c, RM_NAME);
    if (rc == 0) {
        rm_transfer(&x);
        d->sh->rm_extra_unlock = rs_rmutex_unlock(x.m); /* one too many */
    } else {
        rm_fail(&x, "rs_rmutex_init", rc);
    }
    rs_rmutex_destroy(x.m);
    rs_client_close(x.c);
    return x.err;
}

static int child_rm_waiter(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_rmutex_t *m = NULL;
    int rc = c ? rs_rmutex_init(&m, c, RM_NAME) : -1;
    if (rc == 0 && wait_flag(&sh->rm_held, 1, 5000) != 0)
        rc = -1;
    if (rc == 0) {
        sh->rm_t_wait = now_ms();
        struct timespec dl = deadline_in(WAIT_MS);
        rc = rs_rmutex_timedlock(m, &dl);
        sh->rm_t_got = now_ms();
        if (rc == 0) {
            sh->rm_got_early = !atomic_load(&sh->rm_released);
            sh->rm_w_fence = rs_rmutex_fence(m);
            rc = rs_rmutex_unlock(m);
        } else {
            say("waiter: rs_rmutex_timedlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        }
    }
    rs_rmutex_destroy(m);
    rs_client_close(c);
    return rc != 0;
}

static int part_rmutex(demo_t *d)
{
    struct shared *sh = d->sh;
    pid_t p[2];
    p[0] = spawn(d, child_rm_holder, 0);
    p[1] = spawn(d, child_rm_waiter, 0);
    int bad = reap(p, 2);
    const long want[5] = {1, 2, 3, 2, 1};
    int counts_ok = 1;
    for (int i = 0; i < 5; i++)
        counts_ok &= sh->rm_count[i] == want[i];
    uint64_t f = sh->rm_fence[0];
    int fence_ok = f && sh->rm_fence[1] == f && sh->rm_fence[2] == f && sh->rm_info_fence == f;
    double wait = sh->rm_t_got - sh->rm_t_wait, after = sh->rm_t_got - sh->rm_t_release;

    say("process %d: transfer() locks \"%s\", calls debit() which locks, calls audit() "
        "which trylocks:", (int)p[0], RM_NAME);
    say("  hold count (rs_inspect \"rmutex\" info.count): %ld, %ld, %ld; after the inner "
        "unlocks %ld, %ld%s", sh->rm_count[0], sh->rm_count[1], sh->rm_count[2],
        sh->rm_count[3], sh->rm_count[4], counts_ok ? "" : "  <-- expected 1, 2, 3, 2, 1");
    say("  fencing token at the three levels: %" PRIu64 ", %" PRIu64 ", %" PRIu64 "%s",
        sh->rm_fence[0], sh->rm_fence[1], sh->rm_fence[2],
        fence_ok ? " (the same)" : "  <-- NOT the same (or not rs_inspect's)");
    if (sh->rm_got_early || !sh->rm_w_fence)
        say("process %d: %s", (int)p[1],
            sh->rm_w_fence ? "got the lock BEFORE the outermost unlock" : "never got the lock");
    else
        say("process %d waited %.0f ms and got it %.1f ms after the outermost unlock (fence "
            "%" PRIu64 ")", (int)p[1], wait, after, sh->rm_w_fence);
    int extra_ok = sh->rm_extra_unlock == EPERM;
    say("an unlock beyond the count: %s%s",
        sh->rm_extra_unlock == EPERM ? "EPERM" : rs_strerror(sh->rm_extra_unlock),
        extra_ok ? "" : "  <-- expected EPERM");
    if (bad)
        say("%d of 2 processes reported an error", bad);
    return bad || !counts_ok || !fence_ok || sh->rm_got_early || sh->rm_w_fence <= f ||
                   !extra_ok || after < 0
               ? 1
               : 0;
}

/* ----- part: the read-write lock, a cache rebuilt without a stampede -------------------- */

/* MGET cache version: both as integers (nil: 0). -1 on error. */
static int rw_read_state(redisContext *rc, const demo_t *d, long long *cache, long long *version)
{
    char kc[96], kv[96];
    key_of(d, kc, sizeof kc, "cache");
    key_of(d, kv, sizeof kv, "version");
    redisReply *r = redisCommand(rc, "MGET %s %s", kc, kv);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    if (ok) {
        *cache = r->element[0]->type == REDIS_REPLY_STRING ? atoll(r->element[0]->str) : 0;
        *version = r->element[1]->type == REDIS_REPLY_STRING ? atoll(r->element[1]->str) : 0;
    }
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* One request: serve from the cache under the read lock; if it is stale, take the write lock,
 * check again (someone may have rebuilt it meanwhile) and rebuild only if still stale.
 * Returns 0, or 1 on an error. *overlap counts a reader and a writer seen inside together. */
static int rw_request(demo_t *d, redisContext *rc, rs_rwlock_t *rw, long long *overlap)
{
    long long cache, version, other;
    struct timespec dl = deadline_in(WAIT_MS);
    double t0 = now_ms();
    int e = rs_rwlock_timedrdlock(rw, &dl);
    if (e) {
        say("rs_rwlock_timedrdlock: %s", rs_strerror(e));
        return 1;
    }
    if (now_ms() - t0 > RW_REBUILD_MS / 2)
        atomic_fetch_add(&d->sh->rw_waited, 1); /* held back by the rebuild */
    int err = gauge(rc, d, "readers", "writers", 1, &other) != 0;
    *overlap += other > 0;
    err |= rw_read_state(rc, d, &cache, &version) != 0;
    msleep(RW_READ_MS);
    err |= gauge(rc, d, "readers", "writers", -1, &other) != 0;
    *overlap += other > 0;
    if ((e = rs_rwlock_unlock(rw)) != 0) {
        say("rs_rwlock_unlock (read): %s", rs_strerror(e));
        return 1;
    }
    if (err || (cache == version && cache > 0)) {
        atomic_fetch_add(&d->sh->rw_reads, 1);
        return err;
    }
    /* stale: one process rebuilds, the others queue for the write lock and find it fresh */
    dl = deadline_in(WAIT_MS);
    if ((e = rs_rwlock_timedwrlock(rw, &dl)) != 0) {
        say("rs_rwlock_timedwrlock: %s", rs_strerror(e));
        return 1;
    }
    char kw[96];
    key_of(d, kw, sizeof kw, "writers");
    err |= gauge(rc, d, "writers", "readers", 1, &other) != 0;
    *overlap += other > 0;
    err |= rw_read_state(rc, d, &cache, &version) != 0;
    if (!err && (cache != version || cache == 0)) {
        msleep(RW_REBUILD_MS); /* the expensive part */
        char kc[96], kr[96];
        key_of(d, kc, sizeof kc, "cache");
        key_of(d, kr, sizeof kr, "rebuilds");
        /* counted first: once the parent sees the fresh cache, its rebuild is counted */
        redisReply *r = redisCommand(rc, "INCR %s", kr);
        err |= !r || r->type != REDIS_REPLY_INTEGER;
        if (r)
            freeReplyObject(r);
        r = redisCommand(rc, "SET %s %lld", kc, version);
        err |= !r || r->type != REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
    } else if (!err) {
        atomic_fetch_add(&d->sh->rw_waited, 1); /* rebuilt by someone else meanwhile */
    }
    *overlap += get_ll(rc, kw) != 1; /* another writer inside too */
    err |= gauge(rc, d, "writers", "readers", -1, &other) != 0;
    *overlap += other > 0;
    if ((e = rs_rwlock_unlock(rw)) != 0) {
        say("rs_rwlock_unlock (write): %s", rs_strerror(e));
        return 1;
    }
    atomic_fetch_add(&d->sh->rw_reads, 1);
    return err;
}

static int child_rw_reader(demo_t *d, int id)
{
    (void)id;
    rs_client_t *c = open_client(d, 0);
    redisContext *rc = ts_connect(&d->srv);
    rs_rwlock_t *rw = NULL;
    int err = !c || !rc || rs_rwlock_init(&rw, c, RW_NAME) != 0;
    long long overlap = 0;
    double end = now_ms() + REAP_MS;
    while (!err && !atomic_load(&d->sh->stop) && now_ms() < end)
        err = rw_request(d, rc, rw, &overlap);
    if (overlap && rc) {
        char ko[96];
        key_of(d, ko, sizeof ko, "overlaps");
        redisReply *r = redisCommand(rc, "INCRBY %s %lld", ko, overlap);
        if (r)
            freeReplyObject(r);
    }
    if (rc)
        redisFree(rc);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    return err;
}

static int part_rwlock(demo_t *d)
{
    struct shared *sh = d->sh;
    char kv[96];
    key_of(d, kv, sizeof kv, "version");
    char buf[32];
    if (!ts_cmd_str(&d->srv, buf, sizeof buf, "SET %s 1", kv))
        return 1;
    say("%d processes serve requests from \"cache\" under rs_rwlock_rdlock (%d ms each); when",
        RW_READERS, RW_READ_MS);
    say("  it is older than \"version\" one rebuilds it under rs_rwlock_wrlock (%d ms):",
        RW_REBUILD_MS);
    pid_t p[RW_READERS];
    for (int i = 0; i < RW_READERS; i++)
        p[i] = spawn(d, child_rw_reader, i);
    long long rebuilds[RW_EVENTS] = {0};
    int fail = 0;
    long long before = 0;
    for (int v = 1; v <= RW_EVENTS && !fail; v++) {
        if (v > 1 && !ts_cmd_str(&d->srv, buf, sizeof buf, "SET %s %d", kv, v))
            fail = 1; /* the data changed: the cache is stale */
        double end = now_ms() + WAIT_MS;
        while (!fail && get_key(d, "cache") != v) {
            if (now_ms() > end) {
                say("the cache never reached version %d", v);
                fail = 1;
            }
            msleep(5);
        }
        msleep(RW_STEADY_MS); /* fresh-cache reading; any extra rebuild would happen here */
        long long now = get_key(d, "rebuilds");
        rebuilds[v - 1] = now - before;
        before = now;
    }
    atomic_store(&sh->stop, 1);
    int bad = reap(p, RW_READERS);
    long long rmax = get_key(d, "readers:max"), wmax = get_key(d, "writers:max");
    long long overlaps = get_key(d, "overlaps");
    int per_event_ok = 1;
    for (int i = 0; i < RW_EVENTS; i++)
        per_event_ok &= rebuilds[i] == 1;
    if (rmax < 0 || wmax < 0 || overlaps < 0) {
        say("could not read the results from Redis; %d of %d processes reported an error", bad,
            RW_READERS);
        return 1;
    }
    say("readers inside at once: up to %lld (INCR/DECR gauge)%s; %ld requests served",
        rmax, rmax > 1 ? "" : "  <-- readers did NOT share the lock", atomic_load(&sh->rw_reads));
    say("stale cache: the cold start and %d data changes: %lld, %lld, %lld rebuild(s)%s",
        RW_EVENTS - 1, rebuilds[0], rebuilds[1], rebuilds[2],
        per_event_ok ? " (one each)" : "  <-- expected exactly one each");
    say("while it was rebuilt, %d requests waited for the fresh copy instead of rebuilding it",
        atomic_load(&sh->rw_waited));
    if (overlaps == 0 && wmax == 1)
        say("no reader was ever inside together with the writer, nor two writers together");
    else
        say("EXCLUSION BROKEN: %lld reader/writer overlaps seen, up to %lld writers at once",
            overlaps, wmax);
    if (bad)
        say("%d of %d processes reported an error", bad, RW_READERS);
    return fail || bad || rmax <= 1 || !per_event_ok || overlaps != 0 || wmax != 1;
}

/* ----- part: the semaphore --------------------------------------------------------------- */

static int child_sem_caller(demo_t *d, int id)
{
    (void)id;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    redisContext *rc = ts_connect(&d->srv);
    rs_sem_t *s = NULL;
    int err = !c || !rc;
    int e = err ? 0 : rs_sem_init(&s, c, SEM_NAME, SEM_PERMITS);
    if (e) {
        say("rs_sem_init: %s", rs_strerror(e));
        err = 1;
    }
    atomic_fetch_add(&sh->ready, 1);
    if (!err && wait_flag(&sh->go, 1, WAIT_MS) != 0)
        err = 1;
    for (int i = 0; i < SEM_CALLS && !err; i++) {
        struct timespec dl = deadline_in(WAIT_MS);
        if ((e = rs_sem_timedwait(s, &dl)) != 0) {
            say("rs_sem_timedwait: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
            err = 1;
            break;
        }
        long long unused;
        err |= gauge(rc, d, "api:inside", "api:none", 1, &unused) != 0;
        msleep(SEM_CALL_MS); /* the slow API */
        err |= gauge(rc, d, "api:inside", "api:none", -1, &unused) != 0;
        if ((e = rs_sem_post(s)) != 0) {
            say("rs_sem_post: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
            err = 1;
        }
    }
    if (rc)
        redisFree(rc);
    rs_sem_destroy(s);
    rs_client_close(c);
    return err;
}

/* Takes a permit with a short lease, says so, then hangs until kill -9. */
static int child_sem_crash(demo_t *d, int unused)
{
    (void)unused;
    rs_client_t *c = open_client(d, SEM_CRASH_LEASE_MS);
    rs_sem_t *s = NULL;
    struct timespec dl = deadline_in(WAIT_MS);
    if (!c || rs_sem_init(&s, c, SEM_CRASH_NAME, SEM_PERMITS) != 0 || rs_sem_timedwait(s, &dl) != 0)
        return 1;
    atomic_store(&d->sh->sem_k_held, 1);
    for (;;)
        pause();
}

/* Queues for a permit of the full semaphore; notes when it gets one. */
static int child_sem_waiter(demo_t *d, int unused)
{
    (void)unused;
    rs_client_t *c = open_client(d, 0);
    rs_sem_t *s = NULL;
    int e = c ? rs_sem_init(&s, c, SEM_CRASH_NAME, 0) : -1;
    if (e == 0) {
        struct timespec dl = deadline_in(WAIT_MS);
        e = rs_sem_timedwait(s, &dl);
        d->sh->sem_t_got = now_ms();
        if (e == 0)
            e = rs_sem_post(s);
        else
            say("waiter: rs_sem_timedwait: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
    }
    rs_sem_destroy(s);
    rs_client_close(c);
    return e != 0;
}

static int sem_crash(demo_t *d)
{
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_sem_t *s = NULL;
    pid_t p[2] = {-1, -1};
    int fail = 1, held = 0;
    struct timespec dl = deadline_in(WAIT_MS);
    if (!c || rs_sem_init(&s, c, SEM_CRASH_NAME, SEM_PERMITS) != 0 || rs_sem_timedwait(s, &dl) != 0) {
        say("the demo could not take a permit of \"%s\"", SEM_CRASH_NAME);
        goto out;
    }
    held = 1;
    p[0] = spawn(d, child_sem_crash, 0);
    if (p[0] < 0 || wait_flag(&sh->sem_k_held, 1, WAIT_MS) != 0) {
        say("process %d could not take the second permit", (int)p[0]);
        goto out;
    }
    p[1] = spawn(d, child_sem_waiter, 0);
    rs_info_t info = {0};
    double end = now_ms() + WAIT_MS;
    while (now_ms() < end && (rs_inspect(c, "sem", SEM_CRASH_NAME, &info) != 0 || !info.waiters))
        msleep(5);
    if (info.waiters != 1 || info.free != 0) {
        say("expected a full semaphore and one waiter, rs_inspect says %ld free, %u waiting",
            info.free, info.waiters);
        goto out;
    }
    say("\"%s\": the demo and process %d (lease %d ms) hold the 2 permits, process %d waits;",
        SEM_CRASH_NAME, (int)p[0], SEM_CRASH_LEASE_MS, (int)p[1]);
    double t_kill = now_ms();
    kill(p[0], SIGKILL);
    waitpid(p[0], NULL, 0);
    p[0] = -1;
    int bad = reap(&p[1], 1);
    p[1] = -1;
    double after = sh->sem_t_got - t_kill;
    if (bad) {
        say("kill -9 the holder: the waiter did not get its permit");
        goto out;
    }
    say("kill -9 the holder: the waiter got its permit %.0f ms later, when the lease ran out",
        after);
    fail = after > SEM_CRASH_LEASE_MS + 1000;
    if (fail)
        say("that took longer than the lease (%d ms) + 1000 ms", SEM_CRASH_LEASE_MS);
out:
    kill_all(p, 2);
    if (held && rs_sem_post(s) != 0)
        fail = 1;
    int v = -1;
    if (s && (rs_sem_getvalue(s, &v) != 0 || v != SEM_PERMITS)) {
        say("afterwards rs_sem_getvalue: %d of %d permits free  <-- expected all", v, SEM_PERMITS);
        fail = 1;
    } else if (s && !fail) {
        say("once the demo and the waiter posted, rs_sem_getvalue: %d of %d permits free", v,
            SEM_PERMITS);
    }
    rs_sem_destroy(s);
    rs_client_close(c);
    return fail;
}

static int part_sem(demo_t *d)
{
    struct shared *sh = d->sh;
    int calls = SEM_PROCS * SEM_CALLS;
    say("%d processes x %d calls of a slow API (%d ms) through \"%s\" (%d permits):",
        SEM_PROCS, SEM_CALLS, SEM_CALL_MS, SEM_NAME, SEM_PERMITS);
    pid_t p[SEM_PROCS];
    for (int i = 0; i < SEM_PROCS; i++)
        p[i] = spawn(d, child_sem_caller, i);
    int fail = wait_flag(&sh->ready, SEM_PROCS, WAIT_MS) != 0;
    double t0 = now_ms();
    atomic_store(&sh->go, 1);
    int bad = reap(p, SEM_PROCS);
    double took = now_ms() - t0;
    long long mx = get_key(d, "api:inside:max");
    double least = (double)calls * SEM_CALL_MS / SEM_PERMITS;
    say("at most %lld calls at once (INCR/DECR gauge)%s; %d calls took %.2f s (at least "
        "%.2f s with %d at a time)", mx, mx == SEM_PERMITS ? "" : "  <-- expected exactly 2",
        calls, took / 1e3, least / 1e3, SEM_PERMITS);
    if (bad)
        say("%d of %d processes reported an error", bad, SEM_PROCS);
    fail |= bad || mx != SEM_PERMITS || took < least * 0.95;
    fail |= sem_crash(d);
    return fail;
}

/* ----- part: the countdown latch --------------------------------------------------------- */

static int child_latch_coordinator(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_latch_t *l = NULL;
    int e = c ? rs_latch_init(&l, c, LATCH_NAME, LATCH_WORKERS) : -1;
    if (e == 0) {
        atomic_store(&sh->latch_armed, 1);
        sh->latch_t_wait = now_ms();
        struct timespec dl = deadline_in(WAIT_MS);
        e = rs_latch_timedwait(l, &dl);
        sh->latch_t_open = now_ms();
        if (e)
            say("coordinator: rs_latch_timedwait: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
    } else if (c) {
        say("coordinator: rs_latch_init: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    return e != 0;
}

static int child_latch_worker(demo_t *d, int i)
{
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_latch_t *l = NULL;
    int e = c ? rs_latch_init(&l, c, LATCH_NAME, 0) : -1; /* 0: attach only */
    if (e == 0 && wait_flag(&sh->latch_armed, 1, WAIT_MS) != 0)
        e = -1;
    if (e == 0) {
        msleep(LATCH_WORK_MS + i * LATCH_STEP_MS); /* the piece of work */
        sh->latch_t_down[i] = now_ms();
        if ((e = rs_latch_count_down(l)) != 0)
            say("worker: rs_latch_count_down: %s", rs_strerror(e));
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    return e != 0;
}

/* Comes after the opening and calls init with a count again: the latch must stay open. */
static int child_latch_late(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_latch_t *l = NULL;
    sh->latch_late_count = -1;
    sh->latch_late_rc = -1;
    int e = c ? rs_latch_init(&l, c, LATCH_NAME, LATCH_WORKERS) : -1;
    unsigned n = 0;
    if (e == 0 && (e = rs_latch_getcount(l, &n)) == 0) {
        sh->latch_late_count = (long)n;
        struct timespec dl = deadline_in(2000);
        double t0 = now_ms();
        sh->latch_late_rc = rs_latch_timedwait(l, &dl);
        sh->latch_late_ms = now_ms() - t0;
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    return e != 0;
}

static int part_latch(demo_t *d)
{
    struct shared *sh = d->sh;
    pid_t p[1 + LATCH_WORKERS];
    p[0] = spawn(d, child_latch_coordinator, 0);
    for (int i = 0; i < LATCH_WORKERS; i++)
        p[1 + i] = spawn(d, child_latch_worker, i);
    int bad = reap(p, 1 + LATCH_WORKERS);
    double last = 0;
    for (int i = 0; i < LATCH_WORKERS; i++)
        if (sh->latch_t_down[i] > last)
            last = sh->latch_t_down[i];
    double delay = sh->latch_t_open - last;
    say("coordinator %d armed \"%s\" with %d and waits; %d workers work %d..%d ms, then count "
        "down", (int)p[0], LATCH_NAME, LATCH_WORKERS, LATCH_WORKERS, LATCH_WORK_MS,
        LATCH_WORK_MS + (LATCH_WORKERS - 1) * LATCH_STEP_MS);
    int fail = bad != 0;
    if (bad) {
        say("%d of %d processes reported an error", bad, 1 + LATCH_WORKERS);
    } else {
        fail = delay < 0 || delay > 1000;
        say("the latch opened %.1f ms %s the last count-down (the coordinator waited %.0f ms)%s",
            delay < 0 ? -delay : delay, delay < 0 ? "BEFORE" : "after",
            sh->latch_t_open - sh->latch_t_wait, !fail ? "" : "  <-- expected right after it");
    }
    pid_t late = spawn(d, child_latch_late, 0);
    bad = reap(&late, 1);
    int late_ok = !bad && sh->latch_late_count == 0 && sh->latch_late_rc == 0 &&
                  sh->latch_late_ms < 1000;
    if (late_ok)
        say("a late rs_latch_init(%d) by process %d leaves it open: count 0, its wait returns "
            "in %.1f ms", LATCH_WORKERS, (int)late, sh->latch_late_ms);
    else
        say("a late rs_latch_init(%d): count %ld, wait %s after %.0f ms  <-- it should stay "
            "open", LATCH_WORKERS, sh->latch_late_count,
            sh->latch_late_rc < 0 ? "not run" : rs_strerror(sh->latch_late_rc), sh->latch_late_ms);
    return fail || !late_ok;
}

/* ----- part: inspection ------------------------------------------------------------------ */

/* The holder: locks with a 5 s lease, says who it is, unlocks when told. */
static int child_insp_holder(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, INSP_LEASE_MS);
    rs_mutex_t *m = NULL;
    struct timespec dl = deadline_in(WAIT_MS);
    if (!c || rs_mutex_init(&m, c, INSP_NAME) != 0 || rs_mutex_timedlock(m, &dl) != 0)
        return 1;
    snprintf(sh->insp_h_id, sizeof sh->insp_h_id, "%s", rs_client_id(c));
    sh->insp_h_fence = rs_mutex_fence(m);
    atomic_store(&sh->insp_held, 1);
    int err = wait_flag(&sh->insp_release, 1, WAIT_MS) != 0;
    err |= rs_mutex_unlock(m) != 0;
    rs_mutex_destroy(m);
    rs_client_close(c);
    return err;
}

/* The waiter: queues, and once it has the mutex holds it until told. */
static int child_insp_waiter(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_mutex_t *m = NULL;
    if (!c || rs_mutex_init(&m, c, INSP_NAME) != 0)
        return 1;
    snprintf(sh->insp_w_id, sizeof sh->insp_w_id, "%s", rs_client_id(c));
    struct timespec dl = deadline_in(WAIT_MS);
    int err = rs_mutex_timedlock(m, &dl) != 0;
    if (!err) {
        sh->insp_w_fence = rs_mutex_fence(m);
        atomic_store(&sh->insp_got, 1);
        err |= wait_flag(&sh->insp_release2, 1, WAIT_MS) != 0;
        err |= rs_mutex_unlock(m) != 0;
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return err;
}

/* "ABCD...:N" held by the client id? */
static int held_by(const char *holder, const char *id)
{
    size_t n = strlen(id);
    return n > 0 && strncmp(holder, id, n) == 0 && holder[n] == ':';
}

static void insp_show(const rs_info_t *in, int holder_pid)
{
    say("  %s held by %s (process %d), lease left %ld ms, fence %" PRIu64 ", %u waiter(s)",
        in->kind, in->nholders ? in->holders[0] : "nobody", holder_pid, in->remaining_ms,
        in->fence, in->waiters);
}

static int part_inspect(demo_t *d)
{
    struct shared *sh = d->sh;
    pid_t p[2] = {-1, -1};
    rs_client_t *c = open_client(d, 0);
    int fail = 1;
    if (!c)
        return 1;
    p[0] = spawn(d, child_insp_holder, 0);
    if (wait_flag(&sh->insp_held, 1, WAIT_MS) != 0) {
        say("process %d could not take \"%s\"", (int)p[0], INSP_NAME);
        goto out;
    }
    p[1] = spawn(d, child_insp_waiter, 0);
    rs_info_t in = {0};
    double end = now_ms() + WAIT_MS;
    int rc;
    while ((rc = rs_inspect(c, "mutex", INSP_NAME, &in)) == 0 && !in.waiters && now_ms() < end)
        msleep(5);
    if (rc) {
        say("rs_inspect: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        goto out;
    }
    say("process %d holds \"%s\" (lease %d ms), process %d waits; rs_inspect says:", (int)p[0],
        INSP_NAME, INSP_LEASE_MS, (int)p[1]);
    insp_show(&in, (int)p[0]);
    int ok1 = in.exists && in.nholders == 1 && held_by(in.holders[0], sh->insp_h_id) &&
              in.remaining_ms > 0 && in.remaining_ms <= INSP_LEASE_MS &&
              in.fence == sh->insp_h_fence && in.waiters == 1;
    if (!ok1)
        say("  <-- expected holder %s:*, 0 < lease left <= %d, fence %" PRIu64 ", 1 waiter",
            sh->insp_h_id, INSP_LEASE_MS, sh->insp_h_fence);
    atomic_store(&sh->insp_release, 1);
    if (wait_flag(&sh->insp_got, 1, WAIT_MS) != 0) {
        say("the waiter never got the mutex");
        goto out;
    }
    if ((rc = rs_inspect(c, "mutex", INSP_NAME, &in)) != 0) {
        say("rs_inspect: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        goto out;
    }
    say("after process %d unlocks:", (int)p[0]);
    insp_show(&in, (int)p[1]);
    int ok2 = in.nholders == 1 && held_by(in.holders[0], sh->insp_w_id) &&
              in.fence == sh->insp_w_fence && in.fence > sh->insp_h_fence && in.waiters == 0;
    if (!ok2)
        say("  <-- expected holder %s:*, fence %" PRIu64 " (above the first), 0 waiters",
            sh->insp_w_id, sh->insp_w_fence);
    atomic_store(&sh->insp_release2, 1);
    int bad = reap(p, 2);
    p[0] = p[1] = -1;
    if (bad)
        say("%d of 2 processes reported an error", bad);
    fail = !ok1 || !ok2 || bad;
out:
    atomic_store(&sh->insp_release, 1);
    atomic_store(&sh->insp_release2, 1);
    kill_all(p, 2);
    rs_client_close(c);
    return fail;
}

/* ----- the parts, in order ------------------------------------------------------------- */
static const struct part {
    const char *title;
    int (*run)(demo_t *);
} parts[] = {
    {"rs_mutex_t: a shared counter without a lock", part_without_lock},
    {"rs_mutex_t: the same counter under a distributed mutex", part_with_mutex},
    {"rs_mutex_t: trylock never waits", part_trylock},
    {"rs_mutex_t: a crashed holder does not block others forever", part_crash},
    {"rs_rmutex_t: nested helpers lock the same recursive mutex", part_rmutex},
    {"rs_rwlock_t: readers share a cache, one writer rebuilds it", part_rwlock},
    {"rs_sem_t: at most 2 calls of a slow API at once, fleet-wide", part_sem},
    {"rs_latch_t: a coordinator waits for a batch of workers", part_latch},
    {"rs_inspect: who holds a mutex, and who waits", part_inspect},
};

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    demo_t d;
    memset(&d, 0, sizeof d);
    printf("redisync %s demo\n", rs_version());
    if (ts_server_start(&d.srv, NULL) != 0) {
        fprintf(stderr, "demo: cannot start a redis-server (is redis-server on PATH?)\n");
        return 1;
    }
    ts_unique_prefix(d.prefix, sizeof d.prefix);
    d.sh = mmap(NULL, sizeof *d.sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (d.sh == MAP_FAILED) {
        fprintf(stderr, "demo: mmap: %s\n", strerror(errno));
        ts_server_stop(&d.srv);
        return 1;
    }
    printf("throwaway redis-server (pid %d) at %s\n", (int)d.srv.pid, d.srv.url);

    double t0 = now_ms();
    int failed = 0;
    size_t nparts = sizeof parts / sizeof parts[0];
    for (size_t i = 0; i < nparts; i++) {
        printf("\n%zu. %s\n", i + 1, parts[i].title);
        fflush(stdout);
        memset(d.sh, 0, sizeof *d.sh);
        if (parts[i].run(&d) != 0) {
            printf("   -> FAILED\n");
            failed++;
            char pong[16];
            if (!ts_cmd_str(&d.srv, pong, sizeof pong, "PING") || strcmp(pong, "PONG") != 0) {
                printf("\nthe redis-server does not answer any more: the other parts are skipped\n");
                break;
            }
        }
    }
    ts_server_stop(&d.srv);
    printf("\n%s (%.1f s); server stopped\n",
           failed ? "demo FAILED" : "all parts behaved as shown", (now_ms() - t0) / 1e3);
    return failed ? 1 : 0;
}
