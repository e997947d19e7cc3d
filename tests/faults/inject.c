/*
 * inject.c - the faults on the data redis-server (the process faults, kill and stop, are
 * plain kill(2) calls in main.c; the restart is ts_server_kill + ts_server_restart).
 *
 * The driver keeps one connection to the data server for its commands; CLIENT KILL skips
 * the caller's own connection (SKIPME yes is the default), so it stays. Any command that
 * finds that connection broken (after a restart, during a stall) reconnects once.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "redis_server.h"

static redisReply *data_cmd(redisContext **conn, ts_server_t *data, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!*conn) {
            *conn = ts_connect(data);
            if (!*conn)
                return NULL;
        }
        va_list ap;
        va_start(ap, fmt);
        redisReply *r = redisvCommand(*conn, fmt, ap);
        va_end(ap);
        if (r)
            return r;
        redisFree(*conn);
        *conn = NULL;
    }
    return NULL;
}

static int ok_reply(redisReply *r, const char *what)
{
    if (!r) {
        fprintf(stderr, "faults: %s: no reply from the data server\n", what);
        return -1;
    }
    int rc = r->type == REDIS_REPLY_ERROR ? -1 : 0;
    if (rc)
        fprintf(stderr, "faults: %s: %s\n", what, r->str);
    freeReplyObject(r);
    return rc;
}

int inject_pause(redisContext **conn, ts_server_t *data, long ms)
{
    return ok_reply(data_cmd(conn, data, "CLIENT PAUSE %ld ALL", ms), "CLIENT PAUSE");
}

int inject_debug_sleep(ts_server_t *data, long ms, redisContext **pending)
{
    /* its own connection: the reply comes when the server wakes; the driver collects it */
    redisContext *c = ts_connect(data);
    if (!c)
        return -1;
    char secs[32];
    snprintf(secs, sizeof secs, "%.3f", (double)ms / 1000.0);
    redisAppendCommand(c, "DEBUG SLEEP %s", secs);
    int done = 0;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK) {
            redisFree(c);
            return -1;
        }
    *pending = c;
    return 0;
}

int inject_client_kill_one(redisContext **conn, ts_server_t *data, uint64_t *rng)
{
    redisReply *me = data_cmd(conn, data, "CLIENT ID");
    if (!me)
        return -1;
    long long myid = me->type == REDIS_REPLY_INTEGER ? me->integer : -1;
    freeReplyObject(me);
    redisReply *r = data_cmd(conn, data, "CLIENT LIST");
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    long long ids[1024];
    int n = 0;
    for (char *line = r->str; line && *line && n < 1024;) {
        char *nl = strchr(line, '\n');
        long long id;
        if (sscanf(line, "id=%lld", &id) == 1 && id != myid)
            ids[n++] = id;
        line = nl ? nl + 1 : NULL;
    }
    freeReplyObject(r);
    if (n == 0)
        return 0;
    long long victim = ids[rnd_range(rng, 0, n - 1)];
    return ok_reply(data_cmd(conn, data, "CLIENT KILL ID %lld", victim), "CLIENT KILL ID");
}

int inject_client_kill_type(redisContext **conn, ts_server_t *data, const char *type)
{
    return ok_reply(data_cmd(conn, data, "CLIENT KILL TYPE %s", type), "CLIENT KILL TYPE");
}

int inject_script_flush(redisContext **conn, ts_server_t *data)
{
    return ok_reply(data_cmd(conn, data, "SCRIPT FLUSH"), "SCRIPT FLUSH");
}

int inject_failover(ts_server_t *s, const char *name)
{
    redisContext *c = ts_connect(s);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "SENTINEL FAILOVER %s", name);
    /* INPROG or NOGOODSLAVE while the previous failover settles: not injected, not counted */
    int rc = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0 ? 0 : -1;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return rc;
}

int scan_ttls(ts_server_t *data, const char *prefix, long *keys, long *no_ttl)
{
    redisContext *c = ts_connect(data);
    if (!c)
        return -1;
    *keys = *no_ttl = 0;
    char cursor[32] = "0";
    int printed = 0;
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s:* COUNT 500", cursor, prefix);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r)
                freeReplyObject(r);
            redisFree(c);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *ks = r->element[1];
        for (size_t i = 0; i < ks->elements; i++) {
            redisReply *t = redisCommand(c, "PTTL %b", ks->element[i]->str, ks->element[i]->len);
            if (!t) {
                freeReplyObject(r);
                redisFree(c);
                return -1;
            }
            if (t->type == REDIS_REPLY_INTEGER && t->integer != -2)
                (*keys)++;
            if (t->type == REDIS_REPLY_INTEGER && t->integer == -1) {
                (*no_ttl)++;
                if (printed++ < 5)
                    printf("    I7: key %s has no TTL\n", ks->element[i]->str);
            }
            freeReplyObject(t);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    redisFree(c);
    return 0;
}
