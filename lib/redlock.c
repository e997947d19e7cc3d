/*
 * redlock.c - the Redlock mode (redlock://): the same scripts on N independent masters,
 * decided by quorum (N/2+1). Only the mutex and the recursive mutex are offered in this mode
 * (docs/deployments.md says why the others are not); their scripts get a mode flag ("qr"/"tr"
 * in ARGV[6]) under which a master never hands a released lock to a waiter: it publishes
 * "ACQID retry" to its first live waiter instead and reserves the free lock for it briefly;
 * otherwise a free lock goes to whoever asks. Waiters are queued by their ticket (ARGV[9]),
 * the same on every master (docs/deployments.md, "Waiting under Redlock").
 *
 * Every call goes to all masters AT ONCE: the command is written on every master's connection
 * first, then the replies are read from all sockets together with poll(), until one deadline
 * (fanout()). A master that is down costs one refused connect; one that hangs costs the
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

int rs__rl_quorum(const rs_client_t *c)
{
    return c->ep.nseeds / 2 + 1;
}

static unsigned all_mask(const rs_client_t *c)
{
    return (1u << c->ep.nseeds) - 1;
}

static int popcount(unsigned m)
{
    return __builtin_popcount(m);
}

static long ms_left(uint64_t deadline)
{
    uint64_t now = rs__now_ns();
    return now >= deadline ? 0 : (long)((deadline - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS);
}

/* The budget of one round on all masters: small against the lease (Redlock's advice: a
 * master that hangs must not eat the validity), within timeout_ms. */
static long round_ms(const rs_client_t *c, long lease_ms)
{
    long ms = lease_ms / 5;
    if (ms < 50)
        ms = 50;
    if (ms > 500)
        ms = 500;
    return ms < c->timeout_ms ? ms : c->timeout_ms;
}

/* A random back-off of 5..50 ms (never more than a tenth of the lease, at least 1 ms), so
 * that clients that split the vote do not meet again at once. */
static long backoff_ms(long lease_ms)
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

/* ----- masters that are down ---------------------------------------------------------- */

/* A master whose connect failed, or that did not answer a round, is not dialled again for a
 * second while the others can still make a quorum: a master that hangs (accepts, never
 * answers) would otherwise eat every round's budget in its handshake. */
#define RS_RL_DOWN_NS (1000 * RS_NS_PER_MS)

/* A waiter's first check without a wake-up after the lock changed hands (rl_acquiring). */
#define RS_RL_RECHECK_MS 20

static int is_down(rs_client_t *c, int i)
{
    return atomic_load(&c->rl.down_until[i]) > rs__now_ns();
}

static void mark(rs_client_t *c, int i, int up)
{
    atomic_store(&c->rl.down_until[i], up ? 0 : rs__now_ns() + RS_RL_DOWN_NS);
}

/* The order in which to dial the masters of want that have no connection yet: those not
 * marked down (pass 0), then, only if have plus those do not make a quorum, the others. Each
 * connect gets at most half of what is left, so one that hangs leaves time for the rest.
 * dial(i, budget_ms) returns 0 when connected. Returns how many it connected. */
static int dial_all(rs_client_t *c, unsigned want, int have, uint64_t deadline,
                    int (*dial)(void *arg, int i, long budget_ms), void *arg)
{
    int got = 0, q = rs__rl_quorum(c);
    unsigned tried = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && have + got >= q)
            break;
        for (int i = 0; i < c->ep.nseeds; i++) {
            if (!(want & (1u << i)) || (tried & (1u << i)) || (pass == 0 && is_down(c, i)))
                continue;
            long left = ms_left(deadline);
            if (left <= 0)
                return got;
            tried |= 1u << i;
            int ok = dial(arg, i, left > 1 ? left / 2 : 1) == 0;
            mark(c, i, ok);
            got += ok;
        }
    }
    return got;
}

/* ----- the fan-out ------------------------------------------------------------------- */

