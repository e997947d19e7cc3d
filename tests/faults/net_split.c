/*
 * net_split.c - split brain under Sentinel and under Cluster (make test-network:
 * net-sentinel-split, net-cluster-split, net-cluster-split-2r; the rest of the network suite
 * is net.c, the figures net_figures.c).
 *
 * Deployments (the table below). Sentinel: a master, two replicas and three sentinels (quorum
 * 2, down-after-milliseconds 1000, failover-timeout 5000), as topology.c's. Cluster: three
 * masters with one replica each (redis-cli --cluster create --cluster-replicas 1), or with
 * two (-2r: nine nodes, --cluster-replicas 2); cluster-node-timeout 2000. With one replica the
 * promoted replica has none of its own until the old master rejoins, so under min_replicas 1
 * the cut shard's names wait for the heal; with two, the other replica follows the promoted
 * one and the far side must get the cut shard's name n0 during the split when a replica was
 * promoted during it (a liveness violation if not: split_far_live, net_figures.c).
 * -2r-along (opt-in, expected to fail): the same nine nodes with one of the master's replicas
 * cut along with it, so min_replicas 1 is below the replicas that may be promoted: the cut
 * master's WAITs are still confirmed by the replica on its side. Every
 * data node runs with min-replicas-to-write 1 and min-replicas-max-lag 2, and the workers
 * with min_replicas 1: every hold and renewal is confirmed by WAIT (docs/deployments.md,
 * docs/reliability.md "Split brain"). The opt-in
 * -nowait scenarios run without either, to show what that configuration prevents.
 *
 * Sides. A cut puts the master (Sentinel) or the master of name n0's slot (Cluster; -along:
 * with one of its replicas), with worker slots 0..SPLIT_A-1, on side A, and everything else (replicas, sentinels, the other
 * shards, the other workers) on side B. Everything runs on the namespace's loopback, so a
 * side is a set of processes: each worker runs with group id NET_GID0 + slot (net_child),
 * each server process with NET_SGID0 + index (the driver sets its own effective group id
 * while it forks the server: ts_server_start, ts_sentinel_start, ts_cluster_start_each).
 * One mangle rule per group id gives every connection the connmark bit of the process that
 * opened it, at its SYN (workers bits 0-7, servers 8-16; the driver's own connections keep
 * mark 0 and are never cut; the checker's port is on no side):
 *   -t mangle -A OUTPUT -p tcp -m owner --gid-owner G -m conntrack --ctstate NEW
 *                       -j CONNMARK --set-mark BIT
 * A cut is four DROP rules in INPUT (as in net.c: on loopback every packet crosses INPUT
 * once, and a packet dropped there vanishes: no RST, no local error; a rule takes at most 15
 * ports, so a longer PORTS_X, -2r's side B, is given to as many rules as it needs):
 *   -p tcp -m connmark ! --mark 0/MASK_A -m multiport --dports PORTS_B -j DROP   (A -> B)
 *   -p tcp -m connmark ! --mark 0/MASK_A -m multiport --sports PORTS_B -j DROP   (replies)
 *   -p tcp -m connmark ! --mark 0/MASK_B -m multiport --dports PORTS_A -j DROP   (B -> A)
 *   -p tcp -m connmark ! --mark 0/MASK_B -m multiport --sports PORTS_A -j DROP
 * where MASK_X has the bits of side X's processes and PORTS_X its servers' ports (Cluster:
 * with their bus ports, +10000). Connections within a side pass.
 *
 * Schedule. When the deployment is healthy (the master has its replicas online; Cluster:
 * every node says cluster_state:ok), one worker of side A is asked to hold its lock through
 * the cut (cmd:SLOT net:ID, as in net.c); the cut starts when it is inside its section and
 * lasts 8-10 s, longer than the failover (Sentinel: about 2-4 s; Cluster: node timeout plus
 * the election, about 3-5 s); then it heals. The driver watches for the promotion on side B
 * (cut -> a sentinel of side B names another master; Cluster: one of the shard's replicas
 * says role:master) and, after the heal, for the old master's demotion (role:slave; a heal
 * without it within 30 s is a liveness failure). A cut without a promotion is a liveness
 * failure too, unless it was a split vote (two replicas: split_vote, counted apart). Records
 * on the checker, for net_check: "S:SLOT:T_CUT:T_HEAL:PROMOTED" for the holder (or slot 0)
 * and "s:SLOT:..." for the other workers of side A, so detection, takeover, on_lost before
 * the takeover and recovery are computed as for a black hole, for every worker of the cut
 * side, and the far side's first grant of n0 (net_figures.c).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "driver.h"
#include "sentinel.h"

#define SPLIT_A NET_SPLIT_A  /* worker slots 0..SPLIT_A-1 are on the cut master's side */
#define NET_SGID0 21000      /* server index J runs with group id NET_SGID0 + J */
#define WBIT(i) (1u << (i))
#define SBIT(j) (1u << (8 + (j)))
#define CUT_MIN_MS 8000
#define CUT_MAX_MS 10000
#define DEMOTE_BOUND_US 30000000
#define POLL_US 150000       /* the driver's topology polls, at most this often */
#define MULTIPORT_MAX 15     /* ports in one -m multiport match */
#define MAX_CUT_RULES 8

