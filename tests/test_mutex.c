/*
 * test_mutex.c - Criterion tests of the distributed mutex (rs_mutex_*), from the public API
 * down to its Lua script (called directly with EVAL in mutex/script_*).
 *
 * Every test starts its own redis-server on a free port and stops it. Cross-process tests
 * fork workers; each child opens its own client after fork() and reports through its exit
 * status (or the test's redis). Criterion assertions are only made in the test's main
 * thread; helper threads and children record results for it.
 *
 * Timing bounds are deliberately generous: the suite runs as -j6 on small, noisy machines.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "scripts.h"
#include "test_assert.h"

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

/* a - b in ms, on CLOCK_REALTIME timespecs. */
static long long ts_diff_ms(const struct timespec *a, const struct timespec *b)
{
    return ((long long)a->tv_sec - b->tv_sec) * 1000 + (a->tv_nsec - b->tv_nsec) / 1000000;
}

static rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}

static long long zcard_q(const ts_server_t *s, const char *name)
{
    return tu_zcard_q(s, "mutex", name);
}

static int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
{
    return tu_wait_zcard(s, "mutex", name, n, timeout_ms);
}

/* ---- a thread that locks ------------------------------------------------------------- */
typedef struct locker {
    rs_mutex_t *m;
    long hold_ms;        /* after locking, hold this long ... */
    int wait_release;    /* ... then, if set, wait until release is set before unlocking */
    atomic_int *order;   /* if set: a grant-order counter shared by several lockers */
    /* results */
    int rc;
    int unlock_rc;
    uint64_t fence;
    int pos;             /* value of *order taken at the grant */
    long long t_start, t_locked;
    char err[256];
    atomic_int locked;   /* lock returned */
    atomic_int release;
    atomic_int done;
    pthread_t th;
} locker_t;

static void *locker_main(void *arg)
{
    locker_t *L = arg;
    L->t_start = tu_mono_ms();
    L->rc = rs_mutex_lock(L->m);
    L->t_locked = tu_mono_ms();
    if (L->rc == 0) {
        L->fence = rs_mutex_fence(L->m);
        if (L->order)
            L->pos = atomic_fetch_add(L->order, 1);
    } else {
        snprintf(L->err, sizeof L->err, "%s", rs_client_lasterror(NULL));
    }
    atomic_store(&L->locked, 1);
    if (L->rc == 0) {
        if (L->hold_ms > 0)
            tu_sleep_ms(L->hold_ms);
        while (L->wait_release && !atomic_load(&L->release))
            tu_sleep_ms(5);
        L->unlock_rc = rs_mutex_unlock(L->m);
    }
    atomic_store(&L->done, 1);
    return NULL;
}

static void locker_start(locker_t *L)
{
    tu_thread_start(&L->th, locker_main, L);
}

/* Joins L if it finishes within timeout_ms; 1 if joined. */
static int locker_join(locker_t *L, long timeout_ms)
{
    return tu_thread_join(L->th, &L->done, timeout_ms);
}

/* ---- a thread that runs one call ---------------------------------------------------- */
typedef struct call1 {
    rs_mutex_t *m;
    int op; /* 0 trylock, 1 unlock, 2 lock */
    int rc;
} call1_t;

static void *call1_main(void *arg)
{
    call1_t *k = arg;
    k->rc = k->op == 0 ? rs_mutex_trylock(k->m) : k->op == 1 ? rs_mutex_unlock(k->m)
                                                             : rs_mutex_lock(k->m);
    return NULL;
}

static int in_thread(rs_mutex_t *m, int op)
{
    call1_t k = {.m = m, .op = op, .rc = -1};
    tu_thread_run(call1_main, &k);
    return k.rc;
}

/* ------------------------------------------------------------------------------------- */
/* 1. Basics                                                                              */

Test(mutex, basics, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "b");
    rs_mutex_t *m2 = new_mutex(c2, "b");

    cr_expect_eq(rs_mutex_fence(m), 0, "fence without a hold");
    cr_expect_eq(rs_mutex_remaining(m), 0, "remaining without a hold");
    cr_expect_eq(rs_mutex_unlock(m), EPERM, "unlock without a hold");

    int rc = rs_mutex_lock(m);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    uint64_t f = rs_mutex_fence(m);
    cr_expect_neq(f, 0, "fence while held");
    long rem = rs_mutex_remaining(m);
    cr_expect(rem > 0 && rem <= 1000, "remaining while held: %ld", rem);

    cr_expect_eq(rs_mutex_lock(m), EDEADLK, "second lock by the holder");
    cr_expect_eq(rs_mutex_trylock(m), EBUSY, "trylock by the holder");
    cr_expect_eq(in_thread(m, 0), EBUSY, "trylock by another thread of the client");
    cr_expect_eq(rs_mutex_trylock(m2), EBUSY, "trylock by another client");
    cr_expect_eq(in_thread(m, 1), EPERM, "unlock by a thread that does not hold it");
    cr_expect_eq(rs_mutex_unlock(m2), EPERM, "unlock by another client");
    cr_expect_eq(rs_mutex_destroy(m), EBUSY, "destroy while held");
    cr_expect_eq(rs_mutex_fence(m), f, "the failed calls left the hold alone");

    /* timedlock on the held mutex: ETIMEDOUT after the deadline, nothing left queued */
    struct timespec dl = tu_abs_in(700);
    rc = rs_mutex_timedlock(m2, &dl);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cr_expect_eq(rc, ETIMEDOUT, "timedlock on a held mutex: %d %s", rc, rs_client_lasterror(c2));
    long long late = ts_diff_ms(&now, &dl);
    cr_expect(late >= 0 && late < 3000, "timedlock returned %lld ms after its deadline", late);
    cr_expect_eq(zcard_q(&s, "b"), 0, "the timed-out waiter left the queue");

    /* a past deadline on a held mutex: at once, never queued */
    dl = tu_abs_in(-1000);
    long long t0 = tu_mono_ms();
    rc = rs_mutex_timedlock(m2, &dl);
    long long el = tu_mono_ms() - t0;
    cr_expect_eq(rc, ETIMEDOUT, "past deadline on a held mutex: %d", rc);
    cr_expect(el < 1000, "past deadline took %lld ms", el);
    cr_expect_eq(zcard_q(&s, "b"), 0, "a past deadline must not queue");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{b}:mutex:qi"), 0, "no queue entry info either");

    rc = rs_mutex_unlock(m);
    cr_expect_eq(rc, 0, "unlock: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), EPERM, "unlock twice");
    cr_expect_eq(rs_mutex_fence(m), 0, "fence after unlock");
    cr_expect_eq(rs_mutex_remaining(m), 0, "remaining after unlock");

    /* a past deadline on a free mutex takes it */
    dl = tu_abs_in(-1000);
    rc = rs_mutex_timedlock(m2, &dl);
    cr_expect_eq(rc, 0, "past deadline on a free mutex: %d %s", rc, rs_client_lasterror(c2));
    cr_expect_gt(rs_mutex_fence(m2), f, "the next hold has a larger token");
    cr_expect_eq(rs_mutex_unlock(m2), 0);

    /* bad deadlines */
    dl = tu_abs_in(1000);
    dl.tv_nsec = 1000000000L;
    cr_expect_eq(rs_mutex_timedlock(m, &dl), EINVAL, "tv_nsec out of range");
    cr_expect_eq(rs_mutex_timedlock(m, NULL), EINVAL, "NULL deadline");

    cr_expect_eq(rs_mutex_setlease(m, 29), EINVAL, "lease below 30 ms");
    cr_expect_eq(rs_mutex_setlease(m, -1), EINVAL, "negative lease");
    cr_expect_eq(rs_mutex_setlease(m, 0), 0, "back to the client's lease");

    cr_expect_eq(rs_mutex_destroy(m), 0, "destroy after unlock");
    cr_expect_eq(rs_mutex_destroy(m2), 0);
    cr_expect_eq(rs_mutex_destroy(NULL), 0);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 2. Fencing tokens                                                                      */

typedef struct fence_child {
    const ts_server_t *s;
    int fd;
} fence_child_t;

/* Locks "fz" once with its own client and writes the token to fd. */
static int fence_child_main(void *arg)
{
    fence_child_t *fc = arg;
    rs_client_t *c = tu_open_client_ex(fc->s, 1000, 5000, NULL);
    if (!c)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "fz") != 0)
        return 11;
    if (rs_mutex_lock(m) != 0)
        return 12;
    uint64_t f = rs_mutex_fence(m);
    if (rs_mutex_unlock(m) != 0)
        return 13;
    if (write(fc->fd, &f, sizeof f) != (ssize_t)sizeof f)
        return 14;
    rs_mutex_destroy(m);
    rs_client_close(c);
    return 0;
}

