/*
 * rlround.c - Redlock's rounds (lib/redlock.c decides by quorum; this file talks to the
 * masters): one call written to every master's connection at once and the replies read from
 * all sockets together with poll(), until one deadline (rs__rl_fanout, rs__rl_round); which
 * masters are down (not dialled again for a second while the others can make a quorum) or
 * late (slow, not down: their connection is kept with the replies it owes); dialling them.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

unsigned rs__rl_all_mask(const rs_client_t *c)
{
    return (1u << c->ep.nseeds) - 1;
}

long rs__rl_ms_left(uint64_t deadline)
{
    uint64_t now = rs__now_ns();
    return now >= deadline ? 0 : (long)((deadline - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS);
}

/* ----- masters that are down ---------------------------------------------------------- */

/* A master whose connect failed, or that did not answer a round, is not dialled again for a
 * second while the others can still make a quorum: a master that hangs (accepts, never
 * answers) would otherwise eat every round's budget in its handshake. */
#define RS_RL_DOWN_NS (1000 * RS_NS_PER_MS)

int rs__rl_is_down(rs_client_t *c, int i)
{
    return atomic_load(&c->rl.down_until[i]) > rs__now_ns();
}

void rs__rl_mark(rs_client_t *c, int i, int up)
{
    atomic_store(&c->rl.down_until[i], up ? 0 : rs__now_ns() + RS_RL_DOWN_NS);
}

/* The order in which to dial the masters of want that have no connection yet: those not
 * marked down (pass 0), then, only if have plus those do not make a quorum, the others. Each
 * connect gets at most half of what is left, so one that hangs leaves time for the rest.
 * dial(i, budget_ms) returns 0 when connected. Returns how many it connected. */
int rs__rl_dial_all(rs_client_t *c, unsigned want, int have, uint64_t deadline,
                    int (*dial)(void *arg, int i, long budget_ms), void *arg)
{
    int got = 0, q = rs__rl_quorum(c);
    unsigned tried = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && have + got >= q)
            break;
        for (int i = 0; i < c->ep.nseeds; i++) {
            if (!(want & (1u << i)) || (tried & (1u << i)) || (pass == 0 && rs__rl_is_down(c, i)))
                continue;
            long left = rs__rl_ms_left(deadline);
            if (left <= 0)
                return got;
            tried |= 1u << i;
            /* half of what is left, so that one master that hangs leaves time for the rest;
             * all of it while the connections in hand fall short of a quorum: a connect and
             * its handshake take two round trips, which under 150-250 ms round trips half a
             * round's budget never covered (make test-network, net-rl-slowloss) */
            long give = have + got < q ? left : (left > 1 ? left / 2 : 1);
            int ok = dial(arg, i, give) == 0;
            rs__rl_mark(c, i, ok);
            got += ok;
        }
    }
    return got;
}

/* ----- the fan-out ------------------------------------------------------------------- */


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
static unsigned fanout(redisContext **ctx, int n, rs_rl_build_fn build, void *arg, int ncmd,
                       int enough, uint64_t deadline, redisReply **rep, unsigned *late, int *skip,
                       unsigned nowrite)
{
    uint64_t t0 = rs__now_ns();
    unsigned broken = 0, pending = 0;
    int got[RS_SEEDS_MAX] = {0}, owe[RS_SEEDS_MAX] = {0};
    for (int i = 0; i < n; i++) {
        if (!ctx[i])
            continue;
        owe[i] = skip ? skip[i] : 0;
        int ok = 1;
        if (nowrite & (1u << i)) {
            pending |= 1u << i; /* sent by an earlier round of the same call */
            continue;
        }
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
                if (owe[i] > 0) {
                    freeReplyObject(r); /* owed to an earlier round, which has ended */
                    owe[i]--;
                    continue;
                }
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
        long left = rs__rl_ms_left(deadline);
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
    for (int i = 0; i < n; i++) {
        if (skip)
            skip[i] = ctx[i] && !(broken & (1u << i)) ? owe[i] + ncmd - got[i] : 0;
        if (ctx[i] && got[i] < ncmd && !(broken & (1u << i))) {
            if (late)
                *late |= 1u << i;
            else
                broken |= 1u << i;
        }
    }
    return broken;
}

unsigned rs__rl_fanout(redisContext **ctx, int n, rs_rl_build_fn build, void *arg, int ncmd,
                       int enough, uint64_t deadline, redisReply **rep, unsigned *late)
{
    return fanout(ctx, n, build, arg, ncmd, enough, deadline, rep, late, NULL, 0);
}

unsigned rs__rl_fanout_owed(redisContext **ctx, int n, rs_rl_build_fn build, void *arg,
                            int ncmd, int *skip, uint64_t deadline, redisReply **rep,
                            unsigned *late)
{
    return fanout(ctx, n, build, arg, ncmd, 0, deadline, rep, late, skip, 0);
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
        rs__rl_mark(c, i, 0); /* no answer for a whole round: it hangs */
    }
    rs__conn_put(c, k, 1);
    return NULL;
}

