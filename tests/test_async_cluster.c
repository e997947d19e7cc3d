/*
 * test_async_cluster.c - the event-loop API under redis-cluster:// (issue 16): one pipelined
 * connection per master (lib/async_wire.c), each request's calls on the master of its
 * name's slot, MOVED/ASK followed, sharded wake-ups for callback waiters. Real clusters of
 * three masters (tests/support/cluster.h) on 127.0.0.1.
 *
 *   fifo_across_nodes   an epoll loop, 20 requests on each of 15 held names spread over the
 *                       three masters: every grant once, in FIFO order per name, never two
 *                       at once (a fenced counter per name, in the name's slot, checks it),
 *                       released with rs_hold_release_async (0 through dispatch); while
 *                       they wait, each master has the sharded wake-up channel of each of
 *                       its names subscribed
 *   cancel_deadline     on a name of each master: a deadline ends a request with ETIMEDOUT,
 *                       a cancel with ECANCELED, and both leave the queue; a third is
 *                       granted when the holder releases
 *   migration_pending   50 requests wait on a name whose slot migrates to another master
 *                       (10 more sent while its keys are on the new one, before the slot is
 *                       handed over: ASK): all served once, never two at once
 *   node_conn_killed    CLIENT KILL of the normal and pub/sub connections of one master
 *                       while requests wait on names of all three: all served once, in turn
 *   min_replicas_confirmed  3 masters + 3 replicas, min_replicas 1: the write before WAIT
 *                       goes in the name's slot on its master's pipeline (SET calls counted),
 *                       every request on a name of each master granted once, none RS_EREPL
 *   rwlock_sem_latch    read holds share and a write waits; semaphore permits wait for
 *                       their return; 20 latch waits complete at count 0, not before
 *   close_pending       rs_client_close with 20 requests pending on a name of each master:
 *                       every done(ECANCELED) runs inside close, no queue entry is left
 *
 * Without per-node pipelines every _async call here returned ENOTSUP.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"
#include "test_async.h"

TestSuite(async_cluster, .timeout = 180);

typedef struct acl_env {
    ts_server_t nodes[6];
    int n; /* nodes: 3 masters, and with env_start_rep their 3 replicas */
    char prefix[32], url[160];
    int min_replicas;
} acl_env_t;

static void env_start(acl_env_t *e)
{
    e->n = 3;
    cr_assert_eq(ts_cluster_start(e->nodes, 3), 0);
    ts_unique_prefix(e->prefix, sizeof e->prefix);
    ts_cluster_url(e->url, sizeof e->url, &e->nodes[0]);
}

static rs_client_t *env_client(const acl_env_t *e, long lease_ms)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = e->url;
    cfg.prefix = e->prefix;
    cfg.lease_ms = lease_ms;
    cfg.timeout_ms = 5000;
    cfg.min_replicas = e->min_replicas;
    cfg.replica_timeout_ms = 2000;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    return c;
}

static int slot_of(const acl_env_t *e, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "%s:{%s}:mutex", e->prefix, name);
    return (int)ts_cmd_int(&e->nodes[0], "CLUSTER KEYSLOT %s", key);
}

static int owner_of(const acl_env_t *e, const char *name)
{
    return ts_cluster_owner(e->nodes, e->n, slot_of(e, name));
}

/* ZCARD of name's queue on the master that serves it now. */
static long long queued(const acl_env_t *e, const char *name)
{
    int o = owner_of(e, name);
    return o < 0 ? -1 : ts_cmd_int(&e->nodes[o], "ZCARD %s:{%s}:mutex:q", e->prefix, name);
}

static void wait_queued(const acl_env_t *e, const char *name, long long want)
{
    long long end = tu_mono_ms() + 20000, q = -1;
    while (tu_mono_ms() < end && (q = queued(e, name)) != want)
        tu_sleep_ms(10);
    cr_assert_eq(q, want, "%s: %lld queued, not %lld", name, q, want);
}