static uint64_t lock_fence_unlock(rs_client_t *c, rs_mutex_t *m)
{
    int rc = rs_mutex_lock(m);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    uint64_t f = rs_mutex_fence(m);
    rc = rs_mutex_unlock(m);
    cr_assert_eq(rc, 0, "unlock: %d %s", rc, rs_client_lasterror(c));
    return f;
}

Test(mutex, fencing_tokens_rise, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c[3];
    rs_mutex_t *m[3];
    for (int i = 0; i < 3; i++) {
        c[i] = tu_open_client(&s, 1000, 5000, NULL);
        m[i] = new_mutex(c[i], "fz");
    }
    int p[2];
    cr_assert_eq(pipe(p), 0);
    fence_child_t fc = {&s, p[1]};

    uint64_t last = 0;
    for (int round = 0; round < 12; round++) {
        uint64_t f;
        if (round % 4 == 3) {
            pid_t pid = tu_spawn(fence_child_main, &fc);
            tu_assert_exit0(pid, tu_reap(pid, 20000), "fence child");
            cr_assert(tu_read_full(p[0], &f, sizeof f, 1000), "no token from the child");
        } else {
            f = lock_fence_unlock(c[round % 3], m[round % 3]);
        }
        cr_assert_gt(f, last, "round %d: token %llu not above %llu", round,
                     (unsigned long long)f, (unsigned long long)last);
        last = f;
    }

    /* the counter is lost: the server-clock floor keeps tokens rising */
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{fz}:mutex:fence"), 1, "the fence counter key exists");
    uint64_t f = lock_fence_unlock(c[0], m[0]);
    cr_expect_gt(f, last, "after DEL of the counter: %llu not above %llu", (unsigned long long)f,
                 (unsigned long long)last);
    last = f;
    f = lock_fence_unlock(c[1], m[1]);
    cr_expect_gt(f, last, "second hold after DEL");
    last = f;

    /* a restart without persistence loses everything */
    ts_server_kill(&s);
    cr_assert_eq(ts_server_restart(&s), 0, "restart");
    cr_assert_eq(ts_cmd_int(&s, "DBSIZE"), 0, "the restarted server starts empty");
    for (int i = 0; i < 3; i++) {
        f = lock_fence_unlock(c[i], m[i]);
        cr_expect_gt(f, last, "after restart (client %d): %llu not above %llu", i,
                     (unsigned long long)f, (unsigned long long)last);
        last = f;
    }

    close(p[0]);
    close(p[1]);
    for (int i = 0; i < 3; i++) {
        rs_mutex_destroy(m[i]);
        rs_client_close(c[i]);
    }
    ts_server_stop(&s);
}

/* The server's clock in microseconds. */
static long long server_us(const ts_server_t *s)
{
    return ts_cmd_int(s, "EVAL %s 0", "local t = redis.call('TIME') return t[1] * 1000000 + t[2]");
}

/* SET key value PX ms, then one lock + unlock; returns its token. */
static uint64_t grant_over(const ts_server_t *s, rs_client_t *c, rs_mutex_t *m, const char *key,
                           const char *value, long ms)
{
    char buf[64];
    cr_assert_not_null(ts_cmd_str(s, buf, sizeof buf, "SET %s %s PX %ld", key, value, ms));
    return lock_fence_unlock(c, m);
}

/* The fencing counter is stored with SET KEEPTTL, which keeps its TTL; the 30-day TTL is set
 * again on the first grant of a day and on every grant while the counter is ahead of the
 * clock (primitives/core.lua, next_fence); a value that is not a number is replaced. */
Test(mutex, fence_counter_ttl, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 5000, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "ft"), 0);
    const char *key = "rs:{ft}:mutex:fence";
    const long long day_ms = 86400000LL, short_ms = 600000;
    char v[64], got[64];

    /* behind the clock, the same day: raised to the clock, its TTL kept */
    long long now = server_us(&s);
    snprintf(v, sizeof v, "%lld", now - 1000);
    uint64_t f = grant_over(&s, c, m, key, v, short_ms);
    cr_expect_geq((long long)f, now, "token %llu below the clock %lld", (unsigned long long)f, now);
    long long ttl = ts_cmd_int(&s, "PTTL %s", key);
    cr_expect(ttl > 0 && ttl <= short_ms, "the same day's grant set the TTL again: %lld", ttl);
    cr_expect_eq(strtoull(ts_cmd_str(&s, got, sizeof got, "GET %s", key), NULL, 10), f);

    /* yesterday's counter: the day's first grant sets the 30-day TTL again */
    now = server_us(&s);
    snprintf(v, sizeof v, "%lld", now - day_ms * 1000);
    f = grant_over(&s, c, m, key, v, short_ms);
    cr_expect_geq((long long)f, now);
    cr_expect_gt(ts_cmd_int(&s, "PTTL %s", key), 29 * day_ms, "TTL not set again on a new day");

    /* ahead of the clock by an hour: counter + 1, and the TTL set again */
    long long ahead = server_us(&s) + 3600LL * 1000000;
    snprintf(v, sizeof v, "%lld", ahead);
    f = grant_over(&s, c, m, key, v, short_ms);
    cr_expect_eq((long long)f, ahead + 1, "token %llu, counter was %lld", (unsigned long long)f,
                 ahead);
    cr_expect_gt(ts_cmd_int(&s, "PTTL %s", key), 29 * day_ms, "TTL not set again when ahead");

    /* values that are not a counter of today: replaced from the clock, with the TTL */
    const char *odd[] = {"0123", "abc", "-5", "1.5", "''"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        now = server_us(&s);
        f = grant_over(&s, c, m, key, odd[i], short_ms);
        cr_expect_geq((long long)f, now, "counter '%s': token %llu below the clock", odd[i],
                      (unsigned long long)f);
        cr_expect_eq(strtoull(ts_cmd_str(&s, got, sizeof got, "GET %s", key), NULL, 10), f,
                     "counter '%s' not replaced", odd[i]);
        cr_expect_gt(ts_cmd_int(&s, "PTTL %s", key), 29 * day_ms, "counter '%s': TTL", odd[i]);
    }

    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 3. Cross-process exclusion                                                             */

#define XP_PROCS 6
#define XP_ITERS 40

typedef struct xp_arg {
    const ts_server_t *s;
    int start_fd; /* read end of the start barrier */
    int start_wfd; /* its write end, closed in the child so that EOF means "go" */
} xp_arg_t;

static int xp_child_main(void *arg)
{
    xp_arg_t *a = arg;
    char b;
    close(a->start_wfd);
    ssize_t rd = read(a->start_fd, &b, 1); /* EOF when the parent closes the write end */
    (void)rd;
    rs_client_t *c = tu_open_client_ex(a->s, 10000, 5000, NULL);
    if (!c)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "xp") != 0)
        return 11;
    redisContext *k = ts_connect(a->s);
    if (!k)
        return 12;
    for (int i = 0; i < XP_ITERS; i++) {
        int rc = rs_mutex_lock(m);
        if (rc != 0) {
            fprintf(stderr, "xp child: lock %d: %s\n", rc, rs_client_lasterror(c));
            return 20;
        }
        uint64_t f = rs_mutex_fence(m);
        if (f == 0)
            return 21;
        redisReply *r = redisCommand(k, "GET xp:counter");
        if (!r)
            return 22;
        long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
        if (i % 8 == 0)
            tu_sleep_ms(1); /* widen the window a lost update would need */
        r = redisCommand(k, "SET xp:counter %lld", v + 1);
        if (!r)
            return 23;
        freeReplyObject(r);
        r = redisCommand(k, "RPUSH xp:tokens %llu", (unsigned long long)f);
        if (!r)
            return 24;
        freeReplyObject(r);
        rc = rs_mutex_unlock(m);
        if (rc != 0) {
            fprintf(stderr, "xp child: unlock %d: %s\n", rc, rs_client_lasterror(c));
            return 30;
        }
    }
    redisFree(k);
    rs_mutex_destroy(m);
    rs_client_close(c);
    return 0;
}

