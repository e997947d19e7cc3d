/*
 * async.c - the event-loop API (api.md, "Holds as objects, and the event-loop API"): the
 * _async acquisitions, rs_hold_release_async, rs_request_cancel, rs_client_fd and
 * rs_client_dispatch.
 *
 * One library I/O thread per client (started at the first _async call) owns a connection of
 * its own on which it pipelines the script calls of every pending request: the caller only
 * appends its request to a queue and wakes the thread through an eventfd. The protocol is
 * the blocking one of wait.c, turned into a state machine per request:
 *
 *   SUB    waiting for the client's subscriber to stand (its confirmation pokes us)
 *   SEND   an operation is to be sent (acq in queue mode, cancel, rel)
 *   FLIGHT it was sent; its reply comes in pipeline order (the ring)
 *   WAIT   queued in Redis; a wake-up (the notifier hands it over through the request's
 *          callback waiter), the retry nap (the holder's lease) or the deadline moves it
 *   DELAY  a transient server state (LOADING, BUSY, TRYAGAIN): send again shortly
 *
 * Grants become hold objects exactly as rs_mutex_acquire's (handle.c); queue entries are
 * leases the watchdog renews; deadlines and naps sit in one min-heap (timerheap.c). A broken
 * connection is dialled again and everything that was in flight on it is sent again with
 * its acquisition id (the scripts are idempotent per id) for up to timeout_ms.
 *
 * Completions are made on the I/O thread but published (to the queue rs_client_dispatch
 * runs, behind the eventfd rs_client_fd returns) only at the end of each pass, under as->mu:
 * a request that a pass still refers to is never freed by a dispatch meanwhile, and a
 * cancel that raced a grant is resolved there (the grant is released first).
 *
 * Lock order: wd.mu -> nt.mu -> as->mu (the callback waiter runs under the first two); the
 * I/O thread never calls the watchdog or the notifier while holding as->mu.
 */
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

enum { RQ_ACQ, RQ_REL, RQ_EVT };
enum { ST_NEW, ST_SUB, ST_SEND, ST_FLIGHT, ST_WAIT, ST_DELAY, ST_FIN, ST_UNDO };
enum { OP_ACQ, OP_CANCEL, OP_REL, OP_HREL, OP_GET };
/* REL: undo a grant; HREL: release a hold; GET: check an event (RQ_EVT) */

#define EXTRA_LEN 24

struct rs_request {
    struct rs_async *as;
    int type;
    rs_handle_t *h;
    uint64_t owner_no;
    char acqid[RS_ACQID_MAX];
    unsigned char nextra, zero_fence, try_only, counted;
    char extra[RS_CALL_EXTRA_MAX][EXTRA_LEN];
    unsigned count;
    int busy_rc;
    rs_done_fn *done;
    void *arg;
    uint64_t deadline_ns, sub_cut_ns;
    const rs_async_event_t *ev; /* RQ_EVT: what is waited for, on channel topic */
    const char *topic;
    long long evstate;
    long recheck_ms;
    int watching, final;
    /* the I/O thread's */
    int st, op, queued, registered, resent, lost, in_send, undo_rc;
    uint64_t fence_floor, sent_ns, lower_ns, send_by_ns;
    rs_timer_t tm;
    rs_lease_t *ql;
    rs_waiter_t w;
    struct rs_request *snext;          /* send queue or subscriber queue */
    struct rs_request *anext, *aprev;  /* live requests */
    struct rs_request *bnext;          /* this pass's completions */
    /* under as->mu */
    atomic_int cancel;
    int pub, in_woken, in_cancel, rc;
    rs_hold_t *hold;
    struct rs_request *next;  /* submit list, then completion list */
    struct rs_request *wnext; /* woken list */
    struct rs_request *cnext; /* cancel list */
};

typedef struct rs_async {
    rs_client_t *c;
    pthread_mutex_t mu;
    int efd, wfd;
    pthread_t thread;
    int started, stop;
    rs_request_t *sub_head, *sub_tail, *woken, *can, *done_head, *done_tail;
    /* the I/O thread's */
    rs_theap_t heap;
    int nlive;
    rs_request_t *live, *sendq, *sendq_tail, *subq, *subq_tail, *batch, *batch_tail;
    redisContext *ctx;
    rs_request_t **ring;       /* requests whose replies are owed, in order (NULL: SCRIPT LOAD) */
    size_t rhead, rcount, rcap;
    uint64_t next_dial_ns, drain_end_ns;
    int draining;
} rs_async_t;

static _Thread_local int in_dispatch;

/* ----- small helpers ------------------------------------------------------------------ */

static void poke_fd(int fd)
{
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof one);
    (void)n; /* EAGAIN only when the counter is full: it is readable then anyway */
}

static void drain_fd(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
}

static rs_async_t *get_as(rs_client_t *c, int create)
{
    rs_async_t *as = atomic_load(&c->as);
    if (as || !create)
        return as;
    pthread_mutex_lock(&c->life_mu);
    as = atomic_load(&c->as);
    if (!as && (as = calloc(1, sizeof *as)) != NULL) {
        as->c = c;
        as->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        as->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (as->efd < 0 || as->wfd < 0) {
            int e = errno;
            if (as->efd >= 0)
                close(as->efd);
            if (as->wfd >= 0)
                close(as->wfd);
            free(as);
            as = NULL;
            errno = e;
        } else {
            pthread_mutex_init(&as->mu, NULL);
            atomic_store(&c->as, as);
        }
    } else if (!as) {
        errno = ENOMEM;
    }
    pthread_mutex_unlock(&c->life_mu);
    return as;
}

static void rq_call(const rs_request_t *rq, rs_call_t *k)
{
    rs__call_init_owner(k, rq->h, rq->acqid, rq->owner_no);
    for (int i = 0; i < rq->nextra; i++)
        rs__call_extra(k, rq->extra[i]);
}

