/*
 * test_netweak.c - Criterion tests of what a slow, lossy or cut link exposed (issue 13):
 *
 *   1. a renewal answered after lease/3 (but before the hold's deadline) is not reported
 *      lost and does not cost the watchdog its connection; the watchdog's connection is
 *      opened when the first hold is granted, not at the first renewal;
 *   2. a holder whose Redis stops answering gets on_lost no later than its local deadline
 *      (grant + lease), not some time after another client could take the lock;
 *   3. a blocking lock on a free mutex succeeds when the subscriber cannot subscribe.
 *
 * A stalled link is a SIGSTOPped redis-server (the kernel still accepts connections and
 * buffers requests; nothing is answered until SIGCONT). Timing bounds are generous on the
 * side that does not matter; the side each fix is about is asserted with a small slack.
 */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"

TestSuite(netweak, .timeout = 60);

static rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}

/* ------------------------------------------------------------------------------------- */
/* 3. A free mutex while the subscriber cannot subscribe                                  */

Test(netweak, free_mutex_locks_without_subscriber)
{
    /* a user that may run scripts and PUBLISH but not SUBSCRIBE: the subscriber is refused
     * for as long as the test runs, which a lossy link only does now and then */
    ts_server_t s;
    tu_start_server(&s);
    char buf[256];
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "ACL SETUSER nosub on >pw ~* &* +@all "
                                "-subscribe -psubscribe -ssubscribe"), "OK");
    rs_config_t cfg;
    rs_config_init(&cfg);
    char url[160];
    snprintf(url, sizeof url, "redis://nosub:pw@127.0.0.1:%d", s.port);
    cfg.url = url;
    cfg.lease_ms = 2000;
    cfg.timeout_ms = 500;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    cr_assert_eq(rc, 0, "open as nosub: %d %s", rc, rs_client_lasterror(NULL));
    rs_mutex_t *m = new_mutex(c, "free");

    rc = rs_mutex_lock(m);
    cr_expect_eq(rc, 0, "lock of a free mutex without SUBSCRIBE: %d %s", rc,
                 rs_client_lasterror(c));
    if (rc == 0)
        cr_expect_eq(rs_mutex_unlock(m), 0);
    /* a second time, after the first try started the subscriber (which keeps failing) */
    struct timespec dl = tu_abs_in(3000);
    rc = rs_mutex_timedlock(m, &dl);
    cr_expect_eq(rc, 0, "timedlock of a free mutex without SUBSCRIBE: %d %s", rc,
                 rs_client_lasterror(c));
    if (rc == 0)
        cr_expect_eq(rs_mutex_unlock(m), 0);

    /* a mutex that is busy still needs the subscription: the caller is told, not hung */
    rs_client_t *c2 = tu_open_client(&s, 2000, 500, NULL);
    rs_mutex_t *m2 = new_mutex(c2, "free");
    cr_assert_eq(rs_mutex_lock(m2), 0);
    dl = tu_abs_in(3000);
    long long t0 = tu_mono_ms();
    rc = rs_mutex_timedlock(m, &dl);
    cr_expect(rc == RS_ESERVER || rc == RS_ECONN, "timedlock of a busy mutex without "
              "SUBSCRIBE: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(tu_mono_ms() - t0, 2500, "the refusal took the whole deadline");
    cr_expect_eq(rs_mutex_unlock(m2), 0);

    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}
