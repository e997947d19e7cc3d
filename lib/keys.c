/*
 * keys.c - names of the Redis keys of a primitive.
 *
 * Every key of one primitive is "PREFIX:{NAME}:KIND[:SUFFIX]", so they share the hash tag
 * {NAME} and live in one Cluster slot, and one script can touch them all. The kind is part
 * of every key: a mutex and a semaphore of the same name are different objects.
 *
 * A name that starts with '}' would make the tag empty (Redis would then hash the whole key
 * and the keys of one name would scatter over slots). Such names, and names starting with
 * '\', get a '\' in front: the mapping stays one-to-one and the tag is never empty.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

char *rs__key(const rs_client_t *c, const char *name, size_t namelen, const char *kind,
              const char *suffix, size_t *len)
{
    int esc = namelen > 0 && (name[0] == '}' || name[0] == '\\');
    size_t kl = strlen(kind), sl = suffix ? strlen(suffix) + 1 : 0;
    size_t n = c->prefix_len + 2 + (size_t)esc + namelen + 2 + kl + sl;
    char *k = malloc(n + 1);
    if (!k)
        return NULL;
    char *p = k;
    memcpy(p, c->prefix, c->prefix_len);
    p += c->prefix_len;
    *p++ = ':';
    *p++ = '{';
    if (esc)
        *p++ = '\\';
    memcpy(p, name, namelen);
    p += namelen;
    *p++ = '}';
    *p++ = ':';
    memcpy(p, kind, kl);
    p += kl;
    if (suffix) {
        *p++ = ':';
        memcpy(p, suffix, sl - 1);
        p += sl - 1;
    }
    *p = '\0';
    *len = (size_t)(p - k);
    return k;
}
