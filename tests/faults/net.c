/*
 * net.c - network faults for the fault suite (make test-network; tests/network/run.sh).
 *
 * The driver runs with --net inside a network namespace of its own that run.sh created
 * (`ip netns add rsnet-PID`, only `lo` up): every redis-server, worker and rule lives there,
 * so the rules below touch only that namespace's loopback and nothing of the host.
 * net_guard() refuses to run anywhere else.
 *
 * Who is cut. Each worker runs with its own group id (NET_GID0 + slot, set in the forked
 * child before exec: net_child). At scenario start a mangle rule per slot marks the
 * connections that slot opens to the data server with its gid, from their SYN:
 *   -t mangle -A OUTPUT -p tcp --dport DATA -m owner --gid-owner G -j CONNMARK --set-mark G
 * The checker's redis-server has another port and is never matched.
 *
 * The faults are DROP rules in INPUT: on loopback every packet of both directions crosses
 * INPUT once, and a packet dropped there has left its sender's stack as if it had been sent
 * (a DROP in OUTPUT is reported back to the sending socket as a local error instead), so
 * packets simply vanish: no RST, no error, as on a wire.
 *   black hole of worker G    -A INPUT -p tcp -m connmark --mark G -j DROP
 *   one-way (replies lost)    -A INPUT -p tcp --sport DATA -m connmark --mark G -j DROP
 *   flap (everyone)           -A INPUT -p tcp --dport DATA -j DROP, and --sport DATA
 *   Redlock: G from master M  -A INPUT -p tcp --dport M -m connmark --mark G -j DROP, and
 *                             --sport M (G's connections to the other masters untouched)
 *   loss 5 % (every data port) -A INPUT -p tcp --dport DATA -m statistic --mode random
 *                             --probability 0.05 -j DROP, and --sport DATA
 *   delay + jitter            -A INPUT -p tcp --dport DATA -j NFQUEUE --queue-num Q
 *                             --queue-bypass, and --sport DATA; build/redisync-delayq
 *                             (tests/network/delayq.c) holds each packet delay +- jitter ms
 * Heal = iptables -D of the same rule. Every rule added is recorded here and removed at
 * scenario end (net_end), at exit (atexit) and on SIGINT/SIGTERM/SIGHUP (a handler that
 * only forks and execs iptables -D); run.sh deleting the namespace is the last backstop.
 *
 * Holder cuts. To cut a worker while it holds the lock, the driver gives it the command
 * "net:ID" through the checker (cmd:SLOT, as for kill and stop); the worker takes it when it
 * enters its next section, does its fenced read, sets ready:SLOT = ID and waits (still
 * holding, as a holder that does not know it is cut goes on working) until the driver sets
 * go:ID at the heal; then it does its fenced write and unlocks. The driver cuts it as soon
 * as it sees ready:SLOT. Each cut is recorded on the checker ("net": "KIND SLOT T_CUT
 * T_HEAL", KIND B/O a holder black-holed / one-way, b/o any worker, F everyone), and
 * net_check (net_figures.c) computes the figures from those and from the section records
 * (whose last field is the monotonic time of the section's first on_lost).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faults.h"
#include "redisync.h"

/* Network scenarios: mutex (and one rwlock, one semaphore), 8 processes, lease 3000 ms,
 * timeout_ms 2000. */
