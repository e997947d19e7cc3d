/*
 * async.c - the event-loop API (api.md, "Holds as objects, and the event-loop API"): the
 * _async acquisitions, rs_hold_release_async, rs_request_cancel, rs_client_fd,
 * rs_client_dispatch and what rs_client_close does with pending requests. The I/O thread
 * itself is async_req.c (each request's state machine, the thread's loop) and async_wire.c
 * (its connections), which async_dial.c's threads dial for it; the deadline heap is
 * timerheap.c.
 *
 * One library I/O thread per client (started at the first _async call) owns a connection of
 * its own (under Cluster one per master, each request's calls on the master of its name's
 * slot; under Redlock one per master, each round of a request on all of them and decided
 * by quorum: async_rl.c) on which it pipelines the script calls of every pending request:
 * the caller only appends its request to a queue and wakes the thread through an eventfd.
 * The protocol is the blocking one of wait.c, turned into a state machine per request:
 *
 *   SUB    waiting for the client's subscriber to stand (its confirmation pokes us; in a
 *          Cluster with sharded wake-ups, also the name's sharded channel)
 *   SEND   an operation is to be sent (acq in queue mode, cancel, rel)
 *   FLIGHT it was sent; its reply comes in pipeline order (the ring)
 *   WAIT   queued in Redis; a wake-up (the notifier hands it over through the request's
 *          callback waiter), the retry nap (the holder's lease) or the deadline moves it
 *   DELAY  a transient server state (LOADING, BUSY, TRYAGAIN): send again shortly
 *
 * (MOVED and ASK make a request SEND again at once, where they point: async_wire.c.)
 *
 * Grants become hold objects exactly as rs_mutex_acquire's (handle.c); queue entries are
 * leases the watchdog renews; deadlines and naps sit in one min-heap (timerheap.c). A broken
 * connection is dialled again (off the I/O thread, which never waits on the network: a node
 * that hangs delays only the requests that need it) and everything that was in flight on it
 * is sent again with its acquisition id (the scripts are idempotent per id) for up to
 * timeout_ms.
 *
 * Completions are made on the I/O thread but published (to the queue rs_client_dispatch
 * runs, behind the eventfd rs_client_fd returns) only at the end of each pass, under as->mu:
 * a request that a pass still refers to is never freed by a dispatch meanwhile, and a
 * cancel that raced a grant is resolved there (the grant is released first).
 *
 * Lock order: wd.mu -> nt.mu -> as->mu (the callback waiter runs under the first two); the
 * I/O thread never calls the watchdog or the notifier while holding as->mu.
 */
#include <errno.h>
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

static _Thread_local int in_dispatch;

/* ----- small helpers ------------------------------------------------------------------ */

/* Wakes the I/O thread once per batch (as->mu held; returns whether to write wfd after
 * unlocking). */
