/* Test support: throwaway redis-sentinel processes next to the servers of redis_server.h.
 *
 * ts_sentinel_start borrows a port and a working directory from ts_server_start (it starts a
 * plain redis-server there and kills it at once: the port stays reserved for this process),
 * writes DIR/sentinel.conf monitoring 127.0.0.1:MASTER_PORT under NAME, and runs
 * `redis-server DIR/sentinel.conf --sentinel` on that port (a sentinel needs a config file
 * it can rewrite, which ts_server_start cannot give it). The result is an ordinary
 * ts_server_t: ts_server_stop kills it and removes its dir; ts_cmd_* talk to it.
 * The child dies with the thread that started it (PR_SET_PDEATHSIG), like the servers.
 */
#ifndef REDISYNC_TESTS_SUPPORT_SENTINEL_H
#define REDISYNC_TESTS_SUPPORT_SENTINEL_H

#include "redis_server.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts a sentinel for master NAME at 127.0.0.1:master_port with the given quorum,
 * down-after-milliseconds and failover-timeout. 0, or -1 with *s stopped. */
int ts_sentinel_start(ts_server_t *s, const char *name, int master_port, int quorum,
                      long down_after_ms, long failover_timeout_ms);
/* The same with conf (lines ending in newlines, or NULL) added to its sentinel.conf. */
int ts_sentinel_start_ex(ts_server_t *s, const char *name, int master_port, int quorum,
                         long down_after_ms, long failover_timeout_ms, const char *conf);

/* The port of the master this sentinel names for NAME now, or -1. */
int ts_sentinel_master_port(const ts_server_t *s, const char *name);

/* Waits until INFO replication of replica says master_link_status:up.
 * 0, or -1 after timeout_ms. */
int ts_wait_replica_up(const ts_server_t *replica, long timeout_ms);

/* Waits until master counts n replicas in state=online (after a diskless sync a replica is
 * put online only at its first REPLCONF ACK, up to a second later; until then WAIT does not
 * count it). 0, or -1 after timeout_ms. */
int ts_wait_replicas_online(const ts_server_t *master, int n, long timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
