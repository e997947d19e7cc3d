/*
 * notify_shard.c - sharded wake-ups in a Redis Cluster whose masters are all Redis >= 7.0.
 *
 * A classic PUBLISH is copied by Redis Cluster over its bus to every node, masters and
 * replicas alike, so every handoff costs every node. A waiter of such a cluster queues under
 * a sharded acquisition id ("PUBLICID:sN.SECRET", lib/hold.c), and the scripts' wake()
 * (primitives/common.lua) answers it with SPUBLISH on the name's own channel
 *
 *     PREFIX:{TAG}:w:PUBLICID      TAG: the hash tag of the name's keys (so the script that
 *                                  publishes runs on the master of the channel's slot)
 *
 * which reaches the subscribers of that master (and of its replicas) only.
 *
 * Subscriptions. A client subscribes each such channel once, at the first wait on a name
 * (SSUBSCRIBE on the master of its slot), and keeps it: subscribing around every wait would
 * add two commands per acquisition. So a client's channels grow with the names it waits on,
 * never with its waiters (all local waiters on one name share one channel; messages name the
 * acquisition, rs__notify_dispatch finds the waiter). They are bounded by
 * RS_SHARD_CHANNELS_MAX: beyond it the least recently used channel nobody waits on is
 * unsubscribed (a later wait on its name subscribes it again, as a first wait does); the
 * rest go at close. A channel with waiters is never dropped, so while more names than the
 * bound have waiters at once the count exceeds it until they end. A channel costs Redis one entry per subscriber.
 * Subscriber connections: one per master that serves a channel of ours (started on demand,
 * each with a thread that reads it), at most one per master of the cluster.
 *
 * Slot moves and failovers. Redis tells a sharded subscriber when its slot leaves the node
 * (a "sunsubscribe" push) and answers SSUBSCRIBE with MOVED on a node that does not serve
 * the slot; a subscriber connection that breaks loses its channels too. In every case the
 * channel is subscribed again on the slot's master by the current map (refreshed with CLUSTER
 * SLOTS, or fixed by the MOVED), and once that master confirms, every local waiter of the
 * channel retries once, as after a classic reconnect: a wake-up published during the gap is
 * lost, and the retry finds the primitive handed over ("already yours") or queues again. A
 * waiter also checks before each sleep that its channel is on the master the map names now
 * (its own calls follow MOVED). So no waiter sleeps through the gap for longer than the
 * re-subscription takes, never for a lease.
 *
 * First subscription: rs__notify_shard_begin waits for the confirmation of a channel it
 * creates (a refusal, e.g. NOPERM, fails the wait with the server's words), so the first
 * queued attempt's wake-up cannot be missed.
 *
 * Concurrency: everything under nt.mu (lock order nt.mu, then slotmap.c's cl.mu). The links'
 * SSUBSCRIBE / SUNSUBSCRIBE are written to their sockets directly under nt.mu while the
 * thread reads, as notify.c does for watched channels.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

struct rs_shard {
    char *channel;          /* PREFIX:{TAG}:w:PUBLICID */
    size_t len;
    unsigned slot;
    int node;               /* the master it is subscribed on (or being subscribed on) */
    int confirmed;          /* that master confirmed the SSUBSCRIBE */
    int moved;              /* its waiters retry at the next confirmation */
    int waiting;            /* registered waiters */
    uint64_t used;          /* LRU clock */
    struct rs_shard *next;
};

static void *shard_main(void *arg);

static struct rs_shard *shard_find(rs_client_t *c, const char *chan, size_t len)
{
    for (struct rs_shard *s = c->nt.shards; s; s = s->next)
        if (s->len == len && memcmp(s->channel, chan, len) == 0)
            return s;
    return NULL;
}

