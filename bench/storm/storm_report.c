/*
 * storm_report.c - the storm's output: the table, the details, the targets and the chart.
 */

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "storm_driver.h"

/* ----- output -------------------------------------------------------------------------- */
static double fairness(const row_t *r)
{
    return r->max_w ? (double)r->min_w / (double)r->max_w : 0;
}

static double cmds_per_acq(const row_t *r)
{
    return r->mon_acq ? (double)r->mon_cmds / (double)r->mon_acq : 0;
}

void print_header(void)
{
    printf("%-22s %5s %7s %8s %8s %6s %8s %7s %13s %5s\n", "", "", "", "handoff", "handoff",
           "to a", "lock", "cmds /", "acq / proc", "");
    printf("%-22s %5s %7s %8s %8s %6s %8s %7s %13s %5s\n", "implementation", "procs", "acq/s",
           "p50 RTT", "p99 RTT", "waiter", "wait p99", "acq", "min/max", "fair");
}

void print_row(const row_t *r)
{
    if (!r->ok) {
        printf("%-22s %5d  FAILED: %s\n", r->im->name, r->procs, r->why);
        return;
    }
    char mm[32], h50[16] = "-", h99[16] = "-", wait[16];
    snprintf(mm, sizeof mm, "%ld/%ld", r->min_w, r->max_w);
    if (r->handoffs) {
        snprintf(h50, sizeof h50, "%.2f", r->ho50_us / g_unit_us);
        snprintf(h99, sizeof h99, "%.1f", r->ho99_us / g_unit_us);
    }
    snprintf(wait, sizeof wait, r->wait99_ms < 10 ? "%.2fms" : "%.0fms", r->wait99_ms);
    printf("%-22s %5d %7.0f %8s %8s %5.0f%% %8s %7.2f %13s %5.2f\n", r->im->name, r->procs,
           r->acq_per_s, h50, h99, r->acq ? 100.0 * (double)r->handoffs / (double)r->acq : 0.0,
           wait, cmds_per_acq(r), mm, fairness(r));
}

void print_details(const row_t *rows, int nrows)
{
    printf("\ndetails (per row: timed phase, then the counted phase under MONITOR)\n");
    for (int i = 0; i < nrows; i++) {
        const row_t *r = &rows[i];
        if (!r->ok)
            continue;
        printf("  %s, %d procs: %ld acquisitions in %.1f s, %zu of them handoffs to a waiter: "
               "p50 %.0f us, p99 %.0f us; lock call p50 %.2f ms, p99 %.2f ms\n    raw RTT just "
               "before the row p50 %.1f us, p99 %.1f us (handoff p50 / that: %.2f); RTT probed "
               "during the storm %.1f us\n    holder's unlock call p50 %.0f us; server time per "
               "EVALSHA %.1f us",
               r->im->name, r->procs, r->acq, r->seconds, r->handoffs, r->ho50_us, r->ho99_us,
               r->wait50_ms, r->wait99_ms, r->rtt_us, r->rtt99_us, r->ho50_us / r->rtt_us,
               r->rtt_load_us, r->unlock50_us, r->script_us);
        if (r->violations)
            printf("; EXCLUSION VIOLATED %ld times", r->violations);
        if (r->fails)
            printf("; %ld lock calls gave up", r->fails);
        printf("\n    counted: %ld acquisitions, %ld client commands (%s), %ld run by scripts "
               "(%.1f per acquisition, not counted)",
               r->mon_acq, r->mon_cmds, r->mon_names[0] ? r->mon_names : "none", r->mon_inner,
               r->mon_acq ? (double)r->mon_inner / (double)r->mon_acq : 0.0);
        if (r->mon_fails)
            printf("; %ld lock calls gave up", r->mon_fails);
        printf("\n");
    }
}

/* The row of implementation `key` with `procs` processes, or NULL */
static const row_t *row_of(const row_t *rows, int nrows, const char *key, int procs)
{
    for (int i = 0; i < nrows; i++)
        if (strcmp(rows[i].im->key, key) == 0 && rows[i].procs == procs && rows[i].ok)
            return &rows[i];
    return NULL;
}

