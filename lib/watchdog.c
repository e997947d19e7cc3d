/*
 * watchdog.c - one thread per client that keeps every lease of the client alive.
 *
 * Holds and waiters' queue entries register an rs_lease_t. The thread wakes at the earliest
 * renewal time or local deadline and renews, in ONE pipelined round trip on its own
 * connection, every live lease that is at least a third into its renewal period (so leases
 * of one client fall into step and 10,000 holds cost one round per period, not 10,000).
 *
 * Loss detection does not depend on Redis answering: each lease has a local monotonic
 * deadline, the send time of the last confirmed renewal + lease - drift. When it passes, or
 * a renewal reply says the hold is gone or taken, the hold is lost: on_lost is called once,
 * from this thread, and the holder's unlock returns RS_ELOST. A lost hold is never renewed
 * again, even if Redis still has it. Queue entries are not "lost": their waiter is poked to
 * retry (which re-queues it or finds it granted). Under Cluster the round is one pipeline per
 * node (each lease renewed on the master of its keys' slot; MOVED/ASK count as no answer and
 * the next round, soon, goes to the right node). Under Sentinel a READONLY/MASTERDOWN reply
 * or a broken connection makes the next round reconnect to the current master
 * (topology.c); renewals are not confirmed with WAIT (a renewal lost in a failover costs
 * at most the rest of the lease, which the new master still counts down). Under Redlock the
 * round goes to every master at once and counts by quorum (redlock.c, rs__rl_renew_round).
 *
 * Slow and lossy links (docs/reliability.md, "Network faults"): the connection is dialled by
 * this thread as soon as a lease is registered, not at the first renewal, and a round's
 * waits (connect, send, read) are bounded by the nearest local deadline of any lease (the
 * cut), not by a share of the lease: a slow reply is waited for on the same connection
 * while a deadline is still ahead. Every 100 ms of such a wait, and at the cut,
 * round_checkpoint applies the answers read so far, marks the leases past their deadline
 * lost and calls on_lost at once, so a holder cut off from Redis hears of it at its local
 * deadline, before anyone else can be granted the lock.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct rs_report {
    const char *kind;
    char *name;
    struct rs_report *next;
};

static uint64_t period_ns(const rs_lease_t *l)
{
    return (uint64_t)l->lease_ms * RS_NS_PER_MS / 3;
}

static void *watchdog_main(void *arg);

/* Starts the thread with every signal blocked: library threads must never take the host
 * program's signals (SIGPIPE least of all). Called with wd.mu held. */
static int start_thread(rs_client_t *c)
{
    if (c->wd.started)
        return 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&c->wd.thread, NULL, watchdog_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return rs__fail(c, EAGAIN, "cannot start the watchdog thread");
    c->wd.started = 1;
    return 0;
}

int rs__watch_add(rs_client_t *c, rs_lease_t *l, uint64_t sent_ns, long ttl_ms)
{
    if (ttl_ms <= 0 || ttl_ms > l->lease_ms)
        ttl_ms = ttl_ms <= 0 ? 1 : l->lease_ms;
    pthread_mutex_lock(&c->wd.mu);
    int rc = start_thread(c);
    if (rc == 0) {
        /* Redis's lease ends at (run time + ttl) >= sent + ttl; renew when a third of the
         * lease has gone since it was set */
        l->deadline_ns = sent_ns + (uint64_t)ttl_ms * RS_NS_PER_MS - rs__drift_ns(l->lease_ms);
        uint64_t end = sent_ns + (uint64_t)ttl_ms * RS_NS_PER_MS;
        l->due_ns = end > 2 * period_ns(l) ? end - 2 * period_ns(l) : 0;
        l->registered = 1;
        atomic_fetch_add(&l->refs, 1);
        l->prev = NULL;
        l->next = c->wd.head;
        if (c->wd.head)
            c->wd.head->prev = l;
        c->wd.head = l;
        if (l->due_ns < c->wd.wake_ns ||
            (!l->waiter && rs__rec_enabled(c) && atomic_load(&c->wd.rec_until_ns) <= sent_ns))
            pthread_cond_signal(&c->wd.cv); /* (and the holder record is to be written) */
    }
    pthread_mutex_unlock(&c->wd.mu);
    return rc;
}

