/*
 * redlock.c - the Redlock mode (redlock://): the same scripts on N independent masters,
 * decided by quorum (N/2+1). Only the mutex and the recursive mutex are offered in this mode
 * (docs/deployments.md says why the others are not); their scripts get a mode flag ("qr"/"tr"
 * in ARGV[6]) under which a master never hands a released lock to a waiter: it publishes
 * "ACQID retry" to its first live waiter instead and reserves the free lock for it briefly;
 * past the reservation a free lock still goes only to the first live waiter (or to anyone if
 * none waits). Waiters are queued by their ticket (ARGV[9]), the same on every master, so
 * the masters grant the same waiter (docs/deployments.md, "Waiting under Redlock").
 *
 * Every call goes to all masters AT ONCE (lib/rlround.c): the command is written on every
 * master's connection first, then the replies are read from all sockets together with
 * poll(), until one deadline (rs__rl_fanout). A master that is down costs one refused connect; one that hangs costs the
 * round's budget, never a wait per master. NOSCRIPT on a master loads the script there and
 * re-sends the call to it within the same round.
 *
 *   acquire   "acq" on every master. Granted when a quorum granted and the validity
 *             (smallest lease granted - time since the send - drift) is still positive; the
 *             fencing token is the largest token among the grants. Otherwise the call is
 *             undone ("rel" mode "u": no wake-up, the queue place kept) on every master that
 *             granted or did not answer, and the caller backs off for a random 5-50 ms (a
 *             split vote) or sleeps until a wake-up, checking again after 20 ms, 40 ms, ...
 *             (held or reserved on a quorum). Fewer than a quorum answering is retried
 *             until timeout_ms has passed, then RS_ECONN.
 *   renew     the watchdog's round: every lease's "renew" pipelined on every master at once;
 *             a hold is renewed when a quorum confirms, lost when more masters deny it than
 *             could be spared (N - quorum), and otherwise "no answer" (retried soon; its local
 *             deadline decides). Renewals and the release carry the holder's token, which each
 *             master raises its fencing counter to (see docs/deployments.md, "Fencing").
 *   release   "rel" on every master; RS_ELOST when more than N - quorum masters deny it.
 *
 * Order: each master has its own queue, ordered by ticket (when the wait began, by the
 * waiter's clock), so the masters agree on whom to wake; the woken retry on all masters,
 * where the lock is reserved for them. Not strict FIFO (clocks differ, reservations lapse).
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int popcount(unsigned m)
{
    return __builtin_popcount(m);
}

struct dial_wd {
    rs_client_t *c;
    long io_ms;
};

void rs__rl_wd_drop(rs_client_t *c, int i)
{
    if (c->wd.cctx[i])
        rs__ctx_free(c->wd.cctx[i]);
    c->wd.cctx[i] = NULL;
    c->wd.rl_owed[i] = 0;
}

static int dial_wd(void *arg, int i, long budget_ms)
{
    struct dial_wd *dw = arg;
    rs_client_t *c = dw->c;
    if (rs__conn_connect_once(c, i, budget_ms, dw->io_ms, &c->wd.cctx[i]) != 0) {
        c->wd.cctx[i] = NULL;
        return -1;
    }
    return 0;
}

/* ----- calls whose reply is an integer (rel, renew, enter, leave, force) --------------- */

int rs__rl_call_int(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                    long lease_ms, rs_rl_tally_t *t)
{
    int n = c->ep.nseeds, q = rs__rl_quorum(c);
    redisReply *rep[RS_SEEDS_MAX] = {0};
    memset(t, 0, sizeof *t);
    uint64_t end = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    uint64_t nap = 5;
    /* a master whose reply did not come within a round is read again in the next, never
     * sent the call twice (rs__rl_round_keep) */
    rs_conn_t *keep[RS_SEEDS_MAX] = {0};
    for (;;) {
        long budget = rs__rl_round_ms(c, lease_ms), left = rs__rl_ms_left(end);
        rs__rl_round_keep(c, s, nkeys, args, rs__rl_all_mask(c),
                          budget < left ? budget : (left > 0 ? left : 1), rep, keep);
        int answered = 0;
        for (int i = 0; i < n; i++)
            answered += rep[i] != NULL;
        /* a quorum is enough: a master that is down is not waited for */
        if (answered >= q || rs__rl_ms_left(end) <= 0)
            break;
        uint64_t now = rs__now_ns();
        rs__sleep_ns(nap * RS_NS_PER_MS < end - now ? nap * RS_NS_PER_MS : end - now);
        if (nap < 100)
            nap *= 2;
    }
    for (int i = 0; i < n; i++)
        if (keep[i])
            rs__rl_keep_late(c, i, keep[i]);
    int err = 0;
    unsigned answered = 0; /* (all with an integer when no error came) */
    for (int i = 0; i < n; i++) {
        redisReply *r = rep[i];
        if (!r)
            continue;
        if (r->type == REDIS_REPLY_INTEGER) {
            t->answered++;
            answered |= 1u << i;
            if (r->integer >= 1)
                t->pos++;
            else
                t->zero++, t->zero_mask |= 1u << i;
            if (r->integer > t->max)
                t->max = r->integer;
        } else if (!err) {
            err = r->type == REDIS_REPLY_ERROR
                      ? rs__reply_error(c, r)
                      : rs__fail(c, RS_ESERVER, "unexpected reply from a redlock master");
        }
        freeReplyObject(r);
    }
    if (t->answered >= q)
        return 0;
    if (err)
        return err;
    return rs__rl_noquorum(c, t->answered, answered);
}

