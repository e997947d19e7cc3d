/*
 * test_cluster_shard.c - sharded wake-ups in redis-cluster:// deployments of Redis >= 7.0
 * (lib/notify_shard.c, wake() in primitives/common.lua; issue 15). Real clusters made by
 * `redis-cli --cluster create` (tests/support/cluster.h) on 127.0.0.1.
 *
 *   wakeup_skips_the_bus     a waiter queued on a held mutex is woken at the release by one
 *                            SPUBLISH on its name's sharded channel: the nodes'
 *                            cluster_stats_messages_publish_sent does not move (a PUBLISH
 *                            would add one per other node), the waiter's client subscribed
 *                            with SSUBSCRIBE on the slot's master; the releaser's client is
 *                            forced classic (the waiter chooses the channel)
 *   forced_classic_publishes REDISYNC_CLUSTER_PUBSUB=classic in the waiter's client: its
 *                            wake-up is a PUBLISH (publish_sent moves, no SPUBLISH) and it is
 *                            served all the same, by a releaser that takes sharded wake-ups
 *   migration_serves_waiters the slot of a mutex with queued waiters moves to another master
 *                            (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE): the
 *                            sharded subscriptions follow it (sunsubscribe, re-SSUBSCRIBE)
 *                            and every waiter is served after the release, none waiting the
 *                            holder's lease (what a lost wake-up would cost)
 *   failover_serves_waiters  the same with the slot's master replaced by its replica
 *                            (CLUSTER FAILOVER on the replica, 3 masters + 3 replicas)
 *   channels_bounded_no_lost_wakeup
 *                            one client waits on RS_SHARD_CHANNELS_MAX + 16 names in turn:
 *                            the masters then hold exactly RS_SHARD_CHANNELS_MAX of its
 *                            channels (the least recently used unsubscribed), and a wait on
 *                            the first name, whose channel went, subscribes it again and is
 *                            woken by the release, not by the holder's lease
 *   min_replicas_sync_stays_in_the_shard
 *                            3 masters + 3 replicas, min_replicas 1: lock/unlock pairs and
 *                            the watchdog's renewals, each confirmed by a write and WAIT, send
 *                            nothing over the cluster bus (a PUBLISH as that write was copied
 *                            to the 5 other nodes and, not replicated, left WAIT nothing to
 *                            wait for), the write being a SET of PREFIX:{NAME}:sync; then a
 *                            handoff while the slot's replica is stopped (SIGSTOP): the
 *                            woken waiter's confirmation is not taken for replicated
 *                            (RS_EREPL; the mutex's "already yours" answer writes, so this
 *                            held with the PUBLISH too: it guards the confirmation itself)
 * Without the re-subscription a waiter's wake-up after a move is published where nobody
 * listens, and it sleeps the holder's whole lease (WAITER_LEASE_MS) before it retries.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_util.h"

TestSuite(cluster_shard, .timeout = 120);

#define NWAIT 4
#define HOLDER_LEASE_MS 6000 /* a waiter whose wake-up is lost sleeps up to this long */

static rs_client_t *open_client(const char *url, const char *prefix, int classic)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = HOLDER_LEASE_MS;
    cfg.timeout_ms = 5000;
    if (classic)
        setenv("REDISYNC_CLUSTER_PUBSUB", "classic", 1);
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    unsetenv("REDISYNC_CLUSTER_PUBSUB");
    cr_assert_eq(rc, 0, "open: %s", rs_client_lasterror(NULL));
    return c;
}

static long long sum_info(const ts_server_t *nodes, int n, const char *field)
{
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        char buf[4096], key[96];
        cr_assert_not_null(ts_cmd_str(&nodes[i], buf, sizeof buf, "CLUSTER INFO"));
        snprintf(key, sizeof key, "%s:", field);
        cr_assert_not_null(strstr(buf, "cluster_state:"), "CLUSTER INFO: %s", buf);
        const char *p = strstr(buf, key);
        sum += p ? atoll(p + strlen(key)) : 0; /* listed once a message of the kind was sent */
    }
    return sum;
}

static long long sum_calls(const ts_server_t *nodes, int n, const char *cmd)
{
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        long long v = ts_info_ll(&nodes[i], "commandstats", cmd, "calls");
        sum += v > 0 ? v : 0;
    }
    return sum;
}

/* Shard channels subscribed on node s (PUBSUB SHARDNUMSUB of one channel is not enough: we
 * do not know the public id), i.e. PUBSUB SHARDCHANNELS' count. */
