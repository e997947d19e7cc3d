/*
 * handle.c - what every primitive handle has in common, and the calls they all make.
 *
 * A handle (rs_handle_t, embedded first in each primitive's struct) names one primitive of
 * one client: its keys, its script, its lease, and the local record of what each thread
 * holds through it. Every primitive script follows one argument convention:
 *
 *   KEYS   the primitive's keys (PREFIX:{NAME}:KIND and PREFIX:{NAME}:KIND:SUFFIX...)
 *   ARGV   1 op, 2 owner token, 3 acquisition id, 4 lease ms, 5 channel prefix,
 *          6 queue mode ("q" queue when busy, "t" try only), 7 max waiters,
 *          8 queue-entry lease ms, 9.. the primitive's own arguments
 *
 * and one reply convention for acquiring operations ("acq", "cancel"):
 *   {1, fence, ttl_ms} granted | {0, holder_ttl_ms, queued, fence_counter} busy | {-1} EDEADLK
 * with "renew"/"qrenew" replying 1 (renewed), 0 (gone), 2 (granted meanwhile), "rel"
 * replying 1 (released) or 0 (it had been lost), and wake-up messages "ACQID FENCE".
 * Given that, acquiring (queue, sleep, handoff, deadline, registration with the watchdog)
 * and releasing are the same code for every primitive: rs__acquire and rs__release.
 *
 * Memory: a handle keeps one string, its main key, with the name inside it; the other keys
 * are built on the caller's stack for each call (rs__call_init, into rs_call_t), and a hold's
 * lease copies the arguments it needs. A handle thus costs its struct and that string,
 * however many keys its kind has.
 *
 * With min_replicas > 0 every acquiring call is confirmed with WAIT on its own connection
 * (rs__eval_confirm); a grant that too few replicas acknowledged is released again and the
 * call fails with RS_EREPL. A grant announced by a wake-up message is not trusted then: the
 * waiter asks again ("acq" answers "already yours"), and that call is what WAIT confirms.
 *
 * Under Redlock (lib/redlock.c) the same calls go to every master at once: rs__acquire uses
 * redlock.c's operations instead of the generic ones, the mode argument carries an "r" (no
 * handoff on any master), and a hold's lease carries its token so that renewals and the
 * release raise every master's fencing counter to it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int rs__handle_init(rs_handle_t *h, rs_client_t *c, const char *kind, const rs_script_t *s,
                    const char *name, const char *const *suffixes, int nkeys)
{
    int rc = rs__enter(c);
    if (rc)
        return rc;
    size_t len;
    rc = rs__check_name(c, name, &len);
    if (rc) {
        rs__leave(c);
        return rc;
    }
    /* the kind's keys must fit rs_call_t's buffer (they always do: names, prefixes, kinds
     * and suffixes are bounded) */
    int fits = nkeys >= 1 && nkeys <= RS_KEYS_MAX && strlen(kind) <= RS_KIND_MAX &&
               c->prefix_len <= RS_PREFIX_MAX;
    for (int i = 1; fits && i < nkeys; i++)
        fits = suffixes[i] && strlen(suffixes[i]) <= RS_SUFFIX_MAX;
    if (!fits) {
        rs__leave(c);
        return rs__fail(c, EINVAL, "%s: keys do not fit (internal)", kind);
    }
    memset(h, 0, sizeof *h);
    h->c = c;
    h->kind = kind;
    h->script = s;
    h->suffixes = suffixes;
    h->nkeys = nkeys;
    h->key[0] = rs__key(c, name, len, kind, NULL, &h->klen[0]);
    if (!h->key[0]) {
        rs__leave(c);
        return rs__fail(c, ENOMEM, "out of memory");
    }
    /* the name is stored once, inside the main key: PREFIX:{[\]NAME}:KIND */
    size_t esc = name[0] == '}' || name[0] == '\\';
    h->name = h->key[0] + c->prefix_len + 2 + esc;
    h->namelen = len;
    pthread_mutex_init(&h->mu, NULL);
    rs__client_ref(c);
    rs__leave(c);
    return 0;
}

