/*
 * redlock.c - how long Redlock's waiters wait, against one server's, in one run (`make bench`,
 * or alone: `make bench-redlock`; issue 17).
 *
 * Starts three masters and one single server on free loopback ports. For each row, P
 * processes (2, 8, 32 by default) loop lock / 300 us of work / unlock on one name for a few
 * seconds, first on the single server, then under redlock:// over the three masters. Every
 * section's call, grant and release times (CLOCK_MONOTONIC, one clock for all processes) go
 * to shared memory; the row prints the acquisitions, the least and most served process's
 * share, the lock wait (call to grant) p50, p99 and max, and the handoff p50 (one process's
 * release to the next one's grant). The last lines divide Redlock's handoff by the single
 * server's at each P. Usage: redisync-redlock [SECONDS_PER_ROW [P ...]]
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"

#define NM 3
#define PMAX 64
#define RECMAX 400000
#define WORK_US 300

typedef struct rec {
    uint64_t call, got, rel;
} rec_t;

typedef struct shared {
    atomic_int go, stop, ready, failed;
    atomic_int n[PMAX];
    atomic_int nrec;
    char err[160];
    rec_t rec[RECMAX];
} shared_t;

typedef struct row {
    const char *mode;
    int procs, acq, lo, hi;
    double w50, w99, wmax, h50;
} row_t;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_got(const void *a, const void *b)
{
    return cmp_u64(&((const rec_t *)a)->got, &((const rec_t *)b)->got);
}

static double quantile_ms(uint64_t *v, int n, double q)
{
    if (n <= 0)
        return 0;
    int i = (int)(q * (n - 1) + 0.5);
    return (double)v[i] / 1e6;
}

static void worker(shared_t *sh, int id, const char *url, const char *prefix)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = 5000;
    rs_client_t *c = NULL;
    rs_mutex_t *m = NULL;
    if (rs_client_open(&c, &cfg) != 0 || rs_mutex_init(&m, c, "storm") != 0) {
        snprintf(sh->err, sizeof sh->err, "open: %s", rs_client_lasterror(c));
        atomic_fetch_add(&sh->failed, 1);
        _exit(1);
    }
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load(&sh->go))
        usleep(1000);
    while (!atomic_load(&sh->stop)) {
        uint64_t t0 = now_ns();
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 30;
        int rc = rs_mutex_timedlock(m, &dl);
        uint64_t t1 = now_ns();
        if (rc != 0) {
            snprintf(sh->err, sizeof sh->err, "lock: %s", rs_client_lasterror(c));
            atomic_fetch_add(&sh->failed, 1);
            break;
        }
        usleep(WORK_US);
        uint64_t t2 = now_ns();
        if (rs_mutex_unlock(m) != 0) {
            snprintf(sh->err, sizeof sh->err, "unlock: %s", rs_client_lasterror(c));
            atomic_fetch_add(&sh->failed, 1);
            break;
        }
        int i = atomic_fetch_add(&sh->nrec, 1);
        if (i < RECMAX)
            sh->rec[i] = (rec_t){t0, t1, t2};
        atomic_fetch_add(&sh->n[id], 1);
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    _exit(0);
}

static int run_row(row_t *row, shared_t *sh, const char *mode, const char *url, int procs,
                   int secs)
{
    memset(sh, 0, sizeof *sh);
    char prefix[32];
    ts_unique_prefix(prefix, sizeof prefix);
    pid_t pid[PMAX];
    for (int i = 0; i < procs; i++) {
        pid[i] = fork();
        if (pid[i] < 0)
            return -1;
        if (pid[i] == 0)
            worker(sh, i, url, prefix);
    }
    while (atomic_load(&sh->ready) + atomic_load(&sh->failed) < procs)
        usleep(2000);
    atomic_store(&sh->go, 1);
    sleep((unsigned)secs);
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < procs; i++)
        waitpid(pid[i], NULL, 0);
    if (atomic_load(&sh->failed)) {
        fprintf(stderr, "redlock bench: %s %d processes: %s\n", mode, procs, sh->err);
        return -1;
    }
    int n = atomic_load(&sh->nrec);
    n = n > RECMAX ? RECMAX : n;
    uint64_t *w = malloc(sizeof *w * (size_t)(n + 1)), *h = malloc(sizeof *h * (size_t)(n + 1));
    if (!w || !h)
        return -1;
    for (int i = 0; i < n; i++)
        w[i] = sh->rec[i].got - sh->rec[i].call;
    qsort(sh->rec, (size_t)n, sizeof sh->rec[0], cmp_got);
    int nh = 0;
    for (int i = 1; i < n; i++)
        if (sh->rec[i].got > sh->rec[i - 1].rel)
            h[nh++] = sh->rec[i].got - sh->rec[i - 1].rel;
    qsort(w, (size_t)n, sizeof *w, cmp_u64);
    qsort(h, (size_t)nh, sizeof *h, cmp_u64);
    *row = (row_t){mode, procs, n, 0, 0, quantile_ms(w, n, 0.5), quantile_ms(w, n, 0.99),
                   quantile_ms(w, n, 1.0), quantile_ms(h, nh, 0.5) * 1000};
    row->lo = row->hi = atomic_load(&sh->n[0]);
    for (int i = 1; i < procs; i++) {
        int x = atomic_load(&sh->n[i]);
        row->lo = x < row->lo ? x : row->lo;
        row->hi = x > row->hi ? x : row->hi;
    }
    free(w);
    free(h);
    printf("%-8s %5d %7d %7d %7d %9.2f %9.2f %9.2f %12.0f\n", row->mode, row->procs, row->acq,
           row->lo, row->hi, row->w50, row->w99, row->wmax, row->h50);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : 4;
    int procs[8] = {2, 8, 32}, np = 3;
    if (argc > 2) {
        np = 0;
        for (int i = 2; i < argc && np < 8; i++)
            procs[np++] = atoi(argv[i]);
    }
    for (int i = 0; i < np; i++)
        if (procs[i] < 1 || procs[i] > PMAX || secs < 1) {
            fprintf(stderr, "usage: redisync-redlock [SECONDS_PER_ROW [P ...]] (P 1..%d)\n",
                    PMAX);
            return 2;
        }
    signal(SIGPIPE, SIG_IGN);
    ts_server_t one, m[NM];
    if (ts_server_start(&one, NULL) != 0)
        return 1;
    char url[256];
    for (int i = 0; i < NM; i++)
        if (ts_server_start(&m[i], NULL) != 0)
            return 1;
    ts_redlock_url(url, sizeof url, m, NM);
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    printf("\nRedlock (3 masters) against one server: one name, lock / %d us / unlock, %d s a "
           "row (bench/redlock/redlock.c)\n", WORK_US, secs);
    printf("%-8s %5s %7s %7s %7s %9s %9s %9s %12s\n", "mode", "procs", "acq", "least",
           "most", "wait p50", "p99 (ms)", "max (ms)", "handoff p50");
    printf("%-8s %5s %7s %7s %7s %9s %9s %9s %12s\n", "", "", "", "served", "served", "(ms)",
           "", "", "(us)");
    row_t rows[2][8];
    int rc = 0;
    for (int i = 0; i < np && !rc; i++) {
        rc = run_row(&rows[0][i], sh, "single", one.url, procs[i], secs);
        if (!rc)
            rc = run_row(&rows[1][i], sh, "redlock", url, procs[i], secs);
    }
    if (!rc) {
        printf("handoff p50, redlock / single:");
        for (int i = 0; i < np; i++)
            printf("  %d procs %.2f", procs[i],
                   rows[0][i].h50 > 0 ? rows[1][i].h50 / rows[0][i].h50 : 0);
        printf("\nleast / most served under redlock:");
        for (int i = 0; i < np; i++)
            printf("  %d procs %.2f", procs[i],
                   rows[1][i].hi > 0 ? (double)rows[1][i].lo / rows[1][i].hi : 0);
        printf("\n");
    }
    munmap(sh, sizeof *sh);
    for (int i = 0; i < NM; i++)
        ts_server_stop(&m[i]);
    ts_server_stop(&one);
    return rc ? 1 : 0;
}
