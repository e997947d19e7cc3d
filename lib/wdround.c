/*
 * wdround.c - one renewal round of the watchdog: every due lease's renewal pipelined on the
 * watchdog's own connection (under Cluster one pipeline per node, each lease renewed on the
 * master of its keys' slot; under Redlock every master at once, redlock.c), its replies
 * turned into results (1 renewed, 0 gone, 2 granted, -1 no answer).
 *
 * MOVED/ASK count as no answer and the next round, soon, goes to the right node. Under
 * Sentinel a READONLY/MASTERDOWN reply or a broken connection makes the next round reconnect
 * to the current master (topology.c). With min_replicas > 0 a renewal counts only once WAIT
 * confirms it.
 *
 * Slow and lossy links (docs/reliability.md, "Network faults"): a round's waits (connect,
 * send, read) are bounded by the nearest local deadline of any lease (the cut), not by a
 * share of the lease: a slow reply is waited for on the same connection while a deadline is
 * still ahead. Every 100 ms of such a wait, and at the cut, rs__wd_checkpoint (wdlist.c)
 * applies the answers read so far and calls on_lost for the leases past their deadline, so
 * a holder cut off from Redis hears of it at its local deadline.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Opens the watchdog's connection to node (< 0: where topology.c says) into *ctxp: attempts
 * of at most timeout_ms each, retried until the cut (the nearest hold deadline), with a
 * rs__wd_checkpoint between them, so a lost SYN costs a retransmission, not the round, and
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
    return w->cut = rs__wd_checkpoint(w->c, w->batch, w->res, w->n, 0);
}

int rs__wd_connect(rs_client_t *c, int node, redisContext **ctxp, rs_lease_t **batch,
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
 * rs__wd_checkpoint every 100 ms and at each cut (the nearest deadline of any live lease),
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
        *cut = rs__wd_checkpoint(c, batch, res, n, sent);
        if (!*cut || (ctx == c->wd.ctx && c->wd.ctx_gen != rs__topo_gen(c)))
            return ETIMEDOUT;
    }
}

/* min_replicas > 0: a renewal counts only once WAIT (behind a write of ours, rs__sync_append,
 * in the slot of key, a renewed lease's) says enough replicas have it, so that the local
 * deadline never runs past what a promoted replica would enforce. WAIT's timeout is kept
 * under the round's socket timeout. */
static int append_wait(rs_client_t *c, redisContext *ctx, uint64_t cut, const rs_lease_t *l)
{
    uint64_t now = rs__now_ns();
    long io_ms = cut > now ? (long)((cut - now) / RS_NS_PER_MS) : 0;
    if (cut == RS_NO_DEADLINE)
        io_ms = 2 * c->replica_timeout_ms;
    long wt = c->replica_timeout_ms < io_ms / 2 ? c->replica_timeout_ms : io_ms / 2;
    rs_lease_scratch_t ls;
    size_t klen;
    const char *key = rs__lease_key(l, &ls, &klen); /* in l's block */
    return rs__sync_append(c, ctx, key, klen, 0, wt);
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
 * RS_RES_APPLIED: rs__wd_checkpoint applied it already). Every wait is cut at cut, the
 * nearest deadline of any live lease (rs__wd_checkpoint then moves it on). */
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
    if (!*ctxp && rs__wd_connect(c, node, ctxp, batch, res, n, &cut) != 0) {
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
void rs__wd_run_rounds(rs_client_t *c, rs_lease_t **batch, int *res, int n, uint64_t *sent,
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