Test(mutex, cross_process_exclusion, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int barrier[2];
    cr_assert_eq(pipe(barrier), 0);
    xp_arg_t a = {&s, barrier[0], barrier[1]};
    pid_t pids[XP_PROCS];
    for (int i = 0; i < XP_PROCS; i++)
        pids[i] = tu_spawn(xp_child_main, &a);
    close(barrier[0]);
    close(barrier[1]); /* go */
    for (int i = 0; i < XP_PROCS; i++)
        tu_assert_exit0(pids[i], tu_reap(pids[i], 50000), "exclusion worker");

    cr_expect_eq(ts_cmd_int(&s, "GET xp:counter"), XP_PROCS * XP_ITERS, "lost updates");
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    redisReply *r = redisCommand(k, "LRANGE xp:tokens 0 -1");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    cr_expect_eq(r->elements, (size_t)(XP_PROCS * XP_ITERS), "one token per section");
    unsigned long long prev = 0;
    for (size_t i = 0; i < r->elements; i++) {
        unsigned long long t = strtoull(r->element[i]->str, NULL, 10);
        cr_expect_gt(t, prev, "token #%zu (%llu) not above the previous (%llu)", i, t, prev);
        prev = t;
    }
    freeReplyObject(r);
    redisFree(k);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 4. Renewal                                                                             */

Test(mutex, renewal_keeps_the_hold, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 300, 2000, &lc);
    rs_client_t *c2 = tu_open_client(&s, 300, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "r");
    rs_mutex_t *m2 = new_mutex(c2, "r");
    int rc = rs_mutex_lock(m);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    uint64_t f = rs_mutex_fence(m);

    long long end = tu_mono_ms() + 2000;
    int tries = 0;
    while (tu_mono_ms() < end) {
        rc = rs_mutex_trylock(m2);
        cr_expect_eq(rc, EBUSY, "trylock by another client during the hold: %d", rc);
        if (rc == 0)
            rs_mutex_unlock(m2);
        tries++;
        tu_sleep_ms(100);
    }
    cr_expect_geq(tries, 5);
    cr_expect_gt(rs_mutex_remaining(m), 0, "the hold is still confirmed");
    cr_expect_eq(rs_mutex_fence(m), f);
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{r}:mutex"), 0, "the lock key is alive in Redis");
    rc = rs_mutex_unlock(m);
    cr_expect_eq(rc, 0, "unlock after 2 s on a 300 ms lease: %d %s", rc, rs_client_lasterror(c));
    tu_sleep_ms(100);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 5. A holder killed with SIGKILL                                                        */

typedef struct kill_child {
    const ts_server_t *s;
    int fd;
    long lease;
    const char *name;
} kill_child_t;

static int kill9_child_main(void *arg)
{
    kill_child_t *k = arg;
    rs_client_t *c = tu_open_client_ex(k->s, k->lease, 2000, NULL);
    if (!c)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, k->name) != 0)
        return 11;
    if (rs_mutex_lock(m) != 0)
        return 12;
    uint64_t f = rs_mutex_fence(m);
    if (write(k->fd, &f, sizeof f) != (ssize_t)sizeof f)
        return 13;
    tu_sleep_ms(100);
    raise(SIGKILL);
    return 14;
}

Test(mutex, holder_killed, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    kill_child_t kc = {&s, p[1], 500, "k9"};
    pid_t pid = tu_spawn(kill9_child_main, &kc);
    uint64_t cf = 0;
    cr_assert(tu_read_full(p[0], &cf, sizeof cf, 10000), "the child did not lock");

    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "k9");
    long long t0 = tu_mono_ms();
    int rc = rs_mutex_lock(m);
    long long el = tu_mono_ms() - t0;
    cr_assert_eq(rc, 0, "lock after the holder died: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(el, 100 + 500 + 2000, "took %lld ms (lease 500)", el);
    cr_expect_gt(rs_mutex_fence(m), cf, "token above the dead holder's");

    int st = tu_reap(pid, 5000);
    cr_expect(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status 0x%x", st);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    close(p[0]);
    close(p[1]);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 6. A holder stopped (SIGSTOP) past its lease                                           */

typedef struct stop_child {
    const ts_server_t *s;
    int sync_fd;
    int lost_fd;
} stop_child_t;

static int sigstop_child_main(void *arg)
{
    stop_child_t *k = arg;
    tu_lost_t lc = {0};
    lc.fd = k->lost_fd;
    rs_client_t *c = tu_open_client_ex(k->s, 400, 2000, &lc);
    if (!c)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "st") != 0)
        return 11;
    if (rs_mutex_lock(m) != 0)
        return 12;
    uint64_t f = rs_mutex_fence(m);
    if (write(k->sync_fd, &f, sizeof f) != (ssize_t)sizeof f)
        return 13;
    raise(SIGSTOP);
    /* continued, long after the lease ran out */
    int rc = rs_mutex_unlock(m);
    if (rc != RS_ELOST) {
        fprintf(stderr, "sigstop child: unlock returned %d (%s), want RS_ELOST\n", rc,
                rs_client_lasterror(c));
        return 20;
    }
    rc = rs_mutex_unlock(m);
    if (rc != EPERM) {
        fprintf(stderr, "sigstop child: second unlock returned %d, want EPERM\n", rc);
        return 21;
    }
    if (rs_mutex_fence(m) != 0 || rs_mutex_remaining(m) != 0)
        return 22;
    /* on_lost is delivered from the watchdog thread: give it time, then check it stays 1 */
    if (!tu_wait_atomic(&lc.n, 1, 3000))
        return 30;
    tu_sleep_ms(300);
    rs_mutex_destroy(m);
    rs_client_close(c);
    int n = atomic_load(&lc.n);
    return n == 1 ? 0 : 30 + (n > 9 ? 9 : n);
}

Test(mutex, holder_stopped_past_lease, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int sp[2], lp[2];
    cr_assert_eq(pipe(sp), 0);
    cr_assert_eq(pipe(lp), 0);
    stop_child_t sc = {&s, sp[1], lp[1]};
    pid_t pid = tu_spawn(sigstop_child_main, &sc);
    close(sp[1]);
    close(lp[1]);
    uint64_t cf = 0;
    cr_assert(tu_read_full(sp[0], &cf, sizeof cf, 10000), "the child did not lock");

    /* wait until it has stopped itself */
    int st;
    long long end = tu_mono_ms() + 10000;
    pid_t w;
    while ((w = waitpid(pid, &st, WUNTRACED | WNOHANG)) == 0 && tu_mono_ms() < end)
        tu_sleep_ms(5);
    cr_assert(w == pid && WIFSTOPPED(st), "the child did not stop (0x%x)", st);
    tu_sleep_ms(1500);

    rs_client_t *c = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "st");
    int rc = rs_mutex_trylock(m);
    cr_assert_eq(rc, 0, "taking the mutex after the stopped holder's lease: %d %s", rc,
                 rs_client_lasterror(c));
    uint64_t pf = rs_mutex_fence(m);
    cr_expect_gt(pf, cf, "token above the stopped holder's");

    kill(pid, SIGCONT);
    st = tu_reap(pid, 15000);
    tu_assert_exit0(pid, st, "stopped holder (20: unlock not RS_ELOST, 21: second unlock not "
                             "EPERM, 30+n: on_lost called n times)");
    char buf[16];
    ssize_t n = read(lp[0], buf, sizeof buf); /* the child is gone: no more writers */
    cr_expect_eq(n, 1, "on_lost calls seen through the pipe: %zd", n);

    /* the child's unlock left our hold alone */
    cr_expect_eq(rs_mutex_fence(m), pf);
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{st}:mutex"), 0, "our lock key is still there");
    rc = rs_mutex_unlock(m);
    cr_expect_eq(rc, 0, "the new holder's unlock: %d %s", rc, rs_client_lasterror(c));
    close(sp[0]);
    close(lp[0]);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 7. Redis restarts while a thread waits                                                 */

Test(mutex, redis_restart_while_waiting, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lca = {0}, lcb = {0};
    rs_client_t *ca = tu_open_client(&s, 1000, 5000, &lca);
    rs_client_t *cb = tu_open_client(&s, 1000, 5000, &lcb);
    rs_mutex_t *ma = new_mutex(ca, "rr");
    rs_mutex_t *mb = new_mutex(cb, "rr");
    int rc = rs_mutex_lock(ma);
    cr_assert_eq(rc, 0, "A lock: %d %s", rc, rs_client_lasterror(ca));

    locker_t B = {.m = mb, .wait_release = 1};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "rr", 1, 5000), "B did not queue");
    tu_sleep_ms(100);
    cr_assert_eq(atomic_load(&B.locked), 0, "B got the mutex while A held it");

    ts_server_kill(&s);
    tu_sleep_ms(300);
    cr_assert_eq(ts_server_restart(&s), 0, "restart");
    long long t_up = tu_mono_ms();

    cr_assert(tu_wait_atomic(&B.locked, 1, 8000), "B did not return within 8 s of the restart");
    long long el = B.t_locked - t_up;
    cr_expect_eq(B.rc, 0, "B's lock after the restart: %d %s", B.rc, B.err);
    cr_expect_lt(el, 4000, "B acquired %lld ms after the restart", el);
    cr_expect_neq(B.fence, 0);

    /* A's hold is gone with the data: its watchdog reports it, its unlock says so */
    cr_expect(tu_wait_atomic(&lca.n, 1, 5000), "A's on_lost was not called");
    rc = rs_mutex_unlock(ma);
    cr_expect_eq(rc, RS_ELOST, "A's unlock: %d %s", rc, rs_client_lasterror(ca));
    cr_expect_eq(rs_mutex_unlock(ma), EPERM, "A's second unlock");

    atomic_store(&B.release, 1);
    cr_assert(locker_join(&B, 5000), "B did not finish");
    cr_expect_eq(B.unlock_rc, 0, "B's unlock: %d", B.unlock_rc);
    cr_expect_eq(atomic_load(&lca.n), 1, "A's on_lost calls");
    cr_expect_eq(atomic_load(&lcb.n), 0, "B's on_lost calls");
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 8. SCRIPT FLUSH between calls                                                          */