static int wake_locked(rs_async_t *as)
{
    if (as->poked)
        return 0;
    as->poked = 1;
    return 1;
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

void rs__aq_call(const rs_request_t *rq, rs_call_t *k)
{
    rs__call_init_owner(k, rq->h, rq->str, rq->owner_no);
    const char *e = rq->str + strlen(rq->str) + 1;
    for (int i = 0; i < rq->nextra; i++, e += strlen(e) + 1)
        rs__call_extra(k, e);
}

void rs__aq_on_wake(rs_waiter_t *w)
{
    rs_request_t *rq = (rs_request_t *)(void *)((char *)w - offsetof(rs_request_t, w));
    rs_async_t *as = RS_RQ_AS(rq);
    pthread_mutex_lock(&as->mu);
    int poke = 0;
    if (!rq->in_woken) {
        rq->in_woken = 1;
        rq->wnext = as->woken;
        as->woken = rq;
        poke = wake_locked(as);
    }
    pthread_mutex_unlock(&as->mu);
    if (poke)
        rs__aq_poke(as->wfd);
}

/* A request's queue-entry lease rebuilds its call from the request's immutable fields and
 * strings, never from the handle (which may be gone while a round still holds the lease). */
static void queue_lease_build(const rs_lease_t *l, const char *op, rs_lease_scratch_t *sc,
                              rs_argv_t *out)
{
    const rs_request_t *rq = (const rs_request_t *)(const void *)l; /* its first member */
    rs_handle_t *v = &sc->view;
    v->c = l->c;
    v->kind = l->kind;
    v->script = l->script;
    v->suffixes = l->src;
    v->key[0] = (char *)rq->str + rq->kat;
    v->klen[0] = rq->klen;
    v->nkeys = l->nkeys;
    atomic_init(&v->lease_ms, l->lease_ms);
    rs__call_init_owner(&sc->k, v, rq->str, rq->owner_no);
    const char *e = rq->str + strlen(rq->str) + 1;
    for (int i = 0; i < rq->nextra; i++, e += strlen(e) + 1)
        rs__call_extra(&sc->k, e);
    rs__call_argv(&sc->k, op, "q", out);
}

/* A zeroed request with len bytes of strings; its lease (unregistered, one reference) is
 * what frees it (rs__aq_free). */
static rs_request_t *request_alloc(rs_client_t *c, size_t len)
{
    size_t rlat = 0;
    if (c->ep.mode == RS_MODE_REDLOCK) {
        /* its state across the masters (async_rl.c), after the strings, aligned */
        size_t at = (offsetof(rs_request_t, str) + len + 7) & ~(size_t)7;
        rlat = at - offsetof(rs_request_t, str);
        len = rlat + sizeof(rs_arl_t);
    }
    size_t n = offsetof(rs_request_t, str) + len; /* (not sizeof: no tail padding) */
    rs_request_t *rq = calloc(1, n > sizeof *rq ? n : sizeof *rq);
    if (rq) {
        rq->start_ms = (uint32_t)(rs__now_ns() / RS_NS_PER_MS);
        rq->rlat = (unsigned short)rlat;
        rq->ql.c = c;
        atomic_init(&rq->ql.refs, 1);
    }
    return rq;
}

/* ----- the calls ----------------------------------------------------------------------- */

/* Under Redlock only the mutex is offered (the other kinds' init is ENOTSUP there): an
 * event wait cannot come here; refused should one ever try. */
static int mode_refused(rs_client_t *c, int type, const char *what)
{
    if (c->ep.mode == RS_MODE_REDLOCK && type == RQ_EVT)
        return rs__fail(c, ENOTSUP, "%s is not offered under redlock://", what);
    return 0;
}

static int submit(rs_client_t *c, rs_request_t *rq)
{
    rs_async_t *as = get_as(c, 1);
    if (!as)
        return rs__fail(c, errno == ENOMEM ? ENOMEM : errno, "cannot create the eventfd: %s",
                        strerror(errno));
    pthread_mutex_lock(&as->mu);
    if (as->stop) {
        pthread_mutex_unlock(&as->mu);
        return rs__fail(c, ECANCELED, "the client is closing");
    }
    if (!as->started) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = pthread_create(&as->thread, NULL, rs__aq_main, as);
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
    int poke = wake_locked(as);
    pthread_mutex_unlock(&as->mu);
    if (poke)
        rs__aq_poke(as->wfd);
    return 0;
}

/* The checks every request call makes, then a request of type for k's acquisition, not yet
 * submitted: 0 and *out, or the error (nothing allocated). */
static int request_new(rs_call_t *k, int type, const char *what, const struct timespec *abstime,
                       rs_done_fn *done, void *arg, rs_request_t **req, rs_request_t **out)
{
    rs_client_t *c = k->h->c;
    if (req)
        *req = NULL;
    if (!done || !req)
        return rs__fail(c, EINVAL, "%s is NULL", done ? "req" : "done");
    uint64_t deadline = RS_NO_DEADLINE;
    int rc = abstime ? rs__deadline_from(c, abstime, &deadline) : 0;
    if (rc || (rc = mode_refused(c, type, what)) != 0)
        return rc;
    rs_handle_t *h = k->h;
    size_t len = k->acqlen + 1;
    for (int i = 0; i < k->nextra; i++)
        len += strlen(k->extra[i]) + 1;
    size_t kat = len;
    if (type == RQ_ACQ)
        len += h->klen[0] + 1; /* its queue entry's key */
    rs_request_t *rq = request_alloc(c, len);
    if (!rq)
        return rs__fail(c, ENOMEM, "out of memory");
    rq->type = type;
    rq->h = h;
    rq->owner_no = k->owner_no;
    char *p = rq->str;
    memcpy(p, k->acqid, k->acqlen + 1);
    p += k->acqlen + 1;
    rq->nextra = (unsigned char)k->nextra;
    for (int i = 0; i < k->nextra; i++) {
        size_t n = strlen(k->extra[i]) + 1;
        memcpy(p, k->extra[i], n);
        p += n;
    }
    if (type == RQ_ACQ) {
        /* the queue entry's lease, in the block: renewed with "qrenew" (a queue entry lives
         * as long as a hold: the call's lease) */
        rq->kat = (unsigned short)kat;
        rq->klen = (unsigned short)h->klen[0];
        memcpy(p, h->key[0], h->klen[0]);
        p[h->klen[0]] = '\0';
        /* named by its key in the watchdog's log lines (a queue entry is never reported
         * lost: no on_lost, which would want the name alone) */
        rs__lease_init_built(&rq->ql, c, h->script, h->nkeys, queue_lease_build, "qrenew", NULL,
                             atol(k->lease), h->kind, p);
        rq->ql.src = h->suffixes; /* static: the builder's */
        rq->ql.waiter = &rq->w;
    }
    rq->done = done;
    rq->arg = arg;
    rq->deadline_ns = deadline;
    rq->try_only = deadline <= rs__now_ns();
    rq->counted = 1;
    rq->tm.idx = -1;
    *out = rq;
    return 0;
}

/* Submits rq, made by request_new: on 0 the caller's *req is rq. */
static int request_submit(rs_client_t *c, rs_request_t *rq, rs_request_t **req)
{
    atomic_fetch_add(&rq->h->nobj, 1); /* the handle (and a topic) outlive the request */
    int rc = submit(c, rq);
    if (rc != 0) {
        atomic_fetch_sub(&rq->h->nobj, 1);
        rq->err = NULL; /* (in place of ev: not a message) */
        rs__aq_free(rq);
        return rc;
    }
    *req = rq;
    return 0;
}

int rs__async_acquire(rs_call_t *k, const struct timespec *abstime, const rs_async_opts_t *o,
                      rs_done_fn *done, void *arg, rs_request_t **req)
{
    rs_request_t *rq;
    int rc = request_new(k, RQ_ACQ, "acquire_async", abstime, done, arg, req, &rq);
    if (rc)
        return rc;
    rq->count = o ? o->count : 0;
    rq->zero_fence = o ? (unsigned char)o->zero_fence : 0;
    rq->busy_rc = o && o->busy_rc ? o->busy_rc : EBUSY;
    return request_submit(k->h->c, rq, req);
}

int rs__async_event(rs_call_t *k, const char *topic, const rs_async_event_t *ev,
                    long recheck_ms, const struct timespec *abstime, rs_done_fn *done, void *arg,
                    rs_request_t **req)
{
    rs_request_t *rq;
    int rc = request_new(k, RQ_EVT, "wait_async", abstime, done, arg, req, &rq);
    if (rc)
        return rc;
    rq->ev = ev;
    rq->recheck_ms = recheck_ms > 0 ? recheck_ms : 1;
    rq->w.topic = topic; /* every message on it wakes the request (no id) */
    return request_submit(k->h->c, rq, req);
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
    rs_request_t *rq = request_alloc(c, 1); /* no acquisition id: str "" */
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
            rs__aq_free(rq);
    }
    rs__leave(c);
    return rc;
}

