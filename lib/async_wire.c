/*
 * async_wire.c - the event-loop API's connections (lib/async.c has the overview): the I/O
 * thread's own connection to the master (outside Cluster) or one to each master of a
 * Cluster that a request's name lives on (a call goes to the master of its first key's
 * slot, slotmap.c), the script calls of the requests appended to them (pipelined), each
 * connection's ring of requests whose replies are owed in order, the replies decoded into
 * each request's next step, SCRIPT LOAD on NOSCRIPT within the pipeline, MOVED (the map
 * is fixed, the call sent again where it points) and ASK (sent again once to the importing
 * node behind ASKING), and what a broken connection or a moved master means: everything in
 * flight on it is sent again, same ids (the scripts recognise a call sent twice).
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
 * a grant made by another client's release too. Its reply is kept (cn->confirm_r) until
 * WAIT's comes, whose ring entry is &wait_mark (the write's is NULL): a grant that fewer than
 * min_replicas replicas acknowledged is given back ("rel") and done gets RS_EREPL. */
static rs_request_t wait_mark;

static int ring_push(rs_aconn_t *cn, rs_request_t *rq)
{
    if (cn->rcount == cn->rcap) {
        size_t cap = cn->rcap ? cn->rcap * 2 : 256;
        rs_request_t **r = malloc(sizeof *r * cap);
        if (!r)
            return ENOMEM;
        for (size_t i = 0; i < cn->rcount; i++)
            r[i] = cn->ring[(cn->rhead + i) % cn->rcap];
        free(cn->ring);
        cn->ring = r;
        cn->rcap = cap;
        cn->rhead = 0;
    }
    if (cn->rcount == 0)
        cn->progress_ns = rs__now_ns(); /* replies owed from now on */
    cn->ring[(cn->rhead + cn->rcount++) % cn->rcap] = rq;
    return 0;
}

int rs__aq_ring_push(rs_aconn_t *cn, rs_request_t *rq)
{
    return ring_push(cn, rq);
}

static rs_request_t *ring_pop(rs_aconn_t *cn)
{
    rs_request_t *rq = cn->ring[cn->rhead];
    cn->rhead = (cn->rhead + 1) % cn->rcap;
    cn->rcount--;
    return rq;
}

/* A connection broke (or stalled, or reaches a master no more): what was in flight on it is
 * sent again (same ids) on the next one, unless it has been trying for timeout_ms. */
void rs__aq_conn_broken(rs_async_t *as, rs_aconn_t *cn)
{
    if (cn->ctx)
        rs__ctx_free(cn->ctx);
    cn->ctx = NULL;
    cn->flush = 0;
    if (as->c->ep.mode == RS_MODE_CLUSTER)
        rs__cluster_stale(as->c); /* perhaps a failed master: ask for the map again */
    uint64_t now = rs__now_ns();
    if (cn->confirm_rq) { /* its reply came, its WAIT's did not: asked again */
        rs_request_t *rq = cn->confirm_rq;
        freeReplyObject(cn->confirm_r);
        cn->confirm_rq = NULL;
        cn->confirm_r = NULL;
        rq->resent = 1;
        rs__aq_want_send(as, rq, rq->op);
    }
    int redlock = as->c->ep.mode == RS_MODE_REDLOCK;
    while (cn->rcount > 0) {
        rs_request_t *rq = ring_pop(cn);
        if (rq && redlock) {
            rs__arl_lost(as, rq, cn->node); /* one master's answer of several: no answer */
            continue;
        }
        if (!rq || rq == &wait_mark || rq->st != ST_FLIGHT)
            continue;
        if (rq->send_by_ns && now >= rq->send_by_ns) {
            rs__aq_fail(as, rq, rs__fail(as->c, RS_ECONN, "no answer from Redis for %ld ms "
                                         "(its connection was lost or stalled)",
                                         as->c->timeout_ms));
            continue;
        }
        rq->resent = 1;
        rs__aq_want_send(as, rq, rq->op);
    }
}

void rs__aq_conns_free(rs_async_t *as)
{
    for (int i = 0; i < as->ncn; i++) {
        rs_aconn_t *cn = &as->cn[i];
        if (cn->ctx)
            rs__ctx_free(cn->ctx);
        cn->ctx = NULL;
        if (cn->confirm_r)
            freeReplyObject(cn->confirm_r);
        cn->confirm_r = NULL;
        cn->confirm_rq = NULL;
        free(cn->ring);
        cn->ring = NULL;
        cn->rcount = cn->rcap = cn->rhead = 0;
    }
}

