/*
 * async_rl.c - the event-loop API under redlock:// (lib/async.c has the overview, lib/redlock.c
 * the protocol). The I/O thread keeps one pipelined connection per master (async_wire.c,
 * cn[i] for master i); a request's call goes on every master's pipeline at once, and its
 * replies are gathered in the request's rs_arl_t, then decided exactly as the blocking calls
 * decide (rlvote.c):
 *
 *   acquire   a round: "acq" (ticket, attempt number) on every master; decided when every
 *             master it went to answered, or when a quorum answered and the others had as
 *             long again, or at the round's budget (rs__rl_round_ms), in the client's timer
 *             heap. Granted: a hold object whose lease (with the largest token, the masters
 *             that granted it) the watchdog renews on every master. Otherwise the grants are
 *             undone ("rel" mode "u" of that attempt, replies read by nobody) and the request
 *             waits: for a wake-up through the client's subscriber (one link per master) or
 *             its recheck (busy), or a random back-off (split vote), both timers in the heap.
 *             Fewer than a quorum answering: backed off and sent again until timeout_ms has
 *             passed without a quorum, then RS_ECONN.
 *   cancel    a deadline or rs_request_cancel while queued: one "cancel" round; a quorum of
 *             grants found there is kept (done(0)) unless cancelled, else ETIMEDOUT/ECANCELED.
 *   release   rs_hold_release_async, or a grant that raced a cancel: "rel" on every master,
 *             sent again to a master whose connection broke, until a quorum answered or
 *             timeout_ms; RS_ELOST when the answers deny the hold (rs__rl_denied).
 *
 * Replies come per master in pipeline order; rs_arl_t.owed[i] counts those master i still
 * owes the request (a master that still owes one is left out of the next "acq" round, so
 * they stay few), so a reply of an earlier round (decided without it) is told from this
 * round's and dropped: its grant, if any, was undone by the round's decision. A request
 * that completes leaves no reply to itself in any ring (rs__arl_forget).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static int acquiring(int op)
{
    return op == OP_ACQ || op == OP_CANCEL;
}

static long rq_lease(const rs_request_t *rq)
{
    return rq->op == OP_HREL ? rq->hold->lease->lease_ms : rq->ql.lease_ms;
}

/* The call rq's op sends (undo: the "rel" mode "u" of attempt), built in the caller's
 * k, ls and args, into cmd. */
typedef struct rl_cmd {
    rs_call_t k;
    rs_lease_scratch_t ls;
    rs_argv_t args, cmd;
    const rs_script_t *s;
} rl_cmd_t;


static void build(rs_request_t *rq, int op, int undo, unsigned attempt, rl_cmd_t *b)
{
    rs_arl_t *rl = rs__aq_rl(rq);
    int nkeys;
    if (op == OP_HREL) {
        rs_lease_t *l = rq->hold->lease;
        rs__lease_argv(l, l->release_op, &b->ls, &b->args);
        b->s = l->script;
        nkeys = l->nkeys;
    } else {
        rs__aq_call(rq, &b->k);
        const char *name = op == OP_ACQ ? "acq" : op == OP_CANCEL ? "cancel" : "rel";
        const char *mode = undo ? "u" : op == OP_ACQ && !rq->try_only ? "q" : "t";
        rs__call_argv(&b->k, name, mode, &b->args);
        if (b->k.nextra == 0 && (acquiring(op) || undo))
            rs__rl_argv_tail(&b->args, acquiring(op) ? rl->ticket : 0, attempt);
        b->s = rq->h->script;
        nkeys = rq->h->nkeys;
    }
    rs__evalsha_argv(b->s, nkeys, &b->args, &b->cmd);
}

/* Appends b's command on master i's connection, its reply owed to rq (NULL: nobody's). */
static int append(rs_aconn_t *cn, rs_request_t *rq, rl_cmd_t *b)
{
    cn->flush = 1;
    if (rs__ctx_append(cn->ctx, b->cmd.n, b->cmd.v, b->cmd.len) != 0 ||
        rs__aq_ring_push(cn, rq) != 0)
        return ENOMEM;
    if (rq)
        rs__aq_rl(rq)->owed[cn->node]++;
    return 0;
}

