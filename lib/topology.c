/*
 * topology.c - the one place that knows where the client's data lives.
 *
 * rs__conn_connect asks rs__topo_target where to connect every time it opens a connection
 * (pool, watchdog, notifier), and rs__topo_check whether the node it reached is the right
 * one. So after a failover every new connection goes to the CURRENT master, whoever opens it.
 *
 *   single   (redis://, unix://)   the URL's server; nothing to check.
 *   sentinel (redis-sentinel://)   SENTINEL get-master-addr-by-name MASTER, asked of each
 *                                  sentinel in turn (starting with the one that answered
 *                                  last); the node reached must say ROLE master (a sentinel
 *                                  may still name the old master for a moment during a
 *                                  failover: then the next sentinel is asked first).
 *   cluster  (redis-cluster://)    a node of slotmap.c's table, chosen by the caller (the
 *                                  master of a key's slot) or in turn; nothing to check
 *                                  (MOVED/ASK replies redirect, see script.c).
 *   redlock  (redlock://)          master number node of the URL (redlock.c talks to each
 *                                  by number), or in turn for node < 0 (inspection reads
 *                                  one master's view); nothing to check.
 *
 * The address a +switch-master announces is kept as a hint and tried before any sentinel is
 * asked: a sentinel that has not yet heard of the switch names the old master, which still
 * answers ROLE master for the seconds until it is demoted, and a connection that went there
 * (the notifier's above all: it sends nothing that would fail) would serve a master nobody
 * else uses. The hint is dropped when the node it names is not a master.
 *
 * A failover is noticed when a sentinel announces +switch-master (one watcher thread per
 * client, subscribed on one sentinel at a time), when a connection breaks (Sentinel kills
 * the old master's clients when it demotes it, which it does only seconds after the switch),
 * when WAIT falls short (the promoted replica left the old master) or when a reply says
 * READONLY / MASTERDOWN: the caller then calls
 * rs__topo_changed, which bumps a generation so that every pooled connection opened before
 * is dropped instead of reused, and retries within timeout_ms (script.c, watchdog.c).
 * Adding a mode: a case in rs__topo_target and rs__topo_check, and the URL in url.c.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "internal.h"

int rs__rl_quorum(const rs_client_t *c)
{
    return c->ep.nseeds / 2 + 1;
}

unsigned rs__topo_gen(rs_client_t *c)
{
    return atomic_load(&c->topo_gen);
}

void rs__topo_changed(rs_client_t *c)
{
    if (c->ep.mode == RS_MODE_SENTINEL) {
        atomic_fetch_add(&c->topo_gen, 1);
        rs__log(c, RS_LOG_INFO, "topology changed: reconnecting to the current master");
        if (c->topo_hook)
            c->topo_hook(c);
    }
}

int rs__is_topology_error(const rs_client_t *c, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR || c->ep.mode != RS_MODE_SENTINEL)
        return 0;
    /* NOREPLICAS: a master cut off from its replicas, which the sentinels may have
     * replaced already (split brain): ask them again */
    return strncmp(r->str, "READONLY", 8) == 0 || strncmp(r->str, "MASTERDOWN", 10) == 0 ||
           strncmp(r->str, "NOREPLICAS", 10) == 0;
}

/* A connection to sentinel s within timeout_ms (TLS included). 0, or rs__dial's failure
 * (-1: the network, worth a retry; RS_ECONN: TLS; ENOMEM) with why set. */
static int dial_sentinel(rs_client_t *c, const rs_node_t *s, long timeout_ms, redisContext **ctx,
                         char *why, size_t whylen)
{
    char w[200];
    int rc = rs__dial(c, s, rs__now_ns() + (uint64_t)timeout_ms * RS_NS_PER_MS, ctx, w, sizeof w);
    if (rc != 0)
        snprintf(why, whylen, "sentinel %s:%d: %.150s", s->host, s->port, w);
    return rc;
}

/* One sentinel's answer for the master, connect and reply within timeout_ms in all. 0 with
 * out filled, else -1 with why set. */
static int ask_sentinel(rs_client_t *c, const rs_node_t *s, long timeout_ms, rs_node_t *out,
                        char *why, size_t whylen)
{
    redisContext *ctx;
    uint64_t end = rs__now_ns() + (uint64_t)timeout_ms * RS_NS_PER_MS;
    if (dial_sentinel(c, s, timeout_ms, &ctx, why, whylen) != 0)
        return -1;
    uint64_t now = rs__now_ns();
    long left = now < end ? (long)((end - now) / RS_NS_PER_MS) : 0;
    rs__tp_set_timeout(ctx, left > 0 ? left : 1);
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", c->ep.master};
    size_t lens[3] = {8, 23, strlen(c->ep.master)};
    redisReply *r;
    int rc = -1;
    if (rs__ctx_command(ctx, 3, argv, lens, &r) != 0) {
        snprintf(why, whylen, "sentinel %s:%d: %s", s->host, s->port,
                 ctx->errstr[0] ? ctx->errstr : "connection lost");
    } else {
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
            r->element[0]->len < sizeof out->host) {
            snprintf(out->host, sizeof out->host, "%s", r->element[0]->str);
            out->port = atoi(r->element[1]->str);
            rc = out->port > 0 ? 0 : -1;
        }
        if (rc != 0)
            snprintf(why, whylen, "sentinel %s:%d does not know master \"%.64s\"%s%.80s", s->host,
                     s->port, c->ep.master, r->type == REDIS_REPLY_ERROR ? ": " : "",
                     r->type == REDIS_REPLY_ERROR ? r->str : "");
        freeReplyObject(r);
    }
    rs__ctx_free(ctx);
    return rc;
}

