/*
 * test_latch.c - Criterion tests of the distributed countdown latch (rs_latch_*), from the
 * public API down to its Lua script (called directly with EVAL in latch/script_*).
 *
 * Every test starts its own redis-server on a free port and stops it. Waiters run as
 * threads (results recorded for the main thread, which alone makes Criterion assertions) or
 * as forked processes that open their own client after fork() and report through the test's
 * redis and their exit status. "Did not return early" is checked by comparing each waiter's
 * CLOCK_REALTIME return time with the time just before the count-down that opened the latch.
 *
 * Timing bounds are deliberately generous: the suite runs as -j6 on small, noisy machines.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
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

/* primitives/latch/latch.c: the keys' TTL (a test hook; hidden in the shared library) */
extern long rs__latch_ttl_ms;

#define DAY_MS 86400000LL

TestSuite(latch, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static long long real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static rs_latch_t *new_latch(rs_client_t *c, const char *name, unsigned count)
{
    rs_latch_t *l = NULL;
    int rc = rs_latch_init(&l, c, name, count);
    cr_assert_eq(rc, 0, "rs_latch_init(%s, %u): %d %s", name, count, rc, rs_client_lasterror(c));
    cr_assert_not_null(l);
    return l;
}

/* The count through the API; -1 - error on failure. */
static long long count_of(rs_latch_t *l)
{
    unsigned n = 12345;
    int rc = rs_latch_getcount(l, &n);
    return rc ? -1 - rc : (long long)n;
}

/* Subscribers of channel (PUBSUB NUMSUB); -1 on error. */
static long long numsub(const ts_server_t *s, const char *channel)
{
    redisContext *k = ts_connect(s);
    if (!k)
        return -1;
    redisReply *r = redisCommand(k, "PUBSUB NUMSUB %s", channel);
    long long n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        n = r->element[1]->integer;
    if (r)
        freeReplyObject(r);
    redisFree(k);
    return n;
}

/* Polls until channel has n subscribers; 1 if it got there within timeout_ms. */
static int wait_numsub(const ts_server_t *s, const char *channel, long long n, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        if (numsub(s, channel) == n)
            return 1;
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(10);
    }
}

static long long publishes(const ts_server_t *s)
{
    long long n = ts_info_ll(s, "commandstats", "cmdstat_publish", "calls");
    return n < 0 ? 0 : n; /* absent until the first PUBLISH */
}

/* ---- a thread that waits ------------------------------------------------------------- */
typedef struct waiter {
    rs_latch_t *l;
    long dl_ms;          /* 0: rs_latch_wait; else rs_latch_timedwait, deadline now + dl_ms */
    int rc;
    long long t_ret;     /* CLOCK_REALTIME ms when the call returned */
    char err[256];
    atomic_int done;
    pthread_t th;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    if (w->dl_ms) {
        struct timespec dl = tu_abs_in(w->dl_ms);
        w->rc = rs_latch_timedwait(w->l, &dl);
    } else {
        w->rc = rs_latch_wait(w->l);
    }
    w->t_ret = real_ms();
    if (w->rc)
        snprintf(w->err, sizeof w->err, "%s", rs_client_lasterror(NULL));
    atomic_store(&w->done, 1);
    return NULL;
}

static void waiter_start(waiter_t *w, rs_latch_t *l, long dl_ms)
{
    memset(w, 0, sizeof *w);
    w->l = l;
    w->dl_ms = dl_ms;
    w->rc = -1;
    tu_thread_start(&w->th, waiter_main, w);
}

/* A forked waiter: attaches to the latch (count 0), reports "ready", waits, and pushes its
 * return time (CLOCK_REALTIME ms) to t:ret, or its error to t:err. */
typedef struct child_arg {
    const ts_server_t *s;
    const char *name;
} child_arg_t;

static int child_waiter(void *arg)
{
    child_arg_t *a = arg;
    redisContext *k = ts_connect(a->s);
    if (!k)
        return 2;
    rs_client_t *c = tu_open_client_ex(a->s, 2000, 2000, NULL);
    if (!c)
        return 3;
    rs_latch_t *l = NULL;
    if (rs_latch_init(&l, c, a->name, 0) != 0)
        return 4;
    freeReplyObject(redisCommand(k, "RPUSH t:ready %d", (int)getpid()));
    int rc = rs_latch_wait(l);
    long long t = real_ms();
    if (rc) {
        freeReplyObject(redisCommand(k, "RPUSH t:err %s", rs_client_lasterror(c)));
        return 5;
    }
    freeReplyObject(redisCommand(k, "RPUSH t:ret %lld", t));
    rs_latch_destroy(l);
    rs_client_close(c);
    redisFree(k);
    return 0;
}

