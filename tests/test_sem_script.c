/*
 * test_sem_script.c - semaphore tests of its Lua script called directly (the
 * protocol, idempotence, handoff, TTLs, the fast paths) and of WRONGTYPE through the API.
 * (moved from test_sem.c; suite "sem", shared helpers in test_sem.h).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "scripts.h"
#include "test_assert.h"
#include "test_sem.h"

/* ------------------------------------------------------------------------------------- */
/* The script itself: idempotence of retried calls, FIFO and handoff, TTLs, WRONGTYPE     */

/* EVAL of the semaphore script on name with the common arguments. */
static redisReply *sx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *mode, const char *arg, const char *init)
{
    static const char *const sfx[] = {"", ":holders", ":hi", ":fence", ":q", ":qi"};
    char keys[6][128];
    const char *argv[24];
    size_t lens[24];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)rs_script_semaphore.body;
    argv[n++] = "6";
    for (int i = 0; i < 6; i++) {
        snprintf(keys[i], sizeof keys[i], "rs:{%s}:sem%s", name, sfx[i]);
        argv[n++] = keys[i];
    }
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "5000";       /* lease */
    argv[n++] = "rs:client:"; /* channel prefix */
    argv[n++] = mode ? mode : "q";
    argv[n++] = "100";        /* max waiters */
    argv[n++] = "10000";      /* queue entry lease */
    argv[n++] = arg ? arg : "1";
    argv[n++] = init ? init : "3";
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_semaphore.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    return r;
}

