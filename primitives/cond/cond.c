/*
 * cond.c - rs_cond_t, the condition variable across processes (the C side of cond.lua;
 * issue 14).
 *
 * wait, in this order, so that no wake-up is lost:
 *   1. the waiter registers with the notifier under a fresh acquisition id of the
 *      condition's client (a message for it is matched from then on; in a Cluster with
 *      sharded wake-ups it also listens on the name's sharded channel);
 *   2. "wait" puts that id at the tail of the condition's queue, a leased entry that the
 *      watchdog renews ("qrenew") while the waiter sleeps;
 *   3. the mutex is released (its normal owner-checked release, which hands it to its next
 *      waiter): a signal sent from here on finds the entry;
 *   4. the waiter sleeps on the notifier without polling until a message names it (signal:
 *      "ACQID s", broadcast: "* ID1 ID2 ...", both carrying the whole id with its secret, so
 *      nobody who cannot read the keys can forge them), the deadline, or a poke from the
 *      watchdog (its renewal found the entry gone: the message was lost) or the subscriber
 *      (it reconnected) after which one "qrenew" tells whether the entry is still queued;
 *   5. a wait that ends unwoken (deadline, close, an error) leaves the queue ("leave"),
 *      which may reveal that a signal took it meanwhile: then it counts as woken (0);
 *   6. the mutex is re-acquired through its own queue (no jumping ahead of the mutex's
 *      waiters), a new hold with a new fencing token. When the mutex is on the condition's
 *      client, this call is prepared before the waiter sleeps and the subscriber thread sends
 *      it as soon as the waking message arrives (relock_t below), so that its round trip
 *      overlaps the waiter thread's wake-up.
 * No script touches both the condition's keys and the mutex's: the two may live on
 * different Cluster slots, servers, or clients.
 *
 * A retried "wait" (its first reply lost) may have run twice around a signal that took the
 * entry in between, putting it back after the waiter was already woken; a woken waiter whose
 * "wait" was re-sent therefore sends "leave" too, or the stale entry would absorb a later
 * signal for the rest of its lease.
 *
 * Not offered under redlock:// (independent masters would each wake a different waiter).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "scripts.h"

struct rs_cond {
    rs_handle_t h;
};

static const char *const cond_keys[] = {NULL, "qi"};
const rs_kind_t rs_kind_cond = {"cond", &rs_script_cond, cond_keys, 2};

RS_API int rs_cond_init(rs_cond_t **out, rs_client_t *c, const char *name)
{
    if (!out)
        return rs__fail(c, EINVAL, "cond handle pointer is NULL");
    *out = NULL;
    int rc = rs__rl_refuse(c, "cond", "independent masters would each wake a different waiter");
    if (rc)
        return rc;
    return rs__handle_new(out, sizeof **out, c, rs_kind_cond.name, rs_kind_cond.script, name,
                          rs_kind_cond.suffixes, rs_kind_cond.nkeys);
}

/* One op of the wait k (or a fresh call) with an integer reply in *v. */
static int int_call(rs_call_t *k, const char *op, long long *v, uint64_t *sent_ns)
{
    rs_argv_t a;
    rs__call_argv(k, op, "q", &a);
    redisReply *r;
    int rc = rs__eval_confirm(k->h->c, k->h->script, k->h->nkeys, &a, &r, NULL, sent_ns);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_INTEGER)
        *v = r->integer;
    else
        rc = rs__fail(k->h->c, RS_ESERVER, "unexpected reply from the cond script (%s)", op);
    freeReplyObject(r);
    return rc;
}

/* "leave", keeping the wait's own error text: 1 still queued (now removed), 0 a signal took
 * the entry, -1 the call failed (the entry then expires with its lease). */
static int leave(rs_call_t *k)
{
    char why[512];
    snprintf(why, sizeof why, "%s", rs_client_lasterror(k->h->c));
    long long v = -1;
    if (int_call(k, "leave", &v, NULL) != 0)
        v = -1;
    rs__fail(k->h->c, 0, "%s", why);
    return (int)v;
}

/* A fresh lease for the entry of wait k, registered with the watchdog (sent: when the call
 * that confirmed the entry was sent). NULL on ENOMEM (the entry then lives its lease). */
