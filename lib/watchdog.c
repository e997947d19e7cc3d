/*
 * watchdog.c - one thread per client that keeps every lease of the client alive.
 *
 * Holds and waiters' queue entries register an rs_lease_t (wdlist.c). The thread wakes at
 * the earliest renewal time or local deadline and renews, in ONE pipelined round trip on its
 * own connection (wdround.c), every live lease that is at least a third into its renewal
 * period (so leases of one client fall into step and 10,000 holds cost one round per
 * period, not 10,000). Loss is judged by local deadlines (wdlist.c), not by Redis
 * answering. Under Sentinel renewals are not confirmed with WAIT unless min_replicas > 0 (a
 * renewal lost in a failover costs at most the rest of the lease, which the new master
 * still counts down). Under Redlock the round goes to every master at once and counts by
 * quorum (redlock.c, rs__rl_renew_round).
 *
 * Slow and lossy links (docs/reliability.md, "Network faults"): the connection is dialled by
 * this thread as soon as a lease is registered, not at the first renewal, so that a lost
 * SYN costs a retransmission before anything is due; the round's waits are cut at the
 * nearest lease deadline (wdround.c).
 *
 * Layers: wdlist.c (the registry) < redlock.c's round < wdround.c (a round) < this file
 * (the thread, its connections' lifetime, stop and fork).
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void *watchdog_main(void *arg);

/* Starts the thread with every signal blocked: library threads must never take the host
 * program's signals (SIGPIPE least of all). Called with wd.mu held. */
int rs__watchdog_start(rs_client_t *c)
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
        rs__wd_deliver_reports(c);
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
            rs__wd_expire_one_locked(c, l, now);
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
            if (l->due_ns <= now + rs__lease_period_ns(l) * 2 / 3 || rec_now)
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
                if (!l->lost && (l->due_ns <= now + rs__lease_period_ns(l) * 2 / 3 || rec_now)) {
                    atomic_fetch_add(&l->refs, 1);
                    batch[k++] = l;
                }
            n = k;
            pthread_mutex_unlock(&c->wd.mu);
            uint64_t sent = now, t0 = rs__now_ns();
            rs__wd_run_rounds(c, batch, res, n, &sent, cut);
            atomic_store(&c->wd.st.last_start_ns, t0);
            atomic_store(&c->wd.st.last_round_ns, rs__now_ns() - t0);
            atomic_fetch_add(&c->wd.st.rounds, 1);
            pthread_mutex_lock(&c->wd.mu);
            uint64_t after = rs__now_ns();
            for (int i = 0; i < n; i++)
                if (res[i] != RS_RES_APPLIED)
                    rs__wd_apply_locked(c, batch[i], res[i], sent, after);
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
            int rc = rs__wd_connect(c, node, ctxp, NULL, NULL, 0, &cut);
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
    rs__wd_deliver_reports(c);
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
    rs__wd_drop_reports(c);
    free_conns(c); /* the child's copies of the descriptors; the parent's stay open */
    free(c->wd.batch);
    free(c->wd.res);
    c->wd.batch = NULL, c->wd.res = NULL, c->wd.cap = 0;
}
