/*
 * slotmap.c - the Redis Cluster slot map: which master serves a key.
 *
 * The client keeps an append-only table of the nodes it has heard of (seeds from the URL,
 * masters from CLUSTER SLOTS, targets of MOVED/ASK; an index into it never changes, so
 * pooled connections and the watchdog's contexts are kept per index) and, per slot, the
 * index of the master that serves it. cluster.c loads the map with CLUSTER SLOTS at open and
 * again after a MOVED or a broken connection (at most every 100 ms); a MOVED reply also fixes
 * its own slot at once (rs__cluster_redirect, here). This file opens no connection: it sits
 * below conn.c and topology.c, which ask it where a node is.
 * Routing is CRC16 (XMODEM) of the key's hash tag modulo 16384, as in the Cluster spec; all
 * keys of one primitive share the tag {NAME} (keys.c), so one script call goes to one node.
 *
 * Who uses it: script.c routes each call by its first key and follows MOVED (update, retry)
 * and ASK (ASKING + the call on the named node, once); watchdog.c groups a round's renewals
 * per node; the classic subscriber and inspection connections go to any node (a PUBLISH
 * from a script reaches subscribers on every node), the sharded subscribers (notify_shard.c)
 * to the master of their channel's slot.
 *
 * Sharded wake-ups need every master to be Redis 7.0 or later (SPUBLISH, SSUBSCRIBE): each
 * CLUSTER SLOTS reply tells, since 7.0 added a fourth field (networking metadata) to every
 * node it lists. rs__cluster_sharded says whether the last reply showed only such masters
 * (and REDISYNC_CLUSTER_PUBSUB=classic, read at open and meant for tests, did not force
 * PUBLISH); a change is logged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

const char *rs__hash_tag(const char *key, size_t len, size_t *taglen)
{
    const char *open = memchr(key, '{', len);
    if (!open)
        return NULL;
    const char *close = memchr(open + 1, '}', len - (size_t)(open - key) - 1);
    if (!close || close == open + 1)
        return NULL;
    *taglen = (size_t)(close - open - 1);
    return open + 1;
}

unsigned rs__cluster_slot(const char *key, size_t len)
{
    size_t tl;
    const char *tag = rs__hash_tag(key, len, &tl);
    return tag ? crc16(tag, tl) & 16383 : crc16(key, len) & 16383;
}

int rs__cluster_node_index_locked(rs_client_t *c, const char *host, size_t hlen, int port)
{
    for (int i = 0; i < c->cl.nnodes; i++)
        if (c->cl.nodes[i].port == port && strlen(c->cl.nodes[i].host) == hlen &&
            memcmp(c->cl.nodes[i].host, host, hlen) == 0)
            return i;
    if (c->cl.nnodes == RS_NODES_MAX || hlen >= sizeof c->cl.nodes[0].host)
        return -1;
    rs_node_t *n = &c->cl.nodes[c->cl.nnodes];
    memcpy(n->host, host, hlen);
    n->host[hlen] = '\0';
    n->port = port;
    return c->cl.nnodes++;
}

void rs__cluster_init(rs_client_t *c)
{
    pthread_mutex_init(&c->cl.mu, NULL);
    const char *pubsub = getenv("REDISYNC_CLUSTER_PUBSUB");
    c->cl.classic_forced = pubsub && strcmp(pubsub, "classic") == 0;
    atomic_store(&c->cl.sharded, 0);
    for (int i = 0; i < c->ep.nseeds; i++)
        rs__cluster_node_index_locked(c, c->ep.seeds[i].host, strlen(c->ep.seeds[i].host),
                                      c->ep.seeds[i].port);
    c->cl.inited = 1;
}

void rs__cluster_free(rs_client_t *c)
{
    if (c->cl.inited && !rs__forked(c))
        pthread_mutex_destroy(&c->cl.mu);
    c->cl.inited = 0;
}

int rs__cluster_node(rs_client_t *c, int idx, rs_node_t *out)
{
    pthread_mutex_lock(&c->cl.mu);
    int ok = idx >= 0 && idx < c->cl.nnodes;
    if (ok)
        *out = c->cl.nodes[idx];
    pthread_mutex_unlock(&c->cl.mu);
    return ok ? 0 : -1;
}

int rs__cluster_nnodes(rs_client_t *c)
{
    pthread_mutex_lock(&c->cl.mu);
    int n = c->cl.nnodes;
    pthread_mutex_unlock(&c->cl.mu);
    return n;
}

int rs__cluster_node_of(rs_client_t *c, const char *key, size_t len)
{
    unsigned slot = rs__cluster_slot(key, len);
    pthread_mutex_lock(&c->cl.mu);
    int idx = (int)c->cl.slot[slot] - 1;
    pthread_mutex_unlock(&c->cl.mu);
    return idx;
}

int rs__cluster_masters(rs_client_t *c, int *idx, int max)
{
    char seen[RS_NODES_MAX] = {0};
    pthread_mutex_lock(&c->cl.mu);
    for (int s = 0; s < 16384; s++)
        if (c->cl.slot[s])
            seen[c->cl.slot[s] - 1] = 1;
    pthread_mutex_unlock(&c->cl.mu);
    int n = 0;
    for (int i = 0; i < RS_NODES_MAX && n < max; i++)
        if (seen[i])
            idx[n++] = i;
    return n;
}

/* Parses "HOST:PORT" at p (up to a space or the end). */
static int parse_addr(const char *p, const char **host, size_t *hlen, int *port)
{
    const char *end = p + strcspn(p, " ");
    const char *colon = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == ':')
            colon = q; /* the last one: an IPv6 address has several */
    if (!colon || colon == p)
        return -1;
    *host = p;
    *hlen = (size_t)(colon - p);
    *port = atoi(colon + 1);
    return *port > 0 ? 0 : -1;
}

int rs__cluster_redirect(rs_client_t *c, const char *err, int *ask)
{
    /* "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381" */
    int is_ask = strncmp(err, "ASK ", 4) == 0;
    if (!is_ask && strncmp(err, "MOVED ", 6) != 0)
        return -1;
    const char *p = err + (is_ask ? 4 : 6);
    long slot = strtol(p, (char **)&p, 10);
    if (slot < 0 || slot > 16383 || *p != ' ')
        return -1;
    const char *host;
    size_t hlen;
    int port;
    if (parse_addr(p + 1, &host, &hlen, &port) != 0)
        return -1;
    pthread_mutex_lock(&c->cl.mu);
    int idx = rs__cluster_node_index_locked(c, host, hlen, port);
    if (idx >= 0 && !is_ask) {
        c->cl.slot[slot] = (uint8_t)(idx + 1);
        c->cl.stale = 1;
    }
    pthread_mutex_unlock(&c->cl.mu);
    *ask = is_ask;
    return idx;
}

int rs__cluster_sharded(rs_client_t *c)
{
    return atomic_load(&c->cl.sharded);
}

void rs__cluster_stale(rs_client_t *c)
{
    pthread_mutex_lock(&c->cl.mu);
    c->cl.stale = 1;
    pthread_mutex_unlock(&c->cl.mu);
}