static void on_wake(rs_waiter_t *w)
{
    rs_request_t *rq = w->arg;
    rs_async_t *as = rq->as;
    pthread_mutex_lock(&as->mu);
    if (!rq->in_woken) {
        rq->in_woken = 1;
        rq->wnext = as->woken;
        as->woken = rq;
    }
    pthread_mutex_unlock(&as->mu);
    poke_fd(as->wfd);
}

/* ----- the I/O thread's bookkeeping ---------------------------------------------------- */

static void list_remove(rs_request_t **head, rs_request_t **tail, rs_request_t *rq)
{
    rs_request_t *prev = NULL;
    for (rs_request_t *p = *head; p; prev = p, p = p->snext)
        if (p == rq) {
            if (prev)
                prev->snext = p->snext;
            else
                *head = p->snext;
            if (*tail == p)
                *tail = prev;
            break;
        }
    rq->snext = NULL;
}

static void list_append(rs_request_t **head, rs_request_t **tail, rs_request_t *rq)
{
    rq->snext = NULL;
    if (*tail)
        (*tail)->snext = rq;
    else
        *head = rq;
    *tail = rq;
}

static void live_add(rs_async_t *as, rs_request_t *rq)
{
    rq->aprev = NULL;
    rq->anext = as->live;
    if (as->live)
        as->live->aprev = rq;
    as->live = rq;
    as->nlive++;
}

static void live_del(rs_async_t *as, rs_request_t *rq)
{
    if (rq->aprev)
        rq->aprev->anext = rq->anext;
    else if (as->live == rq)
        as->live = rq->anext;
    if (rq->anext)
        rq->anext->aprev = rq->aprev;
    rq->anext = rq->aprev = NULL;
    as->nlive--;
}

static void drop_queue_lease(rs_client_t *c, rs_request_t *rq)
{
    if (rq->ql) {
        rs__watch_del(c, rq->ql);
        rs__lease_unref(rq->ql);
        rq->ql = NULL;
    }
}

/* Ends rq on the I/O thread; published at the end of the pass. */
static void complete(rs_async_t *as, rs_request_t *rq, int rc, rs_hold_t *hold)
{
    rs_client_t *c = as->c;
    rs__theap_del(&as->heap, &rq->tm);
    if (rq->in_send) {
        list_remove(&as->sendq, &as->sendq_tail, rq);
        rq->in_send = 0;
    }
    if (rq->st == ST_SUB)
        list_remove(&as->subq, &as->subq_tail, rq);
    drop_queue_lease(c, rq);
    if (rq->registered) {
        rs__notify_remove(c, &rq->w);
        rq->registered = 0;
    }
    if (rq->watching) {
        rs__notify_unwatch(c, rq->topic);
        rq->watching = 0;
    }
    live_del(as, rq);
    if (!hold && rq->counted) {
        atomic_fetch_sub(&rq->h->nobj, 1);
        rq->counted = 0;
    }
    rq->rc = rc;
    rq->hold = hold;
    rq->st = ST_FIN;
    rq->bnext = NULL;
    if (as->batch_tail)
        as->batch_tail->bnext = rq;
    else
        as->batch = rq;
    as->batch_tail = rq;
}

/* A completion of a release (HREL): the hold goes. */
static void finish_hold(rs_async_t *as, rs_request_t *rq, int rc)
{
    rs_hold_t *hold = rq->hold;
    rq->hold = NULL;
    rs_handle_t *h = hold->obj;
    rs__lease_unref(hold->lease);
    free(hold);
    atomic_fetch_sub(&h->nobj, 1);
    complete(as, rq, rq->type == RQ_REL ? rc : ECANCELED, NULL);
}

static void fail(rs_async_t *as, rs_request_t *rq, int rc)
{
    if (rq->op == OP_HREL)
        finish_hold(as, rq, rc);
    else if (rq->op == OP_REL)
        complete(as, rq, rq->undo_rc ? rq->undo_rc : rc, NULL);
    else
        complete(as, rq, rc, NULL);
}

static void want_send(rs_async_t *as, rs_request_t *rq, int op)
{
    rs__theap_del(&as->heap, &rq->tm);
    rq->op = op;
    rq->st = ST_SEND;
    if (!rq->send_by_ns)
        rq->send_by_ns = rs__now_ns() + (uint64_t)as->c->timeout_ms * RS_NS_PER_MS;
    if (!rq->in_send) {
        rq->in_send = 1;
        list_append(&as->sendq, &as->sendq_tail, rq);
    }
}

static void set_timer(rs_async_t *as, rs_request_t *rq, int st, uint64_t due)
{
    rq->st = st;
    rs__theap_set(&as->heap, &rq->tm, due);
}

/* A grant for rq (fence, lease ttl_ms, from a call sent at sent_ns). */
static void granted(rs_async_t *as, rs_request_t *rq, uint64_t fence, long ttl_ms,
                    uint64_t sent_ns)
{
    if (atomic_load(&rq->cancel) || as->draining) {
        rq->undo_rc = ECANCELED;
        want_send(as, rq, OP_REL); /* the grant raced the cancel: give it back */
        return;
    }
    rs_call_t k;
    rq_call(rq, &k);
    rs_hold_t *hold;
    if (rs__hold_new(&k, &hold) != 0) {
        rq->undo_rc = ENOMEM;
        want_send(as, rq, OP_REL);
        return;
    }
    rs__hold_granted(&k, hold, fence, ttl_ms, sent_ns);
    hold->obj = rq->h;
    hold->count = rq->count ? rq->count : 1;
    if (rq->zero_fence)
        hold->fence = 0;
    rq->counted = 0; /* the handle's count of it passes to the hold */
    complete(as, rq, 0, hold);
}

