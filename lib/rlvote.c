/*
 * rlvote.c - Redlock's decisions (lib/redlock.c has the protocol), as pure functions of what
 * the masters answered, shared by the blocking calls (redlock.c, which gathers a round's
 * replies with poll()) and the event-loop API (async_rl.c, which gathers them from its
 * per-master pipelines): an acquiring round's answers tallied master by master
 * (rs__rl_vote), the round decided (rs__rl_decide: granted, an error, no quorum, busy,
 * split vote), how long a busy waiter sleeps (rs__rl_busy_wait), a split vote's back-off,
 * and whether a release's answers say the hold was lost (rs__rl_denied).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* A waiter's first check without a wake-up after the lock changed hands. */
#define RS_RL_RECHECK_MS 20

long rs__rl_round_ms(const rs_client_t *c, long lease_ms)
{
    long ms = lease_ms / 5;
    if (ms < 50)
        ms = 50;
    if (ms > 500)
        ms = 500;
    return ms < c->timeout_ms ? ms : c->timeout_ms;
}

void rs__rl_argv_tail(rs_argv_t *v, uint64_t ticket, unsigned attempt)
{
    if (ticket)
        rs__argv_fmt(v, "%llu", (unsigned long long)ticket); /* ARGV[9] */
    else
        rs__argv_ref(v, "", 0);
    rs__argv_ref(v, "", 0);         /* ARGV[10] */
    rs__argv_fmt(v, "%u", attempt); /* ARGV[11] */
}

long rs__rl_backoff_ms(long lease_ms)
{
    static _Thread_local uint64_t s;
    if (!s)
        s = rs__now_ns() ^ (rs__thread_no() * 0x9e3779b97f4a7c15ull) ^ 1;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    long hi = lease_ms / 10 < 50 ? lease_ms / 10 : 50;
    if (hi < 5)
        return hi > 0 ? hi : 1;
    return 5 + (long)(s % (uint64_t)(hi - 4));
}

void rs__rl_votes_init(rs_rl_votes_t *v)
{
    memset(v, 0, sizeof *v);
    v->min_ttl = v->busy_ttl = -1;
}

void rs__rl_vote(rs_rl_votes_t *v, const rs_call_t *k, int i, const redisReply *r)
{
    rs_client_t *c = k->h->c;
    unsigned bit = 1u << i;
    if (!r) {
        v->undo |= bit; /* it may have granted */
        return;
    }
    rs_attempt_t a;
    memset(&a, 0, sizeof a);
    int rc = r->type == REDIS_REPLY_ERROR ? rs__reply_error(c, r) : rs__decode_grant(k, r, &a);
    if (rc == EDEADLK) {
        v->answered++, v->mine++;
        v->mmask |= bit;
    } else if (rc) {
        if (!v->err)
            v->err = rc;
        v->undo |= bit;
    } else if (a.granted) {
        v->answered++, v->granted++;
        v->undo |= bit;
        v->gmask |= bit;
        if (a.fence > v->fence)
            v->fence = a.fence;
        if (v->min_ttl < 0 || a.ttl_ms < v->min_ttl)
            v->min_ttl = a.ttl_ms;
    } else {
        v->answered++, v->busy++;
        v->bmask |= bit;
        v->queued |= a.queued;
        if (v->busy_ttl < 0 || a.retry_ms < v->busy_ttl)
            v->busy_ttl = a.retry_ms; /* a reservation's: the ms it has left */
        if (a.seen_fence > v->seen_fence)
            v->seen_fence = a.seen_fence;
    }
}

