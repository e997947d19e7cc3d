/*
 * test_multilock_loss.c - multilock tests of a lost part: unlock then reports RS_ELOST, and a
 * part lost while the multilock still waits for a later one makes lock start again.
 * (moved from test_multilock.c; suite "multilock", shared helpers in test_multilock.h).
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
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "test_assert.h"
#include "test_util.h"
#include "redisync.h"
#include "test_multilock.h"

/* ------------------------------------------------------------------------------------- */
/* 6. Losing a part                                                                        */

Test(multilock, lost_part_unlock_elost)
{
    ts_server_t s;
    tu_start_server(&s);
    atomic_int lost = 0;
    rs_client_t *c = open_client(&s, 300, &lost);
    rs_client_t *c2 = open_client(&s, 5000, NULL);
    const char *names[] = {"l1", "l2", "l3"};
    rs_mutex_t *m[3], *o[3];
    for (int i = 0; i < 3; i++) {
        m[i] = new_mutex(c, names[i]);
        o[i] = new_mutex(c2, names[i]);
    }
    rs_multilock_t *ml = new_ml(m, 3);
    int rc = rs_multilock_lock(ml);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));

    /* l2's hold vanishes from Redis; the watchdog notices at its next renewal */
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{l2}:mutex"), 1);
    cr_assert(tu_wait_atomic(&lost, 1, 5000), "on_lost was not called");
    cr_assert_eq(rs_mutex_trylock(o[1]), 0, "l2 can be taken by another client now");
    uint64_t of = rs_mutex_fence(o[1]);

    rc = rs_multilock_unlock(ml);
    cr_expect_eq(rc, RS_ELOST, "unlock with a lost part: %d %s", rc, rs_client_lasterror(c));
    cr_expect(is_free(o[0]), "l1 was released");
    cr_expect(is_free(o[2]), "l3 was released");
    cr_expect_eq(rs_mutex_fence(o[1]), of, "the new holder of l2 is untouched");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{l2}:mutex"), 0, "l2's new hold is still in Redis");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(rs_mutex_fence(m[i]), 0, "%s cleared locally", names[i]);
    cr_expect_eq(rs_multilock_unlock(ml), EPERM, "a second unlock");
    cr_expect_eq(atomic_load(&lost), 1, "on_lost once");
    cr_expect_eq(rs_mutex_unlock(o[1]), 0);

    /* a fresh lock works again */
    cr_expect_eq(rs_multilock_lock(ml), 0);
    cr_expect_eq(rs_multilock_unlock(ml), 0);

    rs_multilock_destroy(ml);
    for (int i = 0; i < 3; i++) {
        rs_mutex_destroy(m[i]);
        rs_mutex_destroy(o[i]);
    }
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* A part lost while the multilock still waits for a later one: lock starts again and
 * returns with fresh holds on every part. */
Test(multilock, lost_while_acquiring_restarts)
{
    ts_server_t s;
    tu_start_server(&s);
    atomic_int lost = 0;
    rs_client_t *c = open_client(&s, 300, &lost);
    rs_client_t *c2 = open_client(&s, 5000, NULL);
    rs_mutex_t *m[2] = {new_mutex(c, "r2"), new_mutex(c, "r1")}; /* order: r1 r2 */
    rs_mutex_t *held = new_mutex(c2, "r2");
    cr_assert_eq(rs_mutex_lock(held), 0);
    rs_multilock_t *ml = new_ml(m, 2);

    mlcall_t k = {.ml = ml, .parts = m, .n = 2, .op = 0};
    mlcall_start(&k);
    cr_assert(wait_zcard(&s, "r2", 1, 10000), "the multilock queued for r2");
    char buf[32];
    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "HGET rs:{r1}:mutex f"), "r1 is held");
    uint64_t first = strtoull(buf, NULL, 10);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{r1}:mutex"), 1);
    cr_assert(tu_wait_atomic(&lost, 1, 5000), "on_lost was not called for r1");
    cr_assert_eq(rs_mutex_unlock(held), 0);

    cr_assert(tu_wait_atomic(&k.done, 1, 15000), "lock did not return");
    cr_expect_eq(k.rc, 0, "lock: %d", k.rc);
    cr_expect_neq(k.fence[0], 0, "r2 held");
    cr_expect_gt(k.fence[1], first, "r1 was taken again (token %llu, lost one %llu)",
                 (unsigned long long)k.fence[1], (unsigned long long)first);
    cr_assert(mlcall_join(&k, 10000));
    cr_expect_eq(k.unlock_rc, 0, "unlock of the fresh holds: %d", k.unlock_rc);

    rs_multilock_destroy(ml);
    rs_mutex_destroy(m[0]);
    rs_mutex_destroy(m[1]);
    rs_mutex_destroy(held);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}
