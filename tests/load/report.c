/*
 * report.c - the load test's table (load.h): one line per check with its figures and a
 * verdict, then PASS or FAIL. Returns the number of failed checks; main.c turns that into
 * the exit status. docs/reliability.md quotes this table, so keep its lines stable.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

const char *const ld_kind_names[K_NKINDS] = {"mutex", "rwlock-read", "rwlock-write", "sem",
                                             "rmutex"};

const int ld_err_codes[LD_NERR - 1] = {ETIMEDOUT, EDEADLK, EPERM,     EBUSY,    EAGAIN,
                                       EINVAL,    ECANCELED, ENOMEM,  RS_ELOST, RS_ECONN,
                                       RS_ESERVER, RS_EREPL, RS_EFORK, RS_EQUEUE};

int ld_err_slot(int code)
{
    for (int i = 0; i < LD_NERR - 1; i++)
        if (ld_err_codes[i] == code)
            return i;
    return LD_NERR - 1;
}

const char *ld_err_name(int slot)
{
    static const char *const names[LD_NERR] = {"ETIMEDOUT", "EDEADLK", "EPERM", "EBUSY",
                                               "EAGAIN", "EINVAL", "ECANCELED", "ENOMEM",
                                               "RS_ELOST", "RS_ECONN", "RS_ESERVER", "RS_EREPL",
                                               "RS_EFORK", "RS_EQUEUE", "other"};
    return slot >= 0 && slot < LD_NERR ? names[slot] : "?";
}

static int g_failed;

static void row(const char *check, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void row(const char *check, int ok, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("%-26s %-4s %s\n", check, ok < 0 ? "" : ok ? "ok" : "FAIL", buf);
    if (ok == 0)
        g_failed++;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

/* The upper bound of the bucket holding the q-th fraction of the waits, in microseconds. */
static long long percentile_us(const ld_shared_t *sh, double q)
{
    long long total = 0, seen = 0;
    for (int b = 0; b < LD_HIST; b++)
        total += atomic_load(&sh->hist[b]);
    for (int b = 0; b < LD_HIST; b++) {
        seen += atomic_load(&sh->hist[b]);
        if (total && seen >= q * (double)total) {
            long long max = atomic_load(&sh->wait_max_us);
            return (1LL << b) < max ? 1LL << b : max; /* the bucket's bound, never past the max */
        }
    }
    return 0;
}

static const char *kib(long long bytes, char *buf, size_t len)
{
    if (bytes >= 10 * 1024 * 1024 || bytes <= -10 * 1024 * 1024)
        snprintf(buf, len, "%.1f MiB", (double)bytes / 1048576.0);
    else
        snprintf(buf, len, "%lld KiB", bytes / 1024);
    return buf;
}