/* The message of the error a master answered with (rl->err, rl->v.err), kept for the
 * decision that may come at a later event (the thread's own is cleared before each). */
static void keep_err(rs_arl_t *rl)
{
    free(rl->err_text);
    rl->err_text = strdup(rs__error_text());
}

static void drop_err(rs_arl_t *rl)
{
    free(rl->err_text);
    rl->err_text = NULL;
}

/* rc (a master's error), its kept message set as this thread's. */
static int kept_err(rs_async_t *as, rs_request_t *rq, int rc)
{
    rs_arl_t *rl = rs__aq_rl(rq);
    if (rl->err_text)
        rs__error_set(rl->err_text);
    else
        rs__aq_why(as, rq, rc);
    return rc;
}

void rs__arl_forget(rs_async_t *as, rs_request_t *rq)
{
    rs_arl_t *rl = rs__aq_rl(rq);
    for (int i = 0; i < as->c->ep.nseeds && i < as->ncn; i++) {
        rs_aconn_t *cn = &as->cn[i];
        for (size_t j = 0; rl->owed[i] > 0 && j < cn->rcount; j++)
            if (cn->ring[(cn->rhead + j) % cn->rcap] == rq) {
                cn->ring[(cn->rhead + j) % cn->rcap] = NULL; /* read by nobody */
                rl->owed[i]--;
            }
        rl->owed[i] = 0;
    }
    rl->sent = 0;
}

/* Whether rq's next call is to wait for the dials (async_dial.c) of the masters: fewer
 * than a quorum connected while one is being dialled (a client's first calls, a master
 * back), within rq's timeout_ms to be sent. A master that is dialled long (one that hangs)
 * is not waited for once a quorum stands. */
static int await_dials(rs_async_t *as, rs_request_t *rq, uint64_t now)
{
    rs_client_t *c = as->c;
    if (rs__aq_rl(rq)->cont || now >= rq->send_by_ns)
        return 0;
    int up = 0, dialing = 0;
    for (int i = 0; i < c->ep.nseeds; i++) {
        if (rs__aq_master(as, i, 1))
            up++;
        else
            dialing |= as->cn[i].dialing;
    }
    return up < rs__rl_quorum(c) && dialing;
}

int rs__arl_send(rs_async_t *as, rs_request_t *rq)
{
    rs_client_t *c = as->c;
    rs_arl_t *rl = rs__aq_rl(rq);
    uint64_t now = rs__now_ns();
    if (await_dials(as, rq, now))
        return 1;
    unsigned mask = rs__rl_all_mask(c);
    if (acquiring(rq->op)) {
        if (!rl->ticket) {
            /* its place in every master's queue: when it began, by this client's clock */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            rl->ticket = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
        }
        rl->attempt++;
        rs__rl_votes_init(&rl->v);
        drop_err(rl);
        rl->sent = 0;
    } else if (!rl->cont) {
        /* a new call (a release, an undone grant): what an acquiring round still owes is
         * read by nobody */
        rs__arl_forget(as, rq);
        memset(&rl->t, 0, sizeof rl->t);
        rl->tried = rl->amask = 0;
        rl->err = 0;
        drop_err(rl);
        rl->first_ns = now;
    } else {
        mask &= ~rl->tried; /* the masters it has not reached yet */
    }
    rl->cont = 0;
    rl->got = 0;
    rl->round_ns = now;
    rl_cmd_t b;
    build(rq, rq->op, 0, rl->attempt, &b);
    unsigned went = 0;
    for (int i = 0; i < c->ep.nseeds; i++) {
        /* a master that still owes this request an earlier round's answer is not sent the
         * next "acq" behind it (it answers for this round as a silent one), so what it owes
         * stays bounded; the "cancel" that ends the request goes everywhere (its queue entry
         * there would swallow the wake-ups of the waiters behind it), as a release does */
        if (!(mask & (1u << i)) || (rl->owed[i] > 0 && rq->op == OP_ACQ))
            continue;
        rs_aconn_t *cn = rs__aq_master(as, i, 1);
        if (cn && append(cn, rq, &b) == 0)
            went |= 1u << i;
    }
    if (acquiring(rq->op))
        rl->sent = went;
    else
        rl->tried |= went;
    rq->st = ST_FLIGHT;
    if (rq->type == RQ_ACQ)
        rq->sent_ns = now;
    uint64_t budget = (uint64_t)rs__rl_round_ms(c, rq_lease(rq)) * RS_NS_PER_MS;
    /* nothing sent (no master reachable): decided at the next pass, as no answer */
    rs__aq_set_timer(as, rq, ST_FLIGHT, went ? now + budget : now);
    return 0;
}

