/*
 * notify.c - the one pub/sub subscriber of a client, and the waiters it wakes.
 *
 * A client has one subscriber connection and thread (started at its first blocking wait),
 * subscribed to its own channel "PREFIX:client:PUBLICID". A release script that hands a
 * primitive to a waiter publishes "ACQID DETAILS" on that waiter's client channel; the
 * thread finds the local waiter registered under ACQID and signals its condition variable.
 * Waiters of other clients never see the message, so a release costs one message whatever
 * the number of waiters.
 *
 * Messages can be lost (the connection drops, the client was paused). That is harmless:
 * every sleep is bounded by the holder's remaining lease, and after the subscriber
 * reconnects every registered waiter is told to retry at once, since whatever was published
 * during the gap is gone.
 *
 * When the master moves (topology.c), rs__notify_topology shuts the subscriber's socket
 * down so that the thread reconnects to the new master; the usual retry-all follows.
 *
 * Under Redlock the client has one subscriber connection and thread per master ("links",
 * all subscribed to the same channels): a release on any master publishes "ACQID retry" to
 * its head waiter. A waiter registers once a quorum of links is subscribed (fewer could not
 * grant it anyway), and any link that (re)subscribes makes every waiter retry.
 *
 * In a Cluster whose masters are all Redis >= 7.0, waiters also listen on sharded channels
 * of the names they wait on (notify_shard.c, above this file): their messages come to
 * rs__notify_dispatch like those of the client channel.
 *
 * A condition's broadcast publishes one message per client, "* ID1 ID2 ...": every local
 * waiter it names (whole ids only) is woken.
 *
 * Events that concern everyone (a latch opening) go to a channel of their own: a waiter
 * watches it (rs__notify_watch: subscribed on demand, reference-counted, re-subscribed after
 * a reconnect) and registers with that channel as its topic; one message wakes every local
 * waiter of the topic, and one PUBLISH wakes every client. Extra SUBSCRIBE/UNSUBSCRIBE
 * commands are written to the socket directly under nt.mu while the thread reads: hiredis
 * only reads on that context once subscribed, so the two never touch the same buffer.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* nt.mu held */
void rs__notify_poke_locked(rs_waiter_t *w, int wake)
{
    /* a message outranks a retry; cancel outranks both */
    if (wake == RS_WAKE_RETRY && w->wake == RS_WAKE_MSG)
        return;
    if (w->wake == RS_WAKE_CANCEL)
        return;
    w->wake = wake;
    if (w->cb) {
        w->on_wake(w); /* a request of lib/async.c: its I/O thread takes the wake-up */
        return;
    }
    if (wake == RS_WAKE_MSG && w->on_msg && w->msg[0])
        w->on_msg(w); /* cond.c: sends the re-acquisition while the waiter wakes up */
    pthread_cond_signal(w->cv);
}

struct rs_watch {
    char *channel;
    int refs;
    int confirmed;
    struct rs_watch *next;
};

static struct rs_watch *watch_find(rs_client_t *c, const char *channel)
{
    for (struct rs_watch *w = c->nt.watches; w; w = w->next)
        if (strcmp(w->channel, channel) == 0)
            return w;
    return NULL;
}

/* A message on a watched channel: wake every waiter of that topic, the payload in its msg
 * (rs__notify_msg reads it; a later message replaces an unread one). */
static void dispatch_topic(rs_client_t *c, const char *channel, const char *payload, size_t len)
{
    pthread_mutex_lock(&c->nt.mu);
    for (rs_waiter_t *w = c->nt.head; w; w = w->next)
        if (w->topic && strcmp(w->topic, channel) == 0) {
            size_t n = len < sizeof w->msg ? len : sizeof w->msg - 1;
            memcpy(w->msg, payload, n);
            w->msg[n] = '\0';
            rs__notify_poke_locked(w, RS_WAKE_MSG);
        }
    pthread_mutex_unlock(&c->nt.mu);
}