int rs__watch_holds(rs_client_t *c, const char *key, size_t keylen, const char *token,
                    size_t toklen)
{
    int found = 0;
    pthread_mutex_lock(&c->wd.mu);
    for (rs_lease_t *l = c->wd.head; l && !found; l = l->next) {
        if (l->waiter || l->lost || l->nkeys < 1 || l->nargs <= l->nkeys + 1)
            continue; /* (a built lease is a queue entry: nargs 0) */
        size_t kl, tl;
        const char *k = rs__lease_arg(l, 1, &kl), *t = rs__lease_arg(l, l->nkeys + 1, &tl);
        found = kl == keylen && memcmp(k, key, keylen) == 0 && tl == toklen &&
                memcmp(t, token, toklen) == 0;
    }
    pthread_mutex_unlock(&c->wd.mu);
    return found;
}

void rs__watch_del(rs_client_t *c, rs_lease_t *l)
{
    pthread_mutex_lock(&c->wd.mu);
    int was = l->registered;
    if (was) {
        if (l->prev)
            l->prev->next = l->next;
        else
            c->wd.head = l->next;
        if (l->next)
            l->next->prev = l->prev;
        l->prev = l->next = NULL;
        l->registered = 0;
    }
    pthread_mutex_unlock(&c->wd.mu);
    if (was)
        rs__lease_unref(l);
}

/* Queues the on_lost report of l unless done already. wd.mu held. */
static void report_locked(rs_client_t *c, rs_lease_t *l)
{
    if (l->reported || l->waiter)
        return;
    l->reported = 1;
    struct rs_report *r = malloc(sizeof *r);
    if (r && (r->name = strdup(l->name)) != NULL) {
        r->kind = l->kind;
        r->next = c->wd.reports;
        c->wd.reports = r;
        start_thread(c);
        pthread_cond_signal(&c->wd.cv);
    } else {
        free(r);
    }
}

static void mark_lost_locked(rs_client_t *c, rs_lease_t *l)
{
    if (!l->lost) {
        l->lost = 1;
        if (!l->waiter) /* a waiter's queue entry is not a hold: it just queues again */
            rs__log(c, RS_LOG_WARN, "%s \"%s\": hold lost", l->kind, l->name);
    }
    report_locked(c, l);
}

int rs__lease_is_lost(rs_client_t *c, rs_lease_t *l)
{
    pthread_mutex_lock(&c->wd.mu);
    if (!l->lost && rs__now_ns() >= l->deadline_ns)
        mark_lost_locked(c, l);
    int lost = l->lost;
    pthread_mutex_unlock(&c->wd.mu);
    return lost;
}

void rs__lease_set_lost(rs_client_t *c, rs_lease_t *l)
{
    pthread_mutex_lock(&c->wd.mu);
    mark_lost_locked(c, l);
    pthread_mutex_unlock(&c->wd.mu);
}

uint64_t rs__lease_confirmed_ns(rs_client_t *c, rs_lease_t *l)
{
    pthread_mutex_lock(&c->wd.mu);
    uint64_t t = l->deadline_ns + rs__drift_ns(l->lease_ms), len = (uint64_t)l->lease_ms * RS_NS_PER_MS;
    t = t > len ? t - len : 0;
    pthread_mutex_unlock(&c->wd.mu);
    return t;
}

long rs__lease_remaining_ms(rs_client_t *c, rs_lease_t *l)
{
    pthread_mutex_lock(&c->wd.mu);
    uint64_t now = rs__now_ns();
    long left = 0;
    if (!l->lost && l->deadline_ns > now)
        left = (long)((l->deadline_ns - now) / RS_NS_PER_MS);
    pthread_mutex_unlock(&c->wd.mu);
    return left;
}

long rs__round_begin(int *res, int n, uint64_t cut_ns)
{
    uint64_t now = rs__now_ns();
    long io_ms = cut_ns > now ? (long)((cut_ns - now) / RS_NS_PER_MS) : 0;
    if (cut_ns == RS_NO_DEADLINE || io_ms > 3600 * 1000)
        io_ms = 3600 * 1000;
    if (io_ms < 10)
        io_ms = 10;
    for (int i = 0; i < n; i++)
        res[i] = -1;
    return io_ms;
}

/* A result of a round already applied by round_checkpoint (not applied again). */
#define RS_RES_APPLIED 9

