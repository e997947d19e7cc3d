/*
 * report.c - the fault suite's tables (tests/faults/main.c runs the scenarios, check.c
 * computes each one's figures): per scenario the sections and how they ended, faults,
 * violations, takeover p50/p99 (a holder killed or stopped, until the next grant) and lock
 * wait p99/max (a lock call until its grant, every section of the scenario); then faults by
 * kind, violations by invariant, and the closing line.
 */
#include <stdlib.h>
#include <string.h>

#include "faults.h"

static long total_faults(const result_t *r)
{
    long n = 0;
    for (int k = 0; k < F_COUNT; k++)
        n += r->faults[k];
    return n;
}

long total_viol(const result_t *r)
{
    long n = 0;
    for (int k = 0; k < V_COUNT; k++)
        n += r->violations[k];
    return n;
}

static double pct(const int64_t *v, int n, double p)
{
    if (n == 0)
        return -1;
    int i = (int)(p * (n - 1) + 0.5);
    return (double)v[i] / 1000.0;
}

int report_print(const scenario_t *scenarios, int nscen, const result_t *res, const int *ran,
                 uint64_t seed, int64_t elapsed_us, const char *label, int failed)
{
    printf("\n%-14s %5s %8s %8s %6s %7s %7s %5s %7s %7s %6s %5s %11s %11s %6s\n", "scenario",
           "procs", "sections", "truthful", "lost", "refused", "restart", "other", "lockerr",
           "edeadlk", "faults", "viol", "takeover ms", "lock wait", "secs");
    printf("%-14s %5s %8s %8s %6s %7s %7s %5s %7s %7s %6s %5s %11s %11s %6s\n", "", "", "", "",
           "ELOST", "+ELOST", "+ELOST", "", "", "orphan", "", "", "p50/p99", "ms p99/max", "");
    long S = 0, P = 0, F = 0, V = 0;
    int64_t *all = NULL;
    int nall = 0;
    for (int k = 0; k < nscen; k++) {
        if (!ran[k])
            continue;
        const result_t *r = &res[k];
        char tk[32] = "-";
        if (r->ntakeover)
            snprintf(tk, sizeof tk, "%.0f/%.0f", pct(r->takeover, r->ntakeover, 0.5),
                     pct(r->takeover, r->ntakeover, 0.99));
        char lw[32] = "-";
        if (r->nwaits)
            snprintf(lw, sizeof lw, "%.0f/%.0f", pct(r->waits, r->nwaits, 0.99),
                     pct(r->waits, r->nwaits, 1.0));
        printf("%-14s %5ld %8ld %8ld %6ld %7ld %7ld %5ld %7ld %7ld %6ld %5ld %11s %11s %6.1f\n",
               r->sc->name, r->processes, r->sections, r->truthful, r->elost, r->refused_reported,
               r->restart_lost, r->other_rc, r->lock_errors, r->orphans, total_faults(r),
               total_viol(r), tk, lw, r->seconds);
        S += r->sections, P += r->processes, F += total_faults(r), V += total_viol(r);
        all = realloc(all, (size_t)(nall + r->ntakeover + 1) * sizeof *all);
        memcpy(all + nall, r->takeover, (size_t)r->ntakeover * sizeof *all);
        nall += r->ntakeover;
        if (total_viol(r) || r->setup_failed)
            failed = 1;
    }
    printf("(lost: unlock said RS_ELOST; refused+ELOST: of those, sections whose fenced ops were "
           "refused; restart+ELOST: holds that spanned a restart without persistence, all told; "
           "other: unlock RS_ECONN; lockerr: lock RS_ECONN/ETIMEDOUT...; edeadlk orphan: "
           "docs/design.md limit)\n");
    printf("\nfaults by kind:\n%-14s", "");
    for (int k = 0; k < nscen; k++)
        if (ran[k])
            printf(" %12s", scenarios[k].name);
    printf("\n");
    for (int f = 0; f < F_COUNT; f++) {
        printf("%-14s", fault_names[f]);
        for (int k = 0; k < nscen; k++)
            if (ran[k]) {
                if (scenarios[k].faults & FB(f))
                    printf(" %12ld", res[k].faults[f]);
                else
                    printf(" %12s", "-");
            }
        printf("\n");
    }
    printf("\nviolations by invariant:\n%-14s", "");
    for (int k = 0; k < nscen; k++)
        if (ran[k])
            printf(" %12s", scenarios[k].name);
    printf("\n");
    for (int v = 0; v < V_COUNT; v++) {
        printf("%-14s", viol_names[v]);
        for (int k = 0; k < nscen; k++)
            if (ran[k])
                printf(" %12ld", res[k].violations[v]);
        printf("\n");
    }
    printf("%-14s", "dup tokens");
    for (int k = 0; k < nscen; k++)
        if (ran[k])
            printf(" %12ld", res[k].dup_tokens);
    printf("\n%-14s", "on_lost calls");
    for (int k = 0; k < nscen; k++)
        if (ran[k])
            printf(" %12ld", res[k].onlost);
    printf("\n");
    for (int i = 1; i < nall; i++) /* insertion sort: a few hundred values */
        for (int j = i; j > 0 && all[j - 1] > all[j]; j--) {
            int64_t t = all[j];
            all[j] = all[j - 1];
            all[j - 1] = t;
        }
    printf("\n%ld violations in %ld sections across %ld processes with %ld injected faults; "
           "takeover p50/p99 %.0f/%.0f ms (%d takeovers); seed %llu; %.1f s\n",
           V, S, P, F, pct(all, nall, 0.5), pct(all, nall, 0.99), nall, (unsigned long long)seed,
           (double)elapsed_us / 1e6);
    for (int k = 0; k < nscen; k++)
        if (ran[k] && res[k].setup_failed)
            printf("%s: SETUP FAILED\n", scenarios[k].name);
    printf("%s: %s\n", label, failed ? "FAILED" : "ok");
    free(all);
    return failed;
}