/* Writes "CMD CHANNEL" on lk's socket. nt.mu held; lk connected. */
static void send_cmd(struct rs_nt_slink *lk, const char *cmd, const struct rs_shard *s)
{
    char *buf;
    int n = asprintf(&buf, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(cmd), cmd, s->len,
                     s->channel);
    if (n < 0)
        return;
    /* a failed write only happens when the connection is failing: its thread subscribes
     * every channel of its master again after the reconnect */
    rs__tp_send(lk->ctx, buf, (size_t)n, NULL, 0);
    free(buf);
}

/* The link to node, started if need be; NULL if it cannot be. nt.mu held. */
static struct rs_nt_slink *link_for(rs_client_t *c, int node)
{
    if (node < 0 || node >= RS_NODES_MAX || c->nt.stop)
        return NULL;
    struct rs_nt_slink *lk = c->nt.slink[node];
    if (lk)
        return lk;
    lk = calloc(1, sizeof *lk);
    if (!lk)
        return NULL;
    lk->c = c;
    lk->node = node;
    lk->fd = -1;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&lk->thread, NULL, shard_main, lk);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        free(lk);
        return NULL;
    }
    lk->started = 1;
    c->nt.slink[node] = lk;
    return lk;
}

static int connected(const struct rs_nt_slink *lk)
{
    return lk && lk->fd >= 0 && lk->ctx;
}

/* Subscribes s on master node; its waiters retry once that master confirms (unless it is a
 * new channel: rs__notify_shard_begin waits for that confirmation). nt.mu held. */
static void home_locked(rs_client_t *c, struct rs_shard *s, int node, int retry)
{
    if (s->node >= 0 && s->node != node && s->confirmed && connected(c->nt.slink[s->node]))
        send_cmd(c->nt.slink[s->node], "SUNSUBSCRIBE", s); /* its reply is ignored */
    s->node = node;
    s->confirmed = 0;
    s->moved |= retry;
    struct rs_nt_slink *lk = link_for(c, node);
    if (connected(lk))
        send_cmd(lk, "SSUBSCRIBE", s);
    /* else the link's thread subscribes every channel of its master once connected */
}

/* Channels of master node whose slot the map now gives to another master move there.
 * Reloads the map first if it is stale. */
static void rehome_from(rs_client_t *c, int node)
{
    rs__cluster_refresh(c, 0, c->timeout_ms);
    pthread_mutex_lock(&c->nt.mu);
    for (struct rs_shard *s = c->nt.shards; s; s = s->next) {
        if (s->node != node)
            continue;
        int owner = rs__cluster_node_of(c, s->channel, s->len);
        if (owner >= 0 && owner != node)
            home_locked(c, s, owner, 1);
    }
    pthread_mutex_unlock(&c->nt.mu);
}

/* A confirmation from lk's master. */
static void confirmed(rs_client_t *c, struct rs_nt_slink *lk, const char *chan, size_t len)
{
    pthread_mutex_lock(&c->nt.mu);
    struct rs_shard *s = shard_find(c, chan, len);
    if (s && s->node == lk->node) {
        s->confirmed = 1;
        if (s->moved) {
            /* whatever was published while the channel was away is lost: its waiters retry */
            s->moved = 0;
            for (rs_waiter_t *w = c->nt.head; w; w = w->next)
                if (w->shard == s)
                    rs__notify_poke_locked(w, RS_WAKE_RETRY);
        }
        pthread_cond_broadcast(&c->nt.cv);
    }
    pthread_mutex_unlock(&c->nt.mu);
}

