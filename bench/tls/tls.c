/*
 * tls.c - what TLS costs through redisync (make bench-tls; also run by make bench).
 *
 * One redis-server with a plain port and a TLS port (tests/support/tls.c makes the
 * certificates with openssl), and in the same run, interleaved in blocks so that both see the
 * same machine load:
 *   a  PING round trip on one connection of the library's transport, plain and TLS
 *      (the floor: what any TLS client pays per round trip);
 *   b  uncontended rs_mutex_lock + rs_mutex_unlock, plain and TLS (two round trips each);
 *   c  a new connection (TCP connect, TLS handshake, PING), with a full handshake and with
 *      the session resumed (what a reconnect after a failover costs per connection);
 *   d  a bare client of this file's own (a socket, OpenSSL's SSL_connect for TLS, hiredis
 *      only to format the commands and parse the replies) that sends the two EVALSHAs an
 *      uncontended rs_mutex_lock + rs_mutex_unlock sends (the same arguments, as redis-cli
 *      MONITOR shows them: "acq" with mode "t", then "rel" with mode "q"), one round trip
 *      each, plain and TLS; and a PING on the same bare connections. Issue 12's target:
 *      b over TLS / d over TLS <= 1.1 (the library's own share of the TLS lock+unlock);
 *   e  contended handoff: two threads, each with its own client, alternate on one mutex
 *      (the holder unlocks once the other is queued, which it checks with ZCARD on a plain
 *      admin connection outside the timed span); a handoff is the time from one thread's
 *      unlock returned to the other's lock returned. Issue 12's target: TLS handoff <= 1.1 x
 *      (plain handoff + (bare TLS PING - bare plain PING)).
 * Medians and p99 in microseconds; the ratios TLS/plain. Usage: redisync-bench-tls [CYCLES]
 * (e runs CYCLES/4 handoffs on each side, in blocks of 50.)
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "scripts.h"
#include "redis_server.h"
#include "tls.h"

typedef struct samples {
    double *v;
    int n;
} samples_t;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double q(samples_t *s, double f)
{
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_d);
    return s->n ? s->v[(int)(f * (s->n - 1))] : 0;
}

static double us_since(uint64_t t0)
{
    return (double)(rs__now_ns() - t0) / 1000.0;
}

/* ----- d: the bare client --------------------------------------------------------------- */

typedef struct bare {
    int fd;
    SSL *ssl; /* NULL: plain */
    redisReader *rd;
} bare_t;

