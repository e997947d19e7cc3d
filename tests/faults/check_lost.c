/*
 * check_lost.c - under Redlock, every hold reported lost must have a fault that explains it
 * (V_LOST, "lost?"; called by check_scenario for scenario_t.redlock, --net excluded).
 *
 * check.c excuses a section whose unlock returned RS_ELOST from I1/I3: its holder was told
 * that exclusion may have been broken. On three appendonly (fsync always) masters, with the
 * driver's faults hitting one master at a time, a correct library says so only when
 * something happened to that hold: its own process stopped past the lease, or a master
 * killed and restarted, paused, blocked or cut from its clients while the hold lived (its
 * grant one vote short, then a renewal round without a quorum in time). A library that
 * grants without a quorum makes overlapping holds whose releases say RS_ELOST with no such
 * fault anywhere near: that is what this check catches.
 *
 * A section (sync or event-loop worker, the checker's "sec") is *lost* when its unlock
 * returned RS_ELOST or on_lost ran during it. It is explained by a fault of the driver's log
 * (the checker's "flt": schedule.c, procs.c):
 *
 *   - a stop of its own process (SIGSTOP to SIGCONT: stop-any, stop-holder) that meets
 *     [T_ACQ - LEASE - TIMEOUT, T_END + LEASE + TIMEOUT] (T_END: the unlock returned), or
 *   - a server fault on any master (restart, pause, DEBUG SLEEP, connection kills, script
 *     flush) that *began* in [T_ACQ - LEASE - TIMEOUT, T_END] (+ 100 ms of slack).
 *
 * Why a server fault must begin there: the hold is lost when fewer than a quorum of masters
 * still hold it, so at least one master that granted it (the masters form a quorum, one
 * fault hits one of them at a time) lost its key, which takes a fault on that master after
 * it granted. The grant round began after T_ACQ - LEASE (a round longer than the lease
 * grants nothing: its validity, rs__rl_decide) and the worker notes T_ACQ within TIMEOUT of
 * the decision (a generous bound on a loaded machine); past T_END the release's answers
 * were in. A fault begun before the grant round hit a master that then did not grant the
 * hold (or granted it when it came back): it cannot take the hold away. A library that
 * grants with fewer than a quorum (a master down or stalled, the other two split between two
 * callers) makes exactly such holds: their fault began before their grant.
 *
 * Clean runs (docs/reliability.md): every hold reported lost was explained by its own
 * process's stop.
 *
 * Anything else is a violation, printed with the faults nearest to the section.
 */
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "redisync.h"

#define SLACK_US 100000 /* the driver notes a fault's T0 just before injecting it */

typedef struct lflt {
    int kind, target;
    char who;
    int64_t t0, t1;
} lflt_t;

typedef struct lsec {
    int slot, gen, rc;
    char name[16];
    long onlost;
    int64_t t_acq, t_rel, t_end;
} lsec_t;

/* The distance between the fault and the window [lo, hi] (0: they meet). */
static int64_t dist(const lflt_t *f, int64_t lo, int64_t hi)
{
    if (f->t1 < lo)
        return lo - f->t1;
    if (f->t0 > hi)
        return f->t0 - hi;
    return 0;
}

/* The three faults nearest to the window [lo, hi], for the violation's line. */
static void nearest(const lflt_t *f, size_t nf, int64_t lo, int64_t hi, int64_t t0, char *buf,
                    size_t len)
{
    size_t o = 0, pick[3];
    int np = 0;
    buf[0] = '\0';
    for (; np < 3; np++) {
        int64_t best = -1;
        for (size_t i = 0; i < nf; i++) {
            int used = 0;
            for (int k = 0; k < np; k++)
                used |= pick[k] == i;
            int64_t d = dist(&f[i], lo, hi);
            if (!used && (best < 0 || d < best))
                best = d, pick[np] = i;
        }
        if (best < 0)
            break;
        const lflt_t *g = &f[pick[np]];
        if (o < len)
            o += (size_t)snprintf(buf + o, len - o, "%s%s %c%d [%+.3f, %+.3f] s", np ? "; " : "",
                                  fault_names[g->kind], g->who == 'M' ? 'm' : 'w', g->target,
                                  (double)(g->t0 - t0) / 1e6, (double)(g->t1 - t0) / 1e6);
    }
    if (!np)
        snprintf(buf, len, "no fault at all");
}