static double per(long a, long b)
{
    return b ? (double)a / (double)b : 0.0 / 0.0;
}

static void print_work_line(const char *name, int procs, double handoff_pct, double calls,
                            double server_us, const row_t *f, const row_t *m)
{
    double fc = f ? per(f->mon_inner, f->mon_acq) : 0.0 / 0.0;
    double mc = m ? per(m->mon_inner, m->mon_acq) : 0.0 / 0.0;
    printf("%-30s %5d %6.0f%% %9.1f %7.2f %7.2f %10.1f %7.2f\n", name, procs, handoff_pct, calls,
           calls / fc, calls / mc, server_us, f ? server_us / f->server_us : 0.0 / 0.0);
}

/* Redis's own work per acquisition, every implementation side by side with the floor's and the
 * mutex's of the same number of processes: the calls the scripts make (counted phase, MONITOR,
 * "[0 lua]" lines) and the server time of the EVALSHAs (timed phase, INFO commandstats). */
void print_work(const row_t *rows, int nrows)
{
    printf("\nRedis work per acquisition (each from this run; an acquisition that is a handoff "
           "to a waiter is\nthe waiter's queued acq plus the holder's rel that hands over: "
           "\"to a waiter\" says how many were):\n  calls = calls inside the scripts (counted "
           "phase, MONITOR); server us = the workers' EVALSHA time\n  (timed phase, INFO "
           "commandstats) / their acquisitions; x floor, x mutex: against the raw floor's\n  "
           "and the mutex's figure at the same number of processes\n\n");
    printf("%-30s %5s %7s %9s %7s %7s %10s %7s\n", "implementation", "procs", "to a", "calls /",
           "calls", "calls", "server us", "server");
    printf("%-30s %5s %7s %9s %7s %7s %10s %7s\n", "", "", "waiter", "acq", "x floor", "x mutex",
           "/ acq", "x floor");
    int last = -1, any_rw = 0;
    for (int i = 0; i < nrows; i++) {
        const row_t *r = &rows[i];
        if (!r->ok || r->im->group == STORM_PEER)
            continue;
        if (last != -1 && r->procs != last)
            printf("\n");
        last = r->procs;
        const row_t *f = row_of(rows, nrows, "raw", r->procs);
        const row_t *m = row_of(rows, nrows, "mutex", r->procs);
        double ho = r->acq ? 100.0 * (double)r->handoffs / (double)r->acq : 0.0;
        if (!r->im->readers) {
            print_work_line(r->im->name, r->procs, ho, per(r->mon_inner, r->mon_acq),
                            r->server_us, f, m);
            continue;
        }
        /* readers and writers: each role's calls per acquisition of that role; the server
         * time is the row's, both roles together */
        char nm[64];
        any_rw = 1;
        snprintf(nm, sizeof nm, "%s: rd", r->im->name);
        print_work_line(nm, r->procs, ho, per(r->mon_inner_by[1], r->mon_acq_by[1]),
                        r->server_us, f, m);
        snprintf(nm, sizeof nm, "%s: wr", r->im->name);
        print_work_line(nm, r->procs, ho, per(r->mon_inner_by[0], r->mon_acq_by[0]),
                        r->server_us, f, m);
    }
    if (any_rw)
        printf("(rwlock (r+w): the odd-numbered processes read, the others write; \"rd\" "
               "counts the calls of the\nreaders' own scripts (their acq and rel) per read "
               "acquisition, \"wr\" the writers'; the handoff\nshare and the server time are "
               "the whole row's)\n");
}

/* the raw floor's row with the same number of processes, or NULL */
static const row_t *floor_row(const row_t *rows, int nrows, int procs)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i].im->group == STORM_BASELINE && rows[i].procs == procs && rows[i].ok &&
            rows[i].handoffs)
            return &rows[i];
    return NULL;
}