int rs__rl_lease_int(rs_client_t *c, rs_lease_t *l, const char *op, rs_rl_tally_t *t)
{
    rs_lease_scratch_t s;
    rs_argv_t a;
    rs__lease_argv(l, op, &s, &a);
    return rs__rl_call_int(c, l->script, l->nkeys, &a, l->lease_ms, t);
}

int rs__lease_call(rs_client_t *c, rs_lease_t *l, const char *op, redisReply **out)
{
    if (c->ep.mode == RS_MODE_REDLOCK) {
        rs_rl_tally_t t;
        *out = NULL;
        return rs__rl_lease_int(c, l, op, &t);
    }
    rs_lease_scratch_t s;
    rs_argv_t a;
    rs__lease_argv(l, op, &s, &a);
    return rs__eval(c, l->script, l->nkeys, &a, out);
}

/* ----- acquisition (rs__wait_acquire's operations; ctx is the rs_call_t) ------------- */

/* Best effort, one round: "rel" of this acquisition on the masters of mask (those that
 * granted, and those that did not answer and so may have). leaving: after the "cancel" that
 * ends the acquisition a plain "rel" (which wakes the next waiter), not the undo of one
 * attempt: "cancel" does not stamp its number into a grant it finds, so an undo of that
 * number would leave an earlier attempt's grant for a lease (lib/async_rl.c does the same). */
static void release_on(rs_call_t *k, unsigned mask, int leaving)
{
    rs_client_t *c = k->h->c;
    if (!mask)
        return;
    rs_argv_t v;
    rs__call_argv(k, "rel", leaving ? "t" : "u", &v); /* an undo wakes nobody (mutex.lua) */
    if (k->nextra == 0 && !leaving) {
        /* of this attempt only: sent on a connection that may be dropped before it arrives,
         * it must not free a later attempt's grant (mutex.lua, ARGV[11]) */
        rs__rl_argv_tail(&v, 0, k->rl_attempt);
    }
    redisReply *rep[RS_SEEDS_MAX] = {0};
    rs__rl_round(c, k->h->script, k->h->nkeys, &v, mask, rs__rl_round_ms(c, atol(k->lease)),
                 rep);
    for (int i = 0; i < c->ep.nseeds; i++)
        if (rep[i])
            freeReplyObject(rep[i]);
}