int rs__topo_target(rs_client_t *c, int node, long timeout_ms, rs_node_t *out, char *why,
                    size_t whylen)
{
    const rs_endpoint_t *ep = &c->ep;
    if (ep->mode == RS_MODE_CLUSTER) {
        int n = rs__cluster_nnodes(c);
        if (node < 0 && n > 0)
            node = (int)(atomic_fetch_add(&c->topo_next, 1) % (unsigned)n);
        if (rs__cluster_node(c, node, out) == 0)
            return 0;
        snprintf(why, whylen, "no such cluster node");
        return RS_ECONN;
    }
    if (ep->mode == RS_MODE_REDLOCK) {
        if (node < 0)
            node = (int)(atomic_fetch_add(&c->topo_next, 1) % (unsigned)ep->nseeds);
        if (node >= ep->nseeds) {
            snprintf(why, whylen, "no such redlock master");
            return RS_ECONN;
        }
        *out = ep->seeds[node];
        return 0;
    }
    if (ep->mode == RS_MODE_SINGLE) {
        snprintf(out->host, sizeof out->host, "%s", ep->host);
        out->port = ep->port;
        return 0;
    }
    if (c->sw.inited) {
        pthread_mutex_lock(&c->sw.mu);
        int have = c->sw.has_hint;
        if (have)
            *out = c->sw.hint;
        pthread_mutex_unlock(&c->sw.mu);
        if (have)
            return 0;
    }
    /* timeout_ms is for the whole lookup, not for each sentinel: sentinels that cannot be
     * reached (black-holed: no RST) would otherwise cost timeout_ms each, and a caller's
     * deadline, the watchdog's included, would pass before the lookup gives up. Each
     * sentinel gets an equal share of what is left; the next lookup starts after the last
     * one asked, so one silent sentinel does not take every lookup's first share */
    unsigned start = atomic_load(&c->topo_next);
    uint64_t end = rs__now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1) * RS_NS_PER_MS;
    int asked = 0;
    for (int i = 0; i < ep->nseeds; i++) {
        uint64_t now = rs__now_ns();
        if (i > 0 && now >= end)
            break;
        long left = now < end ? (long)((end - now) / RS_NS_PER_MS) : 1;
        long share = left / (ep->nseeds - i);
        unsigned idx = (start + (unsigned)i) % (unsigned)ep->nseeds;
        asked++;
        if (ask_sentinel(c, &ep->seeds[idx], share > 0 ? share : 1, out, why, whylen) == 0) {
            atomic_store(&c->topo_next, idx);
            return 0;
        }
    }
    atomic_store(&c->topo_next, (start + (unsigned)asked) % (unsigned)ep->nseeds);
    return RS_ECONN;
}

/* Drops the +switch-master hint if it names node (which turned out not to be a master). */
static void forget_hint(rs_client_t *c, const rs_node_t *node)
{
    if (!c->sw.inited)
        return;
    pthread_mutex_lock(&c->sw.mu);
    if (c->sw.has_hint && c->sw.hint.port == node->port &&
        strcmp(c->sw.hint.host, node->host) == 0)
        c->sw.has_hint = 0;
    pthread_mutex_unlock(&c->sw.mu);
}

/* "NAME OLDIP OLDPORT NEWIP NEWPORT" (mlen: NAME's length) -> the hint. */
static void take_hint(rs_client_t *c, const char *msg, size_t mlen)
{
    char oldip[64], newip[sizeof c->sw.hint.host];
    int oldport, newport;
    char fmt[48];
    snprintf(fmt, sizeof fmt, "%%63s %%d %%%zus %%d", sizeof newip - 1);
    if (sscanf(msg + mlen + 1, fmt, oldip, &oldport, newip, &newport) != 4 || newport <= 0)
        return;
    pthread_mutex_lock(&c->sw.mu);
    snprintf(c->sw.hint.host, sizeof c->sw.hint.host, "%s", newip);
    c->sw.hint.port = newport;
    c->sw.has_hint = 1;
    pthread_mutex_unlock(&c->sw.mu);
}

