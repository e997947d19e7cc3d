/*
 * topology.c - the deployments a fault scenario runs on, besides one plain data server
 * (tests/faults/main.c starts that one itself): a Sentinel-managed master with two replicas
 * and three sentinels, three Redlock masters, and a Cluster of three masters. Each fills in the URL the workers use and
 * the list of ports their sockets may go to (the I7 check counts sockets to those).
 */
#include <stdio.h>

#include "cluster.h"
#include "faults.h"
#include "redis_server.h"
#include "sentinel.h"

/* Three masters with their data; url is the redlock:// URL of the three. */
int start_redlock_masters(ts_server_t *m[3], char *url, size_t urllen, char *ports, size_t portslen)
{
    int n = snprintf(url, urllen, "redlock://");
    int np = 0;
    for (int i = 0; i < 3; i++) {
        if (ts_server_start(m[i], "--appendonly", "yes", "--appendfsync", "always", NULL) != 0)
            return -1;
        n += snprintf(url + n, urllen - (size_t)n, "%s127.0.0.1:%d", i ? "," : "", m[i]->port);
        np += snprintf(ports + np, portslen - (size_t)np, "%s%d", i ? "," : "", m[i]->port);
    }
    return 0;
}

/* Three masters sharing the slots (no replicas: the faults here are the processes' and
 * connections', not failovers: tests/test_async_failover.c and the --net split scenarios
 * have those). */
int start_cluster_masters(ts_server_t *nodes, char *url, size_t urllen, char *ports,
                          size_t portslen)
{
    if (ts_cluster_start(nodes, 3) != 0)
        return -1;
    int n = snprintf(url, urllen, "redis-cluster://"), np = 0;
    for (int i = 0; i < 3; i++) {
        n += snprintf(url + n, urllen - (size_t)n, "%s127.0.0.1:%d", i ? "," : "", nodes[i].port);
        np += snprintf(ports + np, portslen - (size_t)np, "%s%d", i ? "," : "", nodes[i].port);
    }
    return 0;
}

/* A master (data), two replicas and three sentinels; url names them for the workers. Two
 * replicas, as a min_replicas = 1 deployment would run: during a failover the sentinels point
 * the other replica at the new master at once, while the old master is only demoted (and can
 * replicate again) about 10 s after the switch. */
int start_sentinel_topology(ts_server_t *data, ts_server_t *replica, ts_server_t *sent,
                            const char *master_name, char *url, size_t urllen, char *ports,
                            size_t portslen)
{
    if (ts_server_start(data, "--repl-diskless-sync-delay", "0", NULL) != 0)
        return -1;
    char mp[16];
    snprintf(mp, sizeof mp, "%d", data->port);
    for (int i = 0; i < 2; i++)
        if (ts_server_start(&replica[i], "--replicaof", "127.0.0.1", mp,
                            "--repl-diskless-sync-delay", "0", NULL) != 0 ||
            ts_wait_replica_up(&replica[i], 15000) != 0)
            return -1;
    if (ts_wait_replicas_online(data, 2, 15000) != 0)
        return -1;
    int n = snprintf(url, urllen, "redis-sentinel://");
    int np = snprintf(ports, portslen, "%d,%d,%d", data->port, replica[0].port, replica[1].port);
    for (int i = 0; i < 3; i++) {
        if (ts_sentinel_start(&sent[i], master_name, data->port, 2, 1000, 5000) != 0)
            return -1;
        n += snprintf(url + n, urllen - (size_t)n, "%s127.0.0.1:%d", i ? "," : "", sent[i].port);
        np += snprintf(ports + np, portslen - (size_t)np, ",%d", sent[i].port);
    }
    snprintf(url + n, urllen - (size_t)n, "/%s", master_name);
    return 0;
}

/* The server the sentinels name master now (the keys live there). */
ts_server_t *current_master(ts_server_t *data, ts_server_t *replica, ts_server_t *sent,
                            const char *master_name)
{
    for (int i = 0; i < 3; i++) {
        int port = ts_sentinel_master_port(&sent[i], master_name);
        for (int j = 0; j < 2; j++)
            if (port == replica[j].port)
                return &replica[j];
        if (port == data->port)
            return data;
    }
    return data;
}