/* Subscription confirmations, for our own channel and for watched ones. */
static void confirmed(rs_client_t *c, struct rs_nt_link *lk, const char *channel)
{
    pthread_mutex_lock(&c->nt.mu);
    if (strcmp(channel, c->channel) == 0) {
        if (!lk->subscribed)
            c->nt.nsubscribed++;
        lk->subscribed = 1;
        c->nt.failed = 0;
        c->nt.generation++;
        /* whatever was published while we were away is lost: everyone retries */
        for (rs_waiter_t *w = c->nt.head; w; w = w->next)
            rs__notify_poke_locked(w, RS_WAKE_RETRY);
    } else {
        struct rs_watch *w = watch_find(c, channel);
        if (w)
            w->confirmed = 1;
        /* callback waiters of the topic (lib/async.c) check once it stands */
        for (rs_waiter_t *x = c->nt.head; x; x = x->next)
            if (x->cb && x->topic && strcmp(x->topic, channel) == 0)
                rs__notify_poke_locked(x, RS_WAKE_RETRY);
    }
    pthread_cond_broadcast(&c->nt.cv);
    pthread_mutex_unlock(&c->nt.mu);
}

/* Writes a pub/sub command straight to one subscriber connection. nt.mu held. */
static void write_link(redisContext *ctx, const char *cmd, const char *channel)
{
    char *buf;
    int n = asprintf(&buf, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", strlen(cmd), cmd,
                     strlen(channel), channel);
    if (n < 0)
        return;
    /* a failed write only happens when the connection is failing; the reconnect that
     * follows subscribes every watch again */
    rs__tp_send(ctx, buf, (size_t)n, NULL, 0);
    free(buf);
}

/* Writes a pub/sub command straight to every subscriber socket. nt.mu held. */
static void write_raw(rs_client_t *c, const char *cmd, const char *channel)
{
    for (int i = 0; i < c->nt.nlinks; i++)
        if (c->nt.link[i].fd >= 0 && c->nt.link[i].ctx)
            write_link(c->nt.link[i].ctx, cmd, channel);
}

/* A message "* ID1 ID2 ..." (a condition's broadcast: one message per client, naming all
 * its waiters): each named waiter, matched by its whole id, is woken with msg "b". */
static void dispatch_list(rs_client_t *c, const char *p, size_t len)
{
    pthread_mutex_lock(&c->nt.mu);
    while (len > 0) {
        while (len > 0 && *p == ' ')
            p++, len--;
        const char *sp = memchr(p, ' ', len);
        size_t idlen = sp ? (size_t)(sp - p) : len;
        if (idlen > 0 && idlen < RS_ACQID_MAX)
            for (rs_waiter_t *w = c->nt.head; w; w = w->next)
                if (strlen(w->id) == idlen && memcmp(w->id, p, idlen) == 0) {
                    snprintf(w->msg, sizeof w->msg, "b");
                    rs__notify_poke_locked(w, RS_WAKE_MSG);
                    break;
                }
        p += idlen, len -= idlen;
    }
    pthread_mutex_unlock(&c->nt.mu);
}

void rs__notify_dispatch(rs_client_t *c, const char *payload, size_t len)
{
    if (len >= 2 && payload[0] == '*' && payload[1] == ' ') {
        dispatch_list(c, payload + 2, len - 2);
        return;
    }
    const char *sp = memchr(payload, ' ', len);
    size_t idlen = sp ? (size_t)(sp - payload) : len;
    if (idlen == 0 || idlen >= RS_ACQID_MAX)
        return;
    pthread_mutex_lock(&c->nt.mu);
    for (rs_waiter_t *w = c->nt.head; w; w = w->next) {
        /* the whole id (with its secret) may carry a grant; the route "PUBLICID:N" alone
         * (what retry messages carry, and all a forger can know) only asks for a retry */
        size_t full = strlen(w->id);
        const char *sep = strchr(w->id, RS_ACQID_SEP);
        size_t route = sep ? (size_t)(sep - w->id) : full;
        int whole = full == idlen && memcmp(w->id, payload, idlen) == 0;
        if (!whole && !(route == idlen && memcmp(w->id, payload, idlen) == 0))
            continue;
        size_t rest = whole && sp ? len - idlen - 1 : 0;
        if (rest >= sizeof w->msg)
            rest = sizeof w->msg - 1;
        if (rest)
            memcpy(w->msg, sp + 1, rest);
        w->msg[rest] = '\0';
        rs__notify_poke_locked(w, RS_WAKE_MSG);
        break;
    }
    pthread_mutex_unlock(&c->nt.mu);
}

/* Sends SUBSCRIBE for our channel and every watched one, and publishes the socket for
 * rs__notify_watch. The confirmations arrive in the read loop. nt.mu held. */