/* A wake-up for rq, which waits (ST_WAIT). */
static void woken(rs_async_t *as, rs_request_t *rq, int wake, const char *msg)
{
    rs_client_t *c = as->c;
    if (rq->type == RQ_EVT) {
        if (wake == RS_WAKE_MSG || wake == RS_WAKE_RETRY || wake == RS_WAKE_TIMEOUT)
            want_send(as, rq, OP_GET);
        return;
    }
    if (wake == RS_WAKE_MSG) {
        char *end;
        unsigned long long f = strtoull(msg, &end, 10);
        if (end != msg && f > 0 && f > rq->fence_floor && !c->confirm_wakeups) {
            uint64_t lower = rq->lower_ns;
            if (rq->ql) {
                uint64_t conf = rs__lease_confirmed_ns(c, rq->ql);
                if (conf > lower)
                    lower = conf;
            }
            rs_call_t k;
            rq_call(rq, &k);
            granted(as, rq, f, atol(k.lease), lower);
            return;
        }
    }
    if (wake == RS_WAKE_MSG || wake == RS_WAKE_RETRY || wake == RS_WAKE_TIMEOUT)
        want_send(as, rq, OP_ACQ);
}

static void to_wait(rs_async_t *as, rs_request_t *rq, uint64_t until)
{
    set_timer(as, rq, ST_WAIT, until);
    char msg[96];
    int wake = rs__notify_take(as->c, &rq->w, msg, sizeof msg);
    if (wake != RS_WAKE_NONE && wake != RS_WAKE_CANCEL)
        woken(as, rq, wake, msg);
}

/* rq's deadline passed, or it is cancelled: leave the queue (a grant may show) or end. */
static void give_up(rs_async_t *as, rs_request_t *rq)
{
    if (rq->queued)
        want_send(as, rq, OP_CANCEL);
    else
        complete(as, rq, atomic_load(&rq->cancel) || as->draining ? ECANCELED : ETIMEDOUT,
                 NULL);
}

/* ----- the connection ------------------------------------------------------------------ */

static int ring_push(rs_async_t *as, rs_request_t *rq)
{
    if (as->rcount == as->rcap) {
        size_t cap = as->rcap ? as->rcap * 2 : 256;
        rs_request_t **r = malloc(sizeof *r * cap);
        if (!r)
            return ENOMEM;
        for (size_t i = 0; i < as->rcount; i++)
            r[i] = as->ring[(as->rhead + i) % as->rcap];
        free(as->ring);
        as->ring = r;
        as->rcap = cap;
        as->rhead = 0;
    }
    as->ring[(as->rhead + as->rcount++) % as->rcap] = rq;
    return 0;
}

static rs_request_t *ring_pop(rs_async_t *as)
{
    rs_request_t *rq = as->ring[as->rhead];
    as->rhead = (as->rhead + 1) % as->rcap;
    as->rcount--;
    return rq;
}

/* The connection broke: what was in flight is sent again (same ids) on the next one. */
static void conn_broken(rs_async_t *as)
{
    if (as->ctx)
        rs__ctx_free(as->ctx);
    as->ctx = NULL;
    while (as->rcount > 0) {
        rs_request_t *rq = ring_pop(as);
        if (rq && rq->st == ST_FLIGHT) {
            rq->resent = 1;
            want_send(as, rq, rq->op);
        }
    }
}

static void append_op(rs_async_t *as, rs_request_t *rq)
{
    rs_call_t k;
    rs_argv_t args, cmd;
    const rs_script_t *s;
    int nkeys;
    if (rq->op == OP_HREL) {
        rs__lease_argv(rq->hold->lease, rq->hold->lease->release_op, &args);
        s = rq->hold->lease->script;
        nkeys = rq->hold->lease->nkeys;
    } else {
        rq_call(rq, &k);
        const char *op = rq->op == OP_ACQ      ? "acq"
                         : rq->op == OP_CANCEL ? "cancel"
                         : rq->op == OP_GET    ? rq->ev->op
                                               : "rel";
        rs__call_argv(&k, op, rq->op == OP_ACQ && !rq->try_only ? "q" : "t", &args);
        s = rq->h->script;
        nkeys = rq->h->nkeys;
    }
    rs__evalsha_argv(s, nkeys, &args, &cmd);
    if (rs__ctx_append(as->ctx, cmd.n, cmd.v, cmd.len) != 0 || ring_push(as, rq) != 0) {
        fail(as, rq, rs__fail(as->c, ENOMEM, "out of memory"));
        return;
    }
    rq->st = ST_FLIGHT;
    rq->sent_ns = rs__now_ns();
}

static void flush_sends(rs_async_t *as)
{
    rs_client_t *c = as->c;
    uint64_t now = rs__now_ns();
    if (!as->ctx && as->sendq && now >= as->next_dial_ns && !as->draining) {
        redisContext *ctx;
        long budget = c->timeout_ms < 250 ? c->timeout_ms : 250;
        if (rs__conn_connect(c, now + (uint64_t)budget * RS_NS_PER_MS, c->timeout_ms, &ctx) == 0)
            as->ctx = ctx;
        else
            as->next_dial_ns = rs__now_ns() + 50 * RS_NS_PER_MS;
    }
    if (!as->ctx) {
        /* nothing to send on: those that waited timeout_ms for a connection fail */
        now = rs__now_ns();
        for (rs_request_t *rq = as->sendq, *nx; rq; rq = nx) {
            nx = rq->snext;
            if (as->draining || now >= rq->send_by_ns)
                fail(as, rq, rs__fail(c, RS_ECONN, "Redis unreachable for %ld ms",
                                      c->timeout_ms));
        }
        return;
    }
    while (as->sendq) {
        rs_request_t *rq = as->sendq;
        as->sendq = rq->snext;
        if (!as->sendq)
            as->sendq_tail = NULL;
        rq->snext = NULL;
        rq->in_send = 0;
        append_op(as, rq);
    }
    if (rs__ctx_flush(as->ctx) != 0)
        conn_broken(as);
}

