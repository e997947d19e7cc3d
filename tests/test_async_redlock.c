/*
 * test_async_redlock.c - the event-loop API under redlock:// (issue 16): the mutex's
 * _async acquisition, rs_hold_release_async and rs_request_cancel on three plain
 * redis-servers (each test its own), each call on every master's pipeline of the client's
 * I/O thread, decided by quorum as the blocking calls are (lib/async_rl.c).
 *
 *   grant_release         granted through dispatch (never inside the call), the hold on a
 *                         quorum of masters with the largest token; rs_hold_release_async
 *                         reports 0 through dispatch and frees it on every master (a hold
 *                         of the blocking rs_mutex_acquire too)
 *   many_names            100 requests pending over 5 held names: granted one at a time per
 *                         name, each token taken by a fenced store (a grant below an earlier
 *                         one, or two at once, fails it), each done once, released async
 *   one_master_killed     requests waiting while a master is killed: every one granted in
 *                         turn by the other two (quorum 2 of 3)
 *   majority_down         two of three masters killed: a request (no deadline, a far one, a
 *                         past one) ends with RS_ECONN within timeout_ms (plus a margin)
 *   cancel_races_grant    a cancel right behind the release that grants (100 rounds):
 *                         done(ECANCELED) once, the grant released on every master
 *   deadlines_fire        requests on a held name end with ETIMEDOUT after their deadline and
 *                         leave every master's queue; a past deadline makes one try (EBUSY)
 *   excludes_blocking     an async hold and a thread's rs_mutex_lock on one name exclude
 *                         each other, both ways
 *   close_pending         rs_client_close with pending requests and an undispatched grant:
 *                         every done(ECANCELED) inside close, the queues empty on every
 *                         master, the grant released
 * Before the event-loop API was offered under Redlock every one of these failed at its
 * first _async call (ENOTSUP). Timing is asserted only as generous "within" bounds.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"
#include "test_async.h"
#include "test_redlock.h"

TestSuite(async_redlock, .timeout = 180);

/* How many masters hold the mutex name (its lock hash has an owner). */
static int held_on(const masters_t *m, const char *name)
{
    int n = 0;
    for (int i = 0; i < NM; i++)
        n += ts_cmd_int(&m->s[i], "HEXISTS rs:{%s}:mutex o", name) == 1;
    return n;
}

/* Whether every live master's queue of name is empty within timeout_ms. */
static int queues_empty(const masters_t *m, const char *name, const int *down, long timeout_ms)
{
    for (int i = 0; i < NM; i++)
        if (!(down && down[i]) && !tu_wait_zcard(&m->s[i], "mutex", name, 0, timeout_ms))
            return 0;
    return 1;
}

static int rel_ran, rel_rc;

static void rel_done(int rc, rs_hold_t *hold, void *arg)
{
    (void)hold, (void)arg;
    rel_ran++;
    rel_rc = rc;
}

/* ---- grant and release ------------------------------------------------------------------- */

Test(async_redlock, grant_release)
{
    masters_t m;
    masters_up(&m);
    rs_client_t *c = rl_open(m.url, NULL, 3000, 2000);
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, c, "gr"), 0);
    for (int round = 0; round < 3; round++) {
        one_t o;
        one_acquire(c, mu, NULL, &o);
        cr_assert_eq(o.rc, 0, "done(%d)", o.rc);
        cr_assert_not_null(o.hold);
        uint64_t f = rs_hold_fence(o.hold), maxf = 0;
        cr_expect_gt(f, 0);
        cr_expect_gt(rs_hold_remaining(o.hold), 0);
        cr_expect_geq(held_on(&m, "gr"), NM / 2 + 1, "held on %d masters", held_on(&m, "gr"));
        for (int i = 0; i < NM; i++) {
            long long fi = ts_cmd_int(&m.s[i], "HGET rs:{gr}:mutex f");
            if (fi > 0 && (uint64_t)fi > maxf)
                maxf = (uint64_t)fi;
        }
        cr_expect_eq(f, maxf, "fence %llu, not the largest of the masters' tokens %llu",
                     (unsigned long long)f, (unsigned long long)maxf);
        if (round < 2) {
            rel_ran = 0;
            rel_rc = -1;
            g_inside = 1;
            cr_assert_eq(rs_hold_release_async(o.hold, rel_done, NULL), 0, "%s",
                         rs_client_lasterror(c));
            g_inside = 0;
            cr_assert(loop_until(c, &rel_ran, 1, 10000), "no release completion");
            cr_expect_eq(rel_ran, 1);
            cr_expect_eq(rel_rc, 0, "release done(%d)", rel_rc);
        } else {
            cr_expect_eq(rs_hold_release(o.hold), 0); /* the blocking release of an async hold */
        }
        cr_expect_eq(held_on(&m, "gr"), 0, "still held after the release");
    }
    /* a hold of the blocking rs_mutex_acquire, released without blocking */
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(mu, NULL, &h), 0, "%s", rs_client_lasterror(c));
    cr_expect_geq(held_on(&m, "gr"), NM / 2 + 1);
    rel_ran = 0;
    rel_rc = -1;
    cr_assert_eq(rs_hold_release_async(h, rel_done, NULL), 0, "%s", rs_client_lasterror(c));
    cr_assert(loop_until(c, &rel_ran, 1, 10000), "no release completion");
    cr_expect_eq(rel_rc, 0, "release done(%d)", rel_rc);
    cr_expect_eq(held_on(&m, "gr"), 0, "still held after the release");
    rs_mutex_destroy(mu);
    rs_client_close(c);
    masters_down(&m);
}