const scenario_t net_scenarios[] = {
    /* name             prim     aof procs secs lease timeout faults                 names sem latch round sentinel minrep redlock net tls optin async cluster pending */
    {"net-blackhole",   P_MUTEX, 1,  8,    36,  3000, 2000,  FB(F_NET_BLACKHOLE),   2,    0,  0,    0,    0, 0, 0, NET_BLACKHOLE, 0, 0, 0, 0, 0},
    {"net-oneway",      P_MUTEX, 1,  8,    30,  3000, 2000,  FB(F_NET_ONEWAY),      2,    0,  0,    0,    0, 0, 0, NET_ONEWAY, 0, 0, 0, 0, 0},
    {"net-slow-lossy",  P_MUTEX, 1,  8,    30,  3000, 2000,  FB(F_NET_SLOW_LOSSY),  2,    0,  0,    0,    0, 0, 0, NET_SLOW_LOSSY, 0, 0, 0, 0, 0},
    {"net-flap",        P_MUTEX, 1,  8,    30,  3000, 2000,  FB(F_NET_FLAP),        2,    0,  0,    0,    0, 0, 0, NET_FLAP, 0, 0, 0, 0, 0},
    /* the read-write lock (writers and readers) and a semaphore of 3 permits, under the
     * black hole and the slow, lossy links */
    {"net-rw-blackhole", P_RWLOCK, 1, 8,   30,  3000, 2000,  FB(F_NET_BLACKHOLE),   2,    0,  0,    0,    0, 0, 0, NET_BLACKHOLE, 0, 0, 0, 0, 0},
    {"net-sem-slow-lossy", P_SEM, 1,  8,   30,  3000, 2000,  FB(F_NET_SLOW_LOSSY),  1,    3,  0,    0,    0, 0, 0, NET_SLOW_LOSSY, 0, 0, 0, 0, 0},
    /* Redlock (three masters, appendonly + fsync always): one worker cut from one master
     * (the others reach it, and it reaches the others); then the slow, lossy links on every
     * master (0 false loss reports required, as in net-slow-lossy; waiters no longer starve
     * since a free lock goes to the first waiter by ticket: docs/reliability.md, "Redlock
     * under delay and loss") */
    {"net-rl-part",     P_MUTEX, 1,  8,    24,  3000, 2000,  FB(F_NET_RL_PART),     2,    0,  0,    0,    0, 0, 1, NET_RL_PART, 0, 0, 0, 0, 0},
    {"net-rl-slowloss", P_MUTEX, 1,  8,    24,  3000, 2000,  FB(F_NET_SLOW_LOSSY),  2,    0,  0,    0,    0, 0, 1, NET_SLOW_LOSSY, 0, 0, 0, 0, 0},
    /* split brain (net_split.c): the master (Sentinel: 2 replicas, 3 sentinels) or one
     * shard's master (Cluster: 3 masters + 3 replicas) with workers w0-w2 cut from the rest
     * for 8-10 s, longer than the failover, then healed; min_replicas 1 and
     * min-replicas-to-write 1 (docs/reliability.md, "Split brain") */
    {"net-sentinel-split", P_MUTEX, 0, 8,  40,  3000, 2000,  FB(F_NET_SPLIT),       2,    0,  0,    0,    0, 1, 0, NET_SPLIT_SENTINEL, 0, 0, 0, 0, 0},
    {"net-cluster-split",  P_MUTEX, 0, 8,  40,  3000, 2000,  FB(F_NET_SPLIT),       2,    0,  0,    0,    0, 1, 0, NET_SPLIT_CLUSTER, 0, 0, 0, 0, 0},
    /* the same with two replicas per shard (3 masters + 6 replicas): the cut shard's
     * promoted replica keeps the other one, so the far side must get n0 during the split */
    {"net-cluster-split-2r", P_MUTEX, 0, 8, 40,  3000, 2000,  FB(F_NET_SPLIT),       2,    0,  0,    0,    0, 1, 0, NET_SPLIT_CLUSTER2, 0, 0, 0, 0, 0},
    /* opt-in, expected to fail: one of the two replicas cut along with the master, so that
     * min_replicas 1 is below the replicas that may be promoted (docs/reliability.md) */
    {"net-cluster-split-2r-along", P_MUTEX, 0, 8, 40, 3000, 2000, FB(F_NET_SPLIT),    2,    0,  0,    0,    0, 1, 0, NET_SPLIT_CLUSTER2A, 0, 1, 0, 0, 0},
    /* the same without min_replicas and min-replicas-to-write: opt-in, they are expected
     * to fail (what the configuration prevents; docs/reliability.md, "Split brain") */
    {"net-sentinel-split-nowait", P_MUTEX, 0, 8, 40, 3000, 2000, FB(F_NET_SPLIT),     2,    0,  0,    0,    0, 0, 0, NET_SPLIT_SENTINEL, 0, 1, 0, 0, 0},
    {"net-cluster-split-nowait",  P_MUTEX, 0, 8, 40, 3000, 2000, FB(F_NET_SPLIT),     2,    0,  0,    0,    0, 0, 0, NET_SPLIT_CLUSTER, 0, 1, 0, 0, 0},
};
const int net_nscen = (int)(sizeof net_scenarios / sizeof net_scenarios[0]);

#define NET_QUEUE 7          /* the NFQUEUE number (the namespace is ours: any will do) */
#define DELAY_MS 100         /* each way: 150-250 ms round trips */
#define JITTER_MS 25
#define LOSS "0.05"
#define MAX_RULES 64
#define MAX_ARGS 40

