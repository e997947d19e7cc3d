/*
 * test_cluster.c - redis-cluster:// deployments: three masters made by
 * `redis-cli --cluster create` (tests/support/cluster.h), real processes on 127.0.0.1.
 *
 *   many_names_keep_exclusion  worker processes lock names spread over all three masters
 *                              (the URL names one node; the map comes from CLUSTER SLOTS) and
 *                              do a read-modify-write on a separate checker server under the
 *                              lock: no lost update, no error; rs_list sees holds on every node
 *   slot_migration_costs_no_error  the slot of a busy mutex moves to another master in the
 *                              middle of a run (SETSLOT IMPORTING/MIGRATING, MIGRATE one key
 *                              at a time, SETSLOT NODE): MOVED, ASK and TRYAGAIN are absorbed,
 *                              the workers see no error and carry on (with classic
 *                              wake-ups: REDISYNC_CLUSTER_PUBSUB=classic)
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h" /* rs__cluster_slot: the tests link the static library */
#include "redis_server.h"
#include "redisync.h"
#include "test_util.h"

TestSuite(cluster, .timeout = 120);

#define NNODES 3
#define NWORKERS 3
#define NNAMES 24

typedef struct shared {
    atomic_int stop;
    atomic_int phase;           /* 1 once the migration is over */
    atomic_int ok[NWORKERS][2]; /* sections per phase */
    atomic_int errors[NWORKERS];
    char lasterr[NWORKERS][200];
} shared_t;

static rs_config_t config(const char *url, const char *prefix)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = 1000;
    cfg.timeout_ms = 3000;
    return cfg;
}

/* Locks random names of names[0..nnames) and increments the name's counter on the checker
 * with a GET, a pause and a SET: a lost update means two holders overlapped. */
static void worker(shared_t *sh, int id, const char *url, const char *prefix,
                   const ts_server_t *checker, int nnames)
{
    rs_config_t cfg = config(url, prefix);
    rs_client_t *c = NULL;
    rs_mutex_t *m[NNAMES] = {0};
    redisContext *chk = ts_connect(checker);
    if (!chk || rs_client_open(&c, &cfg) != 0) {
        snprintf(sh->lasterr[id], sizeof sh->lasterr[id], "open: %s", rs_client_lasterror(NULL));
        _exit(2);
    }
    for (int i = 0; i < nnames; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        if (rs_mutex_init(&m[i], c, name) != 0)
            _exit(3);
    }
    unsigned seed = (unsigned)getpid();
    while (!atomic_load(&sh->stop)) {
        int i = nnames > 1 ? (int)(rand_r(&seed) % (unsigned)nnames) : 0;
        struct timespec dl = tu_abs_in(10000);
        int rc = rs_mutex_timedlock(m[i], &dl);
        if (rc != 0) {
            atomic_fetch_add(&sh->errors[id], 1);
            snprintf(sh->lasterr[id], sizeof sh->lasterr[id], "lock n%d: %d %s", i, rc,
                     rs_client_lasterror(c));
            continue;
        }
        int phase = atomic_load(&sh->phase);
        redisReply *r = redisCommand(chk, "GET %s:c:n%d", prefix, i);
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        if (r)
            freeReplyObject(r);
        tu_sleep_ms(1);
        r = redisCommand(chk, "SET %s:c:n%d %lld", prefix, i, v + 1);
        if (r)
            freeReplyObject(r);
        r = redisCommand(chk, "INCR %s:ok:n%d", prefix, i);
        if (r)
            freeReplyObject(r);
        rc = rs_mutex_unlock(m[i]);
        if (rc != 0) {
            atomic_fetch_add(&sh->errors[id], 1);
            snprintf(sh->lasterr[id], sizeof sh->lasterr[id], "unlock n%d: %d %s", i, rc,
                     rs_client_lasterror(c));
        } else {
            atomic_fetch_add(&sh->ok[id][phase], 1);
        }
    }
    for (int i = 0; i < nnames; i++)
        rs_mutex_destroy(m[i]);
    rs_client_close(c);
    redisFree(chk);
    _exit(0);
}

static shared_t *shared_new(void)
{
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    return sh;
}

static void start_workers(shared_t *sh, pid_t *pids, const char *url, const char *prefix,
                          const ts_server_t *checker, int nnames)
{
    for (int i = 0; i < NWORKERS; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0)
            worker(sh, i, url, prefix, checker, nnames);
    }
}