/* One acquiring op ("acq" or "cancel") on every master; see the top of the file. */
static int rl_acquiring(rs_call_t *k, const char *op, const char *mode, int retry,
                        rs_attempt_t *out)
{
    rs_client_t *c = k->h->c;
    int n = c->ep.nseeds, q = rs__rl_quorum(c);
    long lease = atol(k->lease);
    uint64_t end = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    if (!k->rl_ticket) {
        /* the waiter's place in every master's queue: when it began, by its own clock (a
         * clock that is off changes only whom the masters wake first, never a lease) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        k->rl_ticket = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    }
    for (;;) {
        memset(out, 0, sizeof *out);
        rs_argv_t v;
        rs__call_argv(k, op, mode, &v);
        k->rl_attempt++;
        if (k->nextra == 0)
            rs__rl_argv_tail(&v, k->rl_ticket, k->rl_attempt);
        redisReply *rep[RS_SEEDS_MAX] = {0};
        out->sent_ns = rs__now_ns();
        long left = rs__rl_ms_left(end), budget = rs__rl_round_ms(c, lease);
        rs__rl_round(c, k->h->script, k->h->nkeys, &v, rs__rl_all_mask(c),
                 budget < left ? budget : (left > 0 ? left : 1), rep);
        rs_rl_votes_t vt;
        rs__rl_votes_init(&vt);
        for (int i = 0; i < n; i++) {
            rs__rl_vote(&vt, k, i, rep[i]);
            if (rep[i])
                freeReplyObject(rep[i]);
        }
        out->queued = vt.queued;
        out->seen_fence = vt.seen_fence;
        long validity;
        int verdict = rs__rl_decide(&vt, q, lease,
                                    (long)((rs__now_ns() - out->sent_ns) / RS_NS_PER_MS),
                                    &validity);
        if (verdict == RS_RL_GRANT) {
            rs__rl_log_round(c, k->h, op, k->rl_attempt, &vt, validity, "granted", -1);
            out->granted = 1;
            out->fence = vt.fence;
            out->ttl_ms = vt.min_ttl;
            out->rl_granted = vt.gmask;
            rs__clear_error();
            return 0;
        }
        /* not ours: undo every grant (and what the silent masters may have granted; not on a
         * master marked down: dialling it again would cost the round's budget, and a grant it
         * may hold expires with its lease) */
        unsigned undo = vt.undo;
        for (int i = 0; i < n; i++)
            if (!rep[i] && rs__rl_is_down(c, i))
                undo &= ~(1u << i);
        release_on(k, undo, strcmp(op, "cancel") == 0);
        if (vt.mine >= q && rs__watch_holds(c, k->h->key[0], k->h->klen[0], k->token, k->toklen))
            return rs__fail(c, EDEADLK, "this thread already holds %s \"%.*s\"", k->h->kind,
                            RS_HNAME(k->h));
        if (verdict == RS_RL_ERROR)
            return vt.err;
        if (verdict == RS_RL_NOQUORUM) {
            rs__rl_log_round(c, k->h, op, k->rl_attempt, &vt, validity, "no quorum answered", -1);
            if (!retry || rs__rl_ms_left(end) <= 0)
                return rs__rl_noquorum(c, vt.answered, vt.gmask | vt.mmask | vt.bmask);
            if (atomic_load(&c->closing))
                return rs__fail(c, ECANCELED, "the client is closing");
            long nap = rs__rl_backoff_ms(lease), l2 = rs__rl_ms_left(end);
            rs__sleep_ns((uint64_t)(nap < l2 ? nap : l2) * RS_NS_PER_MS);
            continue;
        }
        rs__clear_error();
        /* a holder on a quorum: sleep until a wake-up or its lease; a split vote, a grant that
         * came too late, or an old hold of ours (its release lost): a random back-off, slept
         * here: the wait loop would cut it short at the wake-up that the other side's release
         * sends, and two clients that split the vote would then meet again in lockstep (seen
         * with one master of three paused: two of them took one master each, forever) */
        out->granted = 0;
        if (verdict == RS_RL_BUSY) {
            /* held on a quorum, or reserved there for the waiter a release woke: sleep until
             * a wake-up, checking again after a while even without one (rs__rl_busy_wait) */
            out->retry_ms = rs__rl_busy_wait(&vt, lease, &k->rl_seen, &k->rl_recheck_ms);
            rs__rl_log_round(c, k->h, op, k->rl_attempt, &vt, validity,
                             "busy: wait for a wake-up, at most", out->retry_ms);
        } else {
            long nap = rs__rl_backoff_ms(lease);
            rs__rl_log_round(c, k->h, op, k->rl_attempt, &vt, validity, "split vote: back-off",
                             nap);
            rs__sleep_ns((uint64_t)nap * RS_NS_PER_MS);
            out->retry_ms = 1;
        }
        return 0;
    }
}

static int rl_attempt(void *ctx, int queue, rs_attempt_t *out)
{
    return rl_acquiring(ctx, "acq", queue ? "q" : "t", 1, out);
}

static int rl_cancel(void *ctx, rs_attempt_t *out)
{
    /* leaves every master's queue; a quorum of grants found there (not possible without a
     * lost reply) is kept like any other */
    return rl_acquiring(ctx, "cancel", "t", 0, out);
}

static int rl_message(void *ctx, const char *msg, rs_attempt_t *out)
{
    (void)ctx, (void)msg, (void)out;
    return 0; /* "retry": a master released; try again on all of them */
}

static rs_lease_t *rl_queue_lease(void *ctx)
{
    return rs__call_lease(ctx, "qrenew", NULL);
}