/* The nearest local deadline of every live lease; RS_NO_DEADLINE if none. wd.mu held. */
static uint64_t nearest_deadline_locked(rs_client_t *c)
{
    uint64_t cut = RS_NO_DEADLINE;
    for (rs_lease_t *l = c->wd.head; l; l = l->next)
        if (!l->lost && l->deadline_ns < cut)
            cut = l->deadline_ns;
    return cut;
}

/* Marks l lost if it is live and past its local deadline (a queue entry's waiter is poked
 * to retry instead); expire_locked does so for every lease. wd.mu held. */
static void expire_one_locked(rs_client_t *c, rs_lease_t *l, uint64_t now)
{
    if (l->lost || now < l->deadline_ns)
        return;
    if (l->waiter)
        rs__notify_poke(c, l->waiter, RS_WAKE_RETRY);
    mark_lost_locked(c, l);
}

static void expire_locked(rs_client_t *c, uint64_t now)
{
    for (rs_lease_t *l = c->wd.head; l; l = l->next)
        expire_one_locked(c, l, now);
}

/* Applies a round's result for l (1 renewed, 0 gone, 2 granted, -1 no answer) whose
 * renewal was sent at sent; after is now. wd.mu held. */
static void apply_locked(rs_client_t *c, rs_lease_t *l, int res, uint64_t sent, uint64_t after)
{
    if (!l->registered || l->lost)
        return;
    if (res == 1 || (res == 2 && l->waiter)) {
        l->deadline_ns = sent + (uint64_t)l->lease_ms * RS_NS_PER_MS - rs__drift_ns(l->lease_ms);
        l->due_ns = sent + period_ns(l);
        if (res == 2)
            rs__notify_poke(c, l->waiter, RS_WAKE_RETRY);
    } else if (res == 0 || res == 2) {
        if (l->waiter) {
            rs__notify_poke(c, l->waiter, RS_WAKE_RETRY);
            l->due_ns = after + period_ns(l);
        } else {
            mark_lost_locked(c, l);
        }
    } else {
        /* no answer: try again soon, well before the local deadline */
        uint64_t retry = period_ns(l) / 4;
        if (retry > 200 * RS_NS_PER_MS)
            retry = 200 * RS_NS_PER_MS;
        l->due_ns = after + retry;
    }
}

static void deliver_reports(rs_client_t *c);

/* Called when a wait of a round (connect, read) reaches its cut or a slice of it: applies
 * the answers already read (a renewal confirmed in this round counts before its old
 * deadline passes), marks every lease past its local deadline lost and calls on_lost now,
 * not when the round ends. Returns the next cut, the nearest deadline of any live lease;
 * 0 to give up: the watchdog is stopping, or no lease of batch (sent at sent) still waits
 * for an answer while registered and not lost. */
static uint64_t round_checkpoint(rs_client_t *c, rs_lease_t **batch, int *res, int n,
                                 uint64_t sent)
{
    pthread_mutex_lock(&c->wd.mu);
    uint64_t now = rs__now_ns();
    for (int i = 0; i < n; i++)
        if (res[i] >= 0 && res[i] <= 2) {
            apply_locked(c, batch[i], res[i], sent, now);
            res[i] = RS_RES_APPLIED;
        }
    expire_locked(c, now);
    deliver_reports(c);
    int waiting = 0;
    for (int i = 0; i < n && !waiting; i++)
        waiting = res[i] < 0 && batch[i]->registered && !batch[i]->lost;
    uint64_t cut = waiting && !c->wd.stop ? nearest_deadline_locked(c) : 0;
    pthread_mutex_unlock(&c->wd.mu);
    return cut;
}

/* Opens the watchdog's connection to node (< 0: where topology.c says) into *ctxp: attempts
 * of at most timeout_ms each, retried until the cut (the nearest hold deadline), with a
 * round_checkpoint between them, so a lost SYN costs a retransmission, not the round, and
 * on_lost is still told at the deadline. With n == 0 (a dial ahead of the first renewal),
 * one attempt. 0, or an error (the next round or dial tries again). */
struct wd_between {
    rs_client_t *c;
    rs_lease_t **batch;
    int *res, n;
    uint64_t cut;
};

