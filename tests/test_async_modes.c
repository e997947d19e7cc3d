/*
 * test_async_modes.c - the event-loop API beyond one server (issue 16).
 *
 *   sentinel_failover   redis-sentinel://: requests pending on a held mutex while the
 *                       sentinel fails the master over to its replica; the I/O thread
 *                       follows the new master (READONLY / reconnect), every request
 *                       completes exactly once and is granted, grants never overlap
 *   min_replicas_confirmed  a master and its replica, min_replicas 1: requests queued on a
 *                       held mutex are granted one by one by handoffs, each confirmed by a
 *                       WAIT in the pipeline (the announced grant asked again); with the
 *                       replica stopped a grant is given back and done gets RS_EREPL, the
 *                       mutex left free
 * redlock:// has a file of its own, test_async_redlock.c.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "sentinel.h"
#include "test_assert.h"
#include "test_util.h"
#include "test_async.h"

TestSuite(async_modes, .timeout = 120);

#define MASTER_NAME "mymaster"
#define N 40


static int is_replica(const ts_server_t *s)
{
    redisContext *c = ts_connect(s);
    if (!c)
        return 0;
    redisReply *r = redisCommand(c, "ROLE");
    int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "slave") == 0;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return yes;
}

/* A master and its replica, the replica's link up and online on the master. */
static void start_pair(ts_server_t *master, ts_server_t *replica)
{
    cr_assert_eq(ts_server_start(master, "--repl-diskless-sync-delay", "0", NULL), 0);
    char mp[16];
    snprintf(mp, sizeof mp, "%d", master->port);
    cr_assert_eq(ts_server_start(replica, "--replicaof", "127.0.0.1", mp,
                                 "--repl-diskless-sync-delay", "0", NULL), 0);
    cr_assert_eq(ts_wait_replica_up(replica, 15000), 0);
    cr_assert_eq(ts_wait_replicas_online(master, 1, 15000), 0);
}

Test(async_modes, sentinel_failover)
{
    ts_server_t master, replica, sent;
    start_pair(&master, &replica);
    cr_assert_eq(ts_sentinel_start(&sent, MASTER_NAME, master.port, 1, 1000, 5000), 0);
    char url[512];
    snprintf(url, sizeof url, "redis-sentinel://%s127.0.0.1:%d/%s", ts_deploy_userinfo(),
             sent.port, MASTER_NAME);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.lease_ms = 3000;
    cfg.timeout_ms = 8000;
    rs_client_t *c, *holder;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));
    cr_assert_eq(rs_client_open(&holder, &cfg), 0, "%s", rs_client_lasterror(NULL));
    rs_mutex_t *m, *hm;
    rs_hold_t *h;
    m = mutex_held_by(c, holder, "fo", &hm, &h);

    static tally_t t;
    static treq_t r[N];
    tally_pend(m, &t, r, N);
    long long end = tu_mono_ms() + 10000;
    while (ts_cmd_int(&master, "ZCARD rs:{fo}:mutex:q") < N && tu_mono_ms() < end)
        tu_sleep_ms(20);
    cr_assert_eq(ts_cmd_int(&master, "ZCARD rs:{fo}:mutex:q"), N, "not all queued");
    cr_assert_eq(ts_cmd_int(&master, "WAIT 1 5000"), 1, "the replica has not caught up");

    char reply[128] = "";
    end = tu_mono_ms() + 20000;
    while (tu_mono_ms() < end) {
        if (ts_cmd_str(&sent, reply, sizeof reply, "SENTINEL FAILOVER %s", MASTER_NAME) &&
            strcmp(reply, "OK") == 0)
            break;
        tu_sleep_ms(100);
    }
    cr_assert_str_eq(reply, "OK", "SENTINEL FAILOVER: %s", reply);
    end = tu_mono_ms() + 20000;
    while (ts_sentinel_master_port(&sent, MASTER_NAME) != replica.port && tu_mono_ms() < end)
        tu_sleep_ms(20);
    cr_assert_eq(ts_sentinel_master_port(&sent, MASTER_NAME), replica.port);
    /* until the old master is demoted it still takes writes (Redis' failover window, the
     * same for the blocking calls): release on the new one */
    end = tu_mono_ms() + 30000;
    while (!is_replica(&master) && tu_mono_ms() < end)
        tu_sleep_ms(50);
    cr_assert(is_replica(&master), "the old master was never demoted");
    int rc = rs_hold_release(h);
    cr_expect(rc == 0 || rc == RS_ELOST, "release: %d %s", rc, rs_client_lasterror(holder));
    cr_assert(loop_until(c, &t.ran, N, 60000), "ran %d of %d (ok %d errors %d, last %s)",
              t.ran, N, t.ok, t.errs, rs_strerror(t.last_rc));
    for (int i = 0; i < N; i++)
        cr_expect_eq(t.each[i], 1, "request %d ran %d times", i, t.each[i]);
    cr_expect_eq(t.ok, N, "ok %d errors %d (last %s)", t.ok, t.errs, rs_strerror(t.last_rc));
    cr_expect_eq(t.overlap, 0);
    long long left = ts_cmd_int(&replica, "ZCARD rs:{fo}:mutex:q");
    char what[256] = "";
    if (left)
        ts_cmd_str(&replica, what, sizeof what, "ZRANGE rs:{fo}:mutex:q 0 0 WITHSCORES");
    char keys[512] = "";
    ts_cmd_str(&replica, keys, sizeof keys, "HGETALL rs:{fo}:mutex");
    cr_expect_eq(left, 0, "%lld entries left on the new master: %s (lock: %s)", left, what,
                 keys);
    rs_mutex_destroy(m);
    rs_mutex_destroy(hm);
    rs_client_close(holder);
    rs_client_close(c);
    ts_server_stop(&sent);
    ts_server_stop(&replica);
    ts_server_stop(&master);
}