/* PUBSUB SHARDCHANNELS' count on node s. */
static long long shard_channels(const ts_server_t *s)
{
    redisContext *k = ts_connect(s);
    cr_assert_not_null(k);
    redisReply *r = redisCommand(k, "PUBSUB SHARDCHANNELS");
    long long n = r && r->type == REDIS_REPLY_ARRAY ? (long long)r->elements : -1;
    if (r)
        freeReplyObject(r);
    redisFree(k);
    return n;
}

/* Names "nI" picked so that each master serves per of them: names[3 * per][16]. */
static void pick_names(const acl_env_t *e, char (*names)[16], int per)
{
    int have[6] = {0}, n = 0;
    for (int i = 0; n < 3 * per && i < 10000; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "n%d", i);
        int o = owner_of(e, nm);
        cr_assert_geq(o, 0);
        if (have[o] >= per)
            continue;
        have[o]++;
        memcpy(names[n++], nm, sizeof nm);
    }
    cr_assert_eq(n, 3 * per);
}

/* ---- FIFO over the three masters --------------------------------------------------------- */

#define PERNODE 5
#define NNAMES (3 * PERNODE)
#define PER 20

typedef struct fifo_nodes {
    acl_env_t *e;
    redisContext *check[3];
    char names[NNAMES][16];
    int owner[NNAMES];
} fifo_nodes_t;

/* a name's store is on its own master, in its slot: PREFIX:{NAME}:tfence, :tcount */
static redisContext *node_store(fifo_t *x, int name, char *fk, char *ck, size_t len)
{
    fifo_nodes_t *f = x->arg;
    snprintf(fk, len, "%s:{%s}:tfence", f->e->prefix, f->names[name]);
    snprintf(ck, len, "%s:{%s}:tcount", f->e->prefix, f->names[name]);
    return f->check[f->owner[name]];
}

Test(async_cluster, fifo_across_nodes)
{
    static acl_env_t e;
    env_start(&e);
    static fifo_nodes_t f;
    static fifo_t x;
    memset(&f, 0, sizeof f);
    memset(&x, 0, sizeof x);
    f.e = &e;
    x.names = NNAMES;
    x.per = PER;
    x.store = node_store;
    x.arg = &f;
    pick_names(&e, f.names, PERNODE);
    for (int i = 0; i < 3; i++)
        cr_assert_not_null(f.check[i] = ts_connect(&e.nodes[i]));
    rs_client_t *c = env_client(&e, 5000), *blocker = env_client(&e, 5000);
    rs_mutex_t *m[NNAMES], *bm[NNAMES];
    rs_hold_t *bh[NNAMES];
    for (int i = 0; i < NNAMES; i++) {
        f.owner[i] = owner_of(&e, f.names[i]);
        cr_assert_eq(rs_mutex_init(&m[i], c, f.names[i]), 0);
        cr_assert_eq(rs_mutex_init(&bm[i], blocker, f.names[i]), 0);
        cr_assert_eq(rs_mutex_acquire(bm[i], NULL, &bh[i]), 0, "%s", rs_client_lasterror(blocker));
    }
    fifo_submit(&x, m, c);
    for (int n = 0; n < NNAMES; n++)
        wait_queued(&e, f.names[n], PER);
    /* the wake-ups' sharded channels: one per name, on the name's master (without them a
     * waiter would only be served when its queue entry's renewal finds it granted) */
    for (int i = 0; i < 3; i++)
        cr_expect_geq(shard_channels(&e.nodes[i]), PERNODE, "node %d: %lld sharded channels, "
                      "not one per name", i, shard_channels(&e.nodes[i]));
    cr_expect_eq(x.granted + x.errors, 0, "completed while the blockers hold");
    for (int i = 0; i < NNAMES; i++)
        cr_assert_eq(rs_hold_release(bh[i]), 0);
    cr_assert(loop_until(c, &x.released, NNAMES * PER, 60000),
              "granted %d released %d errors %d (last %d)", x.granted, x.released, x.errors,
              x.last_rc);
    fifo_expect_all(&x);
    for (int i = 0; i < NNAMES; i++) {
        cr_expect_eq(rs_mutex_destroy(m[i]), 0);
        cr_expect_eq(rs_mutex_destroy(bm[i]), 0);
    }
    for (int i = 0; i < 3; i++)
        redisFree(f.check[i]);
    rs_client_close(blocker);
    rs_client_close(c);
    ts_cluster_stop(e.nodes, e.n);
}