static int subscribe_locked(rs_client_t *c, struct rs_nt_link *lk, redisContext *ctx)
{
    int n = 1;
    for (struct rs_watch *w = c->nt.watches; w; w = w->next) {
        w->confirmed = 0;
        n++;
    }
    const char **argv = malloc(sizeof *argv * (size_t)(n + 1));
    size_t *lens = malloc(sizeof *lens * (size_t)(n + 1));
    if (!argv || !lens) {
        free(argv);
        free(lens);
        return ENOMEM;
    }
    int k = 0;
    argv[k] = "SUBSCRIBE", lens[k++] = 9;
    argv[k] = c->channel, lens[k++] = strlen(c->channel);
    for (struct rs_watch *w = c->nt.watches; w; w = w->next)
        argv[k] = w->channel, lens[k++] = strlen(w->channel);
    int rc = rs__ctx_append(ctx, k, argv, lens);
    free(argv);
    free(lens);
    if (rc)
        return rc;
    if (rs__ctx_flush(ctx))
        return RS_ECONN;
    lk->fd = ctx->fd;
    lk->ctx = ctx;
    return 0;
}

/* The first failed connect of a series of reconnect attempts (not each retry) while
 * callers wait: says so at RS_LOG_DEBUG, so that a lock without a deadline that goes on
 * waiting while Redis is unreachable is not silent. nt.mu held; released around the log
 * call (the host's callback). */
static void tell_waiting_locked(rs_client_t *c)
{
    int n = 0;
    for (rs_waiter_t *w = c->nt.head; w; w = w->next)
        n++;
    if (!n || !c->log)
        return;
    char why[200];
    snprintf(why, sizeof why, "%s", rs_client_lasterror(c));
    pthread_mutex_unlock(&c->nt.mu);
    rs__log(c, RS_LOG_DEBUG, "subscriber: Redis unreachable (%s); %d waiting call(s) go on "
            "waiting, a call without a deadline until it is back (reconnecting; said once per "
            "outage)", why, n);
    pthread_mutex_lock(&c->nt.mu);
}

static void *notify_main(void *arg)
{
    struct rs_nt_link *lk = arg;
    rs_client_t *c = lk->c;
    uint64_t backoff_ms = 5;
    int failing = 0; /* this series of attempts was told about (tell_waiting_locked) */
    pthread_mutex_lock(&c->nt.mu);
    while (!c->nt.stop) {
        pthread_mutex_unlock(&c->nt.mu);
        redisContext *ctx = NULL;
        unsigned gen = rs__topo_gen(c);
        uint64_t deadline = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
        int rc = rs__conn_connect_to(c, lk->node, deadline, 0, &ctx);
        pthread_mutex_lock(&c->nt.mu);
        lk->conn_gen = gen;
        if (rc == 0 && gen != rs__topo_gen(c) && !c->nt.stop) {
            /* the master moved while we connected: rs__notify_topology found no socket to
             * shut down, and this one may reach the old master, which takes no more
             * publishes but answers until it is demoted. Connect again, at once. */
            rs__ctx_free(ctx);
            continue;
        }
        if (rc == 0 && !c->nt.stop && subscribe_locked(c, lk, ctx) != 0)
            rc = RS_ECONN;
        if (rc != 0 || c->nt.stop) {
            lk->fd = -1;
            if (ctx)
                rs__ctx_free(ctx);
            if (c->nt.stop)
                break;
            c->nt.failed = 1;
            pthread_cond_broadcast(&c->nt.cv);
            if (!failing) {
                failing = 1;
                tell_waiting_locked(c);
            }
            uint64_t until = rs__now_ns() + backoff_ms * RS_NS_PER_MS;
            rs__cv_wait_until(&c->nt.cv, &c->nt.mu, until);
            if (backoff_ms < 200)
                backoff_ms *= 2;
            continue;
        }
        backoff_ms = 5;
        failing = 0;
        lk->ctx = ctx;
        pthread_mutex_unlock(&c->nt.mu);

        for (;;) {
            redisReply *r;
            if (rs__ctx_read(ctx, &r) != 0)
                break;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                r->element[0]->type == REDIS_REPLY_STRING &&
                r->element[1]->type == REDIS_REPLY_STRING) {
                const char *kind = r->element[0]->str, *chan = r->element[1]->str;
                if (strcmp(kind, "message") == 0 && r->element[2]->type == REDIS_REPLY_STRING) {
                    if (strcmp(chan, c->channel) == 0)
                        rs__notify_dispatch(c, r->element[2]->str, r->element[2]->len);
                    else
                        dispatch_topic(c, chan, r->element[2]->str, r->element[2]->len);
                } else if (strcmp(kind, "subscribe") == 0) {
                    confirmed(c, lk, chan);
                }
            } else if (r->type == REDIS_REPLY_ERROR) {
                /* e.g. NOPERM for the channel: waiters fail with the server's words */
                rs__log(c, RS_LOG_ERROR, "subscriber: %s", r->str);
                pthread_mutex_lock(&c->nt.mu);
                snprintf(c->nt.error, sizeof c->nt.error, "%s", r->str);
                pthread_cond_broadcast(&c->nt.cv);
                pthread_mutex_unlock(&c->nt.mu);
            }
            freeReplyObject(r);
        }

        pthread_mutex_lock(&c->nt.mu);
        if (lk->subscribed)
            c->nt.nsubscribed--;
        lk->subscribed = 0;
        lk->fd = -1;
        lk->ctx = NULL;
        int stopping = c->nt.stop;
        pthread_mutex_unlock(&c->nt.mu);
        rs__ctx_free(ctx);
        if (!stopping)
            rs__log(c, RS_LOG_INFO, "subscriber connection lost; reconnecting");
        pthread_mutex_lock(&c->nt.mu);
    }
    if (lk->subscribed)
        c->nt.nsubscribed--;
    lk->subscribed = 0;
    pthread_cond_broadcast(&c->nt.cv);
    pthread_mutex_unlock(&c->nt.mu);
    return NULL;
}