void check_lost(redisContext *ck, const scenario_t *sc, result_t *r, int verbose)
{
    redisReply *x = ck_cmd(ck, "LRANGE flt 0 -1");
    size_t nf = x->type == REDIS_REPLY_ARRAY ? x->elements : 0;
    lflt_t *f = calloc(nf + 1, sizeof *f);
    for (size_t i = 0; i < nf; i++) {
        long long a, b;
        if (sscanf(x->element[i]->str, "%d %c %d %lld %lld", &f[i].kind, &f[i].who,
                   &f[i].target, &a, &b) != 5 || f[i].kind < 0 || f[i].kind >= F_COUNT) {
            fprintf(stderr, "faults: bad fault record \"%s\"\n", x->element[i]->str);
            exit(3);
        }
        f[i].t0 = a, f[i].t1 = b;
    }
    freeReplyObject(x);

    int64_t lease = sc->lease_ms * 1000, tmo = sc->timeout_ms * 1000;
    x = ck_cmd(ck, "LRANGE sec 0 -1");
    size_t n = x->type == REDIS_REPLY_ARRAY ? x->elements : 0;
    lsec_t *s = calloc(n + 1, sizeof *s);
    int64_t t0 = INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        long long a, b, req, tl, te = 0;
        int got = sscanf(x->element[i]->str, "%d %d %15s %*u %lld %lld %d %*d %*d %*u %*c %ld "
                         "%lld %lld %lld", &s[i].slot, &s[i].gen, s[i].name, &a, &b, &s[i].rc,
                         &s[i].onlost, &req, &tl, &te);
        if (got < 7) {
            fprintf(stderr, "faults: bad section record \"%s\"\n", x->element[i]->str);
            exit(3);
        }
        s[i].t_acq = a, s[i].t_rel = b;
        s[i].t_end = got == 10 && te >= b ? te : b + lease + tmo; /* (no T_END: generous) */
        if (a < t0)
            t0 = a;
    }
    freeReplyObject(x);

    long lost = 0, by_stop = 0, by_server = 0, bad = 0;
    char near[400];
    for (size_t i = 0; i < n; i++) {
        const lsec_t *e = &s[i];
        if (e->rc != RS_ELOST && e->onlost <= 0)
            continue;
        lost++;
        /* its process stopped around it; a server fault begun after its grant round could
         * have begun (that round took less than a lease, the worker up to timeout_ms more to
         * note T_ACQ) and before its release round was over (T_END) */
        int64_t lo = e->t_acq - lease - tmo, hi = e->t_end + lease + tmo;
        int stop = 0, server = 0;
        for (size_t k = 0; k < nf; k++) {
            if (f[k].who == 'W' && f[k].target == e->slot &&
                (f[k].kind == F_STOP_ANY || f[k].kind == F_STOP_HOLDER) &&
                dist(&f[k], lo, hi) == 0)
                stop = 1;
            if (f[k].who == 'M' && f[k].t0 >= lo && f[k].t0 <= e->t_end + SLACK_US)
                server = 1;
        }
        by_stop += stop;
        by_server += !stop && server;
        if (verbose) {
            nearest(f, nf, lo, hi, t0, near, sizeof near);
            printf("    lost: w%d/g%d %s [%+.3f, %+.3f, %+.3f] s rc %d on_lost %ld: %s; %s\n",
                   e->slot, e->gen, e->name, (double)(e->t_acq - t0) / 1e6,
                   (double)(e->t_rel - t0) / 1e6, (double)(e->t_end - t0) / 1e6, e->rc,
                   e->onlost, stop ? "own stop" : server ? "server fault" : "UNEXPLAINED", near);
        }
        if (stop || server)
            continue;
        bad++;
        nearest(f, nf, lo, hi, t0, near, sizeof near);
        char rc[16];
        snprintf(rc, sizeof rc, "%d", e->rc);
        viol(r, V_LOST, "w%d/g%d %s held [%+.3f, %+.3f] s (unlock returned %+.3f s), unlock %s, "
             "on_lost %ld: no stop of its process around it, no server fault begun between "
             "%+.3f s and its release's end; nearest faults: %s", e->slot, e->gen, e->name,
             (double)(e->t_acq - t0) / 1e6, (double)(e->t_rel - t0) / 1e6,
             (double)(e->t_end - t0) / 1e6,
             e->rc == RS_ELOST ? "RS_ELOST" : e->rc == RS_ECONN ? "RS_ECONN" : rc, e->onlost,
             (double)(lo - t0) / 1e6, near);
    }
    printf("    %s: %ld hold(s) reported lost: %ld by their process's stop, %ld by a server "
           "fault, %ld unexplained\n", sc->name, lost, by_stop, by_server, bad);
    free(f);
    free(s);
}
