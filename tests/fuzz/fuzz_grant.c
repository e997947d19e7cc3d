/*
 * fuzz_grant.c - libFuzzer target: decoding the acquiring scripts' replies (make fuzz).
 *
 * The input is raw RESP, as Redis would send it. hiredis's own reader (redisReaderCreate,
 * redisReaderFeed, redisReaderGetReply) turns it into up to 8 redisReply trees, exactly as
 * a connection would, and each goes to rs__decode_grant (lib/handle.c), the decoder of every
 * "acq" and "cancel" reply of every primitive ({1, fence, ttl} granted | {0, holder ttl,
 * queued} busy | {-1} EDEADLK). rs__decode_grant only reads k->h->c (for rs__fail, which
 * accepts NULL), k->h->kind and k->h->name, so a static handle without a client stands in.
 *
 * Checks, beyond ASan/UBSan: only 0, EDEADLK or RS_ESERVER; EDEADLK only for an array whose
 * first element is the integer -1; a grant only for an array of at least 3 whose first
 * element is the integer 1; busy only for a first element 0, with retry_ms > 0 (the wait
 * loop sleeps that long) and queued 0 or 1.
 *
 * rs_inspect's "info" reply has its own target (fuzz_info.c). The other decoders (the latch,
 * rmutex and semaphore replies, the watchdog's renewals) sit inside functions that first
 * need a live connection, so they cannot be reached from here without a server.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static rs_handle_t g_handle = {.c = NULL, .kind = "mutex", .name = "x", .namelen = 1};

static void fail(const char *what, const redisReply *r, int rc)
{
    fprintf(stderr, "fuzz_grant: %s (type %d, %zu elements, rc %d)\n", what, r->type,
            r->type == REDIS_REPLY_ARRAY ? r->elements : 0, rc);
    abort();
}

static int first_int(const redisReply *r, long long v)
{
    return r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == v;
}

static void decode(const redisReply *r)
{
    rs_call_t k;
    memset(&k, 0, sizeof k);
    k.h = &g_handle;
    rs_attempt_t at;
    memset(&at, 0x5a, sizeof at); /* garbage: the decoder must set what it reports */
    int rc = rs__decode_grant(&k, r, &at);
    if (rc == EDEADLK) {
        if (!first_int(r, -1))
            fail("EDEADLK without {-1}", r, rc);
    } else if (rc == 0) {
        if (at.done != 0 && at.done != 1)
            fail("done is neither 0 nor 1", r, rc);
        if (at.done && (!first_int(r, 2) || at.granted))
            fail("done without {2}, or done and granted", r, rc);
        if (at.done) {
            /* nothing else to check: no hold, no wait */
        } else if (at.granted == 1) {
            if (!first_int(r, 1) || r->elements < 3)
                fail("granted without {1, fence, ttl}", r, rc);
        } else if (at.granted == 0) {
            if (!first_int(r, 0))
                fail("busy without {0, ...}", r, rc);
            if (at.retry_ms <= 0)
                fail("busy with retry_ms <= 0", r, rc);
            if (at.queued != 0 && at.queued != 1)
                fail("queued is neither 0 nor 1", r, rc);
        } else {
            fail("granted is neither 0 nor 1", r, rc);
        }
    } else if (rc != RS_ESERVER) {
        fail("unexpected error code", r, rc);
    }
}

/* hiredis 0.14 allocates an array's element pointers as soon as it reads "*N" (N up to
 * 2^32-1 even after the CVE-2021-32765 fix), so "*1777777777" makes it ask for 14 GB, which
 * libFuzzer reports as out-of-memory. That is hiredis's behaviour, not redisync's: inputs
 * with a multi-bulk count above MAX_ELEMENTS anywhere are skipped. */
#define MAX_ELEMENTS 4096

static int has_huge_count(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        if (data[i] != '*')
            continue;
        unsigned long long n = 0;
        for (size_t j = i + 1; j < size && data[j] >= '0' && data[j] <= '9'; j++)
            if ((n = n * 10 + (data[j] - '0')) > MAX_ELEMENTS)
                return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (has_huge_count(data, size))
        return 0;
    redisReader *rd = redisReaderCreate();
    if (!rd)
        return 0;
    if (redisReaderFeed(rd, (const char *)data, size) == REDIS_OK) {
        for (int i = 0; i < 8; i++) {
            void *reply = NULL;
            if (redisReaderGetReply(rd, &reply) != REDIS_OK || !reply)
                break;
            decode(reply);
            freeReplyObject(reply);
        }
    }
    redisReaderFree(rd);
    return 0;
}