/* ---- the rules: recorded, removable from a signal handler ------------------------------ */
typedef struct rule {
    int live;
    char buf[320];          /* the tokens, NUL-separated */
    char *argv[MAX_ARGS];   /* "iptables" "-w" "5" "-t" TABLE OP CHAIN tokens... NULL */
    int op;                 /* index of "-A" / "-D" in argv */
} rule_t;

static rule_t g_rules[MAX_RULES];
static pid_t g_delayq;
static char g_delayq_path[4200];
static int g_verbose_net;

/* fork + exec iptables, stdout/stderr to /dev/null unless verbose; async-signal-safe. */
static int run_argv(char *const argv[], int quiet)
{
    pid_t p = fork();
    if (p == 0) {
        if (quiet) {
            int fd = open("/dev/null", O_WRONLY);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    if (p < 0)
        return -1;
    int st;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Adds "-t TABLE -A CHAIN spec"; returns the rule's index, or -1 (reported). */
int net_rule_add(const char *table, const char *chain, const char *fmt, ...)
{
    int i = 0;
    while (i < MAX_RULES && g_rules[i].live)
        i++;
    if (i == MAX_RULES) {
        fprintf(stderr, "faults: net: too many rules\n");
        return -1;
    }
    rule_t *r = &g_rules[i];
    char spec[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(spec, sizeof spec, fmt, ap);
    va_end(ap);
    snprintf(r->buf, sizeof r->buf, "iptables -w 5 -t %s -A %s %s", table, chain, spec);
    int n = 0;
    for (char *t = strtok(r->buf, " "); t && n < MAX_ARGS - 1; t = strtok(NULL, " "))
        r->argv[n++] = t;
    r->argv[n] = NULL;
    r->op = 5;
    if (run_argv(r->argv, 0) != 0) {
        fprintf(stderr, "faults: net: cannot add: iptables -t %s -A %s %s\n", table, chain, spec);
        return -1;
    }
    r->live = 1;
    return i;
}

int net_rule_del(int i)
{
    if (i < 0 || i >= MAX_RULES || !g_rules[i].live)
        return 0;
    rule_t *r = &g_rules[i];
    r->argv[r->op] = "-D";
    int rc = run_argv(r->argv, 0);
    if (rc != 0) {
        char cmd[400] = "";
        for (int k = 0; r->argv[k]; k++)
            snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), "%s ", r->argv[k]);
        fprintf(stderr, "faults: net: cannot delete: %s\n", cmd);
    }
    r->live = 0;
    return rc;
}

/* ---- delayq ------------------------------------------------------------------------------ */
static int delayq_start(uint64_t seed)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return -1;
    char q[16], d[16], j[16], s[32];
    snprintf(q, sizeof q, "%d", NET_QUEUE);
    snprintf(d, sizeof d, "%d", DELAY_MS);
    snprintf(j, sizeof j, "%d", JITTER_MS);
    snprintf(s, sizeof s, "%llu", (unsigned long long)seed);
    char *argv[] = {g_delayq_path, q, d, j, s, NULL};
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p == 0) {
        dup2(pfd[1], 1);
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        execv(g_delayq_path, argv);
        _exit(127);
    }
    close(pfd[1]);
    if (p < 0) {
        close(pfd[0]);
        return -1;
    }
    g_delayq = p;
    char buf[128] = "";
    size_t got = 0;
    int64_t until = now_us() + 5000000;
    while (!strstr(buf, "ready") && now_us() < until && got < sizeof buf - 1) {
        struct pollfd pf = {pfd[0], POLLIN, 0};
        if (poll(&pf, 1, 200) <= 0)
            continue;
        ssize_t n = read(pfd[0], buf + got, sizeof buf - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
    }
    close(pfd[0]);
    if (!strstr(buf, "ready")) {
        fprintf(stderr, "faults: net: %s did not start\n", g_delayq_path);
        return -1;
    }
    return 0;
}

static void delayq_stop(void)
{
    if (g_delayq <= 0)
        return;
    kill(g_delayq, SIGTERM);
    for (int i = 0; i < 200; i++) {
        if (waitpid(g_delayq, NULL, WNOHANG) == g_delayq) {
            g_delayq = 0;
            return;
        }
        sleep_us(10000);
    }
    kill(g_delayq, SIGKILL);
    waitpid(g_delayq, NULL, 0);
    g_delayq = 0;
}

/* ---- cleanup paths ----------------------------------------------------------------------- */
void net_end(void)
{
    for (int i = MAX_RULES - 1; i >= 0; i--)
        net_rule_del(i);
    delayq_stop();
}

static void on_fatal_signal(int sig)
{
    for (int i = MAX_RULES - 1; i >= 0; i--)
        if (g_rules[i].live) {
            g_rules[i].argv[g_rules[i].op] = "-D";
            run_argv(g_rules[i].argv, 1);
            g_rules[i].live = 0;
        }
    if (g_delayq > 0)
        kill(g_delayq, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- the namespace guard ----------------------------------------------------------------- */
int net_guard(int verbose)
{
    g_verbose_net = verbose;
    const char *ns = getenv("RS_NETNS");
    if (!ns || strncmp(ns, "rsnet-", 6) != 0 || strchr(ns, '/')) {
        fprintf(stderr, "faults: --net runs only inside the namespace tests/network/run.sh "
                        "creates (RS_NETNS=rsnet-PID); use make test-network\n");
        return -1;
    }
    struct stat self, named, root;
    char path[300];
    snprintf(path, sizeof path, "/run/netns/%s", ns);
    if (stat("/proc/self/ns/net", &self) != 0 || stat(path, &named) != 0 ||
        self.st_ino != named.st_ino || self.st_dev != named.st_dev) {
        fprintf(stderr, "faults: --net: this process is not in network namespace %s\n", ns);
        return -1;
    }
    /* the root's namespace, where it can be read (not in every container) */
    if (stat("/proc/1/ns/net", &root) == 0 && root.st_ino == self.st_ino) {
        fprintf(stderr, "faults: --net: this is the root network namespace; refusing\n");
        return -1;
    }
    ssize_t n = readlink("/proc/self/exe", g_delayq_path, sizeof g_delayq_path - 32);
    if (n <= 0)
        return -1;
    g_delayq_path[n] = '\0';
    char *slash = strrchr(g_delayq_path, '/');
    snprintf(slash + 1, sizeof g_delayq_path - (size_t)(slash + 1 - g_delayq_path), "redisync-delayq");
    if (access(g_delayq_path, X_OK) != 0) {
        fprintf(stderr, "faults: --net: %s is missing (make test-network builds it)\n", g_delayq_path);
        return -1;
    }
    atexit(net_end);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    return 0;
}

int net_child(int slot)
{
    gid_t g = (gid_t)(NET_GID0 + slot);
    return setgroups(0, NULL) == 0 && setgid(g) == 0 ? 0 : -1;
}

/* ---- the schedule ------------------------------------------------------------------------ */
/* Two cut channels (black hole, one-way: two workers may be cut at once, on different
 * slots, so a run gathers twice the cuts); one for the flap, which cuts everyone. */
typedef struct chan {
    int state;        /* 0 idle, 1 armed (holder cut asked, waiting for ready), 2 cut */
    int slot;
    int master;       /* net-rl-part: the index of the master it is cut from */
    char kind;        /* B O P: a holder black-holed / one-way / cut from one Redlock master;
                         b o p: any worker; F: everyone */
    long id;
    int rules[2];
    int64_t next_at, until, t_cut;
} chan_t;

static struct {
    const scenario_t *sc;
    int port, nchan;
    int ports[3], nports;
    long id;
    chan_t ch[2];
    /* net-rl-part: no holder is asked to stay in its section before this. A holder cut from
     * one master of three keeps its hold (a quorum still renews it) and stays in its section
     * until the heal: two such cuts back to back on one name (the next holder of the name
     * takes the other channel's command) held it for about 19.5 s with gaps under 0.1 s,
     * and its waiters' 15 s bound failed although the lock was never free (seed 11). */
    int64_t hold_ok_at;
} N;

static int fault_kind(const scenario_t *sc)
{
    return sc->net == NET_BLACKHOLE ? F_NET_BLACKHOLE : sc->net == NET_ONEWAY ? F_NET_ONEWAY
         : sc->net == NET_RL_PART   ? F_NET_RL_PART   : F_NET_FLAP;
}

int net_begin(const scenario_t *sc, const int *ports, int nports, uint64_t seed)
{
    memset(&N, 0, sizeof N);
    N.sc = sc;
    N.port = ports[0];
    N.nports = nports < 3 ? nports : 3;
    for (int p = 0; p < N.nports; p++)
        N.ports[p] = ports[p];
    N.nchan = sc->net == NET_FLAP ? 1 : 2;
    for (int c = 0; c < 2; c++) {
        N.ch[c].rules[0] = N.ch[c].rules[1] = -1;
        N.ch[c].slot = -1;
        N.ch[c].next_at = now_us() + (c ? 4000000 : 1500000);
    }
    for (int i = 0; i < sc->procs; i++)
        for (int p = 0; p < N.nports; p++)
            if (net_rule_add("mangle", "OUTPUT", "-p tcp --dport %d -m owner --gid-owner %d -j "
                         "CONNMARK --set-mark %d", N.ports[p], NET_GID0 + i, NET_GID0 + i) < 0)
                return -1;
    if (sc->net == NET_SLOW_LOSSY) {
        if (delayq_start(seed) != 0)
            return -1;
        const char *dir[2] = {"--dport", "--sport"};
        for (int p = 0; p < N.nports; p++)
            for (int d = 0; d < 2; d++)
                if (net_rule_add("filter", "INPUT", "-p tcp %s %d -m statistic --mode random "
                             "--probability " LOSS " -j DROP", dir[d], N.ports[p]) < 0)
                    return -1;
        for (int p = 0; p < N.nports; p++)
            for (int d = 0; d < 2; d++)
                if (net_rule_add("filter", "INPUT", "-p tcp %s %d -j NFQUEUE --queue-num %d "
                             "--queue-bypass", dir[d], N.ports[p], NET_QUEUE) < 0)
                    return -1;
    }
    return 0;
}

static int do_cut(chan_t *C, uint64_t *rng, result_t *res)
{
    const scenario_t *sc = N.sc;
    int g = NET_GID0 + C->slot;
    if (C->kind == 'F') {
        C->rules[0] = net_rule_add("filter", "INPUT", "-p tcp --dport %d -j DROP", N.port);
        C->rules[1] = net_rule_add("filter", "INPUT", "-p tcp --sport %d -j DROP", N.port);
        C->until = now_us() + rnd_range(rng, 1000, 3000) * 1000;
    } else if (C->kind == 'P' || C->kind == 'p') {
        int mp = N.ports[C->master];
        C->rules[0] = net_rule_add("filter", "INPUT", "-p tcp --dport %d -m connmark --mark %d -j DROP",
                               mp, g);
        C->rules[1] = net_rule_add("filter", "INPUT", "-p tcp --sport %d -m connmark --mark %d -j DROP",
                               mp, g);
        C->until = now_us() + rnd_range(rng, sc->lease_ms * 3 / 2, sc->lease_ms * 5 / 2) * 1000;
    } else {
        C->rules[0] = C->kind == 'B' || C->kind == 'b'
                          ? net_rule_add("filter", "INPUT", "-p tcp -m connmark --mark %d -j DROP", g)
                          : net_rule_add("filter", "INPUT", "-p tcp --sport %d -m connmark --mark %d "
                                     "-j DROP", N.port, g);
        C->until = now_us() + rnd_range(rng, sc->lease_ms * 3 / 2, sc->lease_ms * 5 / 2) * 1000;
    }
    C->t_cut = now_us(); /* the rule is in force from here on (it may be from a little earlier) */
    int two = C->kind == 'F' || C->kind == 'P' || C->kind == 'p';
    if (C->rules[0] < 0 || (two && C->rules[1] < 0)) {
        res->setup_failed = 1;
        return -1;
    }
    C->state = 2;
    res->faults[fault_kind(sc)]++;
    return 0;
}

static void heal(chan_t *C, redisContext *ck)
{
    net_rule_del(C->rules[0]);
    net_rule_del(C->rules[1]);
    C->rules[0] = C->rules[1] = -1;
    int64_t t_heal = now_us();
    if (C->kind == 'B' || C->kind == 'O' || C->kind == 'P')
        freeReplyObject(ck_cmd(ck, "SET go:%ld 1", C->id));
    if (C->kind == 'P') /* its name's waiters are served for a lease first */
        N.hold_ok_at = t_heal + N.sc->lease_ms * 1000;
    char rec[96]; /* (hiredis's format has no %c) */
    snprintf(rec, sizeof rec, "%c:%d:%lld:%lld", C->kind, C->kind == 'F' ? -1 : C->slot,
             (long long)C->t_cut, (long long)t_heal);
    freeReplyObject(ck_cmd(ck, "RPUSH net %s", rec));
    char who[16];
    snprintf(who, sizeof who, "w%d", C->slot);
    if (g_verbose_net)
        printf("    %12s  healed %s after %lld ms\n", "", C->kind == 'F' ? "everyone" : who,
               (long long)(t_heal - C->t_cut) / 1000);
    C->state = 0;
}

static const char *master_of(const chan_t *C)
{
    static char buf[32];
    if (C->kind != 'P' && C->kind != 'p')
        return "";
    snprintf(buf, sizeof buf, " from master %d", C->master);
    return buf;
}

static int tick(chan_t *C, redisContext *ck, uint64_t *rng, result_t *res, char *detail,
                size_t len, int64_t now)
{
    const scenario_t *sc = N.sc;
    int k = fault_kind(sc);
    switch (C->state) {
    case 0: {
        if (now < C->next_at)
            return -1;
        if (sc->net == NET_FLAP) {
            C->kind = 'F';
            if (do_cut(C, rng, res) != 0)
                return -1;
            snprintf(detail, len, " everyone, for %lld ms", (long long)(C->until - C->t_cut) / 1000);
            C->next_at = C->t_cut + rnd_range(rng, 4000, 6000) * 1000;
            return k;
        }
        const chan_t *other = &N.ch[C == &N.ch[0]];
        do
            C->slot = (int)rnd_range(rng, 0, sc->procs - 1);
        while (other->state != 0 && other->slot == C->slot);
        C->master = sc->net == NET_RL_PART ? (int)rnd_range(rng, 0, N.nports - 1) : 0;
        char up = sc->net == NET_BLACKHOLE ? 'B' : sc->net == NET_RL_PART ? 'P' : 'O';
        /* net-rl-part: one holder kept in its section at a time, a lease apart (N) */
        int hold_ok = sc->net != NET_RL_PART ||
                      (now >= N.hold_ok_at && (other->state == 0 || other->kind == 'p'));
        if (hold_ok && rnd_range(rng, 0, 99) < 75) { /* a holder: ask it to wait inside its
                                                       section */
            C->kind = up;
            C->id = ++N.id;
            freeReplyObject(ck_cmd(ck, "SET cmd:%d net:%ld", C->slot, C->id));
            C->state = 1;
            C->until = now + 5000000;
            return -1;
        }
        C->kind = (char)(up - 'A' + 'a');
        if (do_cut(C, rng, res) != 0)
            return -1;
        snprintf(detail, len, " w%d (wherever it is)%s, for %lld ms", C->slot,
                 master_of(C), (long long)(C->until - C->t_cut) / 1000);
        return k;
    }
    case 1:
        if (ck_int(ck, "GET ready:%d", C->slot) == C->id) {
            if (do_cut(C, rng, res) != 0)
                return -1;
            snprintf(detail, len, " w%d inside its section%s, for %lld ms", C->slot,
                     master_of(C), (long long)(C->until - C->t_cut) / 1000);
            return k;
        }
        if (now > C->until) {
            if (ck_int(ck, "DEL cmd:%d", C->slot) == 1) { /* never taken: give up this one */
                C->state = 0;
                C->next_at = now + 500000;
            } else {
                C->until = now + 2000000; /* taken: its ready:SLOT is on the way */
            }
        }
        return -1;
    default:
        if (now >= C->until) {
            heal(C, ck);
            if (C->kind != 'F')
                C->next_at = now_us() + rnd_range(rng, 1000, 2500) * 1000;
        }
        return -1;
    }
}

int net_tick(redisContext *ck, uint64_t *rng, result_t *res, char *detail, size_t len)
{
    const scenario_t *sc = N.sc;
    int64_t now = now_us();
    if (sc->net == NET_SLOW_LOSSY) {
        if (res->faults[F_NET_SLOW_LOSSY] == 0) {
            res->faults[F_NET_SLOW_LOSSY] = 1;
            snprintf(detail, len, " %d +- %d ms each way, %s loss, whole scenario", DELAY_MS,
                     JITTER_MS, LOSS);
            return F_NET_SLOW_LOSSY;
        }
        return -1;
    }
    int k = -1;
    for (int c = 0; c < N.nchan; c++) {
        int kc = tick(&N.ch[c], ck, rng, res, detail, len, now);
        if (kc >= 0)
            return kc; /* (one fault per call: its detail is printed) */
        k = kc;
    }
    return k;
}

void net_heal_all(redisContext *ck)
{
    if (!N.sc)
        return;
    for (int c = 0; c < N.nchan; c++) {
        chan_t *C = &N.ch[c];
        if (C->state == 2)
            heal(C, ck);
        if (C->state == 1) { /* a holder asked to wait: let it go whether or not it took it */
            freeReplyObject(ck_cmd(ck, "DEL cmd:%d", C->slot));
            freeReplyObject(ck_cmd(ck, "SET go:%ld 1", C->id));
            C->state = 0;
        }
    }
}