int rs__handle_destroy(rs_handle_t *h)
{
    rs_client_t *c = h->c;
    int child = rs__forked(c);
    pthread_mutex_lock(&h->mu);
    if (h->holds && !c->closed && !child) {
        pthread_mutex_unlock(&h->mu);
        return rs__fail(c, EBUSY, "a thread still holds %s \"%.*s\" through this handle",
                        h->kind, RS_HNAME(h));
    }
    if (atomic_load(&h->inside) > 0 && !child) {
        pthread_mutex_unlock(&h->mu);
        return rs__fail(c, EBUSY, "a thread is still inside a call on %s \"%.*s\" through "
                        "this handle", h->kind, RS_HNAME(h));
    }
    if (atomic_load(&h->nobj) > 0 && !child) {
        /* they point at the handle: release them first (after close that only frees them) */
        pthread_mutex_unlock(&h->mu);
        return rs__fail(c, EBUSY, "%d hold object(s) or pending request(s) of %s \"%.*s\" "
                        "are not released or completed",
                        atomic_load(&h->nobj), h->kind, RS_HNAME(h));
    }
    rs_hold_t *hd = h->holds;
    h->holds = NULL;
    pthread_mutex_unlock(&h->mu);
    while (hd) {
        rs_hold_t *next = hd->next;
        if (!child) /* in a child the watchdog's lock may be held by a thread that is gone */
            rs__watch_del(c, hd->lease);
        rs__lease_unref(hd->lease);
        free(hd);
        hd = next;
    }
    pthread_mutex_destroy(&h->mu);
    free(h->key[0]);
    h->key[0] = NULL;
    h->name = NULL;
    rs__client_unref(c);
    return 0;
}

int rs__handle_new(void *out, size_t size, rs_client_t *c, const char *kind,
                   const rs_script_t *s, const char *name, const char *const *suffixes, int nkeys)
{
    void **o = out;
    if (!o)
        return rs__fail(c, EINVAL, "%s handle pointer is NULL", kind);
    *o = NULL;
    rs_handle_t *h = calloc(1, size);
    if (!h)
        return rs__fail(c, ENOMEM, "out of memory");
    int rc = rs__handle_init(h, c, kind, s, name, suffixes, nkeys);
    if (rc) {
        free(h);
        return rc;
    }
    *o = h;
    return 0;
}

int rs__handle_free(rs_handle_t *h)
{
    if (!h)
        return 0;
    int rc = rs__handle_destroy(h);
    if (rc == 0)
        free(h);
    return rc;
}

int rs__handle_begin(rs_handle_t *h, const char *kind, const struct timespec *abstime,
                     uint64_t *deadline)
{
    if (!h)
        return rs__fail(NULL, EINVAL, "%s is NULL", kind);
    if (abstime) {
        int rc = rs__deadline_from(h->c, abstime, deadline);
        if (rc)
            return rc;
    }
    return rs__enter(h->c);
}

uint64_t rs__handle_fence(const rs_handle_t *h)
{
    rs_hold_t *hold = h ? rs__handle_find(h, rs__thread_no()) : NULL;
    return hold ? hold->fence : 0;
}

long rs__handle_remaining(const rs_handle_t *h)
{
    rs_hold_t *hold = h ? rs__handle_find(h, rs__thread_no()) : NULL;
    return hold ? rs__lease_remaining_ms(h->c, hold->lease) : 0;
}

int rs__handle_setlease(rs_handle_t *h, long lease_ms)
{
    if (!h)
        return rs__fail(NULL, EINVAL, "handle is NULL");
    if (lease_ms < 0 || (lease_ms > 0 && lease_ms < 30) || lease_ms > 86400000L)
        return rs__fail(h->c, EINVAL, "lease_ms must be 0 (the client's) or 30 ms to one day, got %ld",
                        lease_ms);
    atomic_store(&h->lease_ms, lease_ms);
    return 0;
}

rs_hold_t *rs__handle_find(const rs_handle_t *h, uint64_t thread_no)
{
    rs_handle_t *hh = (rs_handle_t *)h; /* the lock changes, not the handle */
    pthread_mutex_lock(&hh->mu);
    rs_hold_t *r = rs__hold_find(hh->holds, thread_no);
    pthread_mutex_unlock(&hh->mu);
    return r; /* only the owning thread removes its holds, so r stays valid for it */
}

void rs__handle_add(rs_handle_t *h, rs_hold_t *hold)
{
    pthread_mutex_lock(&h->mu);
    hold->next = h->holds;
    h->holds = hold;
    pthread_mutex_unlock(&h->mu);
}

void rs__handle_remove(rs_handle_t *h, rs_hold_t *hold)
{
    pthread_mutex_lock(&h->mu);
    rs__hold_unlink(&h->holds, hold);
    pthread_mutex_unlock(&h->mu);
}

/* ----- the generic acquisition: rs__wait_acquire's operations ------------------------ */

/* An acquiring op ("acq", "cancel"), confirmed with WAIT when min_replicas > 0: a grant that
 * fewer replicas acknowledged is undone with "rel" and reported as RS_EREPL. */