static uint64_t wd_between(void *arg)
{
    struct wd_between *w = arg;
    return w->cut = round_checkpoint(w->c, w->batch, w->res, w->n, 0);
}

static int wd_connect(rs_client_t *c, int node, redisContext **ctxp, rs_lease_t **batch,
                      int *res, int n, uint64_t *cut)
{
    unsigned gen = rs__topo_gen(c);
    struct wd_between w = {c, batch, res, n, *cut};
    int rc = rs__conn_connect_retry(c, node, *cut, 0, wd_between, &w, ctxp);
    *cut = w.cut;
    if (rc == 0 && node < 0)
        c->wd.ctx_gen = gen;
    return rc;
}

/* One reply of a round's pipeline on ctx (sent at sent). The wait is not bounded by a share
 * of the lease: it goes on while a lease of the round still waits for its answer, with a
 * round_checkpoint every 100 ms and at each cut (the nearest deadline of any live lease),
 * which tells on_lost of every lease that reached its deadline meanwhile. Under Sentinel it
 * stops when the master moved meanwhile (the renewal goes to the new one). 0, RS_ECONN
 * (broken), ETIMEDOUT (given up: the replies still due make ctx unusable). */
static int wd_read(rs_client_t *c, redisContext *ctx, rs_lease_t **batch, int *res, int n,
                   uint64_t sent, uint64_t *cut, redisReply **out)
{
    for (;;) {
        uint64_t slice = rs__now_ns() + 100 * RS_NS_PER_MS;
        int rc = rs__ctx_read_until(ctx, slice < *cut ? slice : *cut, out);
        if (rc != ETIMEDOUT)
            return rc;
        *cut = round_checkpoint(c, batch, res, n, sent);
        if (!*cut || (ctx == c->wd.ctx && c->wd.ctx_gen != rs__topo_gen(c)))
            return ETIMEDOUT;
    }
}

/* min_replicas > 0: a renewal counts only once WAIT (behind a write of ours, rs__sync_cmd,
 * in the slot of key, a renewed lease's) says enough replicas have it, so that the local
 * deadline never runs past what a promoted replica would enforce. WAIT's timeout is kept
 * under the round's socket timeout. */
static int append_wait(rs_client_t *c, redisContext *ctx, uint64_t cut, const rs_lease_t *l)
{
    uint64_t now = rs__now_ns();
    long io_ms = cut > now ? (long)((cut - now) / RS_NS_PER_MS) : 0;
    if (cut == RS_NO_DEADLINE)
        io_ms = 2 * c->replica_timeout_ms;
    char n[16], t[24];
    long wt = c->replica_timeout_ms < io_ms / 2 ? c->replica_timeout_ms : io_ms / 2;
    rs_sync_cmd_t sc;
    rs_lease_scratch_t ls;
    size_t klen;
    const char *key = rs__lease_key(l, &ls, &klen); /* in l's block */
    rs__sync_cmd(c, key, klen, &sc);
    snprintf(n, sizeof n, "%d", c->min_replicas);
    snprintf(t, sizeof t, "%ld", wt > 0 ? wt : 1);
    const char *wv[3] = {"WAIT", n, t};
    size_t wl[3] = {4, strlen(n), strlen(t)};
    if (rs__ctx_append(ctx, sc.n, sc.v, sc.len) != 0 || rs__ctx_append(ctx, 3, wv, wl) != 0)
        return -1;
    return 0;
}

/* WAIT's count after append_wait's two replies (wd_read's arguments); -1 if it failed, -2
 * if the link broke or the round gave up. */