/* ---- deadline, cancel, grant on every master -------------------------------------------- */

Test(async_cluster, cancel_deadline)
{
    static acl_env_t e;
    env_start(&e);
    char names[3][16];
    pick_names(&e, names, 1);
    rs_client_t *c = env_client(&e, 5000), *blocker = env_client(&e, 5000);
    for (int i = 0; i < 3; i++) {
        rs_mutex_t *m, *bm;
        rs_hold_t *bh;
        cr_assert_eq(rs_mutex_init(&m, c, names[i]), 0);
        cr_assert_eq(rs_mutex_init(&bm, blocker, names[i]), 0);
        cr_assert_eq(rs_mutex_acquire(bm, NULL, &bh), 0, "%s", rs_client_lasterror(blocker));
        one_t late = {0}, can = {0}, got = {0};
        rs_request_t *rl, *rc_, *rg;
        struct timespec dl = tu_abs_in(3000);
        cr_assert_eq(rs_mutex_acquire_async(m, &dl, one_done, &late, &rl), 0, "%s",
                     rs_client_lasterror(c));
        cr_assert_eq(rs_mutex_acquire_async(m, NULL, one_done, &can, &rc_), 0);
        cr_assert_eq(rs_mutex_acquire_async(m, NULL, one_done, &got, &rg), 0);
        wait_queued(&e, names[i], 3);
        cr_assert_eq(rs_request_cancel(rc_), 0);
        cr_assert(loop_until(c, &can.ran, 1, 10000), "the cancel never completed");
        cr_expect_eq(can.rc, ECANCELED, "%s", rs_strerror(can.rc));
        cr_assert(loop_until(c, &late.ran, 1, 10000), "the deadline never fired");
        cr_expect_eq(late.rc, ETIMEDOUT, "%s", rs_strerror(late.rc));
        wait_queued(&e, names[i], 1);
        cr_expect_eq(got.ran, 0);
        cr_assert_eq(rs_hold_release(bh), 0);
        cr_assert(loop_until(c, &got.ran, 1, 10000), "never granted");
        cr_assert_eq(got.rc, 0, "%s", rs_strerror(got.rc));
        one_t rel = {0};
        cr_assert_eq(rs_hold_release_async(got.hold, one_done, &rel), 0);
        cr_assert(loop_until(c, &rel.ran, 1, 10000));
        cr_expect_eq(rel.rc, 0, "%s", rs_strerror(rel.rc));
        cr_expect_eq(late.ran + can.ran + got.ran + rel.ran, 4);
        cr_expect_eq(rs_mutex_trylock(bm), 0, "the mutex is free at the end");
        rs_mutex_unlock(bm);
        rs_mutex_destroy(m);
        rs_mutex_destroy(bm);
    }
    rs_client_close(blocker);
    rs_client_close(c);
    ts_cluster_stop(e.nodes, e.n);
}

/* ---- a slot migrates while requests wait -------------------------------------------------- */

#define NMIG 50
#define NASK 10