/* ---- many requests over several names ------------------------------------------------------- */

/* The fenced store of every name: master 0, keys of their own (not the lock's). */
static redisContext *g_store;

static redisContext *store_of(fifo_t *x, int name, char *fk, char *ck, size_t len)
{
    (void)x;
    snprintf(fk, len, "store:%d:fence", name);
    snprintf(ck, len, "store:%d:count", name);
    return g_store;
}

Test(async_redlock, many_names)
{
    masters_t m;
    masters_up(&m);
    rs_client_t *c = rl_open(m.url, NULL, 3000, 2000);
    rs_client_t *holder = rl_open(m.url, NULL, 3000, 2000);
    g_store = ts_connect(&m.s[0]);
    cr_assert_not_null(g_store);
    enum { NAMES = 5, PER = 20 };
    rs_mutex_t *mu[NAMES], *hm[NAMES];
    rs_hold_t *hh[NAMES];
    for (int n = 0; n < NAMES; n++) {
        char name[16];
        snprintf(name, sizeof name, "mn%d", n);
        mu[n] = mutex_held_by(c, holder, name, &hm[n], &hh[n]);
    }
    static fifo_t x;
    memset(&x, 0, sizeof x);
    x.store = store_of;
    x.names = NAMES;
    x.per = PER;
    fifo_submit(&x, mu, c);
    cr_expect(loop_until(c, &x.granted, 1, 300) == 0, "granted while held");
    for (int n = 0; n < NAMES; n++)
        cr_assert_eq(rs_hold_release(hh[n]), 0);
    int all = NAMES * PER;
    long long end = tu_mono_ms() + 60000;
    while ((x.granted + x.errors < all || x.released < x.granted) && tu_mono_ms() < end)
        loop_until(c, &x.released, x.released + 1, 200);
    cr_expect_eq(x.granted, all, "granted %d of %d (errors %d, last %d)", x.granted, all,
                 x.errors, x.last_rc);
    cr_expect_eq(x.errors, 0, "last error %d", x.last_rc);
    cr_expect_eq(x.overlaps, 0, "two grants of one name at once");
    cr_expect_eq(x.fence_refused, 0, "a fencing token did not rise");
    cr_expect_eq(x.released, x.granted);
    cr_expect_eq(x.rel_errors, 0);
    for (int i = 0; i < all; i++)
        cr_expect_eq(x.ran[i], 1, "request %d: done ran %d times", i, x.ran[i]);
    for (int n = 0; n < NAMES; n++) {
        redisReply *r = redisCommand(g_store, "GET store:%d:count", n);
        cr_expect(r && r->type == REDIS_REPLY_STRING && atoi(r->str) == PER,
                  "name %d: %s tokens taken, not %d", n, r && r->str ? r->str : "no", PER);
        if (r)
            freeReplyObject(r);
        char name[16];
        snprintf(name, sizeof name, "mn%d", n);
        cr_expect_eq(held_on(&m, name), 0, "%s held after every release", name);
        rs_mutex_destroy(mu[n]);
        rs_mutex_destroy(hm[n]);
    }
    redisFree(g_store);
    rs_client_close(holder);
    rs_client_close(c);
    masters_down(&m);
}

/* ---- masters down ------------------------------------------------------------------------- */

