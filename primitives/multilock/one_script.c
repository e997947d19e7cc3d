/*
 * one_script.c - the multilock's one-script path: when all parts live on one server, one
 * EVALSHA of multilock.lua takes them all or none, so an uncontended multilock costs one
 * round trip instead of one per part. The holds it creates are ordinary mutex holds of the
 * calling thread (lib/handle.c: rs__hold_new before the call, rs__hold_granted after it),
 * renewed by the watchdog and released by rs_mutex_unlock like any other.
 *
 * It never waits: a busy part makes multilock.c fall back to taking the parts one by one in
 * the global order (which queues), so deadlock freedom and FIFO service are the ordered
 * path's. With min_replicas > 0 it is skipped (the ordered path confirms each part).
 */
#include <stdlib.h>
#include <string.h>

#include "one_script.h"
#include "scripts.h"

int rs__ml_one_script_fits(rs_handle_t *const *h, size_t n)
{
    if (n < 2 || n > RS_ML_ONE_SCRIPT_MAX)
        return 0;
    rs_client_t *c = h[0]->c;
    if (c->ep.mode != RS_MODE_SINGLE && c->ep.mode != RS_MODE_SENTINEL)
        return 0;
    for (size_t i = 1; i < n; i++)
        if (h[i]->c != c)
            return 0;
    return 1;
}

/* Decodes {1, fence...} into the holds; the reply was checked to have n + 1 elements. */
static uint64_t fence_of(const redisReply *e)
{
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer > 0 ? (uint64_t)e->integer : 0;
    if (e->type == REDIS_REPLY_STRING)
        return strtoull(e->str, NULL, 10);
    return 0;
}

int rs__ml_one_script(rs_handle_t *const *h, size_t n)
{
    rs_client_t *c = h[0]->c;
    if (c->min_replicas > 0)
        return -1;
    uint64_t self = rs__thread_no();
    for (size_t i = 0; i < n; i++)
        if (rs__handle_find(h[i], self))
            return -1; /* the ordered path says EDEADLK or EBUSY for it */
    int rc = rs__enter(c);
    if (rc)
        return rc;
    rs_call_t *k = malloc(n * sizeof *k);
    rs_hold_t **hold = calloc(n, sizeof *hold);
    if (!k || !hold)
        rc = rs__fail(c, ENOMEM, "out of memory");
    for (size_t i = 0; k && hold && i < n && rc == 0; i++) {
        /* one acquisition id for all parts: each part is another lock */
        rs__call_init(&k[i], h[i], i ? k[0].acqid : NULL);
        if (strcmp(k[i].lease, k[0].lease) != 0)
            rc = -1; /* ARGV has one lease for all */
        else if (rs__hold_new(&k[i], &hold[i]) != 0)
            rc = ENOMEM;
    }
    redisReply *r = NULL;
    uint64_t sent = rs__now_ns();
    if (rc == 0) {
        rs_argv_t v;
        rs__argv_init(&v);
        for (size_t i = 0; i < n; i++) {
            rs__argv_ref(&v, h[i]->key[0], h[i]->klen[0]);
            rs__argv_ref(&v, k[i].keys + k[i].koff[1], k[i].kklen[1]); /* fence */
            rs__argv_ref(&v, k[i].keys + k[i].koff[2], k[i].kklen[2]); /* q */
        }
        rs__argv_ref(&v, k[0].token, k[0].toklen);
        rs__argv_ref(&v, k[0].acqid, k[0].acqlen);
        rs__argv_str(&v, k[0].lease);
        rc = rs__eval(c, &rs_script_multilock, (int)(3 * n), &v, &r);
    }
    if (rc == 0) {
        long long verdict = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                                    r->element[0]->type == REDIS_REPLY_INTEGER
                                ? r->element[0]->integer
                                : -2;
        if (verdict == 1 && r->elements == n + 1) {
            long ttl = atol(k[0].lease);
            for (size_t i = 0; i < n; i++) {
                rs__hold_granted(&k[i], hold[i], fence_of(r->element[i + 1]), ttl, sent);
                rs__handle_add(h[i], hold[i]);
                hold[i] = NULL;
            }
        } else if (verdict == 0 && r->elements >= 3 &&
                   r->element[2]->type == REDIS_REPLY_INTEGER && r->element[2]->integer > 0) {
            rc = EBUSY; /* held; when only waiters stand in the way, mutex.lua decides */
        } else if (verdict == 0) {
            rc = -1;
        } else if (verdict == -1) {
            rc = -1;
        } else {
            rc = rs__fail(c, RS_ESERVER, "unexpected reply from the multilock script");
        }
        freeReplyObject(r);
    }
    for (size_t i = 0; hold && i < n; i++)
        rs__hold_discard(hold[i]);
    free(hold);
    free(k);
    rs__leave(c);
    return rc;
}