static long long read_wait(rs_client_t *c, redisContext *ctx, rs_lease_t **batch, int *res,
                           int n, uint64_t sent, uint64_t *cut)
{
    redisReply *r;
    if (wd_read(c, ctx, batch, res, n, sent, cut, &r) != 0)
        return -2;
    freeReplyObject(r);
    if (wd_read(c, ctx, batch, res, n, sent, cut, &r) != 0)
        return -2;
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

/* Results of one round, per lease: 1 renewed, 0 gone, 2 granted, -1 no answer (or
 * RS_RES_APPLIED: round_checkpoint applied it already). Every wait is cut at cut, the
 * nearest deadline of any live lease (round_checkpoint then moves it on). */
static void run_round(rs_client_t *c, redisContext **ctxp, int node, rs_lease_t **batch,
                      int *res, int n, uint64_t *sent, uint64_t cut)
{
    int confirm = c->min_replicas > 0;
    rs_lease_scratch_t ls; /* a built lease's call, appended before the next is built */
    int rec = 0; /* the holder record's PEXPIRE rides in the first pass (record.c) */
    rs__round_begin(res, n, cut);
    if (*ctxp && node < 0 && c->wd.ctx_gen != rs__topo_gen(c)) {
        rs__ctx_free(*ctxp); /* the master moved since it was opened */
        *ctxp = NULL;
    }
    if (!*ctxp && wd_connect(c, node, ctxp, batch, res, n, &cut) != 0) {
        if (c->ep.mode == RS_MODE_CLUSTER)
            rs__cluster_stale(c);
        goto done;
    }
    for (int pass = 0; pass < 2; pass++) {
        int pending = 0;
        *sent = rs__now_ns();
        for (int i = 0; i < n; i++) {
            if (res[i] != -1)
                continue;
            rs_argv_t a, av;
            rs__lease_argv(batch[i], batch[i]->renew_op, &ls, &a);
            rs__evalsha_argv(batch[i]->script, batch[i]->nkeys, &a, &av);
            if (rs__ctx_append(*ctxp, av.n, av.v, av.len) != 0)
                goto broken;
            pending++;
        }
        if (!pending)
            goto done;
        if (pass == 0 && node < 0 && rs__rec_enabled(c)) {
            /* alive: its PEXPIRE; else, with a hold in the round, written whole */
            uint64_t until = atomic_load(&c->wd.rec_until_ns);
            int hold = 0;
            for (int i = 0; i < n && !hold; i++)
                hold = batch[i]->waiter == NULL;
            int full = hold && until <= *sent;
            if ((full || until > *sent) && (rec = rs__rec_append(c, *ctxp, full)) < 0)
                goto broken;
        }
        if (confirm && append_wait(c, *ctxp, cut, batch[0]) != 0)
            goto broken;
        /* sent whole before the first read, within the cut */
        if (rs__ctx_timeout_until(*ctxp, cut) || rs__ctx_flush(*ctxp))
            goto broken;
        atomic_fetch_add(&c->wd.st.batches, 1);
        atomic_fetch_add(&c->wd.st.renewals, (unsigned long)pending);
        int noscript = 0, moved = 0, ask = 0;
        for (int i = 0; i < n; i++) {
            if (res[i] != -1)
                continue;
            redisReply *r;
            if (wd_read(c, *ctxp, batch, res, n, *sent, &cut, &r) != 0)
                goto broken;
            if (r->type == REDIS_REPLY_INTEGER)
                res[i] = (int)r->integer == 1 && confirm ? -3 : (int)r->integer;
            else if (rs__is_topology_error(c, r))
                moved = 1; /* no answer: renewed on the new master next round */
            else if (r->type == REDIS_REPLY_ERROR && c->ep.mode == RS_MODE_CLUSTER &&
                     rs__cluster_redirect(c, r->str, &ask) >= 0)
                ; /* MOVED/ASK: no answer; the next round (soon) goes to the right node */
            else if (rs__is_noscript(r))
                noscript = 1, res[i] = -2;
            else if (r->type == REDIS_REPLY_ERROR)
                rs__log(c, RS_LOG_WARN, "renewing %s \"%s\": %s", batch[i]->kind, batch[i]->name,
                        r->str);
            freeReplyObject(r);
        }
        for (; rec > 0; rec--) { /* the record's HSET and PEXPIRE, after the renewals */
            redisReply *r;
            if (wd_read(c, *ctxp, batch, res, n, *sent, &cut, &r) != 0)
                goto broken;
            if (r->type == REDIS_REPLY_ERROR)
                rs__log(c, RS_LOG_WARN, "the holder record: %s", r->str);
            if (rec == 1)
                rs__rec_answered(c, r, *sent);
            freeReplyObject(r);
        }
        if (confirm) {
            long long acked = read_wait(c, *ctxp, batch, res, n, *sent, &cut);
            if (acked == -2)
                goto broken;
            for (int i = 0; i < n; i++)
                if (res[i] == -3)
                    res[i] = acked >= c->min_replicas ? 1 : -4;
            if (acked < c->min_replicas && c->ep.mode == RS_MODE_SENTINEL)
                moved = 1; /* perhaps a master failed over but not demoted yet: ask again */
        }
        if (moved) {
            rs__topo_changed(c);
            goto broken;
        }
        if (!noscript)
            goto done;
        for (int i = 0; i < n; i++)
            if (res[i] == -2) {
                res[i] = -1;
                if (rs__ctx_timeout_until(*ctxp, cut) ||
                    rs__script_load(c, *ctxp, batch[i]->script) == RS_ECONN)
                    goto broken;
            }
    }
    goto done;
broken:
    if (*ctxp)
        rs__ctx_free(*ctxp);
    *ctxp = NULL;
    rs__topo_changed(c); /* under Sentinel: perhaps a failover; the pool reconnects too */
    if (c->ep.mode == RS_MODE_CLUSTER)
        rs__cluster_stale(c);
done:
    for (int i = 0; i < n; i++)
        if (res[i] < -1)
            res[i] = -1; /* renewed but not confirmed by enough replicas: no answer */
}

/* One round for every lease of batch: on one connection, or under Cluster one pipelined
 * round per node, each lease going to the master of its keys' slot. *sent is the send time
 * of the first group (the earliest, so local deadlines stay on the safe side). */
static void run_rounds(rs_client_t *c, rs_lease_t **batch, int *res, int n, uint64_t *sent,
                       uint64_t cut)
{
    if (c->ep.mode == RS_MODE_REDLOCK) {
        rs__rl_renew_round(c, batch, res, n, sent, cut); /* every master at once, by quorum */
        return;
    }
    if (c->ep.mode != RS_MODE_CLUSTER) {
        run_round(c, &c->wd.ctx, -1, batch, res, n, sent, cut);
        return;
    }
    for (int i = 0; i < n; i++)
        res[i] = -1;
    uint64_t now = rs__now_ns();
    long left = cut > now ? (long)((cut - now) / RS_NS_PER_MS) : 1;
    /* only if a MOVED made it stale; within the cut */
    rs__cluster_refresh(c, 0, left < c->timeout_ms ? (left > 0 ? left : 1) : c->timeout_ms);
    int *node = malloc((size_t)n * 3 * sizeof *node + 1);
    rs_lease_t **sub = malloc((size_t)n * sizeof *sub + 1);
    if (!node || !sub) {
        free(node);
        free(sub);
        return;
    }
    int *subres = node + n, *where = node + 2 * n;
    rs_lease_scratch_t ls;
    for (int i = 0; i < n; i++) {
        size_t klen;
        const char *key = rs__lease_key(batch[i], &ls, &klen);
        node[i] = rs__cluster_node_of(c, key, klen);
        if (node[i] < 0)
            node[i] = 0; /* unknown slot: any node, whose MOVED fixes the map */
    }
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (node[i] < 0)
            continue;
        int nd = node[i], m = 0;
        for (int j = i; j < n; j++)
            if (node[j] == nd) {
                where[m] = j;
                sub[m++] = batch[j];
                node[j] = -1; /* grouped */
            }
        uint64_t s = rs__now_ns();
        run_round(c, &c->wd.cctx[nd], nd, sub, subres, m, &s, cut);
        if (first || s < *sent)
            *sent = s;
        first = 0;
        for (int k = 0; k < m; k++)
            res[where[k]] = subres[k];
    }
    free(node);
    free(sub);
}