Test(mutex, script_flush, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "sf");
    rs_mutex_t *m2 = new_mutex(c2, "sf");
    for (int i = 0; i < 3; i++) {
        char buf[64];
        cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH"));
        int rc = rs_mutex_lock(m);
        cr_assert_eq(rc, 0, "lock after SCRIPT FLUSH: %d %s", rc, rs_client_lasterror(c));
        cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH"));
        cr_expect_eq(rs_mutex_trylock(m2), EBUSY, "trylock after SCRIPT FLUSH");
        cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH"));
        rc = rs_mutex_unlock(m);
        cr_expect_eq(rc, 0, "unlock after SCRIPT FLUSH: %d %s", rc, rs_client_lasterror(c));
    }
    /* the watchdog's renewal path too: flush while held across several renewals */
    cr_assert_eq(rs_mutex_setlease(m, 300), 0);
    cr_assert_eq(rs_mutex_lock(m), 0);
    for (int i = 0; i < 6; i++) {
        char buf[64];
        ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH");
        tu_sleep_ms(100);
    }
    cr_expect_gt(rs_mutex_remaining(m), 0, "renewals went on after SCRIPT FLUSH");
    cr_expect_eq(rs_mutex_unlock(m), 0, "unlock after renewals across SCRIPT FLUSH");
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 9. Waiters do not poll                                                                 */

Test(mutex, waiters_do_not_poll, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 3000, 2000, NULL);
    rs_client_t *cb = tu_open_client(&s, 3000, 2000, NULL);
    rs_mutex_t *ma = new_mutex(ca, "np");
    rs_mutex_t *mb = new_mutex(cb, "np");
    int rc = rs_mutex_lock(ma);
    cr_assert_eq(rc, 0, "A lock: %d", rc);

    locker_t B = {.m = mb, .wait_release = 1};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "np", 1, 5000), "B did not queue");
    tu_sleep_ms(300);
    long long before = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_assert_geq(before, 1);
    tu_sleep_ms(2500);
    long long after = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_expect_leq(after - before, 10, "%lld EVALSHA calls in 2.5 s with one waiter",
                  after - before);
    cr_expect_eq(atomic_load(&B.locked), 0, "B got the mutex while A held it");

    long long t0 = tu_mono_ms();
    rc = rs_mutex_unlock(ma);
    cr_expect_eq(rc, 0, "A unlock: %d", rc);
    cr_assert(tu_wait_atomic(&B.locked, 1, 5000), "B was not woken");
    cr_expect_eq(B.rc, 0, "B lock: %d %s", B.rc, B.err);
    cr_expect_lt(B.t_locked - t0, 1000, "B acquired %lld ms after the unlock", B.t_locked - t0);
    atomic_store(&B.release, 1);
    cr_assert(locker_join(&B, 5000));
    cr_expect_eq(B.unlock_rc, 0);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10. Handoff in FIFO order                                                              */

Test(mutex, fifo_handoff, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 2000, 2000, NULL);
    rs_mutex_t *ma = new_mutex(ca, "ff");
    cr_assert_eq(rs_mutex_lock(ma), 0);
    uint64_t fa = rs_mutex_fence(ma);

    enum { NW = 3 };
    rs_client_t *cw[NW];
    rs_mutex_t *mw[NW];
    locker_t W[NW];
    atomic_int order = 0;
    memset(W, 0, sizeof W);
    for (int i = 0; i < NW; i++) {
        cw[i] = tu_open_client(&s, 2000, 2000, NULL);
        mw[i] = new_mutex(cw[i], "ff");
        W[i].m = mw[i];
        W[i].order = &order;
        W[i].hold_ms = 50;
        locker_start(&W[i]);
        cr_assert(wait_zcard(&s, "ff", i + 1, 5000), "waiter %d did not queue", i);
        tu_sleep_ms(200);
    }
    cr_assert_eq(atomic_load(&order), 0, "a waiter got the mutex while A held it");
    cr_assert_eq(rs_mutex_unlock(ma), 0);
    for (int i = 0; i < NW; i++)
        cr_assert(locker_join(&W[i], 10000), "waiter %d did not finish", i);
    uint64_t prev = fa;
    for (int i = 0; i < NW; i++) {
        cr_expect_eq(W[i].rc, 0, "waiter %d: lock %d %s", i, W[i].rc, W[i].err);
        cr_expect_eq(W[i].pos, i, "waiter %d (queued %d-th) was served %d-th", i, i, W[i].pos);
        cr_expect_eq(W[i].unlock_rc, 0, "waiter %d: unlock %d", i, W[i].unlock_rc);
        cr_expect_gt(W[i].fence, prev, "waiter %d token", i);
        prev = W[i].fence;
    }
    cr_expect_eq(zcard_q(&s, "ff"), 0);
    for (int i = 0; i < NW; i++) {
        rs_mutex_destroy(mw[i]);
        rs_client_close(cw[i]);
    }
    rs_mutex_destroy(ma);
    rs_client_close(ca);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 11. Many threads of one client                                                         */

#define TS_THREADS 8
#define TS_ITERS 50

typedef struct ts_shared {
    rs_mutex_t *shared;       /* NULL: each thread inits its own handle */
    rs_client_t *c;
    volatile int counter;
    atomic_int errors;
    atomic_int in_section;
    atomic_int overlaps;
} ts_shared_t;