/* The connection rq's call goes to, if it is connected: outside Cluster the master's; in a
 * Cluster the one to the master of key's slot, or to the node an ASK named. NULL: none for
 * now (being dialled, a dial failed lately, the slot's master is not known yet); a missing
 * connection is asked of a dialer thread (async_dial.c), whose result wakes the thread. */
static rs_aconn_t *route(rs_async_t *as, rs_request_t *rq, const char *key, size_t klen)
{
    rs_client_t *c = as->c;
    int cluster = c->ep.mode == RS_MODE_CLUSTER, i = 0;
    if (cluster) {
        i = rq->ask ? rq->ask - 1 : rs__cluster_node_of(c, key, klen);
        if (i < 0 || i >= RS_NODES_MAX) {
            rs__cluster_stale(c); /* a slot nobody serves as far as we know: ask again */
            return NULL;
        }
    }
    rs_aconn_t *cn = &as->cn[i];
    for (; as->ncn <= i; as->ncn++)
        as->cn[as->ncn].node = cluster ? as->ncn : -1;
    if (cn->ctx)
        return cn;
    rs__adial_want(as, cn);
    return NULL;
}

rs_aconn_t *rs__aq_master(rs_async_t *as, int i, int dial)
{
    rs_aconn_t *cn = &as->cn[i];
    for (; as->ncn <= i; as->ncn++)
        as->cn[as->ncn].node = as->ncn;
    if (cn->ctx)
        return cn;
    /* one attempt: a master that is down costs one refused connect, not a retry loop, and
     * is not dialled again for a second (async_dial.c) */
    if (dial)
        rs__adial_want(as, cn);
    return NULL;
}

/* Appends rq's call to the connection it goes to: 0, or 1 when there is none for now. */
static int append_op(rs_async_t *as, rs_request_t *rq)
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
    rs_aconn_t *cn = route(as, rq, cmd.v[3], cmd.len[3]);
    if (!cn)
        return 1;
    int asking = rq->ask != 0;
    rq->ask = 0; /* an ASK redirects one call only */
    const char *kv[1] = {"ASKING"};
    size_t kl[1] = {6};
    cn->flush = 1;
    if ((asking && (rs__ctx_append(cn->ctx, 1, kv, kl) != 0 || ring_push(cn, NULL) != 0)) ||
        rs__ctx_append(cn->ctx, cmd.n, cmd.v, cmd.len) != 0 || ring_push(cn, rq) != 0) {
        rs__aq_fail(as, rq, rs__fail(as->c, ENOMEM, "out of memory"));
        return 0;
    }
    if (as->c->min_replicas > 0 && (rq->op == OP_ACQ || rq->op == OP_CANCEL)) {
        /* in a Cluster the write goes to the name's slot, on the same node (behind ASKING
         * again when the call went there by ASK) */
        if (rs__sync_append(as->c, cn->ctx, cmd.v[3], cmd.len[3], asking,
                            as->c->replica_timeout_ms) != 0 ||
            (asking && ring_push(cn, NULL) != 0) || ring_push(cn, NULL) != 0 ||
            ring_push(cn, &wait_mark) != 0) {
            /* the call is on its way without its confirmation: this connection is dropped
             * and what it owes sent again */
            rq->st = ST_FLIGHT;
            rs__aq_conn_broken(as, cn);
            return 0;
        }
    }
    rq->st = ST_FLIGHT;
    if (rq->type == RQ_ACQ)
        rq->sent_ns = rs__now_ns(); /* (shares its memory with an event wait's fields) */
    return 0;
}

/* Sends what was appended on each connection marked to flush (a connection the flush
 * breaks: rs__aq_conn_broken). */
static void flush_marked(rs_async_t *as)
{
    for (int i = 0; i < as->ncn; i++) {
        rs_aconn_t *cn = &as->cn[i];
        if (cn->ctx && cn->flush) {
            cn->flush = 0;
            if (rs__ctx_flush(cn->ctx) != 0)
                rs__aq_conn_broken(as, cn);
        }
    }
}