/* The holder record (record.c) is to be written now: a hold is registered, no record is
 * known alive, no failed write is recent. Then every lease is renewed at once, in the round
 * that writes it (an early renewal only extends a lease). wd.mu held. */
static int rec_wanted_locked(rs_client_t *c, uint64_t now)
{
    if (!rs__rec_enabled(c) || atomic_load(&c->wd.rec_until_ns) > now ||
        now < c->wd.rec_retry_ns)
        return 0;
    for (rs_lease_t *l = c->wd.head; l; l = l->next)
        if (!l->waiter && !l->lost)
            return 1;
    return 0;
}

static void deliver_reports(rs_client_t *c)
{
    /* wd.mu held on entry and exit; released around the callbacks */
    while (c->wd.reports) {
        struct rs_report *r = c->wd.reports;
        c->wd.reports = NULL;
        pthread_mutex_unlock(&c->wd.mu);
        while (r) {
            struct rs_report *next = r->next;
            if (c->on_lost)
                c->on_lost(r->kind, r->name, c->on_lost_arg);
            free(r->name);
            free(r);
            r = next;
        }
        pthread_mutex_lock(&c->wd.mu);
    }
}

/* The connection a live lease will be renewed on, when it is not open yet (node: where it
 * goes, < 0 for where topology.c says); NULL when every one is open. Under Redlock the
 * round dials the masters itself. wd.mu held. */