static long long shard_channels(const ts_server_t *s)
{
    redisContext *c = ts_connect(s);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "PUBSUB SHARDCHANNELS");
    long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return n;
}

typedef struct waiter {
    rs_client_t *c;
    rs_mutex_t *m;
    atomic_int queued_once, done;
    int rc;
    long long got_ms; /* monotonic ms of the grant */
    char err[200];
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    struct timespec dl = tu_abs_in(60000);
    w->rc = rs_mutex_timedlock(w->m, &dl);
    w->got_ms = tu_mono_ms();
    if (w->rc != 0)
        snprintf(w->err, sizeof w->err, "%s", rs_client_lasterror(w->c));
    else {
        tu_sleep_ms(20);
        if (rs_mutex_unlock(w->m) != 0) {
            w->rc = -1;
            snprintf(w->err, sizeof w->err, "unlock: %s", rs_client_lasterror(w->c));
        }
    }
    atomic_store(&w->done, 1);
    return NULL;
}

/* ZCARD of the mutex's queue on whichever node serves it now (-1 if none answers). */
static long long queued(const ts_server_t *nodes, int n, const char *prefix, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "%s:{%s}:mutex:q", prefix, name);
    int slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key);
    int owner = ts_cluster_owner(nodes, n, slot);
    return owner < 0 ? -1 : ts_cmd_int(&nodes[owner], "ZCARD %s", key);
}

static void wait_queued(const ts_server_t *nodes, int n, const char *prefix, const char *name,
                        long long want)
{
    long long end = tu_mono_ms() + 10000, q = -1;
    while (tu_mono_ms() < end && (q = queued(nodes, n, prefix, name)) != want)
        tu_sleep_ms(10);
    cr_assert_eq(q, want, "%lld waiters queued, not %lld", q, want);
}

/* One waiter on a held mutex, woken by the release; returns the release-to-grant ms. */
static long long one_handoff(const ts_server_t *nodes, int n, const char *url,
                             const char *prefix, int waiter_classic, int releaser_classic,
                             long long *pub, long long *spub)
{
    rs_client_t *h = open_client(url, prefix, releaser_classic);
    waiter_t w = {0};
    w.c = open_client(url, prefix, waiter_classic);
    rs_mutex_t *hm;
    cr_assert_eq(rs_mutex_init(&hm, h, "n0"), 0);
    cr_assert_eq(rs_mutex_init(&w.m, w.c, "n0"), 0);
    cr_assert_eq(rs_mutex_lock(hm), 0, "%s", rs_client_lasterror(h));
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, waiter_main, &w), 0);
    wait_queued(nodes, n, prefix, "n0", 1);
    tu_sleep_ms(100);
    long long pub0 = sum_info(nodes, n, "cluster_stats_messages_publish_sent");
    long long spub0 = sum_calls(nodes, n, "cmdstat_spublish");
    long long t0 = tu_mono_ms();
    cr_assert_eq(rs_mutex_unlock(hm), 0, "%s", rs_client_lasterror(h));
    cr_assert(tu_thread_join(th, &w.done, 20000), "the waiter never returned");
    cr_assert_eq(w.rc, 0, "waiter: %s", w.err);
    *pub = sum_info(nodes, n, "cluster_stats_messages_publish_sent") - pub0;
    *spub = sum_calls(nodes, n, "cmdstat_spublish") - spub0;
    rs_mutex_destroy(hm);
    rs_mutex_destroy(w.m);
    rs_client_close(h);
    rs_client_close(w.c);
    return w.got_ms - t0;
}

Test(cluster_shard, wakeup_skips_the_bus)
{
    ts_server_t nodes[3];
    cr_assert_eq(ts_cluster_start(nodes, 3), 0);
    char prefix[32], url[160];
    ts_unique_prefix(prefix, sizeof prefix);
    ts_cluster_url(url, sizeof url, &nodes[0]);
    long long pub, spub;
    long long ms = one_handoff(nodes, 3, url, prefix, 0, 1, &pub, &spub);
    cr_log_info("sharded wake-up: %lld ms, %lld bus publish messages, %lld SPUBLISH", ms, pub,
                spub);
    cr_expect_eq(pub, 0, "the wake-up crossed the cluster bus as a PUBLISH (%lld messages)",
                 pub);
    cr_expect_eq(spub, 1, "%lld SPUBLISH for one handoff", spub);
    cr_expect_lt(ms, HOLDER_LEASE_MS / 2, "woken after %lld ms: the wake-up was lost", ms);
    /* the waiter's channel was subscribed on the slot's master alone */
    char key[96];
    snprintf(key, sizeof key, "%s:{n0}:mutex", prefix);
    int owner = ts_cluster_owner(nodes, 3, (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key));
    cr_assert_geq(owner, 0);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(shard_channels(&nodes[i]), 0, "node %d: channels left after close", i);
    ts_cluster_stop(nodes, 3);
}

