/*
 * test_redlock_loss.c - a Redlock hold that the masters no longer have is reported lost, and
 * one that a quorum still has is not (lib/rlvote.c, rs__rl_denied; lib/handle.c's release,
 * lib/async_rl.c's release_async, the watchdog's renewal round). The hold's key is deleted
 * on some masters by the test, as a master restarted without its data would forget it:
 *
 *   unlock_two_denials    deleted on 2 masters of 3: unlock RS_ELOST, on_lost once
 *   unlock_one_denial     deleted on 1 of the 3 masters that granted it: unlock 0, no on_lost
 *                         (a quorum still has it)
 *   renewal_two_denials   deleted on 2 masters: the watchdog's next renewal (lease/3) finds it
 *                         lost (on_lost, rs_mutex_remaining 0) before any unlock and well
 *                         before its local deadline would; unlock RS_ELOST
 *   async_release_two_denials / async_release_one_denial: the same rule through
 *                         rs_hold_release_async (done(RS_ELOST) / done(0))
 *
 * Without the release's rule (rs__rl_denied answering 0) the unlock and the release say 0 and
 * on_lost never fires (unlock_two_denials, async_release_two_denials fail); without the
 * renewal's (lib/redlock.c, "no quorum can hold it any more") the loss is told only at the
 * local deadline (renewal_two_denials fails). The fault suite's Redlock scenarios caught
 * neither (docs/reliability.md).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_async.h"
#include "test_redlock.h"
#include "test_util.h"

TestSuite(redlock_loss, .timeout = 120);

static atomic_int g_lost;

static void count_lost(const char *kind, const char *name, void *arg)
{
    (void)kind, (void)name, (void)arg;
    atomic_fetch_add(&g_lost, 1);
}

/* Three masters, a key prefix of the test's own and a client counting on_lost calls. */
typedef struct rig {
    masters_t m;
    char prefix[32];
    rs_client_t *c;
} rig_t;

static void rig_up(rig_t *r, long lease_ms)
{
    masters_up(&r->m);
    ts_unique_prefix(r->prefix, sizeof r->prefix);
    rs_config_t cfg = rl_config(r->m.url, r->prefix, lease_ms, 2000);
    cfg.on_lost = count_lost;
    r->c = NULL;
    cr_assert_eq(rs_client_open(&r->c, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    atomic_store(&g_lost, 0);
}

static void rig_down(rig_t *r)
{
    rs_client_close(r->c);
    masters_down(&r->m);
}

/* The masters whose key of the mutex NAME has an owner: a bit each. */
static unsigned holding(masters_t *m, const char *prefix, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "%s:{%s}:mutex", prefix, name);
    unsigned mask = 0;
    for (int i = 0; i < NM; i++) {
        char buf[128] = "";
        if (ts_cmd_str(&m->s[i], buf, sizeof buf, "HGET %s o", key) && buf[0])
            mask |= 1u << i;
    }
    return mask;
}

/* Deletes the mutex's key on the first n masters of mask. */
static void forget_on(masters_t *m, const char *prefix, const char *name, unsigned mask, int n)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "DEL %s:{%s}:mutex", prefix, name);
    for (int i = 0; i < NM && n > 0; i++)
        if (mask & (1u << i)) {
            cr_assert_eq(ts_cmd_int(&m->s[i], cmd), 1, "master %d had no key", i);
            n--;
        }
    cr_assert_eq(n, 0, "fewer masters hold it than asked");
}

/* Locks mu (blocking) until all NM masters hold it: a grant needs a quorum only, and a
 * master that answered after the round (a loaded machine) did not grant. */
static unsigned lock_on_all(rs_mutex_t *mu, masters_t *m, const char *prefix, const char *name)
{
    unsigned mask = 0;
    for (int tries = 0; tries < 10; tries++) {
        cr_assert_eq(rs_mutex_lock(mu), 0, "lock: %s", rs_client_lasterror(NULL));
        if ((mask = holding(m, prefix, name)) == (1u << NM) - 1)
            return mask;
        cr_assert_eq(rs_mutex_unlock(mu), 0);
    }
    cr_assert_fail("the hold never stood on all %d masters (last mask %x)", NM, mask);
    return mask;
}

/* Waits up to ms for on_lost to have been called want times. */
static int lost_reaches(int want, long ms)
{
    for (long t = 0; atomic_load(&g_lost) < want && t < ms; t += 10)
        tu_sleep_ms(10);
    return atomic_load(&g_lost) == want;
}

