/*
 * test_async_failover.c - the event-loop API under redis-cluster:// through a failover of
 * the shard its requests wait on (issue 16). 3 masters + 3 replicas (tests/support/cluster.h)
 * on 127.0.0.1; NAMES names, all on one shard, held by a blocking client, PER
 * rs_mutex_acquire_async requests pending on each (fifo_t, test_async.h); then the shard's
 * replica is promoted and the holds released:
 *
 *   manual_failover     CLUSTER FAILOVER on the replica (the old master hands over after
 *                       the replica caught up, and becomes its replica)
 *   takeover_after_kill the master killed (SIGKILL) after WAIT saw its replica take every
 *                       queue entry, then CLUSTER FAILOVER TAKEOVER on the replica
 *   failover_while_granting  the holds released, and CLUSTER FAILOVER sent once an eighth
 *                       of the requests were granted: the grants and releases go on while
 *                       the old master pauses its clients and hands over, so calls in
 *                       flight meet the pause and then MOVED
 *
 * Both: every request granted exactly once, in FIFO order per name (the queues moved whole:
 * a manual failover waits for the replica's offset, the takeover follows WAIT), never two
 * holds of a name at once, each grant's fencing token above the name's last one in a
 * fenced store on a separate redis-server that the failover does not touch (a token given
 * twice, or one going back, is refused there), no queue entry left on the new master; and
 * none waits past lease + timeout_ms: from the release of the holds, the gap before each
 * name's first grant and between its grants stays under that bound (a request whose entry
 * was dropped, or whose wake-up went to the old master and was never looked for again,
 * would wait longer, or forever).
 *
 * They fail when the pipelines do not follow the new master (MOVED after the failover: the
 * requests end with RS_ECONN after timeout_ms, or never), when the requests in flight on the
 * killed master's connection are not sent again (they never complete), or when a grant is
 * delivered twice (two done calls, or a fencing token refused by the store).
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

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

TestSuite(async_failover, .timeout = 180);

#define NAMES 16
#define PER 100
#define LEASE_MS 3000
#define TIMEOUT_MS 3000

typedef struct fo_env {
    ts_server_t nodes[6];
    ts_server_t store; /* the fenced store: outside the cluster, no failover touches it */
    redisContext *sc;
    char prefix[32], url[200];
    int master, replica;
    char names[NAMES][16];
} fo_env_t;

static int slot_of(const fo_env_t *e, const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "%s:{%s}:mutex", e->prefix, name);
    return (int)ts_cmd_int(&e->nodes[e->replica >= 0 ? e->replica : 0], "CLUSTER KEYSLOT %s",
                           key);
}

static int owner_of(const fo_env_t *e, const char *name)
{
    return ts_cluster_owner(e->nodes, 6, slot_of(e, name));
}

/* ZCARD of name's queue on node i. */
static long long queued_on(const fo_env_t *e, int i, const char *name)
{
    return ts_cmd_int(&e->nodes[i], "ZCARD %s:{%s}:mutex:q", e->prefix, name);
}

/* The replica of node master: the node whose INFO replication names the master's port. */
static int replica_of(const fo_env_t *e, int master)
{
    for (int i = 0; i < 6; i++) {
        char buf[4096], want[32];
        snprintf(want, sizeof want, "master_port:%d", e->nodes[master].port);
        if (i != master && ts_cmd_str(&e->nodes[i], buf, sizeof buf, "INFO replication") &&
            strstr(buf, want))
            return i;
    }
    cr_assert_fail("no replica of node %d", master);
    return -1;
}

static void env_start(fo_env_t *e)
{
    memset(e, 0, sizeof *e);
    e->replica = -1;
    cr_assert_eq(ts_cluster_start_rep(e->nodes, 6, 1, NULL), 0);
    tu_start_server(&e->store);
    cr_assert_not_null(e->sc = ts_connect(&e->store));
    ts_unique_prefix(e->prefix, sizeof e->prefix);
    int n = snprintf(e->url, sizeof e->url, "redis-cluster://%s", ts_deploy_userinfo());
    for (int i = 0; i < 6; i++)
        n += snprintf(e->url + n, sizeof e->url - (size_t)n, "%s127.0.0.1:%d", i ? "," : "",
                      e->nodes[i].port);
    /* the shard of "f0", and NAMES names on it */
    e->master = owner_of(e, "f0");
    cr_assert_geq(e->master, 0);
    e->replica = replica_of(e, e->master);
    int got = 0;
    for (int i = 0; got < NAMES && i < 10000; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "f%d", i);
        if (owner_of(e, nm) == e->master)
            memcpy(e->names[got++], nm, sizeof nm);
    }
    cr_assert_eq(got, NAMES);
}

