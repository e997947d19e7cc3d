/*
 * cluster.c - what one contended acquisition costs a Redis Cluster (`make bench-cluster`;
 * issue 15).
 *
 * Starts three clusters on free loopback ports, one after the other: 3 masters, 3 masters +
 * 3 replicas, then 6 masters (tests/support/cluster.h). On each, two storms of SECONDS each:
 *   1 name    P processes (one thread each) loop lock / WORK_US of work / unlock on one mutex
 *   16 names  P processes x 4 threads; thread t of process p locks name (4p + t) mod 16, so
 *             every name has P*4/16 contenders from different processes
 * With more contenders than names and a section longer than a round trip, nearly every
 * acquisition is a handoff (the release script grants the head waiter and wakes it).
 *
 * Around each storm (workers warmed up and idle before, stopped and idle after) it reads every
 * node and prints, per acquisition:
 *   bus pub     CLUSTER INFO cluster_stats_messages_publish_sent, summed over all nodes
 *               (classic PUBLISH copied over the cluster bus; CONFIG RESETSTAT does not reset
 *               it, hence deltas)
 *   bus spub    the same for cluster_stats_messages_publishshard_sent (SPUBLISH to the shard's
 *               replicas)
 *   cmds        client commands, on the masters: the INFO commandstats calls of the
 *               commands no script sends (EVALSHA, PING, [S]SUBSCRIBE, CLUSTER ..., WAIT...;
 *               commandstats and total_commands_processed count a script's own calls too),
 *               less the INFO / CLUSTER INFO this program sends
 *   evalsha, publish, spublish   INFO commandstats calls on the masters (publish and spublish
 *               are the scripts' own calls)
 *   cpu us      INFO cpu used_cpu_sys + used_cpu_user, summed over all nodes, replicas too,
 *               less what the nodes spent idle (measured for SECONDS just before the storm,
 *               with the workers connected, scaled to the storm's length)
 *   idle us     that idle share, per acquisition (cluster cron and bus pings: it shrinks as
 *               throughput grows)
 *
 * Before and after: the one-name storm runs twice on each deployment, first with the workers'
 * clients forced to classic wake-ups (REDISYNC_CLUSTER_PUBSUB=classic: PUBLISH, what every
 * release did before sharded wake-ups), then sharded (SPUBLISH); the 16-name storm runs
 * sharded. The chart OUT/cluster.png (data and gnuplot script beside it; gnuplot-nox, from
 * bench/deps.sh, draws it if installed) plots the one-name storm's bus messages and server
 * CPU per acquisition against the number of nodes, classic against sharded.
 *
 * Usage: redisync-bench-cluster [SECONDS [PROCS [OUT]]] (default 3 8 build/bench). Exit
 * status 1 if a storm failed (a lock or unlock error) or the chart could not be written,
 * else 0.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster.h"
#include "redis_server.h"
#include "redisync.h"

#define NMAX 6
#define PMAX 32
#define TPP_MANY 4 /* threads per process in the 16-name storm */
#define NAMES_MANY 16
#define WORK_US 300

typedef struct shared {
    atomic_int ready, go, stop, done, failed;
    atomic_long acq;
    char err[200];
} shared_t;

typedef struct stats {
    double pub, spub, cmds, evalsha, publish, spublish, cpu_us;
} stats_t;

typedef struct wctx {
    shared_t *sh;
    rs_client_t *c;
    rs_mutex_t *m;
} wctx_t;

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void failf(shared_t *sh, const char *what, rs_client_t *c)
{
    snprintf(sh->err, sizeof sh->err, "%s: %s", what, rs_client_lasterror(c));
    atomic_fetch_add(&sh->failed, 1);
}

static void *thread_main(void *arg)
{
    wctx_t *w = arg;
    shared_t *sh = w->sh;
    /* warm up: one section, so that the subscriber stands before the counters are read */
    if (rs_mutex_lock(w->m) != 0 || rs_mutex_unlock(w->m) != 0) {
        failf(sh, "warm-up", w->c);
        return NULL;
    }
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load(&sh->go))
        usleep(1000);
    while (!atomic_load(&sh->stop)) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 30;
        if (rs_mutex_timedlock(w->m, &dl) != 0) {
            failf(sh, "lock", w->c);
            break;
        }
        usleep(WORK_US);
        if (rs_mutex_unlock(w->m) != 0) {
            failf(sh, "unlock", w->c);
            break;
        }
        atomic_fetch_add(&sh->acq, 1);
    }
    atomic_fetch_add(&sh->done, 1);
    return NULL;
}