/* ------------------------------------------------------------------------------------- */
/* 1. Basics: arming, counting down, opening, late init, rearm                            */

Test(latch, basics)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 2000, NULL);

    rs_latch_t *l = new_latch(c, "b", 3);
    cr_expect_eq(count_of(l), 3);
    long long ttl = ts_cmd_int(&s, "PTTL rs:{b}:latch");
    cr_expect(ttl > 0 && ttl <= DAY_MS, "PTTL after init: %lld", ttl);

    /* closed: a timed wait times out at its deadline, a past deadline at once */
    long long tw0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(500);
    int rc = rs_latch_timedwait(l, &dl);
    long long tw1 = tu_mono_ms();
    long long late = real_ms() - ((long long)dl.tv_sec * 1000 + dl.tv_nsec / 1000000);
    cr_expect_eq(rc, ETIMEDOUT, "timedwait on a closed latch: %d %s", rc, rs_client_lasterror(c));
    /* how long it waited: from its start (after tw0; 200 ms spared) to its return */
    long waited = tu_waited_ms(rs_client_lasterror(c));
    cr_expect(waited >= 300 && waited <= tw1 - tw0 + 1,
              "\"%s\": %ld ms of waiting, not 300 to %lld",
              rs_client_lasterror(c), waited, tw1 - tw0 + 1);
    cr_expect(late >= 0 && late < 3000, "timedwait returned %lld ms after its deadline", late);
    dl = tu_abs_in(-1000);
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_latch_timedwait(l, &dl), ETIMEDOUT, "past deadline on a closed latch");
    cr_expect_lt(tu_mono_ms() - t0, 1000);

    cr_expect_eq(rs_latch_count_down(l), 0);
    cr_expect_eq(count_of(l), 2);
    cr_expect_eq(rs_latch_count_down(l), 0);
    cr_expect_eq(rs_latch_count_down(l), 0);
    cr_expect_eq(count_of(l), 0, "open");

    /* open: waits return at once, the keys still have a TTL */
    t0 = tu_mono_ms();
    cr_expect_eq(rs_latch_wait(l), 0);
    dl = tu_abs_in(-1000);
    cr_expect_eq(rs_latch_timedwait(l, &dl), 0, "past deadline on an open latch");
    cr_expect_lt(tu_mono_ms() - t0, 1000);
    ttl = ts_cmd_int(&s, "PTTL rs:{b}:latch");
    cr_expect(ttl > 0 && ttl <= DAY_MS, "PTTL of the latch after opening: %lld", ttl);
    ttl = ts_cmd_int(&s, "PTTL rs:{b}:latch:ids");
    cr_expect(ttl > 0 && ttl <= DAY_MS, "PTTL of the call ids after opening: %lld", ttl);

    /* count_down at 0: a no-op, no second opening */
    long long pub = publishes(&s);
    cr_expect_eq(rs_latch_count_down(l), 0, "count_down at 0");
    cr_expect_eq(count_of(l), 0);
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{b}:latch o"), 1, "one opening");
    cr_expect_eq(publishes(&s), pub, "count_down at 0 published");

    /* a late init (another client) does not close it again */
    rs_latch_t *l2 = new_latch(c2, "b", 5);
    cr_expect_eq(count_of(l2), 0, "a late init re-closed the latch");
    dl = tu_abs_in(2000);
    cr_expect_eq(rs_latch_timedwait(l2, &dl), 0);

    /* rearm is the only way to close it */
    cr_expect_eq(rs_latch_rearm(l, 2), 0);
    cr_expect_eq(count_of(l2), 2, "after rearm");
    dl = tu_abs_in(300);
    cr_expect_eq(rs_latch_timedwait(l2, &dl), ETIMEDOUT, "rearmed latch is closed");
    cr_expect_eq(rs_latch_count_down(l2), 0);
    cr_expect_eq(rs_latch_count_down(l), 0);
    cr_expect_eq(count_of(l), 0);
    dl = tu_abs_in(2000);
    cr_expect_eq(rs_latch_timedwait(l2, &dl), 0, "open again");
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{b}:latch o"), 2, "two openings");
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{b}:latch c"), 2, "count of the latest arming");

    /* the whole unsigned range */
    rs_latch_t *l3 = new_latch(c, "big", UINT_MAX);
    cr_expect_eq(count_of(l3), (long long)UINT_MAX);
    cr_expect_eq(rs_latch_count_down(l3), 0);
    cr_expect_eq(count_of(l3), (long long)UINT_MAX - 1);
    cr_expect_eq(rs_latch_rearm(l3, UINT_MAX), 0);
    cr_expect_eq(count_of(l3), (long long)UINT_MAX);

    cr_expect_eq(rs_latch_destroy(l), 0);
    cr_expect_eq(rs_latch_destroy(l2), 0);
    cr_expect_eq(rs_latch_destroy(l3), 0);
    cr_expect_eq(rs_latch_destroy(NULL), 0);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 2. A latch that was never armed                                                        */