/* Starts the subscriber thread(s) if not yet: 0, or an error (nt.mu held). */
static int start_locked(rs_client_t *c)
{
    if (c->nt.started || c->nt.stop)
        return 0;
    int redlock = c->ep.mode == RS_MODE_REDLOCK;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int n = redlock ? c->ep.nseeds : 1, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct rs_nt_link *lk = &c->nt.link[i];
        lk->c = c;
        lk->node = redlock ? i : -1;
        rc = pthread_create(&lk->thread, NULL, notify_main, lk);
        if (rc == 0)
            lk->started = 1, c->nt.nlinks = i + 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    c->nt.started = c->nt.nlinks > 0; /* the links started are stopped at close */
    return rc;
}

int rs__notify_add(rs_client_t *c, rs_waiter_t *w)
{
    pthread_mutex_lock(&c->nt.mu);
    int rc = start_locked(c);
    if (rc == 0 && (c->nt.stop || atomic_load(&c->closing)))
        rc = ECANCELED;
    if (rc == 0) {
        w->cb = 1;
        w->prev = NULL;
        w->next = c->nt.head;
        if (c->nt.head)
            c->nt.head->prev = w;
        c->nt.head = w;
    }
    pthread_mutex_unlock(&c->nt.mu);
    return rc;
}

void rs__notify_remove(rs_client_t *c, rs_waiter_t *w)
{
    pthread_mutex_lock(&c->nt.mu);
    if (w->prev)
        w->prev->next = w->next;
    else if (c->nt.head == w)
        c->nt.head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
    pthread_mutex_unlock(&c->nt.mu);
}

int rs__notify_take(rs_client_t *c, rs_waiter_t *w, char *msg, size_t len)
{
    pthread_mutex_lock(&c->nt.mu);
    int wake = w->wake;
    if (wake == RS_WAKE_MSG)
        snprintf(msg, len, "%s", w->msg);
    if (wake != RS_WAKE_CANCEL)
        w->wake = RS_WAKE_NONE;
    pthread_mutex_unlock(&c->nt.mu);
    return wake;
}

