/*
 * call.c - one script call of a primitive, as every primitive builds it: rs_call_t filled
 * from a handle (its keys, a fresh or given acquisition id, the owner's token, the lease),
 * its argv in the convention of every script (handle.c's header), a lease built from it for
 * the watchdog, and the decoding of an acquiring call's reply.
 *
 * Below handle.c (which acquires and releases with these) and redlock.c (which sends them to
 * every master): it reads a handle's immutable fields and calls only the layers under it
 * (script.c, lease.c, keys and ids).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

long rs__handle_lease(const rs_handle_t *h)
{
    long l = atomic_load(&h->lease_ms);
    return l ? l : h->c->lease_ms;
}

static void call_init(rs_call_t *k, rs_handle_t *h, const char *acqid, uint64_t owner_no)
{
    k->h = h;
    k->owner_no = owner_no;
    k->toklen = rs__owner_token(h->c, owner_no, k->token);
    if (acqid) {
        snprintf(k->acqid, sizeof k->acqid, "%s", acqid);
        k->acqlen = strlen(k->acqid);
    } else {
        k->acqlen = rs__acq_id(h->c, k->acqid);
    }
    snprintf(k->lease, sizeof k->lease, "%ld", rs__handle_lease(h));
    snprintf(k->maxw, sizeof k->maxw, "%u", h->c->max_waiters);
    k->nextra = 0;
    k->rl_ticket = k->rl_seen = 0;
    k->rl_attempt = 0;
    k->rl_recheck_ms = 0;
    k->pre = NULL; /* cond.c sets it for one attempt */
    k->pre_sent = 0;
    /* keys 1..: the main key, ':', the suffix (rs__handle_init checked that they fit) */
    size_t off = 0;
    for (int i = 1; i < h->nkeys; i++) {
        size_t sl = strlen(h->suffixes[i]);
        char *p = k->keys + off;
        memcpy(p, h->key[0], h->klen[0]);
        p[h->klen[0]] = ':';
        memcpy(p + h->klen[0] + 1, h->suffixes[i], sl + 1);
        k->koff[i] = (unsigned short)off;
        k->kklen[i] = (unsigned short)(h->klen[0] + 1 + sl);
        off += k->kklen[i] + 1u;
    }
}

void rs__call_init(rs_call_t *k, rs_handle_t *h, const char *acqid)
{
    call_init(k, h, acqid, rs__thread_no());
}

void rs__call_init_object(rs_call_t *k, rs_handle_t *h)
{
    call_init(k, h, NULL, rs__owner_no_new());
}

void rs__call_init_owner(rs_call_t *k, rs_handle_t *h, const char *acqid, uint64_t owner_no)
{
    call_init(k, h, acqid, owner_no);
}

void rs__call_extra(rs_call_t *k, const char *arg)
{
    if (k->nextra < RS_CALL_EXTRA_MAX)
        snprintf(k->extra[k->nextra++], sizeof k->extra[0], "%s", arg);
}

void rs__call_argv(const rs_call_t *k, const char *op, const char *mode, rs_argv_t *v)
{
    const rs_handle_t *h = k->h;
    rs__argv_init(v);
    rs__argv_ref(v, h->key[0], h->klen[0]);
    for (int i = 1; i < h->nkeys; i++)
        rs__argv_ref(v, k->keys + k->koff[i], k->kklen[i]);
    if (op)
        rs__argv_str(v, op);
    rs__argv_ref(v, k->token, k->toklen);
    rs__argv_ref(v, k->acqid, k->acqlen);
    rs__argv_str(v, k->lease);
    rs__argv_str(v, h->c->channel_prefix);
    if (h->c->ep.mode == RS_MODE_REDLOCK)
        rs__argv_fmt(v, "%sr", mode ? mode : "t"); /* one master of several: no handoff */
    else
        rs__argv_str(v, mode ? mode : "t");
    rs__argv_str(v, k->maxw);
    rs__argv_str(v, k->lease); /* a queue entry lives as long as a hold */
    for (int i = 0; i < k->nextra; i++)
        rs__argv_str(v, k->extra[i]);
}

int rs__call_run(const rs_call_t *k, const char *op, const char *mode, redisReply **out)
{
    rs_argv_t v;
    rs__call_argv(k, op, mode, &v);
    return rs__eval(k->h->c, k->h->script, k->h->nkeys, &v, out);
}

rs_lease_t *rs__call_lease(const rs_call_t *k, const char *renew_op, const char *release_op)
{
    rs_argv_t v;
    rs__call_argv(k, NULL, "q", &v);
    return rs__lease_new(k->h->c, k->h->script, k->h->nkeys, &v, renew_op, release_op,
                         atol(k->lease), k->h->kind, k->h->name, k->h->namelen);
}

static uint64_t reply_u64(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return (uint64_t)r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoull(r->str, NULL, 10);
    return 0;
}

int rs__decode_grant(const rs_call_t *k, const redisReply *r, rs_attempt_t *out)
{
    rs_client_t *c = k->h->c;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
        r->element[0]->type == REDIS_REPLY_INTEGER) {
        long long v = r->element[0]->integer;
        if (v == -1)
            return rs__fail(c, EDEADLK, "this thread already holds %s \"%.*s\"", k->h->kind,
                            RS_HNAME(k->h));
        out->done = 0;
        if (v == 2) { /* the primitive is done: nothing to wait for or to hold (once.lua) */
            out->granted = 0;
            out->done = 1;
            return 0;
        }
        if (v == 1 && r->elements >= 3) {
            out->granted = 1;
            out->fence = reply_u64(r->element[1]);
            out->ttl_ms = (long)reply_u64(r->element[2]);
            return 0;
        }
        if (v == 0) {
            out->granted = 0;
            long long ttl = r->elements >= 2 && r->element[1]->type == REDIS_REPLY_INTEGER
                                ? r->element[1]->integer
                                : 0;
            out->retry_ms = ttl > 0 ? (long)ttl : 1;
            out->queued = r->elements >= 3 && r->element[2]->type == REDIS_REPLY_INTEGER &&
                          r->element[2]->integer == 1;
            /* the fencing counter when the busy answer was given: a wake-up carrying a token
             * at or below it was published before that answer, for a grant since lost */
            out->seen_fence = r->elements >= 4 ? reply_u64(r->element[3]) : 0;
            return 0;
        }
    }
    return rs__fail(c, RS_ESERVER, "unexpected reply from the %s script", k->h->kind);
}