Test(async_redlock, one_master_killed)
{
    masters_t m;
    masters_up(&m);
    rs_client_t *c = rl_open(m.url, NULL, 3000, 1000);
    rs_client_t *holder = rl_open(m.url, NULL, 3000, 1000);
    rs_mutex_t *hm;
    rs_hold_t *h;
    rs_mutex_t *mu = mutex_held_by(c, holder, "k1", &hm, &h);
    static tally_t t;
    static treq_t r[20];
    tally_pend(mu, &t, r, 20);
    /* queued on every master (the subscriber stands, the calls went out) */
    for (int i = 0; i < NM; i++)
        cr_assert(tu_wait_zcard(&m.s[i], "mutex", "k1", 20, 10000), "master %d queued %lld", i,
                  tu_zcard_q(&m.s[i], "mutex", "k1"));
    ts_server_kill(&m.s[2]);
    cr_assert_eq(rs_hold_release(h), 0, "%s", rs_client_lasterror(holder));
    cr_expect(loop_until(c, &t.ran, 20, 60000), "%d of 20 completed", t.ran);
    cr_expect_eq(t.ok, 20, "granted %d, errors %d (last %d)", t.ok, t.errs, t.last_rc);
    cr_expect_eq(t.overlap, 0, "a token did not rise");
    for (int i = 0; i < 20; i++)
        cr_expect_eq(t.each[i], 1, "request %d: done ran %d times", i, t.each[i]);
    /* and a new one on the two that are left */
    one_t o;
    one_acquire(c, mu, NULL, &o);
    cr_expect_eq(o.rc, 0, "done(%d)", o.rc);
    if (o.hold)
        cr_expect_eq(rs_hold_release(o.hold), 0);
    rs_mutex_destroy(mu);
    rs_mutex_destroy(hm);
    rs_client_close(holder);
    rs_client_close(c);
    masters_down(&m);
}

Test(async_redlock, majority_down)
{
    masters_t m;
    masters_up(&m);
    enum { TMO = 1000 };
    rs_client_t *c = rl_open(m.url, NULL, 3000, TMO);
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, c, "md"), 0);
    /* the I/O thread and its connections stand first */
    warm_up(c, mu);
    rs_request_t *req;
    ts_server_kill(&m.s[0]);
    ts_server_kill(&m.s[1]);
    for (int k = 0; k < 3; k++) {
        one_t p = {0};
        long long t0 = tu_mono_ms();
        /* no deadline, one far off, one past (a try: no subscriber needed, its rounds find
         * no quorum): RS_ECONN after timeout_ms */
        struct timespec dl = tu_abs_in(60000), past = {1, 0};
        cr_assert_eq(rs_mutex_acquire_async(mu, k == 0 ? NULL : k == 1 ? &dl : &past, one_done,
                                            &p, &req), 0);
        cr_assert(loop_until(c, &p.ran, 1, TMO + 5000), "no completion within %d ms", TMO + 5000);
        long long took = tu_mono_ms() - t0;
        cr_expect_eq(p.rc, RS_ECONN, "done(%d), not RS_ECONN", p.rc);
        cr_expect_null(p.hold);
        cr_expect_leq(took, TMO + 3000, "RS_ECONN after %lld ms (timeout_ms %d)", took, TMO);
    }
    rs_mutex_destroy(mu);
    rs_client_close(c);
    masters_down(&m);
}

/* ---- cancel against grant ------------------------------------------------------------------- */

Test(async_redlock, cancel_races_grant)
{
    masters_t m;
    masters_up(&m);
    /* a grant that leaked would hold the name for its whole lease, longer than the
     * timedlock below waits */
    rs_client_t *c = rl_open(m.url, NULL, 10000, 2000);
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, c, "race"), 0);
    /* (the grant, if it came, released on every master: the timedlock takes it) */
    for (int round = 0; round < 100; round++)
        cancel_race_round(c, mu, "race", &m.s[round % NM], round, 3000, 4000);
    cr_expect(queues_empty(&m, "race", NULL, 5000), "entries left in a queue");
    cr_expect_eq(held_on(&m, "race"), 0);
    rs_mutex_destroy(mu);
    rs_client_close(c);
    masters_down(&m);
}

/* ---- deadlines ---------------------------------------------------------------------------- */

Test(async_redlock, deadlines_fire)
{
    masters_t m;
    masters_up(&m);
    rs_client_t *c = rl_open(m.url, NULL, 3000, 2000);
    rs_client_t *c2 = rl_open(m.url, NULL, 3000, 2000);
    rs_mutex_t *mu, *m2;
    cr_assert_eq(rs_mutex_init(&mu, c, "dl"), 0);
    cr_assert_eq(rs_mutex_init(&m2, c2, "dl"), 0);
    cr_assert_eq(rs_mutex_lock(m2), 0, "%s", rs_client_lasterror(c2));
    static many_t t;
    static many_req_t r[30];
    long long start = tu_mono_ms();
    struct timespec dl = tu_abs_in(500);
    many_pend(mu, &dl, &t, r, 30);
    cr_assert(loop_until(c, &t.ran, 30, 20000), "ran %d of 30", t.ran);
    cr_expect_eq(t.timedout, 30, "ok %d timedout %d other %d", t.ok, t.timedout, t.other);
    for (int i = 0; i < 30; i++) {
        cr_expect_eq(t.ran_each[i], 1);
        cr_expect_geq(t.at_ms[i] - start, 490, "request %d ended %lld ms after the start", i,
                      t.at_ms[i] - start);
    }
    cr_expect(queues_empty(&m, "dl", NULL, 5000), "entries left in a queue");
    /* a past deadline: one attempt, EBUSY */
    one_t o;
    struct timespec past = {1, 0};
    one_acquire(c, mu, &past, &o);
    cr_expect_eq(o.rc, EBUSY, "done(%d)", o.rc);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    /* free now: a past deadline takes it */
    one_t p;
    one_acquire(c, mu, &past, &p);
    cr_expect_eq(p.rc, 0, "done(%d)", p.rc);
    if (p.hold)
        cr_expect_eq(rs_hold_release(p.hold), 0);
    rs_mutex_destroy(mu);
    rs_mutex_destroy(m2);
    rs_client_close(c2);
    rs_client_close(c);
    masters_down(&m);
}