static long long sx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *arg)
{
    redisReply *r = sx(k, name, op, tok, acq, NULL, arg, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d %s", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* acq (or cancel) reply: element 0; the fence of a grant copied into fence, element 2 into
 * *third. */
static long long sx_acq(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *mode, const char *n, char *fence,
                        size_t flen, long long *third)
{
    redisReply *r = sx(k, name, op, tok, acq, mode, n, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "%s: reply type %d %s", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    cr_assert_geq(r->elements, 1);
    long long k0 = r->element[0]->integer;
    if (fence && flen)
        fence[0] = '\0';
    if (third)
        *third = -99;
    if (r->elements >= 3) {
        redisReply *e = r->element[1];
        if (fence && flen)
            snprintf(fence, flen, "%s", e->type == REDIS_REPLY_STRING ? e->str : "?");
        if (third && r->element[2]->type == REDIS_REPLY_INTEGER)
            *third = r->element[2]->integer;
    }
    freeReplyObject(r);
    return k0;
}

/* Permits taken by live holders, from the "val" op. */
static long long sx_taken(redisContext *k, const char *name)
{
    redisReply *r = sx(k, name, "val", "tokZ", "pz:1", NULL, NULL, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "val: reply type %d", r->type);
    cr_assert_eq(r->elements, 2);
    long long t = r->element[1]->integer;
    freeReplyObject(r);
    return t;
}

static int holder_is(const ts_server_t *s, const char *name, const char *acq, int count)
{
    char buf[128];
    char *v = ts_cmd_str(s, buf, sizeof buf, "HGET rs:{%s}:sem:hi %s", name, acq);
    if (count < 0)
        return v == NULL;
    return v && atoi(v) == count;
}

Test(sem, script_protocol)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    char f1[32], f1b[32], fx[32];
    long long third;

    /* absent and attach-only */
    redisReply *r = sx(k, "sc", "init", "tokA", "pa:0", NULL, NULL, "0");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == -1, "init 0 of an absent one");
    freeReplyObject(r);
    r = sx(k, "sc", "acq", "tokA", "pa:0", "q", "1", "0");
    cr_expect(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "RSNOENT", 7) == 0, "acq, absent");
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{sc}:sem rs:{sc}:sem:q rs:{sc}:sem:holders"), 0);

    /* acq of 2 (size 3), twice with one id: one grant, one token */
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokA", "pa:1", "q", "2", f1, sizeof f1, &third), 1);
    cr_expect_gt(third, 0, "ttl of the grant");
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokA", "pa:1", "q", "2", f1b, sizeof f1b, NULL), 1,
                 "a retried acq");
    cr_expect_str_eq(f1b, f1);
    cr_expect_eq(sx_taken(k, "sc"), 2, "a retried acq took permits twice");
    /* the same owner may hold another acquisition */
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokA", "pa:2", "t", "1", fx, sizeof fx, NULL), 1);
    cr_expect_gt(strtoull(fx, NULL, 10), strtoull(f1, NULL, 10));
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:2", NULL), 1);
    cr_expect_eq(sx_taken(k, "sc"), 2);

    /* a try for 2 with 1 free: busy, never queued */
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokB", "pb:1", "t", "2", NULL, 0, &third), 0);
    cr_expect_eq(third, 0);
    cr_expect_eq(zcard_q(&s, "sc"), 0);
    /* queued: B for 2, then C for 1 (behind B although 1 is free) */
    r = sx(k, "sc", "acq", "tokB", "pb:1", "q", "2", NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_expect_eq(r->element[0]->integer, 0);
    cr_expect_gt(r->element[1]->integer, 0, "retry time");
    cr_expect_leq(r->element[1]->integer, 5000, "retry time beyond the holder's lease");
    cr_expect_eq(r->element[2]->integer, 1, "queued");
    freeReplyObject(r);
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokC", "pc:1", "q", "1", NULL, 0, &third), 0);
    cr_expect_eq(third, 1);
    cr_expect_eq(zcard_q(&s, "sc"), 2);
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokE", "pe:1", "t", "1", NULL, 0, NULL), 0,
                 "a try jumped the queue");
    r = sx(k, "sc", "acq", "tokD", "pd:1", "q", "4", NULL);
    cr_expect(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "RSINVAL", 7) == 0, "4 of 3");
    freeReplyObject(r);
    cr_expect_eq(zcard_q(&s, "sc"), 2);
    cr_expect_eq(sx_int(k, "sc", "qrenew", "tokB", "pb:1", "2"), 1);

    /* give back 1 of A's 2 (A keeps 1): B (2) fits and is served, C waits; twice: once */
    cr_expect_eq(sx_int(k, "sc", "give", "tokX", "pa:1", "1"), 0, "give by another owner");
    cr_expect_eq(sx_int(k, "sc", "give", "tokA", "pa:1", "1"), 1);
    cr_expect(holder_is(&s, "sc", "pb:1", 2), "B was not handed its 2 permits");
    cr_expect(holder_is(&s, "sc", "pa:1", 1));
    cr_expect_eq(sx_int(k, "sc", "give", "tokA", "pa:1", "1"), 1, "a retried give");
    cr_expect(holder_is(&s, "sc", "pa:1", 1), "a retried give gave back twice");
    cr_expect_eq(sx_taken(k, "sc"), 3);
    cr_expect_eq(sx_int(k, "sc", "qrenew", "tokB", "pb:1", "2"), 2, "qrenew after the handoff");
    char fb[32];
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokB", "pb:1", "q", "2", fb, sizeof fb, NULL), 1,
                 "B's retry finds its grant");
    cr_expect_gt(strtoull(fb, NULL, 10), strtoull(fx, NULL, 10));
    cr_expect_eq(zcard_q(&s, "sc"), 1);

    /* release A: C is served; a retried release is recognised */
    cr_expect_eq(sx_int(k, "sc", "rel", "tokB", "pa:1", NULL), 0, "release by another owner");
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:1", NULL), 1);
    cr_expect(holder_is(&s, "sc", "pc:1", 1), "C was not served");
    cr_expect(holder_is(&s, "sc", "pa:1", -1), "the released hold's record is still there");
    char tomb[64] = "r:", last[64] = "";
    cr_assert_not_null(ts_cmd_str(&s, tomb + 2, sizeof tomb - 2,
                                  "EVAL %s 0 tokA", "return redis.sha1hex(ARGV[1])"));
    cr_expect(ts_cmd_str(&s, last, sizeof last, "HGET rs:{sc}:sem:hi %s", tomb) &&
                  strcmp(last, "pa:1") == 0,
              "the owner's tombstone names %s, not pa:1", last);
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:1", NULL), 1, "a retried release");
    cr_expect_eq(sx_int(k, "sc", "give", "tokA", "pa:1", "1"), 0, "give after the release");
    cr_expect_eq(sx_int(k, "sc", "renew", "tokA", "pa:1", NULL), 0, "renew after the release");
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:9", NULL), 0, "an id never granted");
    cr_expect_eq(sx_taken(k, "sc"), 3);
    cr_expect_eq(sx_int(k, "sc", "renew", "tokB", "pb:1", NULL), 1);
    cr_expect_eq(sx_int(k, "sc", "renew", "tokC", "pb:1", NULL), 0, "renew by another owner");
    cr_expect_eq(sx_acq(k, "sc", "cancel", "tokC", "pc:1", "t", "1", NULL, 0, NULL), 1,
                 "cancel after the grant keeps it");
    cr_expect_eq(zcard_q(&s, "sc"), 0);

    /* every key has a TTL */
    r = redisCommand(k, "KEYS rs:{sc}:*");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    cr_expect_geq(r->elements, 4); /* the queue is empty: q and qi are gone */
    for (size_t i = 0; i < r->elements; i++) {
        long long ttl = ts_cmd_int(&s, "PTTL %s", r->element[i]->str);
        cr_expect_gt(ttl, 0, "%s has no TTL (%lld)", r->element[i]->str, ttl);
    }
    freeReplyObject(r);

    cr_expect_eq(sx_int(k, "sc", "rel", "tokB", "pb:1", NULL), 1);
    cr_expect_eq(sx_int(k, "sc", "rel", "tokC", "pc:1", NULL), 1);
    cr_expect_eq(sx_taken(k, "sc"), 0);

    /* WRONGTYPE: checked before any write */
    cr_expect_eq(ts_cmd_int(&s, "SET rs:{wt}:sem:q x"), -1); /* "OK" is not an integer */
    r = sx(k, "wt", "acq", "tokA", "pa:1", "q", "1", "3");
    cr_expect(r->type == REDIS_REPLY_ERROR && strstr(r->str, "WRONGTYPE"), "acq on a foreign key");
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{wt}:sem rs:{wt}:sem:holders rs:{wt}:sem:fence"), 0,
                 "a refused call wrote");
    redisFree(k);
    ts_server_stop(&s);
}

