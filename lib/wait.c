/*
 * wait.c - the one blocking loop. Every lock/wait call of every primitive comes here
 * (as in musl, lock is timedlock without a deadline), so deadlines, wake-ups and retries are
 * handled in one place.
 *
 *   (subscriber not up yet: attempt without queueing -> granted? done; then subscribe)
 *   attempt (queue in Redis if busy) -> granted? done
 *   sleep until: a wake-up message for this acquisition (usually "it is yours"), a poke to
 *   retry (subscriber reconnected, queue entry vanished or was granted), the holder's
 *   remaining lease (a lost message costs at most that), or the deadline
 *   -> on the deadline, leave the queue (which may reveal that we were granted meanwhile)
 *
 * While the caller sleeps, its queue entry is a lease renewed by the watchdog, so a crashed
 * waiter's entry expires and is skipped. A waiter therefore sends nothing of its own while it
 * sleeps beyond one retry per holder's lease.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

int rs__waiter_begin(rs_client_t *c, rs_waiter_t *w, pthread_cond_t *cv, const char *acqid,
                     const char *key, size_t klen)
{
    int rc = rs__notify_begin(c, w, cv, acqid, NULL);
    if (rc != 0)
        return rc;
    if (key && acqid && rs__acq_sharded(acqid) &&
        (rc = rs__notify_shard_begin(c, w, key, klen)) != 0)
        rs__waiter_end(c, w);
    return rc;
}

void rs__waiter_end(rs_client_t *c, rs_waiter_t *w)
{
    rs__notify_shard_end(c, w);
    rs__notify_end(c, w);
}

int rs__wait_acquire(rs_client_t *c, const rs_acquire_ops_t *ops, void *ctx, const char *acqid,
                     int try_only, uint64_t deadline_ns, rs_attempt_t *out)
{
    return rs__wait_acquire_key(c, ops, ctx, acqid, NULL, try_only, deadline_ns, out);
}

int rs__wait_acquire_key(rs_client_t *c, const rs_acquire_ops_t *ops, void *ctx,
                         const char *acqid, const char *key, int try_only,
                         uint64_t deadline_ns, rs_attempt_t *out)
{
    return rs__wait_acquire_with(c, ops, ctx, acqid, key, try_only, deadline_ns, NULL, out);
}

int rs__wait_acquire_with(rs_client_t *c, const rs_acquire_ops_t *ops, void *ctx,
                          const char *acqid, const char *key, int try_only,
                          uint64_t deadline_ns, rs_waiter_t *given, rs_attempt_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t start_ns = rs__now_ns();
    if (try_only || deadline_ns <= start_ns) {
        int rc = ops->attempt(ctx, 0, out);
        if (rc != 0 || out->granted || out->done)
            return rc;
        return try_only ? EBUSY : rs__fail(c, ETIMEDOUT, "deadline passed");
    }

    /* Until the subscriber stands, try first without queueing: a free primitive is taken
     * without it, so a subscriber that cannot subscribe (a lossy link, no pub/sub right)
     * costs only the callers that must wait. Subscribed first, then the queued attempt, as
     * always: a wake-up is only published for an attempt that queued, so none is lost. */
    if (!given && !rs__notify_ready(c)) {
        int rc = ops->attempt(ctx, 0, out);
        if (rc != 0 || out->granted || out->done)
            return rc;
    }
    rs_waiter_t own, *w = given ? given : &own;
    pthread_cond_t cv; /* own's */
    int rc = given ? 0 : rs__waiter_begin(c, w, &cv, acqid, key, key ? strlen(key) : 0);
    if (rc != 0)
        return rc;
    rs_lease_t *ql = NULL;
    uint64_t fence_floor = 0; /* highest fencing counter any busy answer showed */
    int queued = 0;
    for (;;) {
        rc = ops->attempt(ctx, 1, out);
        if (rc != 0 || out->granted || out->done)
            break;
        queued |= out->queued;
        if (out->seen_fence > fence_floor)
            fence_floor = out->seen_fence;
        if (out->queued && (!ql || rs__lease_is_lost(c, ql))) {
            if (ql) {
                rs__watch_del(c, ql);
                rs__lease_unref(ql);
            }
            ql = ops->queue_lease(ctx);
            if (ql) {
                ql->waiter = w;
                rs__watch_add(c, ql, out->sent_ns, ql->lease_ms);
            }
        }
        uint64_t lower = out->sent_ns; /* the grant, if any, happened after this */
        long nap_ms = out->retry_ms > 0 ? out->retry_ms : 1;
        nap_ms += 2 + nap_ms / 100;
        uint64_t until = rs__now_ns() + (uint64_t)nap_ms * RS_NS_PER_MS;
        if (until > deadline_ns)
            until = deadline_ns;
        /* a sharded channel follows its slot (our attempt may have met MOVED); the new
         * master's confirmation makes us retry */
        rs__notify_shard_check(c, w);
        int wake = rs__notify_sleep(c, w, until);
        if (wake == RS_WAKE_MSG) {
            if (ql) {
                uint64_t conf = rs__lease_confirmed_ns(c, ql);
                if (conf > lower)
                    lower = conf;
            }
            /* A wake-up is trusted only if its token is above every counter a busy answer
             * showed: one published before such an answer (a grant lost meanwhile, e.g. to
             * a restart, after which this id queued again) would otherwise be taken for the
             * later grant, with the wrong token and lease. */
            if (ops->message(ctx, w->msg, out) && out->fence > fence_floor) {
                if (c->min_replicas > 0 || c->confirm_wakeups) {
                    /* a handed-over hold is confirmed like any other: the next attempt finds
                     * it ours (a forged message finds it not ours: a retry), and with
                     * min_replicas its WAIT covers the releaser's grant */
                    out->granted = 0;
                    continue;
                }
                out->sent_ns = lower;
                break;
            }
            out->granted = 0;
            continue;
        }
        if (wake == RS_WAKE_CANCEL || (wake == RS_WAKE_TIMEOUT && rs__now_ns() >= deadline_ns)) {
            /* leave the queue; it may turn out we were granted meanwhile, then keep it */
            int crc = ops->cancel(ctx, out);
            if (crc == 0 && (out->granted || out->done))
                rc = 0;
            else if (wake == RS_WAKE_CANCEL)
                rc = rs__fail(c, ECANCELED, "the client is closing");
            else
                rc = crc ? crc : rs__fail_timedout(c, start_ns);
            break;
        }
        /* RS_WAKE_RETRY, or the holder's lease ran out: try again */
    }
    if (ql) {
        rs__watch_del(c, ql);
        rs__lease_unref(ql);
    }
    if (rc != 0 && queued && rc != ETIMEDOUT && rc != ECANCELED) {
        /* an error ended the wait while an entry may still stand in the queue: leave it,
         * or a release would hand the primitive to nobody for a whole lease (best effort:
         * Redis may be the error; the entry then expires with its queue lease) */
        char why[512];
        snprintf(why, sizeof why, "%s", rs_client_lasterror(c));
        rs_attempt_t gone;
        memset(&gone, 0, sizeof gone);
        if (ops->cancel(ctx, &gone) == 0 && gone.granted)
            rc = 0, *out = gone;
        else
            rs__fail(c, rc, "%s", why); /* the wait's own error, not the cancel's */
    }
    if (!given)
        rs__waiter_end(c, w);
    return rc;
}

