/*
 * test_tls_deploy.c - TLS on the deployments beyond one server: Redlock over three TLS
 * masters (one down), a Cluster with tls-cluster yes (MOVED and ASK name the nodes' TLS
 * ports), Sentinel with TLS sentinels and replication through a failover. Certificates and
 * servers as in test_tls.c (tests/support/test_tls.h).
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "redis_server.h"
#include "redisync.h"
#include "sentinel.h"
#include "test_assert.h"
#include "test_tls.h"
#include "tls.h"

TestSuite(tls_deploy, .timeout = 120);

/* ------------------------------------------------------------------------------------- */
/* Redlock over three TLS masters (the fan-out reads every master through the transport)  */

Test(tls_deploy, redlock_over_three_tls_masters)
{
    tt_certs_t t;
    cr_assert_eq(tt_certs_make(&t), 0);
    ts_server_t s[3];
    int port[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(tt_server_start(&s[i], &port[i], &t, NULL, 0), 0);
    char url[1024];
    snprintf(url, sizeof url, "redlock://%s127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?tls=1&tls_ca=%s",
             ts_acl_userinfo(), port[0], port[1], port[2], t.ca);
    tu_lost_t lc = {0};
    rs_client_t *c = open_ok(url, 600, &lc), *c2 = open_ok(url, 600, NULL);
    rs_mutex_t *m = new_mutex(c, "rl"), *m2 = new_mutex(c2, "rl");
    cr_assert_eq(rs_mutex_lock(m), 0, "lock: %s", rs_client_lasterror(c));
    /* a quorum at least: a master whose TLS handshake was slow under load is left out for
     * a second (lib/rlround.c), and the lock is granted by the other two */
    int on = 0;
    for (int i = 0; i < 3; i++)
        on += ts_cmd_int(&s[i], "EXISTS rs:{rl}:mutex") == 1;
    cr_expect_geq(on, 2, "the hold is on %d of 3 masters", on);
    cr_expect_eq(rs_mutex_trylock(m2), EBUSY);
    tu_sleep_ms(1200); /* two leases: renewed on the masters through the watchdog */
    cr_expect_eq(rs_mutex_unlock(m), 0, "unlock: %s", rs_client_lasterror(c));
    /* one master down: a quorum of two still grants */
    ts_server_kill(&s[2]);
    cr_expect_eq(rs_mutex_lock(m2), 0, "lock with one master down: %s",
                 rs_client_lasterror(c2));
    cr_expect_eq(rs_mutex_trylock(m), EBUSY);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    cr_expect_eq(atomic_load(&lc.n), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    for (int i = 0; i < 3; i++)
        ts_server_stop(&s[i]);
    tt_certs_free(&t);
}

/* ------------------------------------------------------------------------------------- */
/* Cluster over TLS: the slot map and MOVED name the nodes' TLS ports to a TLS client     */

typedef struct locker {
    rs_mutex_t *m;
    rs_hold_t *h; /* a hold object: the test's own thread releases it */
    int rc;
    atomic_int done;
} locker_t;

static void *lock_main(void *arg)
{
    locker_t *l = arg;
    l->rc = rs_mutex_acquire(l->m, NULL, &l->h);
    atomic_store(&l->done, 1);
    return NULL;
}

Test(tls_deploy, cluster_with_tls_moved_and_ask)
{
    tt_certs_t t;
    cr_assert_eq(tt_certs_make(&t), 0);
    ts_server_t nodes[3];
    int port[3];
    cr_assert_eq(tt_cluster_start(nodes, 3, port, &t), 0, "cannot start a TLS cluster");
    char url[1024];
    snprintf(url, sizeof url, "redis-cluster://%s127.0.0.1:%d?tls=1&tls_ca=%s",
             ts_deploy_userinfo(), port[0], t.ca);
    rs_client_t *c = open_ok(url, 600, NULL), *c2 = open_ok(url, 600, NULL);

    /* names on every node, locked and renewed over TLS */
    rs_mutex_t *m[6];
    for (int i = 0; i < 6; i++) {
        char name[8];
        snprintf(name, sizeof name, "n%d", i);
        m[i] = new_mutex(c, name);
        cr_expect_eq(rs_mutex_lock(m[i]), 0, "lock %s: %s", name, rs_client_lasterror(c));
    }
    tu_sleep_ms(1200); /* two leases */
    for (int i = 0; i < 6; i++) {
        cr_expect_eq(rs_mutex_unlock(m[i]), 0, "unlock: %s", rs_client_lasterror(c));
        rs_mutex_destroy(m[i]);
    }

    /* an empty slot moved behind the clients' back: the first call meets MOVED, which names
     * the new owner's TLS port */
    int slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT rs:{mv}:mutex");
    int src = ts_cluster_owner(nodes, 3, slot), dst = (src + 1) % 3;
    cr_assert_geq(src, 0);
    char id[64], buf[256];
    cr_assert_not_null(ts_cluster_myid(&nodes[dst], id, sizeof id));
    for (int i = 0; i < 3; i++)
        cr_assert_not_null(ts_cmd_str(&nodes[i], buf, sizeof buf, "CLUSTER SETSLOT %d NODE %s",
                                      slot, id));
    rs_mutex_t *mv = new_mutex(c2, "mv");
    cr_expect_eq(rs_mutex_lock(mv), 0, "lock after the move: %s", rs_client_lasterror(c2));
    cr_expect_eq(ts_cmd_int(&nodes[dst], "EXISTS rs:{mv}:mutex"), 1, "not on the new owner");
    long long moved = ts_info_ll(&nodes[src], "errorstats", "errorstat_MOVED", "count");
    cr_expect_gt(moved, 0, "the client never met a MOVED");
    cr_expect_eq(rs_mutex_unlock(mv), 0);
    rs_mutex_destroy(mv);

    /* a slot half-way through a migration: a new name has its keys on neither side, so the
     * source answers ASK (naming the importing node's TLS port) and the importing node,
     * asked with ASKING, TRYAGAIN (a multi-key call with keys missing): the lock waits that
     * out within timeout_ms and is granted on the new owner once the migration ends */
    slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT rs:{ask}:mutex");
    src = ts_cluster_owner(nodes, 3, slot), dst = (src + 1) % 3;
    char src_id[64];
    cr_assert_not_null(ts_cluster_myid(&nodes[src], src_id, sizeof src_id));
    cr_assert_not_null(ts_cluster_myid(&nodes[dst], id, sizeof id));
    cr_assert_not_null(ts_cmd_str(&nodes[dst], buf, sizeof buf, "CLUSTER SETSLOT %d IMPORTING %s",
                                  slot, src_id));
    cr_assert_not_null(ts_cmd_str(&nodes[src], buf, sizeof buf, "CLUSTER SETSLOT %d MIGRATING %s",
                                  slot, id));
    long long ask0 = ts_info_ll(&nodes[src], "errorstats", "errorstat_ASK", "count");
    locker_t lk = {.m = new_mutex(c2, "ask")};
    pthread_t th;
    tu_thread_start(&th, lock_main, &lk);
    tu_sleep_ms(1800); /* longer than 16 redirections with back-off (~1.2 s), within the
                        * client's timeout_ms (3 s): the ASK-TRYAGAIN cycle must be waited out */
    cr_expect_eq(atomic_load(&lk.done), 0, "returned while the slot was half-way: %d", lk.rc);
    cr_expect_gt(ts_info_ll(&nodes[src], "errorstats", "errorstat_ASK", "count"),
                 ask0 < 0 ? 0 : ask0, "the client never met an ASK");
    for (int i = 0; i < 3; i++) /* the migration ends: the importing node owns the slot */
        cr_assert_not_null(ts_cmd_str(&nodes[i], buf, sizeof buf, "CLUSTER SETSLOT %d NODE %s",
                                      slot, id));
    cr_assert(tu_thread_join(th, &lk.done, 10000), "the lock never returned");
    cr_expect_eq(lk.rc, 0, "lock across the migration: %d", lk.rc);
    cr_expect_eq(ts_cmd_int(&nodes[dst], "EXISTS rs:{ask}:mutex"), 1, "not on the new owner");
    if (lk.rc == 0)
        cr_expect_eq(rs_hold_release(lk.h), 0, "release: %s", rs_client_lasterror(c2));
    rs_mutex_t *ak = lk.m;
    rs_mutex_destroy(ak);
    rs_client_close(c);
    rs_client_close(c2);
    ts_cluster_stop(nodes, 3);
    tt_certs_free(&t);
}

/* ------------------------------------------------------------------------------------- */
/* Sentinel over TLS: sentinels, master and replica on TLS ports, through a failover      */

static int sentinel_master_is(const ts_server_t *sent, int port)
{
    return ts_sentinel_master_port(sent, "tlsmaster") == port;
}

Test(tls_deploy, sentinel_failover)
{
    tt_certs_t t;
    cr_assert_eq(tt_certs_make(&t), 0);
    ts_server_t master, replica, sent;
    int mport, rport, sport;
    const char *mx[] = {"--repl-diskless-sync-delay", "0", "--tls-replication", "yes", NULL};
    cr_assert_eq(tt_server_startx(&master, &mport, &t, NULL, 0, mx), 0);
    char mp[16];
    snprintf(mp, sizeof mp, "%d", mport);
    const char *rx[] = {"--replicaof", "127.0.0.1", mp, "--repl-diskless-sync-delay", "0",
                        "--tls-replication", "yes", NULL};
    cr_assert_eq(tt_server_startx(&replica, &rport, &t, NULL, 0, rx), 0);
    cr_assert_eq(ts_wait_replica_up(&replica, 15000), 0, "replication over TLS never came up");
    cr_assert_eq(ts_wait_replicas_online(&master, 1, 15000), 0);
    cr_assert_eq(tt_sentinel_start(&sent, &sport, &t, "tlsmaster", mport, 1, 1000, 5000), 0);
    char url[1024];
    snprintf(url, sizeof url, "redis-sentinel://%s127.0.0.1:%d/tlsmaster?tls=1&tls_ca=%s",
             ts_deploy_userinfo(), sport, t.ca);
    rs_client_t *c = open_ok(url, 1000, NULL);
    rs_mutex_t *m = new_mutex(c, "s");
    cr_expect_eq(rs_mutex_lock(m), 0, "lock: %s", rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&master, "EXISTS rs:{s}:mutex"), 1);
    cr_expect_eq(rs_mutex_unlock(m), 0);

    char reply[128] = "";
    long long until = tu_mono_ms() + 20000;
    while (tu_mono_ms() < until) {
        if (ts_cmd_str(&sent, reply, sizeof reply, "SENTINEL FAILOVER tlsmaster") &&
            !strcmp(reply, "OK"))
            break;
        tu_sleep_ms(100); /* NOGOODSLAVE until the sentinel has seen the replica */
    }
    cr_assert_str_eq(reply, "OK", "SENTINEL FAILOVER: %s", reply);
    until = tu_mono_ms() + 20000;
    while (!sentinel_master_is(&sent, rport) && tu_mono_ms() < until)
        tu_sleep_ms(20);
    cr_assert(sentinel_master_is(&sent, rport), "the sentinel never named the replica's TLS "
              "port (it names %d)", ts_sentinel_master_port(&sent, "tlsmaster"));
    /* the client follows the switch to the new master, over TLS (a lock right after the
     * switch may still land on the old master, which answers as a master until it is
     * demoted, if the client has not heard of the switch yet: then it goes on) */
    int rc = -1, there = 0;
    until = tu_mono_ms() + 20000;
    while (tu_mono_ms() < until) {
        struct timespec dl = tu_abs_in(3000);
        if ((rc = rs_mutex_timedlock(m, &dl)) == 0) {
            there = ts_cmd_int(&replica, "EXISTS rs:{s}:mutex") == 1;
            if (there)
                break;
            rs_mutex_unlock(m);
        }
        tu_sleep_ms(100);
    }
    cr_expect_eq(rc, 0, "lock after the failover: %d %s", rc, rs_client_lasterror(c));
    cr_expect(there, "never on the new master");
    if (rc == 0)
        cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&sent);
    ts_server_stop(&replica);
    ts_server_stop(&master);
    tt_certs_free(&t);
}

