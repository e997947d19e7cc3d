/*
 * latch.c - rs_latch_t, the distributed countdown latch (the C side of latch.lua).
 *
 * A latch holds nothing, so none of the hold machinery (rs__acquire, the watchdog) applies:
 * init, count_down, getcount and rearm are one script call each (rs__call_run, which resends
 * the same call id after a lost reply; the script recognises it), and wait/timedwait are
 * rs__wait_event on the latch's own channel, whose name is the latch's key PREFIX:{NAME}:latch.
 * The notifier subscribes to that channel while a thread of this client waits, so the one
 * PUBLISH of an opening wakes every waiting client; a waiter asks Redis again ("get") only
 * after a message, a reconnect of the subscriber, or every third of the keys' TTL, which
 * keeps them alive while anyone waits.
 *
 * A wait returns once the count is 0 or the latch has opened since the wait began (the
 * script counts openings), so an opening followed at once by a rearm still releases those
 * who waited for it; rearm only closes the latch for waits that start after it.
 */
#include <stdio.h>

#include "internal.h"
#include "scripts.h"

struct rs_latch {
    rs_handle_t h;
};

static const char *const latch_keys[] = {NULL, "ids"};
const rs_kind_t rs_kind_latch = {"latch", &rs_script_latch, latch_keys, 2};

/* How long a latch's keys live without activity: 24 hours. Every call that finds the latch
 * refreshes them and each waiter re-checks (refreshing them) every third of it. Not static
 * and not const: the tests shorten it to see expiry and refresh happen (a test hook, not an
 * API; the library never changes it). */
RS_HIDDEN long rs__latch_ttl_ms = 86400000L;

/* How long the script remembers a count-down's or rearm's call id: past the client's
 * timeout_ms (within which rs__eval may resend it) with a wide margin. */
#define LATCH_IDS_MS 600000L

/* One script call with a fresh call id. ARGV[9..11]: count, TTL, id window. */
static int run(rs_latch_t *l, const char *op, unsigned count, redisReply **out)
{
    rs_call_t k;
    char buf[32];
    rs__call_init(&k, &l->h, NULL);
    snprintf(buf, sizeof buf, "%u", count);
    rs__call_extra(&k, buf);
    snprintf(buf, sizeof buf, "%ld", rs__latch_ttl_ms);
    rs__call_extra(&k, buf);
    snprintf(buf, sizeof buf, "%ld", LATCH_IDS_MS + 2 * l->h.c->timeout_ms);
    rs__call_extra(&k, buf);
    return rs__call_run(&k, op, "t", out);
}

static int bad_reply(rs_latch_t *l, const char *op)
{
    return rs__fail(l->h.c, RS_ESERVER, "unexpected reply from the latch script (%s)", op);
}

static int never_armed(rs_latch_t *l)
{
    return rs__fail(l->h.c, ENOENT, "latch \"%.*s\" has never been armed (or expired unused)",
                    RS_HNAME(&l->h));
}

static int is_int(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER;
}

/* "get": *armed, and if armed the count *n and the number of openings *o. */
static int get_state(rs_latch_t *l, int *armed, long long *n, long long *o)
{
    redisReply *r;
    int rc = run(l, "get", 0, &r);
    if (rc)
        return rc;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 && is_int(r->element[0]) &&
        is_int(r->element[1]) && is_int(r->element[2]) && r->element[1]->integer >= 0) {
        *armed = r->element[0]->integer == 1;
        *n = r->element[1]->integer;
        *o = r->element[2]->integer;
    } else {
        rc = bad_reply(l, "get");
    }
    freeReplyObject(r);
    return rc;
}

RS_API int rs_latch_init(rs_latch_t **out, rs_client_t *c, const char *name, unsigned count)
{
    if (out)
        *out = NULL;
    int rc0 = rs__rl_refuse(c, "latch", "a count-down that reaches only some masters leaves "
                            "their counts disagreeing, and no quorum rule makes \"open\" both "
                            "safe and sure to happen");
    if (rc0)
        return rc0;
    int rc = rs__handle_new(out, sizeof **out, c, "latch", &rs_script_latch, name, latch_keys, 2);
    if (rc || count == 0)
        return rc; /* count 0 only attaches: nothing to ask Redis */
    rs_latch_t *l = *out;
    if ((rc = rs__enter(c)) == 0) {
        redisReply *r;
        if ((rc = run(l, "init", count, &r)) == 0) {
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !is_int(r->element[0]))
                rc = bad_reply(l, "init");
            freeReplyObject(r);
        }
        rs__leave(c);
    }
    if (rc) {
        rs__handle_free(&l->h);
        *out = NULL;
    }
    return rc;
}

RS_API int rs_latch_count_down(rs_latch_t *l)
{
    int rc = rs__handle_begin(l ? &l->h : NULL, "latch", NULL, NULL);
    if (rc)
        return rc;
    redisReply *r;
    if ((rc = run(l, "down", 0, &r)) == 0) {
        if (!is_int(r))
            rc = bad_reply(l, "down");
        else if (r->integer < 0)
            rc = never_armed(l);
        freeReplyObject(r);
    }
    rs__leave(l->h.c);
    return rc;
}