Test(cluster_shard, forced_classic_publishes)
{
    ts_server_t nodes[3];
    cr_assert_eq(ts_cluster_start(nodes, 3), 0);
    char prefix[32], url[160];
    ts_unique_prefix(prefix, sizeof prefix);
    ts_cluster_url(url, sizeof url, &nodes[1]);
    long long pub, spub;
    long long ms = one_handoff(nodes, 3, url, prefix, 1, 0, &pub, &spub);
    cr_log_info("classic wake-up: %lld ms, %lld bus publish messages, %lld SPUBLISH", ms, pub,
                spub);
    cr_expect_geq(pub, 2, "a PUBLISH in 3 masters is copied to the 2 others (%lld)", pub);
    cr_expect_eq(spub, 0, "%lld SPUBLISH although the waiter forced classic", spub);
    cr_expect_lt(ms, HOLDER_LEASE_MS / 2, "woken after %lld ms: the wake-up was lost", ms);
    ts_cluster_stop(nodes, 3);
}

typedef struct moving {
    ts_server_t *nodes;
    int n;
    char prefix[32], url[160];
    rs_client_t *h, *wc[2];
    rs_mutex_t *hm;
    waiter_t w[NWAIT];
    pthread_t th[NWAIT];
} moving_t;

/* A holder of n0 and NWAIT queued waiters in two other clients. */
static void queue_up(moving_t *mv)
{
    mv->h = open_client(mv->url, mv->prefix, 0);
    cr_assert_eq(rs_mutex_init(&mv->hm, mv->h, "n0"), 0);
    cr_assert_eq(rs_mutex_lock(mv->hm), 0, "%s", rs_client_lasterror(mv->h));
    for (int i = 0; i < 2; i++)
        mv->wc[i] = open_client(mv->url, mv->prefix, 0);
    for (int i = 0; i < NWAIT; i++) {
        mv->w[i].c = mv->wc[i % 2];
        cr_assert_eq(rs_mutex_init(&mv->w[i].m, mv->w[i].c, "n0"), 0);
        cr_assert_eq(pthread_create(&mv->th[i], NULL, waiter_main, &mv->w[i]), 0);
    }
    wait_queued(mv->nodes, mv->n, mv->prefix, "n0", NWAIT);
}

/* Releases n0 and checks that every waiter is served within the holder's lease. */
static void serve_all(moving_t *mv)
{
    long long t0 = tu_mono_ms();
    cr_assert_eq(rs_mutex_unlock(mv->hm), 0, "release: %s", rs_client_lasterror(mv->h));
    long long last = 0;
    for (int i = 0; i < NWAIT; i++) {
        cr_assert(tu_thread_join(mv->th[i], &mv->w[i].done, 30000), "waiter %d stuck", i);
        cr_expect_eq(mv->w[i].rc, 0, "waiter %d: %s", i, mv->w[i].err);
        if (mv->w[i].got_ms - t0 > last)
            last = mv->w[i].got_ms - t0;
    }
    cr_log_info("%d waiters served %lld ms after the release", NWAIT, last);
    /* a waiter whose wake-up is lost sleeps until the holder's lease would have run out */
    cr_expect_lt(last, HOLDER_LEASE_MS / 2, "the last waiter was served %lld ms after the "
                 "release: a wake-up was lost", last);
    for (int i = 0; i < NWAIT; i++)
        rs_mutex_destroy(mv->w[i].m);
    rs_mutex_destroy(mv->hm);
    rs_client_close(mv->h);
    for (int i = 0; i < 2; i++)
        rs_client_close(mv->wc[i]);
}