void print_targets(const row_t *rows, int nrows, const opts_t *o, double fast_us)
{
    printf("\ntargets (redisync rows): handoff p50 <= %.0f RTT; commands/acquisition <= %.1f at "
           "8 and 32 procs, flat;\nfairness (min/max acquisitions per process) >= %.1f in the "
           "%.0f s storm. 1 RTT = %.1f us here; the fastest row's RTT was %.1f us,\nand the "
           "handoff against it is shown too, with the handoff as a multiple of the raw floor's "
           "in the same run\n", TARGET_HANDOFF, TARGET_CMDS, TARGET_FAIR, o->seconds, g_unit_us,
           fast_us);
    for (int i = 0; i < nrows; i++) {
        const row_t *r = &rows[i];
        if (r->im->group != STORM_REDISYNC || !r->ok)
            continue;
        double h = r->handoffs ? r->ho50_us / g_unit_us : 0;
        double c = cmds_per_acq(r);
        int cmd_row = r->procs == 8 || r->procs == 32;
        const row_t *f = floor_row(rows, nrows, r->procs);
        char vs[96] = "";
        if (r->handoffs)
            snprintf(vs, sizeof vs, " (%5.1f fast RTT; %4.1fx floor)", r->ho50_us / fast_us,
                     f ? r->ho50_us / f->ho50_us : 0.0 / 0.0);
        printf("  %-20s %4d procs: handoff %5.2f %s%s   cmds/acq %4.2f %s   fair %4.2f %s%s\n",
               r->im->name, r->procs, h,
               !r->handoffs ? "n/a " : h <= TARGET_HANDOFF ? "PASS" : "MISS", vs, c,
               !cmd_row ? "    " : c <= TARGET_CMDS ? "PASS" : "MISS", fairness(r),
               fairness(r) >= TARGET_FAIR ? "PASS" : "MISS",
               r->violations ? "   EXCLUSION VIOLATED" : "");
    }
}

int cmp_row_procs(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    if (x->procs != y->procs)
        return x->procs - y->procs;
    return (int)(x->im - y->im);
}

int cmp_row_impl(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    if (x->im != y->im)
        return x->im < y->im ? -1 : 1;
    return x->procs - y->procs;
}

