/*
 * checker.c - the checker's scripts and the hiredis helpers of the suite.
 *
 * The fenced store (testing.md, "The checker"): a per-name highest token hi:NAME. A fenced
 * read under token f is refused if f < hi, else raises hi to f and returns the counter; a
 * fenced write under f is refused if f < hi, else raises hi, compare-and-sets the counter
 * (a value other than the one the section read counts in bad:NAME: a lost increment) and
 * counts the accepted write in acc:NAME. Tokens are about 1.7e15 (server microseconds), well
 * inside the 2^53 that Lua's doubles hold exactly.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faults.h"

const char *prim_names[] = {"mutex", "rmutex", "rwlock", "sem", "latch", "once", "barrier", "cond"};

const char *const fault_names[F_COUNT] = {
    "kill9-holder", "kill9-waiter", "stop-holder",  "stop-any",
    "restart-aof",  "restart-lose", "client-pause", "debug-sleep",
    "client-kill",  "kill-normal",  "kill-pubsub",  "script-flush",
    "failover",     "net-blackhole", "net-oneway", "net-slow-loss",
    "net-flap",     "net-rl-part", "net-split",
};

const char *const viol_names[V_COUNT] = {"I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9",
                                           "I10", "lost?", "live", "api"};

const char CK_FREAD[] =
    "local hi = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
    "local f = tonumber(ARGV[1])\n"
    "if f < hi then return {0, redis.call('GET', KEYS[1])} end\n"
    "if f > hi then redis.call('SET', KEYS[1], ARGV[1]) end\n"
    "return {1, tonumber(redis.call('GET', KEYS[2]) or '0')}\n";

const char CK_FWRITE[] =
    "local hi = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
    "local f = tonumber(ARGV[1])\n"
    "if f < hi then return 0 end\n"
    "if f > hi then redis.call('SET', KEYS[1], ARGV[1]) end\n"
    "local cur = redis.call('GET', KEYS[2]) or '0'\n"
    "if cur ~= ARGV[2] then redis.call('INCR', KEYS[4]) end\n"
    "redis.call('SET', KEYS[2], ARGV[3])\n"
    "redis.call('INCR', KEYS[3])\n"
    "return 1\n";

const char CK_ENTER[] =
    "redis.call('SET', KEYS[1], ARGV[1])\n"
    "local c = redis.call('GET', KEYS[2])\n"
    "if c then redis.call('DEL', KEYS[2]) end\n"
    "return c\n";

redisContext *ck_connect(int port)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        fprintf(stderr, "faults: cannot connect to the checker on port %d: %s\n", port,
                c ? c->errstr : "out of memory");
        exit(3);
    }
    struct timeval io = {30, 0};
    redisSetTimeout(c, io);
    return c;
}

redisReply *ck_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        fprintf(stderr, "faults[%d]: checker connection failed: %s\n", (int)getpid(), c->errstr);
        exit(3);
    }
    if (r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "faults[%d]: checker error: %s (%s)\n", (int)getpid(), r->str, fmt);
    return r;
}

long long ck_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        fprintf(stderr, "faults[%d]: checker connection failed: %s\n", (int)getpid(), c->errstr);
        exit(3);
    }
    long long v = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

void ck_load(redisContext *c, const char *body, char *sha)
{
    redisReply *r = ck_cmd(c, "SCRIPT LOAD %s", body);
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        fprintf(stderr, "faults: SCRIPT LOAD on the checker failed\n");
        exit(3);
    }
    memcpy(sha, r->str, 40);
    sha[40] = '\0';
    freeReplyObject(r);
}
