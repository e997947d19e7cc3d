/*
 * test_multilock_deadline.c - the multilock's timed lock converts its CLOCK_REALTIME
 * deadline to a monotonic one once, on entry, and hands that to every part (before, each
 * part converted it back to wall-clock time and the mutex converted it again, so a
 * wall-clock jump between two conversions moved the deadline). Counted through the
 * library's rs__deadline_conversions (one test process per Criterion test, so no other
 * thread converts meanwhile).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"

TestSuite(multilock_deadline, .timeout = 60);

static struct timespec in_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + ms * 1000000LL;
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

Test(multilock_deadline, converted_once)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 2000, NULL);
    rs_client_t *other = tu_open_client(&s, 3000, 2000, NULL);
    const char *names[3] = {"dl-a", "dl-b", "dl-c"};
    rs_mutex_t *m[3], *busy;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rs_mutex_init(&m[i], c, names[i]), 0);
    /* the second part held elsewhere: the one-script attempt says busy and the parts are
     * taken in order, the first at once, the second waited for until the deadline */
    cr_assert_eq(rs_mutex_init(&busy, other, "dl-b"), 0);
    cr_assert_eq(rs_mutex_lock(busy), 0);
    rs_multilock_t *ml = NULL;
    cr_assert_eq(rs_multilock_init(&ml, m, 3), 0, "%s", rs_client_lasterror(c));

    struct timespec dl = in_ms(400);
    unsigned long before = atomic_load(&rs__deadline_conversions);
    int rc = rs_multilock_timedlock(ml, &dl);
    unsigned long conversions = atomic_load(&rs__deadline_conversions) - before;
    cr_expect_eq(rc, ETIMEDOUT, "timedlock with a part held elsewhere: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(conversions, 1, "the deadline was converted %lu times (once on entry, not "
                 "again per part)", conversions);
    cr_expect_eq(rs_mutex_fence(m[0]), 0, "the first part was given back");

    /* and with every part free: taken, one conversion */
    cr_assert_eq(rs_mutex_unlock(busy), 0);
    dl = in_ms(2000);
    before = atomic_load(&rs__deadline_conversions);
    rc = rs_multilock_timedlock(ml, &dl);
    cr_expect_eq(rc, 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(atomic_load(&rs__deadline_conversions) - before, 1);
    cr_expect_eq(rs_multilock_unlock(ml), 0);

    rs_multilock_destroy(ml);
    for (int i = 0; i < 3; i++)
        rs_mutex_destroy(m[i]);
    rs_mutex_destroy(busy);
    rs_client_close(other);
    rs_client_close(c);
    ts_server_stop(&s);
}
