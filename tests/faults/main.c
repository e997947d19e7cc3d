/*
 * main.c - the driver of the fault-injection suite (make test-faults; tests/faults/).
 *
 *   build/redisync-faults [--seed N] [--only NAME[,NAME...]] [--scale PCT] [--verbose] [--list]
 *                         [--sabotage] [--net]
 *
 * --net runs the network scenarios instead (net.c: black holes, one-way partitions, delay
 * with loss, flaps, made with iptables), and only inside the network namespace that
 * tests/network/run.sh creates for them (make test-network).
 *
 * For each scenario (one per primitive, once, barrier and cond included, the mutex twice: with and
 * without persistence, and once more on a Sentinel deployment) the driver starts a data redis-server (appendonly yes +
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
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "faults.h"
#include "redis_server.h"
#include "redisync.h"
#include "sentinel.h"
#include "tls.h"

#define FX_MASTER "fxmaster"

#define LOCK_FAULTS                                                                             \
    (FB(F_KILL_HOLDER) | FB(F_KILL_WAITER) | FB(F_STOP_HOLDER) | FB(F_STOP_ANY) | FB(F_PAUSE) | \
     FB(F_DEBUG_SLEEP) | FB(F_CLIENT_KILL) | FB(F_CLIENT_KILL_ALL) | FB(F_PUBSUB_KILL) |        \
     FB(F_SCRIPT_FLUSH))
#define LATCH_FAULTS                                                                            \
    (FB(F_KILL_WAITER) | FB(F_STOP_ANY) | FB(F_PAUSE) | FB(F_DEBUG_SLEEP) | FB(F_CLIENT_KILL) |  \
     FB(F_CLIENT_KILL_ALL) | FB(F_PUBSUB_KILL) | FB(F_SCRIPT_FLUSH) | FB(F_RESTART_AOF))

/* Leases of 800 ms (renewed every 267 ms); timeout_ms 400, so every pause and DEBUG SLEEP
 * (600-1400 ms) outlasts the command timeout and most outlast the lease. The latch holds
 * nothing and its count-downs must not be left in doubt (a count-down that fails with
 * RS_ECONN may or may not have been applied, and the test could not tell whether to send it
 * again): its timeout_ms (3000) outlasts every stall. */
