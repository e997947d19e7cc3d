/* Test support: certificates made at test time and redis-servers that speak TLS.
 *
 * tt_certs_make runs the `openssl` command (Debian's openssl package) in a fresh temporary
 * directory and writes, with EC P-256 keys valid for two days:
 *   ca.pem / ca.key          the test CA
 *   server.pem / server.key  signed by it, SAN IP:127.0.0.1 and DNS:localhost
 *   client.pem / client.key  signed by it (mutual TLS)
 *   expired.pem              the server's key in a certificate that expired yesterday
 *   future.pem               ... and in one valid only from 2099 (not yet valid)
 *   other-ca.pem             a CA that signed nothing of the above (the "wrong CA")
 * Nothing secret is committed: the keys live only in that directory, which tt_certs_free
 * removes.
 *
 * tt_server_start starts redis-server (tests/support/redis_server.c) with its usual plain
 * port, which only the test's own raw connections use (ts_cmd_int, readiness), plus a TLS
 * port reserved with ts_reserve_port: --tls-port P --tls-cert-file --tls-key-file
 * --tls-ca-cert-file --tls-auth-clients yes|no. The library under test is pointed at the TLS
 * port only.
 */
#ifndef REDISYNC_TESTS_SUPPORT_TLS_H
#define REDISYNC_TESTS_SUPPORT_TLS_H

#include "redis_server.h"

typedef struct tt_certs {
    char dir[256];
    char ca[300], server_cert[300], server_key[300], client_cert[300], client_key[300];
    char expired_cert[300], future_cert[300], other_ca[300];
} tt_certs_t;

/* 0, or -1 with a diagnostic on stderr (and nothing left behind). */
int tt_certs_make(tt_certs_t *t);
void tt_certs_free(tt_certs_t *t);

/* A TLS redis-server presenting cert/key (NULL: the good server certificate), requiring
 * client certificates when auth_clients. *tls_port is its TLS port. 0 or -1. */
int tt_server_start(ts_server_t *s, int *tls_port, const tt_certs_t *t, const char *cert,
                    int auth_clients);

/* tt_server_start with extra (NULL-terminated, or NULL) added to the server's arguments. */
int tt_server_startx(ts_server_t *s, int *tls_port, const tt_certs_t *t, const char *cert,
                     int auth_clients, const char *const *extra);

/* A sentinel (tests/support/sentinel.h) that also listens for TLS on *tls_port and talks TLS
 * to the master and its replicas (tls-replication yes); the master is at master_port (its
 * TLS port). 0 or -1. */
int tt_sentinel_start(ts_server_t *s, int *tls_port, const tt_certs_t *t, const char *name,
                      int master_port, int quorum, long down_after_ms, long failover_timeout_ms);

/* A Redis Cluster of n masters (tests/support/cluster.h) whose nodes also listen for TLS
 * on tls_ports[i] and talk TLS on the cluster bus (tls-cluster yes). 0 or -1. */
int tt_cluster_start(ts_server_t *nodes, int n, int *tls_ports, const tt_certs_t *t);

#endif