static const rs_script_t *rq_script(const rs_request_t *rq)
{
    return rq->op == OP_HREL ? rq->hold->lease->script : rq->h->script;
}

static void on_reply(rs_async_t *as, rs_request_t *rq, redisReply *r)
{
    rs_client_t *c = as->c;
    uint64_t now = rs__now_ns();
    if (r->type == REDIS_REPLY_ERROR) {
        if (rs__is_noscript(r)) {
            const rs_script_t *s = rq_script(rq);
            const char *argv[3] = {"SCRIPT", "LOAD", (const char *)s->body};
            size_t lens[3] = {6, 4, s->len};
            if (rs__ctx_append(as->ctx, 3, argv, lens) == 0 && ring_push(as, NULL) == 0)
                want_send(as, rq, rq->op); /* behind the load, in the same pipeline */
            else
                fail(as, rq, ENOMEM);
            return;
        }
        if (rs__is_transient(r)) {
            set_timer(as, rq, ST_DELAY, now + 20 * RS_NS_PER_MS);
            return;
        }
        if (rs__is_topology_error(c, r)) {
            rs__topo_changed(c);
            rq->resent = 1;
            want_send(as, rq, rq->op);
            rs__ctx_free(as->ctx); /* the replies still owed come to nobody: resend them */
            as->ctx = NULL;
            while (as->rcount > 0) {
                rs_request_t *o = ring_pop(as);
                if (o && o->st == ST_FLIGHT) {
                    o->resent = 1;
                    want_send(as, o, o->op);
                }
            }
            return;
        }
        fail(as, rq, rs__reply_error(c, r));
        return;
    }
    rq->send_by_ns = 0;
    if (rq->op == OP_HREL || rq->op == OP_REL) {
        int lost = rq->lost;
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 0 && !lost && !rq->resent &&
            rq->op == OP_HREL) {
            rs__lease_set_lost(c, rq->hold->lease);
            lost = 1;
        }
        if (rq->op == OP_HREL)
            finish_hold(as, rq, lost ? RS_ELOST : 0);
        else
            complete(as, rq, rq->undo_rc ? rq->undo_rc : ECANCELED, NULL);
        return;
    }
    if (rq->op == OP_GET) {
        int ev = rq->ev->decode(c, r, &rq->evstate);
        if (ev <= 0)
            complete(as, rq, -ev, NULL);
        else if (rq->final || atomic_load(&rq->cancel) || as->draining)
            give_up(as, rq);
        else {
            uint64_t until = now + (uint64_t)rq->recheck_ms * RS_NS_PER_MS;
            to_wait(as, rq, until < rq->deadline_ns ? until : rq->deadline_ns);
        }
        return;
    }
    rs_call_t k;
    rq_call(rq, &k);
    rs_attempt_t at;
    memset(&at, 0, sizeof at);
    int rc = rs__decode_grant(&k, r, &at);
    if (rc) {
        fail(as, rq, rc);
        return;
    }
    if (at.done) {
        complete(as, rq, 0, NULL);
        return;
    }
    if (at.granted) {
        granted(as, rq, at.fence, at.ttl_ms, rq->sent_ns);
        return;
    }
    if (rq->op == OP_CANCEL) {
        complete(as, rq, atomic_load(&rq->cancel) || as->draining ? ECANCELED : ETIMEDOUT, NULL);
        return;
    }
    rq->queued |= at.queued;
    if (at.seen_fence > rq->fence_floor)
        rq->fence_floor = at.seen_fence;
    if (rq->try_only) {
        complete(as, rq, rq->busy_rc, NULL);
        return;
    }
    if (atomic_load(&rq->cancel) || as->draining || now >= rq->deadline_ns) {
        give_up(as, rq);
        return;
    }
    if (at.queued && (!rq->ql || rs__lease_is_lost(c, rq->ql))) {
        drop_queue_lease(c, rq);
        rq->ql = rs__call_lease(&k, "qrenew", NULL);
        if (rq->ql) {
            rq->ql->waiter = &rq->w;
            rs__watch_add(c, rq->ql, rq->sent_ns, rq->ql->lease_ms);
        }
    }
    rq->lower_ns = rq->sent_ns;
    long nap_ms = at.retry_ms > 0 ? at.retry_ms : 1;
    nap_ms += 2 + nap_ms / 100;
    uint64_t until = now + (uint64_t)nap_ms * RS_NS_PER_MS;
    to_wait(as, rq, until < rq->deadline_ns ? until : rq->deadline_ns);
}

static void read_replies(rs_async_t *as)
{
    if (rs__tp_fill(as->ctx, 1) < 0) {
        conn_broken(as);
        return;
    }
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(as->ctx, &r) != REDIS_OK) {
            conn_broken(as);
            return;
        }
        if (!r)
            return;
        if (as->rcount == 0) { /* a reply nobody asked for: the stream is not ours */
            freeReplyObject(r);
            conn_broken(as);
            return;
        }
        rs_request_t *rq = ring_pop(as);
        if (rq && rq->st == ST_FLIGHT)
            on_reply(as, rq, r);
        freeReplyObject(r);
        if (!as->ctx)
            return;
    }
}

/* ----- one pass ------------------------------------------------------------------------ */

