/*
 * test_latch.c - Criterion tests of the distributed countdown latch (rs_latch_*) through its
 * public API: arming, counting down and opening, a latch never armed, bad input, rearm,
 * close, odd names. Waiting and wake-ups: test_latch_wait.c; the keys' TTLs, foreign keys
 * and the Lua script called directly: test_latch_script.c; shared helpers: test_latch.h.
 *
 * Every test starts its own redis-server on a free port and stops it. Waiters run as
 * threads (results recorded for the main thread, which alone makes Criterion assertions) or
 * as forked processes that open their own client after fork() and report through the test's
 * redis and their exit status. "Did not return early" is checked by comparing each waiter's
 * CLOCK_REALTIME return time with the time just before the count-down that opened the latch.
 */
#include "test_latch.h"

TestSuite(latch, .timeout = 60);

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
