/*
 * test_async_errtext.c - what a done callback reads from rs_client_lasterror() (suite
 * "async_err"): the message that explains its request's rc ("" for rc 0), made on the I/O
 * thread and handed to the thread that dispatches; after rs_client_dispatch the thread's
 * own last message is back. Each test first sets that message with a failing blocking call
 * (EINVAL, an empty name), so a callback that read the thread's message instead of its
 * request's would see "name is empty".
 *
 *   ok_is_empty            a grant: "" inside done; the earlier message back after dispatch
 *   deadline_names_it      a deadline while another client holds the name: ETIMEDOUT, "deadline
 *                          passed after N ms of waiting" with N the time from the call to the
 *                          deadline (at least) and to done (at most), and the name
 *   cancel_says_so         rs_request_cancel of a queued request: ECANCELED, "rs_request_cancel"
 *   close_says_so          rs_client_close with a request queued: ECANCELED inside the close,
 *                          "rs_client_close"
 *   server_killed          the server killed by pid while a request waits: RS_ECONN, the text
 *                          names the server's address or the connection
 *   release_of_lost_hold   rs_hold_release_async of a hold whose key was deleted: RS_ELOST,
 *                          "had been lost"
 *   busy_past_deadline     a past deadline on a held name: EBUSY, "busy"
 *   cancel_after_completion  rs_request_cancel of an EBUSY completion not dispatched yet:
 *                          ECANCELED, and "rs_request_cancel", not the busy text
 *   two_in_one_dispatch    a deadline and a cancel completing in the same dispatch: each done
 *                          reads its own text
 *   redlock_no_quorum      under redlock:// two masters of three killed, a past deadline:
 *                          RS_ECONN, "only 1 of 3 redlock masters answered", naming the one
 *                          that did
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"
#include "test_async.h"
#include "test_redlock.h"

TestSuite(async_err, .timeout = 120);

/* What done saw: rc, and rs_client_lasterror() read inside it. */
typedef struct seen {
    int ran, rc;
    rs_hold_t *hold;
    char text[512];
} seen_t;

static void seen_done(int rc, rs_hold_t *hold, void *arg)
{
    seen_t *s = arg;
    s->ran++;
    s->rc = rc;
    s->hold = hold;
    snprintf(s->text, sizeof s->text, "%s", rs_client_lasterror(NULL));
}

/* Sets this thread's last message with a failing blocking call: "name is empty". */
static void set_prior(rs_client_t *c)
{
    rs_mutex_t *bad = NULL;
    cr_assert_eq(rs_mutex_init(&bad, c, ""), EINVAL);
    cr_assert_str_eq(rs_client_lasterror(c), "name is empty");
}

/* The thread's message is the one set_prior left. */
static void expect_prior(rs_client_t *c)
{
    cr_expect_str_eq(rs_client_lasterror(c), "name is empty",
                     "after dispatch the thread's message is \"%s\"", rs_client_lasterror(c));
}

static void expect_text(const seen_t *s, int rc, const char *word)
{
    cr_log_info("done(%d): \"%s\"", s->rc, s->text);
    cr_expect_eq(s->ran, 1);
    cr_expect_eq(s->rc, rc, "rc %d (%s), not %d", s->rc, s->text, rc);
    cr_expect_not_null(strstr(s->text, word), "inside done: \"%s\", no \"%s\"", s->text, word);
}

/* Dispatches c until s's done ran (within 15 s). */
static void wait_done(rs_client_t *c, seen_t *s)
{
    cr_assert(loop_until(c, &s->ran, 1, 15000), "no completion within 15 s");
}

Test(async_err, ok_is_empty)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 2000, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "e-ok"), 0);
    seen_t o = {0};
    rs_request_t *req;
    set_prior(c);
    cr_assert_eq(rs_mutex_acquire_async(m, NULL, seen_done, &o, &req), 0);
    wait_done(c, &o);
    expect_prior(c);
    cr_assert_eq(o.rc, 0, "rc %d: %s", o.rc, o.text);
    cr_expect_str_eq(o.text, "", "inside done after a grant: \"%s\"", o.text);
    seen_t r = {0};
    set_prior(c);
    cr_assert_eq(rs_hold_release_async(o.hold, seen_done, &r), 0);
    wait_done(c, &r);
    expect_prior(c);
    cr_expect_eq(r.rc, 0);
    cr_expect_str_eq(r.text, "", "inside done after a release: \"%s\"", r.text);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* A server of its own, a name that client c2 holds (lease c2_lease_ms; its hold h, its
 * handle m2) and the same name on client c (handle m), both with timeout_ms. */
typedef struct contest {
    ts_server_t s;
    rs_client_t *c, *c2;
    rs_mutex_t *m, *m2;
    rs_hold_t *h;
} contest_t;

