/*
 * schedule.c - the fault driver's schedule: at each step, one fault of the scenario's kinds
 * drawn from the seeded generator, aimed at a process (through procs.c) or at a server
 * (through inject.c), or none when nothing fits now (driver.h).
 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "driver.h"

void flt_note(run_t *R, int kind, char who, int target, int64_t t0, int64_t t1)
{
    char rec[96];
    snprintf(rec, sizeof rec, "%d %c %d %lld %lld", kind, who, target, (long long)t0,
             (long long)t1);
    freeReplyObject(ck_cmd(R->ck, "RPUSH flt %s", rec));
}

/* The server a server fault hits, and the driver's connection to it: the data server, or
 * under Redlock or Cluster one of the three masters at random. */
static ts_server_t *fault_target(run_t *R, redisContext ***conn, int *which)
{
    if (R->sc->cluster) {
        *which = (int)rnd_range(&R->rng, 0, 2);
        *conn = &R->cconn[*which];
        return &R->cnodes[*which];
    }
    *which = R->sc->redlock ? (int)rnd_range(&R->rng, 0, 2) : 0;
    if (*which == 0) {
        *conn = &R->dconn;
        return &R->data;
    }
    *conn = &R->rlconn[*which - 1];
    return &R->replica[*which - 1];
}

/* The slot a process fault hits: with event-loop workers in the scenario (scenario_t.async),
 * one of them three times out of four (with hundreds of requests pending such a process is
 * always waiting, and often holding too: "outside" does not apply), else as pick_slot. */
static int pick_target(run_t *R, int need_outside, int min_slot)
{
    if (R->sc->async && rnd_range(&R->rng, 0, 3) > 0) {
        int i = pick_slot(R, 0, R->sc->procs - R->sc->async);
        if (i >= 0)
            return i;
    }
    return pick_slot(R, need_outside, min_slot);
}

/* A kill -9 or SIGSTOP of slot i: an event-loop worker's pending count (its pend:SLOT, at
 * most 50 ms old) goes into the report and the detail. */
static void note_pending(run_t *R, int k, int i)
{
    if (!SLOT_ASYNC(R, i))
        return;
    long p = (long)ck_int(R->ck, "GET pend:%d", i); /* -1: a new worker not counted yet */
    if (p >= 0)
        apend_add(R->res, k, i, p);
    size_t dl = strlen(R->last_detail);
    snprintf(R->last_detail + dl, sizeof R->last_detail - dl, " (async, %ld pending)", p);
}

/* Injects one fault of the scenario's kinds; returns the kind, or -1 if none applied now. */
int inject(run_t *R)
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
        if (server && (R->sc->redlock || R->sc->cluster))
            snprintf(R->last_detail, sizeof R->last_detail, " (master %d)", m);
        int i;
        switch (k) {
        case F_KILL_HOLDER:
        case F_STOP_HOLDER:
            if (k == F_STOP_HOLDER && nstopped(R) >= MAX_STOPPED)
                continue;
            if ((i = pick_target(R, 0, 0)) < 0)
                continue;
            R->slot[i].cmd = k == F_KILL_HOLDER ? 'k' : 's';
            snprintf(R->last_detail, sizeof R->last_detail, " w%d (at its next section)", i);
            freeReplyObject(ck_cmd(R->ck, "SET cmd:%d %s", i, k == F_KILL_HOLDER ? "kill" : "stop"));
            return k; /* counted when the worker carries it out (its "ev" record) */
        case F_KILL_WAITER:
            if ((i = pick_target(R, sc->prim != P_LATCH,
                                 sc->prim == P_LATCH ? sc->latch_count : 0)) < 0)
                continue;
            snprintf(R->last_detail, sizeof R->last_detail, " w%d", i);
            note_pending(R, k, i);
            R->slot[i].kill_sent = 1;
            kill(R->slot[i].pid, SIGKILL);
            flt_note(R, k, 'W', i, now, now);
            R->res->faults[k]++;
            return k;
        case F_STOP_ANY:
            if (nstopped(R) >= MAX_STOPPED || (i = pick_target(R, 0, 0)) < 0)
                continue;
            R->slot[i].stopped = 1;
            R->slot[i].cont_at = now + rnd_range(&R->rng, sc->lease_ms * 6 / 5, sc->lease_ms * 5 / 2) * 1000;
            snprintf(R->last_detail, sizeof R->last_detail, " w%d for %lld ms", i,
                     (long long)(R->slot[i].cont_at - now) / 1000);
            note_pending(R, k, i);
            kill(R->slot[i].pid, SIGSTOP);
            R->slot[i].stop_t = now; /* (logged at its SIGCONT: procs.c, reap) */
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
            flt_note(R, k, 'M', m, w->down, w->up);
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
            flt_note(R, k, 'M', m, now, now + ms * 1000);
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
            flt_note(R, k, 'M', m, now, now + ms * 1000);
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
            flt_note(R, k, 'M', m, now, now_us());
            R->res->faults[k]++;
            return k;
        }
        case F_FAILOVER: {
            int si = (int)rnd_range(&R->rng, 0, 2);
            if (!sc->sentinel || inject_failover(&R->sent[si], FX_MASTER) != 0)
                continue;
            snprintf(R->last_detail, sizeof R->last_detail, " (asked of sentinel %d)", si);
            R->server_busy_until = now + 14000000;
            flt_note(R, k, 'M', si, now, now);
            R->res->faults[k]++;
            return k;
        }
        default:
            continue;
        }
    }
    return -1;
}
