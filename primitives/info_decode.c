/*
 * info_decode.c - rs__decode_info: the "info" reply of every kind's script, decoded into an
 * rs_info_t (used by rs_inspect in inspect.c).
 *
 * Kept apart from inspect.c, with no client and no connection, so that the decoding can be
 * fuzzed on its own (tests/fuzz/fuzz_info.c) with any reply tree. The reply shape is shared
 * by all kinds (docs/scripts.md): {exists, nholders, ttl, fence, waiters, writer, size, free,
 * count, acqid...}. A new field goes at the end of the fixed part only if every script
 * answers it; holders' acquisition ids follow.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Element i as an integer (a decimal string counts too); -1 when absent or of another type,
 * which the callers read as "none". */
static long long int_at(const redisReply *r, size_t i)
{
    if (i >= r->elements || !r->element || !r->element[i])
        return -1;
    const redisReply *e = r->element[i];
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    if (e->type == REDIS_REPLY_STRING && e->str)
        return strtoll(e->str, NULL, 10);
    return -1;
}

int rs__decode_info(const char *kind, const redisReply *r, rs_info_t *out)
{
    if (!out)
        return EINVAL;
    memset(out, 0, sizeof *out);
    /* validate before writing anything else: a failed call leaves out zeroed */
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 9 || !r->element)
        return RS_ESERVER;
    snprintf(out->kind, sizeof out->kind, "%s", kind ? kind : "");
    out->exists = int_at(r, 0) > 0;
    out->nholders = (unsigned)(int_at(r, 1) > 0 ? int_at(r, 1) : 0);
    out->remaining_ms = (long)int_at(r, 2);
    long long f = int_at(r, 3);
    out->fence = f > 0 ? (uint64_t)f : 0;
    out->waiters = (unsigned)(int_at(r, 4) > 0 ? int_at(r, 4) : 0);
    out->writer = int_at(r, 5) > 0;
    out->size = (long)int_at(r, 6);
    out->free = (long)int_at(r, 7);
    out->count = (long)int_at(r, 8);
    for (size_t i = 9, k = 0; i < r->elements && k < RS_INFO_HOLDERS; i++, k++) {
        const redisReply *e = r->element[i];
        if (e && e->type == REDIS_REPLY_STRING && e->str) {
            /* the route "PUBLICID:N" only: the secret after it is what makes a grant message
             * unforgeable (lib/hold.c), and inspection must not hand it out */
            const char *sep = memchr(e->str, RS_ACQID_SEP, e->len);
            int len = (int)(sep ? (size_t)(sep - e->str) : e->len);
            snprintf(out->holders[k], sizeof out->holders[k], "%.*s", len, e->str);
        }
    }
    return 0;
}
