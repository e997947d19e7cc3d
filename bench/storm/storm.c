/*
 * storm.c - many processes waiting on one primitive: handoff latency, Redis commands per
 * acquisition and fairness, for redisync's blocking primitives, a raw FIFO lock that shows the
 * floor (bench/storm/impls.c), and (with --peers) redis-py's Lock, node redlock and node
 * redis-semaphore, all on the same redis-server.
 *
 *   build/redisync-storm [--peers DIR] [--procs "2 8 32 128"] [--seconds 3]
 *                        [--monitor-seconds 1] [--work-us 50] [--out DIR] [--only a,b]
 *
 * `make bench` runs it for the redisync primitives, `make bench-peers` with --peers
 * bench/peers; bench/README.md says what each column means and how it is measured.
 *
 * One row = one implementation x N worker processes, each with its own client, looping
 *   t0 = now; lock; t1 = now; spin WORK_US; t2 = now; unlock; t3 = now
 * on one primitive. Workers are forked (redisync) or exec'd (peers) and driven through a
 * line protocol on their stdin/stdout, so every implementation runs the same storm:
 *
 *   worker -> driver   "ready" once connected and warmed up (one lock/unlock)
 *                      "done N FAILS" after a phase; its records are in its file then
 *                      "error TEXT" (the row fails)
 *   driver -> worker   "go START END WORK_US" (CLOCK_MONOTONIC ns): wait until START, loop
 *                      while now < END, write one line "t0 t1 t2 t3" per acquisition to the
 *                      file (rewritten each phase), answer "done"
 *                      "quit"
 *
 * Each row has two phases with the same workers: a timed one (no MONITOR: throughput,
 * handoff latency, fairness) and a counted one under MONITOR (commands per acquisition),
 * because MONITOR makes Redis format every command, the scripts' own included, and slows
 * the storm. The unit of latency is the raw round trip (EVALSHA of "return 1" on a plain
 * connection): 2000 are measured by the driver just before each row, with the workers
 * connected and idle, and the unit is the median of all of them.
 *
 * Exit status: 0 whatever the figures (it is a benchmark), 1 when something failed.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "storm_driver.h"

/* ----- main ---------------------------------------------------------------------------- */
static int parse_procs(opts_t *o, const char *s)
{
    o->nprocs = 0;
    char *end;
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_PROCS || o->nprocs == 16)
            return -1;
        o->procs[o->nprocs++] = (int)v;
        s = end;
    }
    return o->nprocs ? 0 : -1;
}