static const scenario_t scenarios[] = {
    /* name          prim      aof procs secs lease timeout faults                          names sem latch round sentinel minrep redlock net tls optin */
    {"mutex-aof",    P_MUTEX,  1,  10,   20,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0, 0, 0, 0, 0, 0, 0},
    {"mutex-lose",   P_MUTEX,  0,  10,   20,  800,  400,    LOCK_FAULTS | FB(F_RESTART_LOSE), 2,  0,  0,    0, 0, 0, 0, 0, 0, 0},
    {"rmutex-lose",  P_RMUTEX, 0,  10,   20,  800,  400,    LOCK_FAULTS | FB(F_RESTART_LOSE), 2,  0,  0,    0, 0, 0, 0, 0, 0, 0},
    {"rwlock-aof",   P_RWLOCK, 1,  10,   20,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0, 0, 0, 0, 0, 0, 0},
    {"sem-lose",     P_SEM,    0,  10,   20,  800,  400,    LOCK_FAULTS | FB(F_RESTART_LOSE), 1,  3,  0,    0, 0, 0, 0, 0, 0, 0},
    {"latch-aof",    P_LATCH,  1,  10,   18,  800,  3000,   LATCH_FAULTS,                     1,  0,  4,    1000, 0, 0, 0, 0, 0, 0},
    /* Sentinel: failovers (one per 14 s at most: the old master is demoted about 10 s after
     * the switch) among process faults; holds WAIT-confirmed by the replica (min_replicas 1),
     * so every invariant must hold across them, tokens included; holder kills and stops
     * between them (every dead or frozen waiter in a queue costs the lock up to a lease, and
     * the other scenarios cover those: fewer kinds here keep waits within the 15 s bound) */
    {"mutex-failover", P_MUTEX, 0, 8,    28,  1000, 3000,   FB(F_FAILOVER) | FB(F_KILL_HOLDER) | FB(F_STOP_HOLDER),
                                                                                              2,  0,  0,    0,    1, 1, 0, 0, 0, 0},
    /* Redlock: three masters with their data (a master restarted without it can let a second
     * holder in: docs/deployments.md), every server fault on one master at a time; the lock
     * wait column shows whether waiters are woken (issue 17: they slept through leases) */
    {"mutex-redlock", P_MUTEX, 1,  8,    20,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0,    0, 0, 1, 0, 0, 0},
    /* TLS: every library connection is a TLS session (rediss://); kills of connections cut
     * sessions mid-reply, restarts under load make every client reconnect and resume its
     * session, stalls hold handshakes (issue 12) */
    {"mutex-tls",    P_MUTEX,  1,  8,    18,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  2,  0,  0,    0,    0, 0, 0, 0, 1, 0},
    /* once (issue 14): rounds of one once each, every worker at each; the runner killed or
     * stopped inside fn, a quarter of the runs failing (handed on): fn never twice at once,
     * never after a confirmed success, nobody through before a success (I8). With AOF: a
     * restart without the done mark would rightly run fn again */
    {"once-aof",     P_ONCE,   1,  10,   10,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  1,  0,  0,    0,    0, 0, 0, 0, 0, 0},
    /* barrier (issue 14): 8 workers at one barrier of 3 parties, a quarter of the waits
     * timing out (withdrawn) under the faults: nobody passes before a generation that
     * counts it trips, one serial per generation, PARTIES counted in each (I9). It holds
     * nothing, so no holder faults; timeout_ms as the latch's: no arrival left in doubt */
    {"barrier-aof",  P_BARRIER, 1, 8,    9,   800,  3000,   LATCH_FAULTS,                     1,  4,  0,    0,    0, 0, 0, 0, 0, 0},
    /* cond: 4 producers, 4 consumers, one mutex, two conditions over a bounded buffer that
     * only the mutex keeps consistent, under the mutex's faults: I1-I4, I6; I10 (worker_cond.c) */
    {"cond-aof",     P_COND,   1,  8,    10,  800,  400,    LOCK_FAULTS | FB(F_RESTART_AOF),  1,  0,  0,    0,    0, 0, 0, 0, 0, 0},
};
#define NSCEN ((int)(sizeof scenarios / sizeof scenarios[0]))

#define PROGRESS_WINDOW_US 8000000
#define QUIET_BOUND_US 20000000
#define MAX_PROCS 16
#define MAX_SCEN 16
#define MAX_STOPPED 3

typedef struct slot {
    pid_t pid;
    int gen;
    int stopped;       /* 0 running, 1 stopped by the driver, 2 stopped itself (cmd stop) */
    int64_t cont_at;
    int cmd;           /* pending command given through the checker: 'k' or 's' */
    int kill_sent;     /* the driver sent SIGKILL */
    int done;          /* exited 0 after stop */
    int crashes;       /* unexpected exits: after 3, the slot is not replaced any more */
} slot_t;

typedef struct run {
    const scenario_t *sc;
    int index;
    uint64_t rng;
    uint64_t seed;
    ts_server_t *ck_srv;
    redisContext *ck;
    ts_server_t data;
    ts_server_t replica[2];   /* sentinel scenarios: the master's two replicas, and */
    ts_server_t sent[3];      /* the three sentinels; Redlock: data, replica[0], replica[1]
                                 are the three masters */
    redisContext *rlconn[2];  /* Redlock: the driver's connections to replica[0] and [1] */
    tt_certs_t certs;         /* TLS: the certificates of the scenario (removed at its end) */
    char url[600];            /* what the workers use */
    char ports[96];           /* every port a worker's sockets may go to (the I7 check) */
    redisContext *dconn;      /* the driver's connection to the data server */
    redisContext *pending;    /* DEBUG SLEEP reply still due */
    int64_t pending_until;
    int64_t server_busy_until;
    slot_t slot[MAX_PROCS];
    int phase;                /* 0 warm/faults/quiet: respawn; 1 stop: no respawn */
    int64_t t0;
    char last_detail[96];     /* what the last fault hit, for --verbose */
    restart_win_t restarts[256];
    int nrestarts;
    result_t *res;
} run_t;