int rs__notify_begin(rs_client_t *c, rs_waiter_t *w, pthread_cond_t *cv, const char *id,
                     const char *topic)
{
    memset(w, 0, sizeof *w);
    w->cv = cv;
    w->id = id ? id : "";
    w->topic = topic;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(w->cv, &ca);
    pthread_condattr_destroy(&ca);

    pthread_mutex_lock(&c->nt.mu);
    int redlock = c->ep.mode == RS_MODE_REDLOCK;
    if (start_locked(c) != 0) {
        pthread_mutex_unlock(&c->nt.mu);
        pthread_cond_destroy(w->cv);
        return rs__fail(c, EAGAIN, "cannot start the notifier thread");
    }
    /* Register only once subscribed (under Redlock on a quorum of masters): a wake-up for
     * this acquisition can only be published after its first attempt, which is sent after we
     * return. */
    int need = redlock ? rs__rl_quorum(c) : 1;
    uint64_t until = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    while (c->nt.nsubscribed < need && !c->nt.stop && !atomic_load(&c->closing)) {
        if (c->nt.error[0]) {
            int rc = rs__fail(c, RS_ESERVER, "SUBSCRIBE %s refused: %s", c->channel, c->nt.error);
            c->nt.error[0] = '\0';
            pthread_mutex_unlock(&c->nt.mu);
            pthread_cond_destroy(w->cv);
            return rc;
        }
        if (rs__now_ns() >= until) {
            pthread_mutex_unlock(&c->nt.mu);
            pthread_cond_destroy(w->cv);
            if (redlock)
                return rs__fail(c, RS_ECONN, "cannot subscribe to wake-ups on a quorum of "
                                "redlock masters (%d of %d, a quorum is %d) within %ld ms",
                                c->nt.nsubscribed, c->ep.nseeds, need, c->timeout_ms);
            return rs__fail(c, RS_ECONN, "cannot subscribe to wake-ups within %ld ms",
                            c->timeout_ms);
        }
        rs__cv_wait_until(&c->nt.cv, &c->nt.mu, until);
    }
    if (c->nt.stop || atomic_load(&c->closing)) {
        pthread_mutex_unlock(&c->nt.mu);
        pthread_cond_destroy(w->cv);
        return rs__fail(c, ECANCELED, "the client is closing");
    }
    w->next = c->nt.head;
    if (c->nt.head)
        c->nt.head->prev = w;
    c->nt.head = w;
    pthread_mutex_unlock(&c->nt.mu);
    return 0;
}

int rs__notify_ready(rs_client_t *c)
{
    pthread_mutex_lock(&c->nt.mu);
    int need = c->ep.mode == RS_MODE_REDLOCK ? rs__rl_quorum(c) : 1;
    int ready = c->nt.started && c->nt.nsubscribed >= need;
    pthread_mutex_unlock(&c->nt.mu);
    return ready;
}

int rs__notify_sleep(rs_client_t *c, rs_waiter_t *w, uint64_t until_ns)
{
    pthread_mutex_lock(&c->nt.mu);
    while (w->wake == RS_WAKE_NONE) {
        if (until_ns == RS_NO_DEADLINE) {
            pthread_cond_wait(w->cv, &c->nt.mu);
        } else {
            if (rs__now_ns() >= until_ns) {
                w->wake = RS_WAKE_TIMEOUT;
                break;
            }
            rs__cv_wait_until(w->cv, &c->nt.mu, until_ns);
        }
    }
    int wake = w->wake;
    if (wake != RS_WAKE_CANCEL)
        w->wake = RS_WAKE_NONE;
    pthread_mutex_unlock(&c->nt.mu);
    return wake;
}

void rs__notify_msg(rs_client_t *c, rs_waiter_t *w, char *buf, size_t len)
{
    pthread_mutex_lock(&c->nt.mu);
    snprintf(buf, len, "%s", w->msg);
    pthread_mutex_unlock(&c->nt.mu);
}

void rs__notify_end(rs_client_t *c, rs_waiter_t *w)
{
    rs__notify_remove(c, w);
    pthread_cond_destroy(w->cv);
}

void rs__notify_arm(rs_client_t *c, rs_waiter_t *w, void (*on_msg)(rs_waiter_t *w), void *arg)
{
    pthread_mutex_lock(&c->nt.mu);
    w->on_msg = on_msg;
    w->arg = arg;
    pthread_mutex_unlock(&c->nt.mu);
}

void rs__notify_poke(rs_client_t *c, rs_waiter_t *w, int wake)
{
    pthread_mutex_lock(&c->nt.mu);
    rs__notify_poke_locked(w, wake);
    pthread_mutex_unlock(&c->nt.mu);
}

void rs__notify_cancel_all(rs_client_t *c)
{
    pthread_mutex_lock(&c->nt.mu);
    for (rs_waiter_t *w = c->nt.head; w; w = w->next)
        rs__notify_poke_locked(w, RS_WAKE_CANCEL);
    pthread_cond_broadcast(&c->nt.cv);
    pthread_mutex_unlock(&c->nt.mu);
}

void rs__notify_topology(rs_client_t *c)
{
    pthread_mutex_lock(&c->nt.mu);
    for (int i = 0; i < c->nt.nlinks; i++) {
        struct rs_nt_link *lk = &c->nt.link[i];
        if (lk->fd >= 0 && lk->conn_gen != rs__topo_gen(c))
            shutdown(lk->fd, SHUT_RDWR); /* the thread reconnects, to the current master */
    }
    pthread_mutex_unlock(&c->nt.mu);
}

