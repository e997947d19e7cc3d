/*
 * async_dial.c - the event-loop API's dialer threads (lib/async.c has the overview): what
 * the I/O thread would otherwise wait on the network for, done beside it.
 *
 * The I/O thread pipelines the calls of every pending request of its client; a call that
 * blocked it would hold them all. Its sends, reads and flushes do not block; what did were
 * the dials of its connections (a connect, AUTH/SELECT, under Sentinel the master's lookup,
 * up to 250 ms each) and, in a Cluster, loading the slot map (CLUSTER SLOTS, node after
 * node, up to 300 ms each): a node that accepts TCP but never answers (a stopped process, a
 * black-holed address) made every request of the client late by that much, each time.
 *
 * So a connection the I/O thread misses (route(), rs__aq_master, async_wire.c) is asked
 * for here (rs__adial_want: a bit in dl.want, cn->dialing) and the request waits in the
 * send queue as it waited for a dial before; a stale slot map likewise (rs__adial_refresh).
 * Up to RS_ADIAL_THREADS threads, started one by one as the I/O thread asks for more work
 * than there are idle ones (the first at the first dial: a client whose connections stand
 * has none), take the wanted dials lowest connection first and dial with the budgets of
 * before (rs__conn_connect_to until 250 ms or timeout_ms, the lesser; under Redlock one
 * attempt, rs__conn_connect_once). Several, so that a node that hangs holds one thread and
 * not the dials of the others (a failover's new master, a node a MOVED names); few, since
 * only a hanging dial keeps one busy. A thread puts its result in dl.got[i] (the context, or
 * NULL and the failure's message in dl.err, which goes to as->dial_err, the text of the
 * RS_ECONN a request gets after timeout_ms without a connection) and wakes the I/O thread
 * through its eventfd (wfd), as a submit or a wake-up does. The I/O thread takes the results
 * at its next pass (rs__adial_take, before it sends): the context becomes the connection
 * and the send queue is sent; a failure sets the connection's back-off (50 ms, a second
 * under Redlock) and marks the slot map stale in a Cluster, as before.
 *
 * Closing: when the I/O thread starts to drain it stops the threads (rs__adial_stop: no new
 * dial; one under way ends within its budget, a slot-map load before its next node), and at
 * its end joins them (rs__adial_join) and frees any context they dialled that nobody took,
 * so a close waits at most a dial's budget for them, and mostly not at all (the drain takes
 * longer). A fork child has no such threads: rs__adial_forget frees the memory only.
 *
 * Lock order: as->mu and dl.mu are never held together; the threads call conn.c and
 * cluster.c (their own locks) holding neither.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static long dial_budget_ms(const rs_client_t *c)
{
    return c->timeout_ms < 250 ? c->timeout_ms : 250;
}

/* Connection i dialled: its context, or NULL and the failure's message in err. */
static redisContext *dial(rs_client_t *c, int i, char *err, size_t len)
{
    redisContext *ctx = NULL;
    long budget = dial_budget_ms(c);
    int rc;
    rs__clear_error();
    if (c->ep.mode == RS_MODE_REDLOCK) /* one attempt (rs__aq_master) */
        rc = rs__conn_connect_once(c, i, budget, c->timeout_ms, &ctx);
    else
        rc = rs__conn_connect_to(c, c->ep.mode == RS_MODE_CLUSTER ? i : -1,
                                 rs__now_ns() + (uint64_t)budget * RS_NS_PER_MS, c->timeout_ms,
                                 &ctx);
    if (rc != 0) {
        snprintf(err, len, "%s", rs__error_text());
        return NULL;
    }
    err[0] = '\0';
    return ctx;
}

static int stopped(void *arg)
{
    rs_adial_t *d = arg;
    pthread_mutex_lock(&d->mu);
    int stop = d->stop;
    pthread_mutex_unlock(&d->mu);
    return stop;
}