static void start_request(rs_async_t *as, rs_request_t *rq)
{
    rs_client_t *c = as->c;
    rq->tm.idx = -1;
    live_add(as, rq);
    if (rs__theap_reserve(&as->heap, as->nlive) != 0) {
        complete(as, rq, ENOMEM, NULL);
        return;
    }
    if (rq->type == RQ_REL) {
        rs__watch_del(c, rq->hold->lease);
        rq->lost = rs__lease_is_lost(c, rq->hold->lease);
        want_send(as, rq, OP_HREL);
        return;
    }
    if (rq->type == RQ_EVT)
        rq->w.topic = rq->topic; /* every message on it wakes the request; no id */
    else
        snprintf(rq->w.id, sizeof rq->w.id, "%s", rq->acqid);
    rq->w.on_wake = on_wake;
    rq->w.arg = rq;
    int rc = rs__notify_add(c, &rq->w);
    if (rc) {
        complete(as, rq, rc == ECANCELED ? ECANCELED
                                         : rs__fail(c, rc, "cannot start the notifier thread"),
                 NULL);
        return;
    }
    rq->registered = 1;
    if (rq->type == RQ_EVT) {
        if (rs__notify_watch_add(c, rq->topic) != 0) {
            complete(as, rq, rs__fail(c, ENOMEM, "out of memory"), NULL);
            return;
        }
        rq->watching = 1;
        rq->evstate = -1;
    }
    if (rq->try_only) {
        rq->final = 1;
        want_send(as, rq, rq->type == RQ_EVT ? OP_GET : OP_ACQ); /* one attempt, no queue */
        return;
    }
    /* queue only once the subscriber stands, in the order the requests came */
    rq->sub_cut_ns = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    list_append(&as->subq, &as->subq_tail, rq);
    set_timer(as, rq, ST_SUB, rq->sub_cut_ns < rq->deadline_ns ? rq->sub_cut_ns
                                                                : rq->deadline_ns);
}

/* Whether rq may start: the subscriber stands (for an event, its channel is confirmed). */
static int sub_ready(rs_async_t *as, rs_request_t *rq, int client_ready)
{
    return rq->type == RQ_EVT ? client_ready && rs__notify_watch_ready(as->c, rq->topic)
                              : client_ready;
}

static void subscribed_check(rs_async_t *as)
{
    if (!as->subq)
        return;
    int ready = rs__notify_ready(as->c);
    if (!ready)
        return;
    char msg[96];
    for (rs_request_t *rq = as->subq, *nx; rq; rq = nx) {
        nx = rq->snext;
        if (!sub_ready(as, rq, ready))
            continue;
        list_remove(&as->subq, &as->subq_tail, rq);
        rq->st = ST_NEW;
        rs__notify_take(as->c, &rq->w, msg, sizeof msg); /* the confirmation's retry */
        want_send(as, rq, rq->type == RQ_EVT ? OP_GET : OP_ACQ);
    }
}

static void on_cancel(rs_async_t *as, rs_request_t *rq)
{
    switch (rq->st) {
    case ST_UNDO: /* a grant dispatched no more: release it, then ECANCELED */
        rq->tm.idx = -1;
        live_add(as, rq);
        rs__theap_reserve(&as->heap, as->nlive);
        rs__watch_del(as->c, rq->hold->lease);
        rq->lost = 1; /* a reply 0 is no news here */
        rq->resent = 0;
        want_send(as, rq, OP_HREL);
        break;
    case ST_SUB:
        complete(as, rq, ECANCELED, NULL);
        break;
    case ST_WAIT:
        give_up(as, rq);
        break;
    case ST_SEND:
    case ST_DELAY:
        if ((rq->op == OP_ACQ || rq->op == OP_GET) && !rq->queued && rq->type != RQ_REL)
            complete(as, rq, ECANCELED, NULL);
        else if (rq->op == OP_ACQ)
            want_send(as, rq, OP_CANCEL);
        break;
    default: /* in flight: its reply sees the flag */
        break;
    }
}

static void on_timer(rs_async_t *as, rs_request_t *rq)
{
    uint64_t now = rs__now_ns();
    if (rq->st == ST_DELAY) {
        want_send(as, rq, rq->op);
    } else if (rq->st == ST_SUB) {
        if (now >= rq->deadline_ns) {
            list_remove(&as->subq, &as->subq_tail, rq);
            rq->st = ST_NEW;
            complete(as, rq, ETIMEDOUT, NULL);
        } else if (sub_ready(as, rq, rs__notify_ready(as->c))) {
            subscribed_check(as);
        } else {
            list_remove(&as->subq, &as->subq_tail, rq);
            rq->st = ST_NEW;
            complete(as, rq, rs__fail(as->c, RS_ECONN, "cannot subscribe to wake-ups within "
                                      "%ld ms", as->c->timeout_ms), NULL);
        }
    } else if (rq->st == ST_WAIT && rq->type == RQ_EVT) {
        rq->final = now >= rq->deadline_ns; /* a last check, then ETIMEDOUT */
        want_send(as, rq, OP_GET);
    } else if (rq->st == ST_WAIT) {
        if (now >= rq->deadline_ns)
            give_up(as, rq);
        else
            want_send(as, rq, OP_ACQ); /* the holder's lease ran out: a message may be lost */
    }
}

/* Publishes this pass's completions (under as->mu): a cancel that came meanwhile turns a
 * grant into a release (kept for the next pass) and any other code into ECANCELED. */