static redisContext **dial_needed_locked(rs_client_t *c, int *node)
{
    *node = -1;
    if (c->ep.mode == RS_MODE_REDLOCK)
        return NULL;
    if (c->ep.mode != RS_MODE_CLUSTER)
        return c->wd.ctx ? NULL : &c->wd.ctx;
    rs_lease_scratch_t ls;
    for (rs_lease_t *l = c->wd.head; l; l = l->next) {
        if (l->lost)
            continue;
        size_t klen;
        const char *key = rs__lease_key(l, &ls, &klen);
        int nd = rs__cluster_node_of(c, key, klen);
        if (nd >= 0 && nd < RS_NODES_MAX && !c->wd.cctx[nd]) {
            *node = nd;
            return &c->wd.cctx[nd];
        }
    }
    return NULL;
}

static void *watchdog_main(void *arg)
{
    rs_client_t *c = arg;
    pthread_mutex_lock(&c->wd.mu);
    while (!c->wd.stop) {
        deliver_reports(c);
        /* the callbacks ran with wd.mu released: a stop asked meanwhile signalled nobody,
         * and the wait below may have no deadline */
        if (c->wd.stop)
            break;
        uint64_t now = rs__now_ns(), wake = RS_NO_DEADLINE;
        int n = 0, ndue = 0;
        /* the holder record to write: a round now, every lease renewed early in it; at
         * most once a lease (the rounds after it write the record until it is alive) */
        int rec_now = rec_wanted_locked(c, now);
        if (rec_now)
            c->wd.rec_retry_ns = now + (uint64_t)c->lease_ms * RS_NS_PER_MS;
        /* one walk: expire what is past its deadline, then the nearest deadline of the
         * rest (the round's cut, as nearest_deadline_locked) and the next wake-up */
        uint64_t cut = RS_NO_DEADLINE;
        for (rs_lease_t *l = c->wd.head; l; l = l->next) {
            expire_one_locked(c, l, now);
            if (l->lost)
                continue;
            if (l->deadline_ns < cut)
                cut = l->deadline_ns;
            if (l->deadline_ns < wake)
                wake = l->deadline_ns;
            /* renew once a third of the period has gone, so leases fall into one round */
            if (l->due_ns <= now || rec_now)
                ndue++;
            else if (l->due_ns < wake)
                wake = l->due_ns;
            if (l->due_ns <= now + period_ns(l) * 2 / 3 || rec_now)
                n++;
        }
        if (c->wd.reports)
            continue;
        if (ndue > 0) {
            if (n > c->wd.cap) {
                int ncap = n * 2;
                rs_lease_t **nb = realloc(c->wd.batch, (size_t)ncap * sizeof *nb);
                int *nr = nb ? realloc(c->wd.res, (size_t)ncap * sizeof *nr) : NULL;
                if (nb)
                    c->wd.batch = nb;
                if (nr)
                    c->wd.res = nr, c->wd.cap = ncap;
                if (n > c->wd.cap)
                    n = c->wd.cap; /* out of memory: renew what fits this round */
            }
            rs_lease_t **batch = c->wd.batch;
            int *res = c->wd.res;
            int k = 0;
            for (rs_lease_t *l = c->wd.head; l && k < n; l = l->next)
                if (!l->lost && (l->due_ns <= now + period_ns(l) * 2 / 3 || rec_now)) {
                    atomic_fetch_add(&l->refs, 1);
                    batch[k++] = l;
                }
            n = k;
            pthread_mutex_unlock(&c->wd.mu);
            uint64_t sent = now, t0 = rs__now_ns();
            run_rounds(c, batch, res, n, &sent, cut);
            atomic_store(&c->wd.st.last_start_ns, t0);
            atomic_store(&c->wd.st.last_round_ns, rs__now_ns() - t0);
            atomic_fetch_add(&c->wd.st.rounds, 1);
            pthread_mutex_lock(&c->wd.mu);
            uint64_t after = rs__now_ns();
            for (int i = 0; i < n; i++)
                if (res[i] != RS_RES_APPLIED)
                    apply_locked(c, batch[i], res[i], sent, after);
            pthread_mutex_unlock(&c->wd.mu);
            for (int i = 0; i < n; i++)
                rs__lease_unref(batch[i]);
            pthread_mutex_lock(&c->wd.mu);
            continue;
        }
        int node;
        redisContext **ctxp = cut != RS_NO_DEADLINE && now >= c->wd.dial_after_ns
                                  ? dial_needed_locked(c, &node)
                                  : NULL;
        if (ctxp) {
            /* a hold (or queue entry) is registered and its renewals have no connection:
             * open it now, on this thread, not at the first renewal (a lost SYN then costs
             * a retransmission before anything is due, not a third of the lease) */
            pthread_mutex_unlock(&c->wd.mu);
            int rc = wd_connect(c, node, ctxp, NULL, NULL, 0, &cut);
            pthread_mutex_lock(&c->wd.mu);
            if (rc != 0)
                c->wd.dial_after_ns = rs__now_ns() + 200 * RS_NS_PER_MS;
            continue;
        }
        c->wd.wake_ns = wake;
        if (wake == RS_NO_DEADLINE) {
            pthread_cond_wait(&c->wd.cv, &c->wd.mu);
        } else {
            rs__cv_wait_until(&c->wd.cv, &c->wd.mu, wake);
        }
        c->wd.wake_ns = 0;
    }
    deliver_reports(c);
    free(c->wd.batch);
    free(c->wd.res);
    c->wd.batch = NULL, c->wd.res = NULL, c->wd.cap = 0;
    pthread_mutex_unlock(&c->wd.mu);
    return NULL;
}