/* Redis unsubscribed us from chan: its slot left lk's master (a migration, a failover). */
static void lapsed(rs_client_t *c, struct rs_nt_slink *lk, const char *chan, size_t len)
{
    pthread_mutex_lock(&c->nt.mu);
    struct rs_shard *s = shard_find(c, chan, len);
    /* not ours any more, or unsubscribed by us (moved, dropped) */
    int gone = s && s->node == lk->node && s->confirmed;
    if (gone) {
        s->confirmed = 0;
        s->moved = 1;
    }
    pthread_mutex_unlock(&c->nt.mu);
    if (!gone)
        return;
    rs__log(c, RS_LOG_INFO, "sharded subscriber: %.*s left its node; subscribing again",
            (int)len, chan);
    rs__cluster_stale(c);
    rs__cluster_refresh(c, 1, c->timeout_ms);
    pthread_mutex_lock(&c->nt.mu);
    s = shard_find(c, chan, len);
    if (s && s->node == lk->node && !s->confirmed) {
        /* the map may still name this master (CLUSTER SLOTS asked a node that has not heard
         * of the move): SSUBSCRIBE here then answers MOVED, which names the new one */
        int owner = rs__cluster_node_of(c, s->channel, s->len);
        home_locked(c, s, owner >= 0 ? owner : lk->node, 1);
    }
    pthread_mutex_unlock(&c->nt.mu);
}

/* An error reply on lk: MOVED (the slot is elsewhere), ASK / TRYAGAIN (it is moving), or a
 * refusal (NOPERM) that the waiters report. */
static void refused(rs_client_t *c, struct rs_nt_slink *lk, const char *err)
{
    int ask = 0;
    if (strncmp(err, "MOVED ", 6) == 0) {
        unsigned slot = (unsigned)strtoul(err + 6, NULL, 10);
        int idx = rs__cluster_redirect(c, err, &ask);
        pthread_mutex_lock(&c->nt.mu);
        for (struct rs_shard *s = c->nt.shards; s; s = s->next)
            if (s->slot == slot && s->node == lk->node && !s->confirmed && idx >= 0)
                home_locked(c, s, idx, 1);
        pthread_mutex_unlock(&c->nt.mu);
        return;
    }
    if (strncmp(err, "ASK ", 4) == 0 || strncmp(err, "TRYAGAIN", 8) == 0) {
        /* the slot is half-way to another master: ask again in a moment (the move ends with
         * MOVED or a confirmation) */
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&c->nt.mu);
        for (struct rs_shard *s = c->nt.shards; s; s = s->next)
            if (s->node == lk->node && !s->confirmed && connected(lk))
                send_cmd(lk, "SSUBSCRIBE", s);
        pthread_mutex_unlock(&c->nt.mu);
        return;
    }
    rs__log(c, RS_LOG_ERROR, "sharded subscriber: %s", err);
    pthread_mutex_lock(&c->nt.mu);
    snprintf(c->nt.error, sizeof c->nt.error, "%s", err);
    pthread_cond_broadcast(&c->nt.cv);
    pthread_mutex_unlock(&c->nt.mu);
}