Test(async_modes, min_replicas_confirmed)
{
    ts_server_t master, replica;
    start_pair(&master, &replica);
    /* the deployment user of make test-acl: WAIT is beyond docs/security.md's list */
    char url[256];
    snprintf(url, sizeof url, "redis://%s127.0.0.1:%d", ts_deploy_userinfo(), master.port);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.lease_ms = 3000;
    cfg.timeout_ms = 5000;
    cfg.min_replicas = 1;
    cfg.replica_timeout_ms = 2000;
    rs_client_t *c, *holder;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));
    cr_assert_eq(rs_client_open(&holder, &cfg), 0, "%s", rs_client_lasterror(NULL));
    rs_mutex_t *hm;
    rs_hold_t *h;
    rs_mutex_t *m = mutex_held_by(c, holder, "mr", &hm, &h);
    static tally_t t;
    static treq_t r[20];
    tally_pend(m, &t, r, 20);
    cr_assert(tu_wait_zcard(&master, "mutex", "mr", 20, 10000), "queued: %lld",
              tu_zcard_q(&master, "mutex", "mr"));
    long long w0 = ts_info_ll(&master, "commandstats", "cmdstat_wait", "calls");
    cr_assert_eq(rs_hold_release(h), 0);
    cr_expect(loop_until(c, &t.ran, 20, 20000), "%d of 20 completed", t.ran);
    cr_expect_eq(t.ok, 20, "granted %d, errors %d (last %d)", t.ok, t.errs, t.last_rc);
    cr_expect_eq(t.overlap, 0);
    long long waits = ts_info_ll(&master, "commandstats", "cmdstat_wait", "calls") - w0;
    cr_expect_geq(waits, 20, "%lld WAIT for 20 grants", waits);

    /* the replica stopped: a grant is not confirmed, so it is given back */
    rs_mutex_t *f;
    cr_assert_eq(rs_mutex_init(&f, c, "mf"), 0);
    ts_server_pause(&replica);
    one_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(f, NULL, one_done, &o, &req), 0);
    int ok = loop_until(c, &o.ran, 1, 10000);
    ts_server_resume(&replica);
    cr_assert(ok, "no completion");
    cr_expect_eq(o.rc, RS_EREPL, "done(%d), not RS_EREPL", o.rc);
    cr_expect_null(o.hold);
    cr_expect_eq(ts_cmd_int(&master, "HEXISTS rs:{mf}:mutex o"), 0, "the undone grant stayed");
    rs_mutex_destroy(f);
    rs_mutex_destroy(m);
    rs_mutex_destroy(hm);
    rs_client_close(c);
    rs_client_close(holder);
    ts_server_stop(&replica);
    ts_server_stop(&master);
}
