/*
 * async_wire.c - the event-loop API's connection (lib/async.c has the overview): the I/O
 * thread's own connection to the master, the script calls of the requests appended to it
 * (pipelined), the ring of requests whose replies are owed in order, the replies decoded into
 * each request's next step, SCRIPT LOAD on NOSCRIPT within the pipeline, and what a broken
 * connection or a moved master means: everything in flight is sent again, same ids.
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

/* ----- the connection ------------------------------------------------------------------ */

/* min_replicas > 0: an acquiring call ("acq", "cancel") is followed in the pipeline by the
 * write of rs__sync_append and WAIT, as the blocking calls' are (script.c), so that WAIT covers
 * a grant made by another client's release too. Its reply is kept (as->confirm_r) until
 * WAIT's comes, whose ring entry is &wait_mark (the write's is NULL): a grant that fewer than
 * min_replicas replicas acknowledged is given back ("rel") and done gets RS_EREPL. */
static rs_request_t wait_mark;

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
    if (as->rcount == 0)
        as->progress_ns = rs__now_ns(); /* replies owed from now on */
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

/* The connection broke (or stalled, or reaches a master no more): what was in flight is
 * sent again (same ids) on the next one, unless it has been trying for timeout_ms. */
void rs__aq_conn_broken(rs_async_t *as)
{
    if (as->ctx)
        rs__ctx_free(as->ctx);
    as->ctx = NULL;
    uint64_t now = rs__now_ns();
    if (as->confirm_rq) { /* its reply came, its WAIT's did not: asked again */
        rs_request_t *rq = as->confirm_rq;
        freeReplyObject(as->confirm_r);
        as->confirm_rq = NULL;
        as->confirm_r = NULL;
        rq->resent = 1;
        rs__aq_want_send(as, rq, rq->op);
    }
    while (as->rcount > 0) {
        rs_request_t *rq = ring_pop(as);
        if (!rq || rq == &wait_mark || rq->st != ST_FLIGHT)
            continue;
        if (rq->send_by_ns && now >= rq->send_by_ns) {
            rs__aq_fail(as, rq, rs__fail(as->c, RS_ECONN, "no answer from Redis for %ld ms",
                                         as->c->timeout_ms));
            continue;
        }
        rq->resent = 1;
        rs__aq_want_send(as, rq, rq->op);
    }
}

static void append_op(rs_async_t *as, rs_request_t *rq)
{
    rs_call_t k;
    rs_lease_scratch_t ls;
    rs_argv_t args, cmd;
    const rs_script_t *s;
    int nkeys;
    if (rq->op == OP_HREL) {
        rs__lease_argv(rq->hold->lease, rq->hold->lease->release_op, &ls, &args);
        s = rq->hold->lease->script;
        nkeys = rq->hold->lease->nkeys;
    } else {
        rs__aq_call(rq, &k);
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
        rs__aq_fail(as, rq, rs__fail(as->c, ENOMEM, "out of memory"));
        return;
    }
    if (as->c->min_replicas > 0 && (rq->op == OP_ACQ || rq->op == OP_CANCEL)) {
        if (rs__sync_append(as->c, as->ctx, cmd.v[3], cmd.len[3], 0,
                            as->c->replica_timeout_ms) != 0 ||
            ring_push(as, NULL) != 0 || ring_push(as, &wait_mark) != 0) {
            /* the call is on its way without its confirmation: this connection is dropped
             * and what it owes sent again */
            rs__aq_conn_broken(as);
            return;
        }
    }
    rq->st = ST_FLIGHT;
    if (rq->type == RQ_ACQ)
        rq->sent_ns = rs__now_ns(); /* (shares its memory with an event wait's fields) */
}