Test(latch, never_armed)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, "na", 0);
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "init with count 0 wrote keys");

    unsigned n = 77;
    cr_expect_eq(rs_latch_getcount(l, &n), ENOENT, "getcount, never armed");
    cr_expect_eq(n, 77, "getcount wrote the count on ENOENT");
    cr_expect_eq(rs_latch_count_down(l), ENOENT, "count_down, never armed");
    cr_expect(strstr(rs_client_lasterror(c), "never been armed") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    struct timespec dl = tu_abs_in(300);
    cr_expect_eq(rs_latch_timedwait(l, &dl), ETIMEDOUT, "timedwait, never armed");
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "calls on a never-armed latch wrote keys");
    cr_expect_eq(rs_latch_rearm(l, 0), EINVAL, "rearm 0");

    /* rearm arms a never-armed latch (documented) */
    cr_expect_eq(rs_latch_rearm(l, 2), 0);
    cr_expect_eq(count_of(l), 2);
    rs_latch_destroy(l);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 3. Bad input                                                                           */

Test(latch, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = (rs_latch_t *)&s; /* must be overwritten with NULL on failure */

    cr_expect_eq(rs_latch_init(NULL, c, "x", 1), EINVAL, "NULL out");
    cr_expect_eq(rs_latch_init(&l, NULL, "x", 1), EINVAL, "NULL client");
    cr_expect_null(l, "*out not cleared on failure");
    l = (rs_latch_t *)&s;
    cr_expect_eq(rs_latch_init(&l, c, NULL, 1), EINVAL, "NULL name");
    cr_expect_null(l);
    l = (rs_latch_t *)&s;
    cr_expect_eq(rs_latch_init(&l, c, "", 1), EINVAL, "empty name");
    cr_expect_null(l);
    char big[600];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_expect_eq(rs_latch_init(&l, c, big, 1), EINVAL, "name over 512 bytes");
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0);

    unsigned n;
    struct timespec dl = tu_abs_in(1000);
    cr_expect_eq(rs_latch_count_down(NULL), EINVAL);
    cr_expect_eq(rs_latch_wait(NULL), EINVAL);
    cr_expect_eq(rs_latch_timedwait(NULL, &dl), EINVAL);
    cr_expect_eq(rs_latch_getcount(NULL, &n), EINVAL);
    cr_expect_eq(rs_latch_rearm(NULL, 1), EINVAL);

    l = new_latch(c, "x", 1);
    cr_expect_eq(rs_latch_getcount(l, NULL), EINVAL, "NULL count");
    cr_expect_eq(rs_latch_timedwait(l, NULL), EINVAL, "NULL deadline");
    dl.tv_nsec = 1000000000L;
    cr_expect_eq(rs_latch_timedwait(l, &dl), EINVAL, "tv_nsec too large");
    dl.tv_nsec = -1;
    cr_expect_eq(rs_latch_timedwait(l, &dl), EINVAL, "tv_nsec negative");
    cr_expect_eq(rs_latch_rearm(l, 0), EINVAL, "rearm 0");
    cr_expect_eq(count_of(l), 1, "bad calls changed the latch");
    rs_latch_destroy(l);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 4. Forked waiters: none returns before the last count-down, all return promptly after, */
/*    and the opening is one PUBLISH for all of them                                      */