static void stop_workers(shared_t *sh, pid_t *pids)
{
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < NWORKERS; i++) {
        int st = 0;
        waitpid(pids[i], &st, 0);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d: status %d (%s)", i, st,
                  sh->lasterr[i]);
        cr_expect_eq(atomic_load(&sh->errors[i]), 0, "worker %d: %d errors, last: %s", i,
                     atomic_load(&sh->errors[i]), sh->lasterr[i]);
    }
}

/* No lost update on any name: the counter equals the sections. */
static long long check_counters(const ts_server_t *checker, const char *prefix, int nnames)
{
    long long total = 0;
    for (int i = 0; i < nnames; i++) {
        long long c = ts_cmd_int(checker, "GET %s:c:n%d", prefix, i);
        long long ok = ts_cmd_int(checker, "GET %s:ok:n%d", prefix, i);
        if (ok < 0)
            continue; /* never locked */
        cr_expect_eq(c, ok, "n%d: counter %lld after %lld sections: exclusion broken", i, c, ok);
        total += ok;
    }
    return total;
}

static int count_cb(const char *kind, const char *name, void *arg)
{
    (void)kind;
    (void)name;
    ++*(int *)arg;
    return 0;
}

Test(cluster, many_names_keep_exclusion)
{
    ts_server_t nodes[NNODES], checker;
    cr_assert_eq(ts_cluster_start(nodes, NNODES), 0);
    cr_assert_eq(ts_server_start(&checker, NULL), 0);
    char prefix[32], url[160];
    ts_unique_prefix(prefix, sizeof prefix);
    ts_cluster_url(url, sizeof url, &nodes[1]);

    /* the names cover every master */
    int seen[NNODES] = {0};
    for (int i = 0; i < NNAMES; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s:{n%d}:mutex", prefix, i);
        int slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key);
        cr_expect_eq(rs__cluster_slot(key, strlen(key)), (unsigned)slot, "slot of %s", key);
        int owner = ts_cluster_owner(nodes, NNODES, slot);
        cr_assert_geq(owner, 0);
        seen[owner]++;
    }
    for (int i = 0; i < NNODES; i++)
        cr_assert_gt(seen[i], 0, "no name on node %d: pick other names", i);

    /* holds on every node are listed */
    rs_config_t cfg = config(url, prefix);
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    rs_mutex_t *m[NNAMES];
    for (int i = 0; i < NNAMES; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        cr_assert_eq(rs_mutex_init(&m[i], c, name), 0);
        cr_assert_eq(rs_mutex_lock(m[i]), 0, "lock n%d: %s", i, rs_client_lasterror(c));
    }
    int listed = 0;
    cr_expect_eq(rs_list(c, "n*", count_cb, &listed), 0);
    cr_expect_eq(listed, NNAMES, "rs_list found %d of %d holds", listed, NNAMES);
    for (int i = 0; i < NNAMES; i++) {
        cr_expect_eq(rs_mutex_unlock(m[i]), 0);
        rs_mutex_destroy(m[i]);
    }
    rs_client_close(c);

    shared_t *sh = shared_new();
    pid_t pids[NWORKERS];
    start_workers(sh, pids, url, prefix, &checker, NNAMES);
    tu_sleep_ms(3000);
    stop_workers(sh, pids);
    long long total = check_counters(&checker, prefix, NNAMES);
    cr_log_info("cluster: %lld sections on %d names over %d masters", total, NNAMES, NNODES);
    /* every call went straight to the right master */
    for (int i = 0; i < NNODES; i++)
        cr_expect_leq(ts_info_ll(&nodes[i], "errorstats", "errorstat_MOVED", "count"), 0,
                      "node %d answered MOVED: misrouted calls", i);
    /* hash tags: the part between the first { and the next }, if not empty */
    static const char *const keys[] = {"a{b}c", "{}x", "x{", "{a}{b}", "}{z}", "plain"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_expect_eq(rs__cluster_slot(keys[i], strlen(keys[i])),
                     (unsigned)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", keys[i]), "slot of %s",
                     keys[i]);
    cr_expect_gt(total, 50);
    munmap(sh, sizeof *sh);
    ts_server_stop(&checker);
    ts_cluster_stop(nodes, NNODES);
}