/* The deployments, by scenario_t.net: data nodes, and replicas per master */
static const struct deployment {
    int net;
    int cluster;
    int ndata;      /* Sentinel: the master and its replicas (then 3 sentinels) */
    int replicas;   /* per master: what healthy() waits for before a cut */
    int far_live;   /* the far side must get n0 during the split (split_far_live) */
    int along;      /* Cluster: one of the master's replicas is cut along with it */
} deployments[] = {
    {NET_SPLIT_SENTINEL,  0, 3, 2, 1, 0},
    {NET_SPLIT_CLUSTER,   1, 6, 1, 0, 0},
    {NET_SPLIT_CLUSTER2,  1, 9, 2, 1, 0},
    {NET_SPLIT_CLUSTER2A, 1, 9, 2, 0, 1},
};

static const struct deployment *deployment_of(const scenario_t *sc)
{
    for (size_t k = 0; k < sizeof deployments / sizeof deployments[0]; k++)
        if (deployments[k].net == sc->net)
            return &deployments[k];
    return NULL;
}

int split_far_live(const scenario_t *sc)
{
    const struct deployment *d = deployment_of(sc);
    return d && d->far_live && sc->min_replicas > 0;
}

/* the data nodes' arguments; without min_replicas (the opt-in -nowait scenarios: what
 * happens without the recommended configuration), only the first two */
static const char *data_args[] = {"--repl-diskless-sync-delay", "0",
                                  "--min-replicas-to-write", "1",
                                  "--min-replicas-max-lag", "2", NULL};

static struct {
    run_t *R;
    const struct deployment *dep;
    int cluster;
    ts_server_t *srv[MAX_SPLIT_SRV];
    int nsrv;           /* Sentinel: 0 master, 1-2 replicas, 3-5 sentinels; Cluster: 6 or 9 nodes */
    int ndata;          /* data nodes: 3, 6 or 9 */
    int slot0;          /* Cluster: the hash slot of name n0 */
    int state;          /* 0 idle, 1 holder asked, 2 cut, 3 healed: awaiting the demotion */
    int m;              /* the master cut (index in srv) */
    int heir[2];        /* Cluster: its replicas (indexes), -1 unknown */
    long logoff[MAX_SPLIT_SRV]; /* Cluster: the size of each node's redis.log at the cut */
    int holder;         /* the slot asked to hold through the cut, -1 none */
    long id;
    int rules[MAX_CUT_RULES];
    int promoted;
    int64_t next_at, until, t_cut, t_heal, t_poll;
} S;

static gid_t g_egid0;

/* ts_cluster_start_each's hook, and around the other starts: the next server forked runs
 * with group id NET_SGID0 + i (i < 0: the driver's own again). */
static void as_gid(int i, void *arg)
{
    (void)arg;
    if (setegid(i < 0 ? g_egid0 : (gid_t)(NET_SGID0 + i)) != 0)
        perror("faults: split: setegid");
}

static int push_us(int64_t **v, int *n, int64_t x)
{
    int64_t *p = realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p)
        return -1;
    p[(*n)++] = x;
    *v = p;
    return 0;
}

/* INFO replication of s into buf; NULL when it does not answer. */
static char *repl_info(const ts_server_t *s, char *buf, size_t len)
{
    return ts_cmd_str(s, buf, len, "INFO replication");
}

static int replicas_online(const ts_server_t *s)
{
    char buf[4096];
    int n = 0;
    if (!repl_info(s, buf, sizeof buf) || !strstr(buf, "role:master"))
        return -1;
    for (const char *p = buf; (p = strstr(p, "state=online")) != NULL; p++)
        n++;
    return n;
}