RS_API int rs_request_cancel(rs_request_t *rq)
{
    if (!rq)
        return rs__fail(NULL, EINVAL, "request is NULL");
    rs_async_t *as = RS_RQ_AS(rq);
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
            atomic_store(&rq->cancel, 1); /* (its message names rs_request_cancel) */
            rq->in_cancel = 1;
            rq->cnext = as->can;
            as->can = rq;
        } else {
            rs__aq_cancel_completed(rq);
        }
    } else {
        atomic_store(&rq->cancel, 1);
        if (!rq->in_cancel) {
            rq->in_cancel = 1;
            rq->cnext = as->can;
            as->can = rq;
        }
    }
    int poke = wake_locked(as);
    pthread_mutex_unlock(&as->mu);
    if (poke)
        rs__aq_poke(as->wfd);
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

/* What done reads when no message could be kept (no memory for its copy). */
static const char *static_text(int rc)
{
    switch (rc) {
    case ETIMEDOUT:
        return "deadline passed while waiting";
    case ECANCELED:
        return "cancelled (rs_request_cancel or rs_client_close)";
    case EBUSY:
        return "busy (held by another owner)";
    case EAGAIN:
        return "no permit is free";
    case RS_ELOST:
        return "the hold had been lost before its release";
    case RS_ECONN:
        return "Redis unreachable";
    case RS_ESERVER:
        return "Redis answered with an error";
    case RS_EREPL:
        return "too few replicas confirmed the acquisition; it was undone";
    case ENOMEM:
        return "out of memory";
    default:
        return "the request failed (no memory for its message)";
    }
}

/* Runs the completions of list (taken off the queue); in_dispatch keeps callbacks from
 * dispatching again. Inside each done this thread's message is that request's ("" for
 * rc 0); after them it is what it was before. */
static int run_list(rs_request_t *list)
{
    int n = 0;
    char saved[512];
    snprintf(saved, sizeof saved, "%s", rs__error_text());
    in_dispatch = 1;
    while (list) {
        rs_request_t *rq = list;
        list = rq->next;
        rs__error_set(rq->rc == 0 ? "" : rq->err ? rq->err : static_text(rq->rc));
        rq->done(rq->rc, rq->rc == 0 ? rq->hold : NULL, rq->arg);
        rs__aq_free(rq); /* the block stays while a watchdog round holds its lease */
        n++;
    }
    in_dispatch = 0;
    rs__error_set(saved);
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
    rs__aq_drain(as->efd); /* readable again at the next completion */
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
    rs__aq_poke(as->wfd);
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
            char text[256]; /* named while the hold still counts on the handle */
            snprintf(text, sizeof text, "the acquisition of %s \"%.*s\" was cancelled by %s",
                     h->kind, RS_HNAME(h),
                     atomic_load(&rq->cancel) ? "rs_request_cancel (its grant released by "
                                                "rs_client_close)"
                                              : "rs_client_close (granted, not dispatched "
                                                "before the close)");
            free(rq->err);
            rq->err = strdup(text);
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
    rs__aq_conns_free(as);
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
        rs__aq_free(rq);
    }
    atomic_store(&c->as, NULL);
    rs__adial_forget(as);
    rs__aq_conns_free(as);
    close(as->efd);
    close(as->wfd);
    rs__theap_free(&as->heap);
    free(as);
}