void rs__notify_stop(rs_client_t *c)
{
    pthread_mutex_lock(&c->nt.mu);
    c->nt.stop = 1;
    for (int i = 0; i < c->nt.nlinks; i++)
        if (c->nt.link[i].fd >= 0)
            shutdown(c->nt.link[i].fd, SHUT_RDWR);
    pthread_cond_broadcast(&c->nt.cv);
    pthread_mutex_unlock(&c->nt.mu);
    for (int i = 0; i < c->nt.nlinks; i++)
        if (c->nt.link[i].started) {
            pthread_join(c->nt.link[i].thread, NULL);
            c->nt.link[i].started = 0;
        }
    c->nt.started = 0;
    while (c->nt.watches) {
        struct rs_watch *w = c->nt.watches;
        c->nt.watches = w->next;
        free(w->channel);
        free(w);
    }
}

/* A reference to channel's watch (nt.mu held), made and subscribed if it is new; NULL when
 * out of memory. */
static struct rs_watch *watch_ref_locked(rs_client_t *c, const char *channel)
{
    struct rs_watch *w = watch_find(c, channel);
    if (w) {
        w->refs++;
        return w;
    }
    w = calloc(1, sizeof *w);
    if (!w || !(w->channel = strdup(channel))) {
        free(w);
        return NULL;
    }
    w->refs = 1;
    w->next = c->nt.watches;
    c->nt.watches = w;
    write_raw(c, "SUBSCRIBE", channel);
    return w;
}

int rs__notify_watch(rs_client_t *c, const char *channel)
{
    int rc = 0;
    pthread_mutex_lock(&c->nt.mu);
    struct rs_watch *w = watch_ref_locked(c, channel);
    if (!w) {
        pthread_mutex_unlock(&c->nt.mu);
        return rs__fail(c, ENOMEM, "out of memory");
    }
    /* a message published before the confirmation would be missed: wait for it */
    uint64_t until = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    while (!w->confirmed && !c->nt.stop && !atomic_load(&c->closing)) {
        if (c->nt.error[0]) {
            rc = rs__fail(c, RS_ESERVER, "SUBSCRIBE %s refused: %s", channel, c->nt.error);
            c->nt.error[0] = '\0';
            break;
        }
        if (rs__now_ns() >= until) {
            rc = rs__fail(c, RS_ECONN, "cannot subscribe to %s within %ld ms", channel,
                          c->timeout_ms);
            break;
        }
        rs__cv_wait_until(&c->nt.cv, &c->nt.mu, until);
    }
    if (rc == 0 && !w->confirmed)
        rc = rs__fail(c, ECANCELED, "the client is closing");
    pthread_mutex_unlock(&c->nt.mu);
    if (rc)
        rs__notify_unwatch(c, channel);
    return rc;
}

int rs__notify_watch_add(rs_client_t *c, const char *channel)
{
    pthread_mutex_lock(&c->nt.mu);
    struct rs_watch *w = watch_ref_locked(c, channel);
    pthread_mutex_unlock(&c->nt.mu);
    return w ? 0 : ENOMEM;
}

int rs__notify_watch_ready(rs_client_t *c, const char *channel)
{
    pthread_mutex_lock(&c->nt.mu);
    struct rs_watch *w = watch_find(c, channel);
    int ready = w && w->confirmed;
    pthread_mutex_unlock(&c->nt.mu);
    return ready;
}

void rs__notify_unwatch(rs_client_t *c, const char *channel)
{
    pthread_mutex_lock(&c->nt.mu);
    for (struct rs_watch **p = &c->nt.watches; *p; p = &(*p)->next) {
        struct rs_watch *w = *p;
        if (strcmp(w->channel, channel) != 0)
            continue;
        if (--w->refs == 0) {
            *p = w->next;
            write_raw(c, "UNSUBSCRIBE", channel);
            free(w->channel);
            free(w);
        }
        break;
    }
    pthread_mutex_unlock(&c->nt.mu);
}

void rs__notify_forget(rs_client_t *c)
{
    /* in a child of fork(): the thread is gone; free its connection (closing our copy of
     * the socket does not disturb the parent's) and the watched channels */
    for (int i = 0; i < c->nt.nlinks; i++)
        if (c->nt.link[i].ctx) {
            rs__ctx_free(c->nt.link[i].ctx);
            c->nt.link[i].ctx = NULL;
        }
    while (c->nt.watches) {
        struct rs_watch *w = c->nt.watches;
        c->nt.watches = w->next;
        free(w->channel);
        free(w);
    }
}
