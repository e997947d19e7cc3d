/*
 * net_figures.c - the network scenarios' figures (make test-network; the faults themselves
 * are net.c's, the split-brain schedule net_split.c's): from the section records on the
 * checker (whose last field is the monotonic time of the section's first on_lost) and the
 * cut records ("net": "KIND:SLOT:T_CUT:T_HEAL", written by net.c and net_split.c), per
 * scenario the loss detection, takeover, late on_lost, recovery and false loss reports
 * (net_check), and the table (net_report).
 */
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "redisync.h"

typedef struct nsec {
    int slot;
    char name[16];
    int64_t t_req, t_acq, t_rel, t_lost;
    int rc;
    long onlost;
    char mode; /* 'r' a reader, 'w' a writer (rwlock) */
} nsec_t;

/* Whether j's grant takes i's name from it: readers share a rwlock, and a semaphore's
 * permits are shared (the checker's I3 counts them); only an exclusive pair is a takeover. */
static int excludes(const scenario_t *sc, const nsec_t *i, const nsec_t *j)
{
    if (sc->prim == P_SEM)
        return 0;
    return sc->prim != P_RWLOCK || i->mode == 'w' || j->mode == 'w';
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void push(int64_t **v, int *n, int64_t x)
{
    int64_t *p = realloc(*v, (size_t)(*n + 1) * sizeof *p);
    if (!p)
        return;
    p[(*n)++] = x;
    *v = p;
}

/* A split (its 'S' record): when the far side (slots NET_SPLIT_A and up) was first granted
 * n0, the name on the cut master (Cluster: n0's slot; Sentinel: every name), after the cut
 * at tc; whether before the heal at th, which split_far_live deployments require when a
 * replica was promoted during the cut (promoted; without, net_split.c reports why). */
static void split_far_n0(const scenario_t *sc, const nsec_t *s, size_t m, int64_t tc,
                         int64_t th, int promoted, result_t *r)
{
    int64_t take = -1;
    for (size_t j = 0; j < m; j++)
        if (s[j].slot >= NET_SPLIT_A && strcmp(s[j].name, "n0") == 0 && s[j].t_acq > tc &&
            (take < 0 || s[j].t_acq < take))
            take = s[j].t_acq;
    if (take < 0)
        r->far_n0_never++;
    else
        push(&r->far_n0, &r->nfar_n0, take - tc);
    if (take >= 0 && take < th)
        r->far_n0_during++;
    else if (split_far_live(sc) && promoted)
        viol(r, V_LIVE, "split: the far side was not granted n0 during a cut of %.0f ms (%s)",
             (double)(th - tc) / 1e3, take < 0 ? "never" : "only after the heal");
}

void net_check(redisContext *ck, const scenario_t *sc, result_t *r)
{
    redisReply *list = ck_cmd(ck, "LRANGE sec 0 -1");
    size_t n = list->type == REDIS_REPLY_ARRAY ? list->elements : 0;
    nsec_t *s = calloc(n ? n : 1, sizeof *s);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        long long a, b, req = 0, lost = 0;
        int gen;
        unsigned long long f;
        if (sscanf(list->element[i]->str, "%d %d %15s %llu %lld %lld %d %*d %*d %*u %c %ld %lld %lld",
                   &s[m].slot, &gen, s[m].name, &f, &a, &b, &s[m].rc, &s[m].mode, &s[m].onlost,
                   &req, &lost) < 10)
            continue;
        s[m].t_req = req, s[m].t_acq = a, s[m].t_rel = b, s[m].t_lost = lost;
        m++;
    }
    freeReplyObject(list);
    long lease_us = sc->lease_ms * 1000, bound_us = (sc->lease_ms + sc->timeout_ms) * 1000;

    /* false loss reports: under delay and loss alone Redis kept every hold */
    if (sc->net == NET_SLOW_LOSSY)
        for (size_t i = 0; i < m; i++)
            if (s[i].rc == RS_ELOST || s[i].onlost > 0) {
                r->false_lost++;
                printf("    false loss report: w%d %s unlock %d, on_lost %ld\n", s[i].slot,
                       s[i].name, s[i].rc, s[i].onlost);
            }

    redisReply *cuts = ck_cmd(ck, "LRANGE net 0 -1");
    for (size_t c = 0; cuts->type == REDIS_REPLY_ARRAY && c < cuts->elements; c++) {
        char kind;
        int slot;
        long long tc, th;
        if (sscanf(cuts->element[c]->str, "%c:%d:%lld:%lld", &kind, &slot, &tc, &th) != 4)
            continue;
        r->net_cuts += kind != 's'; /* (a split: one S record per cut, s for the other
                                       workers on the cut side) */
        /* recovery: the cut worker's (flap: every worker's) next granted lock after the heal */
        for (int w = 0; w < sc->procs; w++) {
            if (slot >= 0 && w != slot)
                continue;
            size_t best = m;
            for (size_t i = 0; i < m; i++)
                if (s[i].slot == w && s[i].t_acq > th && (best == m || s[i].t_acq < s[best].t_acq))
                    best = i;
            if (best == m)
                continue;
            push(&r->recover, &r->nrecover, s[best].t_acq - th);
            if (s[best].t_acq - th <= bound_us)
                continue;
            /* Slower than lease + timeout_ms: a failure to recover only if nobody else held
             * that name while this worker waited for it (else it queued behind a holder,
             * possibly another cut one: contention, not recovery). */
            int64_t from = s[best].t_req > th ? s[best].t_req : th;
            int contended = 0;
            for (size_t j = 0; j < m && !contended; j++)
                contended = s[j].slot != w && strcmp(s[j].name, s[best].name) == 0 &&
                            s[j].t_acq < s[best].t_acq && s[j].t_rel > from;
            r->recover_slow += !contended;
            printf("    %s recovery: w%d granted %s %.0f ms after the heal of cut %c; its lock "
                   "call began %+.0f ms from the heal and waited %.0f ms%s\n",
                   contended ? "late" : "SLOW", w, s[best].name,
                   (double)(s[best].t_acq - th) / 1e3, kind, (double)(s[best].t_req - th) / 1e3,
                   (double)(s[best].t_acq - s[best].t_req) / 1e3,
                   contended ? " (behind another holder of the name: contention)" : "");
        }
        /* the holds the cut caught: detection, takeover, on_lost before the takeover. A hold
         * cut from one Redlock master keeps its quorum if the two others granted it; if that
         * master was one of only two that did (the third was busy), it has lost its quorum:
         * then, and only then, it must be told (detect, takeover and late as for a black
         * hole), and another worker may take it once the cut master's key has expired */
        if (kind == 'S') { /* (a split's record ends with whether it had a promotion) */
            int prom = 1;
            if (sscanf(cuts->element[c]->str, "%*c:%*d:%*[0-9]:%*[0-9]:%d", &prom) != 1)
                prom = 1;
            split_far_n0(sc, s, m, tc, th, prom, r);
        }
        int part = kind == 'P' || kind == 'p';
        for (size_t i = 0; i < m; i++) {
            if (!(s[i].t_acq < tc && s[i].t_rel > tc) || (slot >= 0 && s[i].slot != slot))
                continue;
            if (part) {
                r->cut_holders++;
                r->part_lost += s[i].t_lost > 0 || s[i].rc == RS_ELOST;
            }
            int64_t take = -1;
            for (size_t j = 0; j < m; j++)
                if (s[j].slot != s[i].slot && strcmp(s[j].name, s[i].name) == 0 && s[j].t_acq > tc &&
                    excludes(sc, &s[i], &s[j]) && (take < 0 || s[j].t_acq < take))
                    take = s[j].t_acq;
            if (kind != 'F' && !part)
                r->cut_holders++;
            if (s[i].t_lost > 0)
                push(&r->detect, &r->ndetect, s[i].t_lost - tc);
            if (take >= 0 && kind != 'F' && (!part || s[i].t_lost > 0))
                push(&r->ntake, &r->nntake, take - tc);
            if (take >= 0 && kind != 'F' && (!part || s[i].t_lost > 0) &&
                take - tc > lease_us * 3 / 2) {
                /* (Redis gave the hold up a lease after the last renewal that reached it;
                 * later than that, say who took the name and which other cuts were on) */
                size_t tk = 0;
                for (size_t j = 0; j < m; j++)
                    if (s[j].t_acq == take && strcmp(s[j].name, s[i].name) == 0)
                        tk = j;
                char others[256] = "";
                for (size_t c2 = 0; c2 < cuts->elements; c2++) {
                    char k2;
                    int sl2;
                    long long a2, b2;
                    if (c2 != c && sscanf(cuts->element[c2]->str, "%c:%d:%lld:%lld", &k2, &sl2,
                                          &a2, &b2) == 4 && a2 < take && b2 > tc)
                        snprintf(others + strlen(others), sizeof others - strlen(others),
                                 " %c w%d [%+.0f, %+.0f] ms", k2, sl2, (double)(a2 - tc) / 1e3,
                                 (double)(b2 - tc) / 1e3);
                }
                printf("    slow takeover: %s of cut %c w%d taken by w%d %.0f ms after the cut "
                       "(its lock call began %+.0f ms from the cut); on_lost %+.0f ms; other "
                       "cuts then:%s\n", s[i].name, kind, s[i].slot, s[tk].slot,
                       (double)(take - tc) / 1e3, (double)(s[tk].t_req - tc) / 1e3,
                       s[i].t_lost ? (double)(s[i].t_lost - tc) / 1e3 : 0.0,
                       others[0] ? others : " none");
            }
            /* still in its section a lease after the cut: its hold had expired before it
             * let go, so on_lost was due (a holder that called unlock earlier gave the hold
             * up itself: its unlock says RS_ECONN or RS_ELOST, and no on_lost is due) */
            if (kind != 'F' && !part && s[i].t_rel - tc > lease_us && s[i].t_lost == 0)
                viol(r, V_I6, "w%d was cut from Redis at %lld ms into its hold of %s, still held "
                     "it %lld ms later (longer than the lease) and on_lost never came "
                     "(unlock %d)", s[i].slot, (long long)(tc - s[i].t_acq) / 1000, s[i].name,
                     (long long)(s[i].t_rel - tc) / 1000, s[i].rc);
            if (take >= 0 && s[i].t_lost > 0 && kind != 'F' &&
                (r->margin_n++ == 0 || take - s[i].t_lost < r->margin_min))
                r->margin_min = take - s[i].t_lost;
            if (take >= 0 && s[i].t_lost > take) {
                r->onlost_late++;
                viol(r, V_I6, "on_lost of cut holder w%d on %s came %.1f ms after another "
                     "worker was granted it (%.0f ms after the cut)", s[i].slot, s[i].name,
                     (double)(s[i].t_lost - take) / 1e3, (double)(s[i].t_lost - tc) / 1e3);
            }
        }
    }
    freeReplyObject(cuts);
    free(s);
    qsort(r->detect, (size_t)r->ndetect, sizeof *r->detect, cmp64);
    qsort(r->ntake, (size_t)r->nntake, sizeof *r->ntake, cmp64);
    qsort(r->recover, (size_t)r->nrecover, sizeof *r->recover, cmp64);
    qsort(r->far_n0, (size_t)r->nfar_n0, sizeof *r->far_n0, cmp64);
}