Test(cluster_shard, migration_serves_waiters)
{
    ts_server_t nodes[3];
    cr_assert_eq(ts_cluster_start(nodes, 3), 0);
    moving_t *mv = calloc(1, sizeof *mv);
    mv->nodes = nodes;
    mv->n = 3;
    ts_unique_prefix(mv->prefix, sizeof mv->prefix);
    ts_cluster_url(mv->url, sizeof mv->url, &nodes[0]);
    char key[96];
    snprintf(key, sizeof key, "%s:{n0}:mutex", mv->prefix);
    int slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key);
    int src = ts_cluster_owner(nodes, 3, slot), dst = (src + 1) % 3;
    cr_assert_geq(src, 0);
    queue_up(mv);
    cr_expect_gt(shard_channels(&nodes[src]), 0, "no sharded channel on the slot's master");

    char src_id[64], dst_id[64], buf[256];
    cr_assert_not_null(ts_cluster_myid(&nodes[src], src_id, sizeof src_id));
    cr_assert_not_null(ts_cluster_myid(&nodes[dst], dst_id, sizeof dst_id));
    cr_assert_not_null(ts_cmd_str(&nodes[dst], buf, sizeof buf, "CLUSTER SETSLOT %d IMPORTING %s",
                                  slot, src_id));
    cr_assert_not_null(ts_cmd_str(&nodes[src], buf, sizeof buf, "CLUSTER SETSLOT %d MIGRATING %s",
                                  slot, dst_id));
    redisContext *s = ts_connect(&nodes[src]);
    cr_assert_not_null(s);
    for (;;) {
        redisReply *r = redisCommand(s, "CLUSTER GETKEYSINSLOT %d 100", slot);
        cr_assert(r && r->type == REDIS_REPLY_ARRAY);
        size_t nk = r->elements;
        for (size_t i = 0; i < nk; i++) {
            redisReply *m = redisCommand(s, "MIGRATE 127.0.0.1 %d %s 0 5000", nodes[dst].port,
                                         r->element[i]->str);
            cr_expect(m && m->type != REDIS_REPLY_ERROR, "MIGRATE %s: %s", r->element[i]->str,
                      m ? m->str : "no reply");
            if (m)
                freeReplyObject(m);
        }
        freeReplyObject(r);
        if (nk == 0)
            break;
    }
    redisFree(s);
    for (int i = 0; i < 3; i++)
        cr_assert_not_null(ts_cmd_str(&nodes[i], buf, sizeof buf, "CLUSTER SETSLOT %d NODE %s",
                                      slot, dst_id));
    cr_assert_eq(ts_cluster_owner(nodes, 3, slot), dst);
    /* the subscriptions follow the slot */
    long long end = tu_mono_ms() + 5000;
    while (tu_mono_ms() < end && shard_channels(&nodes[dst]) < 2)
        tu_sleep_ms(20);
    cr_expect_geq(shard_channels(&nodes[dst]), 2, "the two waiting clients' channels did "
                  "not move to the new master");
    serve_all(mv);
    free(mv);
    ts_cluster_stop(nodes, 3);
}

/* A replica of node master: the node whose INFO replication names the master's port. */
static int replica_of(const ts_server_t *nodes, int n, int master)
{
    for (int i = 0; i < n; i++) {
        char buf[4096], want[32];
        snprintf(want, sizeof want, "master_port:%d", nodes[master].port);
        if (i != master && ts_cmd_str(&nodes[i], buf, sizeof buf, "INFO replication") &&
            strstr(buf, want))
            return i;
    }
    cr_assert_fail("no replica of node %d", master);
    return -1;
}

Test(cluster_shard, failover_serves_waiters)
{
    ts_server_t nodes[6];
    cr_assert_eq(ts_cluster_start_rep(nodes, 6, 1, NULL), 0);
    moving_t *mv = calloc(1, sizeof *mv);
    mv->nodes = nodes;
    mv->n = 6;
    ts_unique_prefix(mv->prefix, sizeof mv->prefix);
    int seed = ts_cluster_is_master(&nodes[0]) ? 0 : 1;
    ts_cluster_url(mv->url, sizeof mv->url, &nodes[seed]);
    char key[96];
    snprintf(key, sizeof key, "%s:{n0}:mutex", mv->prefix);
    int slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key);
    int master = ts_cluster_owner(nodes, 6, slot);
    cr_assert_geq(master, 0);
    int replica = replica_of(nodes, 6, master);
    queue_up(mv);

    char buf[256];
    cr_assert_not_null(ts_cmd_str(&nodes[replica], buf, sizeof buf, "CLUSTER FAILOVER"));
    long long end = tu_mono_ms() + 20000;
    while (tu_mono_ms() < end && ts_cluster_owner(nodes, 6, slot) != replica)
        tu_sleep_ms(20);
    cr_assert_eq(ts_cluster_owner(nodes, 6, slot), replica, "the failover never happened");
    cr_log_info("failover: node %d -> node %d", master, replica);
    tu_sleep_ms(200); /* let the holder's renewals and the subscribers meet the new master */
    serve_all(mv);
    free(mv);
    ts_cluster_stop(nodes, 6);
}

