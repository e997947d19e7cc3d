/*
 * test_mutex_errors.c - mutex tests of server errors (foreign keys, ACL, OOM) and an unreachable Redis.
 * (moved from test_mutex.c; suite "mutex", shared helpers in test_mutex.h).
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
#include "test_mutex.h"

/* 12. Server errors: foreign keys, ACL, OOM                                              */

Test(mutex, error_wrongtype, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    char buf[128];

    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SET rs:{w}:mutex foreign"));
    rs_mutex_t *m = new_mutex(c, "w");
    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ESERVER, "lock over a foreign string key: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_trylock(m), RS_ESERVER);
    cr_expect_eq(rs_mutex_unlock(m), EPERM, "nothing is held");
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "GET rs:{w}:mutex"), "foreign");
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w}:mutex"), -1, "the foreign key got a TTL");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w}:mutex:fence rs:{w}:mutex:q rs:{w}:mutex:qi"), 0,
                 "the failed lock wrote keys");

    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{w2}:mutex:q a b c"), 3);
    rs_mutex_t *m2 = new_mutex(c, "w2");
    rc = rs_mutex_lock(m2);
    cr_expect_eq(rc, RS_ESERVER, "lock over a foreign list key: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "LLEN rs:{w2}:mutex:q"), 3);
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "LINDEX rs:{w2}:mutex:q 0"), "a");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w2}:mutex rs:{w2}:mutex:fence"), 0,
                 "the failed lock wrote keys");

    /* a foreign fencing counter: the grant's SET ... GET is its first write and fails
     * without writing (core.lua next_fence) */
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{w3}:mutex:fence x"), 1);
    rs_mutex_t *m4 = new_mutex(c, "w3");
    rc = rs_mutex_lock(m4);
    cr_expect_eq(rc, RS_ESERVER, "lock over a foreign fencing counter: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "LLEN rs:{w3}:mutex:fence"), 1);
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w3}:mutex:fence"), -1, "the foreign key got a TTL");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w3}:mutex rs:{w3}:mutex:q rs:{w3}:mutex:qi"), 0,
                 "the failed lock wrote keys");

    /* a foreign queue info under a held lock: a waiter's first write (HSET qi, common.lua
     * q_add) fails without writing, so the queue is not created */
    rs_mutex_t *m5 = new_mutex(c, "w4");
    cr_assert_eq(rs_mutex_lock(m5), 0);
    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SET rs:{w4}:mutex:qi foreign"));
    rs_client_t *c2 = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m6 = new_mutex(c2, "w4");
    rc = rs_mutex_lock(m6);
    cr_expect_eq(rc, RS_ESERVER, "a wait over a foreign queue info: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c2), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c2));
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w4}:mutex:q"), 0, "the failed wait queued");
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "GET rs:{w4}:mutex:qi"), "foreign");
    cr_expect_eq(rs_mutex_unlock(m5), 0);
    rs_mutex_destroy(m4);
    rs_mutex_destroy(m5);
    rs_mutex_destroy(m6);
    rs_client_close(c2);

    /* the client is still fine */
    rs_mutex_t *m3 = new_mutex(c, "ok");
    cr_expect_eq(rs_mutex_lock(m3), 0);
    cr_expect_eq(rs_mutex_unlock(m3), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(m3);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(mutex, error_acl_noperm, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    char buf[256];
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "ACL SETUSER bob on >pw ~other:* &* +@all"),
                     "OK");
    rs_config_t cfg;
    rs_config_init(&cfg);
    char url[160];
    snprintf(url, sizeof url, "redis://bob:pw@127.0.0.1:%d", s.port);
    cfg.url = url;
    cfg.lease_ms = 1000;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    cr_assert_eq(rc, 0, "open as bob: %d %s", rc, rs_client_lasterror(NULL));
    rs_mutex_t *m = new_mutex(c, "acl");
    rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ESERVER, "lock without key permissions: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "NOPERM") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    rc = rs_mutex_trylock(m);
    cr_expect_eq(rc, RS_ESERVER, "trylock without key permissions: %d", rc);
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "keys were written");
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(mutex, error_oom, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    char buf[128];
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "oom");
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET maxmemory-policy noeviction"),
                     "OK");
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET maxmemory 1"), "OK");
    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ESERVER, "lock under OOM: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "OOM") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_fence(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET maxmemory 0"), "OK");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{oom}:mutex"), 0, "a half-done lock was left");
    rc = rs_mutex_lock(m);
    cr_expect_eq(rc, 0, "lock after lifting maxmemory: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* A master with min-replicas-to-write that has no replica refuses scripts with NOREPLICAS
 * at their first write: not an error of the call but of the deployment's state (a master
 * cut off from its replicas, a promoted replica whose old master has not rejoined: found by
 * make test-network's net-cluster-split, where every lock of the cut shard's names
 * returned RS_ESERVER). Waited out like LOADING within timeout_ms, then RS_ECONN; nothing
 * is written. */