static void *shard_main(void *arg)
{
    struct rs_nt_slink *lk = arg;
    rs_client_t *c = lk->c;
    uint64_t backoff_ms = 5;
    pthread_mutex_lock(&c->nt.mu);
    while (!c->nt.stop) {
        pthread_mutex_unlock(&c->nt.mu);
        redisContext *ctx = NULL;
        uint64_t deadline = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
        int rc = rs__conn_connect_to(c, lk->node, deadline, 0, &ctx);
        pthread_mutex_lock(&c->nt.mu);
        if (rc != 0 || c->nt.stop) {
            if (ctx)
                rs__ctx_free(ctx);
            if (c->nt.stop)
                break;
            pthread_mutex_unlock(&c->nt.mu);
            /* the master may be gone for good (a failover): its channels follow the map */
            rs__cluster_stale(c);
            rehome_from(c, lk->node);
            pthread_mutex_lock(&c->nt.mu);
            uint64_t until = rs__now_ns() + backoff_ms * RS_NS_PER_MS;
            rs__cv_wait_until(&c->nt.cv, &c->nt.mu, until);
            if (backoff_ms < 200)
                backoff_ms *= 2;
            continue;
        }
        backoff_ms = 5;
        lk->ctx = ctx;
        lk->fd = ctx->fd;
        for (struct rs_shard *s = c->nt.shards; s; s = s->next)
            if (s->node == lk->node) {
                s->confirmed = 0;
                send_cmd(lk, "SSUBSCRIBE", s);
            }
        pthread_mutex_unlock(&c->nt.mu);

        redisReply *r;
        while (rs__ctx_read(ctx, &r) == 0) {
            /* RESP2 (hiredis 0.14): "smessage" CHANNEL PAYLOAD, "ssubscribe" CHANNEL COUNT,
             * "sunsubscribe" CHANNEL COUNT */
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                r->element[0]->type == REDIS_REPLY_STRING &&
                r->element[1]->type == REDIS_REPLY_STRING) {
                const char *kind = r->element[0]->str;
                const redisReply *ch = r->element[1];
                if (strcmp(kind, "smessage") == 0 && r->element[2]->type == REDIS_REPLY_STRING)
                    rs__notify_dispatch(c, r->element[2]->str, r->element[2]->len);
                else if (strcmp(kind, "ssubscribe") == 0)
                    confirmed(c, lk, ch->str, ch->len);
                else if (strcmp(kind, "sunsubscribe") == 0)
                    lapsed(c, lk, ch->str, ch->len);
            } else if (r->type == REDIS_REPLY_ERROR) {
                refused(c, lk, r->str);
            }
            freeReplyObject(r);
        }

        pthread_mutex_lock(&c->nt.mu);
        lk->fd = -1;
        lk->ctx = NULL;
        for (struct rs_shard *s = c->nt.shards; s; s = s->next)
            if (s->node == lk->node && s->confirmed) {
                s->confirmed = 0;
                s->moved = 1;
            }
        int stopping = c->nt.stop;
        pthread_mutex_unlock(&c->nt.mu);
        rs__ctx_free(ctx);
        if (!stopping) {
            rs__log(c, RS_LOG_INFO, "sharded subscriber connection lost; reconnecting");
            rs__cluster_stale(c);
            rehome_from(c, lk->node);
        }
        pthread_mutex_lock(&c->nt.mu);
    }
    pthread_cond_broadcast(&c->nt.cv);
    pthread_mutex_unlock(&c->nt.mu);
    return NULL;
}

/* Drops the least recently used channels nobody waits on beyond the bound. nt.mu held. */
static void evict_locked(rs_client_t *c)
{
    while (c->nt.nshards > RS_SHARD_CHANNELS_MAX) {
        struct rs_shard **lru = NULL;
        for (struct rs_shard **p = &c->nt.shards; *p; p = &(*p)->next)
            if ((*p)->waiting == 0 && (!lru || (*p)->used < (*lru)->used))
                lru = p;
        if (!lru)
            return;
        struct rs_shard *s = *lru;
        *lru = s->next;
        if (s->node >= 0 && connected(c->nt.slink[s->node]))
            send_cmd(c->nt.slink[s->node], "SUNSUBSCRIBE", s);
        free(s->channel);
        free(s);
        c->nt.nshards--;
    }
}

/* The channel of key's hash tag for our public id into chan (room RS_SHARD_CHAN_MAX):
 * its length, or 0 with lasterror set. */
#define RS_SHARD_CHAN_MAX (RS_PREFIX_MAX + 2 * RS_NAME_MAX + 64)
static size_t shard_channel(rs_client_t *c, const char *key, size_t klen, char *chan)
{
    /* the channel: key up to the end of its hash tag, ":w:", our public id */
    const char *open = memchr(key, '{', klen);
    const char *close = open ? memchr(open + 1, '}', klen - (size_t)(open + 1 - key)) : NULL;
    if (!close) {
        rs__fail(c, EINVAL, "key %.*s has no hash tag", (int)klen, key);
        return 0;
    }
    size_t tl = (size_t)(close + 1 - key);
    int n = snprintf(chan, RS_SHARD_CHAN_MAX, "%.*s:w:%s", (int)tl, key, c->public_id);
    if (n < 0 || (size_t)n >= RS_SHARD_CHAN_MAX) {
        rs__fail(c, EINVAL, "sharded channel name too long");
        return 0;
    }
    return (size_t)n;
}

