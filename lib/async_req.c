/*
 * async_req.c - the event-loop API's I/O thread (lib/async.c has the overview): each pending
 * request's state machine (SUB, SEND, FLIGHT, WAIT, DELAY; completion), the deadlines and
 * naps in the client's timer heap, cancellations, and the thread's loop: one pass takes the
 * submitted, woken and cancelled requests, runs what is due, sends (async_wire.c) and
 * publishes the pass's completions for rs_client_dispatch.
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

/* ----- the I/O thread's bookkeeping ---------------------------------------------------- */

void rs__aq_list_remove(rs_request_t **head, rs_request_t **tail, rs_request_t *rq)
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

void rs__aq_list_append(rs_request_t **head, rs_request_t **tail, rs_request_t *rq)
{
    rq->snext = NULL;
    if (*tail)
        (*tail)->snext = rq;
    else
        *head = rq;
    *tail = rq;
}

void rs__aq_live_add(rs_async_t *as, rs_request_t *rq)
{
    rq->aprev = NULL;
    rq->anext = as->live;
    if (as->live)
        as->live->aprev = rq;
    as->live = rq;
    as->nlive++;
}

void rs__aq_live_del(rs_async_t *as, rs_request_t *rq)
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

void rs__aq_drop_queue_lease(rs_client_t *c, rs_request_t *rq)
{
    if (rq->qleased) {
        rs__watch_del(c, &rq->ql);
        rq->qleased = 0;
    }
}

/* ----- the messages done reads (rs_client_lasterror inside done) ----------------------- */

void rs__aq_free(rs_request_t *rq)
{
    free(rq->err);
    rq->err = NULL;
    if (rq->rlat) {
        rs_arl_t *rl = rs__aq_rl(rq);
        free(rl->err_text);
        rl->err_text = NULL;
    }
    rs__lease_unref(&rq->ql);
}

int rs__aq_why(rs_async_t *as, rs_request_t *rq, int rc)
{
    rs_client_t *c = as->c;
    const rs_handle_t *h = rq->h;
    const char *what = rq->type == RQ_REL   ? "the release of"
                       : rq->type == RQ_EVT ? "the wait on"
                                            : "the acquisition of";
    switch (rc) {
    case ETIMEDOUT:
        return rs__fail(c, rc, "deadline passed after %u ms of waiting for %s \"%.*s\"%s",
                        (unsigned)RS_RQ_WAITED_MS(rq), h->kind, RS_HNAME(h),
                        rq->queued ? " (held by another owner; it left the queue)" : "");
    case ECANCELED:
        return rs__fail(c, rc, "%s %s \"%.*s\" was cancelled by %s", what, h->kind, RS_HNAME(h),
                        atomic_load(&rq->cancel) ? "rs_request_cancel"
                                                 : "rs_client_close (the client is closing)");
    case EBUSY:
        return rs__fail(c, rc, "%s \"%.*s\" is busy (held by another owner; the deadline had "
                        "passed: one attempt, no wait)", h->kind, RS_HNAME(h));
    case EAGAIN:
        return rs__fail(c, rc, "no permit of %s \"%.*s\" is free (the deadline had passed: one "
                        "attempt, no wait)", h->kind, RS_HNAME(h));
    case RS_ELOST:
        return rs__fail(c, rc, "the hold on %s \"%.*s\" had been lost before its release (its "
                        "lease expired, or another owner took it)", h->kind, RS_HNAME(h));
    case ENOMEM:
        return rs__fail(c, rc, "out of memory (%s %s \"%.*s\")", what, h->kind, RS_HNAME(h));
    default:
        return rs__fail(c, rc, "%s %s \"%.*s\" failed (error %d)", what, h->kind, RS_HNAME(h),
                        rc);
    }
}

int rs__aq_stop_rc(rs_async_t *as, rs_request_t *rq)
{
    return rs__aq_why(as, rq, atomic_load(&rq->cancel) || as->draining ? ECANCELED : ETIMEDOUT);
}

void rs__aq_set_undo(rs_request_t *rq, int rc, int note)
{
    if (RS_RQ_NOTED(rq))
        free(rq->err);
    rq->undo_rc = rc;
    rq->err = note ? strdup(rs__error_text()) : NULL; /* NULL: no memory, a static text */
}