typedef void (*rl_build_fn)(void *arg, int j, rs_argv_t *out);

/* Writes commands 0..ncmd-1 (built by build) on every ctx[i] != NULL, then reads the ncmd
 * replies of each, polling all sockets together, until deadline, or until `enough` masters
 * have answered and the others were given as long again as that took (at least 2 ms): a
 * master that hangs (SIGSTOP, a stalled disk) must not cost every round its whole budget,
 * which made the clients that had not yet marked it down lose every race for the lock to
 * those that had. rep[i * ncmd + j] is reply j of master i (NULL if it did not come).
 * Returns the masters whose connection failed (a write or a read). The masters that were
 * sent everything and whose replies had not all come go to *late (with late NULL, to the
 * result): their connection owes replies (a late one would be read as the answer to the next
 * command sent there). */
static unsigned fanout(redisContext **ctx, int n, rl_build_fn build, void *arg, int ncmd,
                       int enough, uint64_t deadline, redisReply **rep, unsigned *late)
{
    uint64_t t0 = rs__now_ns();
    unsigned broken = 0, pending = 0;
    int got[RS_SEEDS_MAX] = {0};
    for (int i = 0; i < n; i++) {
        if (!ctx[i])
            continue;
        int ok = 1;
        for (int j = 0; j < ncmd && ok; j++) {
            rs_argv_t a;
            build(arg, j, &a);
            ok = rs__ctx_append(ctx[i], a.n, a.v, a.len) == 0;
        }
        ok = ok && rs__ctx_flush(ctx[i]) == 0;
        if (ok)
            pending |= 1u << i;
        else
            broken |= 1u << i;
    }

    while (pending) {
        /* replies already buffered first */
        for (int i = 0; i < n; i++) {
            if (!(pending & (1u << i)))
                continue;
            while (got[i] < ncmd) {
                void *r = NULL;
                if (redisGetReplyFromReader(ctx[i], &r) != REDIS_OK) {
                    pending &= ~(1u << i);
                    broken |= 1u << i;
                    break;
                }
                if (!r)
                    break;
                rep[i * ncmd + got[i]++] = r;
            }
            if (got[i] == ncmd)
                pending &= ~(1u << i);
        }
        int complete = 0;
        for (int i = 0; i < n; i++)
            complete += ctx[i] && got[i] == ncmd;
        if (enough > 0 && complete >= enough && deadline > t0) {
            /* the quorum is in: the stragglers get as long again as it took */
            uint64_t now = rs__now_ns(), grace = now - t0;
            if (grace < 2 * RS_NS_PER_MS)
                grace = 2 * RS_NS_PER_MS;
            if (now + grace < deadline)
                deadline = now + grace;
            enough = 0; /* the new deadline is fixed once */
        }
        long left = ms_left(deadline);
        if (!pending || left <= 0)
            break;
        struct pollfd pfd[RS_SEEDS_MAX];
        int who[RS_SEEDS_MAX], m = 0, inside = 0;
        for (int i = 0; i < n; i++)
            if (pending & (1u << i)) {
                pfd[m].fd = ctx[i]->fd;
                pfd[m].events = POLLIN;
                /* bytes a TLS session already holds are invisible to poll() */
                pfd[m].revents = rs__tp_pending(ctx[i]) ? POLLIN : 0;
                inside += pfd[m].revents != 0;
                who[m++] = i;
            }
        int pr = inside ? inside : poll(pfd, (nfds_t)m, (int)(left > 1000000 ? 1000000 : left));
        if (pr < 0 && errno != EINTR)
            break;
        for (int x = 0; pr > 0 && x < m; x++)
            if (pfd[x].revents && rs__tp_fill(ctx[who[x]], 1) < 0) {
                pending &= ~(1u << who[x]);
                broken |= 1u << who[x];
            }
    }
    for (int i = 0; i < n; i++)
        if (ctx[i] && got[i] < ncmd && !(broken & (1u << i))) {
            if (late)
                *late |= 1u << i;
            else
                broken |= 1u << i;
        }
    return broken;
}

