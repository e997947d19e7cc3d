/*
 * main.c - the driver of the fault-injection suite (make test-faults; tests/faults/).
 *
 *   build/redisync-faults [--seed N] [--only NAME[,NAME...]] [--scale PCT] [--verbose] [--list]
 *                         [--sabotage] [--net] [--pending N]
 *
 * --net runs the network scenarios instead (net.c: black holes, one-way partitions, delay
 * with loss, flaps, made with iptables), and only inside the network namespace that
 * tests/network/run.sh creates for them (make test-network).
 *
 * For each scenario (one per primitive, once, barrier and cond included, the mutex twice: with and
 * without persistence, and once more on a Sentinel deployment, and once through the event-loop
 * API: mutex-async, worker_async.c, and again on three Cluster masters: async-cluster, and
 * on three Redlock masters: async-redlock) the driver starts a data redis-server (appendonly yes +
 * appendfsync always, or no persistence at all; for mutex-failover a master, two replicas
 * and three sentinels, with SENTINEL FAILOVER among the faults and WAIT-confirmed holds)
 * and forks >= 8 worker processes (worker.c: this same program with
 * --worker) that work through critical sections on it, recording every section on a
 * separate checker redis-server that no fault touches. Phases:
 *
 *   warm-up  every worker completes a section (else: no progress)
 *   faults   SCENARIO.seconds of faults from a seeded schedule, one every 0.35-0.9 s
 *            (kinds: faults.h); a window of 8 s without a completed section is a failure
 *   quiet    faults stop, stopped processes continue; every worker must complete two more
 *            sections within 20 s ("after the faults stop, every waiter acquires")
 *   stop     workers finish, close their clients and exit 0 (a crash is a failure)
 *   clean    after two leases, every key under the prefix must have a TTL (I7)
 *   check    the invariants (check.c) from the checker's records
 *
 * Killed workers are replaced at once (same slot, next generation, a new client). The
 * schedule is random with a printed seed (default fixed, so CI runs the same schedule);
 * timing still varies from run to run, so the invariants never depend on a particular
 * interleaving, and liveness bounds are generous (a waiter may wait 15 s, a phase 8-20 s).
 *
 * Honest limits built into the checks: after a restart WITHOUT persistence a new holder may
 * enter before the old one notices its hold vanished. That is not counted against exclusion
 * (I3): the old holder's unlock returns RS_ELOST (I6 requires it), and RS_ELOST sections are
 * excused from I1/I3, and counted in the table as "lost".
 *
 * --sabotage tests the checks themselves: workers then skip the lock (the latch wait) in a
 * few sections and claim success, and the run must report I1/I3/I4/I5 violations.
 *
 * Exit status: 0 when every scenario had 0 violations and made progress, 1 otherwise, 2 when
 * a server could not be started or the command line is wrong (--only naming no scenario).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"

#define LOCK_FAULTS                                                                             \
    (FB(F_KILL_HOLDER) | FB(F_KILL_WAITER) | FB(F_STOP_HOLDER) | FB(F_STOP_ANY) | FB(F_PAUSE) | \
     FB(F_DEBUG_SLEEP) | FB(F_CLIENT_KILL) | FB(F_CLIENT_KILL_ALL) | FB(F_PUBSUB_KILL) |        \
     FB(F_SCRIPT_FLUSH))
#define LATCH_FAULTS                                                                            \
    (FB(F_KILL_WAITER) | FB(F_STOP_ANY) | FB(F_PAUSE) | FB(F_DEBUG_SLEEP) | FB(F_CLIENT_KILL) |  \
     FB(F_CLIENT_KILL_ALL) | FB(F_PUBSUB_KILL) | FB(F_SCRIPT_FLUSH) | FB(F_RESTART_AOF))

#define ASYNC_FAULTS (FB(F_KILL_HOLDER) | FB(F_KILL_WAITER) | FB(F_STOP_HOLDER) | FB(F_STOP_ANY))
/* the same under Cluster, and one master's connections cut (CLIENT KILL TYPE normal, then
 * pubsub: the per-master pipelines and sharded subscribers break one at a time) */
