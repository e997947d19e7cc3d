/*
 * conn.c - every hiredis connection the library opens goes through here.
 *
 * - rs__conn_connect: a socket to where topology.c says (the URL's server or the current
 *   master), dialled by dial.c (close-on-exec, TCP options, TLS) and bounded by a deadline
 *   (refused connects are retried with a short back-off, so a Redis restart shorter than the
 *   deadline is invisible), then a socket timeout for later I/O, AUTH and SELECT.
 * - A small pool of idle connections per client: callers check one out for one command and
 *   give it back, so no library lock is held across a round trip and a context belongs to one
 *   thread at a time (hiredis contexts are not thread-safe).
 * - Commands and replies go through wire.c, below this file.
 * - TLS (c->tls): the handshake follows the TCP connect within the same budget; a TLS
 *   failure (verification, a plain server, a refused client certificate) is final, never
 *   retried and never answered by a plain-text connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define RS_POOL_IDLE_MAX 8

/* AUTH and SELECT on a fresh context. 0, RS_ECONN (I/O: retry), RS_ESERVER (refused). */
static int handshake(rs_client_t *c, redisContext *ctx, const char *where, uint64_t end,
                     int *transient)
{
    const rs_endpoint_t *ep = &c->ep;
    redisReply *r;
    *transient = 0;
    if (ep->has_pass) {
        const char *argv[3];
        size_t lens[3];
        int n = 0;
        argv[n] = "AUTH", lens[n++] = 4;
        if (ep->user[0])
            argv[n] = ep->user, lens[n++] = strlen(ep->user);
        argv[n] = ep->pass, lens[n++] = strlen(ep->pass);
        if (rs__ctx_timeout_until(ctx, end) || rs__ctx_command(ctx, n, argv, lens, &r) != 0)
            return RS_ECONN;
        if (r->type == REDIS_REPLY_ERROR) {
            *transient = strncmp(r->str, "LOADING", 7) == 0;
            int rc = rs__fail(c, RS_ESERVER, "AUTH refused by %s: %s", where, r->str);
            freeReplyObject(r);
            return rc;
        }
        freeReplyObject(r);
    }
    if (!ep->has_pass && ep->db == 0) {
        /* nothing else went out: one PING proves the peer is a Redis that lets us in */
        const char *argv[1] = {"PING"};
        size_t lens[1] = {4};
        if (rs__ctx_timeout_until(ctx, end) || rs__ctx_command(ctx, 1, argv, lens, &r) != 0)
            return RS_ECONN;
        if (r->type == REDIS_REPLY_ERROR) {
            *transient = strncmp(r->str, "LOADING", 7) == 0;
            int rc = rs__fail(c, RS_ESERVER, "Redis refused us: %s", r->str);
            freeReplyObject(r);
            return rc;
        }
        freeReplyObject(r);
    }
    if (ep->db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", ep->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};
        if (rs__ctx_timeout_until(ctx, end) || rs__ctx_command(ctx, 2, argv, lens, &r) != 0)
            return RS_ECONN;
        if (r->type == REDIS_REPLY_ERROR) {
            *transient = strncmp(r->str, "LOADING", 7) == 0;
            int rc = rs__fail(c, RS_ESERVER, "SELECT %d refused: %s", ep->db, r->str);
            freeReplyObject(r);
            return rc;
        }
        freeReplyObject(r);
    }
    return 0;
}

int rs__conn_connect(rs_client_t *c, uint64_t deadline_ns, long io_timeout_ms, redisContext **out)
{
    return rs__conn_connect_to(c, -1, deadline_ns, io_timeout_ms, out);
}

/* A plain connection's first reply began with a TLS record (0x15 alert, 0x16 handshake):
 * the port speaks TLS. */
static int tls_answer(const redisContext *ctx)
{
    return !rs__tp_is_tls(ctx) && ctx->err == REDIS_ERR_PROTOCOL &&
           (strstr(ctx->errstr, "\\x15") || strstr(ctx->errstr, "\\x16"));
}

/* One connection attempt to target (see rs__topo_target) within ct ms. 0 with *out set; -1:
 * failed in a way worth retrying (last says why); else a final error code (bad password...). */