static rs_lease_t *entry_lease(rs_call_t *k, rs_waiter_t *w, uint64_t sent)
{
    rs_lease_t *l = rs__call_lease(k, "qrenew", NULL);
    if (l) {
        l->waiter = w;
        rs__watch_add(k->h->c, l, sent, l->lease_ms);
    }
    return l;
}

static void entry_drop(rs_client_t *c, rs_lease_t *l)
{
    if (l) {
        rs__watch_del(c, l);
        rs__lease_unref(l);
    }
}

/* Steps 4 and 5: sleeps until woken (0), the deadline (ETIMEDOUT), close (ECANCELED) or an
 * error; an unwoken end leaves the queue, and a signal found to have taken the entry makes
 * it 0 after all. start_ns: when the call began (ETIMEDOUT's message says how long ago). */
static int sleep_on(rs_call_t *k, rs_waiter_t *w, rs_lease_t **ql, uint64_t start_ns,
                    uint64_t deadline, int resent)
{
    rs_client_t *c = k->h->c;
    int rc = 0, woken = 0;
    while (!woken && rc == 0) {
        /* a sharded channel follows its slot: moved, a wake-up may have been lost */
        int wake = rs__notify_shard_check(c, w) == 1 ? RS_WAKE_RETRY
                                                     : rs__notify_sleep(c, w, deadline);
        if (wake == RS_WAKE_MSG && w->msg[0]) {
            woken = 1; /* the whole id: a signal or broadcast took the entry */
        } else if (wake == RS_WAKE_CANCEL) {
            rc = rs__fail(c, ECANCELED, "the client is closing");
        } else if (wake == RS_WAKE_TIMEOUT && rs__now_ns() >= deadline) {
            rc = rs__fail_timedout(c, start_ns);
        } else {
            /* a poke (the entry's renewal found it gone, the subscriber reconnected) or a
             * message without the secret: ask whether the entry still waits */
            long long v = 0;
            uint64_t sent = 0;
            rc = int_call(k, "qrenew", &v, &sent);
            if (rc == 0 && v == 0)
                woken = 1;
            else if (rc == 0 && (!*ql || rs__lease_is_lost(c, *ql))) {
                /* the watchdog gave the entry up (Redis was away for its lease): the
                 * renewal just made re-registers it */
                entry_drop(c, *ql);
                if (!(*ql = entry_lease(k, w, sent)))
                    rc = rs__fail(c, ENOMEM, "out of memory");
            }
        }
    }
    entry_drop(c, *ql);
    *ql = NULL;
    if (!woken) {
        if (leave(k) == 0 && (rc == ETIMEDOUT || rc == ECANCELED)) {
            rs__clear_error();
            rc = 0; /* a signal took it as the wait ended: it was woken, not timed out */
        }
    } else if (resent) {
        leave(k); /* a re-sent "wait" may have queued it again after the signal */
    }
    return rc;
}

/* Step 6 prepared while the waiter sleeps, when the mutex is on the condition's client
 * (outside Cluster, without min_replicas): its call (a fresh acquisition id, registered with
 * the notifier like any waiter's), its hold allocated, its EVALSHA built. The message that
 * wakes the waiter makes the subscriber thread send that call on an idle pooled connection
 * (presend, below) before it signals the waiter, so the round trip of the re-acquisition
 * runs while the waiter thread wakes up: signal -> holding costs about the mutex's handoff
 * plus one lock round trip minus the wake-up. Without an idle connection (or on a poke, a
 * timeout...) the waiter sends it itself, the same call. */
typedef struct {
    rs_client_t *c;
    rs_call_t k;      /* the re-acquisition */
    rs_waiter_t w;    /* registered under k.acqid */
    pthread_cond_t cv; /* w's */
    rs_hold_t *hold;  /* allocated for it */
    rs_argv_t v, av;  /* k's "acq" arguments and their EVALSHA */
    rs_conn_t *sent;  /* set by presend: the connection that owes the reply */
    uint64_t sent_ns;
} relock_t;