Test(async_cluster, migration_pending)
{
    static acl_env_t e;
    env_start(&e);
    const char *name = "mig";
    int slot = slot_of(&e, name);
    int src = owner_of(&e, name), dst = (src + 1) % 3;
    cr_assert_geq(src, 0);
    rs_client_t *c = env_client(&e, 5000), *holder = env_client(&e, 5000);
    rs_mutex_t *hm;
    rs_hold_t *h;
    rs_mutex_t *m = mutex_held_by(c, holder, name, &hm, &h);
    static tally_t t;
    static treq_t r[NMIG + NASK];
    tally_pend(m, &t, r, NMIG);
    wait_queued(&e, name, NMIG);

    char src_id[64], dst_id[64], buf[256];
    cr_assert_not_null(ts_cluster_myid(&e.nodes[src], src_id, sizeof src_id));
    cr_assert_not_null(ts_cluster_myid(&e.nodes[dst], dst_id, sizeof dst_id));
    cr_assert_not_null(ts_cmd_str(&e.nodes[dst], buf, sizeof buf,
                                  "CLUSTER SETSLOT %d IMPORTING %s", slot, src_id));
    cr_assert_not_null(ts_cmd_str(&e.nodes[src], buf, sizeof buf,
                                  "CLUSTER SETSLOT %d MIGRATING %s", slot, dst_id));
    redisContext *s = ts_connect(&e.nodes[src]);
    cr_assert_not_null(s);
    for (;;) {
        redisReply *rep = redisCommand(s, "CLUSTER GETKEYSINSLOT %d 100", slot);
        cr_assert(rep && rep->type == REDIS_REPLY_ARRAY);
        size_t nk = rep->elements;
        for (size_t i = 0; i < nk; i++) {
            redisReply *mr = redisCommand(s, "MIGRATE 127.0.0.1 %d %s 0 5000",
                                          e.nodes[dst].port, rep->element[i]->str);
            cr_expect(mr && mr->type != REDIS_REPLY_ERROR, "MIGRATE %s: %s",
                      rep->element[i]->str, mr ? mr->str : "no reply");
            if (mr)
                freeReplyObject(mr);
        }
        freeReplyObject(rep);
        if (nk == 0)
            break;
    }
    redisFree(s);
    /* the keys are on the new master, the slot not yet: these calls meet ASK */
    rs_request_t *req;
    for (int i = NMIG; i < NMIG + NASK; i++) {
        r[i].t = &t;
        r[i].i = i;
        cr_assert_eq(rs_mutex_acquire_async(m, NULL, tally_done, &r[i], &req), 0, "%s",
                     rs_client_lasterror(c));
    }
    long long askq = -1, end = tu_mono_ms() + 10000;
    redisContext *d = ts_connect(&e.nodes[dst]);
    cr_assert_not_null(d);
    while (tu_mono_ms() < end) { /* ZCARD behind ASKING: the importing node answers */
        redisReply *a = redisCommand(d, "ASKING");
        if (a)
            freeReplyObject(a);
        redisReply *z = redisCommand(d, "ZCARD %s:{%s}:mutex:q", e.prefix, name);
        askq = z && z->type == REDIS_REPLY_INTEGER ? z->integer : -1;
        if (z)
            freeReplyObject(z);
        if (askq == NMIG + NASK)
            break;
        tu_sleep_ms(10);
    }
    redisFree(d);
    cr_expect_eq(askq, NMIG + NASK, "the requests sent during the migration did not queue "
                 "on the importing node (ASK)");
    for (int i = 0; i < 3; i++)
        cr_assert_not_null(ts_cmd_str(&e.nodes[i], buf, sizeof buf,
                                      "CLUSTER SETSLOT %d NODE %s", slot, dst_id));
    cr_assert_eq(ts_cluster_owner(e.nodes, 3, slot), dst);
    cr_expect_eq(t.ran, 0, "completed while the holder holds");
    cr_assert_eq(rs_hold_release(h), 0, "%s", rs_client_lasterror(holder));
    cr_assert(loop_until(c, &t.ran, NMIG + NASK, 60000), "ran %d of %d (ok %d, errors %d, "
              "last %d)", t.ran, NMIG + NASK, t.ok, t.errs, t.last_rc);
    for (int i = 0; i < NMIG + NASK; i++)
        cr_expect_eq(t.each[i], 1, "request %d ran %d times", i, t.each[i]);
    cr_expect_eq(t.ok, NMIG + NASK, "errors %d (last %d: %s)", t.errs, t.last_rc,
                 rs_strerror(t.last_rc));
    cr_expect_eq(t.overlap, 0);
    cr_expect_eq(queued(&e, name), 0);
    cr_expect_eq(rs_mutex_trylock(hm), 0, "the mutex is free at the end");
    rs_mutex_unlock(hm);
    rs_mutex_destroy(m);
    rs_mutex_destroy(hm);
    rs_client_close(holder);
    rs_client_close(c);
    ts_cluster_stop(e.nodes, e.n);
}

/* ---- one master's connections killed while requests wait --------------------------------- */

#define NKILL 30