Test(latch, no_early_return, .fini = tu_kill_kids)
{
    enum { NW = 4 };
    ts_server_t s;
    tu_start_server(&s);
    const char *name = "ne", *chan = "rs:{ne}:latch";

    /* fork before this process opens a client (and starts library threads); the waiters
     * find the latch not armed yet, so they also wait for the arming */
    child_arg_t a = {&s, name};
    pid_t kid[NW];
    for (int i = 0; i < NW; i++)
        kid[i] = tu_spawn(child_waiter, &a);
    long long end = tu_mono_ms() + 15000;
    while (ts_cmd_int(&s, "LLEN t:ready") < NW && tu_mono_ms() < end)
        tu_sleep_ms(10);
    cr_assert_eq(ts_cmd_int(&s, "LLEN t:ready"), NW, "the waiters did not start");
    cr_assert(wait_numsub(&s, chan, NW, 15000), "not every waiter subscribed: %lld",
              numsub(&s, chan));

    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, name, 3);
    long long pub0 = publishes(&s);
    tu_sleep_ms(300);
    cr_expect_eq(ts_cmd_int(&s, "LLEN t:ret"), 0, "a waiter returned after arming");
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rs_latch_count_down(l), 0);
        tu_sleep_ms(400);
        cr_expect_eq(ts_cmd_int(&s, "LLEN t:ret") + ts_cmd_int(&s, "LLEN t:err"), 0,
                     "a waiter returned at count %d", 2 - i);
    }
    cr_expect_eq(count_of(l), 1);
    long long t_last = real_ms();
    cr_assert_eq(rs_latch_count_down(l), 0);
    long long t_after = real_ms();

    for (int i = 0; i < NW; i++) {
        int st = tu_reap(kid[i], 10000);
        cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "waiter %d: status 0x%x", i, st);
    }
    char buf[256];
    cr_expect_null(ts_cmd_str(&s, buf, sizeof buf, "LINDEX t:err 0"), "waiter error: %s", buf);
    cr_assert_eq(ts_cmd_int(&s, "LLEN t:ret"), NW, "not every waiter returned");
    for (int i = 0; i < NW; i++) {
        long long t = ts_cmd_int(&s, "LINDEX t:ret %d", i);
        cr_expect_geq(t, t_last, "waiter returned %lld ms before the last count-down",
                      t_last - t);
        cr_expect_lt(t - t_after, 1000, "waiter returned %lld ms after the opening", t - t_after);
    }
    cr_expect_eq(publishes(&s) - pub0, 1, "%lld PUBLISH for one opening with %d waiting clients",
                 publishes(&s) - pub0, NW);
    cr_expect(wait_numsub(&s, chan, 0, 5000), "subscriptions left behind");
    rs_latch_destroy(l);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 5. A wait before arming waits for the arming and then for 0                            */

Test(latch, wait_before_arming)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *cw = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *lw = new_latch(cw, "wa", 0);
    waiter_t w;
    waiter_start(&w, lw, 0);
    cr_assert(wait_numsub(&s, "rs:{wa}:latch", 1, 10000), "the waiter did not subscribe");
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&w.done), 0, "wait returned on a never-armed latch: %d %s", w.rc,
                 w.err);

    rs_latch_t *l = new_latch(c, "wa", 2);
    tu_sleep_ms(400);
    cr_expect_eq(atomic_load(&w.done), 0, "wait returned after arming");
    cr_expect_eq(rs_latch_count_down(l), 0);
    tu_sleep_ms(400);
    cr_expect_eq(atomic_load(&w.done), 0, "wait returned at count 1");
    long long t_last = real_ms();
    cr_expect_eq(rs_latch_count_down(l), 0);
    long long t_after = real_ms();
    cr_expect(tu_wait_atomic(&w.done, 1, 5000), "the waiter was not woken");
    cr_expect_eq(w.rc, 0, "wait: %d %s", w.rc, w.err);
    cr_expect_geq(w.t_ret, t_last);
    cr_expect_lt(w.t_ret - t_after, 1000, "woken %lld ms after the opening", w.t_ret - t_after);

    rs_client_close(cw); /* cancels the wait if it is still blocked */
    pthread_join(w.th, NULL);
    rs_latch_destroy(lw);
    rs_latch_destroy(l);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 6. Waiters do not poll; one PUBLISH wakes every client and every thread                */

