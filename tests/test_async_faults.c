/*
 * test_async_faults.c - the event-loop API when things break (suite "async"; moved from
 * test_async.c, code unchanged; shared helpers in test_async.h):
 *   conn_killed, redis_restart   100 requests pending when the connections are killed or
 *                                Redis restarts: each done once, grants never overlap
 *   script_flush                 SCRIPT FLUSH under pending requests: NOSCRIPT handled
 *   inflight_resent              calls sent to a stopped server restarted empty: re-sent,
 *                                each granted once
 *   stalled_server               a server that stops answering: dropped after timeout_ms,
 *                                what was on it re-sent
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"
#include "test_async.h"


/* ---- failures ----------------------------------------------------------------------------- */

#define NFAIL 100


static void failure_run(int restart)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 5000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 5000, NULL);
    rs_mutex_t *m2;
    rs_hold_t *h;
    rs_mutex_t *m = mutex_held_by(c, c2, "flt", &m2, &h);
    static tally_t t;
    static treq_t r[NFAIL];
    tally_pend(m, &t, r, NFAIL);
    cr_assert(tu_wait_zcard(&s, "mutex", "flt", NFAIL, 10000));
    if (restart) {
        cr_assert_eq(ts_server_restart(&s), 0);
    } else {
        long long k = ts_cmd_int(&s, "CLIENT KILL TYPE normal");
        cr_assert_gt(k, 0, "nothing killed");
        k = ts_cmd_int(&s, "CLIENT KILL TYPE pubsub");
        cr_assert_gt(k, 0, "no subscriber killed");
    }
    rs_hold_release(h); /* 0, or RS_ELOST after a restart */
    cr_assert(loop_until(c, &t.ran, NFAIL, 60000), "ran %d of %d (ok %d, errors %d, last %d)",
              t.ran, NFAIL, t.ok, t.errs, t.last_rc);
    for (int i = 0; i < NFAIL; i++)
        cr_expect_eq(t.each[i], 1, "request %d ran %d times", i, t.each[i]);
    cr_expect_eq(t.ok, NFAIL, "ok %d errors %d (last %d: %s)", t.ok, t.errs, t.last_rc,
                 rs_strerror(t.last_rc));
    cr_expect_eq(t.overlap, 0);
    cr_expect_eq(rs_mutex_trylock(m2), 0, "the mutex is free at the end");
    rs_mutex_unlock(m2);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c2);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(async, conn_killed)
{
    failure_run(0);
}

Test(async, redis_restart)
{
    failure_run(1);
}

/* ---- the script cache lost ------------------------------------------------------------------ */

Test(async, script_flush)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m[30];
    char name[32];
    for (int i = 0; i < 30; i++) {
        snprintf(name, sizeof name, "sf%d", i);
        cr_assert_eq(rs_mutex_init(&m[i], c, name), 0);
    }
    for (int round = 0; round < 2; round++) {
        /* round 0: nothing loaded yet; round 1: loaded, then flushed */
        if (round == 1) {
            char ok[16] = "";
            ts_cmd_str(&s, ok, sizeof ok, "SCRIPT FLUSH");
            cr_assert_str_eq(ok, "OK");
        }
        static many_t t;
        memset(&t, 0, sizeof t);
        static many_req_t r[30];
        rs_request_t *req;
        for (int i = 0; i < 30; i++) { /* pipelined: many NOSCRIPT in one batch */
            r[i].t = &t;
            r[i].i = i;
            cr_assert_eq(rs_mutex_acquire_async(m[i], NULL, many_done, &r[i], &req), 0);
        }
        cr_assert(loop_until(c, &t.ran, 30, 10000), "round %d: ran %d of 30", round, t.ran);
        cr_expect_eq(t.ok, 30, "round %d: ok %d other %d", round, t.ok, t.other);
        for (int i = 0; i < 30; i++)
            cr_expect_eq(t.ran_each[i], 1);
    }
    for (int i = 0; i < 30; i++)
        rs_mutex_destroy(m[i]);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- replies lost in flight ----------------------------------------------------------------- */

Test(async, inflight_resent)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 5000, NULL);
    rs_mutex_t *m[40];
    char name[32];
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "if%d", i);
        cr_assert_eq(rs_mutex_init(&m[i], c, name), 0);
    }
    /* the I/O thread and the subscriber up, the script loaded */
    warm_up(c, m[0]);
    rs_request_t *req;
    /* the server stops answering: the calls are sent, their replies never come; then it
     * dies and comes back empty, and each is sent again on the new connection */
    ts_server_pause(&s);
    static many_t t;
    memset(&t, 0, sizeof t);
    static many_req_t r[40];
    for (int i = 0; i < 40; i++) {
        r[i].t = &t;
        r[i].i = i;
        cr_assert_eq(rs_mutex_acquire_async(m[i], NULL, many_done, &r[i], &req), 0);
    }
    tu_sleep_ms(200);
    cr_expect_eq(rs_client_dispatch(c), 0, "completed while the server was stopped");
    cr_assert_eq(ts_server_restart(&s), 0);
    cr_assert(loop_until(c, &t.ran, 40, 30000), "ran %d of 40 (ok %d, other %d)", t.ran, t.ok,
              t.other);
    cr_expect_eq(t.ok, 40, "ok %d timedout %d other %d", t.ok, t.timedout, t.other);
    for (int i = 0; i < 40; i++) {
        cr_expect_eq(t.ran_each[i], 1);
        snprintf(name, sizeof name, "if%d", i);
        char owner[64] = "";
        ts_cmd_str(&s, owner, sizeof owner, "HGET rs:{%s}:mutex o", name);
        cr_expect_str_eq(owner, "", "%s still held", name);
    }
    for (int i = 0; i < 40; i++)
        rs_mutex_destroy(m[i]);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- a server that stops answering ---------------------------------------------------------- */

Test(async, stalled_server)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 800, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "stall"), 0);
    warm_up(c, m);
    rs_request_t *req;
    /* stopped (SIGSTOP): the calls are sent and never answered; without a bound they would
     * wait forever, deadline or not */
    ts_server_pause(&s);
    static many_t t;
    memset(&t, 0, sizeof t);
    static many_req_t r[10];
    struct timespec dl = tu_abs_in(300);
    for (int i = 0; i < 10; i++) {
        r[i].t = &t;
        r[i].i = i;
        cr_assert_eq(rs_mutex_acquire_async(m, i % 2 ? &dl : NULL, many_done, &r[i], &req), 0);
    }
    int done = loop_until(c, &t.ran, 10, 15000);
    ts_server_resume(&s);
    cr_assert(done, "ran %d of 10 while the server was stopped", t.ran);
    for (int i = 0; i < 10; i++)
        cr_expect_eq(t.ran_each[i], 1);
    cr_expect_eq(t.ok, 0);
    cr_expect_eq(t.other, 10, "RS_ECONN expected: timedout %d ok %d", t.timedout, t.ok);
    /* the server back: a new request is served */
    one_t w2 = {0};
    cr_assert_eq(rs_mutex_acquire_async(m, NULL, one_done, &w2, &req), 0);
    cr_assert(loop_until(c, &w2.ran, 1, 10000));
    cr_expect_eq(w2.rc, 0, "rc %d", w2.rc);
    if (w2.rc == 0)
        rs_hold_release(w2.hold);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}