void rs__aq_cancel_completed(rs_request_t *rq)
{
    if (rq->type != RQ_ACQ || rq->rc == ECANCELED)
        return;
    rq->rc = ECANCELED;
    free(rq->err);
    /* rq->h may be gone by now: no name; NULL (no memory): a static text */
    rq->err = strdup("cancelled by rs_request_cancel");
}

int rs__aq_undone(rs_async_t *as, rs_request_t *rq)
{
    if (!rq->undo_rc)
        return rs__aq_why(as, rq, ECANCELED);
    if (rq->err)
        rs__error_set(rq->err);
    else
        rs__aq_why(as, rq, rq->undo_rc);
    return rq->undo_rc;
}

/* rq's message for rc (see rs__aq_complete), while rq->h is still counted: rq->err from
 * here on. */
static void keep_text(rs_async_t *as, rs_request_t *rq, int rc)
{
    char *noted = RS_RQ_NOTED(rq) ? rq->err : NULL;
    if (rc != 0 && noted && !rs__error_text()[0]) {
        rq->err = noted;
    } else {
        free(noted);
        if (rc != 0 && !rs__error_text()[0])
            rs__aq_why(as, rq, rc);
        rq->err = rc != 0 ? strdup(rs__error_text()) : NULL; /* NULL: a static text */
    }
    rs__clear_error();
}

/* ----- the transitions ----------------------------------------------------------------- */