/* The watchdog's connections: the single/Sentinel one and one per Cluster node or Redlock
 * master. */
static void free_conns(rs_client_t *c)
{
    if (c->wd.ctx) {
        rs__ctx_free(c->wd.ctx);
        c->wd.ctx = NULL;
    }
    for (int i = 0; i < RS_NODES_MAX; i++)
        if (c->wd.cctx[i]) {
            rs__ctx_free(c->wd.cctx[i]);
            c->wd.cctx[i] = NULL;
        }
    memset(c->wd.rl_owed, 0, sizeof c->wd.rl_owed);
}

void rs__watchdog_stats(rs_client_t *c, rs_wd_stats_t *out)
{
    /* rounds last: read after a round ends, the others are that round's */
    atomic_store(&out->rounds, atomic_load(&c->wd.st.rounds));
    atomic_store(&out->renewals, atomic_load(&c->wd.st.renewals));
    atomic_store(&out->batches, atomic_load(&c->wd.st.batches));
    atomic_store(&out->last_start_ns, atomic_load(&c->wd.st.last_start_ns));
    atomic_store(&out->last_round_ns, atomic_load(&c->wd.st.last_round_ns));
}

void rs__watchdog_stop(rs_client_t *c)
{
    pthread_mutex_lock(&c->wd.mu);
    int started = c->wd.started;
    c->wd.stop = 1;
    pthread_cond_signal(&c->wd.cv);
    pthread_mutex_unlock(&c->wd.mu);
    if (started)
        pthread_join(c->wd.thread, NULL);
    c->wd.started = 0;
    free_conns(c);
}

void rs__watchdog_forget(rs_client_t *c)
{
    /* in a child of fork(): the thread is gone; drop its references and reports */
    while (c->wd.head) {
        rs_lease_t *l = c->wd.head;
        c->wd.head = l->next;
        l->registered = 0;
        rs__lease_unref(l);
    }
    while (c->wd.reports) {
        struct rs_report *r = c->wd.reports;
        c->wd.reports = r->next;
        free(r->name);
        free(r);
    }
    free_conns(c); /* the child's copies of the descriptors; the parent's stay open */
    free(c->wd.batch);
    free(c->wd.res);
    c->wd.batch = NULL, c->wd.res = NULL, c->wd.cap = 0;
}