static char g_exe[4096];
static int g_verbose;
static int g_sabotage; /* --sabotage: workers sometimes skip the lock; the checks must fail */
static int g_net;      /* --net: the network scenarios (net.c), inside run.sh's namespace */

static long long slot_count(run_t *R, int i)
{
    long long v = ck_int(R->ck, "GET n:%d", i);
    return v < 0 ? 0 : v;
}

static pid_t spawn(run_t *R, int i)
{
    const scenario_t *sc = R->sc;
    slot_t *s = &R->slot[i];
    char a[24][640];
    int k = 0;
    snprintf(a[k++], sizeof a[0], "prim=%d", (int)sc->prim);
    snprintf(a[k++], sizeof a[0], "slot=%d", i);
    snprintf(a[k++], sizeof a[0], "gen=%d", s->gen);
    snprintf(a[k++], sizeof a[0], "seed=%llu",
             (unsigned long long)(R->seed * 1000003u + (uint64_t)R->index * 7919u + (uint64_t)i * 131u + (uint64_t)s->gen));
    snprintf(a[k++], sizeof a[0], "url=%s", R->url);
    snprintf(a[k++], sizeof a[0], "port=%d", R->data.port);
    snprintf(a[k++], sizeof a[0], "ports=%s", R->ports);
    snprintf(a[k++], sizeof a[0], "minrep=%d", sc->min_replicas);
    snprintf(a[k++], sizeof a[0], "ck=%d", R->ck_srv->port);
    snprintf(a[k++], sizeof a[0], "prefix=fx");
    snprintf(a[k++], sizeof a[0], "lease=%ld", sc->lease_ms);
    snprintf(a[k++], sizeof a[0], "timeout=%ld", sc->timeout_ms);
    snprintf(a[k++], sizeof a[0], "names=%d", sc->names);
    snprintf(a[k++], sizeof a[0], "semsize=%d", sc->sem_size);
    snprintf(a[k++], sizeof a[0], "latchk=%d", sc->latch_count);
    snprintf(a[k++], sizeof a[0], "round=%ld", sc->round_ms);
    snprintf(a[k++], sizeof a[0], "t0=%lld", (long long)R->t0);
    int round0 = 1;
    if (sc->prim == P_LATCH && s->gen > 0)
        round0 = (int)((now_us() - R->t0) / (sc->round_ms * 1000)) + 1;
    snprintf(a[k++], sizeof a[0], "round0=%d", round0);
    snprintf(a[k++], sizeof a[0], "sab=%d", g_sabotage);
    char *argv[28];
    argv[0] = "redisync-faults";
    argv[1] = "--worker";
    for (int j = 0; j < k; j++)
        argv[2 + j] = a[j];
    argv[2 + k] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p == 0) {
        /* no inherited descriptor: the worker counts its own sockets to the data server */
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        if (g_net && net_child(i) != 0)
            _exit(126);
        execv(g_exe, argv);
        _exit(127);
    }
    if (p < 0) {
        perror("faults: fork");
        exit(2);
    }
    s->pid = p;
    s->stopped = 0;
    s->cmd = 0;
    s->kill_sent = 0;
    R->res->processes++;
    return p;
}