int rs__topo_check(rs_client_t *c, redisContext *ctx, const rs_node_t *node, char *why,
                   size_t whylen)
{
    if (c->ep.mode != RS_MODE_SENTINEL)
        return 0;
    const char *argv[1] = {"ROLE"};
    size_t lens[1] = {4};
    redisReply *r;
    if (rs__ctx_command(ctx, 1, argv, lens, &r) != 0) {
        snprintf(why, whylen, "connection to %s:%d dropped", node->host, node->port);
        return RS_ECONN;
    }
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;
    if (!ok) {
        snprintf(why, whylen, "%s:%d named by the sentinels is not a master (%.40s)", node->host,
                 node->port,
                 r->type == REDIS_REPLY_ERROR ? r->str
                 : r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                         r->element[0]->type == REDIS_REPLY_STRING
                     ? r->element[0]->str
                     : "unexpected ROLE reply");
        /* ask another sentinel first next time: this one may lag behind the failover */
        atomic_fetch_add(&c->topo_next, 1);
        forget_hint(c, node);
    }
    freeReplyObject(r);
    return ok ? 0 : RS_ECONN;
}

/* ----- the +switch-master watcher ---------------------------------------------------- */

static void *watch_main(void *arg)
{
    rs_client_t *c = arg;
    const rs_endpoint_t *ep = &c->ep;
    size_t mlen = strlen(ep->master);
    unsigned next = 0;
    long backoff_ms = 50;
    int watched = 0;
    pthread_mutex_lock(&c->sw.mu);
    while (!c->sw.stop) {
        pthread_mutex_unlock(&c->sw.mu);
        const rs_node_t *s = &ep->seeds[next++ % (unsigned)ep->nseeds];
        long ms = c->timeout_ms < 1000 ? c->timeout_ms : 1000;
        redisContext *ctx = NULL;
        char why[200];
        int drc = dial_sentinel(c, s, ms, &ctx, why, sizeof why), ok = drc == 0;
        if (drc != 0 && drc != -1) /* TLS refused: a retry will not cure it, say so */
            rs__log(c, RS_LOG_WARN, "%s", why);
        redisReply *r = NULL;
        if (ok) {
            rs__tp_set_timeout(ctx, ms);
            const char *argv[2] = {"SUBSCRIBE", "+switch-master"};
            size_t lens[2] = {9, 14};
            ok = rs__ctx_command(ctx, 2, argv, lens, &r) == 0 && r->type == REDIS_REPLY_ARRAY;
            if (r)
                freeReplyObject(r);
        }
        pthread_mutex_lock(&c->sw.mu);
        if (ok && !c->sw.stop) {
            rs__tp_set_timeout(ctx, 0);
            c->sw.fd = ctx->fd;
            backoff_ms = 50;
            pthread_mutex_unlock(&c->sw.mu);
            /* a switch may have happened while no sentinel was watched */
            if (watched)
                rs__topo_changed(c);
            watched = 1;
            while (rs__ctx_read(ctx, &r) == 0) {
                /* "message" "+switch-master" "NAME OLDIP OLDPORT NEWIP NEWPORT" */
                if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                    r->element[2]->type == REDIS_REPLY_STRING && r->element[2]->len > mlen &&
                    memcmp(r->element[2]->str, ep->master, mlen) == 0 &&
                    r->element[2]->str[mlen] == ' ') {
                    rs__log(c, RS_LOG_INFO, "sentinel: +switch-master %s", r->element[2]->str);
                    take_hint(c, r->element[2]->str, mlen);
                    rs__topo_changed(c);
                }
                freeReplyObject(r);
            }
            pthread_mutex_lock(&c->sw.mu);
            c->sw.fd = -1;
        }
        if (ctx)
            rs__ctx_free(ctx);
        if (c->sw.stop)
            break;
        uint64_t until = rs__now_ns() + (uint64_t)backoff_ms * RS_NS_PER_MS;
        rs__cv_wait_until(&c->sw.cv, &c->sw.mu, until);
        if (backoff_ms < 1000)
            backoff_ms *= 2;
    }
    pthread_mutex_unlock(&c->sw.mu);
    return NULL;
}

int rs__topo_start(rs_client_t *c)
{
    if (c->ep.mode != RS_MODE_SENTINEL)
        return 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->sw.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->sw.mu, NULL);
    c->sw.fd = -1;
    c->sw.inited = 1;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->sw.thread, NULL, watch_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return rs__fail(c, EAGAIN, "cannot start the sentinel watcher thread");
    c->sw.started = 1;
    return 0;
}

void rs__topo_stop(rs_client_t *c)
{
    if (!c->sw.inited)
        return;
    pthread_mutex_lock(&c->sw.mu);
    c->sw.stop = 1;
    if (c->sw.fd >= 0)
        shutdown(c->sw.fd, SHUT_RDWR);
    pthread_cond_broadcast(&c->sw.cv);
    pthread_mutex_unlock(&c->sw.mu);
    if (c->sw.started)
        pthread_join(c->sw.thread, NULL);
    c->sw.started = 0;
}

void rs__topo_free(rs_client_t *c)
{
    if (!c->sw.inited || rs__forked(c))
        return;
    pthread_mutex_destroy(&c->sw.mu);
    pthread_cond_destroy(&c->sw.cv);
    c->sw.inited = 0;
}