static int run_acquiring(rs_call_t *k, const char *op, const char *mode, rs_attempt_t *out)
{
    rs_client_t *c = k->h->c;
    rs_argv_t v;
    rs__call_argv(k, op, mode, &v);
    redisReply *r;
    long long acked = -1;
    out->sent_ns = rs__now_ns();
    /* the lease counts from the send of the call Redis answered, not from the first try: a
     * call that waited out TRYAGAIN (a slot half-way through a migration) for longer than
     * the lease was taken for a hold lost at its grant */
    rs_conn_t *pre = k->pre; /* this attempt's call was sent already (cond.c) */
    k->pre = NULL;
    int rc = rs__eval_pre(c, k->h->script, k->h->nkeys, &v, &r, &acked, &out->sent_ns, pre,
                          k->pre_sent);
    if (rc)
        return rc;
    rc = rs__decode_grant(k, r, out);
    freeReplyObject(r);
    if (rc == EDEADLK && !rs__watch_holds(c, k->h->key[0], k->h->klen[0], k->token, k->toklen)) {
        /* Redis has a hold of this thread that the thread does not know of: a lock or unlock
         * that failed (RS_ECONN) after its script ran, or a release lost in a failover. */
        rs__clear_error();
        if (strcmp(op, "acq") == 0 && (mode[0] == 'q' || mode[0] == 't'))
            /* ask again in mode Q/T: a script that can adopts the orphan for this acquisition
             * (mutex.lua: fresh token and lease); the others refuse again */
            return run_acquiring(k, op, mode[0] == 'q' ? "Q" : "T", out);
        /* still refused: busy until that lease runs out, not a deadlock */
        memset(out, 0, sizeof *out);
        out->sent_ns = rs__now_ns();
        out->retry_ms = 50;
        return 0;
    }
    if (rc || !out->granted || c->min_replicas <= 0 || acked >= c->min_replicas)
        return rc;
    /* not safe against a failover: give it back before anyone relies on it */
    out->granted = 0;
    out->queued = 0;
    if (rs__call_run(k, "rel", "t", &r) == 0)
        freeReplyObject(r);
    /* under Sentinel a shortfall is how a master that was failed over but not yet demoted
     * shows itself (its replica left it): the next connections ask the sentinels again */
    rs__topo_changed(c);
    return rs__fail(c, RS_EREPL, "WAIT: %lld of %d replica(s) confirmed the acquisition of %s "
                    "\"%.*s\" within %ld ms; it was undone", acked < 0 ? 0 : acked,
                    c->min_replicas, k->h->kind, RS_HNAME(k->h), c->replica_timeout_ms);
}

static int op_attempt(void *ctx, int queue, rs_attempt_t *out)
{
    return run_acquiring(ctx, "acq", queue ? "q" : "t", out);
}

static int op_cancel(void *ctx, rs_attempt_t *out)
{
    return run_acquiring(ctx, "cancel", "t", out);
}

static int op_message(void *ctx, const char *msg, rs_attempt_t *out)
{
    rs_call_t *k = ctx;
    char *end;
    unsigned long long f = strtoull(msg, &end, 10);
    if (end == msg || f == 0)
        return 0; /* not a grant we understand: retry instead */
    out->granted = 1;
    out->fence = f;
    out->ttl_ms = atol(k->lease);
    return 1;
}

static rs_lease_t *op_queue_lease(void *ctx)
{
    return rs__call_lease(ctx, "qrenew", NULL);
}

static const rs_acquire_ops_t generic_ops = {op_attempt, op_cancel, op_message, op_queue_lease};

int rs__hold_new(const rs_call_t *k, rs_hold_t **out)
{
    rs_hold_t *hold = calloc(1, sizeof *hold);
    rs_lease_t *l = hold ? rs__call_lease(k, "renew", "rel") : NULL;
    if (!l) {
        free(hold);
        *out = NULL;
        return rs__fail(k->h->c, ENOMEM, "out of memory");
    }
    hold->lease = l;
    *out = hold;
    return 0;
}

void rs__hold_granted(const rs_call_t *k, rs_hold_t *hold, uint64_t fence, long ttl_ms,
                      uint64_t sent_ns)
{
    hold->thread_no = k->owner_no;
    memcpy(hold->acqid, k->acqid, k->acqlen + 1);
    hold->fence = fence;
    hold->count = 1;
    if (k->h->c->ep.mode == RS_MODE_REDLOCK) /* renewals and the release raise the counters */
        hold->lease->fence = fence;
    rs__watch_add(k->h->c, hold->lease, sent_ns, ttl_ms);
}