void apend_add(result_t *r, int kind, int slot, long pending)
{
    if (r->napend < (int)(sizeof r->apend / sizeof r->apend[0])) {
        r->apend[r->napend].kind = kind;
        r->apend[r->napend].slot = slot;
        r->apend[r->napend++].pending = pending;
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

void async_report(redisContext *ck, const result_t *r)
{
    printf("   async: requests pending in the process at each kill -9 / SIGSTOP of an "
           "event-loop worker (%d):\n     ", r->napend);
    long v[64];
    for (int i = 0; i < r->napend; i++) {
        printf("%s w%d %ld%s", fault_names[r->apend[i].kind], r->apend[i].slot,
               r->apend[i].pending, i + 1 < r->napend ? (i % 5 == 4 ? ",\n     " : ", ") : "\n");
        v[i] = r->apend[i].pending;
    }
    if (r->napend) {
        qsort(v, (size_t)r->napend, sizeof *v, cmp_long);
        printf("     pending at the fault: min %ld, median %ld, max %ld\n", v[0],
               v[r->napend / 2], v[r->napend - 1]);
    } else {
        printf("(none)\n");
    }
    /* lock waits (the call until its grant) of the blocking workers and of the event-loop
     * workers' granted requests, from the section records */
    redisReply *x = ck_cmd(ck, "LRANGE sec 0 -1");
    size_t n = x->type == REDIS_REPLY_ARRAY ? x->elements : 0;
    int64_t *w[2];
    int nw[2] = {0, 0};
    w[0] = calloc(n + 1, sizeof *w[0]);
    w[1] = calloc(n + 1, sizeof *w[1]);
    for (size_t i = 0; w[0] && w[1] && i < n; i++) {
        int slot;
        long long a, req;
        if (sscanf(x->element[i]->str, "%d %*d %*s %*u %lld %*d %*d %*d %*d %*u %*c %*d %lld",
                   &slot, &a, &req) != 3)
            continue;
        int k = slot >= r->sc->procs - r->sc->async;
        w[k][nw[k]++] = a - req;
    }
    freeReplyObject(x);
    for (int k = 0; k < 2 && w[0] && w[1]; k++) {
        qsort(w[k], (size_t)nw[k], sizeof *w[k], cmp_i64);
        printf("   async: lock wait p50/p99/max of the %s: %.0f/%.0f/%.0f ms (%d)\n",
               k ? "event-loop workers' granted requests" : "blocking workers' sections",
               pct(w[k], nw[k], 0.5), pct(w[k], nw[k], 0.99), pct(w[k], nw[k], 1.0), nw[k]);
    }
    free(w[0]);
    free(w[1]);
    x = ck_cmd(ck, "HGETALL aout");
    printf("   async: requests ended:");
    for (size_t i = 0; x->type == REDIS_REPLY_ARRAY && i + 1 < x->elements; i += 2)
        printf(" %s %s", x->element[i]->str, x->element[i + 1]->str);
    printf("\n");
    freeReplyObject(x);
}