void rs__aq_flush(rs_async_t *as)
{
    rs_client_t *c = as->c;
    rs__adial_take(as); /* the dials that ended, the slot map loaded */
    if (as->sendq && c->ep.mode == RS_MODE_CLUSTER && !as->draining)
        rs__adial_refresh(as); /* only if a MOVED or a failure made it stale */
    rs_request_t *left = NULL, *left_tail = NULL;
    while (as->sendq) {
        rs_request_t *rq = as->sendq;
        as->sendq = rq->snext;
        if (!as->sendq)
            as->sendq_tail = NULL;
        rq->snext = NULL;
        rq->in_send = 0;
        rs__clear_error(); /* each event starts without a message (rs__aq_complete) */
        if (c->ep.mode == RS_MODE_REDLOCK) {
            /* on every master it can reach (async_rl.c), or it waits for their dials */
            if (rs__arl_send(as, rq) != 0) {
                rq->in_send = 1;
                rs__aq_list_append(&left, &left_tail, rq);
            }
            continue;
        }
        if (append_op(as, rq) == 0)
            continue;
        /* nothing to send on: those that waited timeout_ms for a connection fail */
        if (as->draining || rs__now_ns() >= rq->send_by_ns) {
            rs__aq_fail(as, rq, rs__fail(c, RS_ECONN, "Redis unreachable for %ld ms (%s)",
                                         c->timeout_ms, as->dial_err[0] ? as->dial_err
                                         : "no connection to send on"));
            continue;
        }
        rq->in_send = 1;
        rs__aq_list_append(&left, &left_tail, rq);
    }
    flush_marked(as);
    /* what a broken flush sent again comes behind what waits for a connection already */
    if (left) {
        left_tail->snext = as->sendq;
        if (!as->sendq)
            as->sendq_tail = left_tail;
        as->sendq = left;
        as->next_dial_ns = rs__now_ns() + 50 * RS_NS_PER_MS;
    }
}

static const rs_script_t *rq_script(const rs_request_t *rq)
{
    return rq->op == OP_HREL ? rq->hold->lease->script : rq->h->script;
}

static void on_acquiring(rs_async_t *as, rs_request_t *rq, redisReply *r, long long acked);