#define ASYNC_CLUSTER_FAULTS (ASYNC_FAULTS | FB(F_CLIENT_KILL_ALL) | FB(F_PUBSUB_KILL))
/* the same under Redlock, and one master killed (-9) and restarted with its data, or
 * blocked (DEBUG SLEEP), as mutex-redlock's: its rounds get one grant fewer, or none */
#define ASYNC_REDLOCK_FAULTS (ASYNC_FAULTS | FB(F_RESTART_AOF) | FB(F_DEBUG_SLEEP))

/* Leases of 800 ms (renewed every 267 ms); timeout_ms 400, so every pause and DEBUG SLEEP
 * (600-1400 ms) outlasts the command timeout and most outlast the lease. The latch holds
 * nothing and its count-downs must not be left in doubt (a count-down that fails with
 * RS_ECONN may or may not have been applied, and the test could not tell whether to send it
 * again): its timeout_ms (3000) outlasts every stall. */
static const scenario_t scenarios[] = {
    /* name          prim      aof procs secs lease timeout faults                          names sem latch round sentinel minrep redlock net tls optin async cluster pending */
    {"mutex-aof",    P_MUTEX,  1,  10,   15,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"mutex-lose",   P_MUTEX,  0,  10,   15,  800,  400,    LOCK_FAULTS | FB(F_RESTART_LOSE), 2,  0,  0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"rmutex-lose",  P_RMUTEX, 0,  10,   15,  800,  400,    LOCK_FAULTS | FB(F_RESTART_LOSE), 2,  0,  0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"rwlock-aof",   P_RWLOCK, 1,  10,   15,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"sem-lose",     P_SEM,    0,  10,   15,  800,  400,    LOCK_FAULTS | FB(F_RESTART_LOSE), 1,  3,  0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"latch-aof",    P_LATCH,  1,  10,   18,  800,  3000,   LATCH_FAULTS,                     1,  0,  4,    1000, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* Sentinel: failovers (one per 14 s at most: the old master is demoted about 10 s after
     * the switch) among process faults; holds WAIT-confirmed by the replica (min_replicas 1),
     * so every invariant must hold across them, tokens included; holder kills and stops
     * between them (every dead or frozen waiter in a queue costs the lock up to a lease, and
     * the other scenarios cover those: fewer kinds here keep waits within the 15 s bound) */
    {"mutex-failover", P_MUTEX, 0, 8,    28,  1000, 3000,   FB(F_FAILOVER) | FB(F_KILL_HOLDER) | FB(F_STOP_HOLDER),
                                                                                              2,  0,  0,    0,    1, 1, 0, 0, 0, 0, 0, 0, 0},
    /* Redlock: three masters with their data (a master restarted without it can let a second
     * holder in: docs/deployments.md), every server fault on one master at a time; the lock
     * wait column shows whether waiters are woken (issue 17: they slept through leases) */
    {"mutex-redlock", P_MUTEX, 1,  8,    15,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0,    0, 0, 1, 0, 0, 0, 0, 0, 0},
    /* TLS: every library connection is a TLS session (rediss://); kills of connections cut
     * sessions mid-reply, restarts under load make every client reconnect and resume its
     * session, stalls hold handshakes (issue 12) */
    {"mutex-tls",    P_MUTEX,  1,  8,    18,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0,    0, 0, 0, 0, 1, 0, 0, 0, 0},
    /* once (issue 14): rounds of one once each, every worker at each; the runner killed or
     * stopped inside fn, a quarter of the runs failing (handed on): fn never twice at once,
     * never after a confirmed success, nobody through before a success (I8). With AOF: a
     * restart without the done mark would rightly run fn again */
    {"once-aof",     P_ONCE,   1,  10,   10,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  1,  0,  0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* barrier (issue 14): 8 workers at one barrier of 3 parties, a quarter of the waits
     * timing out (withdrawn) under the faults: nobody passes before a generation that
     * counts it trips, one serial per generation, PARTIES counted in each (I9). It holds
     * nothing, so no holder faults; timeout_ms as the latch's: no arrival left in doubt */
    {"barrier-aof",  P_BARRIER, 1, 8,    9,   800,  3000,   LATCH_FAULTS,                     1,  4,  0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* cond: 4 producers, 4 consumers, one mutex, two conditions over a bounded buffer that
     * only the mutex keeps consistent, under the mutex's faults: I1-I4, I6; I10 (worker_cond.c) */
    {"cond-aof",     P_COND,   1,  8,    10,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  1,  0,  0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* the event-loop API (issue 16): w5-w7 are one-thread epoll workers (worker_async.c),
     * each keeping 300 (--pending) rs_mutex_acquire_async requests pending on the names of
     * the blocking workers w0-w4, some with short deadlines, some cancelled; kill -9 and
     * SIGSTOP past the lease, most of them aimed at the event-loop workers (schedule.c,
     * pick_target): I1-I4, I6 for their grants as for every section. One data server (the
     * event-loop API is not offered under min_replicas; Cluster and Redlock: next) */
    {"mutex-async",  P_MUTEX,  1,  8,    7,   800,  400,    ASYNC_FAULTS,                     6,  0,  0,    0,    0, 0, 0, 0, 0, 0, 3, 0, 0},
    /* the same on a Cluster of three masters (redis-cluster://): the six names two to a
     * master, so each event-loop worker's requests go out on three pipelines and wait for
     * sharded wake-ups on three masters; besides the process faults, one master's normal
     * or pub/sub connections killed (every worker's pipeline or subscriber to it breaks
     * with hundreds pending). Same invariants, the keys' TTLs checked on every master */
    {"async-cluster", P_MUTEX, 0,  8,    7,   800,  400,    ASYNC_CLUSTER_FAULTS,             6,  0,  0,    0,    0, 0, 0, 0, 0, 0, 3, 1, 0},
    /* and on the three Redlock masters of mutex-redlock (redlock://, appendonly): each
     * request's rounds go to all three (lib/async_rl.c), granted on a quorum of two; besides
     * the process faults, one master killed and restarted with its data or blocked by DEBUG
     * SLEEP (its rounds then one answer short). 100 pending per event-loop worker, not 300:
     * every request waits in all three masters' queues, so 100 make the per-master queues
     * of async-cluster's 300 (with 300, quorums answered past timeout_ms and requests ended
     * in RS_ECONN by the thousand on a loaded machine: docs/reliability.md). Same
     * invariants, the keys' TTLs checked on every master; FIFO is not promised */
    {"async-redlock", P_MUTEX, 1,  8,    7,   800,  400,    ASYNC_REDLOCK_FAULTS,             6,  0,  0,    0,    0, 0, 1, 0, 0, 0, 3, 0, 100},
};
#define NSCEN ((int)(sizeof scenarios / sizeof scenarios[0]))

char g_exe[4096];
int g_async_pending; /* 0: each scenario's (scenario_t.pending) */
int g_verbose;
int g_sabotage;
int g_net;

static void usage(void)
{
    fprintf(stderr, "usage: redisync-faults [--seed N] [--only NAME[,NAME...]] [--scale PCT] "
                    "[--verbose] [--list] [--sabotage] [--net] [--pending N]\n"
                    "  --pending N: requests each event-loop worker keeps pending (default 300; async-redlock 100)\n"
                    "  --net: the network scenarios; only inside tests/network/run.sh's namespace\n"
                    "  --sabotage: self-test of the checks: workers sometimes skip the lock (latch: "
                    "the wait) and claim success; the run must then FAIL\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--worker") == 0)
        return worker_main(argc, argv);

    uint64_t seed = 20251123;
    const char *only = NULL;
    int scale = 100, list_only = 0;
    const char *env = getenv("FAULTS_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 10);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc)
            scale = atoi(argv[++i]);
        else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0)
            g_verbose = 1;
        else if (strcmp(argv[i], "--sabotage") == 0)
            g_sabotage = 1;
        else if (strcmp(argv[i], "--net") == 0)
            g_net = 1;
        else if (strcmp(argv[i], "--pending") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            g_async_pending = atoi(argv[++i]);
        else if (strcmp(argv[i], "--list") == 0)
            list_only = 1;
        else
            usage();
    }
    const scenario_t *tab = g_net ? net_scenarios : scenarios;
    int ntab = g_net ? net_nscen : NSCEN;
    for (int k = 0; list_only && k < ntab; k++)
        printf("%s\n", tab[k].name);
    if (list_only)
        return 0;
    if (only) { /* every name must be known: a typo must not pass as "ok" after running nothing */
        char list[256];
        snprintf(list, sizeof list, "%s", only);
        for (char *save = NULL, *nm = strtok_r(list, ",", &save); nm; nm = strtok_r(NULL, ",", &save)) {
            int known = 0;
            for (int k = 0; k < ntab && !known; k++)
                known = strcmp(tab[k].name, nm) == 0;
            if (!known) {
                fprintf(stderr, "faults: --only: no scenario \"%s\"%s (--list names them)\n", nm,
                        g_net ? " among the network ones" : "");
                return 2;
            }
        }
    }
    if (g_net && net_guard(g_verbose) != 0)
        return 2;
    if (scale < 10)
        scale = 10;
    ssize_t len = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
    if (len <= 0) {
        perror("faults: readlink /proc/self/exe");
        return 2;
    }
    g_exe[len] = '\0';
    setvbuf(stdout, NULL, _IOLBF, 0);

    ts_server_t ck_srv;
    if (ts_server_start(&ck_srv, NULL) != 0) {
        fprintf(stderr, "faults: cannot start the checker redis-server\n");
        return 2;
    }
    redisContext *ck = ck_connect(ck_srv.port);

    printf("redisync fault suite: seed %llu (repeat: %s --seed %llu%s%s), scale %d%%\n",
           (unsigned long long)seed, argv[0], (unsigned long long)seed, only ? " --only " : "",
           only ? only : "", scale);
    result_t res[MAX_SCEN];
    memset(res, 0, sizeof res);
    int ran[MAX_SCEN] = {0};
    int64_t t_all = now_us();
    for (int k = 0; k < ntab && k < MAX_SCEN; k++) {
        if (only) {
            char list[256];
            snprintf(list, sizeof list, ",%s,", only);
            char key[64];
            snprintf(key, sizeof key, ",%s,", tab[k].name);
            if (!strstr(list, key))
                continue;
        } else if (tab[k].optin) {
            continue;
        }
        scenario_t sc = tab[k];
        sc.seconds = sc.seconds * scale / 100;
        if (sc.seconds < 3)
            sc.seconds = 3;
        run_t R;
        memset(&R, 0, sizeof R);
        R.sc = &sc;
        R.index = k;
        R.seed = seed;
        R.rng = seed ^ (0x5851F42D4C957F2Dull * (uint64_t)(k + 1));
        R.ck_srv = &ck_srv;
        R.ck = ck;
        res[k].sc = &tab[k];
        R.res = &res[k];
        printf("== %s: %s%s, %s, %d processes, %d s of faults, lease %ld ms, timeout %ld ms\n",
               sc.name, prim_names[sc.prim], sc.redlock ? " on 3 redlock masters"
                                             : sc.cluster ? " on 3 cluster masters"
                                             : sc.tls ? " over TLS" : "",
               sc.persist ? "appendonly+fsync always" : "no persistence", sc.procs, sc.seconds,
               sc.lease_ms, sc.timeout_ms);
        run_scenario(&R);
        ran[k] = 1;
        if (sc.async)
            async_report(ck, &res[k]);
        printf("   %s: %ld sections, %ld violations, %.1f s\n", sc.name, res[k].sections,
               total_viol(&res[k]), res[k].seconds);
    }

    int failed = g_net ? net_report(tab, ntab, res, ran) : 0;
    failed = report_print(tab, ntab, res, ran, seed, now_us() - t_all,
                          g_net ? "test-network" : "test-faults", failed);
    for (int k = 0; k < ntab; k++) {
        free(res[k].takeover);
        free(res[k].waits);
        free(res[k].detect), free(res[k].ntake), free(res[k].recover);
        free(res[k].promote), free(res[k].demote), free(res[k].far_n0);
    }
    redisFree(ck);
    ts_server_stop(&ck_srv);
    return failed ? 1 : 0;
}