/* w listens on channel chan from now on (created if need be: *fresh set). nt.mu held. */
static struct rs_shard *shard_join_locked(rs_client_t *c, rs_waiter_t *w, const char *chan,
                                          size_t len, int *fresh)
{
    struct rs_shard *s = shard_find(c, chan, len);
    *fresh = !s;
    if (*fresh) {
        s = calloc(1, sizeof *s);
        if (!s || !(s->channel = malloc(len + 1))) {
            free(s);
            return NULL;
        }
        memcpy(s->channel, chan, len + 1);
        s->len = len;
        s->slot = rs__cluster_slot(chan, len);
        s->node = -1;
        s->next = c->nt.shards;
        c->nt.shards = s;
        c->nt.nshards++;
    }
    s->waiting++;
    s->used = ++c->nt.shard_tick;
    w->shard = s;
    if (*fresh)
        evict_locked(c);
    return s;
}

/* Joins w to the sharded channel of key (written to chan, *len): *sp the channel's record,
 * *fresh whether it was made now, *owner the master of its slot (-1: unknown yet). 0 with
 * nt.mu held, or EINVAL / ENOMEM with it released. */
static int shard_join(rs_client_t *c, rs_waiter_t *w, const char *key, size_t klen, char *chan,
                      size_t *len, struct rs_shard **sp, int *fresh, int *owner)
{
    *len = shard_channel(c, key, klen, chan);
    if (!*len)
        return EINVAL;
    pthread_mutex_lock(&c->nt.mu);
    *sp = shard_join_locked(c, w, chan, *len, fresh);
    if (!*sp) {
        pthread_mutex_unlock(&c->nt.mu);
        return rs__fail(c, ENOMEM, "out of memory");
    }
    *owner = rs__cluster_node_of(c, chan, *len);
    return 0;
}

int rs__notify_shard_begin(rs_client_t *c, rs_waiter_t *w, const char *key, size_t klen)
{
    char chan[RS_SHARD_CHAN_MAX];
    size_t len;
    struct rs_shard *s;
    int fresh, owner;
    int rc = shard_join(c, w, key, klen, chan, &len, &s, &fresh, &owner);
    if (rc != 0)
        return rc;
    if (owner < 0)
        owner = s->node; /* unknown slot (not seen yet): where it is, if anywhere */
    if (owner < 0) {
        pthread_mutex_unlock(&c->nt.mu);
        return rs__fail(c, RS_ECONN, "no cluster master known for the slot of %s", chan);
    }
    if (owner != s->node)
        home_locked(c, s, owner, !fresh);
    else if (!fresh && !s->confirmed)
        s->moved = 1; /* being subscribed (again): retry once it is, we do not wait for it */
    uint64_t until = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    while (fresh && !s->confirmed && !c->nt.stop && !atomic_load(&c->closing)) {
        if (c->nt.error[0]) {
            rc = rs__fail(c, RS_ESERVER, "SSUBSCRIBE %s refused: %s", chan, c->nt.error);
            c->nt.error[0] = '\0';
            break;
        }
        if (!c->nt.slink[s->node]) {
            rc = rs__fail(c, EAGAIN, "cannot start a sharded subscriber thread");
            break;
        }
        if (rs__now_ns() >= until) {
            rc = rs__fail(c, RS_ECONN, "cannot subscribe to %s within %ld ms", chan,
                          c->timeout_ms);
            break;
        }
        rs__cv_wait_until(&c->nt.cv, &c->nt.mu, until);
    }
    if (rc == 0 && fresh && !s->confirmed)
        rc = rs__fail(c, ECANCELED, "the client is closing");
    if (rc != 0 && fresh && !s->confirmed)
        s->moved = 1; /* a waiter that comes later and finds it still pending retries then */
    pthread_mutex_unlock(&c->nt.mu);
    return rc;
}