Test(latch, waiters_do_not_poll)
{
    enum { NC = 3, NT = 2 };
    ts_server_t s;
    tu_start_server(&s);
    const char *chan = "rs:{np}:latch";
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, "np", 1);
    rs_client_t *cw[NC];
    rs_latch_t *lw[NC];
    waiter_t w[NC][NT];
    for (int i = 0; i < NC; i++) {
        cw[i] = tu_open_client(&s, 2000, 2000, NULL);
        lw[i] = new_latch(cw[i], "np", 0);
        for (int j = 0; j < NT; j++) /* threads of one client share its handle */
            waiter_start(&w[i][j], lw[i], 0);
    }
    cr_assert(wait_numsub(&s, chan, NC, 10000), "subscribers: %lld", numsub(&s, chan));
    tu_sleep_ms(300);
    long long before = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_assert_geq(before, 1);
    tu_sleep_ms(2500);
    long long after = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_expect_leq(after - before, 2, "%lld EVALSHA calls in 2.5 s with %d waiting threads",
                  after - before, NC * NT);
    for (int i = 0; i < NC; i++)
        for (int j = 0; j < NT; j++)
            cr_expect_eq(atomic_load(&w[i][j].done), 0, "a wait returned early: %d %s",
                         w[i][j].rc, w[i][j].err);

    long long pub0 = publishes(&s);
    long long t_last = real_ms();
    cr_assert_eq(rs_latch_count_down(l), 0);
    long long t_after = real_ms();
    for (int i = 0; i < NC; i++)
        for (int j = 0; j < NT; j++) {
            waiter_t *x = &w[i][j];
            cr_expect(tu_wait_atomic(&x->done, 1, 5000), "waiter %d/%d not woken", i, j);
            cr_expect_eq(x->rc, 0, "wait: %d %s", x->rc, x->err);
            cr_expect_geq(x->t_ret, t_last);
            cr_expect_lt(x->t_ret - t_after, 1000, "woken %lld ms after the opening",
                         x->t_ret - t_after);
        }
    cr_expect_eq(publishes(&s) - pub0, 1, "%lld PUBLISH for one opening",
                 publishes(&s) - pub0);
    cr_expect(wait_numsub(&s, chan, 0, 5000), "subscriptions left behind");

    for (int i = 0; i < NC; i++) {
        rs_client_close(cw[i]);
        for (int j = 0; j < NT; j++)
            pthread_join(w[i][j].th, NULL);
        rs_latch_destroy(lw[i]);
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 7. Rearm: closes for later waits; a blocked wait waits for the new count; an opening   */
/*    followed at once by a rearm still releases those who waited for it                 */

Test(latch, rearm)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *cw = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, "ra", 1);
    rs_latch_t *lw = new_latch(cw, "ra", 0);
    const char *chan = "rs:{ra}:latch";
    cr_assert_eq(rs_latch_count_down(l), 0);
    cr_expect_eq(rs_latch_wait(lw), 0, "open");

    /* rearm closes it; a rearm while someone waits changes the count it waits for */
    cr_assert_eq(rs_latch_rearm(l, 2), 0);
    waiter_t w1;
    waiter_start(&w1, lw, 20000);
    cr_assert(wait_numsub(&s, chan, 1, 10000));
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&w1.done), 0, "wait returned on a rearmed latch: %d %s", w1.rc,
                 w1.err);
    cr_assert_eq(rs_latch_rearm(l, 3), 0);
    cr_expect_eq(count_of(l), 3);
    cr_assert_eq(rs_latch_count_down(l), 0);
    cr_assert_eq(rs_latch_count_down(l), 0);
    tu_sleep_ms(400);
    cr_expect_eq(atomic_load(&w1.done), 0, "wait returned at count 1 of the second rearm");
    cr_assert_eq(rs_latch_count_down(l), 0);
    cr_expect(tu_wait_atomic(&w1.done, 1, 5000), "not woken by the opening");
    cr_expect_eq(w1.rc, 0, "wait: %d %s", w1.rc, w1.err);

    /* opening then rearm at once: the waiter saw the opening happen */
    cr_assert_eq(rs_latch_rearm(l, 1), 0);
    waiter_t w2;
    waiter_start(&w2, lw, 20000);
    cr_assert(wait_numsub(&s, chan, 1, 10000));
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&w2.done), 0);
    cr_assert_eq(rs_latch_count_down(l), 0);
    cr_assert_eq(rs_latch_rearm(l, 5), 0);
    cr_expect(tu_wait_atomic(&w2.done, 1, 5000), "an opening followed by a rearm was missed");
    cr_expect_eq(w2.rc, 0, "wait: %d %s", w2.rc, w2.err);

    /* a wait that starts after the rearm waits */
    struct timespec dl = tu_abs_in(400);
    cr_expect_eq(rs_latch_timedwait(lw, &dl), ETIMEDOUT);
    cr_expect_eq(count_of(lw), 5);

    pthread_join(w1.th, NULL);
    pthread_join(w2.th, NULL);
    rs_latch_destroy(l);
    rs_latch_destroy(lw);
    rs_client_close(c);
    rs_client_close(cw);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 8. Keys expire without activity; a waiter keeps them alive                             */