static int relock_prepare(relock_t *p, rs_client_t *c, rs_handle_t *mh)
{
    p->c = c;
    p->sent = NULL;
    rs__call_init(&p->k, mh, NULL);
    if (rs__hold_new(&p->k, &p->hold) != 0)
        return ENOMEM;
    if (rs__notify_begin(c, &p->w, &p->cv, p->k.acqid, NULL) != 0) {
        rs__hold_discard(p->hold);
        return RS_ECONN;
    }
    rs__call_argv(&p->k, "acq", "q", &p->v);
    rs__evalsha_argv(mh->script, mh->nkeys, &p->v, &p->av);
    return 0;
}

/* The notifier's hook (nt.mu held): never blocks, takes no new connection. */
static void presend(rs_waiter_t *w)
{
    relock_t *p = w->arg;
    if (p->sent || atomic_load(&p->c->closing))
        return;
    rs_conn_t *k = rs__conn_take_idle(p->c, -1);
    if (!k)
        return;
    p->sent_ns = rs__now_ns();
    if (k->gen != rs__topo_gen(p->c) ||
        rs__ctx_append(k->ctx, p->av.n, p->av.v, p->av.len) != 0 || rs__ctx_flush(k->ctx) != 0) {
        rs__conn_put(p->c, k, 1);
        return;
    }
    p->sent = k;
    atomic_fetch_add(&p->c->cond_presends, 1);
}

/* Re-acquires m (step 6) through its own queue; 0 or the error (m not held). p: prepared
 * (its waiter is ended here), or NULL. */
static int relock(rs_handle_t *mh, relock_t *p)
{
    /* a call sent already is seen through even by a closing client: the condition's call
     * (the same client) keeps it open meanwhile */
    int entered = !(p && p->sent);
    int rc = entered ? rs__enter(mh->c) : 0;
    if (rc) {
        entered = 0;
        if (p)
            rs__hold_discard(p->hold);
    } else if (p) {
        rs_hold_t *hold;
        p->k.pre = p->sent;
        p->k.pre_sent = p->sent_ns;
        rc = rs__acquire_with(&p->k, 0, RS_NO_DEADLINE, &p->w, p->hold, &hold);
        if (rc == 0)
            rs__handle_add(mh, hold);
    } else {
        rc = rs__handle_take(mh, 0, RS_NO_DEADLINE);
    }
    if (p)
        rs__notify_end(p->c, &p->w);
    if (entered)
        rs__leave(mh->c);
    return rc;
}

/* A prepared re-acquisition that is not made (never sent: its hook was not armed). */
static void relock_drop(relock_t *p)
{
    if (p) {
        rs__hold_discard(p->hold);
        rs__notify_end(p->c, &p->w);
    }
}