static void env_stop(fo_env_t *e)
{
    redisFree(e->sc);
    ts_server_stop(&e->store);
    ts_cluster_stop(e->nodes, 6);
}

static rs_client_t *env_client(const fo_env_t *e)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = e->url;
    cfg.prefix = e->prefix;
    cfg.lease_ms = LEASE_MS;
    cfg.timeout_ms = TIMEOUT_MS;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    return c;
}

/* every name's fence and count keys in the store, which is one plain server */
static redisContext *store_of(fifo_t *x, int name, char *fk, char *ck, size_t len)
{
    fo_env_t *e = x->arg;
    snprintf(fk, len, "%s:%s:tfence", e->prefix, e->names[name]);
    snprintf(ck, len, "%s:%s:tcount", e->prefix, e->names[name]);
    return e->sc;
}

typedef struct fo_run {
    rs_client_t *c, *blocker;
    rs_mutex_t *m[NAMES], *bm[NAMES];
    rs_hold_t *bh[NAMES];
} fo_run_t;

/* The holds taken, PER requests pending on each name, all queued on the master. */
static void queue_up(fo_env_t *e, fo_run_t *r, fifo_t *x)
{
    memset(x, 0, sizeof *x);
    x->names = NAMES;
    x->per = PER;
    x->store = store_of;
    x->arg = e;
    r->c = env_client(e);
    r->blocker = env_client(e);
    for (int i = 0; i < NAMES; i++) {
        cr_assert_eq(rs_mutex_init(&r->m[i], r->c, e->names[i]), 0);
        cr_assert_eq(rs_mutex_init(&r->bm[i], r->blocker, e->names[i]), 0);
        cr_assert_eq(rs_mutex_acquire(r->bm[i], NULL, &r->bh[i]), 0, "%s",
                     rs_client_lasterror(r->blocker));
    }
    fifo_submit(x, r->m, r->c);
    for (int i = 0; i < NAMES; i++) {
        long long end = tu_mono_ms() + 20000, q = -1;
        while (tu_mono_ms() < end && (q = queued_on(e, e->master, e->names[i])) != PER)
            tu_sleep_ms(10);
        cr_assert_eq(q, PER, "%s: %lld queued, not %d", e->names[i], q, PER);
    }
    /* (a few dispatches: nothing may complete while the blockers hold) */
    cr_assert_eq(loop_until(r->c, &x->granted, 1, 200), 0, "granted while the blockers hold");
    cr_assert_eq(x->errors, 0, "%d request(s) ended before the failover (last %d %s)",
                 x->errors, x->last_rc, rs_strerror(x->last_rc));
}

/* The port node s says serves slot (its CLUSTER SLOTS); -1 when s does not answer. */
static int port_serving(const ts_server_t *s, int slot)
{
    redisContext *k = ts_connect(s);
    if (!k)
        return -1;
    redisReply *rep = redisCommand(k, "CLUSTER SLOTS");
    int port = -1;
    for (size_t j = 0; rep && rep->type == REDIS_REPLY_ARRAY && j < rep->elements; j++) {
        redisReply *r = rep->element[j];
        if (r->elements >= 3 && slot >= r->element[0]->integer &&
            slot <= r->element[1]->integer && r->element[2]->elements >= 2)
            port = (int)r->element[2]->element[1]->integer;
    }
    if (rep)
        freeReplyObject(rep);
    redisFree(k);
    return port;
}

/* The slot of the names served by the replica, as every node that answers sees it; with
 * c, its completions dispatched meanwhile (x counts them). */
static void wait_promoted_on(fo_env_t *e, rs_client_t *c, fifo_t *x)
{
    int slot = slot_of(e, e->names[0]), all = 0;
    long long end = tu_mono_ms() + 30000;
    while (tu_mono_ms() < end && !all) {
        all = 1;
        for (int i = 0; i < 6 && all; i++) {
            int p = port_serving(&e->nodes[i], slot);
            all = p == e->nodes[e->replica].port || (p < 0 && i == e->master);
        }
        if (!all && c)
            loop_until(c, &x->released, x->names * x->per, 20);
        else if (!all)
            tu_sleep_ms(20);
    }
    cr_assert(all, "the failover never happened (or not every node knows it)");
}

static void wait_promoted(fo_env_t *e)
{
    wait_promoted_on(e, NULL, NULL);
}

/* Releases the holds, serves every request, checks (see the top); promote: called between
 * the release and the serving (NULL: none). */