Test(latch, ttl_and_refresh)
{
    rs__latch_ttl_ms = 1200; /* this test's worker process only */
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *cw = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, "tr", 1);
    long long ttl = ts_cmd_int(&s, "PTTL rs:{tr}:latch");
    cr_expect(ttl > 0 && ttl <= 1200, "PTTL after init: %lld", ttl);

    rs_latch_t *lw = new_latch(cw, "tr", 0);
    waiter_t w;
    waiter_start(&w, lw, 0);
    tu_sleep_ms(3500); /* nearly three TTLs: only the waiter's re-checks keep the key */
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{tr}:latch"), 1, "the waiter did not keep it alive");
    cr_expect_eq(atomic_load(&w.done), 0, "wait returned early: %d %s", w.rc, w.err);
    cr_assert_eq(rs_latch_count_down(l), 0);
    cr_expect(tu_wait_atomic(&w.done, 1, 5000), "not woken");
    cr_expect_eq(w.rc, 0, "wait: %d %s", w.rc, w.err);
    ttl = ts_cmd_int(&s, "PTTL rs:{tr}:latch:ids");
    cr_expect(ttl > 0 && ttl <= 1200, "PTTL of the ids after opening: %lld", ttl);

    /* nobody active: both keys go; the latch is then as if never armed */
    tu_sleep_ms(2000);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{tr}:latch rs:{tr}:latch:ids"), 0,
                 "keys outlived their TTL");
    cr_expect_eq(rs_latch_count_down(l), ENOENT, "count_down on an expired latch");
    unsigned n;
    cr_expect_eq(rs_latch_getcount(l, &n), ENOENT, "getcount on an expired latch");

    pthread_join(w.th, NULL);
    rs_latch_destroy(l);
    rs_latch_destroy(lw);
    rs_client_close(c);
    rs_client_close(cw);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 9. Foreign keys: WRONGTYPE, nothing written                                            */

Test(latch, error_wrongtype)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    char buf[128];
    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SET rs:{w}:latch foreign"));

    rs_latch_t *l = (rs_latch_t *)&s;
    int rc = rs_latch_init(&l, c, "w", 3);
    cr_expect_eq(rc, RS_ESERVER, "init over a foreign string key: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_null(l, "*out after a failed init");
    l = new_latch(c, "w", 0); /* attaching asks nothing */
    cr_expect_eq(rs_latch_count_down(l), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    unsigned n;
    cr_expect_eq(rs_latch_getcount(l, &n), RS_ESERVER);
    cr_expect_eq(rs_latch_rearm(l, 2), RS_ESERVER);
    struct timespec dl = tu_abs_in(2000);
    cr_expect_eq(rs_latch_timedwait(l, &dl), RS_ESERVER);
    cr_expect_eq(rs_latch_wait(l), RS_ESERVER);
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "GET rs:{w}:latch"), "foreign");
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w}:latch"), -1, "the foreign key got a TTL");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w}:latch:ids"), 0, "a failed call wrote keys");

    /* a foreign call-id key: the count does not move */
    rs_latch_t *l2 = new_latch(c, "w2", 2);
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{w2}:latch:ids x"), 1);
    cr_expect_eq(rs_latch_count_down(l2), RS_ESERVER);
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{w2}:latch n"), 2, "the count moved");
    cr_expect_eq(ts_cmd_int(&s, "LLEN rs:{w2}:latch:ids"), 1);
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w2}:latch:ids"), -1, "the foreign key got a TTL");

    rs_latch_destroy(l);
    rs_latch_destroy(l2);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10. Closing the client ends a blocked wait                                              */

Test(latch, close_cancels_wait)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, "cc", 1);
    waiter_t w;
    waiter_start(&w, l, 0);
    cr_assert(wait_numsub(&s, "rs:{cc}:latch", 1, 10000));
    rs_client_close(c);
    cr_expect(tu_wait_atomic(&w.done, 1, 5000), "close did not end the wait");
    cr_expect_eq(w.rc, ECANCELED, "wait after close: %d %s", w.rc, w.err);
    pthread_join(w.th, NULL);
    cr_expect_eq(rs_latch_destroy(l), 0);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 11. Names with braces, spaces and line breaks: keys and channel still match            */