Test(async_cluster, node_conn_killed)
{
    static acl_env_t e;
    env_start(&e);
    char names[3][16];
    pick_names(&e, names, 1);
    rs_client_t *c = env_client(&e, 2000), *blocker = env_client(&e, 5000);
    rs_mutex_t *m[3], *bm[3];
    rs_hold_t *bh[3];
    static tally_t t[3];
    static treq_t r[3][NKILL];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(rs_mutex_init(&m[i], c, names[i]), 0);
        cr_assert_eq(rs_mutex_init(&bm[i], blocker, names[i]), 0);
        cr_assert_eq(rs_mutex_acquire(bm[i], NULL, &bh[i]), 0, "%s",
                     rs_client_lasterror(blocker));
        tally_pend(m[i], &t[i], r[i], NKILL);
    }
    for (int i = 0; i < 3; i++)
        wait_queued(&e, names[i], NKILL);
    int victim = owner_of(&e, names[1]);
    cr_assert_gt(ts_cmd_int(&e.nodes[victim], "CLIENT KILL TYPE normal"), 0, "nothing killed");
    cr_assert_gt(ts_cmd_int(&e.nodes[victim], "CLIENT KILL TYPE pubsub"), 0,
                 "no subscriber killed");
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rs_hold_release(bh[i]), 0, "%s", rs_client_lasterror(blocker));
    int ran = 0;
    long long end = tu_mono_ms() + 60000;
    while (tu_mono_ms() < end && (ran = t[0].ran + t[1].ran + t[2].ran) < 3 * NKILL) {
        int want = 3 * NKILL;
        loop_until(c, &ran, want, 50); /* ran is refreshed by the while */
    }
    cr_assert_eq(ran, 3 * NKILL, "ran %d/%d/%d of %d each", t[0].ran, t[1].ran, t[2].ran,
                 NKILL);
    for (int n = 0; n < 3; n++) {
        for (int i = 0; i < NKILL; i++)
            cr_expect_eq(t[n].each[i], 1, "%s: request %d ran %d times", names[n], i,
                         t[n].each[i]);
        cr_expect_eq(t[n].ok, NKILL, "%s: errors %d (last %d: %s)", names[n], t[n].errs,
                     t[n].last_rc, rs_strerror(t[n].last_rc));
        cr_expect_eq(t[n].overlap, 0);
        cr_expect_eq(queued(&e, names[n]), 0);
        cr_expect_eq(rs_mutex_trylock(bm[n]), 0, "%s is free at the end", names[n]);
        rs_mutex_unlock(bm[n]);
        rs_mutex_destroy(m[n]);
        rs_mutex_destroy(bm[n]);
    }
    rs_client_close(blocker);
    rs_client_close(c);
    ts_cluster_stop(e.nodes, e.n);
}

/* ---- min_replicas: the write before WAIT in the name's slot, on its master's pipeline ---- */

#define NREP 10

static long long sum_set_calls(const acl_env_t *e)
{
    long long sum = 0;
    for (int i = 0; i < e->n; i++) {
        long long v = ts_info_ll(&e->nodes[i], "commandstats", "cmdstat_set", "calls");
        sum += v > 0 ? v : 0;
    }
    return sum;
}

