/* cluster.c - see cluster.h: a Redis Cluster of masters for the tests. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int cluster_ok(const ts_server_t *s, int n)
{
    char buf[4096];
    if (!ts_cmd_str(s, buf, sizeof buf, "CLUSTER INFO"))
        return 0;
    char want[64];
    snprintf(want, sizeof want, "cluster_known_nodes:%d", n);
    return strstr(buf, "cluster_state:ok") && strstr(buf, "cluster_slots_assigned:16384") &&
           strstr(buf, want);
}

int ts_cluster_start(ts_server_t *nodes, int n)
{
    return ts_cluster_start_ex(nodes, n, NULL);
}

int ts_cluster_start_ex(ts_server_t *nodes, int n, const char *const *const *extra)
{
    return ts_cluster_start_rep(nodes, n, 0, extra);
}

/* Every replica's link to its master is up (CLUSTER FAILOVER needs it). */
static int replicas_ok(const ts_server_t *nodes, int n)
{
    for (int i = 0; i < n; i++) {
        char buf[4096];
        if (!ts_cmd_str(&nodes[i], buf, sizeof buf, "INFO replication"))
            return 0;
        if (strstr(buf, "role:slave") && !strstr(buf, "master_link_status:up"))
            return 0;
    }
    return 1;
}

int ts_cluster_start_rep(ts_server_t *nodes, int n, int replicas,
                         const char *const *const *extra)
{
    return ts_cluster_start_each(nodes, n, replicas, extra, NULL, NULL);
}

int ts_cluster_start_each(ts_server_t *nodes, int n, int replicas,
                          const char *const *const *extra, void (*before)(int i, void *arg),
                          void *arg)
{
    memset(nodes, 0, sizeof *nodes * (size_t)n);
    for (int i = 0; i < n; i++) {
        if (before)
            before(i, arg);
        const char *args[40] = {"--cluster-enabled", "yes", "--cluster-node-timeout", "5000",
                                "--cluster-config-file", "nodes.conf"};
        int k = 6;
        for (int j = 0; extra && extra[i] && extra[i][j] && k < 39; j++)
            args[k++] = extra[i][j];
        args[k] = NULL;
        if (ts_server_startv(&nodes[i], args) != 0) {
            if (before)
                before(-1, arg);
            ts_cluster_stop(nodes, n);
            return -1;
        }
    }
    if (before)
        before(-1, arg);
    char *argv[32];
    char addr[16][32];
    int k = 0;
    argv[k++] = "redis-cli";
    argv[k++] = "--cluster";
    argv[k++] = "create";
    for (int i = 0; i < n && i < 16; i++) {
        snprintf(addr[i], sizeof addr[i], "127.0.0.1:%d", nodes[i].port);
        argv[k++] = addr[i];
    }
    char nrep[12];
    snprintf(nrep, sizeof nrep, "%d", replicas);
    argv[k++] = "--cluster-replicas";
    argv[k++] = nrep;
    argv[k++] = "--cluster-yes";
    argv[k] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        execvp("redis-cli", argv);
        _exit(127);
    }
    int st = -1;
    if (pid > 0)
        while (waitpid(pid, &st, 0) == -1 && errno == EINTR) {
        }
    if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "ts_cluster_start: redis-cli --cluster create failed (%d)\n", st);
        ts_cluster_stop(nodes, n);
        return -1;
    }
    long long deadline = mono_ms() + 15000;
    while (mono_ms() < deadline) {
        int ok = 1;
        for (int i = 0; i < n && ok; i++)
            ok = cluster_ok(&nodes[i], n);
        if (ok && replicas > 0)
            ok = replicas_ok(nodes, n);
        if (ok)
            return 0;
        nap_ms(50);
    }
    fprintf(stderr, "ts_cluster_start: the cluster never became ok\n");
    ts_cluster_stop(nodes, n);
    return -1;
}

void ts_cluster_stop(ts_server_t *nodes, int n)
{
    for (int i = 0; i < n; i++)
        ts_server_stop(&nodes[i]);
}

char *ts_cluster_myid(const ts_server_t *s, char *buf, size_t len)
{
    return ts_cmd_str(s, buf, len, "CLUSTER MYID");
}

int ts_cluster_is_master(const ts_server_t *s)
{
    char buf[4096];
    return ts_cmd_str(s, buf, sizeof buf, "INFO replication") && strstr(buf, "role:master");
}

int ts_cluster_owner(const ts_server_t *nodes, int n, int slot)
{
    char myid[64];
    for (int i = 0; i < n; i++) {
        redisContext *c = ts_connect(&nodes[i]);
        if (!c)
            continue;
        redisReply *r = redisCommand(c, "CLUSTER SLOTS");
        int found = -1;
        for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j < r->elements; j++) {
            redisReply *e = r->element[j];
            if (e->elements >= 3 && slot >= e->element[0]->integer &&
                slot <= e->element[1]->integer && e->element[2]->elements >= 2) {
                int port = (int)e->element[2]->element[1]->integer;
                for (int k = 0; k < n; k++)
                    if (nodes[k].port == port)
                        found = k;
            }
        }
        if (r)
            freeReplyObject(r);
        redisFree(c);
        (void)myid;
        return found;
    }
    return -1;
}