void rs__hold_discard(rs_hold_t *hold)
{
    if (!hold)
        return;
    rs__lease_unref(hold->lease);
    free(hold);
}

int rs__acquire(rs_call_t *k, int try_only, uint64_t deadline, rs_hold_t **out)
{
    /* allocate before asking Redis, so that a grant never meets ENOMEM */
    rs_hold_t *hold;
    *out = NULL;
    if (rs__hold_new(k, &hold) != 0)
        return ENOMEM;
    return rs__acquire_with(k, try_only, deadline, NULL, hold, out);
}

int rs__acquire_with(rs_call_t *k, int try_only, uint64_t deadline, rs_waiter_t *w,
                     rs_hold_t *hold, rs_hold_t **out)
{
    rs_client_t *c = k->h->c;
    *out = NULL;
    rs_attempt_t at;
    const rs_acquire_ops_t *ops = c->ep.mode == RS_MODE_REDLOCK ? &rs__rl_ops : &generic_ops;
    int rc = rs__wait_acquire_with(c, ops, k, k->acqid,
                                   c->ep.mode == RS_MODE_CLUSTER ? k->h->key[0] : NULL,
                                   try_only, deadline, w, &at);
    if (rc == 0 && at.done) {
        rs__hold_discard(hold); /* *out stays NULL: done, nothing held */
        return 0;
    }
    if (rc == 0 && at.granted) {
        atomic_store(&hold->lease->rl_held, at.rl_granted);
        rs__hold_granted(k, hold, at.fence, at.ttl_ms, at.sent_ns);
        *out = hold;
        return 0;
    }
    rs__hold_discard(hold);
    if (rc == EBUSY || (try_only && rc == EDEADLK)) /* try never says EDEADLK */
        return rs__fail(c, EBUSY, "%s \"%.*s\" is busy", k->h->kind, RS_HNAME(k->h));
    return rc ? rc : rs__fail(c, RS_ESERVER, "unexpected reply from the %s script", k->h->kind);
}

int rs__acquire_object(rs_call_t *k, const struct timespec *abstime, rs_hold_t **out)
{
    rs_client_t *c = k->h->c;
    uint64_t deadline = RS_NO_DEADLINE;
    *out = NULL;
    if (abstime) {
        int rc = rs__deadline_from(c, abstime, &deadline);
        if (rc)
            return rc;
    }
    int rc = rs__acquire(k, deadline <= rs__now_ns(), deadline, out);
    if (rc == 0) {
        (*out)->obj = k->h;
        atomic_fetch_add(&k->h->nobj, 1);
    }
    return rc;
}

int rs__handle_take(rs_handle_t *h, int try_only, uint64_t deadline)
{
    rs_call_t k;
    rs__call_init(&k, h, NULL);
    rs_hold_t *hold;
    int rc = rs__acquire(&k, try_only, deadline, &hold);
    if (rc == 0)
        rs__handle_add(h, hold);
    return rc;
}

int rs__release(rs_handle_t *h, rs_hold_t *hold, const char *op)
{
    rs_client_t *c = h->c;
    rs__watch_del(c, hold->lease);
    int lost = rs__lease_is_lost(c, hold->lease);
    /* sent even when lost locally: if Redis still has it under our id, it is freed */
    redisReply *r = NULL;
    int rc;
    if (c->ep.mode == RS_MODE_REDLOCK) {
        /* lost when more masters deny it than a quorum could spare, or when the grantors
         * that do not deny it now are fewer than a quorum (rs__rl_denied): without the
         * second rule, one grantor of two confirming, the other denying and the third,
         * which never granted it, silent, made unlock return 0 for a hold that a second
         * client had since won. */
        rs_rl_tally_t t;
        rc = rs__rl_lease_int(c, hold->lease, op, &t);
        if (rc == 0 && !lost && rs__rl_denied(c, hold->lease, &t)) {
            rs__lease_set_lost(c, hold->lease);
            lost = 1;
        }
    } else {
        rc = rs__lease_call(c, hold->lease, op, &r);
    }
    if (rc == 0 && r) {
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 0 && !lost) {
            rs__lease_set_lost(c, hold->lease);
            lost = 1;
        }
        freeReplyObject(r);
    }
    rs__lease_unref(hold->lease);
    free(hold);
    if (lost)
        return rs__fail(c, RS_ELOST, "the hold on %s \"%.*s\" had been lost", h->kind,
                        RS_HNAME(h));
    return rc;
}