/* rq's reply r on cn; 1 if r is kept (an acquiring call's, until its WAIT's reply), else 0. */
static int on_reply(rs_async_t *as, rs_aconn_t *cn, rs_request_t *rq, redisReply *r)
{
    rs_client_t *c = as->c;
    uint64_t now = rs__now_ns();
    if (r->type != REDIS_REPLY_ERROR && c->min_replicas > 0 &&
        (rq->op == OP_ACQ || rq->op == OP_CANCEL)) {
        cn->confirm_rq = rq;
        cn->confirm_r = r;
        return 1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        if (rs__is_noscript(r)) {
            const rs_script_t *s = rq_script(rq);
            const char *argv[3] = {"SCRIPT", "LOAD", (const char *)s->body};
            size_t lens[3] = {6, 4, s->len};
            cn->flush = 1;
            if (rs__ctx_append(cn->ctx, 3, argv, lens) == 0 && ring_push(cn, NULL) == 0)
                rs__aq_want_send(as, rq, rq->op); /* behind the load, in the same pipeline */
            else
                rs__aq_fail(as, rq, rs__fail(c, ENOMEM, "out of memory (loading a script)"));
            return 0;
        }
        int ask = 0, to;
        if (c->ep.mode == RS_MODE_CLUSTER && (to = rs__cluster_redirect(c, r->str, &ask)) >= 0) {
            /* MOVED: the map is fixed for that slot (and reloaded before the next send), the
             * call goes there; ASK: this call only goes to the importing node, behind ASKING.
             * Neither ran the script. Bounded by timeout_ms, as the blocking calls' hops. */
            if (rq->send_by_ns && now >= rq->send_by_ns) {
                rs__aq_fail(as, rq, rs__fail(c, RS_ECONN, "still redirected after %ld ms (%s)",
                                             c->timeout_ms, r->str));
                return 0;
            }
            rq->ask = ask ? (unsigned char)(to + 1) : 0;
            rs__aq_want_send(as, rq, rq->op);
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
            rs__aq_conn_broken(as, cn); /* the replies still owed come to nobody: resend them */
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
            rs__aq_finish_hold(as, rq, lost ? rs__aq_why(as, rq, RS_ELOST) : 0);
        else
            rs__aq_complete(as, rq, rs__aq_undone(as, rq), NULL);
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
        rs__aq_set_undo(rq, rs__fail(c, RS_EREPL, "WAIT: %lld of %d replica(s) confirmed the "
                                     "acquisition within %ld ms; it was undone",
                                     acked < 0 ? 0 : acked, c->min_replicas,
                                     c->replica_timeout_ms), 1);
        rs__aq_want_send(as, rq, OP_REL);
        return;
    }
    if (at.granted) {
        rs__aq_granted(as, rq, at.fence, at.ttl_ms, rq->sent_ns, 0);
        return;
    }
    if (rq->op == OP_CANCEL) {
        rs__aq_complete(as, rq, rs__aq_stop_rc(as, rq), NULL);
        return;
    }
    rq->queued |= at.queued;
    if (at.seen_fence > rq->fence_floor)
        rq->fence_floor = at.seen_fence;
    if (rq->try_only) {
        rs__aq_complete(as, rq, rs__aq_why(as, rq, rq->busy_rc), NULL);
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

/* WAIT's reply r on cn: the kept acquiring reply is decided with its count. */
static void on_wait(rs_async_t *as, rs_aconn_t *cn, redisReply *r)
{
    rs_request_t *rq = cn->confirm_rq;
    redisReply *kept = cn->confirm_r;
    if (!rq) /* its call met an error (NOSCRIPT...): decided already */
        return;
    cn->confirm_rq = NULL;
    cn->confirm_r = NULL;
    long long acked = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        acked = r->integer;
    else if (r->type == REDIS_REPLY_ERROR)
        rs__log(as->c, RS_LOG_WARN, "WAIT: %s", r->str);
    rq->send_by_ns = 0;
    on_acquiring(as, rq, kept, acked);
    freeReplyObject(kept);
}

/* Reads and handles the replies that arrived on cn. */
static void aq_read(rs_async_t *as, rs_aconn_t *cn)
{
    if (rs__tp_fill(cn->ctx, 1) < 0) {
        rs__aq_conn_broken(as, cn);
        return;
    }
    for (;;) {
        void *r = NULL;
        if (redisGetReplyFromReader(cn->ctx, &r) != REDIS_OK) {
            rs__aq_conn_broken(as, cn);
            return;
        }
        if (!r)
            return;
        if (cn->rcount == 0) { /* a reply nobody asked for: the stream is not ours */
            freeReplyObject(r);
            rs__aq_conn_broken(as, cn);
            return;
        }
        rs_request_t *rq = ring_pop(cn);
        cn->progress_ns = rs__now_ns();
        int kept = 0;
        rs__clear_error(); /* each reply starts without a message (rs__aq_complete) */
        if (rq && as->c->ep.mode == RS_MODE_REDLOCK)
            rs__arl_reply(as, cn, rq, r);
        else if (rq == &wait_mark)
            on_wait(as, cn, r);
        else if (rq && rq->st == ST_FLIGHT)
            kept = on_reply(as, cn, rq, r);
        if (!kept)
            freeReplyObject(r);
        if (!cn->ctx)
            return;
    }
}

int rs__aq_poll(rs_async_t *as, uint64_t due)
{
    rs_client_t *c = as->c;
    uint64_t tmo = (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    struct pollfd p[1 + RS_NODES_MAX];
    rs_aconn_t *pc[1 + RS_NODES_MAX];
    int np = 1, pending = 0;
    flush_marked(as); /* what a decision made while reading appended (Redlock's undos) */
    p[0] = (struct pollfd){as->wfd, POLLIN, 0};
    for (int i = 0; i < as->ncn; i++) {
        rs_aconn_t *cn = &as->cn[i];
        if (!cn->ctx)
            continue;
        if (cn->rcount > 0 && cn->progress_ns + tmo < due)
            due = cn->progress_ns + tmo;
        pending |= rs__tp_pending(cn->ctx);
        p[np] = (struct pollfd){cn->ctx->fd, POLLIN, 0};
        pc[np++] = cn;
    }
    uint64_t now = rs__now_ns();
    int timeout = -1;
    if (pending)
        timeout = 0;
    else if (due != RS_NO_DEADLINE)
        timeout = due <= now ? 0 : (int)((due - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS);
    if (timeout > 1000)
        timeout = 1000;
    int n = poll(p, (nfds_t)np, timeout);
    if (n < 0 && errno != EINTR)
        rs__sleep_ns(RS_NS_PER_MS);
    if (n < 0)
        for (int j = 0; j < np; j++)
            p[j].revents = 0;
    if (p[0].revents)
        rs__aq_drain(as->wfd);
    for (int j = 1; j < np; j++)
        if (pc[j]->ctx && (p[j].revents || rs__tp_pending(pc[j]->ctx)))
            aq_read(as, pc[j]);
    for (int i = 0; i < as->ncn; i++) {
        rs_aconn_t *cn = &as->cn[i];
        if (cn->ctx && cn->rcount > 0 && rs__now_ns() >= cn->progress_ns + tmo)
            /* first what came while this process could not run (SIGSTOP, a paused VM, a poll
             * that returned just before): those replies are progress, not a stall */
            aq_read(as, cn);
        if (cn->ctx && cn->rcount > 0 && rs__now_ns() >= cn->progress_ns + tmo) {
            /* replies owed and none for timeout_ms: a stalled server or a silent network */
            rs__log(c, RS_LOG_WARN, "event-loop connection: no reply for %ld ms; "
                    "reconnecting", c->timeout_ms);
            rs__aq_conn_broken(as, cn);
        }
    }
    return p[0].revents != 0;
}