static int is_replica(const ts_server_t *s)
{
    char buf[4096];
    return repl_info(s, buf, sizeof buf) && strstr(buf, "role:slave") &&
           strstr(buf, "master_link_status:up");
}

static int cluster_ok_all(void)
{
    for (int j = 0; j < S.ndata; j++) {
        char buf[4096];
        if (!ts_cmd_str(S.srv[j], buf, sizeof buf, "CLUSTER INFO") || !strstr(buf, "cluster_state:ok"))
            return 0;
    }
    return 1;
}

/* The current master (index): Sentinel, the one every sentinel names (-1 while they
 * disagree); Cluster, the owner of n0's slot in the first node's view, if it says master. */
static int find_master(void)
{
    int m = -1;
    if (!S.cluster) {
        for (int k = 0; k < 3; k++) {
            int port = ts_sentinel_master_port(S.srv[3 + k], FX_MASTER);
            int j = 0;
            while (j < 3 && S.srv[j]->port != port)
                j++;
            if (j == 3 || (m >= 0 && j != m))
                return -1;
            m = j;
        }
        return m;
    }
    m = ts_cluster_owner(S.R->cnodes, S.ndata, S.slot0);
    return m >= 0 && ts_cluster_is_master(S.srv[m]) ? m : -1;
}

static int healthy(int m)
{
    if (m < 0 || replicas_online(S.srv[m]) < S.dep->replicas)
        return 0;
    return !S.cluster || cluster_ok_all();
}

/* Cluster: the replicas of srv[m] (their INFO names m's port) into S.heir. */
static void find_heirs(int m)
{
    char want[32];
    int n = 0;
    snprintf(want, sizeof want, "master_port:%d\r", S.srv[m]->port);
    S.heir[0] = S.heir[1] = -1;
    for (int j = 0; j < S.ndata && n < 2; j++) {
        char buf[4096];
        if (j != m && repl_info(S.srv[j], buf, sizeof buf) && strstr(buf, want))
            S.heir[n++] = j;
    }
}

/* Has side B promoted another master? */
static int promoted(void)
{
    if (S.cluster) {
        for (int k = 0; k < 2; k++)
            if (S.heir[k] >= 0 && ts_cluster_is_master(S.srv[S.heir[k]]))
                return 1;
        return 0;
    }
    for (int k = 0; k < 3; k++) {
        int port = ts_sentinel_master_port(S.srv[3 + k], FX_MASTER);
        if (port > 0 && port != S.srv[S.m]->port)
            return 1;
    }
    return 0;
}