int ld_report(const ld_config_t *cfg, const ld_shared_t *sh, const ld_redis_t *rd,
              int crashed, double run_s)
{
    g_failed = 0;
    printf("\nredisync load test: %d processes x %d threads on %d names, %d s, lease %ld ms, "
           "semaphore size %u, wait deadline %ld ms, seed %u\n\n",
           cfg->procs, cfg->threads, cfg->names, cfg->seconds, cfg->lease_ms, cfg->sem_size,
           cfg->deadline_ms, cfg->seed);

    long per[LD_PROCS_MAX], total = 0, kinds[K_NKINDS] = {0}, errs[LD_NERR] = {0};
    long onlost = 0, warnings = 0;
    for (int i = 0; i < cfg->procs; i++) {
        per[i] = 0;
        for (int k = 0; k < K_NKINDS; k++) {
            long v = atomic_load(&sh->proc[i].acq[k]);
            per[i] += v;
            kinds[k] += v;
        }
        total += per[i];
        for (int e = 0; e < LD_NERR; e++)
            errs[e] += atomic_load(&sh->proc[i].err[e]);
        onlost += atomic_load(&sh->proc[i].onlost);
        warnings += atomic_load(&sh->proc[i].warnings);
    }
    qsort(per, (size_t)cfg->procs, sizeof per[0], cmp_long);
    row("acquisitions", -1, "%ld in %.1f s (%.0f/s): mutex %ld, rwlock read %ld, write %ld, "
        "sem %ld, rmutex %ld", total, run_s, run_s > 0 ? (double)total / run_s : 0.0,
        kinds[K_MUTEX], kinds[K_RDLOCK], kinds[K_WRLOCK], kinds[K_SEM], kinds[K_RMUTEX]);
    row("per process", per[0] > 0, "min %ld / median %ld / max %ld (every process served: "
        "min > 0)", per[0], per[cfg->procs / 2], per[cfg->procs - 1]);
    row("acquisition wait", -1, "p50 <= %.3f ms, p99 <= %.3f ms, p99.9 <= %.3f ms, max %.1f ms",
        (double)percentile_us(sh, 0.5) / 1000.0, (double)percentile_us(sh, 0.99) / 1000.0,
        (double)percentile_us(sh, 0.999) / 1000.0, (double)atomic_load(&sh->wait_max_us) / 1000.0);

    long nerr = 0;
    char ebuf[256] = "";
    size_t off = 0;
    for (int e = 0; e < LD_NERR; e++) {
        nerr += errs[e];
        if (errs[e] && off < sizeof ebuf)
            off += (size_t)snprintf(ebuf + off, sizeof ebuf - off, " %s %ld", ld_err_name(e), errs[e]);
    }
    row("errors", nerr == 0, "%ld%s%s", nerr, nerr ? ":" : "", ebuf);
    row("on_lost, warnings", onlost == 0, "%ld lost holds, %ld library warnings", onlost, warnings);

    long viol = 0;
    int maxin[K_NKINDS] = {0};
    long lostinc = 0;
    for (int k = 0; k < K_NKINDS; k++) {
        viol += atomic_load(&sh->violations[k]);
        for (int n = 0; n < cfg->names; n++) {
            int m = atomic_load(&sh->name[n].max[k]);
            maxin[k] = m > maxin[k] ? m : maxin[k];
            if (k != K_RDLOCK && k != K_SEM)
                lostinc += atomic_load(&sh->name[n].acq[k]) - atomic_load(&sh->name[n].count[k]);
        }
    }
    row("mutual exclusion", viol == 0, "%ld violations; most inside one name at once: mutex %d, "
        "rmutex %d, rwlock writers %d (readers %d), sem %d of %u", viol, maxin[K_MUTEX],
        maxin[K_RMUTEX], maxin[K_WRLOCK], maxin[K_RDLOCK], maxin[K_SEM], cfg->sem_size);
    row("lost increments", lostinc == 0, "%ld (mutex, rmutex and rwlock-write sections)", lostinc);

    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    long long delta = rd->mem_after - rd->mem_before;
    row("redis used_memory", rd->mem_after > 0 && delta <= cfg->mem_tolerance,
        "before %s (cold %s), peak %s, after %s (%+lld bytes, limit +%s; Lua script cache %s)",
        kib(rd->mem_before, b1, sizeof b1), kib(rd->mem_cold, b6, sizeof b6), kib(rd->mem_peak, b2, sizeof b2),
        kib(rd->mem_after, b3, sizeof b3), delta, kib(cfg->mem_tolerance, b4, sizeof b4),
        kib(rd->mem_scripts_after, b5, sizeof b5));
    row("keys after", rd->keys_other == 0 && rd->keys_no_ttl == 0,
        "%ld: %ld fencing counters, %ld semaphore sizes, %ld other%s%s, %ld without TTL "
        "(settled %.1f s after the last client closed)", rd->keys_after, rd->keys_fence,
        rd->keys_semsize, rd->keys_other, rd->keys_other ? " e.g. " : "", rd->other_key,
        rd->keys_no_ttl, rd->settle_s);
    row("connections after", rd->conns_after == 0, "%lld library connections still open",
        rd->conns_after);
    double acq = total > 0 ? (double)total : 1.0;
    row("commands / acquisition", -1, "%.2f from clients (EVALSHA %.2f), %.2f inside scripts; "
        "busiest: %s", (double)rd->calls_client / acq, (double)rd->calls_evalsha / acq,
        (double)(rd->calls_total - rd->calls_client) / acq, rd->top);
    row("processes", crashed == 0, "%d of %d exited with a failure", crashed, cfg->procs);
    printf("\nresult: %s\n", g_failed ? "FAIL" : "PASS");
    return g_failed;
}