int rs__wait_event(rs_client_t *c, const char *topic, int (*check)(void *ctx), void *ctx,
                   long recheck_ms, uint64_t deadline_ns)
{
    uint64_t start_ns = rs__now_ns();
    int rc = check(ctx);
    if (rc <= 0)
        return rc < 0 ? -rc : 0;
    if (deadline_ns <= rs__now_ns())
        return rs__fail(c, ETIMEDOUT, "deadline passed");
    rs_waiter_t w;
    pthread_cond_t cv;
    rc = rs__notify_begin(c, &w, &cv, NULL, topic);
    if (rc)
        return rc;
    rc = rs__notify_watch(c, topic);
    int watching = rc == 0;
    while (rc == 0) {
        /* checked after the subscription is confirmed, so the event cannot slip between */
        int r = check(ctx);
        if (r <= 0) {
            rc = -r;
            break;
        }
        uint64_t until = rs__now_ns() + (uint64_t)recheck_ms * RS_NS_PER_MS;
        if (until > deadline_ns)
            until = deadline_ns;
        int wake = rs__notify_sleep(c, &w, until);
        if (wake == RS_WAKE_CANCEL)
            rc = rs__fail(c, ECANCELED, "the client is closing");
        else if (wake == RS_WAKE_TIMEOUT && rs__now_ns() >= deadline_ns && (r = check(ctx)) != 0)
            rc = r < 0 ? -r : rs__fail_timedout(c, start_ns);
        else if (wake == RS_WAKE_TIMEOUT && rs__now_ns() >= deadline_ns)
            break; /* the last check found it done */
    }
    if (watching)
        rs__notify_unwatch(c, topic);
    rs__notify_end(c, &w);
    return rc;
}