static void release_and_check(fo_env_t *e, fo_run_t *r, fifo_t *x, const char *what,
                              int promote)
{
    long long t0 = tu_mono_ms();
    x->t_from_ms = t0;
    for (int i = 0; i < NAMES; i++) {
        int rc = rs_hold_release(r->bh[i]);
        cr_expect_eq(rc, 0, "%s: the blocker's release: %d %s", e->names[i], rc,
                     rs_client_lasterror(r->blocker));
    }
    if (promote) { /* the grants flow (dispatched) while the switch is made */
        cr_assert(loop_until(r->c, &x->granted, NAMES * PER / 8, 20000));
        int before = x->granted;
        char buf[256];
        cr_assert_not_null(ts_cmd_str(&e->nodes[e->replica], buf, sizeof buf,
                                      "CLUSTER FAILOVER"));
        wait_promoted_on(e, r->c, x);
        cr_log_info("%s: node %d -> node %d; of %d requests %d granted when it was asked, %d "
                    "when every node knew it", what, e->master, e->replica, NAMES * PER, before,
                    x->granted);
    }
    cr_assert(loop_until(r->c, &x->released, NAMES * PER, 60000),
              "%s: granted %d released %d errors %d (last %d %s)", what, x->granted,
              x->released, x->errors, x->last_rc, rs_strerror(x->last_rc));
    cr_log_info("%s: %d requests on %d names of one shard served in %lld ms after the release, "
                "the longest wait between grants of a name %lld ms (bound %d)", what,
                NAMES * PER, NAMES, tu_mono_ms() - t0, x->max_gap_ms, LEASE_MS + TIMEOUT_MS);
    fifo_expect_all(x);
    cr_expect_leq(x->max_gap_ms, LEASE_MS + TIMEOUT_MS, "%s: a name's next grant came %lld ms "
                  "after its last (or after the release): past lease + timeout_ms", what,
                  x->max_gap_ms);
    for (int i = 0; i < NAMES; i++) {
        cr_expect_eq(queued_on(e, e->replica, e->names[i]), 0, "%s: entries left on the new "
                     "master", e->names[i]);
        cr_expect_eq(rs_mutex_trylock(r->bm[i]), 0, "%s is free at the end", e->names[i]);
        rs_mutex_unlock(r->bm[i]);
        cr_expect_eq(rs_mutex_destroy(r->m[i]), 0);
        cr_expect_eq(rs_mutex_destroy(r->bm[i]), 0);
    }
    cr_expect_eq(rs_client_close(r->blocker), 0);
    cr_expect_eq(rs_client_close(r->c), 0);
}

/* One test's environment, run and requests (each test runs in a process of its own). */
typedef struct fo_case {
    fo_env_t e;
    fo_run_t r;
    fifo_t x;
} fo_case_t;

static fo_case_t g_case;

/* The environment up and the requests queued behind the holds. */
static fo_case_t *case_queued(void)
{
    env_start(&g_case.e);
    queue_up(&g_case.e, &g_case.r, &g_case.x);
    return &g_case;
}

/* release_and_check, then the environment down. */
static void case_finish(fo_case_t *k, const char *what, int promote)
{
    release_and_check(&k->e, &k->r, &k->x, what, promote);
    env_stop(&k->e);
}

Test(async_failover, manual_failover)
{
    fo_case_t *k = case_queued();
    char buf[256];
    cr_assert_not_null(ts_cmd_str(&k->e.nodes[k->e.replica], buf, sizeof buf,
                                  "CLUSTER FAILOVER"));
    wait_promoted(&k->e);
    cr_log_info("CLUSTER FAILOVER: node %d -> node %d", k->e.master, k->e.replica);
    case_finish(k, "manual failover", 0);
}

Test(async_failover, takeover_after_kill)
{
    fo_case_t *k = case_queued();
    /* every queue entry and hold on the replica before the master dies */
    cr_assert_eq(ts_cmd_int(&k->e.nodes[k->e.master], "WAIT 1 5000"), 1, "the replica lags");
    ts_server_kill(&k->e.nodes[k->e.master]);
    char buf[256];
    cr_assert_not_null(ts_cmd_str(&k->e.nodes[k->e.replica], buf, sizeof buf,
                                  "CLUSTER FAILOVER TAKEOVER"));
    wait_promoted(&k->e);
    cr_log_info("master node %d killed, node %d took over", k->e.master, k->e.replica);
    case_finish(k, "takeover", 0);
}

Test(async_failover, failover_while_granting)
{
    case_finish(case_queued(), "failover while granting", 1);
}