/* ----- late masters ------------------------------------------------------------------- */

/* A master that answered after the round had decided is slow, not down: its connection is
 * kept in c->rl.late[i] with the replies it owes, and read at the next round there. Marking
 * it down instead (as before) left it out of every call for a second, releases included, so
 * a loaded machine's slightly slower master kept stale queue entries that swallowed the
 * wake-ups of the real waiters (docs/deployments.md, "Waiting under Redlock"). It is marked
 * down only when it still owes a reply after a whole round's budget. */
static void late_keep(rs_client_t *c, int i, rs_conn_t *k, int owed)
{
    k->owed = owed;
    k->owed_since = rs__now_ns();
    rs_conn_t *none = NULL;
    if (!atomic_compare_exchange_strong(&c->rl.late[i], &none, k))
        rs__conn_put(c, k, 1); /* one kept per master is enough */
}

/* Reads what the late connection to master i owes, without waiting. Returns the connection
 * if it is clear (to use at once), else NULL: kept for later, or dropped (broken, or owing
 * for longer than budget_ms: then the master is marked down). */
static rs_conn_t *late_take(rs_client_t *c, int i, long budget_ms)
{
    rs_conn_t *k = atomic_exchange(&c->rl.late[i], NULL);
    if (!k)
        return NULL;
    redisContext *ctx = k->ctx;
    int ok = 1;
    while (ok && k->owed > 0) {
        void *r = NULL;
        if (redisGetReplyFromReader(ctx, &r) != REDIS_OK) {
            ok = 0;
        } else if (r) {
            freeReplyObject(r);
            k->owed--;
        } else {
            int f = rs__tp_fill(ctx, 1); /* no wait; TLS-buffered bytes included */
            if (f == 0)
                break;
            ok = f > 0;
        }
    }
    if (ok && k->owed == 0)
        return k;
    if (ok && rs__now_ns() - k->owed_since < (uint64_t)budget_ms * RS_NS_PER_MS) {
        rs_conn_t *none = NULL;
        if (atomic_compare_exchange_strong(&c->rl.late[i], &none, k))
            return NULL;
    } else if (ok) {
        mark(c, i, 0); /* no answer for a whole round: it hangs */
    }
    rs__conn_put(c, k, 1);
    return NULL;
}

void rs__rl_forget(rs_client_t *c)
{
    for (int i = 0; i < RS_SEEDS_MAX; i++) {
        rs_conn_t *k = atomic_exchange(&c->rl.late[i], NULL);
        if (k)
            rs__conn_put(c, k, 1);
    }
}

struct one_cmd {
    const rs_argv_t *av;
};

static void build_one(void *arg, int j, rs_argv_t *out)
{
    (void)j;
    *out = *((struct one_cmd *)arg)->av;
    /* the copy's references into its own arena must point into the copy */
    const rs_argv_t *src = ((struct one_cmd *)arg)->av;
    for (int i = 0; i < out->n; i++)
        if (src->v[i] >= src->arena && src->v[i] < src->arena + sizeof src->arena)
            out->v[i] = out->arena + (src->v[i] - src->arena);
}

struct dial_pool {
    rs_client_t *c;
    rs_conn_t *k[RS_SEEDS_MAX];
};

static int dial_pool(void *arg, int i, long budget_ms)
{
    struct dial_pool *dp = arg;
    return rs__conn_get_once(dp->c, i, budget_ms, &dp->k[i]);
}

struct dial_wd {
    rs_client_t *c;
    long io_ms;
};

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

/* Loads script s on ctx (a master that answered NOSCRIPT); 0 on success. */
static int load(rs_client_t *c, redisContext *ctx, const rs_script_t *s)
{
    return rs__script_load(c, ctx, s);
}