static int connect_attempt(rs_client_t *c, int target, long ct, long io_timeout_ms,
                           rs_node_t *node, char *last, size_t lastlen, redisContext **out)
{
    const rs_endpoint_t *ep = &c->ep;
    redisContext *ctx = NULL;
    uint64_t end = rs__now_ns() + (uint64_t)ct * RS_NS_PER_MS;
    *out = NULL;
    if (!ep->unix_socket && rs__topo_target(c, target, ct, node, last, lastlen) != 0)
        return -1; /* no sentinel answered: last says why */
    char why[200];
    int drc = rs__dial(c, ep->unix_socket ? NULL : node, end, &ctx, why, sizeof why);
    if (drc == ENOMEM)
        return rs__fail(c, ENOMEM, "out of memory connecting to Redis");
    if (drc == -1) {
        snprintf(last, lastlen, "%s", why);
        return -1;
    }
    if (drc != 0)
        return rs__fail(c, drc, "TLS to %s:%d: %s", node->host, node->port, why);
    /* the whole attempt, connect, TLS and handshake, within ct (each command gets what is
     * left), also for connections that later block forever (the subscriber): a stalled
     * server must not wedge a connect */
    int transient = 0;
    int rc = handshake(c, ctx, ep->unix_socket ? ep->path : node->host, end, &transient);
    if (rc == RS_ECONN && !ep->unix_socket && (rs__tp_fatal(ctx) || tls_answer(ctx))) {
        /* refused by TLS after the handshake (TLS 1.3 checks the client's certificate
         * then), or a TLS server answering plain text: final */
        rc = rs__fail(c, RS_ECONN, "%s to %s:%d: %s", c->tls ? "TLS" : "plain connection",
                      node->host, node->port, c->tls ? ctx->errstr
                      : "server speaks TLS, not plain RESP (use rediss:// or tls=1)");
        rs__ctx_free(ctx);
        return rc;
    }
    if (rc == 0 && !ep->unix_socket) {
        rc = rs__ctx_timeout_until(ctx, end) ? RS_ECONN
                                              : rs__topo_check(c, ctx, node, last, lastlen);
        if (rc == RS_ECONN)
            transient = 1, rc = -1; /* not the master (yet): ask again */
    }
    if (rc == 0) {
        rs__tp_set_timeout(ctx, io_timeout_ms > 0 ? io_timeout_ms : 0);
        if (c->log) {
            /* what redisync -v shows: where each connection goes and whether it is encrypted */
            char how[128];
            rs__tp_describe(ctx, how, sizeof how);
            if (ep->unix_socket)
                rs__log(c, RS_LOG_INFO, "connected to unix:%s", ep->path);
            else
                rs__log(c, RS_LOG_INFO, "connected to %s:%d over %s%s", node->host, node->port,
                        how, rs__tp_reused(ctx) ? " (TLS session resumed)" : "");
        }
        *out = ctx;
        return 0;
    }
    /* a TLS-only port resets a plain client at its first command; a plain Redis never does */
    int reset = rc == RS_ECONN && !c->tls && ctx->err == REDIS_ERR_IO && !ep->unix_socket &&
                strstr(ctx->errstr, "reset");
    rs__ctx_free(ctx);
    if (rc != RS_ECONN && rc != -1 && !transient)
        return rc;
    if (rc != -1)
        snprintf(last, lastlen, "%s", reset ? "the server reset the connection at the first "
                 "command (a TLS-only port does: use rediss:// or tls=1)"
                 : rc == RS_ECONN ? "connection dropped" : "server loading");
    return -1;
}

/* budget_ms: what the caller gave the connect (not always timeout_ms: the watchdog's is
 * up to its holds' deadlines) */
static int unreachable(rs_client_t *c, const rs_node_t *node, const char *last, long budget_ms)
{
    const rs_endpoint_t *ep = &c->ep;
    if (ep->unix_socket)
        return rs__fail(c, RS_ECONN, "cannot reach Redis at unix:%s within %ld ms: %s", ep->path,
                        budget_ms, last);
    if (ep->mode == RS_MODE_CLUSTER)
        return rs__fail(c, RS_ECONN, "cannot reach cluster node %s:%d within %ld ms: %s",
                        node->host, node->port, budget_ms, last);
    if (ep->mode == RS_MODE_REDLOCK)
        return rs__fail(c, RS_ECONN, "cannot reach redlock master %s:%d: %s", node->host,
                        node->port, last);
    if (ep->mode == RS_MODE_SENTINEL)
        return rs__fail(c, RS_ECONN, "cannot reach master \"%s\" through %d sentinel(s) within "
                        "%ld ms: %s", ep->master, ep->nseeds, budget_ms, last);
    return rs__fail(c, RS_ECONN, "cannot reach Redis at %s:%d within %ld ms: %s", ep->host,
                    ep->port, budget_ms, last);
}

int rs__conn_connect_to(rs_client_t *c, int target, uint64_t deadline_ns, long io_timeout_ms,
                        redisContext **out)
{
    return rs__conn_connect_retry(c, target, deadline_ns, io_timeout_ms, NULL, NULL, out);
}