int rs__rl_decide(const rs_rl_votes_t *v, int q, long lease_ms, long elapsed_ms, long *validity)
{
    *validity = v->min_ttl - elapsed_ms - (long)(rs__drift_ns(lease_ms) / RS_NS_PER_MS);
    if (v->granted >= q && *validity > 0)
        return RS_RL_GRANT;
    if (v->err && v->answered < q)
        return RS_RL_ERROR;
    if (v->answered < q)
        return RS_RL_NOQUORUM;
    /* a holder on a quorum (or a reservation there for the waiter a release woke): wait
     * for a wake-up; a split vote, a grant that came too late, an old hold of ours (its
     * release lost): a random back-off */
    return v->busy >= q && v->busy_ttl > 0 ? RS_RL_BUSY : RS_RL_SPLIT;
}

long rs__rl_busy_wait(const rs_rl_votes_t *v, long lease_ms, uint64_t *seen, long *recheck_ms)
{
    /* check again after a while even without a wake-up, so that a lost wake-up does not
     * cost the holder's whole lease: after 20 ms, then twice as long each time (a lost
     * wake-up costs at most as long again as the wait had lasted). While the lock changes
     * hands (the fencing counter moved) the wait is at most lease/8; a hold that stays is
     * checked ever more rarely, up to its lease: a long hold costs a few checks, never a
     * poll */
    long iv = *recheck_ms > 0 ? 2 * *recheck_ms : RS_RL_RECHECK_MS;
    long cap = lease_ms / 8 > RS_RL_RECHECK_MS ? lease_ms / 8 : RS_RL_RECHECK_MS;
    if (v->seen_fence != *seen && iv > cap)
        iv = cap;
    *seen = v->seen_fence;
    *recheck_ms = iv;
    return v->busy_ttl < iv ? v->busy_ttl : iv;
}

int rs__rl_denied(rs_client_t *c, rs_lease_t *l, const rs_rl_tally_t *t)
{
    /* lost when more masters deny it than a quorum could spare, or when the masters that
     * granted it (and no renewal found without it since) and do not deny it now are fewer
     * than a quorum: the ones that did not answer cannot make up for a grantor that says it
     * lost the hold (a master whose key expired early: its clock jumped,
     * tests/test_clock.c; it restarted without its data) */
    unsigned held = atomic_load(&l->rl_held);
    int q = rs__rl_quorum(c);
    return t->zero > c->ep.nseeds - q || (held && __builtin_popcount(held & ~t->zero_mask) < q);
}

void rs__rl_log_round(rs_client_t *c, const rs_handle_t *h, const char *op, unsigned attempt,
                      const rs_rl_votes_t *v, long validity, const char *what, long ms)
{
    if (!c->log)
        return;
    char per[RS_SEEDS_MAX + 1];
    int n = c->ep.nseeds;
    for (int i = 0; i < n; i++)
        per[i] = (v->gmask >> i) & 1   ? 'G'
                 : (v->mmask >> i) & 1 ? 'm'
                 : (v->bmask >> i) & 1 ? 'b'
                                       : '-';
    per[n] = '\0';
    rs__log(c, RS_LOG_DEBUG, "redlock %s \"%.*s\" %s #%u: %s (busy %ld ms, valid %ld ms), %s%s%ld%s",
            h->kind, RS_HNAME(h), op, attempt, per, v->busy_ttl, validity, what,
            ms >= 0 ? " " : "", ms, ms >= 0 ? " ms" : "");
}

int rs__rl_noquorum(rs_client_t *c, int answered, unsigned amask)
{
    char who[320] = "";
    size_t at = 0;
    for (int i = 0; i < c->ep.nseeds && at < sizeof who; i++)
        if (amask & (1u << i)) {
            int w = snprintf(who + at, sizeof who - at, "%s%s:%d", at ? ", " : "",
                             c->ep.seeds[i].host, c->ep.seeds[i].port);
            at += w > 0 ? (size_t)w : 0;
        }
    return rs__fail(c, RS_ECONN, "only %d of %d redlock masters answered within %ld ms (a quorum "
                    "is %d; answered: %s)", answered, c->ep.nseeds, c->timeout_ms,
                    rs__rl_quorum(c), amask ? who : "none");
}