void rs__aq_flush(rs_async_t *as)
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
                rs__aq_fail(as, rq, rs__fail(c, RS_ECONN, "Redis unreachable for %ld ms",
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
        rs__aq_conn_broken(as);
}

static const rs_script_t *rq_script(const rs_request_t *rq)
{
    return rq->op == OP_HREL ? rq->hold->lease->script : rq->h->script;
}

static void on_acquiring(rs_async_t *as, rs_request_t *rq, redisReply *r, long long acked);

/* rq's reply r; 1 if r is kept (an acquiring call's, until its WAIT's reply), else 0. */
static int on_reply(rs_async_t *as, rs_request_t *rq, redisReply *r)
{
    rs_client_t *c = as->c;
    uint64_t now = rs__now_ns();
    if (r->type != REDIS_REPLY_ERROR && c->min_replicas > 0 &&
        (rq->op == OP_ACQ || rq->op == OP_CANCEL)) {
        as->confirm_rq = rq;
        as->confirm_r = r;
        return 1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (rs__is_noscript(r)) {
            const rs_script_t *s = rq_script(rq);
            const char *argv[3] = {"SCRIPT", "LOAD", (const char *)s->body};
            size_t lens[3] = {6, 4, s->len};
            if (rs__ctx_append(as->ctx, 3, argv, lens) == 0 && ring_push(as, NULL) == 0)
                rs__aq_want_send(as, rq, rq->op); /* behind the load, in the same pipeline */
            else
                rs__aq_fail(as, rq, ENOMEM);
            return 0;
        }
        if (rs__is_transient(r)) {
            rs__aq_set_timer(as, rq, ST_DELAY, now + 20 * RS_NS_PER_MS);
            return 0;
        }
        if (rs__is_topology_error(c, r)) {
            rs__topo_changed(c);
            rq->resent = 1;
            rs__aq_want_send(as, rq, rq->op);
            rs__aq_conn_broken(as); /* the replies still owed come to nobody: resend them */
            return 0;
        }
        rs__aq_fail(as, rq, rs__reply_error(c, r));
        return 0;
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
            rs__aq_finish_hold(as, rq, lost ? RS_ELOST : 0);
        else
            rs__aq_complete(as, rq, rq->undo_rc ? rq->undo_rc : ECANCELED, NULL);
        return 0;
    }
    if (rq->op == OP_GET) {
        int ev = rq->ev->decode(c, r, &rq->evstate);
        if (ev <= 0)
            rs__aq_complete(as, rq, -ev, NULL);
        else if (rq->final || atomic_load(&rq->cancel) || as->draining)
            rs__aq_give_up(as, rq);
        else {
            uint64_t until = now + (uint64_t)rq->recheck_ms * RS_NS_PER_MS;
            rs__aq_to_wait(as, rq, until < rq->deadline_ns ? until : rq->deadline_ns);
        }
        return 0;
    }
    on_acquiring(as, rq, r, -2);
    return 0;
}

/* An acquiring call's reply r, with WAIT's count acked (-2: not confirmed, min_replicas 0;
 * -1: WAIT failed). */
static void on_acquiring(rs_async_t *as, rs_request_t *rq, redisReply *r, long long acked)
{
    rs_client_t *c = as->c;
    uint64_t now = rs__now_ns();
    rs_call_t k;
    rs__aq_call(rq, &k);
    rs_attempt_t at;
    memset(&at, 0, sizeof at);
    int rc = rs__decode_grant(&k, r, &at);
    if (rc) {
        rs__aq_fail(as, rq, rc);
        return;
    }
    if (at.done) {
        rs__aq_complete(as, rq, 0, NULL);
        return;
    }
    if (at.granted && acked > -2 && acked < c->min_replicas) {
        /* not safe against a failover: given back before anyone relies on it (under
         * Sentinel a shortfall is how a master failed over but not yet demoted shows) */
        rs__topo_changed(c);
        rq->undo_rc = rs__fail(c, RS_EREPL, "WAIT: %lld of %d replica(s) confirmed the "
                               "acquisition within %ld ms; it was undone", acked < 0 ? 0 : acked,
                               c->min_replicas, c->replica_timeout_ms);
        rs__aq_want_send(as, rq, OP_REL);
        return;
    }
    if (at.granted) {
        rs__aq_granted(as, rq, at.fence, at.ttl_ms, rq->sent_ns);
        return;
    }
    if (rq->op == OP_CANCEL) {
        rs__aq_complete(as, rq,
                        atomic_load(&rq->cancel) || as->draining ? ECANCELED : ETIMEDOUT, NULL);
        return;
    }
    rq->queued |= at.queued;
    if (at.seen_fence > rq->fence_floor)
        rq->fence_floor = at.seen_fence;
    if (rq->try_only) {
        rs__aq_complete(as, rq, rq->busy_rc, NULL);
        return;
    }
    if (atomic_load(&rq->cancel) || as->draining || now >= rq->deadline_ns) {
        rs__aq_give_up(as, rq);
        return;
    }
    if (at.queued && (!rq->qleased || rs__lease_is_lost(c, &rq->ql))) {
        /* registered again (the same lease, in the request's block): a round that renewed
         * it before may still apply its answer, which is harmless (a "gone" one pokes the
         * waiter, which asks again with the same id) */
        rs__aq_drop_queue_lease(c, rq);
        rq->qleased = rs__watch_add(c, &rq->ql, rq->sent_ns, rq->ql.lease_ms) == 0;
    }
    rq->lower_ns = rq->sent_ns;
    long nap_ms = at.retry_ms > 0 ? at.retry_ms : 1;
    nap_ms += 2 + nap_ms / 100;
    uint64_t until = now + (uint64_t)nap_ms * RS_NS_PER_MS;
    rs__aq_to_wait(as, rq, until < rq->deadline_ns ? until : rq->deadline_ns);
}

/* WAIT's reply r: the kept acquiring reply is decided with its count. */
static void on_wait(rs_async_t *as, redisReply *r)
{
    rs_request_t *rq = as->confirm_rq;
    redisReply *kept = as->confirm_r;
    if (!rq) /* its call met an error (NOSCRIPT...): decided already */
        return;
    as->confirm_rq = NULL;
    as->confirm_r = NULL;
    long long acked = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        acked = r->integer;
    else if (r->type == REDIS_REPLY_ERROR)
        rs__log(as->c, RS_LOG_WARN, "WAIT: %s", r->str);
    rq->send_by_ns = 0;
    on_acquiring(as, rq, kept, acked);
    freeReplyObject(kept);
}

void rs__aq_read(rs_async_t *as)
{
    if (rs__tp_fill(as->ctx, 1) < 0) {
        rs__aq_conn_broken(as);
        return;
    }
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(as->ctx, &r) != REDIS_OK) {
            rs__aq_conn_broken(as);
            return;
        }
        if (!r)
            return;
        if (as->rcount == 0) { /* a reply nobody asked for: the stream is not ours */
            freeReplyObject(r);
            rs__aq_conn_broken(as);
            return;
        }
        rs_request_t *rq = ring_pop(as);
        as->progress_ns = rs__now_ns();
        int kept = 0;
        if (rq == &wait_mark)
            on_wait(as, r);
        else if (rq && rq->st == ST_FLIGHT)
            kept = on_reply(as, rq, r);
        if (!kept)
            freeReplyObject(r);
        if (!as->ctx)
            return;
    }
}