static void publish(rs_async_t *as)
{
    if (!as->batch)
        return;
    rs_request_t *undo = NULL;
    pthread_mutex_lock(&as->mu);
    int was_empty = as->done_head == NULL, added = 0;
    for (rs_request_t *rq = as->batch, *nx; rq; rq = nx) {
        nx = rq->bnext;
        rq->bnext = NULL;
        if (rq->in_woken) {
            for (rs_request_t **p = &as->woken; *p; p = &(*p)->wnext)
                if (*p == rq) {
                    *p = rq->wnext;
                    break;
                }
            rq->in_woken = 0;
        }
        if (rq->in_cancel) {
            for (rs_request_t **p = &as->can; *p; p = &(*p)->cnext)
                if (*p == rq) {
                    *p = rq->cnext;
                    break;
                }
            rq->in_cancel = 0;
            if (rq->hold && rq->type == RQ_ACQ) {
                rq->st = ST_UNDO;
                rq->bnext = undo;
                undo = rq;
                continue;
            }
            if (rq->type == RQ_ACQ)
                rq->rc = ECANCELED;
        }
        rq->pub = 1;
        rq->next = NULL;
        if (as->done_tail)
            as->done_tail->next = rq;
        else
            as->done_head = rq;
        as->done_tail = rq;
        added = 1;
    }
    as->batch = as->batch_tail = NULL;
    if (added && was_empty)
        poke_fd(as->efd);
    pthread_mutex_unlock(&as->mu);
    for (rs_request_t *rq = undo, *nx; rq; rq = nx) {
        nx = rq->bnext;
        on_cancel(as, rq);
    }
}

static void pass(rs_async_t *as)
{
    pthread_mutex_lock(&as->mu);
    rs_request_t *wk = as->woken, *sub = as->sub_head, *can = as->can;
    as->woken = NULL;
    as->sub_head = as->sub_tail = NULL;
    as->can = NULL;
    int stop = as->stop;
    for (rs_request_t *rq = wk; rq; rq = rq->wnext)
        rq->in_woken = 0;
    for (rs_request_t *rq = can; rq; rq = rq->cnext)
        rq->in_cancel = 0;
    pthread_mutex_unlock(&as->mu);

    /* completions are published at the end of the pass: none of these is freed meanwhile */
    char msg[96];
    for (rs_request_t *rq = wk, *nx; rq; rq = nx) {
        nx = rq->wnext;
        if (rq->st != ST_WAIT)
            continue; /* kept in w.wake: taken when it waits (to_wait) */
        int wake = rs__notify_take(as->c, &rq->w, msg, sizeof msg);
        if (wake != RS_WAKE_NONE && wake != RS_WAKE_CANCEL)
            woken(as, rq, wake, msg);
    }
    for (rs_request_t *rq = sub, *nx; rq; rq = nx) {
        nx = rq->next;
        start_request(as, rq);
    }
    for (rs_request_t *rq = can, *nx; rq; rq = nx) {
        nx = rq->cnext;
        on_cancel(as, rq);
    }
    if (stop && !as->draining) {
        /* closing: every acquisition leaves Redis' queue (a grant that raced is released),
         * releases go on; at most timeout_ms more */
        as->draining = 1;
        as->drain_end_ns = rs__now_ns() + (uint64_t)as->c->timeout_ms * RS_NS_PER_MS;
        for (rs_request_t *rq = as->live, *nx; rq; rq = nx) {
            nx = rq->anext;
            if (rq->type != RQ_REL && rq->op != OP_REL)
                on_cancel(as, rq);
        }
    }
    subscribed_check(as);
    uint64_t now = rs__now_ns();
    for (rs_timer_t *t; (t = rs__theap_top(&as->heap)) && t->due_ns <= now;) {
        rs_request_t *rq = (rs_request_t *)((char *)t - offsetof(rs_request_t, tm));
        rs__theap_del(&as->heap, t);
        if (as->draining && rq->st != ST_DELAY)
            give_up(as, rq);
        else
            on_timer(as, rq);
    }
    flush_sends(as);
    publish(as);
}

static void *io_main(void *arg)
{
    rs_async_t *as = arg;
    for (;;) {
        pass(as);
        if (as->draining && (as->nlive == 0 || rs__now_ns() >= as->drain_end_ns))
            break;
        uint64_t now = rs__now_ns(), due = RS_NO_DEADLINE;
        rs_timer_t *t = rs__theap_top(&as->heap);
        if (t)
            due = t->due_ns;
        if (as->sendq && !as->ctx && as->next_dial_ns < due)
            due = as->next_dial_ns;
        if (as->draining && as->drain_end_ns < due)
            due = as->drain_end_ns;
        int timeout = -1;
        if (as->sendq && as->ctx)
            timeout = 0;
        else if (due != RS_NO_DEADLINE)
            timeout = due <= now ? 0 : (int)((due - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS);
        if (timeout > 1000)
            timeout = 1000;
        struct pollfd p[2] = {{as->wfd, POLLIN, 0}, {as->ctx ? as->ctx->fd : -1, POLLIN, 0}};
        if (as->ctx && rs__tp_pending(as->ctx))
            timeout = 0;
        int n = poll(p, 2, timeout);
        if (n < 0 && errno != EINTR)
            rs__sleep_ns(RS_NS_PER_MS);
        if (p[0].revents)
            drain_fd(as->wfd);
        if (as->ctx && (p[1].revents || rs__tp_pending(as->ctx)))
            read_replies(as);
        publish(as);
    }
    /* what is left gets ECANCELED (an acquisition's entry expires with its queue lease) */
    while (as->live) {
        rs_request_t *rq = as->live;
        if (rq->op == OP_HREL && rq->st != ST_NEW)
            finish_hold(as, rq, rs__fail(as->c, RS_ECONN, "Redis unreachable while closing"));
        else
            complete(as, rq, ECANCELED, NULL);
    }
    publish(as);
    if (as->ctx)
        rs__ctx_free(as->ctx);
    as->ctx = NULL;
    return NULL;
}

/* ----- the calls ----------------------------------------------------------------------- */

static int mode_refused(rs_client_t *c, const char *what)
{
    if (c->ep.mode == RS_MODE_REDLOCK)
        return rs__fail(c, ENOTSUP, "%s: the event-loop API is not offered under redlock:// "
                        "(each call is a quorum round on every master); use the blocking "
                        "calls", what);
    if (c->ep.mode == RS_MODE_CLUSTER)
        return rs__fail(c, ENOTSUP, "%s: the event-loop API is not offered under "
                        "redis-cluster:// yet; use the blocking calls", what);
    if (c->min_replicas > 0)
        return rs__fail(c, ENOTSUP, "%s: the event-loop API does not confirm with WAIT yet "
                        "(min_replicas %d); use the blocking calls", what, c->min_replicas);
    return 0;
}

static int submit(rs_client_t *c, rs_request_t *rq)
{
    rs_async_t *as = get_as(c, 1);
    if (!as)
        return rs__fail(c, errno == ENOMEM ? ENOMEM : errno, "cannot create the eventfd: %s",
                        strerror(errno));
    rq->as = as;
    pthread_mutex_lock(&as->mu);
    if (as->stop) {
        pthread_mutex_unlock(&as->mu);
        return rs__fail(c, ECANCELED, "the client is closing");
    }
    if (!as->started) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&as->thread, NULL, io_main, as);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc) {
            pthread_mutex_unlock(&as->mu);
            return rs__fail(c, EAGAIN, "cannot start the I/O thread");
        }
        as->started = 1;
    }
    rq->next = NULL;
    if (as->sub_tail)
        as->sub_tail->next = rq;
    else
        as->sub_head = rq;
    as->sub_tail = rq;
    pthread_mutex_unlock(&as->mu);
    poke_fd(as->wfd);
    return 0;
}