int split_start(run_t *R)
{
    const scenario_t *sc = R->sc;
    memset(&S, 0, sizeof S);
    S.R = R;
    S.dep = deployment_of(sc);
    if (!S.dep)
        return -1;
    S.cluster = S.dep->cluster;
    S.holder = -1;
    for (int k = 0; k < MAX_CUT_RULES; k++)
        S.rules[k] = -1;
    g_egid0 = getegid();
    data_args[2] = sc->min_replicas > 0 ? "--min-replicas-to-write" : NULL;
    if (S.cluster) {
        S.nsrv = S.ndata = S.dep->ndata;
        for (int j = 0; j < S.ndata; j++)
            S.srv[j] = &R->cnodes[j];
    } else {
        S.srv[0] = &R->data;
        S.srv[1] = &R->replica[0];
        S.srv[2] = &R->replica[1];
        for (int k = 0; k < 3; k++)
            S.srv[3 + k] = &R->sent[k];
        S.nsrv = 6;
        S.ndata = 3;
    }
    /* the marks first: every connection is marked at its SYN, replication links included */
    for (int i = 0; i < sc->procs; i++)
        if (net_rule_add("mangle", "OUTPUT", "-p tcp -m owner --gid-owner %d -m conntrack "
                         "--ctstate NEW -j CONNMARK --set-mark %u", NET_GID0 + i, WBIT(i)) < 0)
            return -1;
    for (int j = 0; j < S.nsrv; j++)
        if (net_rule_add("mangle", "OUTPUT", "-p tcp -m owner --gid-owner %d -m conntrack "
                         "--ctstate NEW -j CONNMARK --set-mark %u", NET_SGID0 + j, SBIT(j)) < 0)
            return -1;

    int n = 0, np = 0;
    if (S.cluster) {
        const char *args[12] = {"--cluster-node-timeout", "2000"};
        int k = 2;
        for (int a = 0; data_args[a]; a++)
            args[k++] = data_args[a];
        args[k] = NULL;
        const char *const *extra[MAX_SPLIT_SRV];
        for (int j = 0; j < S.ndata; j++)
            extra[j] = args;
        if (ts_cluster_start_each(R->cnodes, S.ndata, S.dep->replicas, extra, as_gid, NULL) != 0)
            return -1;
        S.slot0 = (int)ts_cmd_int(S.srv[0], "CLUSTER KEYSLOT %s", "n0");
        n = snprintf(R->url, sizeof R->url, "redis-cluster://");
        for (int j = 0; j < S.ndata; j++) {
            n += snprintf(R->url + n, sizeof R->url - (size_t)n, "%s127.0.0.1:%d", j ? "," : "",
                          S.srv[j]->port);
            np += snprintf(R->ports + np, sizeof R->ports - (size_t)np, "%s%d", j ? "," : "",
                           S.srv[j]->port);
        }
        return S.slot0 >= 0 ? 0 : -1;
    }
    as_gid(0, NULL);
    int rc = ts_server_startv(&R->data, data_args);
    char mp[16];
    snprintf(mp, sizeof mp, "%d", R->data.port);
    for (int i = 0; i < 2 && rc == 0; i++) {
        const char *args[12] = {"--replicaof", "127.0.0.1", mp};
        int k = 3;
        for (int a = 0; data_args[a]; a++)
            args[k++] = data_args[a];
        args[k] = NULL;
        as_gid(1 + i, NULL);
        rc = ts_server_startv(&R->replica[i], args);
    }
    as_gid(-1, NULL);
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = ts_wait_replica_up(&R->replica[i], 15000);
    if (rc != 0 || ts_wait_replicas_online(&R->data, 2, 15000) != 0)
        return -1;
    n = snprintf(R->url, sizeof R->url, "redis-sentinel://");
    np = snprintf(R->ports, sizeof R->ports, "%d,%d,%d", R->data.port, R->replica[0].port,
                  R->replica[1].port);
    for (int i = 0; i < 3; i++) {
        as_gid(3 + i, NULL);
        rc = ts_sentinel_start(&R->sent[i], FX_MASTER, R->data.port, 2, 1000, 5000);
        as_gid(-1, NULL);
        if (rc != 0)
            return -1;
        n += snprintf(R->url + n, sizeof R->url - (size_t)n, "%s127.0.0.1:%d", i ? "," : "",
                      R->sent[i].port);
        np += snprintf(R->ports + np, sizeof R->ports - (size_t)np, ",%d", R->sent[i].port);
    }
    snprintf(R->url + n, sizeof R->url - (size_t)n, "/%s", FX_MASTER);
    return 0;
}

/* Is server j on the cut master's side? (the master; -along: and its first replica) */
static int on_a(int j)
{
    return j == S.m || (S.dep->along && j == S.heir[0]);
}

/* The ports of the servers of one side into v (in_a 1: side A's; 0: the rest), Cluster
 * with their bus ports; their number. */
static int side_ports(int in_a, int *v)
{
    int n = 0;
    for (int j = 0; j < S.nsrv; j++) {
        if (on_a(j) != in_a)
            continue;
        v[n++] = S.srv[j]->port;
        if (S.cluster)
            v[n++] = S.srv[j]->port + 10000;
    }
    return n;
}

/* DROP rules for connections opened by the processes of mask whose DIR port (--dports,
 * --sports) is one of v[0..n-1], MULTIPORT_MAX ports a rule, into S.rules from *k. -1 if one
 * could not be added. */
static int drop_rules(unsigned mask, const char *dir, const int *v, int n, int *k)
{
    for (int i = 0; i < n; i += MULTIPORT_MAX) {
        char ports[MULTIPORT_MAX * 7 + 1];
        size_t len = 0;
        for (int p = i; p < n && p < i + MULTIPORT_MAX; p++)
            len += (size_t)snprintf(ports + len, sizeof ports - len, "%s%d", len ? "," : "", v[p]);
        if (*k >= MAX_CUT_RULES)
            return -1;
        S.rules[*k] = net_rule_add("filter", "INPUT", "-p tcp -m connmark ! --mark 0/%u -m "
                                   "multiport %s %s -j DROP", mask, dir, ports);
        if (S.rules[(*k)++] < 0)
            return -1;
    }
    return 0;
}

