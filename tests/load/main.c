/*
 * main.c - the driver of the load test (load.h; make load, make load-ci).
 *
 * Phases: start a redis-server (own port, 127.0.0.1); warm it up (warm.c: each script
 * run once) and read used_memory; fork the processes, which open their clients and handles
 * and wait; once all are ready, reset the command statistics and start them together; sample used_memory every 200 ms while they
 * run; reap them (a process that has not exited 60 s after the end is killed and counted as
 * failed); read the command statistics; then wait, up to two leases plus 15 s, for the
 * keyspace and the memory to settle: every library connection closed, only persistent keys
 * left, used_memory back within the tolerance. The wait ends as soon as that holds, so
 * "settled after" is a figure too. Tombstones of released holds live max(lease, 10 s), so
 * the wait is at least about 10 s.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "load.h"

static void usage(void)
{
    fprintf(stderr, "usage: redisync-load [--procs P (64)] [--threads T (4)] [--names N (16)]\n"
                    "         [--seconds D (60)] [--lease-ms L (5000)] [--sem-size S (2)]\n"
                    "         [--deadline-ms W (30000)] [--mem-tolerance-kib K (256)]\n"
                    "         [--seed X (1)] [--verbose] [--sabotage]\n");
    exit(2);
}

static void parse(int argc, char **argv, ld_config_t *cfg)
{
    *cfg = (ld_config_t){.procs = 64, .threads = 4, .names = 16, .seconds = 60,
                         .lease_ms = 5000, .sem_size = 2, .deadline_ms = 30000,
                         .mem_tolerance = 256 * 1024, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--verbose") == 0 || strcmp(a, "--sabotage") == 0) {
            *(a[2] == 'v' ? &cfg->verbose : &cfg->sabotage) = 1;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        long v = strtol(argv[++i], NULL, 10);
        if (strcmp(a, "--procs") == 0)
            cfg->procs = (int)v;
        else if (strcmp(a, "--threads") == 0)
            cfg->threads = (int)v;
        else if (strcmp(a, "--names") == 0)
            cfg->names = (int)v;
        else if (strcmp(a, "--seconds") == 0)
            cfg->seconds = (int)v;
        else if (strcmp(a, "--lease-ms") == 0)
            cfg->lease_ms = v;
        else if (strcmp(a, "--sem-size") == 0)
            cfg->sem_size = (unsigned)v;
        else if (strcmp(a, "--deadline-ms") == 0)
            cfg->deadline_ms = v;
        else if (strcmp(a, "--mem-tolerance-kib") == 0)
            cfg->mem_tolerance = v * 1024;
        else if (strcmp(a, "--seed") == 0)
            cfg->seed = (unsigned)v;
        else
            usage();
    }
    if (cfg->procs < 1 || cfg->procs > LD_PROCS_MAX || cfg->threads < 1 ||
        cfg->threads > LD_THREADS_MAX || cfg->names < 1 || cfg->names > LD_NAMES_MAX ||
        cfg->seconds < 1 || cfg->lease_ms < 100 || cfg->sem_size < 1 || cfg->deadline_ms < 1)
        usage();
}

/* Reaps what has exited; returns how many are still running. */
static int reap(pid_t *pids, int n, int *failed)
{
    int running = 0;
    for (int i = 0; i < n; i++) {
        if (!pids[i])
            continue;
        int st;
        pid_t r = waitpid(pids[i], &st, WNOHANG);
        if (r == pids[i]) {
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, "load: process %d (pid %d) ended with %s %d\n", i, (int)pids[i],
                        WIFEXITED(st) ? "exit" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                (*failed)++;
            }
            pids[i] = 0;
        } else {
            running++;
        }
    }
    return running;
}

/* Settled: no library connection (the server counts only the one asking), only the keys
 * meant to stay, memory within the tolerance. */
/* --verbose: the parts of used_memory, to see where a difference comes from. */
static void dump_memory(const ts_server_t *srv, const char *when)
{
    static const char *const f[] = {"used_memory", "used_memory_overhead", "used_memory_dataset",
                                    "used_memory_scripts_eval", "mem_clients_normal",
                                    "mem_clients_slaves", "mem_aof_buffer", "mem_replication_backlog",
                                    "used_memory_startup", "used_memory_vm_eval", NULL};
    printf("load: memory %s:", when);
    for (int i = 0; f[i]; i++)
        printf(" %s=%lld", f[i], ts_info_ll(srv, "memory", f[i], NULL));
    printf(" keys=%lld\n", ts_info_ll(srv, "keyspace", "db0", "keys"));
}

static int settled(const ts_server_t *srv, const ld_config_t *cfg, ld_redis_t *rd)
{
    rd->conns_after = ts_info_ll(srv, "clients", "connected_clients", NULL) - 1;
    rd->mem_after = ld_used_memory(srv);
    if (ld_keys(srv, rd) != 0)
        return 0;
    return rd->conns_after == 0 && rd->keys_other == 0 &&
           rd->mem_after - rd->mem_before <= cfg->mem_tolerance;
}