int rs__notify_shard_add(rs_client_t *c, rs_waiter_t *w, const char *key, size_t klen)
{
    char chan[RS_SHARD_CHAN_MAX];
    size_t len;
    struct rs_shard *s;
    int fresh, owner;
    int rc = shard_join(c, w, key, klen, chan, &len, &s, &fresh, &owner);
    if (rc != 0)
        return rc;
    /* the confirmation pokes the channel's waiters (RS_WAKE_RETRY): that is how a callback
     * waiter's thread learns that it stands */
    if (owner >= 0 && owner != s->node)
        home_locked(c, s, owner, 1);
    else if (!s->confirmed)
        s->moved = 1;
    /* an unknown slot: rs__notify_shard_ready homes it once the map knows it */
    pthread_mutex_unlock(&c->nt.mu);
    return 0;
}

int rs__notify_shard_ready(rs_client_t *c, rs_waiter_t *w)
{
    rs__notify_shard_check(c, w);
    pthread_mutex_lock(&c->nt.mu);
    int ready = !w->shard || w->shard->confirmed;
    pthread_mutex_unlock(&c->nt.mu);
    return ready;
}

int rs__notify_shard_check(rs_client_t *c, rs_waiter_t *w)
{
    pthread_mutex_lock(&c->nt.mu);
    struct rs_shard *s = w->shard;
    int moved = 0;
    if (s) {
        int owner = rs__cluster_node_of(c, s->channel, s->len);
        if (owner >= 0 && owner != s->node) {
            /* our own calls met MOVED: follow the slot at once */
            home_locked(c, s, owner, 1);
            moved = 1;
        }
    }
    pthread_mutex_unlock(&c->nt.mu);
    return moved;
}

void rs__notify_shard_end(rs_client_t *c, rs_waiter_t *w)
{
    pthread_mutex_lock(&c->nt.mu);
    struct rs_shard *s = w->shard;
    if (s) {
        s->waiting--;
        s->used = ++c->nt.shard_tick;
        w->shard = NULL;
    }
    pthread_mutex_unlock(&c->nt.mu);
}

static void free_shards(rs_client_t *c)
{
    while (c->nt.shards) {
        struct rs_shard *s = c->nt.shards;
        c->nt.shards = s->next;
        free(s->channel);
        free(s);
    }
    c->nt.nshards = 0;
}

void rs__notify_shard_stop(rs_client_t *c)
{
    pthread_mutex_lock(&c->nt.mu);
    c->nt.stop = 1;
    for (int i = 0; i < RS_NODES_MAX; i++)
        if (c->nt.slink[i] && c->nt.slink[i]->fd >= 0)
            shutdown(c->nt.slink[i]->fd, SHUT_RDWR);
    pthread_cond_broadcast(&c->nt.cv);
    pthread_mutex_unlock(&c->nt.mu);
    for (int i = 0; i < RS_NODES_MAX; i++) {
        struct rs_nt_slink *lk = c->nt.slink[i];
        if (!lk)
            continue;
        if (lk->started)
            pthread_join(lk->thread, NULL);
        c->nt.slink[i] = NULL;
        free(lk);
    }
    free_shards(c);
}

void rs__notify_shard_forget(rs_client_t *c)
{
    /* in a child of fork(): the threads are gone; free their connections (closing our copy
     * of a socket does not disturb the parent's) */
    for (int i = 0; i < RS_NODES_MAX; i++) {
        struct rs_nt_slink *lk = c->nt.slink[i];
        if (!lk)
            continue;
        if (lk->ctx)
            rs__ctx_free(lk->ctx);
        c->nt.slink[i] = NULL;
        free(lk);
    }
    free_shards(c);
}