static long log_size(int j)
{
    char path[300];
    snprintf(path, sizeof path, "%s/redis.log", S.srv[j]->dir);
    FILE *f = fopen(path, "rb");
    long n = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (f)
        fclose(f);
    return n;
}

/* Lines of srv[j]'s redis.log from offset off that contain what. */
static int log_count(int j, long off, const char *what)
{
    char path[300], line[512];
    int n = 0;
    snprintf(path, sizeof path, "%s/redis.log", S.srv[j]->dir);
    FILE *f = off >= 0 ? fopen(path, "rb") : NULL;
    if (f && fseek(f, off, SEEK_SET) == 0)
        while (fgets(line, sizeof line, f))
            n += strstr(line, what) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* Cluster, a cut without a promotion: was it a split vote? Each replica of the cut master
 * was granted a vote during the cut by some master (the voters' logs say so) and neither
 * won: two replicas with the same replication offset are both rank 0, so each starts its
 * election 500-1000 ms after the FAIL at random; when the two requests cross, each voting
 * master grants one of them (one vote per epoch and per failed master), neither gets the
 * majority, and Redis tries again only 4 x cluster-node-timeout after the first attempt
 * (auth_retry_time: 8 s here, past the heal). */
static int split_vote(void)
{
    if (!S.cluster || S.heir[0] < 0 || S.heir[1] < 0)
        return 0;
    for (int k = 0; k < 2; k++) {
        char id[48], what[96];
        int h = S.heir[k], granted = 0;
        if (!ts_cluster_myid(S.srv[h], id, sizeof id) ||
            log_count(h, S.logoff[h], "Failover election won") > 0)
            return 0;
        snprintf(what, sizeof what, "Failover auth granted to %s", id);
        for (int j = 0; j < S.ndata; j++)
            if (j != h && j != S.m)
                granted += log_count(j, S.logoff[j], what);
        if (granted == 0)
            return 0;
    }
    return 1;
}

static int cut(run_t *R)
{
    unsigned ma = 0, mb = 0;
    for (int i = 0; i < R->sc->procs; i++)
        if (i < SPLIT_A)
            ma |= WBIT(i);
        else
            mb |= WBIT(i);
    for (int j = 0; j < S.nsrv; j++)
        if (on_a(j))
            ma |= SBIT(j);
        else
            mb |= SBIT(j);
    int pa[2 * MAX_SPLIT_SRV], pb[2 * MAX_SPLIT_SRV];
    int na = side_ports(1, pa), nb = side_ports(0, pb);
    const char *dir[2] = {"--dports", "--sports"};
    int k = 0, rc = 0;
    for (int d = 0; d < 2 && rc == 0; d++)
        rc = drop_rules(ma, dir[d], pb, nb, &k) || drop_rules(mb, dir[d], pa, na, &k) ? -1 : 0;
    for (int j = 0; j < S.ndata && S.cluster; j++)
        S.logoff[j] = log_size(j);
    S.t_cut = now_us();
    S.until = S.t_cut + rnd_range(&R->rng, CUT_MIN_MS, CUT_MAX_MS) * 1000;
    S.promoted = 0;
    S.t_poll = 0;
    S.state = 2;
    if (rc != 0) {
        R->res->setup_failed = 1;
        return -1;
    }
    R->res->faults[F_NET_SPLIT]++;
    snprintf(R->last_detail, sizeof R->last_detail, " master :%d%s + w0-w%d (%s) from the rest, "
             "for %lld ms", S.srv[S.m]->port, S.dep->along ? " + a replica" : "", SPLIT_A - 1,
             S.holder >= 0 ? "one holding" : "no holder", (long long)(S.until - S.t_cut) / 1000);
    return F_NET_SPLIT;
}

static void heal(run_t *R)
{
    if (!S.promoted && promoted()) { /* (since the last poll) */
        S.promoted = 1;
        push_us(&R->res->promote, &R->res->npromote, now_us() - S.t_cut);
    }
    for (int k = 0; k < MAX_CUT_RULES; k++) {
        net_rule_del(S.rules[k]);
        S.rules[k] = -1;
    }
    S.t_heal = now_us();
    if (S.holder >= 0)
        freeReplyObject(ck_cmd(R->ck, "SET go:%ld 1", S.id));
    int upper = S.holder >= 0 ? S.holder : 0;
    for (int i = 0; i < SPLIT_A && i < R->sc->procs; i++) {
        char rec[96];
        snprintf(rec, sizeof rec, "%c:%d:%lld:%lld:%d", i == upper ? 'S' : 's', i,
                 (long long)S.t_cut, (long long)S.t_heal, S.promoted);
        freeReplyObject(ck_cmd(R->ck, "RPUSH net %s", rec));
    }
    int64_t now = now_us();
    if (!S.promoted && split_vote()) {
        R->res->split_votes++;
        printf("    split: no promotion during a cut of %lld ms: a split vote (each replica of "
               ":%d was granted a vote, neither won; Redis tries again 4 x cluster-node-timeout "
               "after the first attempt)\n", (long long)(S.t_heal - S.t_cut) / 1000,
               S.srv[S.m]->port);
    } else if (!S.promoted) {
        R->res->split_nofailover++;
        viol(R->res, V_LIVE, "split: no master was promoted on the far side during a cut of "
             "%lld ms", (long long)(S.t_heal - S.t_cut) / 1000);
    }
    if (g_verbose)
        printf("    %12s  healed the split after %lld ms\n", "", (long long)(S.t_heal - S.t_cut) / 1000);
    /* without a promotion the old master stays master: no demotion to wait for */
    S.state = S.promoted ? 3 : 0;
    S.next_at = now + 1000000;
    S.t_poll = 0;
}

/* state 3: the old master demoted? (at most every POLL_US) */
static void poll_demotion(run_t *R, int64_t now)
{
    if (S.state != 3 || now - S.t_poll < POLL_US)
        return;
    S.t_poll = now;
    if (is_replica(S.srv[S.m])) {
        push_us(&R->res->demote, &R->res->ndemote, now - S.t_heal);
        if (g_verbose)
            printf("    %12s  old master :%d is a replica %lld ms after the heal\n", "",
                   S.srv[S.m]->port, (long long)(now - S.t_heal) / 1000);
        S.state = 0;
        S.next_at = now + 1000000;
    } else if (now - S.t_heal > DEMOTE_BOUND_US) {
        R->res->split_nodemote++;
        viol(R->res, V_LIVE, "split: the old master :%d was still not a replica %d s after the heal",
             S.srv[S.m]->port, DEMOTE_BOUND_US / 1000000);
        S.state = 0;
        S.next_at = now + 1000000;
    }
}

int split_tick(run_t *R)
{
    int64_t now = now_us();
    switch (S.state) {
    case 0: {
        /* (a cut must have the time to last CUT_MAX_MS before the faults phase ends: one
         * cut short by the phase's end would not see its failover) */
        if (now < S.next_at || now + (CUT_MAX_MS + 1000) * 1000 > R->fault_end)
            return -1;
        S.next_at = now + POLL_US;
        int m = find_master();
        if (!healthy(m))
            return -1;
        S.m = m;
        S.heir[0] = S.heir[1] = -1;
        if (S.cluster)
            find_heirs(m);
        S.holder = (int)rnd_range(&R->rng, 0, SPLIT_A - 1);
        S.id = 900000 + R->res->faults[F_NET_SPLIT];
        freeReplyObject(ck_cmd(R->ck, "SET cmd:%d net:%ld", S.holder, S.id));
        S.state = 1;
        S.until = now + 5000000;
        return -1;
    }
    case 1:
        if (ck_int(R->ck, "GET ready:%d", S.holder) == S.id)
            return cut(R);
        if (now > S.until) {
            if (ck_int(R->ck, "DEL cmd:%d", S.holder) == 1) { /* never taken: cut without */
                S.holder = -1;
                return cut(R);
            }
            S.until = now + 2000000; /* taken: its ready:SLOT is on the way */
        }
        return -1;
    case 2:
        if (!S.promoted && now - S.t_poll >= POLL_US) {
            S.t_poll = now;
            if (promoted()) {
                S.promoted = 1;
                push_us(&R->res->promote, &R->res->npromote, now - S.t_cut);
                if (g_verbose)
                    printf("    %12s  a new master was promoted %lld ms after the cut\n", "",
                           (long long)(now - S.t_cut) / 1000);
            }
        }
        if (now >= S.until)
            heal(R);
        return -1;
    default:
        poll_demotion(R, now);
        return -1;
    }
}

void split_heal_all(run_t *R)
{
    if (S.state == 1) { /* a holder asked to wait: let it go whether or not it took it */
        freeReplyObject(ck_cmd(R->ck, "DEL cmd:%d", S.holder));
        freeReplyObject(ck_cmd(R->ck, "SET go:%ld 1", S.id));
        S.state = 0;
    }
    if (S.state == 2)
        heal(R);
}

void split_poll(run_t *R)
{
    poll_demotion(R, now_us());
}

void split_end(run_t *R)
{
    while (S.state == 3) {
        poll_demotion(R, now_us());
        sleep_us(50000);
    }
}

int split_scan(run_t *R, long *keys, long *no_ttl)
{
    (void)R;
    *keys = *no_ttl = 0;
    for (int j = 0; j < S.ndata; j++) {
        char buf[4096];
        if (!repl_info(S.srv[j], buf, sizeof buf) || !strstr(buf, "role:master"))
            continue;
        long k1 = 0, n1 = 0;
        if (scan_ttls(S.srv[j], "fx", &k1, &n1) != 0)
            return -1;
        *keys += k1, *no_ttl += n1;
    }
    return 0;
}

/* RS_SPLIT_LOGS=DIR (a diagnostic knob): each data node's redis.log is copied to
 * DIR/SCENARIO-PORT.log before the servers stop (elections, failure reports, demotions). */
static void keep_logs(const run_t *R)
{
    const char *dir = getenv("RS_SPLIT_LOGS");
    for (int j = 0; dir && dir[0] && j < S.ndata; j++) {
        char from[300], to[512], buf[8192];
        snprintf(from, sizeof from, "%s/redis.log", S.srv[j]->dir);
        snprintf(to, sizeof to, "%s/%s-%d.log", dir, R->sc->name, S.srv[j]->port);
        FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
        for (size_t n; out && (n = fread(buf, 1, sizeof buf, in)) > 0;)
            fwrite(buf, 1, n, out);
        if (out)
            fclose(out);
        if (in)
            fclose(in);
    }
}

void split_stop(run_t *R)
{
    keep_logs(R);
    if (S.cluster) {
        ts_cluster_stop(R->cnodes, S.ndata);
        return;
    }
    for (int i = 0; i < 3; i++)
        ts_server_stop(&R->sent[i]);
    for (int i = 0; i < 2; i++)
        ts_server_stop(&R->replica[i]);
    ts_server_stop(&R->data);
}

static void fig2(char *buf, size_t len, const int64_t *v, int n)
{
    int64_t mx = 0;
    int64_t *c = n ? malloc((size_t)n * sizeof *c) : NULL;
    if (!c) {
        snprintf(buf, len, "-");
        return;
    }
    memcpy(c, v, (size_t)n * sizeof *c);
    for (int i = 1; i < n; i++) /* (a handful of values: insertion sort) */
        for (int j = i; j > 0 && c[j - 1] > c[j]; j--) {
            int64_t t = c[j];
            c[j] = c[j - 1];
            c[j - 1] = t;
        }
    mx = c[n - 1];
    snprintf(buf, len, "%.0f/%.0f", (double)c[n / 2] / 1e3, (double)mx / 1e3);
    free(c);
}

void split_report(const scenario_t *sc, const result_t *r)
{
    char p[32], d[32];
    fig2(p, sizeof p, r->promote, r->npromote);
    fig2(d, sizeof d, r->demote, r->ndemote);
    printf("%s: %ld split(s); new master promoted after the cut p50/max %s ms (cuts without "
           "a promotion: %ld, and by a split vote: %ld); old master a replica after the heal "
           "p50/max %s ms (never: %ld)\n", sc->name, r->faults[F_NET_SPLIT], p,
           r->split_nofailover, r->split_votes, d, r->split_nodemote);
    fig2(p, sizeof p, r->far_n0, r->nfar_n0);
    printf("%s: n0 (the cut master's name) first granted on the far side (w%d-w%d) after the "
           "cut p50/max %s ms: during the split after %ld of %ld cut(s), after the heal %ld, "
           "never %ld%s\n", sc->name, NET_SPLIT_A, sc->procs - 1, p, r->far_n0_during,
           r->faults[F_NET_SPLIT], (long)r->nfar_n0 - r->far_n0_during, r->far_n0_never,
           split_far_live(sc) ? " (required during the split when a replica was promoted "
                                "during it)" : "");
}