Test(redlock_loss, unlock_two_denials)
{
    rig_t r;
    rig_up(&r, 30000);
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, r.c, "l2"), 0);
    cr_assert_eq(rs_mutex_lock(mu), 0, "lock: %s", rs_client_lasterror(r.c));
    forget_on(&r.m, r.prefix, "l2", holding(&r.m, r.prefix, "l2"), 2);
    cr_expect_eq(rs_mutex_unlock(mu), RS_ELOST, "unlock: %s", rs_client_lasterror(r.c));
    cr_expect(lost_reaches(1, 5000), "on_lost called %d times, not once", atomic_load(&g_lost));
    /* the lock is free for the next owner */
    cr_expect_eq(rs_mutex_trylock(mu), 0, "%s", rs_client_lasterror(r.c));
    cr_expect_eq(rs_mutex_unlock(mu), 0);
    rs_mutex_destroy(mu);
    rig_down(&r);
}

Test(redlock_loss, unlock_one_denial)
{
    rig_t r;
    rig_up(&r, 30000);
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, r.c, "l1"), 0);
    unsigned mask = lock_on_all(mu, &r.m, r.prefix, "l1");
    forget_on(&r.m, r.prefix, "l1", mask, 1);
    cr_expect_eq(rs_mutex_unlock(mu), 0, "unlock: %s", rs_client_lasterror(r.c));
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&g_lost), 0, "on_lost called for a hold a quorum kept");
    rs_mutex_destroy(mu);
    rig_down(&r);
}

Test(redlock_loss, renewal_two_denials)
{
    rig_t r;
    /* renewed every 3 s; its local deadline, which would report it lost without any
     * renewal's answer, is 9 s away: told by 6.5 s, it was the renewal's denials */
    rig_up(&r, 9000);
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, r.c, "lr"), 0);
    cr_assert_eq(rs_mutex_lock(mu), 0, "lock: %s", rs_client_lasterror(r.c));
    forget_on(&r.m, r.prefix, "lr", holding(&r.m, r.prefix, "lr"), 2);
    cr_expect(lost_reaches(1, 6500), "on_lost called %d times in 6.5 s, not once",
              atomic_load(&g_lost));
    cr_expect_eq(rs_mutex_remaining(mu), 0);
    cr_expect_eq(rs_mutex_unlock(mu), RS_ELOST, "unlock: %s", rs_client_lasterror(r.c));
    cr_expect_eq(atomic_load(&g_lost), 1, "on_lost more than once");
    rs_mutex_destroy(mu);
    rig_down(&r);
}

/* An event-loop grant of NAME on r's client, its key deleted on `forget` masters (all three
 * held it when forget is 1), then rs_hold_release_async: done's rc. */
static int async_release_after(rig_t *r, const char *name, int forget)
{
    rs_mutex_t *mu;
    cr_assert_eq(rs_mutex_init(&mu, r->c, name), 0);
    one_t o;
    unsigned mask = 0;
    for (int tries = 0; tries < 10; tries++) {
        one_acquire(r->c, mu, NULL, &o);
        cr_assert_eq(o.rc, 0, "done(%d): %s", o.rc, rs_client_lasterror(NULL));
        mask = holding(&r->m, r->prefix, name);
        if (forget > 1 || mask == (1u << NM) - 1)
            break;
        cr_assert_eq(rs_hold_release(o.hold), 0);
        o.hold = NULL;
    }
    cr_assert_not_null(o.hold, "the hold never stood on all %d masters", NM);
    forget_on(&r->m, r->prefix, name, mask, forget);
    one_t rel = {0};
    cr_assert_eq(rs_hold_release_async(o.hold, one_done, &rel), 0);
    cr_assert(loop_until(r->c, &rel.ran, 1, 10000), "no completion of the release");
    rs_mutex_destroy(mu);
    return rel.rc;
}

Test(redlock_loss, async_release_two_denials)
{
    rig_t r;
    rig_up(&r, 30000);
    cr_expect_eq(async_release_after(&r, "a2", 2), RS_ELOST);
    cr_expect(lost_reaches(1, 5000), "on_lost called %d times, not once", atomic_load(&g_lost));
    rig_down(&r);
}

Test(redlock_loss, async_release_one_denial)
{
    rig_t r;
    rig_up(&r, 30000);
    cr_expect_eq(async_release_after(&r, "a1", 1), 0);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&g_lost), 0, "on_lost called for a hold a quorum kept");
    rig_down(&r);
}