/* Ends rq on the I/O thread; published at the end of the pass. */
void rs__aq_complete(rs_async_t *as, rs_request_t *rq, int rc, rs_hold_t *hold)
{
    rs_client_t *c = as->c;
    if (as->draining && rc != 0 && rq->type != RQ_REL && rc != ECANCELED) {
        /* rs_client_close: whatever stopped it, the close did */
        if (RS_RQ_NOTED(rq))
            rs__aq_set_undo(rq, rq->undo_rc, 0); /* its note goes */
        rc = rs__aq_why(as, rq, ECANCELED);
    }
    keep_text(as, rq, rc);
    rs__theap_del(&as->heap, &rq->tm);
    if (rq->in_send) {
        rs__aq_list_remove(&as->sendq, &as->sendq_tail, rq);
        rq->in_send = 0;
    }
    if (rq->st == ST_SUB)
        rs__aq_list_remove(&as->subq, &as->subq_tail, rq);
    rs__aq_drop_queue_lease(c, rq);
    if (c->ep.mode == RS_MODE_REDLOCK)
        rs__arl_forget(as, rq); /* its replies still due are read by nobody */
    if (rq->w.shard)
        rs__notify_shard_end(c, &rq->w);
    if (rq->registered) {
        rs__notify_remove(c, &rq->w);
        rq->registered = 0;
    }
    if (rq->watching) {
        rs__notify_unwatch(c, rq->w.topic);
        rq->watching = 0;
    }
    rs__aq_live_del(as, rq);
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
void rs__aq_finish_hold(rs_async_t *as, rs_request_t *rq, int rc)
{
    if (rq->type != RQ_REL) /* a grant given back after a cancel (its message named while
                               the hold still counts on the handle) */
        rc = rs__aq_why(as, rq, ECANCELED);
    rs_hold_t *hold = rq->hold;
    rq->hold = NULL;
    rs_handle_t *h = hold->obj;
    rs__lease_unref(hold->lease);
    free(hold);
    atomic_fetch_sub(&h->nobj, 1);
    rs__aq_complete(as, rq, rc, NULL);
}

void rs__aq_fail(rs_async_t *as, rs_request_t *rq, int rc)
{
    if (rq->op == OP_HREL)
        rs__aq_finish_hold(as, rq, rc);
    else if (rq->op == OP_REL)
        rs__aq_complete(as, rq, rq->undo_rc ? rs__aq_undone(as, rq) : rc, NULL);
    else
        rs__aq_complete(as, rq, rc, NULL);
}

void rs__aq_want_send(rs_async_t *as, rs_request_t *rq, int op)
{
    rs__theap_del(&as->heap, &rq->tm);
    rq->op = op;
    rq->st = ST_SEND;
    as->next_dial_ns = 0; /* to be sent at the next pass (async_wire.c: per connection, a
                             failed dial waits for its own next_dial_ns) */
    if (!rq->send_by_ns)
        rq->send_by_ns = rs__now_ns() + (uint64_t)as->c->timeout_ms * RS_NS_PER_MS;
    if (!rq->in_send) {
        rq->in_send = 1;
        rs__aq_list_append(&as->sendq, &as->sendq_tail, rq);
    }
}

void rs__aq_set_timer(rs_async_t *as, rs_request_t *rq, int st, uint64_t due)
{
    rq->st = st;
    rs__theap_set(&as->heap, &rq->tm, due);
}

/* A grant for rq (fence, lease ttl_ms, from a call sent at sent_ns). */
void rs__aq_granted(rs_async_t *as, rs_request_t *rq, uint64_t fence, long ttl_ms,
                    uint64_t sent_ns, unsigned rl_granted)
{
    if (atomic_load(&rq->cancel) || as->draining) {
        rs__aq_set_undo(rq, ECANCELED, 0);
        rs__aq_want_send(as, rq, OP_REL); /* the grant raced the cancel: give it back */
        return;
    }
    rs_call_t k;
    rs__aq_call(rq, &k);
    rs_hold_t *hold;
    if (rs__hold_new(&k, &hold) != 0) {
        rs__aq_set_undo(rq, rs__fail(as->c, ENOMEM, "out of memory for the hold on %s \"%.*s\" "
                                     "(the grant was given back)", rq->h->kind,
                                     RS_HNAME(rq->h)), 1);
        rs__aq_want_send(as, rq, OP_REL);
        return;
    }
    atomic_store(&hold->lease->rl_held, rl_granted); /* Redlock: the masters that granted */
    rs__hold_granted(&k, hold, fence, ttl_ms, sent_ns);
    hold->obj = rq->h;
    hold->count = rq->count ? rq->count : 1;
    if (rq->zero_fence)
        hold->fence = 0;
    rq->counted = 0; /* the handle's count of it passes to the hold */
    rs__aq_complete(as, rq, 0, hold);
}

/* A wake-up for rq, which waits (ST_WAIT). */
void rs__aq_woken(rs_async_t *as, rs_request_t *rq, int wake, const char *msg)
{
    rs_client_t *c = as->c;
    if (rq->type == RQ_EVT) {
        if (wake == RS_WAKE_MSG || wake == RS_WAKE_RETRY || wake == RS_WAKE_TIMEOUT)
            rs__aq_want_send(as, rq, OP_GET);
        return;
    }
    if (wake == RS_WAKE_MSG) {
        char *end;
        unsigned long long f = strtoull(msg, &end, 10);
        /* with min_replicas a grant announced by a message is asked again, and that call
         * is what WAIT confirms (async_wire.c) */
        if (end != msg && f > 0 && f > rq->fence_floor && !c->confirm_wakeups &&
            c->min_replicas <= 0 && c->ep.mode != RS_MODE_REDLOCK) {
            uint64_t lower = rq->lower_ns;
            if (rq->qleased) {
                uint64_t conf = rs__lease_confirmed_ns(c, &rq->ql);
                if (conf > lower)
                    lower = conf;
            }
            rs_call_t k;
            rs__aq_call(rq, &k);
            rs__aq_granted(as, rq, f, atol(k.lease), lower, 0);
            return;
        }
    }
    if (wake == RS_WAKE_MSG || wake == RS_WAKE_RETRY || wake == RS_WAKE_TIMEOUT)
        rs__aq_want_send(as, rq, OP_ACQ);
}

void rs__aq_to_wait(rs_async_t *as, rs_request_t *rq, uint64_t until)
{
    rs__aq_set_timer(as, rq, ST_WAIT, until);
    if (rq->w.shard) /* its channel follows the slot (a call of ours met MOVED): the new
                        master's confirmation makes it ask again */
        rs__notify_shard_check(as->c, &rq->w);
    char msg[RS_WAKE_MSG_MAX];
    int wake = rs__notify_take(as->c, &rq->w, msg, sizeof msg);
    if (wake != RS_WAKE_NONE && wake != RS_WAKE_CANCEL)
        rs__aq_woken(as, rq, wake, msg);
}

/* rq's deadline passed, or it is cancelled: leave the queue (a grant may show) or end. */
void rs__aq_give_up(rs_async_t *as, rs_request_t *rq)
{
    if (rq->queued)
        rs__aq_want_send(as, rq, OP_CANCEL);
    else
        rs__aq_complete(as, rq, rs__aq_stop_rc(as, rq), NULL);
}

/* ----- one pass ------------------------------------------------------------------------ */

static void start_request(rs_async_t *as, rs_request_t *rq)
{
    rs_client_t *c = as->c;
    rq->tm.idx = -1;
    rs__aq_live_add(as, rq);
    if (rs__theap_reserve(&as->heap, as->nlive) != 0) {
        rs__aq_complete(as, rq, rs__aq_why(as, rq, ENOMEM), NULL);
        return;
    }
    if (rq->type == RQ_REL) {
        rs__watch_del(c, rq->hold->lease);
        rq->lost = rs__lease_is_lost(c, rq->hold->lease);
        rs__aq_want_send(as, rq, OP_HREL);
        return;
    }
    /* an event's waiter: its topic (rs__async_event), no id */
    rq->w.id = rq->type == RQ_EVT ? "" : rq->str; /* the acquisition id, in the block */
    rq->w.on_wake = rs__aq_on_wake; /* which finds rq around &rq->w */
    int rc = rs__notify_add(c, &rq->w);
    if (rc) {
        rc = rc != ECANCELED ? rs__fail(c, rc, "cannot start the notifier thread")
                             : rs__aq_why(as, rq, ECANCELED);
        rs__aq_complete(as, rq, rc, NULL);
        return;
    }
    rq->registered = 1;
    if (rq->type == RQ_ACQ && rs__acq_sharded(rq->str) &&
        (rc = rs__notify_shard_add(c, &rq->w, rq->str + rq->kat, rq->klen)) != 0) {
        /* a Cluster's sharded wake-ups: the name's channel, on the master of its slot
         * (subscribed before the request queues, as for the classic subscriber) */
        rs__aq_complete(as, rq, rc, NULL);
        return;
    }
    if (rq->type == RQ_EVT) {
        if (rs__notify_watch_add(c, rq->w.topic) != 0) {
            rs__aq_complete(as, rq, rs__fail(c, ENOMEM, "out of memory"), NULL);
            return;
        }
        rq->watching = 1;
        rq->evstate = -1;
    }
    if (rq->try_only) {
        rq->final = 1;
        /* one attempt, no queue */
        rs__aq_want_send(as, rq, rq->type == RQ_EVT ? OP_GET : OP_ACQ);
        return;
    }
    /* queue only once the subscriber stands, in the order the requests came */
    uint64_t sub_cut = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    rs__aq_list_append(&as->subq, &as->subq_tail, rq);
    rs__aq_set_timer(as, rq, ST_SUB, sub_cut < rq->deadline_ns ? sub_cut : rq->deadline_ns);
}

/* Whether rq may start: the subscriber stands (for an event, its channel is confirmed). */
static int sub_ready(rs_async_t *as, rs_request_t *rq, int client_ready)
{
    if (rq->type == RQ_EVT)
        return client_ready && rs__notify_watch_ready(as->c, rq->w.topic);
    return client_ready && (!rq->w.shard || rs__notify_shard_ready(as->c, &rq->w));
}

static void subscribed_check(rs_async_t *as)
{
    if (!as->subq)
        return;
    int ready = rs__notify_ready(as->c);
    if (!ready)
        return;
    char msg[RS_WAKE_MSG_MAX];
    /* the sharded channels found not ready in this walk stay so for it: one confirmed
     * half-way must not let a later request of its name go before an earlier one */
    enum { NOT_READY_MAX = 64 };
    const void *notready[NOT_READY_MAX];
    int nnot = 0;
    for (rs_request_t *rq = as->subq, *nx; rq; rq = nx) {
        nx = rq->snext;
        int skip = nnot == NOT_READY_MAX && rq->w.shard;
        for (int i = 0; i < nnot && !skip; i++)
            skip = notready[i] == (const void *)rq->w.shard;
        if (skip)
            continue;
        if (!sub_ready(as, rq, ready)) {
            if (rq->w.shard && nnot < NOT_READY_MAX)
                notready[nnot++] = rq->w.shard;
            continue;
        }
        rs__aq_list_remove(&as->subq, &as->subq_tail, rq);
        rq->st = ST_NEW;
        rs__notify_take(as->c, &rq->w, msg, sizeof msg); /* the confirmation's retry */
        rs__aq_want_send(as, rq, rq->type == RQ_EVT ? OP_GET : OP_ACQ);
    }
}

static void on_cancel(rs_async_t *as, rs_request_t *rq)
{
    switch (rq->st) {
    case ST_UNDO: /* a grant dispatched no more: release it, then ECANCELED */
        rq->tm.idx = -1;
        rs__aq_live_add(as, rq);
        rs__theap_reserve(&as->heap, as->nlive);
        rs__watch_del(as->c, rq->hold->lease);
        rq->lost = 1; /* a reply 0 is no news here */
        rq->resent = 0;
        rs__aq_want_send(as, rq, OP_HREL);
        break;
    case ST_SUB:
        rs__aq_complete(as, rq, rs__aq_why(as, rq, ECANCELED), NULL);
        break;
    case ST_WAIT:
        rs__aq_give_up(as, rq);
        break;
    case ST_SEND:
    case ST_DELAY:
        if ((rq->op == OP_ACQ || rq->op == OP_GET) && !rq->queued && rq->type != RQ_REL)
            rs__aq_complete(as, rq, rs__aq_why(as, rq, ECANCELED), NULL);
        else if (rq->op == OP_ACQ)
            rs__aq_want_send(as, rq, OP_CANCEL);
        break;
    default: /* in flight: its reply sees the flag */
        break;
    }
}

static void on_timer(rs_async_t *as, rs_request_t *rq)
{
    uint64_t now = rs__now_ns();
    if (rq->st == ST_FLIGHT) {
        rs__arl_timer(as, rq); /* Redlock: the round's time is up (async_rl.c) */
    } else if (rq->st == ST_DELAY) {
        rs__aq_want_send(as, rq, rq->op);
    } else if (rq->st == ST_SUB) {
        if (now >= rq->deadline_ns) {
            rs__aq_list_remove(&as->subq, &as->subq_tail, rq);
            rq->st = ST_NEW;
            rs__aq_complete(as, rq, rs__fail(as->c, ETIMEDOUT, "deadline passed after %u ms "
                                             "of waiting for %s \"%.*s\" (before the "
                                             "subscription to its wake-ups stood)",
                                             (unsigned)RS_RQ_WAITED_MS(rq), rq->h->kind,
                                             RS_HNAME(rq->h)), NULL);
        } else if (sub_ready(as, rq, rs__notify_ready(as->c))) {
            subscribed_check(as);
        } else {
            rs__aq_list_remove(&as->subq, &as->subq_tail, rq);
            rq->st = ST_NEW;
            /* the server refused the subscription (a user without the pub/sub rights):
             * RS_ESERVER, as the blocking calls say; else it was not confirmed in time */
            pthread_mutex_lock(&as->c->nt.mu);
            int refused = as->c->nt.error[0] != '\0';
            pthread_mutex_unlock(&as->c->nt.mu);
            int rc = refused ? rs__fail(as->c, RS_ESERVER, "the subscription to wake-ups was "
                                        "refused by the server")
                             : rs__fail(as->c, RS_ECONN, "cannot subscribe to wake-ups within "
                                        "%ld ms", as->c->timeout_ms);
            rs__aq_complete(as, rq, rc, NULL);
        }
    } else if (rq->st == ST_WAIT && rq->type == RQ_EVT) {
        rq->final = now >= rq->deadline_ns; /* a last check, then ETIMEDOUT */
        rs__aq_want_send(as, rq, OP_GET);
    } else if (rq->st == ST_WAIT) {
        if (now >= rq->deadline_ns)
            rs__aq_give_up(as, rq);
        else
            rs__aq_want_send(as, rq, OP_ACQ); /* the holder's lease ran out: a lost message? */
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
            rs__aq_cancel_completed(rq);
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
        rs__aq_poke(as->efd);
    pthread_mutex_unlock(&as->mu);
    for (rs_request_t *rq = undo, *nx; rq; rq = nx) {
        nx = rq->bnext;
        rs__clear_error();
        on_cancel(as, rq);
    }
}

/* The thread is to pass again (as->mu held): as async.c's wake_locked. */
static int wake_again_locked(rs_async_t *as)
{
    if (as->poked)
        return 0;
    as->poked = 1;
    return 1;
}

static void pass(rs_async_t *as)
{
    /* once in_woken/in_cancel is 0 a wake-up or a cancel may link rq again (wnext, cnext):
     * the pass takes up to PASS_MAX of each list into arrays of its own, under the lock (no
     * second link per request: they are what a pending request costs); the rest stay
     * listed, and the thread passes again at once */
    enum { PASS_MAX = 256 };
    rs_request_t *wk[PASS_MAX], *can[PASS_MAX];
    int nwk = 0, ncan = 0;
    pthread_mutex_lock(&as->mu);
    rs_request_t *sub = as->sub_head;
    as->sub_head = as->sub_tail = NULL;
    as->poked = 0;
    for (; as->woken && nwk < PASS_MAX; nwk++) {
        wk[nwk] = as->woken;
        as->woken = wk[nwk]->wnext;
        wk[nwk]->in_woken = 0;
    }
    for (; as->can && ncan < PASS_MAX; ncan++) {
        can[ncan] = as->can;
        as->can = can[ncan]->cnext;
        can[ncan]->in_cancel = 0;
    }
    int again = (as->woken || as->can) && wake_again_locked(as);
    int stop = as->stop;
    pthread_mutex_unlock(&as->mu);
    if (again)
        rs__aq_poke(as->wfd);

    /* completions are published at the end of the pass: none of these is freed meanwhile */
    char msg[RS_WAKE_MSG_MAX];
    for (int i = 0; i < nwk; i++) {
        rs_request_t *rq = wk[i];
        if (rq->st != ST_WAIT)
            continue; /* kept in w.wake: taken when it waits (rs__aq_to_wait) */
        rs__clear_error(); /* each event starts without a message (rs__aq_complete) */
        int wake = rs__notify_take(as->c, &rq->w, msg, sizeof msg);
        if (wake != RS_WAKE_NONE && wake != RS_WAKE_CANCEL)
            rs__aq_woken(as, rq, wake, msg);
    }
    for (rs_request_t *rq = sub, *nx; rq; rq = nx) {
        nx = rq->next;
        rs__clear_error();
        start_request(as, rq);
    }
    for (int i = 0; i < ncan; i++) {
        rs__clear_error();
        on_cancel(as, can[i]);
    }
    if (stop && !as->draining) {
        /* closing: every acquisition leaves Redis' queue (a grant that raced is released),
         * releases go on; at most timeout_ms more */
        as->draining = 1;
        as->drain_end_ns = rs__now_ns() + (uint64_t)as->c->timeout_ms * RS_NS_PER_MS;
        rs__adial_stop(as); /* no new dial (one under way ends within its budget) */
        for (rs_request_t *rq = as->live, *nx; rq; rq = nx) {
            nx = rq->anext;
            if (rq->type != RQ_REL && rq->op != OP_REL) {
                rs__clear_error();
                on_cancel(as, rq);
            }
        }
    }
    subscribed_check(as);
    uint64_t now = rs__now_ns();
    for (rs_timer_t *t; (t = rs__theap_top(&as->heap)) && t->due_ns <= now;) {
        rs_request_t *rq = (rs_request_t *)((char *)t - offsetof(rs_request_t, tm));
        rs__theap_del(&as->heap, t);
        rs__clear_error();
        if (as->draining && rq->st != ST_DELAY && rq->st != ST_FLIGHT)
            rs__aq_give_up(as, rq);
        else
            on_timer(as, rq);
    }
    rs__aq_flush(as);
    publish(as);
}

void *rs__aq_main(void *arg)
{
    rs_async_t *as = arg;
    for (;;) {
        pass(as);
        if (as->draining && (as->nlive == 0 || rs__now_ns() >= as->drain_end_ns))
            break;
        uint64_t due = RS_NO_DEADLINE;
        rs_timer_t *t = rs__theap_top(&as->heap);
        if (t)
            due = t->due_ns;
        if (as->sendq && as->next_dial_ns < due)
            due = as->next_dial_ns; /* requests wait for a connection */
        if (as->draining && as->drain_end_ns < due)
            due = as->drain_end_ns;
        rs__aq_poll(as, due);
        publish(as);
    }
    /* what is left gets ECANCELED (an acquisition's entry expires with its queue lease) */
    while (as->live) {
        rs_request_t *rq = as->live;
        rs__clear_error();
        if (rq->op == OP_HREL && rq->st != ST_NEW)
            rs__aq_finish_hold(as, rq, rs__fail(as->c, RS_ECONN, "Redis unreachable while "
                                                "closing"));
        else
            rs__aq_complete(as, rq, rs__aq_why(as, rq, ECANCELED), NULL);
    }
    publish(as);
    rs__adial_join(as); /* a context dialled after the close began is freed with the rest */
    rs__aq_conns_free(as);
    return NULL;
}

