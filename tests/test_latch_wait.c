/*
 * test_latch_wait.c - the countdown latch's waits (suite latch, moved from test_latch.c):
 * forked waiters that none returns early and one PUBLISH opens for all, a wait before the
 * arming, waiters that do not poll, an opening published while the subscriber was cut off.
 */
#include "test_latch.h"

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