Test(cluster, slot_migration_costs_no_error)
{
    ts_server_t nodes[NNODES], checker;
    cr_assert_eq(ts_cluster_start(nodes, NNODES), 0);
    cr_assert_eq(ts_server_start(&checker, NULL), 0);
    char prefix[32], url[160], key[64];
    ts_unique_prefix(prefix, sizeof prefix);
    snprintf(url, sizeof url, "redis-cluster://%s127.0.0.1:%d,127.0.0.1:%d",
             ts_deploy_userinfo(), nodes[0].port, nodes[2].port);
    snprintf(key, sizeof key, "%s:{n0}:mutex", prefix);
    int slot = (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key);
    int src = ts_cluster_owner(nodes, NNODES, slot);
    cr_assert_geq(src, 0);
    int dst = (src + 1) % NNODES;
    char src_id[64], dst_id[64];
    cr_assert_not_null(ts_cluster_myid(&nodes[src], src_id, sizeof src_id));
    cr_assert_not_null(ts_cluster_myid(&nodes[dst], dst_id, sizeof dst_id));

    shared_t *sh = shared_new();
    pid_t pids[NWORKERS];
    /* classic wake-ups: a sharded subscriber hears of the move (sunsubscribe) and reloads the
     * map before the workers' calls meet MOVED; this test is about those calls
     * (test_cluster_shard.c moves a slot under sharded waiters) */
    setenv("REDISYNC_CLUSTER_PUBSUB", "classic", 1);
    start_workers(sh, pids, url, prefix, &checker, 1); /* everyone on n0 */
    unsetenv("REDISYNC_CLUSTER_PUBSUB");
    long long until = tu_mono_ms() + 10000;
    while (tu_mono_ms() < until && atomic_load(&sh->ok[0][0]) + atomic_load(&sh->ok[1][0]) < 30)
        tu_sleep_ms(20);

    /* move the slot, one key at a time, while the workers run */
    char buf[256];
    cr_assert_not_null(ts_cmd_str(&nodes[dst], buf, sizeof buf, "CLUSTER SETSLOT %d IMPORTING %s",
                                  slot, src_id));
    cr_assert_not_null(ts_cmd_str(&nodes[src], buf, sizeof buf, "CLUSTER SETSLOT %d MIGRATING %s",
                                  slot, dst_id));
    int moved = 0;
    until = tu_mono_ms() + 10000;
    while (tu_mono_ms() < until) {
        redisContext *s = ts_connect(&nodes[src]);
        cr_assert_not_null(s);
        redisReply *r = redisCommand(s, "CLUSTER GETKEYSINSLOT %d 1", slot);
        int n = r && r->type == REDIS_REPLY_ARRAY ? (int)r->elements : 0;
        if (n > 0) {
            redisReply *m = redisCommand(s, "MIGRATE 127.0.0.1 %d %s 0 5000", nodes[dst].port,
                                         r->element[0]->str);
            if (m && m->type != REDIS_REPLY_ERROR)
                moved++;
            if (m)
                freeReplyObject(m);
        }
        if (r)
            freeReplyObject(r);
        redisFree(s);
        if (n == 0)
            break;
        tu_sleep_ms(20); /* let the workers meet the half-moved slot */
    }
    for (int i = 0; i < NNODES; i++)
        cr_assert_not_null(ts_cmd_str(&nodes[i], buf, sizeof buf, "CLUSTER SETSLOT %d NODE %s",
                                      slot, dst_id));
    atomic_store(&sh->phase, 1);
    until = tu_mono_ms() + 10000;
    int after = 0;
    while (tu_mono_ms() < until) {
        after = 0;
        for (int i = 0; i < NWORKERS; i++)
            after += atomic_load(&sh->ok[i][1]) >= 5;
        if (after == NWORKERS)
            break;
        tu_sleep_ms(20);
    }
    tu_sleep_ms(300);
    stop_workers(sh, pids);
    /* the redirections the workers met (and absorbed) */
    long long nmoved = ts_info_ll(&nodes[src], "errorstats", "errorstat_MOVED", "count");
    long long nask = ts_info_ll(&nodes[src], "errorstats", "errorstat_ASK", "count");
    long long ntry = ts_info_ll(&nodes[src], "errorstats", "errorstat_TRYAGAIN", "count");
    cr_log_info("source node replied MOVED %lld, ASK %lld, TRYAGAIN %lld times", nmoved, nask,
                ntry);
    cr_expect_gt(nmoved, 0, "the workers never met a MOVED");
    cr_expect_eq(after, NWORKERS, "only %d workers carried on after the migration", after);
    cr_expect_gt(moved, 0, "no key was migrated");
    cr_expect_eq(ts_cluster_owner(nodes, NNODES, slot), dst);
    long long total = check_counters(&checker, prefix, 1);
    cr_log_info("cluster migration: slot %d moved %d -> %d (%d keys), %lld sections", slot, src,
                dst, moved, total);
    munmap(sh, sizeof *sh);
    ts_server_stop(&checker);
    ts_cluster_stop(nodes, NNODES);
}