void rs__rl_keep_late(rs_client_t *c, int i, rs_conn_t *k)
{
    late_keep(c, i, k, 1);
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

/* One round of one script call on the masters of mask, at once, within budget_ms.
 * rep[i] gets master i's reply (an error reply included; transient ones such as LOADING
 * count as no answer), NULL if it did not answer. Masters that already have a reply in rep
 * are skipped. */
void rs__rl_round(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                     unsigned mask, long budget_ms, redisReply **rep)
{
    rs__rl_round_keep(c, s, nkeys, args, mask, budget_ms, rep, NULL);
}

void rs__rl_round_keep(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                       unsigned mask, long budget_ms, redisReply **rep, rs_conn_t **keep)
{
    int n = c->ep.nseeds;
    uint64_t deadline = rs__now_ns() + (uint64_t)budget_ms * RS_NS_PER_MS;
    rs_argv_t ev;
    rs__evalsha_argv(s, nkeys, args, &ev);
    struct one_cmd oc = {&ev};
    for (int pass = 0; pass < 2; pass++) {
        struct dial_pool dp = {c, {0}};
        redisContext *ctx[RS_SEEDS_MAX] = {0};
        unsigned want = 0, sent = 0;
        int have = 0;
        for (int i = 0; i < n; i++) {
            if (rep[i]) {
                have++;
            } else if (keep && keep[i]) {
                /* this call went there in an earlier round and its reply is still due: it
                 * is read, never sent again (a release sent twice finds its own first
                 * copy's work done and answers 0, which read as a lost hold) */
                dp.k[i] = keep[i];
                keep[i] = NULL;
                sent |= 1u << i;
                have++;
            } else if (mask & (1u << i)) {
                /* a master marked down is asked only if the others cannot make a quorum */
                if (!rs__rl_is_down(c, i) && ((dp.k[i] = late_take(c, i, budget_ms)) != NULL ||
                                       (dp.k[i] = rs__conn_take_idle(c, i)) != NULL))
                    have++;
                else
                    want |= 1u << i;
            }
        }
        rs__rl_dial_all(c, want, have, deadline, dial_pool, &dp);
        /* the replies get at least half the budget after the dials: a round whose dials
         * took its time would send and give up at once, and leave every connection owing
         * (a late reply is read at the next round there, which then dialled again) */
        if (want) {
            uint64_t floor = rs__now_ns() + (uint64_t)budget_ms * RS_NS_PER_MS / 2;
            if (deadline < floor)
                deadline = floor;
        }
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
                                 got, &late, NULL, sent);
        int reload = 0;
        for (int i = 0; i < n; i++) {
            if (!ctx[i])
                continue;
            redisReply *r = got[i];
            if (r && rs__is_noscript(r)) {
                freeReplyObject(r);
                r = NULL;
                if (rs__script_load(c, ctx[i], s) == 0)
                    reload = 1;
                else
                    broken |= 1u << i;
            } else if (r && r->type == REDIS_REPLY_ERROR && rs__is_transient(r)) {
                freeReplyObject(r);
                r = NULL;
            }
            rep[i] = r;
            if (r)
                rs__rl_mark(c, i, 1);
            else if (broken & (1u << i))
                rs__rl_mark(c, i, 0); /* the connection failed */
            if ((late & (1u << i)) && keep)
                keep[i] = k[i]; /* the caller's next round reads its reply */
            else if (late & (1u << i))
                late_keep(c, i, k[i], 1); /* slow, not down: its reply is read later */
            else
                rs__conn_put(c, k[i], (broken & (1u << i)) != 0);
        }
        if (!reload || rs__rl_ms_left(deadline) <= 0)
            return;
    }
}

