/*
 * fuzz_keys.c - libFuzzer target: key names of primitives (rs__key, lib/keys.c; make fuzz).
 *
 * Input: byte 0 picks a prefix (one of a few, or, when odd, bytes 1..8 without braces, NULs
 * and control characters); the rest, up to a NUL, is the primitive's name (1..RS_NAME_MAX
 * bytes, as rs__check_name allows). rs__key only reads the client's prefix, so a zeroed
 * rs_client_t with a prefix stands in.
 *
 * What keys.c promises, checked for every kind and key suffix the primitives use:
 *  - the hash tag as Redis computes it (first '{', then the first '}' after it) is never
 *    empty, and it is the same for every key of one name, so one script can touch them all
 *    (one Cluster slot);
 *  - the mapping is one-to-one: the name can be recovered from the key (strip the prefix,
 *    ":{", the "}:KIND[:SUFFIX]" end and the escaping '\' before a leading '}' or '\').
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const kinds[] = {"mutex", "rmutex", "rwlock", "sem", "latch"};
static const char *const suffixes[] = {NULL, "fence", "q", "qi", "rd", "ri", "holders", "hi",
                                       "ids"};
static const char *const prefixes[] = {"rs", "a:b", "x", "p-q", "\\", "pre:fix:"};

static void fail(const char *what, const char *key, size_t klen)
{
    fprintf(stderr, "fuzz_keys: %s: key \"%.*s\"\n", what, (int)klen, key);
    abort();
}

/* The part of key Redis hashes: the hash tag if there is a non-empty one. */
static const char *hash_tag(const char *key, size_t len, size_t *tlen)
{
    const char *open = memchr(key, '{', len);
    if (!open)
        return NULL;
    const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
    if (!close || close == open + 1)
        return NULL;
    *tlen = (size_t)(close - open - 1);
    return open + 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    char prefix[16];
    if (data[0] & 1) {
        size_t n = 0;
        for (size_t i = 1; i < size && i <= 8; i++)
            if (data[i] >= 0x20 && data[i] != '{' && data[i] != '}' && data[i] != 0x7f)
                prefix[n++] = (char)data[i];
        if (n == 0)
            prefix[n++] = 'p';
        prefix[n] = '\0';
        data += size > 9 ? 9 : size, size -= size > 9 ? 9 : size;
    } else {
        snprintf(prefix, sizeof prefix, "%s",
                 prefixes[(data[0] >> 1) % (sizeof prefixes / sizeof prefixes[0])]);
        data++, size--;
    }
    /* braces are refused in prefixes (client.c check_config) */
    if (strpbrk(prefix, "{}"))
        return 0;
    size_t namelen = strnlen((const char *)data, size);
    if (namelen == 0 || namelen > RS_NAME_MAX)
        return 0;
    char name[RS_NAME_MAX + 1];
    memcpy(name, data, namelen);
    name[namelen] = '\0';

    rs_client_t c;
    memset(&c, 0, sizeof c);
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);

    char tag0[RS_NAME_MAX + 2];
    size_t tag0len = 0;
    int have_tag0 = 0;
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
        for (size_t si = 0; si < sizeof suffixes / sizeof suffixes[0]; si++) {
            size_t klen = 0;
            char *key = rs__key(&c, name, namelen, kinds[ki], suffixes[si], &klen);
            if (!key)
                return 0;
            if (strlen(key) != klen)
                fail("length mismatch", key, strlen(key));
            size_t tlen;
            const char *tag = hash_tag(key, klen, &tlen);
            if (!tag)
                fail("empty hash tag", key, klen);
            if (!have_tag0) {
                memcpy(tag0, tag, tlen);
                tag0len = tlen;
                have_tag0 = 1;
            } else if (tlen != tag0len || memcmp(tag, tag0, tlen) != 0) {
                fail("keys of one name have different hash tags", key, klen);
            }
            /* recover the name */
            size_t pl = c.prefix_len;
            if (klen < pl + 2 || memcmp(key, prefix, pl) != 0 || key[pl] != ':' ||
                key[pl + 1] != '{')
                fail("key does not start with PREFIX:{", key, klen);
            char end[64];
            int el = snprintf(end, sizeof end, "}:%s%s%s", kinds[ki], suffixes[si] ? ":" : "",
                              suffixes[si] ? suffixes[si] : "");
            if (klen < pl + 2 + (size_t)el ||
                memcmp(key + klen - (size_t)el, end, (size_t)el) != 0)
                fail("key does not end with }:KIND[:SUFFIX]", key, klen);
            const char *nm = key + pl + 2;
            size_t nl = klen - pl - 2 - (size_t)el;
            if (nl >= 2 && nm[0] == '\\' && (nm[1] == '}' || nm[1] == '\\'))
                nm++, nl--;
            else if (nl >= 1 && (nm[0] == '}' || nm[0] == '\\'))
                fail("a leading '}' or '\\' is not escaped", key, klen);
            if (nl != namelen || memcmp(nm, name, namelen) != 0)
                fail("the name cannot be recovered from the key", key, klen);
            free(key);
        }
    }
    return 0;
}