/* ------------------------------------------------------------------------------------- */
/* The bound on a client's sharded channels (RS_SHARD_CHANNELS_MAX, lib/internal.h): one
 * client waits on more names than that, one after the other; the masters must then hold
 * exactly the bound's number of its channels (the least recently used, nobody waiting on
 * them, were unsubscribed: SUNSUBSCRIBE), and a wait on the first name, whose channel went
 * first, subscribes it again and is woken by the release, not by the holder's lease. */

#define BOUND_EXTRA 16
#define BOUND_LEASE_MS 20000 /* a waiter whose wake-up is lost sleeps up to this long */

static long long all_shard_channels(const ts_server_t *nodes, int n)
{
    long long sum = 0;
    for (int i = 0; i < n; i++)
        sum += shard_channels(&nodes[i]);
    return sum;
}

static long long wait_channels(const ts_server_t *nodes, int n, long long want)
{
    long long end = tu_mono_ms() + 10000, got;
    while ((got = all_shard_channels(nodes, n)) != want && tu_mono_ms() < end)
        tu_sleep_ms(20);
    return got;
}

Test(cluster_shard, channels_bounded_no_lost_wakeup, .timeout = 180)
{
    ts_server_t nodes[3];
    cr_assert_eq(ts_cluster_start(nodes, 3), 0);
    char prefix[32], url[160];
    ts_unique_prefix(prefix, sizeof prefix);
    ts_cluster_url(url, sizeof url, &nodes[2]);
    rs_client_t *h = open_client(url, prefix, 1); /* classic: it never waits, no channels */
    waiter_t w;
    memset(&w, 0, sizeof w);
    w.c = open_client(url, prefix, 0);
    long long t0 = tu_mono_ms();
    /* one wait per name on a held mutex, each given up after 2 ms (queued, then cancelled):
     * each subscribes the name's channel, at its first wait, and keeps it */
    int nnames = RS_SHARD_CHANNELS_MAX + BOUND_EXTRA;
    for (int i = 0; i < nnames; i++) {
        char name[32];
        snprintf(name, sizeof name, "b%d", i);
        rs_mutex_t *hm = NULL, *wm = NULL;
        cr_assert_eq(rs_mutex_init(&hm, h, name), 0);
        cr_assert_eq(rs_mutex_init(&wm, w.c, name), 0);
        cr_assert_eq(rs_mutex_lock(hm), 0, "%s: %s", name, rs_client_lasterror(h));
        struct timespec dl = tu_abs_in(2);
        int rc = rs_mutex_timedlock(wm, &dl);
        cr_assert_eq(rc, ETIMEDOUT, "%s: waiter got %d (%s)", name, rc,
                     rs_client_lasterror(w.c));
        cr_assert_eq(rs_mutex_unlock(hm), 0);
        cr_assert_eq(rs_mutex_destroy(hm), 0);
        cr_assert_eq(rs_mutex_destroy(wm), 0);
    }
    long long got = wait_channels(nodes, 3, RS_SHARD_CHANNELS_MAX);
    cr_log_info("%d waits on %d names in %lld ms: %lld sharded channels on the masters",
                nnames, nnames, tu_mono_ms() - t0, got);
    cr_expect_eq(got, RS_SHARD_CHANNELS_MAX, "%lld channels after waits on %d names, bound %d",
                 got, nnames, RS_SHARD_CHANNELS_MAX);

    /* b0's channel was the least recently used: a wait on it now subscribes it again, and
     * the release wakes the waiter */
    rs_mutex_t *hm = NULL;
    cr_assert_eq(rs_mutex_init(&hm, h, "b0"), 0);
    cr_assert_eq(rs_mutex_setlease(hm, BOUND_LEASE_MS), 0);
    cr_assert_eq(rs_mutex_lock(hm), 0);
    cr_assert_eq(rs_mutex_init(&w.m, w.c, "b0"), 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, waiter_main, &w), 0);
    wait_queued(nodes, 3, prefix, "b0", 1);
    long long released = tu_mono_ms();
    cr_assert_eq(rs_mutex_unlock(hm), 0);
    cr_assert(tu_thread_join(th, &w.done, 60000), "the waiter never returned");
    cr_expect_eq(w.rc, 0, "waiter: %s", w.err);
    long long ms = w.got_ms - released;
    cr_log_info("the evicted name's waiter woken %lld ms after the release", ms);
    cr_expect_lt(ms, BOUND_LEASE_MS / 4, "woken after %lld ms: the wake-up was lost", ms);
    cr_expect_eq(wait_channels(nodes, 3, RS_SHARD_CHANNELS_MAX), RS_SHARD_CHANNELS_MAX,
                 "re-subscribing b0 did not keep the count at the bound");
    cr_expect_eq(rs_mutex_destroy(hm), 0);
    cr_expect_eq(rs_mutex_destroy(w.m), 0);
    rs_client_close(h);
    rs_client_close(w.c);
    cr_expect_eq(wait_channels(nodes, 3, 0), 0, "channels left after close");
    ts_cluster_stop(nodes, 3);
}