/* Best effort: the undo of rq's last round on the masters of mask that are connected (a
 * master without a connection is not dialled for it: a grant it may hold expires with its
 * lease, as lib/redlock.c's undo on a master marked down). After a "cancel" round, which
 * does not stamp its attempt number into a grant it finds, a plain "rel" of the
 * acquisition (which leaves anyway) instead of the undo of that attempt. */
static void undo_on(rs_async_t *as, rs_request_t *rq, unsigned mask, int leaving)
{
    if (!mask)
        return;
    rl_cmd_t b;
    build(rq, OP_REL, !leaving, rs__aq_rl(rq)->attempt, &b);
    for (int i = 0; i < as->c->ep.nseeds; i++) {
        rs_aconn_t *cn = (mask & (1u << i)) ? rs__aq_master(as, i, 0) : NULL;
        if (cn)
            append(cn, NULL, &b);
    }
}

static const char *op_name(int op)
{
    return op == OP_ACQ ? "acq" : "cancel";
}

/* An acquiring round is decided (every answer in, or its time is up). */
static void acq_end(rs_async_t *as, rs_request_t *rq)
{
    rs_client_t *c = as->c;
    rs_arl_t *rl = rs__aq_rl(rq);
    int q = rs__rl_quorum(c);
    long lease = rq_lease(rq);
    uint64_t now = rs__now_ns();
    rs__theap_del(&as->heap, &rq->tm);
    rs_call_t k;
    rs__aq_call(rq, &k);
    for (int i = 0; i < c->ep.nseeds; i++)
        if (rl->sent & (1u << i))
            rs__rl_vote(&rl->v, &k, i, NULL); /* silent: it may have granted */
    rl->sent = 0; /* a late answer is read by nobody */
    rs_rl_votes_t *v = &rl->v;
    long validity;
    int verdict = rs__rl_decide(v, q, lease, (long)((now - rl->round_ns) / RS_NS_PER_MS),
                                &validity);
    const char *opn = op_name(rq->op);
    if (verdict == RS_RL_GRANT) {
        rs__rl_log_round(c, rq->h, opn, rl->attempt, v, validity, "granted", -1);
        rl->first_ns = 0;
        rs__aq_granted(as, rq, v->fence, v->min_ttl, rl->round_ns, v->gmask);
        return;
    }
    undo_on(as, rq, v->undo, rq->op == OP_CANCEL);
    int stop = atomic_load(&rq->cancel) || as->draining;
    if (rq->op == OP_CANCEL) { /* left the queues (those that answered) */
        rs__aq_complete(as, rq, rs__aq_stop_rc(as, rq), NULL);
        return;
    }
    if (verdict == RS_RL_ERROR) {
        rs__aq_complete(as, rq, kept_err(as, rq, v->err), NULL);
        return;
    }
    if (verdict == RS_RL_NOQUORUM) {
        rs__rl_log_round(c, rq->h, opn, rl->attempt, v, validity, "no quorum answered", -1);
        if (!rl->first_ns)
            rl->first_ns = rl->round_ns;
        if (now - rl->first_ns >= (uint64_t)c->timeout_ms * RS_NS_PER_MS) {
            rs__aq_complete(as, rq, rs__rl_noquorum(c, v->answered,
                                                    v->gmask | v->mmask | v->bmask),
                            NULL);
        } else if (stop || (!rq->try_only && now >= rq->deadline_ns)) {
            rs__aq_give_up(as, rq);
        } else {
            rs__aq_set_timer(as, rq, ST_DELAY,
                             now + (uint64_t)rs__rl_backoff_ms(lease) * RS_NS_PER_MS);
        }
        return;
    }
    rl->first_ns = 0;
    rq->queued |= v->queued;
    if (v->seen_fence > rq->fence_floor)
        rq->fence_floor = v->seen_fence;
    if (rq->try_only) {
        rs__aq_complete(as, rq, rs__aq_why(as, rq, rq->busy_rc), NULL);
        return;
    }
    if (stop || now >= rq->deadline_ns) {
        rs__aq_give_up(as, rq);
        return;
    }
    if (rq->queued && (!rq->qleased || rs__lease_is_lost(c, &rq->ql))) {
        /* its queue entries: one lease, renewed on every master by the watchdog */
        rs__aq_drop_queue_lease(c, rq);
        rq->qleased = rs__watch_add(c, &rq->ql, rl->round_ns, rq->ql.lease_ms) == 0;
    }
    rq->lower_ns = rl->round_ns;
    if (verdict == RS_RL_BUSY) {
        long ms = rs__rl_busy_wait(v, lease, &rl->seen, &rl->recheck_ms);
        rs__rl_log_round(c, rq->h, opn, rl->attempt, v, validity,
                         "busy: wait for a wake-up, at most", ms);
        uint64_t until = now + (uint64_t)ms * RS_NS_PER_MS;
        rs__aq_to_wait(as, rq, until < rq->deadline_ns ? until : rq->deadline_ns);
    } else {
        /* a back-off the wake-up of the other side's release must not cut short (two
         * clients that split the vote would meet again in lockstep): a wake-up meanwhile
         * is kept in the waiter and taken after it */
        long ms = rs__rl_backoff_ms(lease);
        rs__rl_log_round(c, rq->h, opn, rl->attempt, v, validity, "split vote: back-off", ms);
        rs__aq_set_timer(as, rq, ST_DELAY, now + (uint64_t)ms * RS_NS_PER_MS);
    }
}