int rs__async_acquire(rs_call_t *k, const struct timespec *abstime, const rs_async_opts_t *o,
                      rs_done_fn *done, void *arg, rs_request_t **req)
{
    rs_client_t *c = k->h->c;
    if (req)
        *req = NULL;
    if (!done || !req)
        return rs__fail(c, EINVAL, "%s is NULL", done ? "req" : "done");
    uint64_t deadline = RS_NO_DEADLINE;
    int rc = abstime ? rs__deadline_from(c, abstime, &deadline) : 0;
    if (rc || (rc = mode_refused(c, "acquire_async")) != 0)
        return rc;
    rs_request_t *rq = calloc(1, sizeof *rq);
    if (!rq)
        return rs__fail(c, ENOMEM, "out of memory");
    rq->type = RQ_ACQ;
    rq->h = k->h;
    rq->owner_no = k->owner_no;
    memcpy(rq->acqid, k->acqid, k->acqlen + 1);
    rq->nextra = (unsigned char)k->nextra;
    for (int i = 0; i < k->nextra; i++)
        snprintf(rq->extra[i], EXTRA_LEN, "%s", k->extra[i]);
    rq->count = o ? o->count : 0;
    rq->zero_fence = o ? (unsigned char)o->zero_fence : 0;
    rq->busy_rc = o && o->busy_rc ? o->busy_rc : EBUSY;
    rq->done = done;
    rq->arg = arg;
    rq->deadline_ns = deadline;
    rq->try_only = deadline <= rs__now_ns();
    rq->counted = 1;
    rq->tm.idx = -1;
    atomic_fetch_add(&k->h->nobj, 1); /* the handle is not destroyed under it */
    if ((rc = submit(c, rq)) != 0) {
        atomic_fetch_sub(&k->h->nobj, 1);
        free(rq);
        return rc;
    }
    *req = rq;
    return 0;
}

int rs__async_event(rs_call_t *k, const char *topic, const rs_async_event_t *ev,
                    long recheck_ms, const struct timespec *abstime, rs_done_fn *done, void *arg,
                    rs_request_t **req)
{
    rs_client_t *c = k->h->c;
    if (req)
        *req = NULL;
    if (!done || !req)
        return rs__fail(c, EINVAL, "%s is NULL", done ? "req" : "done");
    uint64_t deadline = RS_NO_DEADLINE;
    int rc = abstime ? rs__deadline_from(c, abstime, &deadline) : 0;
    if (rc || (rc = mode_refused(c, "wait_async")) != 0)
        return rc;
    rs_request_t *rq = calloc(1, sizeof *rq);
    if (!rq)
        return rs__fail(c, ENOMEM, "out of memory");
    rq->type = RQ_EVT;
    rq->h = k->h;
    rq->owner_no = k->owner_no;
    memcpy(rq->acqid, k->acqid, k->acqlen + 1);
    rq->nextra = (unsigned char)k->nextra;
    for (int i = 0; i < k->nextra; i++)
        snprintf(rq->extra[i], EXTRA_LEN, "%s", k->extra[i]);
    rq->ev = ev;
    rq->recheck_ms = recheck_ms > 0 ? recheck_ms : 1;
    rq->topic = topic;
    rq->done = done;
    rq->arg = arg;
    rq->deadline_ns = deadline;
    rq->try_only = deadline <= rs__now_ns();
    rq->counted = 1;
    rq->tm.idx = -1;
    atomic_fetch_add(&k->h->nobj, 1); /* the handle (and topic) outlive the request */
    if ((rc = submit(c, rq)) != 0) {
        atomic_fetch_sub(&k->h->nobj, 1);
        free(rq);
        return rc;
    }
    *req = rq;
    return 0;
}