static void *dialer(void *arg)
{
    rs_async_t *as = arg;
    rs_adial_t *d = &as->dl;
    rs_client_t *c = as->c;
    char err[sizeof d->err];
    pthread_mutex_lock(&d->mu);
    while (!d->stop) {
        if (d->refresh == 1) {
            d->refresh = 2;
            pthread_mutex_unlock(&d->mu);
            rs__cluster_refresh_stop(c, 0, c->timeout_ms, stopped, d);
            pthread_mutex_lock(&d->mu);
            d->refresh = 0;
            d->refreshed = 1;
        } else if (d->want) {
            int i = __builtin_ctzll(d->want);
            d->want &= ~(1ull << i);
            pthread_mutex_unlock(&d->mu);
            redisContext *ctx = dial(c, i, err, sizeof err);
            pthread_mutex_lock(&d->mu);
            d->got[i] = ctx;
            d->ended |= 1ull << i;
            if (c->ep.mode != RS_MODE_REDLOCK) {
                snprintf(d->err, sizeof d->err, "%s", err);
                d->err_new = 1;
            }
        } else {
            d->idle++;
            pthread_cond_wait(&d->cv, &d->mu);
            d->idle--;
            continue;
        }
        atomic_store(&d->ready, 1);
        rs__aq_poke(as->wfd); /* the I/O thread takes it at its next pass */
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Work was added (d->mu held): an idle thread takes it, or a new one is started. 0, or -1
 * when there is no thread to do it. */
static int work_locked(rs_async_t *as)
{
    rs_adial_t *d = &as->dl;
    int queued = __builtin_popcountll(d->want) + (d->refresh == 1);
    if (d->idle >= queued || d->nth == RS_ADIAL_THREADS) {
        pthread_cond_signal(&d->cv);
        return d->nth > 0 ? 0 : -1;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&d->th[d->nth], NULL, dialer, as);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        d->nth++;
    pthread_cond_signal(&d->cv);
    return d->nth > 0 ? 0 : -1;
}

static int init(rs_adial_t *d)
{
    if (d->init)
        return 0;
    if (pthread_mutex_init(&d->mu, NULL) != 0)
        return -1;
    if (pthread_cond_init(&d->cv, NULL) != 0) {
        pthread_mutex_destroy(&d->mu);
        return -1;
    }
    d->init = 1;
    return 0;
}

/* A dial that could not even be asked for: a failure, with its back-off. */
static void dial_failed(rs_async_t *as, rs_aconn_t *cn)
{
    rs_client_t *c = as->c;
    int redlock = c->ep.mode == RS_MODE_REDLOCK;
    cn->next_dial_ns = rs__now_ns() + (redlock ? 1000 : 50) * RS_NS_PER_MS;
    if (c->ep.mode == RS_MODE_CLUSTER)
        rs__cluster_stale(c);
}

void rs__adial_want(rs_async_t *as, rs_aconn_t *cn)
{
    rs_adial_t *d = &as->dl;
    int i = (int)(cn - as->cn);
    if (cn->dialing || as->draining || rs__now_ns() < cn->next_dial_ns)
        return; /* under way, closing, or within its back-off */
    if (init(d) != 0) {
        snprintf(as->dial_err, sizeof as->dial_err, "cannot start a dialer thread");
        dial_failed(as, cn);
        return;
    }
    pthread_mutex_lock(&d->mu);
    d->want |= 1ull << i;
    int rc = work_locked(as);
    if (rc != 0)
        d->want &= ~(1ull << i);
    pthread_mutex_unlock(&d->mu);
    if (rc != 0) {
        snprintf(as->dial_err, sizeof as->dial_err, "cannot start a dialer thread");
        dial_failed(as, cn);
        return;
    }
    cn->dialing = 1;
}

void rs__adial_refresh(rs_async_t *as)
{
    rs_adial_t *d = &as->dl;
    if (!rs__cluster_refresh_due(as->c) || init(d) != 0)
        return;
    pthread_mutex_lock(&d->mu);
    if (d->refresh == 0) {
        d->refresh = 1;
        if (work_locked(as) != 0)
            d->refresh = 0; /* asked again at the next pass */
    }
    pthread_mutex_unlock(&d->mu);
}

void rs__adial_take(rs_async_t *as)
{
    rs_adial_t *d = &as->dl;
    if (!d->init || !atomic_load(&d->ready))
        return;
    redisContext *got[RS_NODES_MAX];
    char err[sizeof d->err];
    pthread_mutex_lock(&d->mu);
    atomic_store(&d->ready, 0);
    uint64_t ended = d->ended;
    d->ended = 0;
    for (uint64_t m = ended; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        got[i] = d->got[i];
        d->got[i] = NULL;
    }
    int err_new = d->err_new, refreshed = d->refreshed;
    d->err_new = d->refreshed = 0;
    if (err_new)
        memcpy(err, d->err, sizeof err);
    pthread_mutex_unlock(&d->mu);
    if (err_new)
        memcpy(as->dial_err, err, sizeof as->dial_err);
    if (refreshed)
        as->next_dial_ns = 0; /* routed again with the new map */
    for (uint64_t m = ended; m; m &= m - 1) {
        int i = __builtin_ctzll(m);
        rs_aconn_t *cn = &as->cn[i];
        cn->dialing = 0;
        if (got[i]) {
            cn->ctx = got[i];
            as->next_dial_ns = 0; /* what waits for it is sent now */
        } else {
            dial_failed(as, cn);
        }
    }
}

void rs__adial_stop(rs_async_t *as)
{
    rs_adial_t *d = &as->dl;
    if (!d->init)
        return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    uint64_t dropped = d->want; /* never dialled: nobody waits for them */
    d->want = 0;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    for (; dropped; dropped &= dropped - 1)
        as->cn[__builtin_ctzll(dropped)].dialing = 0;
}

void rs__adial_join(rs_async_t *as)
{
    rs_adial_t *d = &as->dl;
    if (!d->init)
        return;
    rs__adial_stop(as);
    for (int i = 0; i < d->nth; i++)
        pthread_join(d->th[i], NULL);
    d->nth = 0;
    rs__adial_take(as); /* what ended meanwhile becomes a connection: freed with them */
    for (int i = 0; i < RS_NODES_MAX; i++)
        as->cn[i].dialing = 0;
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    d->init = 0;
}

void rs__adial_forget(rs_async_t *as)
{
    rs_adial_t *d = &as->dl;
    if (!d->init)
        return;
    for (int i = 0; i < RS_NODES_MAX; i++)
        if (d->got[i]) {
            rs__ctx_free(d->got[i]);
            d->got[i] = NULL;
        }
}
