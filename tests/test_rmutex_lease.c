/*
 * test_rmutex_lease.c - rmutex tests of the lease: renewal keeps a re-entered hold, a
 * re-entry on a lost hold, closing the client releases a re-entered hold.
 * (moved from test_rmutex.c; suite "rmutex", shared helpers in test_rmutex.h).
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
#include "test_rmutex.h"

/* ------------------------------------------------------------------------------------- */
/* 7. Renewal keeps a re-entered hold                                                     */

Test(rmutex, renewal_across_reentries)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 300, 2000, &lc);
    rs_client_t *c2 = tu_open_client(&s, 300, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "rn");
    rs_rmutex_t *m2 = new_rmutex(c2, "rn");
    int rc = rs_rmutex_lock(m);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    rc = rs_rmutex_lock(m);
    cr_assert_eq(rc, 0, "re-entry: %d %s", rc, rs_client_lasterror(c));
    uint64_t f = rs_rmutex_fence(m);

    long long end = tu_mono_ms() + 1500;
    int tries = 0;
    while (tu_mono_ms() < end) {
        rc = rs_rmutex_trylock(m2);
        cr_expect_eq(rc, EBUSY, "trylock by another client during the hold: %d", rc);
        if (rc == 0)
            rs_rmutex_unlock(m2);
        tries++;
        tu_sleep_ms(100);
    }
    cr_expect_geq(tries, 4);
    cr_expect_gt(rs_rmutex_remaining(m), 0, "the hold is still confirmed");
    cr_expect_eq(rs_rmutex_fence(m), f);
    cr_expect_eq(hold_count(&s, "rn"), 2, "the count survived the renewals");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{rn}:rmutex"), 0, "the lock key is alive in Redis");
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "first unlock after 1.5 s on a 300 ms lease: %d %s", rc,
                 rs_client_lasterror(c));
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "second unlock after 1.5 s on a 300 ms lease: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM);
    cr_expect_eq(rs_rmutex_trylock(m2), 0, "free after the two unlocks");
    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    tu_sleep_ms(100);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    rs_rmutex_destroy(m);
    rs_rmutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10. A re-entry on a lost hold                                                          */

/* The watchdog finds the hold gone (taken over) before the thread locks again. */
Test(rmutex, reentry_on_lost_hold_watchdog)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 300, 2000, &lc);
    rs_client_t *c2 = tu_open_client(&s, 5000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "lw");
    rs_rmutex_t *m2 = new_rmutex(c2, "lw");

    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{lw}:rmutex"), 1);
    int rc = rs_rmutex_trylock(m2);
    cr_assert_eq(rc, 0, "the other client takes it over: %d %s", rc, rs_client_lasterror(c2));
    uint64_t f2 = rs_rmutex_fence(m2);
    cr_expect(tu_wait_atomic(&lc.n, 1, 5000), "on_lost was not called");
    cr_expect_str_eq(lc.kind, "rmutex");
    cr_expect_str_eq(lc.name, "lw");
    cr_expect_eq(rs_rmutex_remaining(m), 0, "remaining of a lost hold");

    rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, RS_ELOST, "lock (re-entry) on a lost hold: %d %s", rc,
                 rs_client_lasterror(c));
    rc = rs_rmutex_trylock(m);
    cr_expect_eq(rc, RS_ELOST, "trylock (re-entry) on a lost hold: %d %s", rc,
                 rs_client_lasterror(c));
    struct timespec dl = tu_abs_in(500);
    rc = rs_rmutex_timedlock(m, &dl);
    cr_expect_eq(rc, RS_ELOST, "timedlock (re-entry) on a lost hold: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(hold_count(&s, "lw"), 1, "a re-entry on a lost hold counted on the new owner");

    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, RS_ELOST, "unlock of the lost hold: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "the unlock cleared all re-entries");
    cr_expect_eq(rs_rmutex_fence(m), 0);
    cr_expect_eq(rs_rmutex_fence(m2), f2, "the new holder's hold was touched");
    cr_expect_eq(hold_count(&s, "lw"), 1, "the new holder's count was touched");
    cr_expect(has_owner(&s, "lw"));
    cr_expect_eq(rs_rmutex_trylock(m), EBUSY, "a fresh acquisition after the lost hold");

    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, 0, "a fresh lock after the lost hold: %d %s", rc, rs_client_lasterror(c));
    cr_expect_gt(rs_rmutex_fence(m), f2);
    cr_expect_eq(hold_count(&s, "lw"), 1);
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&lc.n), 1, "on_lost called %d times", atomic_load(&lc.n));
    rs_rmutex_destroy(m);
    rs_rmutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* The re-entry itself finds the hold gone (long lease: the watchdog has not looked yet). */