/* One round of one script call on the masters of mask, at once, within budget_ms.
 * rep[i] gets master i's reply (an error reply included; transient ones such as LOADING
 * count as no answer), NULL if it did not answer. Masters that already have a reply in rep
 * are skipped. */
static void rl_round(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                     unsigned mask, long budget_ms, redisReply **rep)
{
    int n = c->ep.nseeds;
    uint64_t deadline = rs__now_ns() + (uint64_t)budget_ms * RS_NS_PER_MS;
    rs_argv_t ev;
    rs__evalsha_argv(s, nkeys, args, &ev);
    struct one_cmd oc = {&ev};
    for (int pass = 0; pass < 2; pass++) {
        struct dial_pool dp = {c, {0}};
        redisContext *ctx[RS_SEEDS_MAX] = {0};
        unsigned want = 0;
        int have = 0;
        for (int i = 0; i < n; i++) {
            if (rep[i]) {
                have++;
            } else if (mask & (1u << i)) {
                /* a master marked down is asked only if the others cannot make a quorum */
                if (!is_down(c, i) && ((dp.k[i] = late_take(c, i, budget_ms)) != NULL ||
                                       (dp.k[i] = rs__conn_take_idle(c, i)) != NULL))
                    have++;
                else
                    want |= 1u << i;
            }
        }
        dial_all(c, want, have, deadline, dial_pool, &dp);
        rs_conn_t **k = dp.k;
        int any = 0;
        for (int i = 0; i < n; i++)
            if (k[i])
                ctx[i] = k[i]->ctx, any = 1;
        if (!any)
            return;
        redisReply *got[RS_SEEDS_MAX] = {0};
        int answered = 0;
        for (int i = 0; i < n; i++)
            answered += rep[i] != NULL;
        int enough = rs__rl_quorum(c) - answered;
        unsigned late = 0;
        unsigned broken = fanout(ctx, n, build_one, &oc, 1, enough > 0 ? enough : 1, deadline,
                                 got, &late);
        int reload = 0;
        for (int i = 0; i < n; i++) {
            if (!ctx[i])
                continue;
            redisReply *r = got[i];
            if (r && rs__is_noscript(r)) {
                freeReplyObject(r);
                r = NULL;
                if (load(c, ctx[i], s) == 0)
                    reload = 1;
                else
                    broken |= 1u << i;
            } else if (r && r->type == REDIS_REPLY_ERROR && rs__is_transient(r)) {
                freeReplyObject(r);
                r = NULL;
            }
            rep[i] = r;
            if (r)
                mark(c, i, 1);
            else if (broken & (1u << i))
                mark(c, i, 0); /* the connection failed */
            if (late & (1u << i))
                late_keep(c, i, k[i], 1); /* slow, not down: its reply is read later */
            else
                rs__conn_put(c, k[i], (broken & (1u << i)) != 0);
        }
        if (!reload || ms_left(deadline) <= 0)
            return;
    }
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
    for (;;) {
        long budget = round_ms(c, lease_ms), left = ms_left(end);
        rl_round(c, s, nkeys, args, all_mask(c), budget < left ? budget : (left > 0 ? left : 1),
                 rep);
        int answered = 0;
        for (int i = 0; i < n; i++)
            answered += rep[i] != NULL;
        /* a quorum is enough: a master that is down is not waited for */
        if (answered >= q || ms_left(end) <= 0)
            break;
        uint64_t now = rs__now_ns();
        rs__sleep_ns(nap * RS_NS_PER_MS < end - now ? nap * RS_NS_PER_MS : end - now);
        if (nap < 100)
            nap *= 2;
    }
    int err = 0;
    for (int i = 0; i < n; i++) {
        redisReply *r = rep[i];
        if (!r)
            continue;
        if (r->type == REDIS_REPLY_INTEGER) {
            t->answered++;
            if (r->integer >= 1)
                t->pos++;
            else
                t->zero++;
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
    return rs__fail(c, RS_ECONN, "only %d of %d redlock masters answered within %ld ms (a "
                    "quorum is %d)", t->answered, n, c->timeout_ms, q);
}

int rs__rl_lease_int(rs_client_t *c, rs_lease_t *l, const char *op, rs_rl_tally_t *t)
{
    rs_argv_t a;
    rs__lease_argv(l, op, &a);
    return rs__rl_call_int(c, l->script, l->nkeys, &a, l->lease_ms, t);
}

/* ----- acquisition (rs__wait_acquire's operations; ctx is the rs_call_t) ------------- */

/* Best effort, one round: "rel" of this acquisition on the masters of mask (those that
 * granted, and those that did not answer and so may have). */
static void release_on(rs_call_t *k, unsigned mask)
{
    rs_client_t *c = k->h->c;
    if (!mask)
        return;
    rs_argv_t v;
    rs__call_argv(k, "rel", "u", &v); /* an undo: wakes nobody (mutex.lua) */
    redisReply *rep[RS_SEEDS_MAX] = {0};
    rl_round(c, k->h->script, k->h->nkeys, &v, mask, round_ms(c, atol(k->lease)), rep);
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
        if (k->nextra == 0)
            rs__argv_fmt(&v, "%llu", (unsigned long long)k->rl_ticket); /* ARGV[9] */
        redisReply *rep[RS_SEEDS_MAX] = {0};
        out->sent_ns = rs__now_ns();
        long left = ms_left(end), budget = round_ms(c, lease);
        rl_round(c, k->h->script, k->h->nkeys, &v, all_mask(c),
                 budget < left ? budget : (left > 0 ? left : 1), rep);
        int answered = 0, granted = 0, busy = 0, mine = 0, err = 0;
        unsigned undo = 0;
        long min_ttl = -1, busy_ttl = -1;
        uint64_t fence = 0;
        for (int i = 0; i < n; i++) {
            redisReply *r = rep[i];
            if (!r) {
                undo |= 1u << i; /* it may have granted */
                continue;
            }
            rs_attempt_t a;
            memset(&a, 0, sizeof a);
            int rc = r->type == REDIS_REPLY_ERROR ? rs__reply_error(c, r)
                                                  : rs__decode_grant(k, r, &a);
            freeReplyObject(r);
            if (rc == EDEADLK) {
                answered++, mine++;
            } else if (rc) {
                if (!err)
                    err = rc;
                undo |= 1u << i;
            } else if (a.granted) {
                answered++, granted++;
                undo |= 1u << i;
                if (a.fence > fence)
                    fence = a.fence;
                if (min_ttl < 0 || a.ttl_ms < min_ttl)
                    min_ttl = a.ttl_ms;
            } else {
                answered++, busy++;
                out->queued |= a.queued;
                if (busy_ttl < 0 || a.retry_ms < busy_ttl)
                    busy_ttl = a.retry_ms; /* a reservation's: the ms it has left */
                if (a.seen_fence > out->seen_fence)
                    out->seen_fence = a.seen_fence;
            }
        }
        long elapsed = (long)((rs__now_ns() - out->sent_ns) / RS_NS_PER_MS);
        long validity = min_ttl - elapsed - (long)(rs__drift_ns(lease) / RS_NS_PER_MS);
        if (granted >= q && validity > 0) {
            out->granted = 1;
            out->fence = fence;
            out->ttl_ms = min_ttl;
            rs__clear_error();
            return 0;
        }
        /* not ours: undo every grant (and what the silent masters may have granted; not on a
         * master marked down: dialling it again would cost the round's budget, and a grant it
         * may hold expires with its lease) */
        for (int i = 0; i < n; i++)
            if (!rep[i] && is_down(c, i))
                undo &= ~(1u << i);
        release_on(k, undo);
        if (mine >= q && rs__watch_holds(c, k->h->key[0], k->h->klen[0], k->token, k->toklen))
            return rs__fail(c, EDEADLK, "this thread already holds %s \"%.*s\"", k->h->kind,
                            RS_HNAME(k->h));
        if (err && answered < q)
            return err;
        if (answered < q) {
            if (!retry || ms_left(end) <= 0)
                return rs__fail(c, RS_ECONN, "only %d of %d redlock masters answered within %ld "
                                "ms (a quorum is %d)", answered, n, c->timeout_ms, q);
            if (atomic_load(&c->closing))
                return rs__fail(c, ECANCELED, "the client is closing");
            long nap = backoff_ms(lease), l2 = ms_left(end);
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
        if (busy >= q && busy_ttl > 0) {
            /* held on a quorum, or reserved there for the waiter a release woke: sleep until
             * a wake-up, but check again after a while even without one, so that a lost
             * wake-up does not cost the holder's whole lease. The check comes after 20 ms,
             * then twice as long each time: a lost wake-up costs at most as long again as
             * the wait had lasted. While the lock changes hands the wait is at most lease/8;
             * a hold that stays (same fencing counter) is checked ever more rarely, up to its
             * lease: a long hold costs a few checks, never a poll */
            long iv = k->rl_recheck_ms > 0 ? 2 * k->rl_recheck_ms : RS_RL_RECHECK_MS;
            long cap = lease / 8 > RS_RL_RECHECK_MS ? lease / 8 : RS_RL_RECHECK_MS;
            if (out->seen_fence != k->rl_seen && iv > cap)
                iv = cap;
            k->rl_seen = out->seen_fence;
            k->rl_recheck_ms = iv;
            out->retry_ms = busy_ttl < iv ? busy_ttl : iv;
        } else {
            long nap = backoff_ms(lease);
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
            long left = ms_left(end);
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
        if (popcount(ok) == n || (popcount(ok) >= q && ms_left(end) <= 0))
            return 0;
        if (ms_left(end) <= 0)
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
};

static void build_renew(void *arg, int j, rs_argv_t *out)
{
    rs_lease_t *l = ((struct renew_cmds *)arg)->batch[j];
    rs_argv_t a;
    rs__lease_argv(l, l->renew_op, &a);
    rs__evalsha_argv(l->script, l->nkeys, &a, out);
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
    struct renew_cmds rc = {batch};
    unsigned todo = all_mask(c);
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
        dial_all(c, want, have, deadline, dial_wd, &dw);
        for (int i = 0; i < nm; i++)
            if (todo & (1u << i))
                ctx[i] = c->wd.cctx[i];
        unsigned broken = fanout(ctx, nm, build_renew, &rc, n, rs__rl_quorum(c), deadline, rep,
                                 NULL);
        unsigned again = 0;
        for (int i = 0; i < nm; i++) {
            if (!ctx[i])
                continue;
            for (int j = 0; j < n; j++) {
                redisReply **r = &rep[i * n + j];
                if (*r && rs__is_noscript(*r)) {
                    again |= 1u << i;
                } else if (*r && (*r)->type == REDIS_REPLY_ERROR) {
                    rs__log(c, RS_LOG_WARN, "renewing %s \"%s\" on redlock master %d: %s",
                            batch[j]->kind, batch[j]->name, i, (*r)->str);
                }
            }
            if ((again & (1u << i)) && !(broken & (1u << i))) {
                /* loaded, then the whole pipeline once more (renewing twice is harmless) */
                for (int j = 0; j < n; j++)
                    if (rep[i * n + j]) {
                        freeReplyObject(rep[i * n + j]);
                        rep[i * n + j] = NULL;
                    }
                for (int j = 0; j < n && (again & (1u << i)); j++)
                    if (j == 0 || batch[j]->script != batch[j - 1]->script)
                        if (load(c, ctx[i], batch[j]->script) != 0)
                            again &= ~(1u << i), broken |= 1u << i;
            }
            if (broken & (1u << i)) {
                rs__ctx_free(c->wd.cctx[i]);
                c->wd.cctx[i] = NULL;
                if (!rep[i * n])
                    mark(c, i, 0);
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
