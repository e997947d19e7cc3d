/*
 * barrier.c - rs_barrier_t, the cyclic barrier across processes (the C side of barrier.lua;
 * issue 14).
 *
 * A barrier holds nothing, so, like the latch, it uses none of the hold machinery: wait
 * watches the barrier's own channel (the key PREFIX:{NAME}:barrier; subscribed at the
 * handle's first wait and kept until rs_barrier_destroy, so that a generation costs no
 * SUBSCRIBE), then makes one "arrive" (under a fresh
 * acquisition id, which makes a retried call idempotent), and, unless that call tripped the
 * generation, sleeps until the generation has moved past the one it arrived in: one PUBLISH
 * per trip, carrying the new generation, wakes every client. Watching before arriving means
 * the trip's message cannot be missed, and the message's generation says the trip is ours, so
 * a generation of P parties costs P script calls; a "get" is asked only when the message
 * could have been lost (the subscriber reconnected), or every third of the keys' TTL. A timed wait that runs out withdraws its arrival in
 * one script call, which also says whether the generation had tripped with it counted: then
 * the wait returns 0 (or RS_BARRIER_SERIAL), never ETIMEDOUT, so a generation never trips
 * with a party that returned ETIMEDOUT and a counted party never times out.
 *
 * Not offered under redlock:// (a count kept by independent masters can disagree).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"
#include "scripts.h"

struct rs_barrier {
    rs_handle_t h;
    unsigned parties;
    atomic_int kept; /* the handle keeps its own watch of the channel (until destroy) */
};

static const char *const barrier_keys[] = {NULL, "in", "out"};
const rs_kind_t rs_kind_barrier = {"barrier", &rs_script_barrier, barrier_keys, 3};

/* The keys live this long without use; a waiter refreshes them every third of it. Tripped
 * arrivals are remembered for BARRIER_OUT_MS, past any retry or withdraw of theirs. */
#define BARRIER_TTL_MS 86400000L
#define BARRIER_OUT_MS 600000L

static void barrier_call(rs_call_t *k, rs_barrier_t *b, const char *acqid)
{
    char buf[32];
    rs__call_init(k, &b->h, acqid);
    snprintf(buf, sizeof buf, "%u", b->parties);
    rs__call_extra(k, buf);
    snprintf(buf, sizeof buf, "%ld", BARRIER_TTL_MS);
    rs__call_extra(k, buf);
    snprintf(buf, sizeof buf, "%ld", BARRIER_OUT_MS + 2 * b->h.c->timeout_ms);
    rs__call_extra(k, buf);
}

static int bad_reply(rs_barrier_t *b, const char *op)
{
    return rs__fail(b->h.c, RS_ESERVER, "unexpected reply from the barrier script (%s)", op);
}

/* Its keys expired, or a foreign reset: the generation cannot trip any more. */
static int gone(rs_barrier_t *b)
{
    return rs__fail(b->h.c, ENOENT, "barrier \"%.*s\" does not exist any more",
                    RS_HNAME(&b->h));
}

static long long el(const redisReply *r, size_t i)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements > i &&
                   r->element[i]->type == REDIS_REPLY_INTEGER
               ? r->element[i]->integer
               : -1;
}

RS_API int rs_barrier_init(rs_barrier_t **out, rs_client_t *c, const char *name,
                           unsigned parties)
{
    if (!out)
        return rs__fail(c, EINVAL, "barrier handle pointer is NULL");
    *out = NULL;
    int rc = rs__rl_refuse(c, "barrier", "a count kept by independent masters can disagree");
    if (rc)
        return rc;
    if (parties == 0 || parties > INT_MAX)
        return rs__fail(c, EINVAL, "parties must be 1 to %d, got %u", INT_MAX, parties);
    rc = rs__handle_new(out, sizeof **out, c, rs_kind_barrier.name, rs_kind_barrier.script,
                        name, rs_kind_barrier.suffixes, rs_kind_barrier.nkeys);
    if (rc)
        return rc;
    rs_barrier_t *b = *out;
    b->parties = parties;
    if ((rc = rs__enter(c)) == 0) {
        rs_call_t k;
        barrier_call(&k, b, NULL);
        redisReply *r;
        if ((rc = rs__call_run(&k, "init", "t", &r)) == 0) {
            if (el(r, 0) != (long long)parties)
                rc = bad_reply(b, "init");
            freeReplyObject(r);
        }
        rs__leave(c);
    }
    if (rc) {
        rs__handle_free(&b->h);
        *out = NULL;
    }
    return rc;
}

/* What a waiter knows between its checks: the generation it arrived in. */
typedef struct barrier_wait {
    rs_barrier_t *b;
    long long gen;
} barrier_wait_t;

/* 0 the generation tripped, 1 not yet, -error. */
static int check_tripped(void *arg)
{
    barrier_wait_t *w = arg;
    rs_call_t k;
    barrier_call(&k, w->b, NULL);
    redisReply *r;
    int rc = rs__call_run(&k, "get", "t", &r);
    if (rc)
        return -rc;
    long long g = r->type == REDIS_REPLY_INTEGER ? r->integer : -2;
    freeReplyObject(r);
    if (g == -2)
        return -bad_reply(w->b, "get");
    if (g < 0) /* -1: gone */
        return -gone(w->b);
    return g > w->gen ? 0 : 1;
}

/* The wait ended without the trip (deadline, close, an error): withdraw the arrival. 0 or
 * RS_BARRIER_SERIAL if the generation had tripped with it counted after all, else rc. */
