/*
 * wdlist.c - the watchdog's registry of live leases: registration, local deadlines, loss
 * marking and the on_lost reports.
 *
 * Loss detection does not depend on Redis answering: each lease has a local monotonic
 * deadline, the send time of the last confirmed renewal + lease - drift. When it passes, or
 * a renewal reply says the hold is gone or taken, the hold is lost: on_lost is called once,
 * from the watchdog thread, and the holder's unlock returns RS_ELOST. A lost hold is never
 * renewed again, even if Redis still has it. Queue entries are not "lost": their waiter is
 * poked to retry (which re-queues it or finds it granted).
 *
 * Below the rounds (wdround.c, redlock.c) and the thread (watchdog.c): what is registered
 * here starts the thread through c->wd.start, which client.c sets.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct rs_report {
    const char *kind;
    char *name;
    struct rs_report *next;
};

int rs__watch_add(rs_client_t *c, rs_lease_t *l, uint64_t sent_ns, long ttl_ms)
{
    if (ttl_ms <= 0 || ttl_ms > l->lease_ms)
        ttl_ms = ttl_ms <= 0 ? 1 : l->lease_ms;
    pthread_mutex_lock(&c->wd.mu);
    int rc = c->wd.start(c);
    if (rc == 0) {
        /* Redis's lease ends at (run time + ttl) >= sent + ttl; renew when a third of the
         * lease has gone since it was set */
        l->deadline_ns = sent_ns + (uint64_t)ttl_ms * RS_NS_PER_MS - rs__drift_ns(l->lease_ms);
        uint64_t end = sent_ns + (uint64_t)ttl_ms * RS_NS_PER_MS;
        l->due_ns = end > 2 * rs__lease_period_ns(l) ? end - 2 * rs__lease_period_ns(l) : 0;
        l->registered = 1;
        if (l->waiter) /* a request's queue entry is registered again after a loss (async.c) */
            l->lost = l->reported = 0;
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
        c->wd.start(c);
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
void rs__wd_expire_one_locked(rs_client_t *c, rs_lease_t *l, uint64_t now)
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
        rs__wd_expire_one_locked(c, l, now);
}

/* Applies a round's result for l (1 renewed, 0 gone, 2 granted, -1 no answer) whose
 * renewal was sent at sent; after is now. wd.mu held. */
void rs__wd_apply_locked(rs_client_t *c, rs_lease_t *l, int res, uint64_t sent, uint64_t after)
{
    if (!l->registered || l->lost)
        return;
    if (res == 1 || (res == 2 && l->waiter)) {
        l->deadline_ns = sent + (uint64_t)l->lease_ms * RS_NS_PER_MS - rs__drift_ns(l->lease_ms);
        l->due_ns = sent + rs__lease_period_ns(l);
        if (res == 2)
            rs__notify_poke(c, l->waiter, RS_WAKE_RETRY);
    } else if (res == 0 || res == 2) {
        if (l->waiter) {
            rs__notify_poke(c, l->waiter, RS_WAKE_RETRY);
            l->due_ns = after + rs__lease_period_ns(l);
        } else {
            mark_lost_locked(c, l);
        }
    } else {
        /* no answer: try again soon, well before the local deadline */
        uint64_t retry = rs__lease_period_ns(l) / 4;
        if (retry > 200 * RS_NS_PER_MS)
            retry = 200 * RS_NS_PER_MS;
        l->due_ns = after + retry;
    }
}

void rs__wd_deliver_reports(rs_client_t *c)
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

/* Called when a wait of a round (connect, read) reaches its cut or a slice of it: applies
 * the answers already read (a renewal confirmed in this round counts before its old
 * deadline passes), marks every lease past its local deadline lost and calls on_lost now,
 * not when the round ends. Returns the next cut, the nearest deadline of any live lease;
 * 0 to give up: the watchdog is stopping, or no lease of batch (sent at sent) still waits
 * for an answer while registered and not lost. */
uint64_t rs__wd_checkpoint(rs_client_t *c, rs_lease_t **batch, int *res, int n, uint64_t sent)
{
    pthread_mutex_lock(&c->wd.mu);
    uint64_t now = rs__now_ns();
    for (int i = 0; i < n; i++)
        if (res[i] >= 0 && res[i] <= 2) {
            rs__wd_apply_locked(c, batch[i], res[i], sent, now);
            res[i] = RS_RES_APPLIED;
        }
    expire_locked(c, now);
    rs__wd_deliver_reports(c);
    int waiting = 0;
    for (int i = 0; i < n && !waiting; i++)
        waiting = res[i] < 0 && batch[i]->registered && !batch[i]->lost;
    uint64_t cut = waiting && !c->wd.stop ? nearest_deadline_locked(c) : 0;
    pthread_mutex_unlock(&c->wd.mu);
    return cut;
}

void rs__wd_drop_reports(rs_client_t *c)
{
    while (c->wd.reports) {
        struct rs_report *r = c->wd.reports;
        c->wd.reports = r->next;
        free(r->name);
        free(r);
    }
}