static void *ts_thread_main(void *arg)
{
    ts_shared_t *sh = arg;
    rs_mutex_t *m = sh->shared;
    if (!m && rs_mutex_init(&m, sh->c, "th") != 0) {
        atomic_fetch_add(&sh->errors, 1);
        return NULL;
    }
    for (int i = 0; i < TS_ITERS; i++) {
        int rc = rs_mutex_lock(m);
        if (rc != 0) {
            fprintf(stderr, "thread lock: %d %s\n", rc, rs_client_lasterror(NULL));
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        if (atomic_fetch_add(&sh->in_section, 1) != 0)
            atomic_fetch_add(&sh->overlaps, 1);
        int v = sh->counter;
        sched_yield();
        sh->counter = v + 1;
        atomic_fetch_sub(&sh->in_section, 1);
        rc = rs_mutex_unlock(m);
        if (rc != 0) {
            fprintf(stderr, "thread unlock: %d %s\n", rc, rs_client_lasterror(NULL));
            atomic_fetch_add(&sh->errors, 1);
        }
    }
    if (!sh->shared && rs_mutex_destroy(m) != 0)
        atomic_fetch_add(&sh->errors, 1);
    return NULL;
}

static void run_threads(int shared_handle)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 5000, NULL);
    ts_shared_t sh;
    memset(&sh, 0, sizeof sh);
    sh.c = c;
    if (shared_handle)
        sh.shared = new_mutex(c, "th");
    pthread_t th[TS_THREADS];
    for (int i = 0; i < TS_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, ts_thread_main, &sh), 0);
    for (int i = 0; i < TS_THREADS; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(atomic_load(&sh.errors), 0, "errors");
    cr_expect_eq(atomic_load(&sh.overlaps), 0, "overlapping sections");
    cr_expect_eq(sh.counter, TS_THREADS * TS_ITERS, "lost increments");
    cr_expect_eq(zcard_q(&s, "th"), 0, "queue left behind");
    if (sh.shared)
        cr_expect_eq(rs_mutex_destroy(sh.shared), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(mutex, threads_own_handles, .timeout = 60)
{
    run_threads(0);
}

Test(mutex, threads_shared_handle, .timeout = 60)
{
    run_threads(1);
}

/* ------------------------------------------------------------------------------------- */
/* 12. Server errors: foreign keys, ACL, OOM                                              */

Test(mutex, error_wrongtype, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    char buf[128];

    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SET rs:{w}:mutex foreign"));
    rs_mutex_t *m = new_mutex(c, "w");
    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ESERVER, "lock over a foreign string key: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_trylock(m), RS_ESERVER);
    cr_expect_eq(rs_mutex_unlock(m), EPERM, "nothing is held");
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "GET rs:{w}:mutex"), "foreign");
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w}:mutex"), -1, "the foreign key got a TTL");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w}:mutex:fence rs:{w}:mutex:q rs:{w}:mutex:qi"), 0,
                 "the failed lock wrote keys");

    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{w2}:mutex:q a b c"), 3);
    rs_mutex_t *m2 = new_mutex(c, "w2");
    rc = rs_mutex_lock(m2);
    cr_expect_eq(rc, RS_ESERVER, "lock over a foreign list key: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "LLEN rs:{w2}:mutex:q"), 3);
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "LINDEX rs:{w2}:mutex:q 0"), "a");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w2}:mutex rs:{w2}:mutex:fence"), 0,
                 "the failed lock wrote keys");

    /* a foreign fencing counter: the grant's SET ... GET is its first write and fails
     * without writing (core.lua next_fence) */
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{w3}:mutex:fence x"), 1);
    rs_mutex_t *m4 = new_mutex(c, "w3");
    rc = rs_mutex_lock(m4);
    cr_expect_eq(rc, RS_ESERVER, "lock over a foreign fencing counter: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "LLEN rs:{w3}:mutex:fence"), 1);
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w3}:mutex:fence"), -1, "the foreign key got a TTL");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w3}:mutex rs:{w3}:mutex:q rs:{w3}:mutex:qi"), 0,
                 "the failed lock wrote keys");

    /* a foreign queue info under a held lock: a waiter's first write (HSET qi, common.lua
     * q_add) fails without writing, so the queue is not created */
    rs_mutex_t *m5 = new_mutex(c, "w4");
    cr_assert_eq(rs_mutex_lock(m5), 0);
    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SET rs:{w4}:mutex:qi foreign"));
    rs_client_t *c2 = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m6 = new_mutex(c2, "w4");
    rc = rs_mutex_lock(m6);
    cr_expect_eq(rc, RS_ESERVER, "a wait over a foreign queue info: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c2), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c2));
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w4}:mutex:q"), 0, "the failed wait queued");
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "GET rs:{w4}:mutex:qi"), "foreign");
    cr_expect_eq(rs_mutex_unlock(m5), 0);
    rs_mutex_destroy(m4);
    rs_mutex_destroy(m5);
    rs_mutex_destroy(m6);
    rs_client_close(c2);

    /* the client is still fine */
    rs_mutex_t *m3 = new_mutex(c, "ok");
    cr_expect_eq(rs_mutex_lock(m3), 0);
    cr_expect_eq(rs_mutex_unlock(m3), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(m3);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(mutex, error_acl_noperm, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    char buf[256];
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "ACL SETUSER bob on >pw ~other:* &* +@all"),
                     "OK");
    rs_config_t cfg;
    rs_config_init(&cfg);
    char url[160];
    snprintf(url, sizeof url, "redis://bob:pw@127.0.0.1:%d", s.port);
    cfg.url = url;
    cfg.lease_ms = 1000;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    cr_assert_eq(rc, 0, "open as bob: %d %s", rc, rs_client_lasterror(NULL));
    rs_mutex_t *m = new_mutex(c, "acl");
    rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ESERVER, "lock without key permissions: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "NOPERM") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    rc = rs_mutex_trylock(m);
    cr_expect_eq(rc, RS_ESERVER, "trylock without key permissions: %d", rc);
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "keys were written");
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(mutex, error_oom, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    char buf[128];
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "oom");
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET maxmemory-policy noeviction"),
                     "OK");
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET maxmemory 1"), "OK");
    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ESERVER, "lock under OOM: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "OOM") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_fence(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET maxmemory 0"), "OK");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{oom}:mutex"), 0, "a half-done lock was left");
    rc = rs_mutex_lock(m);
    cr_expect_eq(rc, 0, "lock after lifting maxmemory: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 13. Redis unreachable                                                                  */

Test(mutex, unreachable, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    /* c1: no blocking call yet (no subscriber); c2: subscribed before the stall */
    rs_client_t *c1 = tu_open_client(&s, 1000, 500, NULL);
    rs_client_t *c2 = tu_open_client(&s, 1000, 500, NULL);
    rs_mutex_t *m1 = new_mutex(c1, "un");
    rs_mutex_t *m2 = new_mutex(c2, "un");
    cr_assert_eq(rs_mutex_lock(m2), 0);
    cr_assert_eq(rs_mutex_unlock(m2), 0);

    ts_server_pause(&s);
    long long t0 = tu_mono_ms();
    int rc = rs_mutex_lock(m1);
    long long el = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "lock, fresh client, server stalled: %d %s", rc,
                 rs_client_lasterror(c1));
    cr_expect_lt(el, 4000, "took %lld ms with timeout_ms 500", el);

    t0 = tu_mono_ms();
    rc = rs_mutex_lock(m2);
    el = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "lock, subscribed client, server stalled: %d %s", rc,
                 rs_client_lasterror(c2));
    cr_expect_lt(el, 4000, "took %lld ms with timeout_ms 500", el);

    t0 = tu_mono_ms();
    rc = rs_mutex_trylock(m2);
    el = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "trylock, server stalled: %d", rc);
    cr_expect_lt(el, 4000, "took %lld ms with timeout_ms 500", el);
    ts_server_resume(&s);

    /* whatever a timed-out call may have done in Redis once it resumed expires with its
     * lease (1000 ms): the mutex must be usable within a few seconds */
    struct timespec dl = tu_abs_in(5000);
    rc = rs_mutex_timedlock(m1, &dl);
    cr_expect_eq(rc, 0, "lock after resume: %d %s", rc, rs_client_lasterror(c1));
    cr_expect_eq(rs_mutex_unlock(m1), 0);
    dl = tu_abs_in(5000);
    rc = rs_mutex_timedlock(m2, &dl);
    cr_expect_eq(rc, 0, "lock after resume: %d %s", rc, rs_client_lasterror(c2));
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(m1);
    rs_mutex_destroy(m2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* rs_client_close "blocks for at most timeout_ms", also when Redis is stalled. */
typedef struct closer {
    rs_client_t *c;
    atomic_int done;
    pthread_t th;
} closer_t;

static void *closer_main(void *arg)
{
    closer_t *k = arg;
    rs_client_close(k->c);
    atomic_store(&k->done, 1);
    return NULL;
}

Test(mutex, close_while_unreachable, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 500, NULL);
    rs_mutex_t *m = new_mutex(c, "cu");
    ts_server_pause(&s);
    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ECONN, "lock, server stalled: %d %s", rc, rs_client_lasterror(c));
    rs_mutex_destroy(m);
    closer_t k = {.c = c};
    cr_assert_eq(pthread_create(&k.th, NULL, closer_main, &k), 0);
    int ok = tu_wait_atomic(&k.done, 1, 5000);
    ts_server_resume(&s); /* unblocks a hung close, so the test can end */
    pthread_join(k.th, NULL);
    cr_expect(ok, "rs_client_close (timeout_ms 500) still blocked after 5 s while Redis was "
                  "stalled");
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 14. The script itself: idempotence, owner checks, queue leases                        */

/* EVAL of the mutex script on name's keys. qlease may be NULL (then "10000"). */
static redisReply *mx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *mode, const char *qlease)
{
    char keys[4][64];
    snprintf(keys[0], sizeof keys[0], "rs:{%s}:mutex", name);
    snprintf(keys[1], sizeof keys[1], "rs:{%s}:mutex:fence", name);
    snprintf(keys[2], sizeof keys[2], "rs:{%s}:mutex:q", name);
    snprintf(keys[3], sizeof keys[3], "rs:{%s}:mutex:qi", name);
    const char *argv[16];
    size_t lens[16];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)rs_script_mutex.body;
    argv[n++] = "4";
    for (int i = 0; i < 4; i++)
        argv[n++] = keys[i];
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "5000";        /* lease */
    argv[n++] = "rs:client:";  /* channel prefix */
    argv[n++] = mode ? mode : "q";
    argv[n++] = "100";         /* max waiters */
    argv[n++] = qlease ? qlease : "10000";
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_mutex.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "EVAL %s: %s", op, r->str);
    return r;
}

