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
 *      the session resumed (what a reconnect after a failover costs per connection).
 * Medians and p99 in microseconds; the ratios TLS/plain. Usage: redisync-bench-tls [CYCLES]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
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

    samples_t a[2], b[2], cn[2];
    for (int i = 0; i < 2; i++) {
        a[i].v = calloc((size_t)cycles, sizeof(double)), a[i].n = 0;
        b[i].v = calloc((size_t)cycles, sizeof(double)), b[i].n = 0;
        cn[i].v = calloc((size_t)cycles, sizeof(double)), cn[i].n = 0;
    }
    /* warm-up: scripts loaded, watchdogs started, pools filled */
    for (int i = 0; i < 200; i++) {
        rs_mutex_lock(pm), rs_mutex_unlock(pm), rs_mutex_lock(tm), rs_mutex_unlock(tm);
        ping(pctx), ping(tctx);
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
        }
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
    printf("b/a over TLS: %.2f round trips' worth per lock+unlock (plain: %.2f)\n",
           q(&b[1], 0.5) / q(&a[1], 0.5), q(&b[0], 0.5) / q(&a[0], 0.5));

    rs__ctx_free(pctx);
    rs__ctx_free(tctx);
    rs_mutex_destroy(pm);
    rs_mutex_destroy(tm);
    rs_client_close(pc);
    rs_client_close(tc);
    for (int i = 0; i < 2; i++)
        free(a[i].v), free(b[i].v), free(cn[i].v);
    ts_server_stop(&srv);
    tt_certs_free(&certs);
    return 0;
}
