/*
 * fuzz_info.c - libFuzzer target: decoding the "info" reply of every kind's script, as
 * rs_inspect does (rs__decode_info, primitives/info_decode.c; make fuzz).
 *
 * The input is not RESP (fuzz_grant.c covers hiredis's reader): it is read as a small
 * program that builds a redisReply tree directly, so every shape is reachable in a few
 * bytes, including ones hiredis never produces (an array of N elements whose vector is NULL,
 * NULL elements, strings without a buffer). Byte 0 picks the kind ("mutex" ... "latch", or a
 * name too long for rs_info_t.kind, or NULL); then each node is one byte of type and payload:
 *
 *   type % 8: 0-1 string (length byte, bytes; some are decimal numbers), 2-3 integer (8
 *   bytes), 4 array (count byte, then that many nodes; a count of 255 leaves element NULL),
 *   5 nil, 6 status, 7 error. At depth 0 the count is biased to 9 + count % 12 half of the
 *   time, so the decoder's fill path is reached often. A missing byte ends the input: the
 *   node becomes nil, or a NULL element of its array.
 *
 * Checks, beyond ASan/UBSan: 0 exactly for an array of at least 9 elements with a vector,
 * else RS_ESERVER with *out all zero; on 0, out->kind and every holder are NUL-terminated
 * within their arrays, and nholders, waiters, exists and writer follow the documented rules.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct input {
    const uint8_t *p;
    size_t n;
} input_t;

static int next(input_t *in, uint8_t *b)
{
    if (in->n == 0)
        return 0;
    *b = *in->p++;
    in->n--;
    return 1;
}

/* Frees what build made (not freeReplyObject: elements may be NULL here). */
static void tree_free(redisReply *r)
{
    if (!r)
        return;
    if (r->type == REDIS_REPLY_ARRAY && r->element)
        for (size_t i = 0; i < r->elements; i++)
            tree_free(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}

static redisReply *build(input_t *in, int depth)
{
    uint8_t t;
    if (!next(in, &t))
        return NULL;
    redisReply *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    switch (t % 8) {
    case 0:
    case 1:
    case 6:
    case 7: {
        r->type = t % 8 == 6 ? REDIS_REPLY_STATUS : t % 8 == 7 ? REDIS_REPLY_ERROR
                                                               : REDIS_REPLY_STRING;
        uint8_t len = 0;
        next(in, &len);
        if (t & 0x80) {
            /* a decimal number, the way Lua strings of numbers arrive */
            char num[32];
            long long v = (long long)len - 128;
            if (t & 0x40)
                v *= 1000000007LL;
            int k = snprintf(num, sizeof num, "%lld", v);
            r->str = malloc((size_t)k + 1);
            if (r->str)
                memcpy(r->str, num, (size_t)k + 1);
            r->len = (size_t)k;
        } else if (len != 255) { /* 255: a string with no buffer at all */
            size_t n = len < in->n ? len : in->n;
            r->str = malloc(n + 1);
            if (r->str) {
                memcpy(r->str, in->p, n);
                r->str[n] = '\0';
            }
            r->len = n;
            in->p += n;
            in->n -= n;
        }
        break;
    }
    case 2:
    case 3: {
        r->type = REDIS_REPLY_INTEGER;
        uint64_t v = 0;
        for (int i = 0; i < 8; i++) {
            uint8_t b = 0;
            next(in, &b);
            v = v << 8 | b;
        }
        r->integer = (long long)v;
        break;
    }
    case 4: {
        r->type = REDIS_REPLY_ARRAY;
        uint8_t cnt = 0;
        next(in, &cnt);
        if (cnt == 255) {
            r->elements = 9; /* a count without a vector */
            break;
        }
        size_t n = depth == 0 && (t & 0x80) ? 9 + cnt % 12u : (size_t)cnt % 24u;
        if (depth >= 4)
            n = 0;
        r->elements = n;
        if (n) {
            r->element = calloc(n, sizeof *r->element);
            if (!r->element)
                r->elements = 0;
            for (size_t i = 0; i < r->elements; i++)
                r->element[i] = build(in, depth + 1);
        }
        break;
    }
    default:
        r->type = REDIS_REPLY_NIL;
        break;
    }
    return r;
}

static const char *const kinds[] = {"mutex", "rmutex", "rwlock", "sem", "latch",
                                    "a-kind-name-longer-than-rs_info_t.kind", NULL};

static void fail(const char *what, const redisReply *r, int rc)
{
    fprintf(stderr, "fuzz_info: %s (type %d, %zu elements, rc %d)\n", what, r ? r->type : -1,
            r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0, rc);
    abort();
}

static int terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

static void check(const char *kind, const redisReply *r)
{
    rs_info_t out, zero;
    memset(&out, 0x5a, sizeof out); /* garbage: the decoder must set everything */
    memset(&zero, 0, sizeof zero);
    int rc = rs__decode_info(kind, r, &out);
    int good = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 9 && r->element;
    if (rc == RS_ESERVER) {
        if (good)
            fail("RS_ESERVER for an array of 9 or more", r, rc);
        if (memcmp(&out, &zero, sizeof out) != 0)
            fail("out not zeroed after RS_ESERVER", r, rc);
        return;
    }
    if (rc != 0)
        fail("unexpected error code", r, rc);
    if (!good)
        fail("0 for a reply that is not an array of 9 or more", r, rc);
    if (!terminated(out.kind, sizeof out.kind))
        fail("kind not terminated", r, rc);
    if (strncmp(out.kind, kind ? kind : "", sizeof out.kind - 1) != 0)
        fail("kind not copied", r, rc);
    for (int k = 0; k < RS_INFO_HOLDERS; k++)
        if (!terminated(out.holders[k], sizeof out.holders[k]))
            fail("holder not terminated", r, rc);
    if ((out.exists != 0 && out.exists != 1) || (out.writer != 0 && out.writer != 1))
        fail("exists or writer is neither 0 nor 1", r, rc);
    const redisReply *e1 = r->element[1];
    if (e1 && e1->type == REDIS_REPLY_INTEGER && e1->integer <= 0 && out.nholders != 0)
        fail("nholders from a count <= 0", r, rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input_t in = {data, size};
    uint8_t k = 0;
    next(&in, &k);
    const char *kind = kinds[k % (sizeof kinds / sizeof kinds[0])];
    redisReply *r = build(&in, 0);
    check(kind, r);
    tree_free(r);
    return 0;
}