/* A release's answers are in (a quorum, every master, or its time is up). */
static void rel_end(rs_async_t *as, rs_request_t *rq)
{
    rs_client_t *c = as->c;
    rs_arl_t *rl = rs__aq_rl(rq);
    int q = rs__rl_quorum(c);
    uint64_t now = rs__now_ns();
    rs__theap_del(&as->heap, &rq->tm);
    int rc = 0;
    if (rl->t.answered < q) {
        if (rl->amask != rs__rl_all_mask(c) &&
            now - rl->first_ns < (uint64_t)c->timeout_ms * RS_NS_PER_MS) {
            /* the masters not reached yet are asked shortly (never one whose answer is due:
             * it is read when it comes) */
            rl->cont = 1;
            rs__aq_set_timer(as, rq, ST_DELAY, now + 20 * RS_NS_PER_MS);
            return;
        }
        /* (no error came: every answer in amask was an integer) */
        rc = rl->err ? kept_err(as, rq, rl->err) : rs__rl_noquorum(c, rl->t.answered, rl->amask);
    }
    rs__arl_forget(as, rq); /* the rest is read by nobody */
    if (rq->op == OP_REL) {
        rs__aq_complete(as, rq, rs__aq_undone(as, rq), NULL);
        return;
    }
    int lost = rq->lost;
    if (rc == 0 && !lost && rs__rl_denied(c, rq->hold->lease, &rl->t)) {
        rs__lease_set_lost(c, rq->hold->lease);
        lost = 1;
    }
    rs__aq_finish_hold(as, rq, lost ? rs__aq_why(as, rq, RS_ELOST) : rc);
}

/* After an answer (or a broken connection): decided now if nothing more is due; a quorum in
 * gives the others as long again as it took (at least 2 ms). */
static void check(rs_async_t *as, rs_request_t *rq)
{
    rs_arl_t *rl = rs__aq_rl(rq);
    int acq = acquiring(rq->op);
    unsigned due = acq ? rl->sent : rl->tried & ~rl->amask;
    if (!due) {
        if (acq)
            acq_end(as, rq);
        else
            rel_end(as, rq);
        return;
    }
    if (rl->got >= rs__rl_quorum(as->c) && rq->tm.idx >= 0) {
        uint64_t now = rs__now_ns(), grace = now - rl->round_ns;
        if (grace < 2 * RS_NS_PER_MS)
            grace = 2 * RS_NS_PER_MS;
        if (now + grace < rq->tm.due_ns)
            rs__theap_set(&as->heap, &rq->tm, now + grace);
    }
}