static void contest_up(contest_t *t, const char *name, long c2_lease_ms, long timeout_ms)
{
    tu_start_server(&t->s);
    t->c = tu_open_client(&t->s, 3000, timeout_ms, NULL);
    t->c2 = tu_open_client(&t->s, c2_lease_ms, timeout_ms, NULL);
    t->m = mutex_held_by(t->c, t->c2, name, &t->m2, &t->h);
}

/* c2's hold released (it must return 0 if must_release), everything closed (c unless the
 * test closed it and set it NULL), the server stopped. */
static void contest_down(contest_t *t, int must_release)
{
    int rc = rs_hold_release(t->h);
    if (must_release)
        cr_assert_eq(rc, 0);
    rs_mutex_destroy(t->m);
    rs_mutex_destroy(t->m2);
    rs_client_close(t->c2);
    if (t->c)
        rs_client_close(t->c);
    ts_server_stop(&t->s);
}

Test(async_err, deadline_names_it)
{
    contest_t t;
    contest_up(&t, "e-deadline", 30000, 2000);
    seen_t o = {0};
    rs_request_t *req;
    set_prior(t.c);
    long long t0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(300);
    cr_assert_eq(rs_mutex_acquire_async(t.m, &dl, seen_done, &o, &req), 0);
    long long t1 = tu_mono_ms();
    wait_done(t.c, &o);
    long long t2 = tu_mono_ms();
    expect_prior(t.c);
    expect_text(&o, ETIMEDOUT, "deadline passed");
    cr_expect_not_null(strstr(o.text, "e-deadline"), "no name in \"%s\"", o.text);
    /* the request was made between t0 and t1 and its deadline is t0 + 300 or later; the
     * message was written before t2 (3 and 2 ms: the two sides' whole-ms clocks) */
    long n = tu_waited_ms(o.text);
    cr_expect(n >= 300 - (t1 - t0) - 3 && n <= t2 - t0 + 2,
              "\"%s\": %ld ms of waiting, not %lld to %lld", o.text, n, 300 - (t1 - t0) - 3,
              t2 - t0 + 2);
    contest_down(&t, 1);
}

Test(async_err, cancel_says_so)
{
    contest_t t;
    contest_up(&t, "e-cancel", 30000, 2000);
    seen_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(t.m, NULL, seen_done, &o, &req), 0);
    cr_assert(tu_wait_zcard(&t.s, "mutex", "e-cancel", 1, 5000), "the request did not queue");
    cr_assert_eq(rs_request_cancel(req), 0);
    set_prior(t.c);
    wait_done(t.c, &o);
    expect_prior(t.c);
    expect_text(&o, ECANCELED, "rs_request_cancel");
    cr_expect_not_null(strstr(o.text, "e-cancel"), "no name in \"%s\"", o.text);
    contest_down(&t, 1);
}

Test(async_err, close_says_so)
{
    contest_t t;
    contest_up(&t, "e-close", 30000, 2000);
    seen_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(t.m, NULL, seen_done, &o, &req), 0);
    cr_assert(tu_wait_zcard(&t.s, "mutex", "e-close", 1, 5000), "the request did not queue");
    cr_assert_eq(rs_client_close(t.c), 0);
    t.c = NULL;
    cr_assert_eq(o.ran, 1, "done did not run inside the close");
    expect_text(&o, ECANCELED, "rs_client_close");
    contest_down(&t, 1);
}

Test(async_err, server_killed)
{
    contest_t t;
    contest_up(&t, "e-killed", 1000, 500);
    seen_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(t.m, NULL, seen_done, &o, &req), 0);
    cr_assert(tu_wait_zcard(&t.s, "mutex", "e-killed", 1, 5000), "the request did not queue");
    ts_server_kill(&t.s); /* SIGKILL by pid: the request waits on a dead server */
    set_prior(t.c);
    wait_done(t.c, &o);
    expect_prior(t.c);
    cr_log_info("done(%d): \"%s\"", o.rc, o.text);
    cr_expect_eq(o.rc, RS_ECONN, "rc %d (%s)", o.rc, o.text);
    char addr[64];
    snprintf(addr, sizeof addr, "%s:%d", TS_HOST, t.s.port);
    cr_expect(strstr(o.text, addr) || strstr(o.text, "connection"),
              "inside done: \"%s\" names neither %s nor the connection", o.text, addr);
    contest_down(&t, 0); /* the release: RS_ELOST or RS_ECONN, the server is gone */
}

Test(async_err, release_of_lost_hold)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 30000, 2000, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "e-lost"), 0);
    seen_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(m, NULL, seen_done, &o, &req), 0);
    wait_done(c, &o);
    cr_assert_eq(o.rc, 0, "rc %d: %s", o.rc, o.text);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{e-lost}:mutex"), 1, "no key deleted");
    seen_t r = {0};
    set_prior(c);
    cr_assert_eq(rs_hold_release_async(o.hold, seen_done, &r), 0);
    wait_done(c, &r);
    expect_prior(c);
    expect_text(&r, RS_ELOST, "had been lost");
    cr_expect_not_null(strstr(r.text, "e-lost"), "no name in \"%s\"", r.text);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(async_err, busy_past_deadline)
{
    contest_t t;
    contest_up(&t, "e-busy", 30000, 2000);
    seen_t o = {0};
    rs_request_t *req;
    struct timespec past = tu_abs_in(-1000);
    set_prior(t.c);
    cr_assert_eq(rs_mutex_acquire_async(t.m, &past, seen_done, &o, &req), 0);
    wait_done(t.c, &o);
    expect_prior(t.c);
    expect_text(&o, EBUSY, "busy");
    contest_down(&t, 1);
}