static long long mx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq)
{
    redisReply *r = mx(k, name, op, tok, acq, NULL, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d", op, r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* acq reply: returns element 0; fence (element 1 of a grant) copied into fence. */
static long long mx_acq(redisContext *k, const char *name, const char *tok, const char *acq,
                        const char *mode, const char *qlease, char *fence, size_t flen,
                        long long *third)
{
    redisReply *r = mx(k, name, "acq", tok, acq, mode, qlease);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "acq: reply type %d", r->type);
    cr_assert_geq(r->elements, 1);
    long long k0 = r->element[0]->integer;
    if (fence && flen)
        fence[0] = '\0';
    if (third)
        *third = -99;
    if (r->elements >= 3) {
        redisReply *e = r->element[1];
        if (fence && flen) {
            if (e->type == REDIS_REPLY_STRING)
                snprintf(fence, flen, "%s", e->str);
            else if (e->type == REDIS_REPLY_INTEGER)
                snprintf(fence, flen, "%lld", e->integer);
        }
        if (third && r->element[2]->type == REDIS_REPLY_INTEGER)
            *third = r->element[2]->integer;
    }
    freeReplyObject(r);
    return k0;
}

static int hget_is(const ts_server_t *s, const char *key, const char *field, const char *want)
{
    char buf[128];
    char *v = ts_cmd_str(s, buf, sizeof buf, "HGET %s %s", key, field);
    if (!want)
        return v == NULL;
    return v && strcmp(v, want) == 0;
}

Test(mutex, script_idempotence, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    const char *L = "rs:{sc}:mutex";
    char f1[32], f1b[32], fx[32];
    long long third;

    /* acq twice with one token and acquisition id: granted twice, one token */
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:1", "q", NULL, f1, sizeof f1, &third), 1);
    cr_expect_gt(third, 0, "ttl of the grant");
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:1", "q", NULL, f1b, sizeof f1b, NULL), 1,
                 "a retried acq");
    cr_expect_str_eq(f1b, f1, "a retried acq returns the same token");
    cr_expect_neq(strtoull(f1, NULL, 10), 0);
    /* the same owner under another acquisition id: -1 (EDEADLK) */
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:2", "q", NULL, fx, sizeof fx, NULL), -1);
    cr_expect_eq(zcard_q(&s, "sc"), 0, "the owner was queued behind itself");

    /* release by the same token under another acquisition id: refused, hold intact */
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:2"), 0);
    cr_expect(hget_is(&s, L, "a", "pa:1"), "the hold survived a foreign release");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokB", "pa:1"), 0, "release by another token");
    cr_expect(hget_is(&s, L, "a", "pa:1"));

    /* renew: only the owner under its acquisition id */
    cr_expect_eq(mx_int(k, "sc", "renew", "tokB", "pb:1"), 0, "renew by a non-owner");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokB", "pa:1"), 0, "renew by a non-owner, owner's id");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokA", "pa:2"), 0, "renew under another id");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokA", "pa:1"), 1, "renew by the owner");

    /* a try while held: refused, never queued */
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(mx_acq(k, "sc", "tokB", "pb:1", "t", NULL, NULL, 0, &third), 0, "try");
        cr_expect_eq(third, 0, "a try reported itself queued");
    }
    cr_expect_eq(zcard_q(&s, "sc"), 0, "a try added to the queue");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{sc}:mutex:qi"), 0, "a try wrote queue info");

    /* release twice: 1 both times, the second recognises the tombstone */
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:1"), 1);
    cr_expect(hget_is(&s, L, "o", NULL), "released but still owned");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:1"), 1, "a retried release");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:2"), 0, "release under an id never granted");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokA", "pa:1"), 0, "renew after release");

    /* a queued entry whose queue lease expired is skipped at release */
    char f3[32];
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:3", "q", NULL, f3, sizeof f3, NULL), 1);
    cr_expect_gt(strtoull(f3, NULL, 10), strtoull(f1, NULL, 10));
    cr_expect_eq(mx_acq(k, "sc", "tokC", "pc:1", "q", "50", NULL, 0, &third), 0);
    cr_expect_eq(third, 1, "the waiter was not queued");
    cr_expect_eq(zcard_q(&s, "sc"), 1);
    tu_sleep_ms(150);
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:3"), 1);
    cr_expect(!hget_is(&s, L, "a", "pc:1"), "the lock was handed to an expired waiter");
    cr_expect(hget_is(&s, L, "o", NULL), "the lock is owned after releasing to nobody");
    cr_expect_eq(zcard_q(&s, "sc"), 0, "the expired entry stayed queued");
    cr_expect_eq(mx_int(k, "sc", "qrenew", "tokC", "pc:1"), 0, "qrenew of a dropped entry");

    /* a live waiter gets the lock at release, and the release stays idempotent */
    char f4[32], f5[32], f5b[32];
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:4", "q", NULL, f4, sizeof f4, NULL), 1);
    cr_expect_eq(mx_acq(k, "sc", "tokD", "pd:1", "q", NULL, NULL, 0, &third), 0);
    cr_expect_eq(third, 1);
    cr_expect_eq(mx_int(k, "sc", "qrenew", "tokD", "pd:1"), 1, "qrenew of a live entry");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:4"), 1);
    cr_expect(hget_is(&s, L, "a", "pd:1"), "not handed to the live waiter");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:4"), 1, "a retried release after a handoff");
    cr_expect(hget_is(&s, L, "a", "pd:1"), "a retried release undid the handoff");
    cr_expect_eq(mx_int(k, "sc", "qrenew", "tokD", "pd:1"), 2, "qrenew after the handoff");
    cr_expect_eq(mx_acq(k, "sc", "tokD", "pd:1", "q", NULL, f5, sizeof f5, NULL), 1,
                 "the waiter's retried acq finds it granted");
    cr_expect_gt(strtoull(f5, NULL, 10), strtoull(f4, NULL, 10));
    cr_expect_eq(mx_acq(k, "sc", "tokD", "pd:1", "q", NULL, f5b, sizeof f5b, NULL), 1);
    cr_expect_str_eq(f5b, f5);
    cr_expect_eq(zcard_q(&s, "sc"), 0);

    /* cancel: a waiter leaving the queue; cancel after a grant keeps the grant */
    cr_expect_eq(mx_acq(k, "sc", "tokE", "pe:1", "q", NULL, NULL, 0, &third), 0);
    cr_expect_eq(zcard_q(&s, "sc"), 1);
    redisReply *r = mx(k, "sc", "cancel", "tokE", "pe:1", NULL, NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->integer == 0,
              "cancel of a queued waiter");
    freeReplyObject(r);
    cr_expect_eq(zcard_q(&s, "sc"), 0, "cancel left the entry");
    r = mx(k, "sc", "cancel", "tokD", "pd:1", NULL, NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->integer == 1,
              "cancel by the holder keeps the hold");
    freeReplyObject(r);
    cr_expect(hget_is(&s, L, "a", "pd:1"));
    cr_expect_eq(mx_int(k, "sc", "rel", "tokD", "pd:1"), 1);
    redisFree(k);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 15. A killed waiter is skipped                                                         */

typedef struct waiter_child {
    const ts_server_t *s;
} waiter_child_t;

static int waiter_child_main(void *arg)
{
    waiter_child_t *w = arg;
    rs_client_t *c = tu_open_client_ex(w->s, 400, 2000, NULL);
    if (!c)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "kw") != 0)
        return 11;
    rs_mutex_lock(m); /* killed while it waits */
    return 12;
}

Test(mutex, killed_waiter_skipped, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ch = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *mh = new_mutex(ch, "kw");
    cr_assert_eq(rs_mutex_lock(mh), 0);
    uint64_t fh = rs_mutex_fence(mh);

    waiter_child_t wc = {&s};
    pid_t pid = tu_spawn(waiter_child_main, &wc);
    cr_assert(wait_zcard(&s, "kw", 1, 10000), "the child waiter did not queue");

    rs_client_t *ct = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *mt = new_mutex(ct, "kw");
    locker_t T = {.m = mt, .wait_release = 1};
    locker_start(&T);
    cr_assert(wait_zcard(&s, "kw", 2, 5000), "the third waiter did not queue");
    tu_sleep_ms(100);

    kill(pid, SIGKILL);
    int st = tu_reap(pid, 5000);
    cr_assert(st >= 0 && WIFSIGNALED(st), "the waiter child was not killed (0x%x)", st);

    long long t0 = tu_mono_ms();
    int rc = rs_mutex_unlock(mh);
    cr_expect_eq(rc, 0, "holder unlock: %d", rc);
    cr_assert(tu_wait_atomic(&T.locked, 1, 10000), "the waiter behind the dead one never got it");
    cr_expect_eq(T.rc, 0, "T lock: %d %s", T.rc, T.err);
    cr_expect_lt(T.t_locked - t0, 400 + 2000 + 600, "T acquired %lld ms after the unlock",
                 T.t_locked - t0);
    cr_expect_gt(T.fence, fh);
    atomic_store(&T.release, 1);
    cr_assert(locker_join(&T, 5000));
    cr_expect_eq(T.unlock_rc, 0, "T unlock: %d", T.unlock_rc);
    cr_expect_eq(zcard_q(&s, "kw"), 0, "the dead waiter's entry is still queued");
    rs_mutex_destroy(mh);
    rs_mutex_destroy(mt);
    rs_client_close(ch);
    rs_client_close(ct);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* The holder thread locking again through a second handle of the same client            */

Test(mutex, same_thread_second_handle, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "h2");
    rs_mutex_t *m2 = new_mutex(c, "h2");
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f = rs_mutex_fence(m);
    int rc = rs_mutex_lock(m2);
    cr_expect_eq(rc, EDEADLK, "lock through a second handle by the holder thread: %d", rc);
    struct timespec dl = tu_abs_in(300);
    rc = rs_mutex_timedlock(m2, &dl);
    cr_expect_eq(rc, EDEADLK, "timedlock through a second handle by the holder thread: %d", rc);
    /* redisync.h: trylock returns "EBUSY otherwise (also when the calling thread holds it)" */
    rc = rs_mutex_trylock(m2);
    cr_expect_eq(rc, EBUSY, "trylock through a second handle by the holder thread: %d (%s)", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m2), EPERM, "unlock through the handle that does not hold");
    cr_expect_eq(zcard_q(&s, "h2"), 0, "the holder queued behind itself");
    cr_expect_eq(rs_mutex_fence(m), f, "the hold is untouched");
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* rs_client_close: blocked lock calls return ECANCELED, holds are released in Redis      */