Test(mutex, error_noreplicas, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    char buf[128];
    rs_client_t *c = tu_open_client(&s, 1500, 600, NULL);
    rs_mutex_t *m = new_mutex(c, "norep");
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET min-replicas-to-write 1"), "OK");
    int rc = rs_mutex_trylock(m);
    cr_expect_eq(rc, RS_ECONN, "trylock on a master without its replica: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect(strstr(rs_client_lasterror(c), "NOREPLICAS") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{norep}:mutex"), 0, "a refused lock wrote its key");
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET min-replicas-to-write 0"), "OK");
    rc = rs_mutex_lock(m);
    cr_expect_eq(rc, 0, "lock once the master may write: %d %s", rc, rs_client_lasterror(c));
    /* a release refused the same way: RS_ECONN, the hold stays until its lease runs out */
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET min-replicas-to-write 1"), "OK");
    rc = rs_mutex_unlock(m);
    cr_expect_eq(rc, RS_ECONN, "unlock refused by NOREPLICAS: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{norep}:mutex"), 1);
    cr_assert_str_eq(ts_cmd_str(&s, buf, sizeof buf, "CONFIG SET min-replicas-to-write 0"), "OK");
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 13. Redis unreachable                                                                  */

Test(mutex, unreachable, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    /* c1: no blocking call yet (no subscriber); c2: subscribed before the stall */
    rs_client_t *c1 = tu_open_client(&s, 1000, 500, NULL);
    rs_client_t *c2 = tu_open_client(&s, 1000, 500, NULL);
    rs_mutex_t *m1 = new_mutex(c1, "un");
    rs_mutex_t *m2 = new_mutex(c2, "un");
    cr_assert_eq(rs_mutex_lock(m2), 0);
    cr_assert_eq(rs_mutex_unlock(m2), 0);

    ts_server_pause(&s);
    long long t0 = tu_mono_ms();
    int rc = rs_mutex_lock(m1);
    long long el = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "lock, fresh client, server stalled: %d %s", rc,
                 rs_client_lasterror(c1));
    cr_expect_lt(el, 4000, "took %lld ms with timeout_ms 500", el);

    t0 = tu_mono_ms();
    rc = rs_mutex_lock(m2);
    el = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "lock, subscribed client, server stalled: %d %s", rc,
                 rs_client_lasterror(c2));
    cr_expect_lt(el, 4000, "took %lld ms with timeout_ms 500", el);

    t0 = tu_mono_ms();
    rc = rs_mutex_trylock(m2);
    el = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "trylock, server stalled: %d", rc);
    cr_expect_lt(el, 4000, "took %lld ms with timeout_ms 500", el);
    ts_server_resume(&s);

    /* whatever a timed-out call may have done in Redis once it resumed expires with its
     * lease (1000 ms): the mutex must be usable within a few seconds */
    struct timespec dl = tu_abs_in(5000);
    rc = rs_mutex_timedlock(m1, &dl);
    cr_expect_eq(rc, 0, "lock after resume: %d %s", rc, rs_client_lasterror(c1));
    cr_expect_eq(rs_mutex_unlock(m1), 0);
    dl = tu_abs_in(5000);
    rc = rs_mutex_timedlock(m2, &dl);
    cr_expect_eq(rc, 0, "lock after resume: %d %s", rc, rs_client_lasterror(c2));
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(m1);
    rs_mutex_destroy(m2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* rs_client_close "blocks for at most timeout_ms", also when Redis is stalled. */
Test(mutex, close_while_unreachable, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 500, NULL);
    rs_mutex_t *m = new_mutex(c, "cu");
    ts_server_pause(&s);
    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ECONN, "lock, server stalled: %d %s", rc, rs_client_lasterror(c));
    rs_mutex_destroy(m);
    closer_t k = {.c = c};
    cr_assert_eq(pthread_create(&k.th, NULL, closer_main, &k), 0);
    int ok = tu_wait_atomic(&k.done, 1, 5000);
    ts_server_resume(&s); /* unblocks a hung close, so the test can end */
    pthread_join(k.th, NULL);
    cr_expect(ok, "rs_client_close (timeout_ms 500) still blocked after 5 s while Redis was "
                  "stalled");
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
