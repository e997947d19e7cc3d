/*
 * test_multilock_script.c - the parts of a multilock on one server are taken by one script
 * (multilock.lua) in one round trip, or none of them.
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
/* One script: parts on one server are taken in one round trip (multilock.lua), or none   */

static long long evalsha_calls(const ts_server_t *s)
{
    char buf[4096];
    if (!ts_cmd_str(s, buf, sizeof buf, "INFO commandstats"))
        return -1;
    const char *p = strstr(buf, "cmdstat_evalsha:calls=");
    return p ? atoll(p + strlen("cmdstat_evalsha:calls=")) : 0;
}

Test(multilock, one_script_one_round_trip)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_client(&s, 400, NULL);
    rs_client_t *other = open_client(&s, 5000, NULL);
    rs_mutex_t *p[3] = {new_mutex(c, "os-a"), new_mutex(c, "os-b"), new_mutex(c, "os-c")};
    rs_multilock_t *ml = new_ml(p, 3);

    /* the first call loads the script (NOSCRIPT, SCRIPT LOAD, EVALSHA again) */
    cr_assert_eq(rs_multilock_lock(ml), 0, "lock: %s", rs_client_lasterror(c));
    cr_assert_eq(rs_multilock_unlock(ml), 0);
    /* the server counts the watchdog's renewals too (lease 400 ms; under load a round can
     * land inside the lock call): a lock that sends one EVALSHA shows it in one of five
     * tries, a lock that sends more in none */
    long long sent = 0;
    for (int t = 0;; t++) {
        long long before = evalsha_calls(&s);
        cr_assert_eq(rs_multilock_lock(ml), 0, "lock: %s", rs_client_lasterror(c));
        sent = evalsha_calls(&s) - before;
        if (sent == 1 || t == 4)
            break;
        cr_assert_eq(rs_multilock_unlock(ml), 0);
    }
    cr_expect_eq(sent, 1, "an uncontended multilock of 3 parts sent %lld EVALSHA", sent);
    for (int i = 0; i < 3; i++)
        cr_expect_gt(rs_mutex_fence(p[i]), 0, "part %d has no fencing token", i);

    /* ordinary holds: another client is refused, the watchdog keeps them past the lease */
    rs_mutex_t *o = new_mutex(other, "os-b");
    cr_expect_eq(rs_mutex_trylock(o), EBUSY);
    tu_sleep_ms(1200);
    for (int i = 0; i < 3; i++)
        cr_expect_gt(rs_mutex_remaining(p[i]), 0, "part %d lost past its lease", i);
    cr_expect_eq(rs_mutex_trylock(o), EBUSY);
    cr_expect_eq(rs_multilock_lock(ml), EDEADLK);
    cr_expect_eq(rs_multilock_unlock(ml), 0);
    cr_expect_eq(rs_mutex_trylock(o), 0, "a part still held after unlock");
    cr_expect_eq(rs_mutex_unlock(o), 0);

    /* a busy part: trylock takes nothing; lock waits for it (the ordered path) */
    cr_assert_eq(rs_mutex_lock(o), 0);
    cr_expect_eq(rs_multilock_trylock(ml), EBUSY);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(rs_mutex_fence(p[i]), 0, "part %d taken by a failed trylock", i);
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{os-a}:mutex o"), 0, "part a held in Redis");
    struct timespec dl = tu_abs_in(300);
    cr_expect_eq(rs_multilock_timedlock(ml, &dl), ETIMEDOUT);
    cr_expect_eq(rs_mutex_unlock(o), 0);
    dl = tu_abs_in(5000);
    cr_expect_eq(rs_multilock_timedlock(ml, &dl), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_multilock_unlock(ml), 0);

    rs_mutex_destroy(o);
    rs_multilock_destroy(ml);
    for (int i = 0; i < 3; i++)
        rs_mutex_destroy(p[i]);
    rs_client_close(other);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* a key of the wrong type in the last part: the script fails before writing anything */
Test(multilock, one_script_wrongtype_takes_nothing)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_client(&s, 5000, NULL);
    rs_mutex_t *p[3] = {new_mutex(c, "wt-a"), new_mutex(c, "wt-b"), new_mutex(c, "wt-c")};
    rs_multilock_t *ml = new_ml(p, 3);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{wt-c}:mutex:fence x 1"), 1);
    int rc = rs_multilock_trylock(ml);
    cr_expect_eq(rc, RS_ESERVER, "trylock: %d %s", rc, rs_client_lasterror(c));
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "message: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{wt-a}:mutex rs:{wt-b}:mutex"), 0,
                 "a part was written before the failure");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(rs_mutex_fence(p[i]), 0);
    rs_multilock_destroy(ml);
    for (int i = 0; i < 3; i++)
        rs_mutex_destroy(p[i]);
    rs_client_close(c);
    ts_server_stop(&s);
}
