/* Test support: certificates made at test time and redis-servers that speak TLS.
 * See tls.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "tls.h"
#include "cluster.h"
#include "sentinel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int run(const char *dir, const char *cmd)
{
    char full[2048];
    snprintf(full, sizeof full, "cd '%s' && %s >>openssl.log 2>&1", dir, cmd);
    int st = system(full);
    if (st != 0) {
        fprintf(stderr, "tt_certs_make: failed: %s (see %s/openssl.log)\n", cmd, dir);
        return -1;
    }
    return 0;
}

static int write_file(const char *dir, const char *name, const char *text)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) {
        fprintf(stderr, "tt_certs_make: cannot write %s\n", path);
        if (f)
            fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

#define NEWKEY "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

int tt_certs_make(tt_certs_t *t)
{
    memset(t, 0, sizeof *t);
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/rs-tls.XXXXXX",
             base && base[0] == '/' && strlen(base) < 160 ? base : "/tmp");
    if (!mkdtemp(t->dir)) {
        perror("tt_certs_make: mkdtemp");
        t->dir[0] = '\0';
        return -1;
    }
    if (write_file(t->dir, "server.ext", "subjectAltName=IP:127.0.0.1,DNS:localhost\n") ||
        write_file(t->dir, "client.ext", "extendedKeyUsage=clientAuth\n") ||
        /* openssl ca (for a certificate valid only from 2099: x509 -req cannot set a start
         * date in OpenSSL 3.0) wants a configuration, a database and a serial */
        write_file(t->dir, "ca.cnf", "[ca]\ndefault_ca=d\n[d]\ndir=.\ndatabase=index.txt\n"
                   "new_certs_dir=.\nserial=serial\ndefault_md=sha256\npolicy=p\n"
                   "[p]\ncommonName=supplied\n") ||
        write_file(t->dir, "index.txt", "") || write_file(t->dir, "serial", "1000\n")) {
        tt_certs_free(t);
        return -1;
    }
    static const char *const cmds[] = {
        "openssl req -x509 " NEWKEY " -keyout ca.key -out ca.pem -days 2 -subj /CN=rs-test-ca",
        "openssl req -x509 " NEWKEY " -keyout other-ca.key -out other-ca.pem -days 2 "
        "-subj /CN=rs-other-ca",
        "openssl req " NEWKEY " -keyout server.key -out server.csr -subj /CN=localhost",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile server.ext",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out expired.pem -days -1 -extfile server.ext",
        "openssl ca -batch -config ca.cnf -startdate 20991231000000Z -enddate "
        "21001231000000Z -in server.csr -out future.pem -keyfile ca.key -cert ca.pem -notext "
        "-extfile server.ext",
        "openssl req " NEWKEY " -keyout client.key -out client.csr -subj /CN=rs-client",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out client.pem -days 2 -extfile client.ext",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (run(t->dir, cmds[i]) != 0) {
            tt_certs_free(t);
            return -1;
        }
    snprintf(t->ca, sizeof t->ca, "%s/ca.pem", t->dir);
    snprintf(t->other_ca, sizeof t->other_ca, "%s/other-ca.pem", t->dir);
    snprintf(t->server_cert, sizeof t->server_cert, "%s/server.pem", t->dir);
    snprintf(t->server_key, sizeof t->server_key, "%s/server.key", t->dir);
    snprintf(t->expired_cert, sizeof t->expired_cert, "%s/expired.pem", t->dir);
    snprintf(t->future_cert, sizeof t->future_cert, "%s/future.pem", t->dir);
    snprintf(t->client_cert, sizeof t->client_cert, "%s/client.pem", t->dir);
    snprintf(t->client_key, sizeof t->client_key, "%s/client.key", t->dir);
    return 0;
}

void tt_certs_free(tt_certs_t *t)
{
    if (t->dir[0]) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "tt_certs_free: could not remove %s\n", t->dir);
    }
    memset(t, 0, sizeof *t);
}

int tt_server_start(ts_server_t *s, int *tls_port, const tt_certs_t *t, const char *cert,
                    int auth_clients)
{
    return tt_server_startx(s, tls_port, t, cert, auth_clients, NULL);
}

int tt_server_startx(ts_server_t *s, int *tls_port, const tt_certs_t *t, const char *cert,
                     int auth_clients, const char *const *extra)
{
    int port = ts_reserve_port(0);
    if (port < 0)
        return -1;
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    *tls_port = port;
    const char *args[32] = {"--tls-port", p, "--tls-cert-file", cert ? cert : t->server_cert,
                            "--tls-key-file", t->server_key, "--tls-ca-cert-file", t->ca,
                            "--tls-auth-clients", auth_clients ? "yes" : "no"};
    int k = 10;
    for (int i = 0; extra && extra[i] && k < 31; i++)
        args[k++] = extra[i];
    args[k] = NULL;
    return ts_server_startv(s, args);
}

int tt_sentinel_start(ts_server_t *s, int *tls_port, const tt_certs_t *t, const char *name,
                      int master_port, int quorum, long down_after_ms, long failover_timeout_ms)
{
    int port = ts_reserve_port(0);
    if (port < 0)
        return -1;
    *tls_port = port;
    char conf[2048];
    snprintf(conf, sizeof conf,
             "tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
             "tls-auth-clients no\ntls-replication yes\n",
             port, t->server_cert, t->server_key, t->ca);
    return ts_sentinel_start_ex(s, name, master_port, quorum, down_after_ms, failover_timeout_ms,
                                conf);
}

int tt_cluster_start(ts_server_t *nodes, int n, int *tls_ports, const tt_certs_t *t)
{
    if (n > 16)
        return -1;
    char port[16][16];
    const char *args[16][16];
    const char *const *extra[16];
    for (int i = 0; i < n; i++) {
        tls_ports[i] = ts_reserve_port(1); /* the bus is on the TLS port + 10000 */
        if (tls_ports[i] < 0)
            return -1;
        snprintf(port[i], sizeof port[i], "%d", tls_ports[i]);
        const char *a[] = {"--tls-port", port[i], "--tls-cluster", "yes", "--tls-cert-file",
                           t->server_cert, "--tls-key-file", t->server_key,
                           "--tls-ca-cert-file", t->ca, "--tls-auth-clients", "no", NULL};
        memcpy(args[i], a, sizeof a);
        extra[i] = args[i];
    }
    return ts_cluster_start_ex(nodes, n, extra);
}