Test(async_err, cancel_after_completion)
{
    contest_t t;
    contest_up(&t, "e-late-cancel", 30000, 2000);
    seen_t o = {0};
    rs_request_t *req;
    struct timespec past = tu_abs_in(-1000);
    cr_assert_eq(rs_mutex_acquire_async(t.m, &past, seen_done, &o, &req), 0);
    /* EBUSY is queued for dispatch; the cancel turns it into ECANCELED, and its message */
    cr_assert(wait_readable(t.c, 10000), "no completion queued");
    cr_assert_eq(rs_request_cancel(req), 0);
    set_prior(t.c);
    wait_done(t.c, &o);
    expect_prior(t.c);
    expect_text(&o, ECANCELED, "rs_request_cancel");
    contest_down(&t, 1);
}

/* Two requests, a deadline and a cancel: whether both completions came in one dispatch. */
static int two_round(rs_client_t *c, const ts_server_t *s, rs_mutex_t *ma, rs_mutex_t *mb)
{
    seen_t a = {0}, b = {0};
    rs_request_t *ra, *rb;
    struct timespec dl = tu_abs_in(200);
    cr_assert_eq(rs_mutex_acquire_async(ma, &dl, seen_done, &a, &ra), 0);
    cr_assert_eq(rs_mutex_acquire_async(mb, NULL, seen_done, &b, &rb), 0);
    cr_assert(tu_wait_zcard(s, "mutex", "e-two-b", 1, 5000), "b did not queue");
    cr_assert_eq(rs_request_cancel(rb), 0);
    /* both leave their queues; their completions follow within the same pass or the next */
    cr_assert(tu_wait_zcard(s, "mutex", "e-two-a", 0, 5000));
    cr_assert(tu_wait_zcard(s, "mutex", "e-two-b", 0, 5000));
    cr_assert(wait_readable(c, 5000));
    tu_sleep_ms(300);
    set_prior(c);
    int n = rs_client_dispatch(c);
    expect_prior(c);
    int both = n == 2;
    cr_assert(loop_until(c, &b.ran, 1, 10000) && loop_until(c, &a.ran, 1, 10000));
    expect_text(&a, ETIMEDOUT, "deadline passed");
    cr_expect_not_null(strstr(a.text, "e-two-a"), "a: \"%s\"", a.text);
    expect_text(&b, ECANCELED, "rs_request_cancel");
    cr_expect_not_null(strstr(b.text, "e-two-b"), "b: \"%s\"", b.text);
    return both;
}

Test(async_err, two_in_one_dispatch)
{
    contest_t t;
    contest_up(&t, "e-two-a", 30000, 2000);
    rs_mutex_t *mb2;
    rs_hold_t *hb;
    rs_mutex_t *mb = mutex_held_by(t.c, t.c2, "e-two-b", &mb2, &hb);
    int both = 0;
    for (int i = 0; i < 5 && !both; i++)
        both = two_round(t.c, &t.s, t.m, mb);
    cr_expect(both, "the two completions never came in one dispatch");
    cr_assert_eq(rs_hold_release(hb), 0);
    rs_mutex_destroy(mb);
    rs_mutex_destroy(mb2);
    contest_down(&t, 1);
}

Test(async_err, redlock_no_quorum)
{
    masters_t ms;
    masters_up(&ms);
    rs_client_t *c = rl_open(ms.url, NULL, 3000, 500);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "e-rl"), 0);
    ts_server_kill(&ms.s[1]);
    ts_server_kill(&ms.s[2]);
    seen_t o = {0};
    rs_request_t *req;
    /* a past deadline: no subscription (whose refusal would say "cannot subscribe"), rounds
     * without a quorum until timeout_ms */
    struct timespec past = tu_abs_in(-1000);
    set_prior(c);
    cr_assert_eq(rs_mutex_acquire_async(m, &past, seen_done, &o, &req), 0);
    wait_done(c, &o);
    expect_prior(c);
    expect_text(&o, RS_ECONN, "only 1 of 3 redlock masters answered");
    char addr[64];
    snprintf(addr, sizeof addr, "answered: %s:%d)", TS_HOST, ms.s[0].port);
    cr_expect_not_null(strstr(o.text, addr), "\"%s\" does not name %s", o.text, addr);
    rs_mutex_destroy(m);
    rs_client_close(c);
    masters_down(&ms);
}