void rs__arl_reply(rs_async_t *as, rs_aconn_t *cn, rs_request_t *rq, redisReply *r)
{
    rs_client_t *c = as->c;
    rs_arl_t *rl = rs__aq_rl(rq);
    int i = cn->node;
    unsigned bit = 1u << i;
    if (rl->owed[i] > 0)
        rl->owed[i]--;
    int acq = acquiring(rq->op);
    if (acq ? rq->st != ST_FLIGHT || rl->owed[i] > 0 || !(rl->sent & bit)
            : !(rl->tried & bit) || (rl->amask & bit))
        return; /* an earlier round's, decided without it (its grant was undone); a release
                   takes the answer of any of its sends */
    if (r->type == REDIS_REPLY_ERROR && rs__is_noscript(r)) {
        /* loaded there, and the same call sent again behind the load */
        const rs_script_t *s = rq->op == OP_HREL ? rq->hold->lease->script : rq->h->script;
        const char *argv[3] = {"SCRIPT", "LOAD", (const char *)s->body};
        size_t lens[3] = {6, 4, s->len};
        rl_cmd_t b;
        build(rq, rq->op, 0, rl->attempt, &b);
        cn->flush = 1;
        if (rs__ctx_append(cn->ctx, 3, argv, lens) == 0 && rs__aq_ring_push(cn, NULL) == 0 &&
            append(cn, rq, &b) == 0)
            return;
        r = NULL; /* (no memory: no answer from it) */
    } else if (r->type == REDIS_REPLY_ERROR && rs__is_transient(r)) {
        r = NULL; /* LOADING, BUSY...: no answer */
    }
    rl->got++;
    if (acq) {
        rl->sent &= ~bit;
        rs_call_t k;
        rs__aq_call(rq, &k);
        int had = rl->v.err;
        rs__rl_vote(&rl->v, &k, i, r);
        if (!had && rl->v.err)
            keep_err(rl);
    } else if (!r) {
        rl->tried &= ~bit; /* asked again if the round goes on */
    } else {
        rl->amask |= bit;
        if (r->type == REDIS_REPLY_INTEGER) {
            rl->t.answered++;
            if (r->integer >= 1)
                rl->t.pos++;
            else
                rl->t.zero++, rl->t.zero_mask |= bit;
        } else if (!rl->err) {
            rl->err = r->type == REDIS_REPLY_ERROR
                          ? rs__reply_error(c, r)
                          : rs__fail(c, RS_ESERVER, "unexpected reply from a redlock master");
            keep_err(rl);
        }
    }
    if (r)
        rs__rl_mark(c, i, 1);
    if (rq->st == ST_FLIGHT) /* (a release between its sends: its next send decides) */
        check(as, rq);
}

void rs__arl_lost(rs_async_t *as, rs_request_t *rq, int i)
{
    rs_arl_t *rl = rs__aq_rl(rq);
    unsigned bit = 1u << i;
    if (rl->owed[i] > 0)
        rl->owed[i]--;
    if (rl->owed[i] > 0)
        return;
    if (acquiring(rq->op)) {
        if (rq->st != ST_FLIGHT)
            return;
        if (!(rl->sent & bit))
            return;
        rl->sent &= ~bit; /* no answer (it may have granted: undone unless granted) */
        rs_call_t k;
        rs__aq_call(rq, &k);
        rs__rl_vote(&rl->v, &k, i, NULL);
    } else {
        if (!(rl->tried & bit) || (rl->amask & bit))
            return;
        rl->tried &= ~bit; /* sent again there if the call goes on */
        if (rq->st != ST_FLIGHT)
            return;
    }
    check(as, rq);
}

void rs__arl_timer(rs_async_t *as, rs_request_t *rq)
{
    if (acquiring(rq->op))
        acq_end(as, rq);
    else
        rel_end(as, rq);
}