static void bare_die(const char *what)
{
    fprintf(stderr, "bench-tls: bare client: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

/* A connection to 127.0.0.1:port, TLS (verified against ctx's CA) when ctx is not NULL. */
static void bare_open(bare_t *b, int port, SSL_CTX *ctx)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    b->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (b->fd < 0 || connect(b->fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        bare_die("connect");
    setsockopt(b->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* as hiredis does */
    b->ssl = NULL;
    if (ctx) {
        b->ssl = SSL_new(ctx);
        if (!b->ssl || !X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(b->ssl), "127.0.0.1") || !SSL_set_fd(b->ssl, b->fd) ||
            SSL_connect(b->ssl) != 1)
            bare_die("SSL_connect");
    }
    b->rd = redisReaderCreate();
}

static void bare_close(bare_t *b)
{
    if (b->ssl) {
        SSL_shutdown(b->ssl);
        SSL_free(b->ssl);
    }
    close(b->fd);
    redisReaderFree(b->rd);
}

/* One round trip: the command out, its reply in (the caller frees it). */
static redisReply *bare_call(bare_t *b, int argc, const char **argv, const size_t *lens)
{
    char *cmd;
    long long n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (n < 0)
        bare_die("format");
    int w = b->ssl ? SSL_write(b->ssl, cmd, (int)n) : (int)send(b->fd, cmd, (size_t)n, MSG_NOSIGNAL);
    free(cmd);
    if (w != (int)n)
        bare_die("write");
    void *r = NULL;
    while (redisReaderGetReply(b->rd, &r) == REDIS_OK && !r) {
        char buf[16384];
        int got = b->ssl ? SSL_read(b->ssl, buf, sizeof buf) : (int)recv(b->fd, buf, sizeof buf, 0);
        if (got <= 0 || redisReaderFeed(b->rd, buf, (size_t)got) != REDIS_OK)
            bare_die("read");
    }
    if (!r)
        bare_die("protocol");
    return r;
}

static int bare_ping(bare_t *b)
{
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    freeReplyObject(bare_call(b, 1, argv, lens));
    return 0;
}

/* The lock pattern: EVALSHA acq (mode t), then EVALSHA rel (mode q), the arguments of
 * lib/handle.c rs__call_argv for the client's defaults (prefix "rs:", lease 30000, max
 * waiters 100000); a fresh acquisition id each time, as the library makes one. */
static int bare_lockpair(bare_t *b, const char *sha, const char *name, unsigned long no)
{
    char k[4][160], acq[80];
    snprintf(k[0], sizeof k[0], "rs:{%s}:mutex", name);
    snprintf(k[1], sizeof k[1], "rs:{%s}:mutex:fence", name);
    snprintf(k[2], sizeof k[2], "rs:{%s}:mutex:q", name);
    snprintf(k[3], sizeof k[3], "rs:{%s}:mutex:qi", name);
    snprintf(acq, sizeof acq, "636e25ef3d49fa50:%lu.0cc6bce022d85fac", no);
    for (int step = 0; step < 2; step++) {
        const char *argv[15] = {"EVALSHA", sha, "4", k[0], k[1], k[2], k[3],
                                step ? "rel" : "acq", "87f442cf22f5dd17277d0fe2375035e9:1",
                                acq, "30000", "rs:client:", step ? "q" : "t", "100000",
                                "30000"};
        size_t lens[15];
        for (int i = 0; i < 15; i++)
            lens[i] = strlen(argv[i]);
        redisReply *r = bare_call(b, 15, argv, lens);
        int ok = step ? r->type == REDIS_REPLY_INTEGER && r->integer == 1
                      : r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                            r->element[0]->type == REDIS_REPLY_INTEGER &&
                            r->element[0]->integer == 1;
        freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
}

/* ----- e: contended handoff ------------------------------------------------------------- */

typedef struct handoff {
    rs_mutex_t *m[2];
    int admin_port;
    const char *qkey; /* the mutex's queue: the holder waits until the other is in it */
    int n;            /* grants in this block: thread t makes grants t, t + 2, ... */
    uint64_t *lock_ret, *unlock_ret;
    atomic_int started; /* grant 0 made: thread 1 may start */
    atomic_int failed;
} handoff_t;

typedef struct handoff_arg {
    handoff_t *h;
    int me;
} handoff_arg_t;

static void *handoff_main(void *arg)
{
    handoff_arg_t *a = arg;
    handoff_t *h = a->h;
    redisContext *admin = redisConnect("127.0.0.1", h->admin_port);
    if (!admin || admin->err) {
        atomic_store(&h->failed, 1);
        atomic_store(&h->started, 1);
        redisFree(admin);
        return NULL;
    }
    if (a->me == 1)
        while (!atomic_load(&h->started))
            usleep(100);
    for (int k = a->me; k < h->n && !atomic_load(&h->failed); k += 2) {
        if (rs_mutex_lock(h->m[a->me]) != 0) {
            atomic_store(&h->failed, 1);
            break;
        }
        h->lock_ret[k] = rs__now_ns();
        if (k == 0)
            atomic_store(&h->started, 1);
        /* the other thread queued behind us (untimed), unless this is the last grant */
        while (k + 1 < h->n && !atomic_load(&h->failed)) {
            redisReply *r = redisCommand(admin, "ZCARD %s", h->qkey);
            long long z = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
            freeReplyObject(r);
            if (z < 0)
                atomic_store(&h->failed, 1);
            if (z != 0)
                break;
            usleep(50);
        }
        if (rs_mutex_unlock(h->m[a->me]) != 0)
            atomic_store(&h->failed, 1);
        h->unlock_ret[k] = rs__now_ns();
    }
    redisFree(admin);
    return NULL;
}

/* n grants alternating between the two threads; the n - 1 handoffs go into s. */
static int handoff_block(handoff_t *h, int n, samples_t *s)
{
    h->n = n;
    atomic_store(&h->started, 0);
    pthread_t t[2];
    handoff_arg_t a[2] = {{h, 0}, {h, 1}};
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, handoff_main, &a[i]) != 0)
            return -1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    if (atomic_load(&h->failed))
        return -1;
    for (int k = 0; k + 1 < n; k++)
        s->v[s->n++] = (double)((int64_t)(h->lock_ret[k + 1] - h->unlock_ret[k])) / 1000.0;
    return 0;
}

/* ----- the library's side ---------------------------------------------------------------- */

static int ping(redisContext *ctx)
{
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    redisReply *r;
    if (rs__ctx_command(ctx, 1, argv, lens, &r) != 0)
        return -1;
    freeReplyObject(r);
    return 0;
}

static rs_client_t *open_client(const char *url)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *c = NULL;
    if (rs_client_open(&c, &cfg) != 0) {
        fprintf(stderr, "bench-tls: open %s: %s\n", url, rs_client_lasterror(NULL));
        exit(1);
    }
    return c;
}

static redisContext *connect_ctx(rs_client_t *c)
{
    redisContext *ctx;
    if (rs__conn_connect(c, rs__now_ns() + 5000 * RS_NS_PER_MS, 5000, &ctx) != 0) {
        fprintf(stderr, "bench-tls: connect: %s\n", rs_client_lasterror(c));
        exit(1);
    }
    return ctx;
}

static void row(const char *what, samples_t *plain, samples_t *tls)
{
    double p50 = q(plain, 0.5), t50 = q(tls, 0.5);
    printf("%-44s %9.1f %9.1f %9.1f %9.1f %7.2f\n", what, p50, q(plain, 0.99), t50,
           q(tls, 0.99), p50 > 0 ? t50 / p50 : 0);
}

int main(int argc, char **argv)
{
    int cycles = argc > 1 ? atoi(argv[1]) : 4000;
    if (cycles < 100)
        cycles = 100;
    tt_certs_t certs;
    ts_server_t srv;
    int tport;
    if (tt_certs_make(&certs) != 0 || tt_server_start(&srv, &tport, &certs, NULL, 0) != 0) {
        fprintf(stderr, "bench-tls: cannot set up a TLS redis-server\n");
        return 1;
    }
    char turl[1024];
    snprintf(turl, sizeof turl, "rediss://127.0.0.1:%d?tls_ca=%s", tport, certs.ca);
    rs_client_t *pc = open_client(srv.url), *tc = open_client(turl);
    redisContext *pctx = connect_ctx(pc), *tctx = connect_ctx(tc);
    rs_mutex_t *pm, *tm;
    if (rs_mutex_init(&pm, pc, "bench-plain") || rs_mutex_init(&tm, tc, "bench-tls"))
        return 1;

    /* d: the bare client's connections, plain to the server's plain port, TLS to its TLS
     * port, verified against the same CA as the library's */
    SSL_CTX *sctx = SSL_CTX_new(TLS_client_method());
    if (!sctx || !SSL_CTX_set_min_proto_version(sctx, TLS1_2_VERSION) ||
        SSL_CTX_load_verify_locations(sctx, certs.ca, NULL) != 1)
        bare_die("SSL_CTX");
    SSL_CTX_set_verify(sctx, SSL_VERIFY_PEER, NULL);
    bare_t bare[2];
    bare_open(&bare[0], srv.port, NULL);
    bare_open(&bare[1], tport, sctx);
    {
        const char *av[3] = {"SCRIPT", "LOAD", (const char *)rs_script_mutex.body};
        size_t lens[3] = {6, 4, rs_script_mutex.len};
        redisReply *r = bare_call(&bare[0], 3, av, lens);
        if (r->type != REDIS_REPLY_STRING || strcmp(r->str, rs_script_mutex.sha) != 0)
            bare_die("SCRIPT LOAD of the mutex script gave another SHA");
        freeReplyObject(r);
    }
    unsigned long bare_no = 0;

    /* e: two more clients, so that each side has two, and their handles on one name */
    rs_client_t *pc2 = open_client(srv.url), *tc2 = open_client(turl);
    handoff_t ho[2];
    for (int side = 0; side < 2; side++) {
        memset(&ho[side], 0, sizeof ho[side]);
        const char *name = side ? "bench-handoff-tls" : "bench-handoff-plain";
        if (rs_mutex_init(&ho[side].m[0], side ? tc : pc, name) ||
            rs_mutex_init(&ho[side].m[1], side ? tc2 : pc2, name))
            return 1;
        ho[side].admin_port = srv.port;
        ho[side].qkey = side ? "rs:{bench-handoff-tls}:mutex:q" : "rs:{bench-handoff-plain}:mutex:q";
        ho[side].lock_ret = calloc(64, sizeof(uint64_t));
        ho[side].unlock_ret = calloc(64, sizeof(uint64_t));
    }

    samples_t a[2], b[2], cn[2], d[2], dp[2], e[2];
    for (int i = 0; i < 2; i++) {
        a[i].v = calloc((size_t)cycles, sizeof(double)), a[i].n = 0;
        b[i].v = calloc((size_t)cycles, sizeof(double)), b[i].n = 0;
        cn[i].v = calloc((size_t)cycles, sizeof(double)), cn[i].n = 0;
        d[i].v = calloc((size_t)cycles, sizeof(double)), d[i].n = 0;
        dp[i].v = calloc((size_t)cycles, sizeof(double)), dp[i].n = 0;
        e[i].v = calloc((size_t)cycles, sizeof(double)), e[i].n = 0;
    }
    /* warm-up: scripts loaded, watchdogs started, pools filled */
    for (int i = 0; i < 200; i++) {
        rs_mutex_lock(pm), rs_mutex_unlock(pm), rs_mutex_lock(tm), rs_mutex_unlock(tm);
        ping(pctx), ping(tctx);
        bare_ping(&bare[0]), bare_ping(&bare[1]);
        if (bare_lockpair(&bare[0], rs_script_mutex.sha, "bench-bare-plain", bare_no++) ||
            bare_lockpair(&bare[1], rs_script_mutex.sha, "bench-bare-tls", bare_no++))
            bare_die("the lock pattern was refused");
    }
    for (int side = 0; side < 2; side++) {
        samples_t junk = {calloc(64, sizeof(double)), 0};
        if (handoff_block(&ho[side], 20, &junk) != 0) {
            fprintf(stderr, "bench-tls: handoff warm-up failed\n");
            return 1;
        }
        free(junk.v);
    }
    const int block = 100;
    for (int done = 0; done < cycles; done += block) {
        for (int side = 0; side < 2; side++) {
            redisContext *ctx = side ? tctx : pctx;
            rs_mutex_t *m = side ? tm : pm;
            for (int i = 0; i < block && a[side].n < cycles; i++) {
                uint64_t t0 = rs__now_ns();
                if (ping(ctx) != 0)
                    return 1;
                a[side].v[a[side].n++] = us_since(t0);
            }
            for (int i = 0; i < block && b[side].n < cycles; i++) {
                uint64_t t0 = rs__now_ns();
                if (rs_mutex_lock(m) != 0 || rs_mutex_unlock(m) != 0)
                    return 1;
                b[side].v[b[side].n++] = us_since(t0);
            }
            for (int i = 0; i < block && dp[side].n < cycles; i++) {
                uint64_t t0 = rs__now_ns();
                bare_ping(&bare[side]);
                dp[side].v[dp[side].n++] = us_since(t0);
            }
            const char *bname = side ? "bench-bare-tls" : "bench-bare-plain";
            for (int i = 0; i < block && d[side].n < cycles; i++) {
                uint64_t t0 = rs__now_ns();
                if (bare_lockpair(&bare[side], rs_script_mutex.sha, bname, bare_no++) != 0)
                    bare_die("the lock pattern was refused");
                d[side].v[d[side].n++] = us_since(t0);
            }
        }
    }
    /* e: blocks of 50 grants (49 handoffs), plain and TLS in turn */
    for (int done = 0; done < cycles / 4; done += 49)
        for (int side = 0; side < 2; side++)
            if (handoff_block(&ho[side], 50, &e[side]) != 0) {
                fprintf(stderr, "bench-tls: handoff failed\n");
                return 1;
            }
    /* c: new TLS connections, full handshake (sessions forgotten) and resumed, interleaved */
    int nconn = cycles / 10;
    for (int i = 0; i < nconn; i++)
        for (int side = 0; side < 2; side++) {
            if (side == 0)
                rs__tls_forget_sessions(tc->tls);
            uint64_t t0 = rs__now_ns();
            redisContext *ctx = connect_ctx(tc);
            if (ping(ctx) != 0)
                return 1;
            double us = us_since(t0);
            if (side == 1 && !rs__tp_reused(ctx)) {
                fprintf(stderr, "bench-tls: the session was not resumed\n");
                return 1;
            }
            cn[side].v[cn[side].n++] = us;
            rs__ctx_free(ctx);
        }
    char what[128];
    rs__tp_describe(tctx, what, sizeof what);
    printf("redisync over TLS (%s), %d cycles, one redis-server on loopback, us\n", what, cycles);
    printf("%-44s %9s %9s %9s %9s %7s\n", "", "plain p50", "p99", "TLS p50", "p99", "ratio");
    row("a  PING round trip (the transport's floor)", &a[0], &a[1]);
    row("b  uncontended lock+unlock (2 round trips)", &b[0], &b[1]);
    printf("%-44s %9s %9s %9s %9s %7s\n", "", "full p50", "p99", "resumed", "p99", "ratio");
    row("c  connect + TLS handshake + PING", &cn[0], &cn[1]);
    printf("%-44s %9s %9s %9s %9s %7s\n", "", "plain p50", "p99", "TLS p50", "p99", "ratio");
    row("d  bare client: PING round trip", &dp[0], &dp[1]);
    row("d  bare client: the 2 EVALSHAs of lock+unlock", &d[0], &d[1]);
    row("e  contended handoff (unlock ret. -> lock ret.)", &e[0], &e[1]);
    printf("b/a over TLS: %.2f round trips' worth per lock+unlock (plain: %.2f)\n",
           q(&b[1], 0.5) / q(&a[1], 0.5), q(&b[0], 0.5) / q(&a[0], 0.5));
    double r1 = q(&b[1], 0.5) / q(&d[1], 0.5);
    printf("target 1 (issue 12): library lock+unlock over TLS / bare OpenSSL 2 EVALSHAs = "
           "%.1f / %.1f = %.3f (<= 1.1: %s; plain, the same ratio: %.3f)\n",
           q(&b[1], 0.5), q(&d[1], 0.5), r1, r1 <= 1.1 ? "PASS" : "MISS",
           q(&b[0], 0.5) / q(&d[0], 0.5));
    double tls_extra = q(&dp[1], 0.5) - q(&dp[0], 0.5);
    double bound = 1.1 * (q(&e[0], 0.5) + tls_extra);
    printf("target 2 (issue 12): TLS handoff %.1f <= 1.1 x (plain handoff %.1f + bare TLS-plain "
           "PING %.1f) = %.1f: %s (TLS handoff / bound %.3f)\n",
           q(&e[1], 0.5), q(&e[0], 0.5), tls_extra, bound,
           q(&e[1], 0.5) <= bound ? "PASS" : "MISS", q(&e[1], 0.5) / bound);

    rs__ctx_free(pctx);
    rs__ctx_free(tctx);
    rs_mutex_destroy(pm);
    rs_mutex_destroy(tm);
    for (int side = 0; side < 2; side++) {
        rs_mutex_destroy(ho[side].m[0]);
        rs_mutex_destroy(ho[side].m[1]);
        free(ho[side].lock_ret), free(ho[side].unlock_ret);
        bare_close(&bare[side]);
    }
    SSL_CTX_free(sctx);
    rs_client_close(pc);
    rs_client_close(tc);
    rs_client_close(pc2);
    rs_client_close(tc2);
    for (int i = 0; i < 2; i++)
        free(a[i].v), free(b[i].v), free(cn[i].v), free(d[i].v), free(dp[i].v), free(e[i].v);
    ts_server_stop(&srv);
    tt_certs_free(&certs);
    return 0;
}