/* Reaps exits and stops of the workers; replaces killed workers while respawning is on. */
static void reap(run_t *R)
{
    int64_t now = now_us();
    for (int i = 0; i < R->sc->procs; i++) {
        slot_t *s = &R->slot[i];
        if (s->pid <= 0)
            continue;
        int st;
        pid_t p = waitpid(s->pid, &st, WNOHANG | WUNTRACED);
        if (p != s->pid)
            continue;
        if (WIFSTOPPED(st)) {
            if (s->stopped == 0) { /* the worker stopped itself inside its section */
                s->stopped = 2;
                s->cont_at = now + rnd_range(&R->rng, R->sc->lease_ms * 3 / 2, R->sc->lease_ms * 3) * 1000;
                s->cmd = 0;
                if (g_verbose)
                    printf("    %+8.3f s  stop-holder w%d stopped itself inside its section, for %lld ms\n",
                           (double)(now - R->t0) / 1e6, i, (long long)(s->cont_at - now) / 1000);
            }
            continue;
        }
        int expected = (s->kill_sent || s->cmd == 'k') && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (g_verbose && expected && !s->kill_sent)
            printf("    %+8.3f s  kill9-holder w%d killed itself inside its section\n",
                   (double)(now - R->t0) / 1e6, i);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && R->phase == 1) {
            s->done = 1;
            s->pid = 0;
            continue;
        }
        if (!expected) {
            char how[64];
            if (WIFSIGNALED(st))
                snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(st));
            else
                snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
            viol(R->res, V_API, "worker w%d (pid %d, generation %d) %s", i, (int)s->pid, s->gen, how);
            s->crashes++;
        }
        s->pid = 0;
        redisReply *r = ck_cmd(R->ck, "DEL in:%d cmd:%d", i, i);
        freeReplyObject(r);
        if (R->phase == 0 && s->crashes <= 3) {
            s->gen++;
            spawn(R, i);
        } else {
            s->done = 1;
        }
    }
    for (int i = 0; i < R->sc->procs; i++) {
        slot_t *s = &R->slot[i];
        if (s->pid > 0 && s->stopped && s->cont_at <= now) {
            kill(s->pid, SIGCONT);
            s->stopped = 0;
        }
    }
    if (R->pending && now >= R->pending_until) {
        redisReply *r = NULL;
        struct timeval tv = {2, 0};
        redisSetTimeout(R->pending, tv);
        if (redisGetReply(R->pending, (void **)&r) == REDIS_OK && r)
            freeReplyObject(r);
        redisFree(R->pending);
        R->pending = NULL;
    }
}

static int nstopped(run_t *R)
{
    int n = 0;
    for (int i = 0; i < R->sc->procs; i++)
        n += R->slot[i].stopped != 0 || R->slot[i].cmd == 's';
    return n;
}

/* A random live slot that satisfies the filter, or -1. */
static int pick_slot(run_t *R, int need_outside, int min_slot)
{
    int cand[MAX_PROCS], n = 0;
    for (int i = min_slot; i < R->sc->procs; i++) {
        slot_t *s = &R->slot[i];
        if (s->pid <= 0 || s->stopped || s->cmd || s->kill_sent)
            continue;
        if (need_outside && ck_int(R->ck, "EXISTS in:%d", i) == 1)
            continue;
        cand[n++] = i;
    }
    return n ? cand[rnd_range(&R->rng, 0, n - 1)] : -1;
}

/* The server a server fault hits, and the driver's connection to it: the data server, or
 * under Redlock one of the three masters at random. */
static ts_server_t *fault_target(run_t *R, redisContext ***conn, int *which)
{
    *which = R->sc->redlock ? (int)rnd_range(&R->rng, 0, 2) : 0;
    if (*which == 0) {
        *conn = &R->dconn;
        return &R->data;
    }
    *conn = &R->rlconn[*which - 1];
    return &R->replica[*which - 1];
}

