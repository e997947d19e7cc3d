/* Test support: a throwaway Redis Cluster of masters on 127.0.0.1 (tests/support/redis_server.h).
 *
 * ts_cluster_start starts n servers with --cluster-enabled yes (ports <= 55535, the bus port
 * +10000 kept free by the helper), joins them with
 * `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes` (slots spread evenly)
 * and waits until every node reports cluster_state:ok with all 16384 slots assigned and
 * knows every other node. ts_cluster_stop stops them all.
 */
#ifndef REDISYNC_TESTS_SUPPORT_CLUSTER_H
#define REDISYNC_TESTS_SUPPORT_CLUSTER_H

#include "redis_server.h"

#ifdef __cplusplus
extern "C" {
#endif

int ts_cluster_start(ts_server_t *nodes, int n);
/* The same with extra[i] (NULL-terminated, or NULL) added to node i's arguments. */
int ts_cluster_start_ex(ts_server_t *nodes, int n, const char *const *const *extra);
/* n nodes of which n / (replicas + 1) masters, each with `replicas` replicas (redis-cli
 * --cluster-replicas; it picks which node is which: ask ts_cluster_is_master), waiting also
 * until every replica's link to its master is up. */
int ts_cluster_start_rep(ts_server_t *nodes, int n, int replicas,
                         const char *const *const *extra);
/* ts_cluster_start_rep with before(i, arg) called just before node i is started, and
 * before(-1, arg) once every node is (or when one failed): e.g. to run each node's process
 * under a group id of its own (tests/faults/net_split.c). */
int ts_cluster_start_each(ts_server_t *nodes, int n, int replicas,
                          const char *const *const *extra, void (*before)(int i, void *arg),
                          void *arg);
/* 1 if s says role:master now. */
int ts_cluster_is_master(const ts_server_t *s);
void ts_cluster_stop(ts_server_t *nodes, int n);

/* The node id (CLUSTER MYID) of s into buf (41 bytes); NULL on error. */
char *ts_cluster_myid(const ts_server_t *s, char *buf, size_t len);

/* Index in nodes[] of the node that serves slot, per that node's own CLUSTER NODES; -1. */
int ts_cluster_owner(const ts_server_t *nodes, int n, int slot);

#ifdef __cplusplus
}
#endif

#endif