/* gnuplot data (one block per implementation) and script; runs gnuplot if it is there. */
void write_chart(const row_t *rows, int nrows, const opts_t *o, const char *base,
                        const char *title)
{
    char dat[PATH_MAX], gp[PATH_MAX], png[PATH_MAX];
    snprintf(dat, sizeof dat, "%s/%s.dat", o->out_dir, base);
    snprintf(gp, sizeof gp, "%s/%s.gp", o->out_dir, base);
    snprintf(png, sizeof png, "%s/%s.png", o->out_dir, base);
    FILE *f = fopen(dat, "w");
    if (!f) {
        fail("%s: %s", dat, strerror(errno));
        return;
    }
    fprintf(f, "# procs acq_per_s handoff_p50_rtt handoff_p99_rtt cmds_per_acq fairness "
               "rtt_us\n");
    int nblocks = 0;
    const storm_impl_t *blocks[32];
    int any_peer = 0;
    for (int k = 0; k < storm_nimpls && nblocks < 32; k++) {
        const storm_impl_t *im = &storm_impls[k];
        int any = 0;
        for (int i = 0; i < nrows; i++)
            if (rows[i].im == im && rows[i].ok)
                any = 1;
        if (!any)
            continue;
        any_peer |= im->group == STORM_PEER;
        fprintf(f, "# %s\n", im->name);
        for (int i = 0; i < nrows; i++) {
            const row_t *r = &rows[i];
            if (r->im != im || !r->ok)
                continue;
            fprintf(f, "%d %.1f %.3f %.3f %.3f %.3f %.2f\n", r->procs, r->acq_per_s,
                    r->handoffs ? r->ho50_us / g_unit_us : 0.0 / 0.0,
                    r->handoffs ? r->ho99_us / g_unit_us : 0.0 / 0.0, cmds_per_acq(r),
                    fairness(r), r->rtt_us);
        }
        fprintf(f, "\n\n");
        blocks[nblocks++] = im;
    }
    fclose(f);
    if (!nblocks)
        return;

    f = fopen(gp, "w");
    if (!f) {
        fail("%s: %s", gp, strerror(errno));
        return;
    }
    /* the peers' chart: p50 only, and a third panel for fairness, their weak point */
    int panels = any_peer ? 3 : 2;
    fprintf(f, "# written by build/redisync-storm; run: gnuplot %s\n", gp);
    fprintf(f, "set terminal pngcairo size %d,720 font 'DejaVu Sans,11'\n", panels * 620);
    fprintf(f, "set output '%s'\n", png);
    fprintf(f, "set datafile missing 'nan'\n");
    fprintf(f, "set multiplot layout 1,%d title \"%s\\n"
               "N processes loop lock / %u us of work / unlock on one primitive, %g s per "
               "point; 2 vCPUs, shared: figures are noisy\"\n",
            panels, title, o->work_us, o->seconds);
    fprintf(f, "set logscale x 2\nset xtics (2, 4, 8, 16, 32, 64, 128, 256)\n");
    fprintf(f, "set xlabel 'processes (one holds, the others wait)'\nset grid\n");
    fprintf(f, "set key below vertical maxrows %d\n", any_peer ? 4 : 5);
    fprintf(f, "set offsets graph 0.05, graph 0.05, 0, 0\n");
    /* handoff latency */
    fprintf(f, "set title 'handoff: unlock called -> a blocked waiter returns'\n");
    fprintf(f, "set ylabel 'raw round trips (1 RTT = %.1f us in this run)'\n", g_unit_us);
    fprintf(f, "set logscale y 10\n");
    fprintf(f, "plot ");
    for (int b = 0; b < nblocks; b++) {
        fprintf(f, "'%s' index %d using 1:3 with linespoints lw 2 pt 7 lc %d title '%s%s', ",
                dat, b, b + 1, blocks[b]->name, any_peer ? "" : " p50");
        if (!any_peer)
            fprintf(f, "'%s' index %d using 1:4 with linespoints lw 1 dt 2 pt 6 lc %d "
                       "title '%s p99', ", dat, b, b + 1, blocks[b]->name);
    }
    fprintf(f, "%.1f with lines lw 2 lc rgb 'red' dt 3 title 'target: p50 <= %.0f'\n",
            TARGET_HANDOFF, TARGET_HANDOFF);
    /* commands per acquisition */
    fprintf(f, "set title \"client commands per acquisition (MONITOR; the scripts' own "
               "excluded)\"\n");
    fprintf(f, "set ylabel 'commands sent per acquisition'\n");
    if (any_peer)
        fprintf(f, "set yrange [1:*]\n");
    else
        fprintf(f, "unset logscale y\nset yrange [0:4]\n");
    fprintf(f, "plot ");
    for (int b = 0; b < nblocks; b++)
        fprintf(f, "'%s' index %d using 1:5 with linespoints lw 2 pt 7 lc %d title '%s', ", dat,
                b, b + 1, blocks[b]->name);
    fprintf(f, "%.1f with lines lw 2 lc rgb 'red' dt 3 title 'target <= %.1f', "
               "2 with lines lw 1 lc rgb 'gray' dt 2 title 'floor: 2 (lock + unlock)'\n",
            TARGET_CMDS, TARGET_CMDS);
    if (any_peer) {
        fprintf(f, "unset logscale y\nset yrange [0:1.05]\n");
        fprintf(f, "set title 'fairness: min / max acquisitions per process'\n");
        fprintf(f, "set ylabel 'least lucky / luckiest process'\n");
        fprintf(f, "plot ");
        for (int b = 0; b < nblocks; b++)
            fprintf(f, "'%s' index %d using 1:6 with linespoints lw 2 pt 7 lc %d title '%s', ",
                    dat, b, b + 1, blocks[b]->name);
        fprintf(f, "%.1f with lines lw 2 lc rgb 'red' dt 3 title 'target >= %.1f'\n",
                TARGET_FAIR, TARGET_FAIR);
    }
    fprintf(f, "unset multiplot\n");
    fclose(f);

    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("\nchart: gnuplot is not installed (bench/deps.sh installs gnuplot-nox as root); "
               "data in %s, script in %s\n", dat, gp);
        return;
    }
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
    if (system(cmd) != 0)
        fail("gnuplot %s failed", gp);
    else
        printf("\nchart: %s (data %s)\n", png, dat);
}