Test(async_cluster, min_replicas_confirmed)
{
    static acl_env_t e;
    e.n = 6;
    cr_assert_eq(ts_cluster_start_rep(e.nodes, 6, 1, NULL), 0);
    ts_unique_prefix(e.prefix, sizeof e.prefix);
    int seed = ts_cluster_is_master(&e.nodes[0]) ? 0 : 1;
    ts_cluster_url(e.url, sizeof e.url, &e.nodes[seed]);
    e.min_replicas = 1;
    char names[3][16];
    int have[6] = {0}, got = 0;
    for (int i = 0; got < 3 && i < 10000; i++) { /* one name on each master */
        char nm[16];
        snprintf(nm, sizeof nm, "r%d", i);
        int o = owner_of(&e, nm);
        cr_assert_geq(o, 0);
        if (have[o])
            continue;
        have[o] = 1;
        memcpy(names[got++], nm, sizeof nm);
    }
    cr_assert_eq(got, 3);
    rs_client_t *c = env_client(&e, 5000), *blocker = env_client(&e, 5000);
    rs_mutex_t *m[3], *bm[3];
    rs_hold_t *bh[3];
    static tally_t t[3];
    static treq_t r[3][NREP];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(rs_mutex_init(&m[i], c, names[i]), 0);
        cr_assert_eq(rs_mutex_init(&bm[i], blocker, names[i]), 0);
        cr_assert_eq(rs_mutex_acquire(bm[i], NULL, &bh[i]), 0, "%s",
                     rs_client_lasterror(blocker));
    }
    long long set0 = sum_set_calls(&e);
    for (int i = 0; i < 3; i++)
        tally_pend(m[i], &t[i], r[i], NREP);
    for (int i = 0; i < 3; i++)
        wait_queued(&e, names[i], NREP);
    /* each queued call was confirmed by a SET in its slot (a PUBLISH outside the slot would
     * not be replicated, and a SET in another node's slot would be refused) */
    cr_expect_geq(sum_set_calls(&e) - set0, 3 * NREP, "the confirmations did not write");
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rs_hold_release(bh[i]), 0, "%s", rs_client_lasterror(blocker));
    int ran = 0;
    long long end = tu_mono_ms() + 60000;
    while (tu_mono_ms() < end && (ran = t[0].ran + t[1].ran + t[2].ran) < 3 * NREP)
        loop_until(c, &ran, 3 * NREP, 50); /* ran is refreshed by the while */
    cr_assert_eq(ran, 3 * NREP, "ran %d/%d/%d of %d each", t[0].ran, t[1].ran, t[2].ran, NREP);
    for (int n = 0; n < 3; n++) {
        for (int i = 0; i < NREP; i++)
            cr_expect_eq(t[n].each[i], 1, "%s: request %d ran %d times", names[n], i,
                         t[n].each[i]);
        cr_expect_eq(t[n].ok, NREP, "%s: errors %d (last %d: %s)", names[n], t[n].errs,
                     t[n].last_rc, rs_strerror(t[n].last_rc));
        cr_expect_eq(t[n].overlap, 0);
        rs_mutex_destroy(m[n]);
        rs_mutex_destroy(bm[n]);
    }
    rs_client_close(blocker);
    rs_client_close(c);
    ts_cluster_stop(e.nodes, e.n);
}

/* ---- the other primitives ------------------------------------------------------------------ */