/* Injects one fault of the scenario's kinds; returns the kind, or -1 if none applied now. */
static int inject(run_t *R)
{
    const scenario_t *sc = R->sc;
    /* restarts weigh more: each lossy one is where I6 is tested (every hold spanning it
     * must be told), and each is one event where a dozen of the others fit */
    int kinds[4 * F_COUNT], nk = 0;
    for (int k = 0; k < F_COUNT; k++)
        for (int wgt = k == F_RESTART_LOSE || k == F_FAILOVER ? 3 : k == F_RESTART_AOF ? 2 : 1; wgt > 0 && (sc->faults & FB(k)); wgt--)
            kinds[nk++] = k;
    int64_t now = now_us();
    for (int attempt = 0; attempt < 8; attempt++) {
        int k = kinds[rnd_range(&R->rng, 0, nk - 1)];
        R->last_detail[0] = '\0';
        int server = k >= F_RESTART_AOF;
        if (server && now < R->server_busy_until)
            continue;
        redisContext **dconn;
        int m;
        ts_server_t *data = fault_target(R, &dconn, &m);
        if (server && R->sc->redlock)
            snprintf(R->last_detail, sizeof R->last_detail, " (master %d)", m);
        int i;
        switch (k) {
        case F_KILL_HOLDER:
        case F_STOP_HOLDER:
            if (k == F_STOP_HOLDER && nstopped(R) >= MAX_STOPPED)
                continue;
            if ((i = pick_slot(R, 0, 0)) < 0)
                continue;
            R->slot[i].cmd = k == F_KILL_HOLDER ? 'k' : 's';
            snprintf(R->last_detail, sizeof R->last_detail, " w%d (at its next section)", i);
            freeReplyObject(ck_cmd(R->ck, "SET cmd:%d %s", i, k == F_KILL_HOLDER ? "kill" : "stop"));
            return k; /* counted when the worker carries it out (its "ev" record) */
        case F_KILL_WAITER:
            if ((i = pick_slot(R, sc->prim != P_LATCH, sc->prim == P_LATCH ? sc->latch_count : 0)) < 0)
                continue;
            R->slot[i].kill_sent = 1;
            kill(R->slot[i].pid, SIGKILL);
            snprintf(R->last_detail, sizeof R->last_detail, " w%d", i);
            R->res->faults[k]++;
            return k;
        case F_STOP_ANY:
            if (nstopped(R) >= MAX_STOPPED || (i = pick_slot(R, 0, 0)) < 0)
                continue;
            R->slot[i].stopped = 1;
            R->slot[i].cont_at = now + rnd_range(&R->rng, sc->lease_ms * 6 / 5, sc->lease_ms * 5 / 2) * 1000;
            kill(R->slot[i].pid, SIGSTOP);
            snprintf(R->last_detail, sizeof R->last_detail, " w%d for %lld ms", i,
                     (long long)(R->slot[i].cont_at - now) / 1000);
            R->res->faults[k]++;
            return k;
        case F_RESTART_AOF:
        case F_RESTART_LOSE: {
            restart_win_t *w = &R->restarts[R->nrestarts < 255 ? R->nrestarts++ : 255];
            w->lossy = k == F_RESTART_LOSE;
            w->down = now_us();
            if (*dconn)
                redisFree(*dconn);
            *dconn = NULL;
            ts_server_kill(data);
            if (ts_server_restart(data) != 0) {
                fprintf(stderr, "faults: %s: the data server did not restart\n", sc->name);
                R->res->setup_failed = 1;
                return -2;
            }
            w->up = now_us();
            size_t dl = strlen(R->last_detail);
            snprintf(R->last_detail + dl, sizeof R->last_detail - dl, " (down %.0f ms)",
                     (double)(w->up - w->down) / 1e3);
            R->server_busy_until = w->up + 300000;
            R->res->faults[k]++;
            return k;
        }
        case F_PAUSE: {
            long ms = rnd_range(&R->rng, 600, 1400);
            if (inject_pause(dconn, data, ms) != 0)
                continue;
            size_t dl = strlen(R->last_detail);
            snprintf(R->last_detail + dl, sizeof R->last_detail - dl, " %ld ms", ms);
            R->server_busy_until = now + ms * 1000 + 200000;
            R->res->faults[k]++;
            return k;
        }
        case F_DEBUG_SLEEP: {
            if (R->pending)
                continue;
            long ms = rnd_range(&R->rng, 500, 1200);
            if (inject_debug_sleep(data, ms, &R->pending) != 0)
                continue;
            size_t dl = strlen(R->last_detail);
            snprintf(R->last_detail + dl, sizeof R->last_detail - dl, " %ld ms", ms);
            R->pending_until = now + ms * 1000 + 100000;
            R->server_busy_until = now + ms * 1000 + 200000;
            R->res->faults[k]++;
            return k;
        }
        case F_CLIENT_KILL:
        case F_CLIENT_KILL_ALL:
        case F_PUBSUB_KILL:
        case F_SCRIPT_FLUSH: {
            int rc = k == F_CLIENT_KILL       ? inject_client_kill_one(dconn, data, &R->rng)
                     : k == F_CLIENT_KILL_ALL ? inject_client_kill_type(dconn, data, "normal")
                     : k == F_PUBSUB_KILL     ? inject_client_kill_type(dconn, data, "pubsub")
                                              : inject_script_flush(dconn, data);
            if (rc != 0)
                continue;
            R->server_busy_until = now + 100000;
            R->res->faults[k]++;
            return k;
        }
        case F_FAILOVER: {
            int si = (int)rnd_range(&R->rng, 0, 2);
            if (!sc->sentinel || inject_failover(&R->sent[si], FX_MASTER) != 0)
                continue;
            snprintf(R->last_detail, sizeof R->last_detail, " (asked of sentinel %d)", si);
            R->server_busy_until = now + 14000000;
            R->res->faults[k]++;
            return k;
        }
        default:
            continue;
        }
    }
    return -1;
}

