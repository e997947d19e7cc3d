/*
 * cluster.c - loading the Redis Cluster slot map (slotmap.c) with CLUSTER SLOTS.
 *
 * rs__cluster_refresh asks the nodes of the table in turn (a short budget each, so a dead
 * node does not eat the caller's timeout) and applies the first answer: every slot range to
 * its master's index, and whether every master is Redis 7.0 or later (7.0 added a fourth
 * field to each node CLUSTER SLOTS lists): sharded wake-ups then (rs__cluster_sharded). It
 * dials through conn.c, so it sits above it; the map itself is below.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Applies a CLUSTER SLOTS reply. */
static int apply_slots(rs_client_t *c, const redisReply *r, const rs_node_t *asked)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    int v7 = r->elements > 0; /* every master listed with 7.0's fourth field */
    pthread_mutex_lock(&c->cl.mu);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
            e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            continue;
        const redisReply *m = e->element[2];
        if (m->elements < 4)
            v7 = 0;
        const char *host = m->element[0]->str;
        size_t hlen = m->element[0]->len;
        if (hlen == 0 || strcmp(host, "?") == 0) /* "the node you asked" */
            host = asked->host, hlen = strlen(asked->host);
        int idx = rs__cluster_node_index_locked(c, host, hlen, (int)m->element[1]->integer);
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        if (idx < 0 || lo < 0 || hi > 16383)
            continue;
        for (long long s = lo; s <= hi; s++)
            c->cl.slot[s] = (uint8_t)(idx + 1);
    }
    c->cl.stale = 0;
    c->cl.refreshed_ns = rs__now_ns();
    int sharded = v7 && !c->cl.classic_forced;
    int was = atomic_exchange(&c->cl.sharded, sharded);
    int first = !c->cl.detected;
    c->cl.detected = 1;
    pthread_mutex_unlock(&c->cl.mu);
    if (first || was != sharded)
        rs__log(c, RS_LOG_INFO, "cluster: %s", sharded ? "every master is Redis >= 7.0: "
                "sharded wake-ups (SPUBLISH/SSUBSCRIBE)" : c->cl.classic_forced && v7
                ? "classic wake-ups (PUBLISH), forced by REDISYNC_CLUSTER_PUBSUB=classic"
                : "a master older than Redis 7.0: classic wake-ups (PUBLISH)");
    return 0;
}

int rs__cluster_refresh_due(rs_client_t *c)
{
    pthread_mutex_lock(&c->cl.mu);
    int due = c->cl.stale && rs__now_ns() - c->cl.refreshed_ns > 100 * RS_NS_PER_MS;
    pthread_mutex_unlock(&c->cl.mu);
    return due;
}

int rs__cluster_refresh(rs_client_t *c, int force, long timeout_ms)
{
    return rs__cluster_refresh_stop(c, force, timeout_ms, NULL, NULL);
}

int rs__cluster_refresh_stop(rs_client_t *c, int force, long timeout_ms, int (*stop)(void *),
                             void *arg)
{
    if (!force && !rs__cluster_refresh_due(c))
        return 0;
    int n = rs__cluster_nnodes(c);
    int rc = RS_ECONN;
    for (int i = 0; i < n && rc != 0 && !(stop && stop(arg)); i++) {
        rs_node_t node;
        if (rs__cluster_node(c, i, &node) != 0)
            continue;
        /* a short budget per node: a dead node must not eat the caller's whole timeout */
        long budget = timeout_ms < 300 ? timeout_ms : 300;
        redisContext *ctx;
        if (rs__conn_connect_to(c, i, rs__now_ns() + (uint64_t)budget * RS_NS_PER_MS, budget,
                                &ctx) != 0)
            continue;
        const char *argv[2] = {"CLUSTER", "SLOTS"};
        size_t lens[2] = {7, 5};
        redisReply *r;
        if (rs__ctx_command(ctx, 2, argv, lens, &r) == 0) {
            if (r->type == REDIS_REPLY_ERROR)
                rc = rs__fail(c, RS_ESERVER, "CLUSTER SLOTS refused by %s:%d: %s", node.host,
                              node.port, r->str);
            else if (apply_slots(c, r, &node) == 0)
                rc = 0;
            freeReplyObject(r);
        }
        rs__ctx_free(ctx);
    }
    return rc;
}