int main(int argc, char **argv)
{
    ld_config_t cfg;
    parse(argc, argv, &cfg);
    setvbuf(stdout, NULL, _IOLBF, 0);

    ts_server_t srv;
    if (ts_server_start(&srv, NULL) != 0) {
        fprintf(stderr, "load: cannot start redis-server\n");
        return 2;
    }
    snprintf(cfg.url, sizeof cfg.url, "%s", srv.url);
    ts_unique_prefix(cfg.prefix, sizeof cfg.prefix);
    ld_shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                           -1, 0);
    if (sh == MAP_FAILED) {
        perror("load: mmap");
        ts_server_stop(&srv);
        return 2;
    }
    ld_redis_t rd;
    memset(&rd, 0, sizeof rd);
    rd.mem_cold = ld_used_memory(&srv);
    if (ld_warm_up(&cfg, &srv) != 0) {
        ts_server_stop(&srv);
        return 2;
    }
    rd.mem_before = rd.mem_peak = ld_used_memory(&srv);
    if (cfg.verbose)
        dump_memory(&srv, "before");
    printf("load: redis-server pid %d on %s, used_memory %lld; starting %d processes x %d "
           "threads\n", (int)srv.pid, srv.url, rd.mem_before, cfg.procs, cfg.threads);

    pid_t pids[LD_PROCS_MAX] = {0};
    int failed = 0;
    fflush(NULL);
    for (int i = 0; i < cfg.procs; i++) {
        pid_t p = fork();
        if (p == 0)
            ld_worker(&cfg, sh, i);
        if (p < 0) {
            perror("load: fork");
            atomic_store(&sh->go, -1);
            break;
        }
        pids[i] = p;
    }
    /* every process ready (its client open and handles made), or one failed to set up */
    for (long long until = tu_mono_ms() + 60000; atomic_load(&sh->go) == 0;) {
        int ready = 0;
        for (int i = 0; i < cfg.procs; i++)
            ready += atomic_load(&sh->proc[i].ready);
        if (ready == cfg.procs)
            break;
        if (tu_mono_ms() > until) {
            fprintf(stderr, "load: only %d of %d processes ready after 60 s\n", ready, cfg.procs);
            atomic_store(&sh->go, -1);
        }
        tu_sleep_ms(20);
    }
    int aborted = atomic_load(&sh->go) < 0;
    char ok[16];
    if (!aborted && !ts_cmd_str(&srv, ok, sizeof ok, "CONFIG RESETSTAT"))
        fprintf(stderr, "load: CONFIG RESETSTAT failed; command counts include the setup\n");
    long long t0 = tu_mono_ms();
    atomic_store(&sh->end_ms, t0 + cfg.seconds * 1000LL);
    if (!aborted)
        atomic_store(&sh->go, 1);

    /* the run: sample memory, report progress every 10 s */
    long long next_note = t0 + 10000;
    while (tu_mono_ms() < atomic_load(&sh->end_ms) && !aborted) {
        tu_sleep_ms(200);
        long long m = ld_used_memory(&srv);
        if (m > rd.mem_peak)
            rd.mem_peak = m;
        if (tu_mono_ms() >= next_note) {
            long acq = 0;
            for (int i = 0; i < cfg.procs; i++)
                for (int k = 0; k < K_NKINDS; k++)
                    acq += atomic_load(&sh->proc[i].acq[k]);
            printf("load: %lld s: %ld acquisitions, used_memory %lld\n", (tu_mono_ms() - t0) / 1000,
                   acq, m);
            next_note += 10000;
        }
    }
    double run_s = (double)(tu_mono_ms() - t0) / 1000.0;
    for (long long until = tu_mono_ms() + 60000; reap(pids, cfg.procs, &failed) > 0;) {
        if (tu_mono_ms() > until) {
            for (int i = 0; i < cfg.procs; i++)
                if (pids[i]) {
                    fprintf(stderr, "load: process %d (pid %d) still running; killed\n", i,
                            (int)pids[i]);
                    kill(pids[i], SIGKILL);
                }
            until = tu_mono_ms() + 60000;
        }
        tu_sleep_ms(20);
    }
    long long closed = tu_mono_ms();
    if (ld_commandstats(&srv, &rd) != 0)
        fprintf(stderr, "load: cannot read INFO commandstats\n");

    long long bound = closed + 2 * cfg.lease_ms + 15000;
    while (!settled(&srv, &cfg, &rd) && tu_mono_ms() < bound)
        tu_sleep_ms(250);
    rd.settle_s = (double)(tu_mono_ms() - closed) / 1000.0;
    if (cfg.verbose)
        dump_memory(&srv, "after");
    rd.mem_scripts_after = ts_info_ll(&srv, "memory", "used_memory_scripts_eval", NULL);
    ts_server_stop(&srv);

    int nfail = ld_report(&cfg, sh, &rd, failed, run_s);
    munmap(sh, sizeof *sh);
    return aborted ? 2 : nfail ? 1 : 0;
}