const rs_acquire_ops_t rs__rl_ops = {rl_attempt, rl_cancel, rl_message, rl_queue_lease};

/* ----- open ---------------------------------------------------------------------------- */

int rs__rl_open(rs_client_t *c)
{
    int n = c->ep.nseeds, q = rs__rl_quorum(c);
    uint64_t end = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    unsigned ok = 0;
    uint64_t nap = 5;
    char last[256] = "";
    for (;;) {
        for (int i = 0; i < n; i++) {
            long left = rs__rl_ms_left(end);
            if ((ok & (1u << i)) || left <= 0)
                continue;
            /* a share of the time, so that one master that hangs leaves some for the rest */
            long share = c->timeout_ms / n > 50 ? c->timeout_ms / n : 50;
            rs_conn_t *k;
            int rc = rs__conn_get_once(c, i, share < left ? share : left, &k);
            if (rc == 0) {
                rs__conn_put(c, k, 0);
                ok |= 1u << i;
            } else if (rc != RS_ECONN) {
                return rc; /* a refusal (AUTH, SELECT): the same everywhere, say it now */
            } else {
                snprintf(last, sizeof last, "%s", rs_client_lasterror(c));
            }
        }
        if (popcount(ok) == n || (popcount(ok) >= q && rs__rl_ms_left(end) <= 0))
            return 0;
        if (rs__rl_ms_left(end) <= 0)
            return rs__fail(c, RS_ECONN, "only %d of %d redlock masters reachable within %ld ms "
                            "(a quorum is %d); last: %s", popcount(ok), n, c->timeout_ms, q, last);
        if (popcount(ok) >= q)
            return 0; /* the others may come later; a quorum is enough to work */
        uint64_t now = rs__now_ns();
        rs__sleep_ns(nap * RS_NS_PER_MS < end - now ? nap * RS_NS_PER_MS : end - now);
        if (nap < 100)
            nap *= 2;
    }
}

/* ----- the watchdog's round -------------------------------------------------------------- */

struct renew_cmds {
    rs_lease_t **batch;
    rs_lease_scratch_t *s; /* a built lease's call, appended before the next is built */
    rs_argv_t a;           /* its arguments, which out refers to (the fence is formatted into
                              a's arena): alive until fanout has appended them */
};

static void build_renew(void *arg, int j, rs_argv_t *out)
{
    struct renew_cmds *rc = arg;
    rs_lease_t *l = rc->batch[j];
    rs__lease_argv(l, l->renew_op, rc->s, &rc->a);
    rs__evalsha_argv(l->script, l->nkeys, &rc->a, out);
}