/* ---- against the blocking calls --------------------------------------------------------------- */

Test(async_redlock, excludes_blocking)
{
    masters_t m;
    masters_up(&m);
    rs_client_t *c = rl_open(m.url, NULL, 3000, 2000);
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, c, "mix"), 0);
    cr_assert_eq(rs_mutex_lock(mu), 0, "%s", rs_client_lasterror(c));
    one_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(mu, NULL, one_done, &o, &req), 0);
    cr_expect_eq(loop_until(c, &o.ran, 1, 500), 0, "granted while a thread holds it");
    uint64_t f1 = rs_mutex_fence(mu);
    cr_assert_eq(rs_mutex_unlock(mu), 0);
    cr_assert(loop_until(c, &o.ran, 1, 10000));
    cr_assert_eq(o.rc, 0, "done(%d)", o.rc);
    cr_expect_gt(rs_hold_fence(o.hold), f1);
    struct timespec dl = tu_abs_in(500);
    cr_expect_eq(rs_mutex_timedlock(mu, &dl), ETIMEDOUT, "the thread got it while the async "
                 "hold is out");
    cr_expect_eq(rs_mutex_trylock(mu), EBUSY);
    uint64_t f2 = rs_hold_fence(o.hold);
    rel_ran = 0;
    cr_assert_eq(rs_hold_release_async(o.hold, rel_done, NULL), 0);
    cr_assert(loop_until(c, &rel_ran, 1, 10000));
    cr_expect_eq(rel_rc, 0);
    dl = tu_abs_in(5000);
    cr_expect_eq(rs_mutex_timedlock(mu, &dl), 0, "%s", rs_client_lasterror(c));
    cr_expect_gt(rs_mutex_fence(mu), f2);
    cr_expect_eq(rs_mutex_unlock(mu), 0);
    rs_mutex_destroy(mu);
    rs_client_close(c);
    masters_down(&m);
}

/* ---- close ---------------------------------------------------------------------------------- */

Test(async_redlock, close_pending)
{
    masters_t m;
    masters_up(&m);
    rs_client_t *c = rl_open(m.url, NULL, 3000, 2000);
    rs_client_t *c2 = rl_open(m.url, NULL, 3000, 2000);
    rs_mutex_t *mu, *m2, *f, *f2;
    cr_assert_eq(rs_mutex_init(&mu, c, "cl"), 0);
    cr_assert_eq(rs_mutex_init(&m2, c2, "cl"), 0);
    cr_assert_eq(rs_mutex_init(&f, c, "clfree"), 0);
    cr_assert_eq(rs_mutex_init(&f2, c2, "clfree"), 0);
    cr_assert_eq(rs_mutex_lock(m2), 0, "%s", rs_client_lasterror(c2));
    static many_t t;
    static many_req_t r[21];
    many_pend(mu, NULL, &t, r, 20);
    for (int i = 0; i < NM; i++)
        cr_assert(tu_wait_zcard(&m.s[i], "mutex", "cl", 20, 10000), "master %d queued %lld", i,
                  tu_zcard_q(&m.s[i], "mutex", "cl"));
    /* a grant completed but not dispatched */
    many_pend_one(f, NULL, &t, r, 20);
    wait_readable(c, 10000); /* readable: the grant is queued */
    cr_assert_eq(t.ran, 0);
    cr_assert_eq(rs_mutex_trylock(f2), EBUSY, "the grant is not queued");
    cr_assert_eq(rs_client_close(c), 0);
    many_expect_canceled(&t, 21);
    cr_expect(queues_empty(&m, "cl", NULL, 5000), "entries left in a queue");
    struct timespec dl = tu_abs_in(1000); /* (a leaked grant: 3 s, its lease) */
    cr_expect_eq(rs_mutex_timedlock(f2, &dl), 0, "the undelivered grant was not released");
    cr_expect_eq(rs_mutex_unlock(f2), 0);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(mu);
    rs_mutex_destroy(f);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(f2);
    rs_client_close(c2);
    masters_down(&m);
}
