/*
 * holds.c - the watchdog's cost with many holds in one client (`make bench`, issue target:
 * 10,000 holds cost one pipelined round trip per renewal period and under 5% of a core).
 *
 * Takes N mutex holds (default 10000) in one client with a 3 s lease (renewal period 1 s),
 * then for 10 s counts the renewals Redis ran (INFO commandstats) and the CPU the process
 * used (getrusage: the watchdog thread is the only one working). Prints renewals per hold
 * per period (1.00 means each hold was renewed once per period) and CPU % of one core.
 * Usage: redisync-holds [N] [SECONDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    int secs = argc > 2 ? atoi(argv[2]) : 10;
    const long lease_ms = 3000;
    if (n < 1 || secs < 1) {
        fprintf(stderr, "usage: redisync-holds [N] [SECONDS]\n");
        return 2;
    }
    ts_server_t s;
    if (ts_server_start(&s, NULL) != 0)
        return 1;
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = lease_ms;
    rs_client_t *c;
    int rc = rs_client_open(&c, &cfg), failed = 0;
    rs_mutex_t **m = calloc((size_t)n, sizeof *m);
    if (rc || !m) {
        fprintf(stderr, "holds: open: %s\n", rs_client_lasterror(NULL));
        ts_server_stop(&s);
        return 1;
    }
    double t0 = mono_s();
    for (int i = 0; i < n && !failed; i++) {
        char name[32];
        snprintf(name, sizeof name, "hold-%d", i);
        failed = rs_mutex_init(&m[i], c, name) || rs_mutex_trylock(m[i]);
    }
    if (failed) {
        fprintf(stderr, "holds: taking the holds failed: %s\n", rs_client_lasterror(c));
        ts_server_stop(&s);
        return 1;
    }
    printf("holds: %d mutex holds in one client taken in %.2f s; lease %ld ms, so the watchdog\n"
           "       renews every %ld ms\n", n, mono_s() - t0, lease_ms, lease_ms / 3);
    sleep(2); /* let the renewals fall into step */
    long long e0 = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    double c0 = cpu_s(), w0 = mono_s();
    sleep((unsigned)secs);
    long long e1 = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    double c1 = cpu_s(), w1 = mono_s();
    double periods = (w1 - w0) * 1000.0 / (double)(lease_ms / 3);
    double per_hold = (double)(e1 - e0) / n / periods;
    double core = 100.0 * (c1 - c0) / (w1 - w0);
    int lost = 0;
    for (int i = 0; i < n; i++) {
        if (rs_mutex_unlock(m[i]) != 0)
            lost++;
        rs_mutex_destroy(m[i]);
    }
    printf("holds: over %.1f s: %lld renewals = %.2f per hold per period (one pipelined round\n"
           "       per period renews them all); the client used %.1f%% of one core "
           "(target < 5%%: %s); %d hold(s) lost\n",
           w1 - w0, e1 - e0, per_hold, core, core < 5.0 ? "PASS" : "MISS", lost);
    free(m);
    rs_client_close(c);
    ts_server_stop(&s);
    return lost ? 1 : 0;
}