Test(latch, odd_names)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *cw = tu_open_client(&s, 2000, 2000, NULL);
    const char *names[] = {"}x", "a b\r\n{c}", "\\"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        rs_latch_t *l = new_latch(c, names[i], 1);
        rs_latch_t *lw = new_latch(cw, names[i], 0);
        waiter_t w;
        waiter_start(&w, lw, 20000);
        char chan[64];
        snprintf(chan, sizeof chan, "rs:{%s%s}:latch",
                 names[i][0] == '}' || names[i][0] == '\\' ? "\\" : "", names[i]);
        cr_expect(wait_numsub(&s, chan, 1, 10000), "%s: not subscribed to %s", names[i], chan);
        cr_expect_eq(atomic_load(&w.done), 0, "%s: wait returned early: %d %s", names[i], w.rc,
                     w.err);
        cr_expect_eq(rs_latch_count_down(l), 0);
        cr_expect(tu_wait_atomic(&w.done, 1, 5000), "%s: not woken", names[i]);
        cr_expect_eq(w.rc, 0, "%s: wait: %d %s", names[i], w.rc, w.err);
        pthread_join(w.th, NULL);
        rs_latch_destroy(l);
        rs_latch_destroy(lw);
    }
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 2 * (long long)(sizeof names / sizeof names[0]));
    rs_client_close(c);
    rs_client_close(cw);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 12. An opening published while the subscriber was cut off is not missed               */

Test(latch, subscriber_reconnect)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *cw = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, "rc", 1);
    rs_latch_t *lw = new_latch(cw, "rc", 0);
    waiter_t w;
    waiter_start(&w, lw, 0);
    cr_assert(wait_numsub(&s, "rs:{rc}:latch", 1, 10000));
    cr_assert_geq(ts_cmd_int(&s, "CLIENT KILL TYPE pubsub"), 1);
    cr_assert_eq(rs_latch_count_down(l), 0); /* most likely published to nobody */
    cr_expect(tu_wait_atomic(&w.done, 1, 5000), "the opening was missed after a reconnect");
    cr_expect_eq(w.rc, 0, "wait: %d %s", w.rc, w.err);
    rs_client_close(cw);
    pthread_join(w.th, NULL);
    rs_latch_destroy(l);
    rs_latch_destroy(lw);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 13. The script itself: retried calls, replies, pruning                                 */