Test(mutex, close_cancels_waiters_and_releases, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 5000, 2000, NULL);
    rs_client_t *cb = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *ma = new_mutex(ca, "cl");
    rs_mutex_t *mb = new_mutex(cb, "cl");
    cr_assert_eq(rs_mutex_lock(ma), 0);

    locker_t B = {.m = mb};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "cl", 1, 5000), "B did not queue");
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_client_close(cb), 0);
    cr_assert(locker_join(&B, 5000), "B's lock did not return after its client was closed");
    cr_expect_eq(B.rc, ECANCELED, "B's lock: %d %s", B.rc, B.err);
    cr_expect_lt(B.t_locked - t0, 3000);
    cr_expect_eq(zcard_q(&s, "cl"), 0, "the cancelled waiter is still queued");
    cr_expect_eq(rs_mutex_lock(mb), ECANCELED, "lock on a closed client");
    cr_expect_eq(rs_mutex_destroy(mb), 0, "destroy after close");

    /* closing the holder's client releases its hold (owner-checked) in Redis */
    cr_expect_eq(rs_client_close(ca), 0);
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{cl}:mutex o"), 0, "the hold survived close");
    cr_expect_eq(rs_mutex_destroy(ma), 0, "destroy after close");
    rs_client_t *cc = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *mc = new_mutex(cc, "cl");
    cr_expect_eq(rs_mutex_trylock(mc), 0, "free right after the holder's client closed");
    cr_expect_eq(rs_mutex_unlock(mc), 0);
    rs_mutex_destroy(mc);
    rs_client_close(cc);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* fork(): the parent's client is unusable in the child, and the parent's hold survives   */

typedef struct efork_arg {
    rs_client_t *c;
    rs_mutex_t *m;
} efork_arg_t;

static int efork_child_main(void *arg)
{
    efork_arg_t *a = arg;
    if (rs_mutex_lock(a->m) != RS_EFORK)
        return 20;
    if (rs_mutex_trylock(a->m) != RS_EFORK)
        return 21;
    if (rs_mutex_unlock(a->m) != RS_EFORK)
        return 22;
    rs_mutex_t *m2;
    if (rs_mutex_init(&m2, a->c, "fk") != RS_EFORK)
        return 23;
    if (rs_mutex_destroy(a->m) != 0)
        return 24;
    if (rs_client_close(a->c) != 0)
        return 25;
    return 0;
}

Test(mutex, fork_child_gets_efork, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "fk");
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f = rs_mutex_fence(m);
    /* let the watchdog thread settle into its timed wait, as it is most of the time: the
     * child inherits that state (and must still be able to close the client) */
    tu_sleep_ms(200);
    efork_arg_t a = {c, m};
    pid_t pid = tu_spawn(efork_child_main, &a);
    tu_assert_exit0(pid, tu_reap(pid, 5000),
                    "child using the parent's client (20-23: not RS_EFORK, "
                    "-1 status: hung in rs_mutex_destroy/rs_client_close)");
    tu_sleep_ms(1500); /* past the lease: the watchdog must still be renewing the parent's hold */
    cr_expect_eq(rs_mutex_fence(m), f);
    cr_expect_gt(rs_mutex_remaining(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), 0, "the parent's hold after the child closed its copy");
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* max_waiters: a full queue is RS_EQUEUE                                                 */

Test(mutex, queue_full, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 2000;
    cfg.max_waiters = 1;
    rs_client_t *ca, *cb, *cc;
    cr_assert_eq(rs_client_open(&ca, &cfg), 0);
    cr_assert_eq(rs_client_open(&cb, &cfg), 0);
    cr_assert_eq(rs_client_open(&cc, &cfg), 0);
    rs_mutex_t *ma = new_mutex(ca, "qf");
    rs_mutex_t *mb = new_mutex(cb, "qf");
    rs_mutex_t *mc = new_mutex(cc, "qf");
    cr_assert_eq(rs_mutex_lock(ma), 0);
    locker_t B = {.m = mb};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "qf", 1, 5000), "B did not queue");
    int rc = rs_mutex_lock(mc);
    cr_expect_eq(rc, RS_EQUEUE, "lock with a full queue: %d %s", rc, rs_client_lasterror(cc));
    cr_expect_eq(zcard_q(&s, "qf"), 1);
    cr_expect_eq(rs_mutex_unlock(ma), 0);
    cr_assert(locker_join(&B, 5000));
    cr_expect_eq(B.rc, 0, "B: %d %s", B.rc, B.err);
    cr_expect_eq(B.unlock_rc, 0);
    cr_expect_eq(rs_mutex_lock(mc), 0, "lock once the queue drained");
    cr_expect_eq(rs_mutex_unlock(mc), 0);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_mutex_destroy(mc);
    rs_client_close(ca);
    rs_client_close(cb);
    rs_client_close(cc);
    ts_server_stop(&s);
}

/* max_waiters counts waiters, not arrival numbers: a queue whose tail's number reached the
 * cap but that holds fewer waiters admits one more (common.lua q_add uses the tail's number
 * only to skip its ZCARD below the cap). maxw 2: B (1) and C (2) queue, B gets the lock, D
 * joins behind C. (Admitting past the cap is queue_full's failure.) */
Test(mutex, queue_numbers_past_the_cap_are_not_full, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 5000;
    cfg.max_waiters = 2;
    rs_client_t *cl[4];
    rs_mutex_t *m[4];
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(rs_client_open(&cl[i], &cfg), 0);
        m[i] = new_mutex(cl[i], "qn");
    }
    cr_assert_eq(rs_mutex_lock(m[0]), 0);
    locker_t B = {.m = m[1], .wait_release = 1}, C = {.m = m[2]}, D = {.m = m[3]};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "qn", 1, 5000), "B did not queue");
    locker_start(&C);
    cr_assert(wait_zcard(&s, "qn", 2, 5000), "C did not queue");
    cr_expect_eq(rs_mutex_unlock(m[0]), 0);
    for (int i = 0; i < 500 && !atomic_load(&B.locked); i++)
        tu_sleep_ms(10);
    cr_assert(atomic_load(&B.locked), "B was not handed the lock");
    cr_assert_eq(zcard_q(&s, "qn"), 1);
    locker_start(&D);
    cr_expect(wait_zcard(&s, "qn", 2, 5000), "D did not queue behind C (tail number 2, 1 waiter)");
    cr_expect_eq(atomic_load(&D.done), 0, "D's lock returned: %d %s", D.rc, D.err);
    atomic_store(&B.release, 1);
    cr_assert(locker_join(&B, 10000));
    cr_assert(locker_join(&C, 10000));
    cr_assert(locker_join(&D, 10000));
    cr_expect_eq(B.rc, 0, "B: %d %s", B.rc, B.err);
    cr_expect_eq(C.rc, 0, "C: %d %s", C.rc, C.err);
    cr_expect_eq(D.rc, 0, "D: %d %s", D.rc, D.err);
    for (int i = 0; i < 4; i++) {
        rs_mutex_destroy(m[i]);
        rs_client_close(cl[i]);
    }
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* A forged wake-up never grants: whoever can PUBLISH on a client's channel but cannot read */
/* the queue keys knows the channel and can guess acquisition ids "PUBLICID:N", but not   */
/* their secret; such messages at worst make the waiter retry (docs/security.md)         */

typedef struct forged_waiter {
    rs_mutex_t *m;
    atomic_int done;
    int rc;
    uint64_t fence;
} forged_waiter_t;

static void *forged_wait_main(void *arg)
{
    forged_waiter_t *w = arg;
    struct timespec dl = tu_abs_in(20000);
    w->rc = rs_mutex_timedlock(w->m, &dl);
    w->fence = rs_mutex_fence(w->m);
    if (w->rc == 0)
        rs_mutex_unlock(w->m);
    atomic_store(&w->done, 1);
    return NULL;
}