int rs__conn_connect_retry(rs_client_t *c, int target, uint64_t deadline_ns, long io_timeout_ms,
                           rs_retry_fn between, void *arg, redisContext **out)
{
    uint64_t backoff_ms = 5;
    char last[200] = "timed out";
    rs_node_t node = {"?", 0};
    *out = NULL;
    uint64_t start = rs__now_ns();
    long budget_ms = deadline_ns > start ? (long)((deadline_ns - start + RS_NS_PER_MS / 2) /
                                                  RS_NS_PER_MS) : 0;
    for (;;) {
        uint64_t now = rs__now_ns();
        if (now < deadline_ns) {
            long left_ms = (long)((deadline_ns - now) / RS_NS_PER_MS);
            if (left_ms < 1)
                left_ms = 1;
            long ct = left_ms < c->timeout_ms ? left_ms : c->timeout_ms;
            int rc = connect_attempt(c, target, ct, io_timeout_ms, &node, last, sizeof last, out);
            if (rc != -1)
                return rc;
        } else if (!between) {
            break;
        }
        if (between && !(deadline_ns = between(arg)))
            break;
        now = rs__now_ns();
        if (now >= deadline_ns) {
            if (!between)
                break;
            continue; /* the next deadline is already here: ask between again */
        }
        uint64_t nap = backoff_ms * RS_NS_PER_MS;
        if (nap > deadline_ns - now)
            nap = deadline_ns - now;
        rs__sleep_ns(nap);
        if (backoff_ms < 100)
            backoff_ms *= 2;
    }
    return unreachable(c, &node, last, budget_ms);
}

int rs__conn_connect_once(rs_client_t *c, int node, long budget_ms, long io_timeout_ms,
                          redisContext **out)
{
    char last[200] = "timed out";
    rs_node_t where = {"?", 0};
    int rc = connect_attempt(c, node, budget_ms > 0 ? budget_ms : 1, io_timeout_ms, &where, last,
                             sizeof last, out);
    return rc == -1 ? unreachable(c, &where, last, budget_ms) : rc;
}

rs_conn_t *rs__conn_take_idle(rs_client_t *c, int node)
{
    pthread_mutex_lock(&c->pool_mu);
    rs_conn_t **p = &c->idle;
    while (*p && node >= 0 && (*p)->node != node)
        p = &(*p)->next;
    rs_conn_t *k = *p;
    if (k) {
        *p = k->next;
        c->nidle--;
    }
    pthread_mutex_unlock(&c->pool_mu);
    return k;
}

/* The pool's record of a connection just opened to node (generation gen); ctx is freed if
 * there is no memory for it. */
static int conn_record(rs_client_t *c, int node, unsigned gen, redisContext *ctx, rs_conn_t **out)
{
    rs_conn_t *k = calloc(1, sizeof *k);
    if (!k) {
        rs__ctx_free(ctx);
        return rs__fail(c, ENOMEM, "out of memory");
    }
    k->gen = gen;
    k->node = node;
    k->ctx = ctx;
    *out = k;
    return 0;
}

int rs__conn_get_once(rs_client_t *c, int node, long budget_ms, rs_conn_t **out)
{
    *out = rs__conn_take_idle(c, node);
    if (*out)
        return 0;
    unsigned gen = rs__topo_gen(c);
    redisContext *ctx;
    int rc = rs__conn_connect_once(c, node, budget_ms, c->timeout_ms, &ctx);
    return rc ? rc : conn_record(c, node, gen, ctx, out);
}

int rs__conn_get(rs_client_t *c, uint64_t deadline_ns, rs_conn_t **out)
{
    return rs__conn_get_node(c, -1, deadline_ns, out);
}

int rs__conn_get_node(rs_client_t *c, int node, uint64_t deadline_ns, rs_conn_t **out)
{
    unsigned gen = rs__topo_gen(c);
    if (c->ep.mode != RS_MODE_CLUSTER && c->ep.mode != RS_MODE_REDLOCK)
        node = -1;
    rs_conn_t *k;
    while ((k = rs__conn_take_idle(c, node)) != NULL) {
        if (k->gen == gen) {
            *out = k;
            return 0;
        }
        rs__ctx_free(k->ctx); /* opened before the master moved */
        free(k);
    }
    redisContext *ctx;
    int rc = rs__conn_connect_to(c, node, deadline_ns, c->timeout_ms, &ctx);
    return rc ? rc : conn_record(c, node, gen, ctx, out);
}

void rs__conn_put(rs_client_t *c, rs_conn_t *k, int broken)
{
    if (!k)
        return;
    if (!broken && k->ctx && !k->ctx->err && k->gen == rs__topo_gen(c)) {
        pthread_mutex_lock(&c->pool_mu);
        int cap = RS_POOL_IDLE_MAX * (c->ep.mode == RS_MODE_CLUSTER   ? 4
                                      : c->ep.mode == RS_MODE_REDLOCK ? c->ep.nseeds
                                                                      : 1);
        if (c->nidle < cap) {
            k->next = c->idle;
            c->idle = k;
            c->nidle++;
            k = NULL;
        }
        pthread_mutex_unlock(&c->pool_mu);
    }
    if (k) {
        if (k->ctx)
            rs__ctx_free(k->ctx);
        free(k);
    }
}

void rs__conn_pool_free(rs_client_t *c)
{
    pthread_mutex_lock(&c->pool_mu);
    rs_conn_t *k = c->idle;
    c->idle = NULL;
    c->nidle = 0;
    pthread_mutex_unlock(&c->pool_mu);
    while (k) {
        rs_conn_t *next = k->next;
        rs__ctx_free(k->ctx);
        free(k);
        k = next;
    }
}