/* The uncontended paths (semaphore.lua's fast acquire and release): a grant still purges
 * the tombstones whose time is up, a lapsed hold still gives its permits back, and a
 * semaphore with more holds than the fast path looks at (64) still counts them all. */
Test(sem, script_fast_paths)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    char f[32], id[32];

    /* a tombstone due (TOMB_BASE + 1 ms): a grant purges it */
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fa}:sem s 3"), 1);
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fa}:sem:holders 1000000000000001 px:1"), 1);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fa}:sem:hi px:1 %s", "0 ab 5"), 1);
    cr_expect_eq(sx_acq(k, "fa", "acq", "tokA", "pa:1", "q", "3", f, sizeof f, NULL), 1);
    cr_expect(holder_is(&s, "fa", "px:1", -1), "the tombstone due is still there");
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{fa}:sem:holders"), 1, "only the new hold");
    cr_expect_eq(sx_int(k, "fa", "rel", "tokA", "pa:1", NULL), 1);
    cr_expect_eq(sx_int(k, "fa", "rel", "tokA", "pa:1", NULL), 1, "a retried release");
    cr_expect_eq(sx_taken(k, "fa"), 0);

    /* a lapsed hold of 2 permits (expiry 1 ms): its permits come back */
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fa}:sem:holders 1 px:2"), 1);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fa}:sem:hi px:2 %s", "2 ab 6"), 1);
    cr_expect_eq(sx_acq(k, "fa", "acq", "tokB", "pb:1", "t", "3", f, sizeof f, NULL), 1);
    cr_expect(holder_is(&s, "fa", "px:2", -1), "the lapsed hold is still there");
    cr_expect_eq(sx_int(k, "fa", "rel", "tokB", "pb:1", NULL), 1);

    /* one owner's releases leave one tombstone, not one each */
    char aid[32];
    for (int i = 0; i < 50; i++) {
        snprintf(aid, sizeof aid, "pt:%d", i);
        cr_assert_eq(sx_acq(k, "fa", "acq", "tokT", aid, "t", "1", f, sizeof f, NULL), 1);
        cr_assert_eq(sx_int(k, "fa", "rel", "tokT", aid, NULL), 1);
    }
    cr_expect_eq(sx_int(k, "fa", "rel", "tokT", "pt:49", NULL), 1, "the last one, retried");
    cr_expect_eq(sx_int(k, "fa", "rel", "tokT", "pt:48", NULL), 0, "an earlier one");
    cr_expect_leq(ts_cmd_int(&s, "ZCARD rs:{fa}:sem:holders"), 3, "tombstones per release");
    cr_expect_leq(ts_cmd_int(&s, "HLEN rs:{fa}:sem:hi"), 3, "tombstones per release");

    /* 70 holds of one permit each on a semaphore of 72: two more fit, a third does not */
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fm}:sem s 72"), 1);
    for (int i = 0; i < 70; i++) {
        snprintf(id, sizeof id, "pm:%d", i);
        cr_assert_eq(sx_acq(k, "fm", "acq", "tokM", id, "t", "1", f, sizeof f, NULL), 1, "%s", id);
    }
    cr_expect_eq(sx_acq(k, "fm", "acq", "tokN", "pn:1", "t", "2", f, sizeof f, NULL), 1);
    cr_expect_eq(sx_acq(k, "fm", "acq", "tokO", "po:1", "t", "1", f, sizeof f, NULL), 0,
                 "the 73rd permit of 72");
    cr_expect_eq(sx_taken(k, "fm"), 72);
    redisFree(k);
    ts_server_stop(&s);
}