Test(rmutex, reentry_on_lost_hold_redis)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 30000, 2000, &lc);
    rs_rmutex_t *m = new_rmutex(c, "lr");

    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    uint64_t f = rs_rmutex_fence(m);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{lr}:rmutex"), 1);

    int rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, RS_ELOST, "re-entry after the key vanished: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect(!has_owner(&s, "lr"), "the failed re-entry took the lock");
    cr_expect(tu_wait_atomic(&lc.n, 1, 3000), "on_lost was not called");
    cr_expect_str_eq(lc.kind, "rmutex");
    rc = rs_rmutex_trylock(m);
    cr_expect_eq(rc, RS_ELOST, "trylock on the lost hold: %d", rc);

    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, RS_ELOST, "unlock of the lost hold: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "the unlock cleared all re-entries");
    cr_expect_eq(rs_rmutex_fence(m), 0);

    rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, 0, "a fresh lock: %d %s", rc, rs_client_lasterror(c));
    cr_expect_gt(rs_rmutex_fence(m), f);
    cr_expect_eq(hold_count(&s, "lr"), 1);
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    cr_expect_eq(rs_rmutex_unlock(m), EPERM);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&lc.n), 1, "on_lost called %d times", atomic_load(&lc.n));

    /* the unlock of a re-entry (leave) is what finds the hold gone */
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{lr}:rmutex"), 1);
    rs_client_t *c2 = tu_open_client(&s, 30000, 2000, NULL);
    rs_rmutex_t *m2 = new_rmutex(c2, "lr");
    cr_assert_eq(rs_rmutex_trylock(m2), 0, "another client takes it over");
    uint64_t f2 = rs_rmutex_fence(m2);
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, RS_ELOST, "unlock at count 3 after a takeover: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "the unlock cleared all re-entries");
    cr_expect_eq(rs_rmutex_fence(m), 0);
    cr_expect_eq(hold_count(&s, "lr"), 1, "the lost unlock changed the new holder's count");
    cr_expect_eq(rs_rmutex_fence(m2), f2);
    cr_expect_eq(rs_rmutex_trylock(m), EBUSY, "the new holder's hold was released");
    cr_expect(tu_wait_atomic(&lc.n, 2, 3000), "on_lost was not called for the second loss");
    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    rs_rmutex_destroy(m2);
    rs_client_close(c2);
    cr_expect_eq(rs_rmutex_trylock(m), 0, "a fresh trylock");
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&lc.n), 2, "on_lost called %d times", atomic_load(&lc.n));
    rs_rmutex_destroy(m);
    rs_client_close(c);
    cr_expect_eq(atomic_load(&lc.n), 2, "on_lost called %d times", atomic_load(&lc.n));
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10b. Closing the client releases a re-entered hold                                     */

Test(rmutex, close_releases_reentered_hold)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 30000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 30000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "cl");
    rs_rmutex_t *m2 = new_rmutex(c2, "cl");
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_expect_eq(hold_count(&s, "cl"), 2);
    uint64_t f = rs_rmutex_fence(m);
    cr_expect_eq(rs_client_close(c), 0);
    cr_expect(!has_owner(&s, "cl"), "closing the client left the hold in Redis");
    int rc = rs_rmutex_trylock(m2);
    cr_expect_eq(rc, 0, "trylock after the holder's client closed: %d %s", rc,
                 rs_client_lasterror(c2));
    cr_expect_gt(rs_rmutex_fence(m2), f);
    cr_expect_eq(rs_rmutex_destroy(m), 0, "destroy after close");
    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    rs_rmutex_destroy(m2);
    rs_client_close(c2);
    ts_server_stop(&s);
}