static void worker(shared_t *sh, int id, int threads, int names, const char *url,
                   const char *prefix, int classic)
{
    if (classic)
        setenv("REDISYNC_CLUSTER_PUBSUB", "classic", 1); /* read by rs_client_open */
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = 5000;
    cfg.timeout_ms = 5000;
    rs_client_t *c = NULL;
    if (rs_client_open(&c, &cfg) != 0) {
        failf(sh, "open", NULL);
        _exit(1);
    }
    wctx_t w[TPP_MANY];
    pthread_t t[TPP_MANY];
    for (int i = 0; i < threads; i++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", (id * threads + i) % names);
        w[i] = (wctx_t){sh, c, NULL};
        if (rs_mutex_init(&w[i].m, c, name) != 0) {
            failf(sh, "init", c);
            _exit(1);
        }
        pthread_create(&t[i], NULL, thread_main, &w[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    /* stay connected (and idle) until the counters after the storm are read */
    while (atomic_load(&sh->stop) < 2)
        usleep(2000);
    for (int i = 0; i < threads; i++)
        rs_mutex_destroy(w[i].m);
    rs_client_close(c);
    _exit(0);
}

/* "field:VALUE" of an INFO-like text; 0 if absent. */
static double field(const char *text, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "\n%s:", name);
    const char *p = strstr(text, key);
    return p ? atof(p + strlen(key)) : 0;
}

/* "cmdstat_NAME:calls=N,..." */
static double calls(const char *text, const char *cmd)
{
    char key[96];
    snprintf(key, sizeof key, "\ncmdstat_%s:calls=", cmd);
    const char *p = strstr(text, key);
    return p ? atof(p + strlen(key)) : 0;
}

/* Client commands among the calls of INFO commandstats: those that no script sends (a
 * script's own calls are counted there too, and in total_commands_processed), less the INFO
 * and CLUSTER INFO of this program. */
static double client_calls(const char *text)
{
    static const char *const mine[] = {"evalsha", "eval", "evalsha_ro", "eval_ro", "ping",
                                       "subscribe", "unsubscribe", "ssubscribe",
                                       "sunsubscribe", "asking", "wait", "readonly", "hello",
                                       "auth", "select", "script|", "client|", "command|",
                                       "cluster|"};
    double n = 0;
    for (const char *p = strstr(text, "\ncmdstat_"); p; p = strstr(p + 1, "\ncmdstat_")) {
        const char *name = p + 9, *colon = strchr(name, ':');
        if (!colon)
            break;
        size_t len = (size_t)(colon - name);
        if (len == 12 && memcmp(name, "cluster|info", 12) == 0)
            continue;
        for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) {
            size_t ml = strlen(mine[i]);
            int whole = mine[i][ml - 1] != '|';
            if ((whole && len == ml && memcmp(name, mine[i], ml) == 0) ||
                (!whole && len > ml && memcmp(name, mine[i], ml) == 0)) {
                n += atof(colon + 7); /* ":calls=" */
                break;
            }
        }
    }
    return n;
}

static char *command_text(redisContext *c, const char *cmd)
{
    redisReply *r = redisCommand(c, cmd);
    char *s = NULL;
    if (r && r->type == REDIS_REPLY_STRING) {
        s = malloc(r->len + 2);
        s[0] = '\n';
        memcpy(s + 1, r->str, r->len + 1);
    }
    if (r)
        freeReplyObject(r);
    return s ? s : strdup("\n");
}

/* Reads every node; the INFO and CLUSTER INFO sent here are subtracted from cmds. */
static void snapshot(const ts_server_t *nodes, int n, stats_t *st)
{
    memset(st, 0, sizeof *st);
    for (int i = 0; i < n; i++) {
        redisContext *c = ts_connect(&nodes[i]);
        if (!c)
            continue;
        char *ci = command_text(c, "CLUSTER INFO");
        char *info = command_text(c, "INFO everything");
        st->pub += field(ci, "cluster_stats_messages_publish_sent");
        st->spub += field(ci, "cluster_stats_messages_publishshard_sent");
        st->cpu_us += (field(info, "used_cpu_sys") + field(info, "used_cpu_user")) * 1e6;
        if (strstr(info, "\nrole:master")) {
            st->cmds += client_calls(info);
            st->evalsha += calls(info, "evalsha");
            st->publish += calls(info, "publish");
            st->spublish += calls(info, "spublish");
        }
        free(ci);
        free(info);
        redisFree(c);
    }
}

/* One point of the chart: a one-name storm's figures per acquisition. */
typedef struct point {
    int nodes, replicas, classic;
    double bus, cpu;
} point_t;

static point_t g_points[8];
static int g_npoints;

static int storm(const ts_server_t *nodes, int n, int replicas, const char *label, int procs,
                 int threads, int names, int classic, int secs, shared_t *sh)
{
    memset(sh, 0, sizeof *sh);
    char prefix[32], url[64];
    ts_unique_prefix(prefix, sizeof prefix);
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", nodes[0].port);
    pid_t pid[PMAX];
    for (int i = 0; i < procs; i++) {
        pid[i] = fork();
        if (pid[i] == 0)
            worker(sh, i, threads, names, url, prefix, classic);
    }
    int want = procs * threads;
    while (atomic_load(&sh->ready) < want && atomic_load(&sh->failed) == 0)
        usleep(2000);
    /* the nodes' CPU while idle (cluster cron, bus pings), over as long as the storm, is
     * taken off the storm's: it does not come from the acquisitions */
    stats_t i0, a, b;
    snapshot(nodes, n, &i0);
    double t_i0 = mono_s();
    sleep((unsigned)secs);
    snapshot(nodes, n, &a);
    double t_a = mono_s();
    atomic_store(&sh->go, 1);
    sleep((unsigned)secs);
    atomic_store(&sh->stop, 1);
    while (atomic_load(&sh->done) < want && atomic_load(&sh->failed) == 0)
        usleep(2000);
    snapshot(nodes, n, &b);
    double idle_cpu = (a.cpu_us - i0.cpu_us) * (mono_s() - t_a) / (t_a - t_i0);
    atomic_store(&sh->stop, 2);
    for (int i = 0; i < procs; i++)
        waitpid(pid[i], NULL, 0);
    double acq = (double)atomic_load(&sh->acq);
    if (atomic_load(&sh->failed) || acq < 1) {
        fprintf(stderr, "bench-cluster: %s: failed: %s\n", label, sh->err);
        return -1;
    }
    /* the snapshots' own INFO / CLUSTER INFO on the masters are already left out */
    printf("%-40s %7.0f %7.0f %8.3f %8.3f %7.2f %8.3f %8.3f %8.3f %8.1f %8.1f\n", label, acq,
           acq / secs, (b.pub - a.pub) / acq, (b.spub - a.spub) / acq, (b.cmds - a.cmds) / acq,
           (b.evalsha - a.evalsha) / acq, (b.publish - a.publish) / acq,
           (b.spublish - a.spublish) / acq, (b.cpu_us - a.cpu_us - idle_cpu) / acq,
           idle_cpu / acq);
    fflush(stdout);
    if (names == 1 && g_npoints < (int)(sizeof g_points / sizeof g_points[0]))
        g_points[g_npoints++] = (point_t){n, replicas, classic,
                                          (b.pub - a.pub + b.spub - a.spub) / acq,
                                          (b.cpu_us - a.cpu_us - idle_cpu) / acq};
    return 0;
}

static int deployment(const char *what, int n, int replicas, int secs, int procs, shared_t *sh)
{
    ts_server_t nodes[NMAX];
    if (ts_cluster_start_rep(nodes, n, replicas, NULL) != 0) {
        fprintf(stderr, "bench-cluster: cannot start %s\n", what);
        return -1;
    }
    char label[64];
    int rc = 0;
    snprintf(label, sizeof label, "%s, 1 name, classic", what);
    rc |= storm(nodes, n, replicas, label, procs, 1, 1, 1, secs, sh);
    snprintf(label, sizeof label, "%s, 1 name", what);
    rc |= storm(nodes, n, replicas, label, procs, 1, 1, 0, secs, sh);
    snprintf(label, sizeof label, "%s, %d names", what, NAMES_MANY);
    rc |= storm(nodes, n, replicas, label, procs, TPP_MANY, NAMES_MANY, 0, secs, sh);
    ts_cluster_stop(nodes, n);
    return rc;
}

/* A block of the chart's data: the points of one mode and deployment kind. */
static void data_block(FILE *f, int classic, int replicas)
{
    fprintf(f, "# %s wake-ups, %s\n", classic ? "classic (PUBLISH)" : "sharded (SPUBLISH)",
            replicas ? "masters + replicas" : "masters only");
    for (int i = 0; i < g_npoints; i++)
        if (g_points[i].classic == classic && (g_points[i].replicas > 0) == replicas)
            fprintf(f, "%d %.3f %.1f\n", g_points[i].nodes, g_points[i].bus, g_points[i].cpu);
    fprintf(f, "\n\n");
}

/* OUT/cluster.dat and cluster.gp, and cluster.png if gnuplot is installed. 0, or -1. */
static int write_chart(const char *out, int procs, int secs)
{
    char dat[512], gp[512], png[512];
    snprintf(dat, sizeof dat, "%s/cluster.dat", out);
    snprintf(gp, sizeof gp, "%s/cluster.gp", out);
    snprintf(png, sizeof png, "%s/cluster.png", out);
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench-cluster: %s: %s\n", out, strerror(errno));
        return -1;
    }
    FILE *f = fopen(dat, "w");
    if (!f) {
        fprintf(stderr, "bench-cluster: %s: %s\n", dat, strerror(errno));
        return -1;
    }
    fprintf(f, "# nodes bus_messages_per_acq server_cpu_us_per_acq (one mutex, %d processes)\n",
            procs);
    /* index 0..3: classic masters, sharded masters, classic + replicas, sharded + replicas */
    data_block(f, 1, 0);
    data_block(f, 0, 0);
    data_block(f, 1, 1);
    data_block(f, 0, 1);
    fclose(f);
    if (!(f = fopen(gp, "w"))) {
        fprintf(stderr, "bench-cluster: %s: %s\n", gp, strerror(errno));
        return -1;
    }
    fprintf(f, "# written by build/redisync-bench-cluster; run: gnuplot %s\n", gp);
    fprintf(f, "set terminal pngcairo noenhanced size 1240,600 font 'DejaVu Sans,11'\n");
    fprintf(f, "set output '%s'\n", png);
    fprintf(f, "set multiplot layout 1,2 title \"What one handoff costs a Redis Cluster: %d "
               "processes on one mutex, %d s per point\\nbefore: classic PUBLISH wake-ups "
               "(REDISYNC_CLUSTER_PUBSUB=classic); after: sharded SPUBLISH; 2 shared "
               "vCPUs, figures are noisy\"\n", procs, secs);
    fprintf(f, "set xlabel 'nodes in the cluster'\nset xrange [2:7]\nset xtics (3, 6)\n"
               "set grid\nset key top left\n");
    const char *style[4][2] = {{"lw 2 pt 7 lc rgb '#c0392b'", "classic, masters only"},
                               {"lw 2 pt 7 lc rgb '#2471a3'", "sharded, masters only"},
                               {"pt 5 ps 1.5 lc rgb '#c0392b'", "classic, 3 masters + 3 replicas"},
                               {"pt 5 ps 1.5 lc rgb '#2471a3'", "sharded, 3 masters + 3 replicas"}};
    /* title, y label, data column, y range (the bus panel's zero line kept clear of the axis) */
    const char *panel[2][4] = {
        {"cluster bus messages per acquisition (publish + publishshard sent, all nodes)",
         "bus messages / acquisition", "2", "[-0.3:*]"},
        {"server CPU per acquisition, all nodes (idle share removed)", "CPU us / acquisition",
         "3", "[0:*]"}};
    for (int p = 0; p < 2; p++) {
        fprintf(f, "set title '%s'\nset ylabel '%s'\nset yrange %s\nplot ", panel[p][0],
                panel[p][1], panel[p][3]);
        for (int b = 0; b < 4; b++)
            fprintf(f, "%s'%s' index %d using 1:%s with %s %s title '%s'", b ? ", " : "", dat, b,
                    panel[p][2], b < 2 ? "linespoints" : "points", style[b][0], style[b][1]);
        fprintf(f, "\n");
    }
    fprintf(f, "unset multiplot\n");
    fclose(f);
    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("chart: gnuplot is not installed (bench/deps.sh installs gnuplot-nox as root); "
               "data in %s, script in %s\n", dat, gp);
        return 0;
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench-cluster: gnuplot %s failed\n", gp);
        return -1;
    }
    printf("chart: %s (data %s)\n", png, dat);
    return 0;
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : 3;
    int procs = argc > 2 ? atoi(argv[2]) : 8;
    const char *out = argc > 3 ? argv[3] : "build/bench";
    if (secs < 1 || procs < 2 || procs > PMAX) {
        fprintf(stderr, "usage: redisync-bench-cluster [SECONDS [PROCS (2..%d) [OUT]]]\n",
                PMAX);
        return 2;
    }
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    printf("bench-cluster: %d processes (16 names: x %d threads), %d us sections, %d s per "
           "storm; figures per acquisition\n", procs, TPP_MANY, WORK_US, secs);
    printf("%-40s %7s %7s %8s %8s %7s %8s %8s %8s %8s %8s\n", "deployment, storm", "acq",
           "acq/s", "bus pub", "bus spub", "cmds", "evalsha", "publish", "spublish", "cpu us",
           "idle us");
    int rc = 0;
    rc |= deployment("3 masters", 3, 0, secs, procs, sh);
    rc |= deployment("3 masters + 3 replicas", 6, 1, secs, procs, sh);
    rc |= deployment("6 masters", 6, 0, secs, procs, sh);
    munmap(sh, sizeof *sh);
    if (write_chart(out, procs, secs) != 0)
        rc = 1;
    return rc ? 1 : 0;
}