/* What a waiter knows between its checks. */
typedef struct latch_wait {
    rs_latch_t *l;
    long long seen; /* openings counted when the wait began (-1: not checked yet; 0 when the
                       latch was not armed, so its first opening counts) */
} latch_wait_t;

/* rs__wait_event's check: 0 open (or opened since the wait began), 1 not yet, -error. */
static int check_open(void *arg)
{
    latch_wait_t *w = arg;
    int armed;
    long long n, o;
    int rc = get_state(w->l, &armed, &n, &o);
    if (rc)
        return -rc;
    if (!armed) {
        w->seen = 0; /* (re-)armed later, it starts counting openings from 0 */
        return 1;
    }
    if (n == 0 || (w->seen >= 0 && o > w->seen))
        return 0;
    if (w->seen < 0)
        w->seen = o;
    return 1;
}

/* wait and timedwait: one path. */
static int waited(rs_latch_t *l, const struct timespec *abstime)
{
    uint64_t deadline = RS_NO_DEADLINE;
    int rc = rs__handle_begin(l ? &l->h : NULL, "latch", abstime, &deadline);
    if (rc)
        return rc;
    latch_wait_t w = {l, -1};
    long recheck_ms = rs__latch_ttl_ms / 3 > 0 ? rs__latch_ttl_ms / 3 : 1;
    rc = rs__wait_event(l->h.c, l->h.key[0], check_open, &w, recheck_ms, deadline);
    rs__leave(l->h.c);
    return rc;
}

RS_API int rs_latch_wait(rs_latch_t *l)
{
    return waited(l, NULL);
}

RS_API int rs_latch_timedwait(rs_latch_t *l, const struct timespec *abstime)
{
    if (l && !abstime)
        return rs__fail(l->h.c, EINVAL, "deadline is NULL");
    return waited(l, abstime);
}

/* The event-loop form: the same check ("get") decoded from the reply the I/O thread read;
 * state is latch_wait_t's seen. */
static int decode_open(rs_client_t *c, const redisReply *r, long long *seen)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || !is_int(r->element[0]) ||
        !is_int(r->element[1]) || !is_int(r->element[2]) || r->element[1]->integer < 0)
        return -rs__fail(c, RS_ESERVER, "unexpected reply from the latch script (get)");
    long long n = r->element[1]->integer, o = r->element[2]->integer;
    if (r->element[0]->integer != 1) {
        *seen = 0;
        return 1;
    }
    if (n == 0 || (*seen >= 0 && o > *seen))
        return 0;
    if (*seen < 0)
        *seen = o;
    return 1;
}

static const rs_async_event_t latch_event = {"get", decode_open};

RS_API int rs_latch_wait_async(rs_latch_t *l, const struct timespec *abstime, rs_done_fn *done,
                               void *arg, rs_request_t **req)
{
    if (req)
        *req = NULL;
    int rc = rs__handle_begin(l ? &l->h : NULL, "latch", NULL, NULL);
    if (rc)
        return rc;
    rs_call_t k;
    char buf[32];
    rs__call_init_object(&k, &l->h);
    rs__call_extra(&k, "0");
    snprintf(buf, sizeof buf, "%ld", rs__latch_ttl_ms);
    rs__call_extra(&k, buf);
    snprintf(buf, sizeof buf, "%ld", LATCH_IDS_MS + 2 * l->h.c->timeout_ms);
    rs__call_extra(&k, buf);
    rc = rs__async_event(&k, l->h.key[0], &latch_event, rs__latch_ttl_ms / 3, abstime, done,
                         arg, req);
    rs__leave(l->h.c);
    return rc;
}

RS_API int rs_latch_getcount(rs_latch_t *l, unsigned *count)
{
    if (l && !count)
        return rs__fail(l->h.c, EINVAL, "count is NULL");
    int rc = rs__handle_begin(l ? &l->h : NULL, "latch", NULL, NULL);
    if (rc)
        return rc;
    int armed;
    long long n, o;
    if ((rc = get_state(l, &armed, &n, &o)) == 0) {
        if (!armed)
            rc = never_armed(l);
        else
            *count = (unsigned)n;
    }
    rs__leave(l->h.c);
    return rc;
}

RS_API int rs_latch_rearm(rs_latch_t *l, unsigned count)
{
    if (l && count == 0)
        return rs__fail(l->h.c, EINVAL, "rearm needs a count above 0");
    int rc = rs__handle_begin(l ? &l->h : NULL, "latch", NULL, NULL);
    if (rc)
        return rc;
    redisReply *r;
    if ((rc = run(l, "rearm", count, &r)) == 0) {
        if (!is_int(r) || r->integer < 0)
            rc = bad_reply(l, "rearm");
        freeReplyObject(r);
    }
    rs__leave(l->h.c);
    return rc;
}

RS_API int rs_latch_destroy(rs_latch_t *l)
{
    return rs__handle_free(l ? &l->h : NULL);
}