Test(mutex, forged_wakeup_never_grants, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *holder = tu_open_client(&s, 5000, 2000, NULL);
    rs_client_t *waiter = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *mh = new_mutex(holder, "forged");
    forged_waiter_t w = {.m = new_mutex(waiter, "forged")};
    cr_assert_eq(rs_mutex_lock(mh), 0);
    uint64_t f0 = rs_mutex_fence(mh);
    pthread_t th;
    tu_thread_start(&th, forged_wait_main, &w);
    cr_assert(wait_zcard(&s, "forged", 1, 5000), "the waiter never queued");

    /* every id the waiter's client can have used so far, as a route ("ID:N", what retry
     * messages carry) and with secrets a forger might try, each with a fence far above */
    const char *id = rs_client_id(waiter);
    long long delivered = 0;
    for (int n = 0; n < 64; n++) {
        const char *forms[] = {"%s:%x %llu", "%s:%x.0000000000000000 %llu",
                               "%s:%x.ffffffffffffffff %llu", "%s:%x. %llu", "%s:%x.%s %llu"};
        for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
            char msg[128];
            if (k == 4)
                snprintf(msg, sizeof msg, "%s:%x.%s %llu", id, n, id,
                         (unsigned long long)f0 + 1000000);
            else
                snprintf(msg, sizeof msg, forms[k], id, n, (unsigned long long)f0 + 1000000);
            delivered += ts_cmd_int(&s, "PUBLISH rs:client:%s %s", id, msg);
        }
    }
    cr_expect_gt(delivered, 0, "no forged message reached the waiter's subscriber");
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&w.done), 0, "a forged wake-up granted the lock (rc %d, fence %llu)",
                 w.rc, (unsigned long long)w.fence);
    cr_expect_eq(zcard_q(&s, "forged"), 1, "the waiter left the queue");
    cr_expect_eq(rs_mutex_remaining(mh) > 0, 1, "the holder lost its hold");

    /* the real release still hands over, with the real token */
    cr_expect_eq(rs_mutex_unlock(mh), 0);
    cr_assert(tu_thread_join(th, &w.done, 10000), "the waiter was not served after the release");
    cr_expect_eq(w.rc, 0, "waiter: %d", w.rc);
    cr_expect(w.fence > f0 && w.fence != f0 + 1000000,
              "the waiter's token %llu is not the handover's (holder had %llu)",
              (unsigned long long)w.fence, (unsigned long long)f0);
    rs_mutex_destroy(w.m);
    rs_mutex_destroy(mh);
    rs_client_close(waiter);
    rs_client_close(holder);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* An orphan (Redis holds the mutex for this thread under the id of a lock that returned  */
/* RS_ECONN after its script ran) is adopted by the thread's next lock, with a new token   */

Test(mutex, orphan_of_failed_lock_is_adopted, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 300, NULL);
    rs_client_t *other = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "orphan");
    rs_mutex_t *o = new_mutex(other, "orphan");
    cr_assert_eq(rs_mutex_lock(m), 0); /* connections and subscriber up before the stall */
    uint64_t f0 = rs_mutex_fence(m);
    cr_assert_eq(rs_mutex_unlock(m), 0);

    /* the server sleeps 1 s; the lock gives up after 300 ms, then Redis runs it */
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    redisAppendCommand(k, "DEBUG SLEEP 1");
    int done = 0;
    while (!done)
        cr_assert_eq(redisBufferWrite(k, &done), REDIS_OK);
    tu_sleep_ms(50);
    int rc = rs_mutex_lock(m);
    cr_assert_eq(rc, RS_ECONN, "lock during the stall: %d", rc);
    cr_expect_eq(rs_mutex_fence(m), 0, "a failed lock left a local hold");
    struct timeval tv = {3, 0};
    redisSetTimeout(k, tv);
    redisReply *r;
    if (redisGetReply(k, (void **)&r) == REDIS_OK)
        freeReplyObject(r);
    redisFree(k);
    rs_info_t in;
    cr_assert_eq(rs_inspect(c, "mutex", "orphan", &in), 0);
    cr_assert_eq(in.nholders, 1, "the failed lock did not run after the stall: no orphan");
    uint64_t orphan_fence = in.fence;
    cr_expect_eq(rs_mutex_trylock(o), EBUSY, "the orphan does not exclude others");

    /* the thread's next lock takes the orphan over at once, with a fresh token */
    struct timespec dl = tu_abs_in(10000);
    rc = rs_mutex_timedlock(m, &dl);
    cr_expect_eq(rc, 0, "lock after the orphan: %d (%s)", rc, rs_client_lasterror(c));
    cr_expect_gt(rs_mutex_fence(m), orphan_fence, "the adopted hold kept the orphan's token");
    cr_expect_gt(orphan_fence, f0);
    cr_expect_eq(rs_mutex_trylock(o), EBUSY);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    cr_expect_eq(rs_mutex_trylock(o), 0, "the adopted hold was not released");
    cr_expect_eq(rs_mutex_unlock(o), 0);

    /* a second handle of the thread still gets EDEADLK: that hold is known locally */
    rs_mutex_t *m2 = new_mutex(c, "orphan");
    cr_assert_eq(rs_mutex_lock(m), 0);
    cr_expect_eq(rs_mutex_lock(m2), EDEADLK);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(o);
    rs_mutex_destroy(m);
    rs_client_close(other);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* A peer that can read the queue keys sees the whole acquisition id: with confirm_wakeups
 * the woken waiter asks Redis once more, so even its forged grant only causes a retry */
Test(mutex, forged_wakeup_by_key_reader_with_confirm, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *holder = tu_open_client(&s, 5000, 2000, NULL);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 5000;
    cfg.timeout_ms = 2000;
    cfg.confirm_wakeups = 1;
    rs_client_t *waiter = NULL;
    cr_assert_eq(rs_client_open(&waiter, &cfg), 0, "%s", rs_client_lasterror(NULL));
    rs_mutex_t *mh = new_mutex(holder, "forgedk");
    forged_waiter_t w = {.m = new_mutex(waiter, "forgedk")};
    cr_assert_eq(rs_mutex_lock(mh), 0);
    uint64_t f0 = rs_mutex_fence(mh);
    pthread_t th;
    tu_thread_start(&th, forged_wait_main, &w);
    cr_assert(wait_zcard(&s, "forgedk", 1, 5000), "the waiter never queued");

    char acqid[128] = "";
    redisContext *rc = ts_connect(&s);
    cr_assert_not_null(rc);
    redisReply *q = redisCommand(rc, "ZRANGE rs:{forgedk}:mutex:q 0 0");
    cr_assert(q && q->type == REDIS_REPLY_ARRAY && q->elements == 1, "the queue entry");
    snprintf(acqid, sizeof acqid, "%s", q->element[0]->str);
    freeReplyObject(q);
    redisFree(rc);
    char msg[200];
    snprintf(msg, sizeof msg, "%s %llu", acqid, (unsigned long long)f0 + 1000000);
    long long got = ts_cmd_int(&s, "PUBLISH rs:client:%s %s", rs_client_id(waiter), msg);
    cr_expect_eq(got, 1, "the forged grant did not reach the waiter's subscriber");
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&w.done), 0, "a forged grant with the real id was trusted");
    cr_expect_eq(zcard_q(&s, "forgedk"), 1, "the waiter left the queue");

    cr_expect_eq(rs_mutex_unlock(mh), 0);
    cr_assert(tu_thread_join(th, &w.done, 10000), "the waiter was not served after the release");
    cr_expect_eq(w.rc, 0, "waiter: %d", w.rc);
    cr_expect(w.fence > f0 && w.fence != f0 + 1000000, "token %llu", (unsigned long long)w.fence);
    rs_mutex_destroy(w.m);
    rs_mutex_destroy(mh);
    rs_client_close(waiter);
    rs_client_close(holder);
    ts_server_stop(&s);
}

/* A slow on_lost callback still running when the client is closed. The watchdog runs the
 * callbacks with its lock released; a close that asked it to stop meanwhile went unseen, the
 * watchdog then slept with no deadline (no lease left) and close joined it for ever. Seen as
 * a rare hang of sentinel::failover_processes_carry_on in "close". */
static atomic_int slow_lost_entered;

static void slow_on_lost(const char *kind, const char *name, void *arg)
{
    (void)kind, (void)name, (void)arg;
    atomic_store(&slow_lost_entered, 1);
    tu_sleep_ms(500);
}

Test(mutex, close_while_on_lost_runs, .timeout = 30)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 300;
    cfg.on_lost = slow_on_lost;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0);
    rs_mutex_t *m = new_mutex(c, "cl");
    cr_assert_eq(rs_mutex_lock(m), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{cl}:mutex"), 1);
    cr_assert(tu_wait_atomic(&slow_lost_entered, 1, 5000), "on_lost was not called");
    cr_expect_eq(rs_mutex_unlock(m), RS_ELOST);
    rs_mutex_destroy(m);
    /* the callback sleeps for 500 ms more: close asks the watchdog to stop meanwhile */
    closer_t cl = {.c = c};
    cr_assert_eq(pthread_create(&cl.th, NULL, closer_main, &cl), 0);
    cr_expect(tu_thread_join(cl.th, &cl.done, 5000), "rs_client_close did not return within 5 s");
    ts_server_stop(&s);
}