/* The size record's 7-day TTL while every acquisition queues and every release hands over
 * (no call of the kind that refreshes it each time): the handover that makes the day's first
 * grant refreshes it (semaphore.lua, "hand"). The day is the fencing counter's: set to a token
 * of the day before, the next grant is that day's first. */
Test(sem, script_handover_refreshes_size_daily)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    char f[32];
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fd}:sem s 1"), 1);
    cr_assert_eq(sx_acq(k, "fd", "acq", "tokA", "pa:1", "q", "1", f, sizeof f, NULL), 1);
    cr_assert_eq(sx_acq(k, "fd", "acq", "tokB", "pb:1", "q", "1", f, sizeof f, NULL), 0);
    cr_assert_eq(sx_acq(k, "fd", "acq", "tokC", "pc:1", "q", "1", f, sizeof f, NULL), 0);
    /* five of its seven days gone; the last grant made the day before */
    cr_assert_eq(ts_cmd_int(&s, "PEXPIRE rs:{fd}:sem 432000000"), 1);
    redisReply *r = redisCommand(k, "TIME");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    long long now_us = atoll(r->element[0]->str) * 1000000LL + atoll(r->element[1]->str);
    freeReplyObject(r);
    r = redisCommand(k, "SET rs:{fd}:sem:fence %lld KEEPTTL", now_us - 86400000000LL);
    cr_assert(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    cr_expect_eq(sx_int(k, "fd", "rel", "tokA", "pa:1", NULL), 1);
    cr_expect(holder_is(&s, "fd", "pb:1", 1), "handed over to the queue's head");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{fd}:sem"), 518400000LL,
                 "the day's first grant refreshed the size record's TTL");
    /* the next handover of the same day: still a grant to the head */
    cr_expect_eq(sx_int(k, "fd", "rel", "tokB", "pb:1", NULL), 1);
    cr_expect(holder_is(&s, "fd", "pc:1", 1), "handed over to the next head");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{fd}:sem"), 0);
    redisFree(k);
    ts_server_stop(&s);
}

/* A foreign key of another type: RS_ESERVER with the server's text, nothing written. */
Test(sem, wrongtype_through_the_api)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    cr_expect_eq(ts_cmd_int(&s, "RPUSH rs:{wa}:sem:holders x"), 1);
    rs_sem_t *sem = NULL;
    cr_expect_eq(rs_sem_init(&sem, c, "wa", 2), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{wa}:sem"), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}