void rs__rl_renew_round(rs_client_t *c, rs_lease_t **batch, int *res, int n, uint64_t *sent,
                        uint64_t cut_ns)
{
    int nm = c->ep.nseeds, q = rs__rl_quorum(c);
    long io_ms = rs__round_begin(res, n, cut_ns);
    /* the fan-out keeps its budget of a third of the shortest lease (within timeout_ms): a
     * master that does not answer by then is dropped and a quorum decides without it; the
     * cut (the nearest hold deadline) only shortens it */
    for (int j = 0; j < n; j++)
        if (batch[j]->lease_ms / 3 < io_ms)
            io_ms = batch[j]->lease_ms / 3;
    if (c->timeout_ms < io_ms)
        io_ms = c->timeout_ms;
    if (io_ms < 10)
        io_ms = 10;
    redisReply **rep = calloc((size_t)nm * (size_t)n + 1, sizeof *rep);
    if (!rep)
        return;
    *sent = rs__now_ns();
    uint64_t deadline = *sent + (uint64_t)io_ms * RS_NS_PER_MS;
    long lease_min = batch[0]->lease_ms;
    for (int j = 1; j < n; j++)
        if (batch[j]->lease_ms < lease_min)
            lease_min = batch[j]->lease_ms;
    /* a connection that has owed replies for a whole lease: the master hangs */
    for (int i = 0; i < nm; i++)
        if (c->wd.cctx[i] && c->wd.rl_owed[i] > 0 &&
            *sent - c->wd.rl_owed_since[i] > (uint64_t)lease_min * RS_NS_PER_MS) {
            rs__rl_wd_drop(c, i);
            rs__rl_mark(c, i, 0);
        }
    rs_lease_scratch_t s;
    struct renew_cmds rc = {batch, &s, {0}};
    unsigned todo = rs__rl_all_mask(c);
    for (int pass = 0; pass < 2 && todo; pass++) {
        redisContext *ctx[RS_SEEDS_MAX] = {0};
        unsigned want = 0;
        int have = 0;
        for (int i = 0; i < nm; i++) {
            if (!(todo & (1u << i)))
                continue;
            if (c->wd.cctx[i])
                have++;
            else
                want |= 1u << i;
        }
        struct dial_wd dw = {c, io_ms};
        rs__rl_dial_all(c, want, have, deadline, dial_wd, &dw);
        int skip[RS_SEEDS_MAX] = {0};
        for (int i = 0; i < nm; i++)
            if (todo & (1u << i)) {
                ctx[i] = c->wd.cctx[i];
                skip[i] = ctx[i] ? c->wd.rl_owed[i] : 0;
            }
        /* every master's replies are waited for until the deadline, not only a quorum's
         * plus as long again: a reply that a retransmission delays is slow, not lost. A
         * master whose replies have not all come by then keeps its connection with the
         * replies it owes (read and dropped at the next round, whose renewals go out
         * behind them): dropping it cost a dial, two round trips and, when a SYN is lost,
         * a second, which a slow, lossy link could not afford round after round (false
         * loss reports under 150-250 ms round trips with 5 % loss, net-rl-slowloss). The
         * leases' deadlines cut the round (cut_ns) */
        unsigned late = 0;
        unsigned broken = rs__rl_fanout_owed(ctx, nm, build_renew, &rc, n, skip, deadline, rep,
                                             &late);
        unsigned again = 0;
        for (int i = 0; i < nm; i++) {
            if (!ctx[i])
                continue;
            if (!(broken & (1u << i))) {
                if (skip[i] > 0 && c->wd.rl_owed[i] == 0)
                    c->wd.rl_owed_since[i] = *sent;
                c->wd.rl_owed[i] = skip[i];
            }
            for (int j = 0; j < n; j++) {
                redisReply **r = &rep[i * n + j];
                if (*r && rs__is_noscript(*r)) {
                    again |= 1u << i;
                } else if (*r && (*r)->type == REDIS_REPLY_ERROR) {
                    rs__log(c, RS_LOG_WARN, "renewing %s \"%s\" on redlock master %d: %s",
                            batch[j]->kind, batch[j]->name, i, (*r)->str);
                }
            }
            if ((again & (1u << i)) && (broken & (1u << i) || c->wd.rl_owed[i] > 0))
                again &= ~(1u << i); /* its replies are still due: not in this round */
            if (again & (1u << i)) {
                /* loaded, then the whole pipeline once more (renewing twice is harmless) */
                for (int j = 0; j < n; j++)
                    if (rep[i * n + j]) {
                        freeReplyObject(rep[i * n + j]);
                        rep[i * n + j] = NULL;
                    }
                for (int j = 0; j < n && (again & (1u << i)); j++)
                    if (j == 0 || batch[j]->script != batch[j - 1]->script)
                        if (rs__script_load(c, ctx[i], batch[j]->script) != 0)
                            again &= ~(1u << i), broken |= 1u << i;
            }
            if (broken & (1u << i)) {
                rs__rl_wd_drop(c, i);
                if (!rep[i * n])
                    rs__rl_mark(c, i, 0);
            }
        }
        todo = again & ~broken;
    }
    for (int j = 0; j < n; j++) {
        int yes = 0, no = 0, granted = 0;
        for (int i = 0; i < nm; i++) {
            redisReply *r = rep[i * n + j];
            if (!r || r->type != REDIS_REPLY_INTEGER)
                continue;
            if (r->integer == 1)
                yes++;
            else if (r->integer == 2)
                granted++;
            else if (r->integer == 0)
                no++;
            if (!batch[j]->waiter && r->integer == 0) /* (a master that granted, then lost it) */
                atomic_fetch_and(&batch[j]->rl_held, ~(1u << i));
        }
        if (granted && batch[j]->waiter)
            res[j] = 2; /* a queue entry found granted: its waiter retries */
        else if (yes >= q)
            res[j] = 1;
        else if (no > nm - q)
            res[j] = 0; /* no quorum can hold it any more */
    }
    for (int i = 0; i < nm * n; i++)
        if (rep[i])
            freeReplyObject(rep[i]);
    free(rep);
}

int rs__rl_refuse(rs_client_t *c, const char *kind, const char *why)
{
    if (!c || c->ep.mode != RS_MODE_REDLOCK)
        return 0;
    return rs__fail(c, ENOTSUP, "%s is not offered under redlock:// (only mutex and rmutex "
                    "are): %s", kind, why);
}