static void fig(char *buf, size_t len, const int64_t *v, int n)
{
    if (n == 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.0f/%.0f", (double)v[n / 2] / 1e3, (double)v[n - 1] / 1e3);
}

int net_report(const scenario_t *scen, int nscen, const result_t *res, const int *ran)
{
    int failed = 0;
    printf("\nnetwork figures (ms; cut: the DROP rule in force; detect: cut -> on_lost of the "
           "cut holder; takeover: cut -> next grant of its name to another worker; recovery: "
           "heal -> the cut worker's next grant; late: on_lost after that takeover; margin: the "
           "least time from a cut holder's on_lost to that takeover):\n");
    printf("%-15s %5s %7s %11s %11s %6s %11s %11s %5s %6s %11s %6s\n", "scenario", "cuts",
           "holders", "detect ms", "detect", "false", "takeover ms", "recovery ms", "late",
           "margin", "slow recov", "viol");
    printf("%-15s %5s %7s %11s %11s %6s %11s %11s %5s %6s %11s %6s\n", "", "", "cut", "p50/max",
           "/lease", "lost", "p50/max", "p50/max", "", "min ms", "uncontend", "");
    for (int k = 0; k < nscen; k++) {
        if (!ran[k])
            continue;
        const result_t *r = &res[k];
        char d[32], dl[32] = "-", t[32], rc[32];
        fig(d, sizeof d, r->detect, r->ndetect);
        if (r->ndetect)
            snprintf(dl, sizeof dl, "%.2f/%.2f", (double)r->detect[r->ndetect / 2] / 1e3 / scen[k].lease_ms,
                     (double)r->detect[r->ndetect - 1] / 1e3 / scen[k].lease_ms);
        fig(t, sizeof t, r->ntake, r->nntake);
        fig(rc, sizeof rc, r->recover, r->nrecover);
        char fl[16] = "-";
        if (scen[k].net == NET_SLOW_LOSSY)
            snprintf(fl, sizeof fl, "%ld", r->false_lost);
        char mg[16] = "-";
        if (r->margin_n)
            snprintf(mg, sizeof mg, "%.0f", (double)r->margin_min / 1e3);
        printf("%-15s %5ld %7ld %11s %11s %6s %11s %11s %5ld %6s %11ld %6ld\n", scen[k].name,
               r->net_cuts, r->cut_holders, d, dl, fl, t, rc, r->onlost_late, mg, r->recover_slow,
               total_viol(r));
        if (r->false_lost || r->recover_slow)
            failed = 1;
    }
    for (int k = 0; k < nscen; k++)
        if (ran[k] && NET_IS_SPLIT(&scen[k]))
            split_report(&scen[k], &res[k]);
    for (int k = 0; k < nscen; k++)
        if (ran[k] && scen[k].net == NET_RL_PART)
            printf("%s: %ld of %ld holders cut from one master lost their quorum and were told "
                   "(on_lost, RS_ELOST); the others kept the lock through the cut\n",
                   scen[k].name, res[k].part_lost, res[k].cut_holders);
    printf("(false lost: the slow-lossy scenarios, where Redis (a quorum of masters) kept every "
           "hold: any RS_ELOST or on_lost there is false; net-rl-part: holders cut from one master "
           "of three, of which those whose quorum it broke (granted by it and one other) were "
           "told, the others kept it: see the note below the table; slow recov: a cut worker granted again later than lease + "
           "timeout_ms after the heal although nobody else held that name meanwhile; either "
           "fails the run, as does a late on_lost, an I6 violation)\n");
    return failed;
}