Test(async_cluster, rwlock_sem_latch)
{
    static acl_env_t e;
    env_start(&e);
    rs_client_t *c = env_client(&e, 5000), *c2 = env_client(&e, 5000);
    rs_request_t *req;
    /* read holds share, a write waits for both */
    rs_rwlock_t *rw;
    cr_assert_eq(rs_rwlock_init(&rw, c, "rw"), 0);
    one_t r1 = {0}, r2 = {0}, w = {0};
    cr_assert_eq(rs_rwlock_acquire_read_async(rw, NULL, one_done, &r1, &req), 0, "%s",
                 rs_client_lasterror(c));
    cr_assert_eq(rs_rwlock_acquire_read_async(rw, NULL, one_done, &r2, &req), 0);
    cr_assert(loop_until(c, &r1.ran, 1, 10000));
    cr_assert(loop_until(c, &r2.ran, 1, 10000));
    cr_assert_eq(r1.rc, 0, "%s", rs_strerror(r1.rc));
    cr_assert_eq(r2.rc, 0, "%s", rs_strerror(r2.rc));
    cr_assert_eq(rs_rwlock_acquire_write_async(rw, NULL, one_done, &w, &req), 0);
    cr_expect_eq(loop_until(c, &w.ran, 1, 300), 0, "the writer got in with readers");
    cr_assert_eq(rs_hold_release(r1.hold), 0);
    cr_assert_eq(rs_hold_release(r2.hold), 0);
    cr_assert(loop_until(c, &w.ran, 1, 10000));
    cr_assert_eq(w.rc, 0, "%s", rs_strerror(w.rc));
    cr_expect_gt(rs_hold_fence(w.hold), 0);
    cr_assert_eq(rs_hold_release(w.hold), 0);
    rs_rwlock_destroy(rw);
    /* permits: 2 of 3 out, 2 more wait until they come back */
    rs_sem_t *sem;
    cr_assert_eq(rs_sem_init(&sem, c, "sem", 3), 0);
    one_t a = {0}, b = {0};
    cr_assert_eq(rs_sem_acquire_async(sem, 2, NULL, one_done, &a, &req), 0);
    cr_assert(loop_until(c, &a.ran, 1, 10000));
    cr_assert_eq(a.rc, 0, "%s", rs_strerror(a.rc));
    cr_assert_eq(rs_sem_acquire_async(sem, 2, NULL, one_done, &b, &req), 0);
    cr_expect_eq(loop_until(c, &b.ran, 1, 300), 0);
    cr_assert_eq(rs_hold_release(a.hold), 0);
    cr_assert(loop_until(c, &b.ran, 1, 10000));
    cr_assert_eq(b.rc, 0, "%s", rs_strerror(b.rc));
    cr_assert_eq(rs_hold_release(b.hold), 0);
    rs_sem_destroy(sem);
    /* 20 waits complete when the count reaches 0, not before */
    rs_latch_t *l, *l2;
    cr_assert_eq(rs_latch_init(&l, c, "gate", 2), 0);
    cr_assert_eq(rs_latch_init(&l2, c2, "gate", 0), 0);
    static many_t t;
    memset(&t, 0, sizeof t);
    static many_req_t r[20];
    for (int i = 0; i < 20; i++) {
        r[i].t = &t;
        r[i].i = i;
        cr_assert_eq(rs_latch_wait_async(l, NULL, many_done, &r[i], &req), 0, "%s",
                     rs_client_lasterror(c));
    }
    cr_assert_eq(rs_latch_count_down(l2), 0, "%s", rs_client_lasterror(c2));
    cr_expect_eq(loop_until(c, &t.ran, 1, 300), 0, "done at count 1");
    cr_assert_eq(rs_latch_count_down(l2), 0);
    cr_assert(loop_until(c, &t.ran, 20, 10000), "ran %d of 20", t.ran);
    cr_expect_eq(t.ok, 20);
    cr_expect_eq(rs_latch_destroy(l), 0);
    cr_expect_eq(rs_latch_destroy(l2), 0);
    rs_client_close(c2);
    rs_client_close(c);
    ts_cluster_stop(e.nodes, e.n);
}

/* ---- rs_client_close with requests pending on every master ------------------------------ */

#define NCLOSE 20

Test(async_cluster, close_pending)
{
    static acl_env_t e;
    env_start(&e);
    char names[3][16];
    pick_names(&e, names, 1);
    rs_client_t *c = env_client(&e, 5000), *blocker = env_client(&e, 5000);
    rs_mutex_t *m[3], *bm[3];
    static many_t t;
    memset(&t, 0, sizeof t);
    static many_req_t r[3 * NCLOSE];
    rs_request_t *req;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(rs_mutex_init(&m[i], c, names[i]), 0);
        cr_assert_eq(rs_mutex_init(&bm[i], blocker, names[i]), 0);
        cr_assert_eq(rs_mutex_lock(bm[i]), 0, "%s", rs_client_lasterror(blocker));
        for (int k = 0; k < NCLOSE; k++) {
            many_req_t *x = &r[i * NCLOSE + k];
            x->t = &t;
            x->i = i * NCLOSE + k;
            cr_assert_eq(rs_mutex_acquire_async(m[i], NULL, many_done, x, &req), 0, "%s",
                         rs_client_lasterror(c));
        }
    }
    for (int i = 0; i < 3; i++)
        wait_queued(&e, names[i], NCLOSE);
    cr_assert_eq(t.ran, 0);
    cr_assert_eq(rs_client_close(c), 0);
    many_expect_canceled(&t, 3 * NCLOSE);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(queued(&e, names[i]), 0, "%s: entries left in the queue", names[i]);
        cr_expect_eq(rs_mutex_unlock(bm[i]), 0);
        rs_mutex_destroy(m[i]);
        rs_mutex_destroy(bm[i]);
    }
    rs_client_close(blocker);
    ts_cluster_stop(e.nodes, e.n);
}
