/*
 * redis.c - the load test's view of its redis-server (load.h): used_memory, the command
 * counts of INFO commandstats, and what the keyspace holds after the run.
 *
 * Command counts: Redis counts the commands a script runs (redis.call) in commandstats
 * too, so the totals are split. "Client" commands are the ones only a client sends (the
 * list below); the driver's own INFO and CONFIG are left out; everything else ran inside
 * the scripts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

long long ld_used_memory(const ts_server_t *s)
{
    return ts_info_ll(s, "memory", "used_memory", NULL);
}

static int is_client_command(const char *name)
{
    static const char *const client[] = {"evalsha", "eval", "evalsha_ro", "eval_ro",
                                         "subscribe", "unsubscribe", "psubscribe",
                                         "punsubscribe", "ping", "select", "auth", "wait",
                                         "hello", "quit", "multi", "exec", NULL};
    if (strncmp(name, "script|", 7) == 0 || strncmp(name, "client|", 7) == 0)
        return 1;
    for (int i = 0; client[i]; i++)
        if (strcmp(name, client[i]) == 0)
            return 1;
    return 0;
}

static int is_driver_command(const char *name)
{
    return strcmp(name, "info") == 0 || strncmp(name, "config|", 7) == 0;
}

int ld_commandstats(const ts_server_t *s, ld_redis_t *out)
{
    redisContext *c = ts_connect(s);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        redisFree(c);
        return -1;
    }
    struct { char name[48]; long long calls; } top[4] = {{"", 0}};
    char *save = NULL;
    for (char *line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char name[48];
        long long calls;
        if (sscanf(line, "cmdstat_%47[^:]:calls=%lld", name, &calls) != 2 ||
            is_driver_command(name))
            continue;
        out->calls_total += calls;
        if (is_client_command(name))
            out->calls_client += calls;
        if (strncmp(name, "eval", 4) == 0)
            out->calls_evalsha += calls;
        for (int i = 0; i < 4; i++)
            if (calls > top[i].calls) {
                memmove(&top[i + 1], &top[i], (size_t)(3 - i) * sizeof top[0]);
                snprintf(top[i].name, sizeof top[i].name, "%s", name);
                top[i].calls = calls;
                break;
            }
    }
    size_t off = 0;
    out->top[0] = '\0';
    for (int i = 0; i < 4 && top[i].calls > 0 && off < sizeof out->top; i++)
        off += (size_t)snprintf(out->top + off, sizeof out->top - off, "%s%s %lld",
                                i ? ", " : "", top[i].name, top[i].calls);
    freeReplyObject(r);
    redisFree(c);
    return 0;
}

static int ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

/* Counts the keys by what they are: fencing counters (PREFIX:{N}:KIND:fence, 30 days) and
 * semaphore sizes (PREFIX:{N}:sem, 7 days) are meant to stay; anything else must expire. A
 * key without a TTL is a leak whatever it is (docs/scripts.md: every key has one). */
int ld_keys(const ts_server_t *s, ld_redis_t *out)
{
    redisContext *c = ts_connect(s);
    if (!c)
        return -1;
    out->keys_after = out->keys_fence = out->keys_semsize = out->keys_other = 0;
    out->keys_no_ttl = 0;
    out->other_key[0] = '\0';
    char cursor[32] = "0";
    int rc = 0;
    do {
        redisReply *r = redisCommand(c, "SCAN %s COUNT 1000", cursor);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r)
                freeReplyObject(r);
            rc = -1;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const redisReply *k = keys->element[i];
            out->keys_after++;
            redisReply *t = redisCommand(c, "PTTL %b", k->str, k->len);
            if (t && t->type == REDIS_REPLY_INTEGER && t->integer == -1)
                out->keys_no_ttl++;
            if (t)
                freeReplyObject(t);
            if (ends_with(k->str, k->len, ":fence")) {
                out->keys_fence++;
            } else if (ends_with(k->str, k->len, "}:sem")) {
                out->keys_semsize++;
            } else {
                out->keys_other++;
                snprintf(out->other_key, sizeof out->other_key, "%.*s", (int)k->len, k->str);
            }
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    redisFree(c);
    return rc;
}
