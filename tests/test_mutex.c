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
#include "test_mutex.h"

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

/* a - b in ms, on CLOCK_REALTIME timespecs. */
static long long ts_diff_ms(const struct timespec *a, const struct timespec *b)
{
    return ((long long)a->tv_sec - b->tv_sec) * 1000 + (a->tv_nsec - b->tv_nsec) / 1000000;
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

    /* timedlock on the held mutex: ETIMEDOUT after the deadline, nothing left queued; the
     * message says how long it waited: from its start (after tw0, when the call had all
     * but the 200 ms the bound spares it left) to its return */
    long long tw0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(700);
    rc = rs_mutex_timedlock(m2, &dl);
    long long tw1 = tu_mono_ms();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    cr_expect_eq(rc, ETIMEDOUT, "timedlock on a held mutex: %d %s", rc, rs_client_lasterror(c2));
    long waited = tu_waited_ms(rs_client_lasterror(c2));
    cr_expect(waited >= 500 && waited <= tw1 - tw0 + 1,
              "\"%s\": %ld ms of waiting, not 500 to %lld",
              rs_client_lasterror(c2), waited, tw1 - tw0 + 1);
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