static int waited(rs_cond_t *cv, rs_mutex_t *m, const struct timespec *abstime)
{
    if (!cv)
        return rs__fail(NULL, EINVAL, "cond is NULL");
    if (!m)
        return rs__fail(cv->h.c, EINVAL, "mutex is NULL");
    rs_handle_t *mh = (rs_handle_t *)(void *)m; /* the first member of struct rs_mutex */
    if (!mh->kind || strcmp(mh->kind, "mutex") != 0)
        return rs__fail(cv->h.c, EINVAL, "the mutex given is a%s %s, not an rs_mutex_t "
                        "(recursive mutexes cannot be waited with)",
                        mh->kind && mh->kind[0] == 'r' && mh->kind[1] == 'm' ? "n" : "",
                        mh->kind ? mh->kind : "?");
    uint64_t deadline = RS_NO_DEADLINE, start_ns = rs__now_ns();
    int rc = rs__handle_begin(&cv->h, "cond", abstime, &deadline);
    if (rc)
        return rc;
    rs_client_t *c = cv->h.c;
    rs_hold_t *hold = rs__handle_find(mh, rs__thread_no());
    if (!hold) {
        rc = rs__fail(c, EPERM, "this thread does not hold mutex \"%.*s\"", RS_HNAME(mh));
        rs__leave(c);
        return rc;
    }
    if (rs__lease_is_lost(mh->c, hold->lease)) {
        rc = rs__fail(c, RS_ELOST, "the hold on mutex \"%.*s\" had been lost; nothing waited",
                      RS_HNAME(mh));
        rs__leave(c);
        return rc;
    }
    atomic_fetch_add(&cv->h.inside, 1);
    atomic_fetch_add(&mh->inside, 1); /* m's handle too: it is used again to re-acquire m */

    /* 1 and 2: registered, then queued (m still held: any failure leaves it so) */
    rs_call_t k;
    rs__call_init(&k, &cv->h, NULL);
    rs_waiter_t w;
    pthread_cond_t wcv;
    rs_lease_t *ql = NULL;
    int registered = 0, resent = 0;
    uint64_t sent = 0;
    /* in a Cluster with sharded wake-ups, also on the name's sharded channel */
    rc = rs__waiter_begin(c, &w, &wcv, k.acqid, cv->h.key[0], cv->h.klen[0]);
    registered = rc == 0;
    if (rc == 0) {
        long long v = 0;
        unsigned sends = rs__eval_sends();
        rc = int_call(&k, "wait", &v, &sent);
        resent = rs__eval_sends() - sends > 1;
        if (rc == 0 && v != 1)
            rc = rs__fail(c, RS_ESERVER, "unexpected reply from the cond script (wait)");
        if (rc == 0 && !(ql = entry_lease(&k, &w, sent))) {
            leave(&k);
            rc = rs__fail(c, ENOMEM, "out of memory");
        }
    }
    if (rc) {
        if (registered)
            rs__waiter_end(c, &w);
        atomic_fetch_sub(&mh->inside, 1);
        atomic_fetch_sub(&cv->h.inside, 1);
        rs__leave(c);
        return rc;
    }

    /* step 6 prepared, so that the wake-up can send it at once */
    relock_t rl, *pre = NULL;
    if (mh->c == c && c->ep.mode != RS_MODE_CLUSTER && c->min_replicas <= 0 &&
        relock_prepare(&rl, c, mh) == 0)
        pre = &rl;

    /* 3: m released; from here on m is re-acquired before returning, unless Redis is
     * unreachable or m's client closing */
    rs__handle_remove(mh, hold);
    int relrc = rs__enter(mh->c);
    if (relrc == 0) {
        relrc = rs__release(mh, hold, "rel");
        rs__leave(mh->c);
    } else {
        rs__handle_add(mh, hold); /* m's client is closing: its close releases the hold */
    }
    int wrc;
    if (relrc == 0) {
        if (pre)
            rs__notify_arm(c, &w, presend, pre);
        wrc = sleep_on(&k, &w, &ql, start_ns, deadline, resent);
    } else {
        /* lost (RS_ELOST: re-acquired below, like any outcome), or Redis away, or closing */
        char why[512];
        snprintf(why, sizeof why, "%s", rs_client_lasterror(c));
        entry_drop(c, ql);
        leave(&k);
        wrc = rs__fail(c, relrc, "%s", why);
    }
    rs__waiter_end(c, &w);

    if (relrc == 0 || relrc == RS_ELOST) {
        char why[512];
        snprintf(why, sizeof why, "%s", rs_client_lasterror(c));
        int lrc = relock(mh, pre);
        if (lrc)
            wrc = lrc;
        else if (wrc)
            rs__fail(c, wrc, "%s", why);
    } else {
        relock_drop(pre);
    }
    atomic_fetch_sub(&mh->inside, 1);
    atomic_fetch_sub(&cv->h.inside, 1);
    rs__leave(c);
    return wrc;
}

RS_API int rs_cond_wait(rs_cond_t *cv, rs_mutex_t *m)
{
    return waited(cv, m, NULL);
}

RS_API int rs_cond_timedwait(rs_cond_t *cv, rs_mutex_t *m, const struct timespec *abstime)
{
    if (cv && !abstime)
        return rs__fail(cv->h.c, EINVAL, "deadline is NULL");
    return waited(cv, m, abstime);
}

static int wake(rs_cond_t *cv, const char *op)
{
    if (!cv)
        return rs__fail(NULL, EINVAL, "cond is NULL");
    int rc = rs__enter(cv->h.c);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init(&k, &cv->h, NULL);
    long long v = 0;
    rc = int_call(&k, op, &v, NULL);
    rs__leave(cv->h.c);
    return rc;
}

RS_API int rs_cond_signal(rs_cond_t *cv)
{
    return wake(cv, "signal");
}

RS_API int rs_cond_broadcast(rs_cond_t *cv)
{
    return wake(cv, "broadcast");
}

RS_API int rs_cond_destroy(rs_cond_t *cv)
{
    return cv ? rs__handle_free(&cv->h) : 0;
}