/* A data server speaking TLS (plain port for the driver's faults only); R->url is its
 * rediss:// URL with the test CA. */
static int start_tls_server(run_t *R)
{
    int port;
    const char *aof[] = {"--appendonly", "yes", "--appendfsync", "always", NULL};
    if (tt_certs_make(&R->certs) != 0 ||
        tt_server_startx(&R->data, &port, &R->certs, NULL, 0, R->sc->persist ? aof : NULL) != 0)
        return -1;
    snprintf(R->url, sizeof R->url, "rediss://127.0.0.1:%d?tls_ca=%s", port, R->certs.ca);
    snprintf(R->ports, sizeof R->ports, "%d", port);
    return 0;
}

static long long progress(run_t *R)
{
    const char *list = R->sc->prim == P_LATCH ? "lat" : R->sc->prim == P_BARRIER ? "bar" : "sec";
    return ck_int(R->ck, "LLEN %s", list);
}

static void run_scenario(run_t *R)
{
    const scenario_t *sc = R->sc;
    result_t *res = R->res;
    int64_t started = now_us();
    freeReplyObject(ck_cmd(R->ck, "FLUSHALL"));
    ts_server_t *rl[3] = {&R->data, &R->replica[0], &R->replica[1]};
    int rc = sc->sentinel ? start_sentinel_topology(&R->data, R->replica, R->sent, FX_MASTER,
                                                    R->url, sizeof R->url, R->ports, sizeof R->ports)
             : sc->redlock ? start_redlock_masters(rl, R->url, sizeof R->url, R->ports, sizeof R->ports)
             : sc->tls ? start_tls_server(R)
             : sc->persist ? ts_server_start(&R->data, "--appendonly", "yes", "--appendfsync", "always", NULL)
                           : ts_server_start(&R->data, NULL);
    if (!sc->sentinel && !sc->redlock && !sc->tls) {
        snprintf(R->url, sizeof R->url, "%s", R->data.url);
        snprintf(R->ports, sizeof R->ports, "%d", R->data.port);
    }
    if (rc == 0 && sc->net) { /* (the connmark rules before the workers' first SYN) */
        int ports[3] = {R->data.port, R->replica[0].port, R->replica[1].port};
        rc = net_begin(sc, ports, sc->redlock ? 3 : 1, R->seed);
    }
    if (rc != 0) {
        fprintf(stderr, "faults: %s: cannot start the data server or its network\n", sc->name);
        res->setup_failed = 1;
        return;
    }
    R->t0 = now_us();
    for (int i = 0; i < sc->procs; i++)
        spawn(R, i);

    /* warm-up: every worker gets through once */
    int64_t until = now_us() + 15000000;
    for (;;) {
        reap(R);
        int all = 1;
        for (int i = 0; i < sc->procs && all; i++)
            all = slot_count(R, i) >= 1;
        if (all)
            break;
        if (now_us() > until) {
            for (int i = 0; i < sc->procs; i++)
                if (slot_count(R, i) < 1)
                    viol(res, V_LIVE, "warm-up: w%d completed no section in 15 s", i);
            break;
        }
        sleep_us(20000);
    }

    /* faults */
    int64_t fault_start = now_us();
    int64_t end = fault_start + (int64_t)sc->seconds * 1000000;
    int64_t next = fault_start + rnd_range(&R->rng, 200, 600) * 1000;
    int64_t window = fault_start + PROGRESS_WINDOW_US;
    long long seen = progress(R);
    while (now_us() < end && !res->setup_failed) {
        reap(R);
        int64_t now = now_us();
        if (now >= next) {
            int k = sc->net ? net_tick(R->ck, &R->rng, res, R->last_detail, sizeof R->last_detail)
                            : inject(R);
            if (g_verbose && k >= 0)
                printf("    %+8.3f s  %s%s\n", (double)(now_us() - R->t0) / 1e6, fault_names[k], R->last_detail);
            next = now_us() + (sc->net ? 10000 : rnd_range(&R->rng, 350, 900) * 1000);
        }
        if (now >= window) {
            long long p = progress(R);
            if (p == seen)
                viol(res, V_LIVE, "faults phase: nothing completed between %+.1f s and %+.1f s",
                     (double)(window - PROGRESS_WINDOW_US - R->t0) / 1e6, (double)(window - R->t0) / 1e6);
            seen = p;
            window += PROGRESS_WINDOW_US;
        }
        sleep_us(10000);
    }

    /* quiet: faults stop, everything continues, every worker gets through twice more */
    if (sc->net)
        net_heal_all(R->ck);
    freeReplyObject(ck_cmd(R->ck, "EVAL %s 0", "for _, k in ipairs(redis.call('KEYS', 'cmd:*')) do redis.call('DEL', k) end"));
    for (int i = 0; i < sc->procs; i++) {
        /* (a 'k' mark stays: the worker may have taken the command just before the DEL, and
         * its SIGKILL is then expected) */
        if (R->slot[i].cmd == 's')
            R->slot[i].cmd = 0;
        if (R->slot[i].stopped)
            R->slot[i].cont_at = 0;
    }
    reap(R);
    while (R->pending) {
        sleep_us(20000);
        reap(R);
    }
    int64_t quiet = now_us();
    long long base[MAX_PROCS];
    for (int i = 0; i < sc->procs; i++)
        base[i] = slot_count(R, i);
    until = quiet + QUIET_BOUND_US;
    for (;;) {
        reap(R);
        int all = 1;
        for (int i = 0; i < sc->procs && all; i++)
            all = slot_count(R, i) >= base[i] + 2;
        if (all)
            break;
        if (now_us() > until) {
            for (int i = 0; i < sc->procs; i++)
                if (slot_count(R, i) < base[i] + 2)
                    viol(res, V_LIVE, "after the faults stopped, w%d completed %lld section(s) in "
                         "%d s (2 required)", i, slot_count(R, i) - base[i], QUIET_BOUND_US / 1000000);
            break;
        }
        sleep_us(20000);
    }
    double quiet_s = (double)(now_us() - quiet) / 1e6;

    /* stop: workers finish, close their clients, exit 0 */
    R->phase = 1;
    if (sc->prim == P_LATCH)
        freeReplyObject(ck_cmd(R->ck, "SET stop %lld",
                               (long long)((now_us() - R->t0) / (sc->round_ms * 1000)) + 2));
    else
        freeReplyObject(ck_cmd(R->ck, "SET stop 1"));
    until = now_us() + 30000000;
    for (;;) {
        reap(R);
        int alive = 0;
        for (int i = 0; i < sc->procs; i++)
            alive += R->slot[i].pid > 0;
        if (!alive)
            break;
        if (now_us() > until) {
            for (int i = 0; i < sc->procs; i++)
                if (R->slot[i].pid > 0) {
                    viol(res, V_LIVE, "w%d did not finish within 30 s of stop", i);
                    kill(R->slot[i].pid, SIGKILL);
                    waitpid(R->slot[i].pid, NULL, 0);
                    R->slot[i].pid = 0;
                }
            break;
        }
        sleep_us(20000);
    }

    if (sc->net)
        net_end();
    /* clean state: two leases after the last client closed, every key has a TTL */
    sleep_us(2 * sc->lease_ms * 1000 + 300000);
    long keys = 0, no_ttl = 0;
    ts_server_t *scan[3] = {sc->sentinel ? current_master(&R->data, R->replica, R->sent, FX_MASTER) : &R->data, sc->redlock ? &R->replica[0] : NULL,
                            sc->redlock ? &R->replica[1] : NULL};
    for (int i = 0; i < 3; i++) {
        long k1 = 0, n1 = 0;
        if (scan[i] && scan_ttls(scan[i], "fx", &k1, &n1) != 0)
            viol(res, V_I7, "cannot scan the data server's keys");
        keys += k1, no_ttl += n1;
    }
    if (no_ttl)
        viol(res, V_I7, "%ld of %ld keys under the prefix have no TTL", no_ttl, keys);
    if (sc->prim == P_BARRIER)
        check_barrier_record(R->data.port, sc, res);

    check_scenario(R->ck, sc, res, R->restarts, R->nrestarts, g_verbose);
    if (sc->net)
        net_check(R->ck, sc, res);
    if (R->dconn)
        redisFree(R->dconn);
    R->dconn = NULL;
    for (int i = 0; i < 2; i++) {
        if (R->rlconn[i])
            redisFree(R->rlconn[i]);
        R->rlconn[i] = NULL;
    }
    if (sc->redlock)
        for (int i = 0; i < 2; i++)
            ts_server_stop(&R->replica[i]);
    if (sc->sentinel) {
        for (int i = 0; i < 3; i++)
            ts_server_stop(&R->sent[i]);
        for (int i = 0; i < 2; i++)
            ts_server_stop(&R->replica[i]);
    }
    ts_server_stop(&R->data);
    if (sc->tls)
        tt_certs_free(&R->certs);
    res->seconds = (double)(now_us() - started) / 1e6;
    if (g_verbose)
        printf("    quiet phase %.1f s, %ld keys left (all with TTL: %s)\n", quiet_s, keys, no_ttl ? "no" : "yes");
}

static void usage(void)
{
    fprintf(stderr, "usage: redisync-faults [--seed N] [--only NAME[,NAME...]] [--scale PCT] "
                    "[--verbose] [--list] [--sabotage] [--net]\n"
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
                                             : sc.tls ? " over TLS" : "",
               sc.persist ? "appendonly+fsync always" : "no persistence", sc.procs, sc.seconds,
               sc.lease_ms, sc.timeout_ms);
        run_scenario(&R);
        ran[k] = 1;
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
    }
    redisFree(ck);
    ts_server_stop(&ck_srv);
    return failed ? 1 : 0;
}