static int withdraw(rs_barrier_t *b, const char *acqid, int rc)
{
    char why[512];
    snprintf(why, sizeof why, "%s", rs_client_lasterror(b->h.c));
    rs_call_t k;
    barrier_call(&k, b, acqid);
    redisReply *r;
    if (rs__call_run(&k, "withdraw", "t", &r) == 0) {
        int counted = el(r, 0) == 2;
        int serial = counted && el(r, 1) == 1;
        freeReplyObject(r);
        if (counted) {
            rs__clear_error();
            return serial ? RS_BARRIER_SERIAL : 0;
        }
    }
    /* (a withdraw that failed leaves the arrival counted; its keys' TTL bounds it) */
    return rs__fail(b->h.c, rc, "%s", why);
}

/* Sleeps on w (registered on the barrier's channel, watched before the arrival in gen)
 * until the generation tripped (0), the deadline (ETIMEDOUT, its message counting from
 * start_ns, when the call began), close (ECANCELED) or an error. */
static int sleep_trip(rs_barrier_t *b, rs_waiter_t *w, long long gen, uint64_t start_ns,
                      uint64_t deadline)
{
    rs_client_t *c = b->h.c;
    barrier_wait_t bw = {b, gen};
    for (;;) {
        uint64_t until = rs__now_ns() + (uint64_t)(BARRIER_TTL_MS / 3) * RS_NS_PER_MS;
        if (until > deadline)
            until = deadline;
        int wake = rs__notify_sleep(c, w, until), r;
        if (wake == RS_WAKE_MSG) {
            char msg[sizeof w->msg], *end;
            rs__notify_msg(c, w, msg, sizeof msg);
            long long g = strtoll(msg, &end, 10);
            if (end != msg && *end == '\0' && g > gen)
                return 0; /* "G": generation G - 1 tripped, so every one before it did */
            if (end != msg && *end == '\0')
                continue; /* an earlier trip's message, delivered after we watched */
            r = check_tripped(&bw); /* not a generation: ask */
        } else if (wake == RS_WAKE_CANCEL) {
            return rs__fail(c, ECANCELED, "the client is closing");
        } else if (wake == RS_WAKE_TIMEOUT && rs__now_ns() >= deadline) {
            r = check_tripped(&bw);
            if (r > 0)
                return rs__fail_timedout(c, start_ns);
        } else {
            r = check_tripped(&bw); /* a reconnect (messages may be lost), or the recheck */
        }
        if (r <= 0)
            return -r;
    }
}

static int waited(rs_barrier_t *b, const struct timespec *abstime)
{
    uint64_t deadline = RS_NO_DEADLINE, start_ns = rs__now_ns();
    int rc = rs__handle_begin(b ? &b->h : NULL, "barrier", abstime, &deadline);
    if (rc)
        return rc;
    atomic_fetch_add(&b->h.inside, 1);
    rs_client_t *c = b->h.c;
    rs_call_t k;
    barrier_call(&k, b, NULL);
    char acqid[RS_ACQID_MAX];
    snprintf(acqid, sizeof acqid, "%s", k.acqid);
    redisReply *r;
    /* watched before the arrival: the trip's message cannot slip between */
    rs_waiter_t w;
    pthread_cond_t wcv;
    int watching = 0;
    rc = rs__notify_begin(c, &w, &wcv, NULL, b->h.key[0]);
    if (rc == 0) {
        rc = rs__notify_watch(c, b->h.key[0]);
        watching = rc == 0;
        if (rc)
            rs__notify_end(c, &w);
        else if (!atomic_exchange(&b->kept, 1) && rs__notify_watch(c, b->h.key[0]) != 0)
            atomic_store(&b->kept, 0); /* (confirmed already: only a reference more) */
    }
    if (rc == 0 && (rc = rs__call_run(&k, "arrive", "t", &r)) == 0) {
        long long v = el(r, 0), g = el(r, 1), s = el(r, 2);
        freeReplyObject(r);
        if (v == 1 || (v == 2 && s == 1)) {
            rc = RS_BARRIER_SERIAL;
        } else if (v == 2) {
            rc = 0;
        } else if (v == 0 && g >= 0) {
            rc = sleep_trip(b, &w, g, start_ns, deadline);
            if (rc != 0)
                rc = withdraw(b, acqid, rc);
        } else {
            rc = bad_reply(b, "arrive");
        }
    } else if (rc == ENOENT) {
        gone(b);
    }
    if (watching) {
        rs__notify_unwatch(c, b->h.key[0]);
        rs__notify_end(c, &w);
    }
    atomic_fetch_sub(&b->h.inside, 1);
    rs__leave(b->h.c);
    return rc;
}

RS_API int rs_barrier_wait(rs_barrier_t *b)
{
    return waited(b, NULL);
}

RS_API int rs_barrier_timedwait(rs_barrier_t *b, const struct timespec *abstime)
{
    if (b && !abstime)
        return rs__fail(b->h.c, EINVAL, "deadline is NULL");
    return waited(b, abstime);
}

RS_API int rs_barrier_destroy(rs_barrier_t *b)
{
    if (!b)
        return 0;
    /* the handle's own watch goes first, unless the destroy is refused (a thread inside) or
     * in a fork child (whose notifier state is only freed) */
    if (atomic_load(&b->h.inside) == 0 && !rs__forked(b->h.c) && atomic_exchange(&b->kept, 0))
        rs__notify_unwatch(b->h.c, b->h.key[0]);
    return rs__handle_free(&b->h);
}
