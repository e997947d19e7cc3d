/*
 * phases.c - one scenario of the fault driver from start to check: its deployment (one
 * data server, TLS, Sentinel, Redlock masters, Cluster masters; the network rules under
 * --net), the phases of main.c's description (warm-up, faults, quiet, stop, clean) and the
 * checks (driver.h).
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "cluster.h"
#include "driver.h"
#include "redisync.h"
#include "sentinel.h"

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

void run_scenario(run_t *R)
{
    const scenario_t *sc = R->sc;
    result_t *res = R->res;
    int64_t started = now_us();
    freeReplyObject(ck_cmd(R->ck, "FLUSHALL"));
    ts_server_t *rl[3] = {&R->data, &R->replica[0], &R->replica[1]};
    int rc = NET_IS_SPLIT(sc) ? split_start(R)
             : sc->sentinel ? start_sentinel_topology(&R->data, R->replica, R->sent, FX_MASTER,
                                                    R->url, sizeof R->url, R->ports, sizeof R->ports)
             : sc->redlock ? start_redlock_masters(rl, R->url, sizeof R->url, R->ports, sizeof R->ports)
             : sc->cluster ? start_cluster_masters(R->cnodes, R->url, sizeof R->url, R->ports, sizeof R->ports)
             : sc->tls ? start_tls_server(R)
             : sc->persist ? ts_server_start(&R->data, "--appendonly", "yes", "--appendfsync", "always", NULL)
                           : ts_server_start(&R->data, NULL);
    if (!sc->sentinel && !sc->redlock && !sc->tls && !sc->cluster && !NET_IS_SPLIT(sc)) {
        snprintf(R->url, sizeof R->url, "%s", R->data.url);
        snprintf(R->ports, sizeof R->ports, "%d", R->data.port);
    }
    if (rc == 0 && sc->net && !NET_IS_SPLIT(sc)) { /* (the connmark rules before the workers' first SYN) */
        int ports[3] = {R->data.port, R->replica[0].port, R->replica[1].port};
        rc = net_begin(sc, ports, sc->redlock ? 3 : 1, R->seed);
    }
    if (rc != 0) {
        fprintf(stderr, "faults: %s: cannot start the data server or its network\n", sc->name);
        res->setup_failed = 1;
        if (NET_IS_SPLIT(sc)) {
            net_end();
            split_stop(R);
        }
        if (sc->cluster)
            ts_cluster_stop(R->cnodes, 3);
        return;
    }
    R->t0 = now_us();
    for (int i = 0; i < sc->procs; i++)
        spawn(R, i);

    /* warm-up: every worker gets through once, in 15 s; on Redlock under network faults in
     * 30 s: a worker whose first dials fail (a SYN lost costs 1 s, then 3 s) starts late,
     * and its first lock call may then wait behind the others in ticket order, at a lease
     * per handoff at worst (check.c, check_waits) */
    int warm_s = sc->redlock && sc->net ? 30 : 15;
    int64_t until = now_us() + (int64_t)warm_s * 1000000;
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
                    viol(res, V_LIVE, "warm-up: w%d completed no section in %d s", i, warm_s);
            break;
        }
        sleep_us(20000);
    }

    /* faults */
    int64_t fault_start = now_us();
    int64_t end = fault_start + (int64_t)sc->seconds * 1000000;
    R->fault_end = end;
    int64_t next = fault_start + rnd_range(&R->rng, 200, 600) * 1000;
    int64_t window = fault_start + PROGRESS_WINDOW_US;
    long long seen = progress(R);
    while (now_us() < end && !res->setup_failed) {
        reap(R);
        int64_t now = now_us();
        if (now >= next) {
            int k = NET_IS_SPLIT(sc) ? split_tick(R)
                    : sc->net ? net_tick(R->ck, &R->rng, res, R->last_detail, sizeof R->last_detail)
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
    if (NET_IS_SPLIT(sc))
        split_heal_all(R);
    else if (sc->net)
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
        if (NET_IS_SPLIT(sc))
            split_poll(R);
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

    if (NET_IS_SPLIT(sc))
        split_end(R);
    if (sc->net)
        net_end();
    /* clean state: two leases after the last client closed, every key has a TTL */
    sleep_us(2 * sc->lease_ms * 1000 + 300000);
    long keys = 0, no_ttl = 0;
    ts_server_t *scan[3] = {sc->sentinel ? current_master(&R->data, R->replica, R->sent, FX_MASTER) : &R->data, sc->redlock ? &R->replica[0] : NULL,
                            sc->redlock ? &R->replica[1] : NULL};
    if (sc->cluster)
        for (int i = 0; i < 3; i++)
            scan[i] = &R->cnodes[i];
    if (NET_IS_SPLIT(sc)) {
        scan[0] = NULL;
        if (split_scan(R, &keys, &no_ttl) != 0)
            viol(res, V_I7, "cannot scan the data servers' keys");
    }
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
    for (int i = 0; i < 3; i++) {
        if (R->cconn[i])
            redisFree(R->cconn[i]);
        R->cconn[i] = NULL;
    }
    if (sc->cluster)
        ts_cluster_stop(R->cnodes, 3);
    if (sc->redlock)
        for (int i = 0; i < 2; i++)
            ts_server_stop(&R->replica[i]);
    if (sc->sentinel) {
        for (int i = 0; i < 3; i++)
            ts_server_stop(&R->sent[i]);
        for (int i = 0; i < 2; i++)
            ts_server_stop(&R->replica[i]);
    }
    if (NET_IS_SPLIT(sc))
        split_stop(R);
    ts_server_stop(&R->data);
    if (sc->tls)
        tt_certs_free(&R->certs);
    res->seconds = (double)(now_us() - started) / 1e6;
    if (g_verbose)
        printf("    quiet phase %.1f s, %ld keys left (all with TTL: %s)\n", quiet_s, keys, no_ttl ? "no" : "yes");
}