RS_API int rs_hold_release_async(rs_hold_t *hold, rs_done_fn *done, void *arg)
{
    if (!hold || !hold->obj)
        return rs__fail(NULL, EINVAL, hold ? "not a hold object (a thread's hold is released "
                                             "with its primitive's unlock)"
                                           : "hold is NULL");
    rs_client_t *c = hold->obj->c;
    if (!done)
        return rs__fail(c, EINVAL, "done is NULL");
    int rc = rs__enter(c);
    if (rc == ECANCELED) {
        rs_hold_release(hold); /* after close: only the memory goes */
        return rc;
    }
    if (rc)
        return rc;
    if ((rc = mode_refused(c, "rs_hold_release_async")) == 0) {
        rs_request_t *rq = calloc(1, sizeof *rq);
        if (!rq) {
            rc = rs__fail(c, ENOMEM, "out of memory");
        } else {
            rq->type = RQ_REL;
            rq->h = hold->obj;
            rq->hold = hold;
            rq->done = done;
            rq->arg = arg;
            rq->deadline_ns = RS_NO_DEADLINE;
            rq->tm.idx = -1;
            if ((rc = submit(c, rq)) != 0)
                free(rq);
        }
    }
    rs__leave(c);
    return rc;
}

RS_API int rs_request_cancel(rs_request_t *rq)
{
    if (!rq)
        return rs__fail(NULL, EINVAL, "request is NULL");
    rs_async_t *as = rq->as;
    pthread_mutex_lock(&as->mu);
    if (rq->pub) {
        /* completed, not yet dispatched */
        rs_request_t *prev = NULL, *p = as->done_head;
        while (p && p != rq)
            prev = p, p = p->next;
        if (!p) {
            /* being dispatched now: done is about to run (req is not valid any more) */
        } else if (rq->rc == 0 && rq->hold && rq->type == RQ_ACQ) {
            if (prev)
                prev->next = p->next;
            else
                as->done_head = p->next;
            if (as->done_tail == p)
                as->done_tail = prev;
            rq->pub = 0;
            rq->st = ST_UNDO;
            rq->in_cancel = 1;
            rq->cnext = as->can;
            as->can = rq;
        } else if (rq->type == RQ_ACQ) {
            rq->rc = ECANCELED;
        }
    } else {
        atomic_store(&rq->cancel, 1);
        if (!rq->in_cancel) {
            rq->in_cancel = 1;
            rq->cnext = as->can;
            as->can = rq;
        }
    }
    pthread_mutex_unlock(&as->mu);
    poke_fd(as->wfd);
    return 0;
}

RS_API int rs_client_fd(rs_client_t *c)
{
    if (rs__enter(c) != 0)
        return -1;
    rs_async_t *as = get_as(c, 1);
    int fd = as ? as->efd : -1;
    if (!as)
        rs__fail(c, errno == ENOMEM ? ENOMEM : errno, "cannot create the eventfd: %s",
                 strerror(errno));
    rs__leave(c);
    return fd;
}

/* Runs the completions of list (taken off the queue); in_dispatch keeps callbacks from
 * dispatching again. */
static int run_list(rs_request_t *list)
{
    int n = 0;
    in_dispatch = 1;
    while (list) {
        rs_request_t *rq = list;
        list = rq->next;
        rq->done(rq->rc, rq->rc == 0 ? rq->hold : NULL, rq->arg);
        free(rq);
        n++;
    }
    in_dispatch = 0;
    return n;
}

RS_API int rs_client_dispatch(rs_client_t *c)
{
    if (!c || in_dispatch || rs__forked(c))
        return 0;
    rs_async_t *as = get_as(c, 0);
    if (!as)
        return 0;
    pthread_mutex_lock(&as->mu);
    rs_request_t *list = as->done_head;
    as->done_head = as->done_tail = NULL;
    drain_fd(as->efd); /* readable again at the next completion */
    pthread_mutex_unlock(&as->mu);
    return run_list(list);
}

/* ----- close ------------------------------------------------------------------------- */

void rs__async_stop(rs_client_t *c)
{
    rs_async_t *as = get_as(c, 0);
    if (!as)
        return;
    pthread_mutex_lock(&as->mu);
    as->stop = 1;
    int started = as->started;
    pthread_mutex_unlock(&as->mu);
    poke_fd(as->wfd);
    if (started)
        pthread_join(as->thread, NULL);
}

void rs__async_finish(rs_client_t *c)
{
    rs_async_t *as = get_as(c, 0);
    if (!as)
        return;
    /* the holds were released by the close: grants not dispatched become ECANCELED */
    rs_request_t *list = as->done_head;
    as->done_head = as->done_tail = NULL;
    /* grants whose cancel came after the thread ended: they end here */
    for (rs_request_t *rq = as->can; rq; rq = rq->cnext)
        if (rq->st == ST_UNDO) {
            rq->next = list;
            list = rq;
        }
    as->can = NULL;
    for (rs_request_t *rq = list; rq; rq = rq->next) {
        if (rq->rc == 0 && rq->hold && rq->type == RQ_ACQ) {
            rs_handle_t *h = rq->hold->obj;
            rs__watch_del(c, rq->hold->lease);
            rs__hold_discard(rq->hold);
            atomic_fetch_sub(&h->nobj, 1);
            rq->hold = NULL;
            rq->rc = ECANCELED;
        }
    }
    int was = in_dispatch;
    run_list(list);
    in_dispatch = was;
    atomic_store(&c->as, NULL);
    close(as->efd);
    close(as->wfd);
    pthread_mutex_destroy(&as->mu);
    rs__theap_free(&as->heap);
    free(as->ring);
    free(as);
}

void rs__async_forget(rs_client_t *c)
{
    rs_async_t *as = get_as(c, 0);
    if (!as)
        return;
    /* a fork child: no thread, the parent's requests; only the memory and the fds go */
    for (rs_request_t *rq = as->done_head, *nx; rq; rq = nx) {
        nx = rq->next;
        free(rq);
    }
    atomic_store(&c->as, NULL);
    if (as->ctx)
        rs__ctx_free(as->ctx);
    close(as->efd);
    close(as->wfd);
    rs__theap_free(&as->heap);
    free(as->ring);
    free(as);
}