Test(cluster_shard, min_replicas_sync_stays_in_the_shard)
{
    ts_server_t nodes[6];
    cr_assert_eq(ts_cluster_start_rep(nodes, 6, 1, NULL), 0);
    char prefix[32], url[160];
    ts_unique_prefix(prefix, sizeof prefix);
    ts_cluster_url(url, sizeof url, &nodes[0]);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = 600; /* renewals every 200 ms */
    cfg.timeout_ms = 5000;
    cfg.min_replicas = 1;
    cfg.replica_timeout_ms = 2000;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    rs_mutex_t *m[3];
    const char *names[3] = {"s0", "s1", "s2"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rs_mutex_init(&m[i], c, names[i]), 0);
    long long pub0 = sum_info(nodes, 6, "cluster_stats_messages_publish_sent");
    long long set0 = sum_calls(nodes, 6, "cmdstat_set");
    for (int r = 0; r < 5; r++)
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(rs_mutex_lock(m[i]), 0, "lock: %s", rs_client_lasterror(c));
            cr_assert_eq(rs_mutex_unlock(m[i]), 0, "unlock: %s", rs_client_lasterror(c));
        }
    cr_assert_eq(rs_mutex_lock(m[0]), 0, "lock: %s", rs_client_lasterror(c));
    tu_sleep_ms(1000); /* the watchdog renews it about five times */
    cr_expect_eq(rs_mutex_unlock(m[0]), 0, "unlock after renewals: %s", rs_client_lasterror(c));
    long long pub = sum_info(nodes, 6, "cluster_stats_messages_publish_sent") - pub0;
    long long sets = sum_calls(nodes, 6, "cmdstat_set") - set0;
    cr_log_info("min_replicas 1: %lld bus publish messages, %lld SET", pub, sets);
    cr_expect_eq(pub, 0, "confirmations crossed the cluster bus (%lld publish messages)", pub);
    cr_expect_geq(sets, 16, "%lld SET: the confirmations did not write in the slot", sets);
    /* a handoff while the replica of the name's master is stopped */
    rs_client_t *b = NULL;
    cfg.replica_timeout_ms = 300;
    cr_assert_eq(rs_client_open(&b, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    waiter_t w = {.c = b};
    cr_assert_eq(rs_mutex_init(&w.m, b, "s1"), 0);
    char hkey[96];
    snprintf(hkey, sizeof hkey, "%s:{s1}:mutex", prefix);
    int master = ts_cluster_owner(nodes, 6, (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", hkey));
    cr_assert_geq(master, 0);
    int replica = replica_of(nodes, 6, master);
    cr_assert_eq(rs_mutex_lock(m[1]), 0, "lock: %s", rs_client_lasterror(c));
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, waiter_main, &w), 0);
    wait_queued(nodes, 6, prefix, "s1", 1);
    tu_sleep_ms(300); /* the queue entry's write reaches the replica */
    ts_server_pause(&nodes[replica]);
    rs_mutex_unlock(m[1]);
    int joined = tu_thread_join(th, &w.done, 20000);
    ts_server_resume(&nodes[replica]);
    cr_assert(joined, "the waiter never returned");
    cr_expect_eq(w.rc, RS_EREPL, "the handed-over hold was reported held (%d: %s) while the "
                 "replica was stopped", w.rc, w.err);
    rs_mutex_destroy(w.m);
    rs_client_close(b);

    char key[96];
    snprintf(key, sizeof key, "%s:{s0}:sync", prefix);
    int slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key);
    char key0[96];
    snprintf(key0, sizeof key0, "%s:{s0}:mutex", prefix);
    cr_expect_eq(slot, (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key0));
    for (int i = 0; i < 3; i++)
        rs_mutex_destroy(m[i]);
    rs_client_close(c);
    ts_cluster_stop(nodes, 6);
}