static int selected(const opts_t *o, const storm_impl_t *im)
{
    if (im->group == STORM_PEER && !o->peers_dir)
        return 0;
    if (!o->only)
        return 1;
    size_t kl = strlen(im->key);
    for (const char *p = o->only; *p;) {
        size_t l = strcspn(p, ", ");
        if (l == kl && strncmp(p, im->key, l) == 0)
            return 1;
        p += l;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: redisync-storm [--peers DIR] [--procs \"2 8 32 128\"] [--seconds 3]\n"
            "                      [--monitor-seconds 1] [--work-us 50] [--out build/bench]\n"
            "                      [--only mutex,rmutex,rwlock,rwlockrd,sem,raw,redispy,redlock,redissem]\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    opts_t o = {0};
    parse_procs(&o, "2 8 32 128");
    o.seconds = 3;
    o.monitor_seconds = 1;
    o.work_us = 50;
    o.out_dir = "build/bench";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (strcmp(a, "--peers") == 0)
            o.peers_dir = v;
        else if (strcmp(a, "--procs") == 0) {
            if (parse_procs(&o, v)) {
                usage();
                return 2;
            }
        } else if (strcmp(a, "--seconds") == 0)
            o.seconds = atof(v);
        else if (strcmp(a, "--monitor-seconds") == 0)
            o.monitor_seconds = atof(v);
        else if (strcmp(a, "--work-us") == 0)
            o.work_us = (unsigned)atoi(v);
        else if (strcmp(a, "--out") == 0)
            o.out_dir = v;
        else if (strcmp(a, "--only") == 0)
            o.only = v;
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (o.seconds <= 0 || o.monitor_seconds <= 0 || o.seconds > 600 || o.monitor_seconds > 600) {
        usage();
        return 2;
    }
    if (mkdirs(o.out_dir)) {
        fprintf(stderr, "storm: cannot create %s: %s\n", o.out_dir, strerror(errno));
        return 1;
    }

    /* the plan: all implementations at one N run back to back, so that a drift of the
     * machine's load hits them alike; the table is grouped afterwards */
    row_t *rows = calloc((size_t)(storm_nimpls * o.nprocs), sizeof *rows);
    int nrows = 0;
    if (!rows)
        return 1;
    for (int p = 0; p < o.nprocs; p++)
        for (int k = 0; k < storm_nimpls; k++)
            if (selected(&o, &storm_impls[k])) {
                rows[nrows].im = &storm_impls[k];
                rows[nrows].procs = o.procs[p];
                nrows++;
            }
    if (!nrows) {
        fprintf(stderr, "storm: nothing selected\n");
        return 2;
    }

    ts_server_t srv;
    if (ts_server_start(&srv, "--maxclients", "10000", NULL) != 0) {
        fprintf(stderr, "storm: cannot start redis-server\n");
        return 1;
    }
    uint64_t t_begin = now_ns();
    redisContext *rtt = raw_connect(&srv), *mark = raw_connect(&srv);
    char version[64] = "?";
    if (!rtt || !mark)
        goto out;
    redisReply *r = redisCommand(rtt, "SCRIPT LOAD %s", "return 1");
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        fail("SCRIPT LOAD: %s", r ? "odd reply" : rtt->errstr);
        if (r)
            freeReplyObject(r);
        goto out;
    }
    memcpy(g_one_sha, r->str, 41);
    freeReplyObject(r);
    r = redisCommand(rtt, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "redis_version:");
        if (p)
            sscanf(p + 14, "%63[^\r\n]", version);
    }
    if (r)
        freeReplyObject(r);

    double load0 = loadavg();
    printf("redisync %s contention storm%s: redis-server %s at %s, %ld CPUs online, load "
           "average %.2f\n", rs_version(), o.peers_dir ? " against the peers" : "", version,
           srv.url, sysconf(_SC_NPROCESSORS_ONLN), load0);
    printf("each row: N worker processes, one client each, loop lock / %u us busy work / unlock "
           "on one primitive;\n%g s timed, then %g s counted under MONITOR (bench/README.md "
           "explains every column)\n\n", o.work_us, o.seconds, o.monitor_seconds);

    for (int i = 0; i < nrows; i++)
        run_row(&rows[i], &o, &srv, rtt, mark);
    for (int i = 0; i < nrows; i++)
        if (!rows[i].ok)
            g_errors++;

    qsort(rows, (size_t)nrows, sizeof *rows, o.peers_dir ? cmp_row_procs : cmp_row_impl);
    if (!g_rtt_n) {
        fprintf(stderr, "storm: no row ran\n");
        goto out;
    }
    double lo = 1e18, hi = 0;
    {
        for (int i = 0; i < nrows; i++)
            if (rows[i].rtt_us > 0) {
                lo = rows[i].rtt_us < lo ? rows[i].rtt_us : lo;
                hi = rows[i].rtt_us > hi ? rows[i].rtt_us : hi;
            }
        g_unit_us = (double)quantile(g_rtt_all, g_rtt_n, 0.5) / 1e3;
        printf("unit of the handoff columns: the raw round trip (EVALSHA \"return 1\" on a plain "
               "connection) = %.1f us,\nthe median of %zu calls made in this run, %d before "
               "each row (the rows' medians ranged %.1f..%.1f us)\n\n",
               g_unit_us, g_rtt_n, RTT_OPS, lo, hi);
    }
    print_header();
    for (int i = 0; i < nrows; i++) {
        if (i && (o.peers_dir ? rows[i].procs != rows[i - 1].procs : rows[i].im != rows[i - 1].im))
            printf("\n");
        print_row(&rows[i]);
    }
    print_details(rows, nrows);
    if (!o.peers_dir)
        print_work(rows, nrows);
    printf("\nsettings:\n");
    for (int k = 0; k < storm_nimpls; k++)
        if (selected(&o, &storm_impls[k]))
            printf("  %-22s %s\n", storm_impls[k].name, storm_impls[k].settings);
    print_targets(rows, nrows, &o, lo);
    if (o.peers_dir)
        write_chart(rows, nrows, &o, "peers", "redisync and its peers on one redis-server");
    else
        write_chart(rows, nrows, &o, "contention", "redisync: many processes on one primitive");
    printf("\nstorm took %.0f s; the load average was %.2f at the start (figures taken while other "
           "work runs\nare not comparable; the storm itself raises it)\n",
           (double)(now_ns() - t_begin) / 1e9, load0);

out:
    if (rtt)
        redisFree(rtt);
    if (mark)
        redisFree(mark);
    ts_server_stop(&srv);
    free(rows);
    return g_errors ? 1 : 0;
}