/* EVAL of the latch script on name's keys; window NULL: "600000". */
static redisReply *lx(redisContext *k, const char *name, const char *op, const char *id,
                      const char *count, const char *window)
{
    char keys[2][64];
    snprintf(keys[0], sizeof keys[0], "rs:{%s}:latch", name);
    snprintf(keys[1], sizeof keys[1], "rs:{%s}:latch:ids", name);
    const char *argv[] = {"EVAL", (const char *)rs_script_latch.body, "2", keys[0], keys[1],
                          op, "tok", id, "5000", "rs:client:", "t", "100", "5000", count,
                          "60000", window ? window : "600000"};
    size_t n = sizeof argv / sizeof argv[0], lens[sizeof argv / sizeof argv[0]];
    for (size_t i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_latch.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, (int)n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    return r;
}

static long long lx_int(redisContext *k, const char *name, const char *op, const char *id,
                        const char *count)
{
    redisReply *r = lx(k, name, op, id, count, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d (%s)", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* An array reply of integers into v[0..n-1]; returns the element count. */
static size_t lx_arr(redisContext *k, const char *name, const char *op, const char *count,
                     long long *v, size_t n)
{
    redisReply *r = lx(k, name, op, "x:0", count, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "%s: reply type %d (%s)", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    size_t m = r->elements;
    for (size_t i = 0; i < m && i < n; i++) {
        cr_assert_eq(r->element[i]->type, REDIS_REPLY_INTEGER);
        v[i] = r->element[i]->integer;
    }
    freeReplyObject(r);
    return m;
}

Test(latch, script_idempotence)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    long long v[3];

    /* never armed */
    cr_expect_eq(lx_arr(k, "sc", "get", "0", v, 3), 3);
    cr_expect(v[0] == 0 && v[1] == 0 && v[2] == 0, "get: {%lld %lld %lld}", v[0], v[1], v[2]);
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), -1, "down, never armed");
    cr_expect_eq(lx_arr(k, "sc", "init", "0", v, 2), 2);
    cr_expect(v[0] == 0 && v[1] == -1, "init 0: {%lld %lld}", v[0], v[1]);
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "nothing written for a never-armed latch");

    /* arming, and a late init */
    lx_arr(k, "sc", "init", "3", v, 2);
    cr_expect(v[0] == 1 && v[1] == 3, "init 3: {%lld %lld}", v[0], v[1]);
    lx_arr(k, "sc", "init", "7", v, 2);
    cr_expect(v[0] == 0 && v[1] == 3, "init 7 on an armed latch: {%lld %lld}", v[0], v[1]);

    /* a count-down sent twice counts once */
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), 2);
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), 2, "retried count-down counted twice");
    cr_expect_eq(lx_int(k, "sc", "down", "A:2", "0"), 1);
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{sc}:latch:ids"), 2);

    /* a rearm sent twice applies once, even after count-downs in between; a count-down
     * from before the rearm sent again is not applied to the new arming */
    cr_expect_eq(lx_int(k, "sc", "rearm", "R:1", "5"), 5);
    cr_expect_eq(lx_int(k, "sc", "down", "A:3", "0"), 4);
    cr_expect_eq(lx_int(k, "sc", "rearm", "R:1", "5"), 4, "retried rearm applied twice");
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), 4, "old count-down applied again");

    /* the opening: one PUBLISH on the latch's channel, openings counted */
    long long pub = publishes(&s);
    cr_expect_eq(lx_int(k, "sc", "down", "B:1", "0"), 3);
    cr_expect_eq(lx_int(k, "sc", "down", "B:2", "0"), 2);
    cr_expect_eq(lx_int(k, "sc", "down", "B:3", "0"), 1);
    cr_expect_eq(publishes(&s), pub, "published before the opening");
    cr_expect_eq(lx_int(k, "sc", "down", "B:4", "0"), 0);
    cr_expect_eq(publishes(&s), pub + 1, "one PUBLISH per opening");
    cr_expect_eq(lx_int(k, "sc", "down", "B:4", "0"), 0);
    cr_expect_eq(lx_int(k, "sc", "down", "B:5", "0"), 0, "count-down at 0");
    cr_expect_eq(publishes(&s), pub + 1, "published again at 0");
    lx_arr(k, "sc", "get", "0", v, 3);
    cr_expect(v[0] == 1 && v[1] == 0 && v[2] == 1, "get: {%lld %lld %lld}", v[0], v[1], v[2]);

    /* a count-down that was a no-op at 0, sent again after a rearm, stays a no-op */
    cr_expect_eq(lx_int(k, "sc", "rearm", "R:2", "2"), 2);
    cr_expect_eq(lx_int(k, "sc", "down", "B:5", "0"), 2, "no-op count-down applied later");
    lx_arr(k, "sc", "get", "0", v, 3);
    cr_expect(v[0] == 1 && v[1] == 2 && v[2] == 1, "get: {%lld %lld %lld}", v[0], v[1], v[2]);
    lx_arr(k, "sc", "init", "9", v, 2);
    cr_expect(v[0] == 0 && v[1] == 2, "init on a rearmed latch: {%lld %lld}", v[0], v[1]);

    /* TTLs: set on both keys by every call */
    long long t1 = ts_cmd_int(&s, "PTTL rs:{sc}:latch"), t2 = ts_cmd_int(&s, "PTTL rs:{sc}:latch:ids");
    cr_expect(t1 > 0 && t1 <= 60000, "PTTL latch %lld", t1);
    cr_expect(t2 > 0 && t2 <= 60000, "PTTL ids %lld", t2);

    /* ids past the window are pruned when a new one is recorded */
    tu_sleep_ms(30);
    redisReply *r = lx(k, "sc", "down", "C:1", "0", "10");
    cr_expect_eq(r->type, REDIS_REPLY_INTEGER);
    cr_expect_eq(r->integer, 1);
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{sc}:latch:ids"), 1, "old ids not pruned");

    /* bad calls are refused before any write */
    r = lx(k, "sc", "rearm", "R:3", "0", NULL);
    cr_expect_eq(r->type, REDIS_REPLY_ERROR, "rearm 0 accepted");
    freeReplyObject(r);
    r = lx(k, "sc", "frob", "R:4", "0", NULL);
    cr_expect_eq(r->type, REDIS_REPLY_ERROR, "unknown op accepted");
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{sc}:latch n"), 1);
    redisFree(k);
    ts_server_stop(&s);
}
