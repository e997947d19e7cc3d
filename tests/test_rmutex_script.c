/*
 * test_rmutex_script.c - the rmutex's enter/leave operations of the mutex script, called
 * directly with EVAL: idempotent per call id.
 * (moved from test_rmutex.c; suite "rmutex", shared helpers in test_rmutex.h).
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

#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "scripts.h"
#include "test_assert.h"
#include "test_rmutex.h"

/* ------------------------------------------------------------------------------------- */
/* 11. The script: enter/leave are idempotent per call id                                 */

/* EVAL of the mutex script on name's rmutex keys, ARGV as in mutex.lua's header. */
static redisReply *rx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *callid)
{
    char keys[4][64];
    snprintf(keys[0], sizeof keys[0], "rs:{%s}:rmutex", name);
    snprintf(keys[1], sizeof keys[1], "rs:{%s}:rmutex:fence", name);
    snprintf(keys[2], sizeof keys[2], "rs:{%s}:rmutex:q", name);
    snprintf(keys[3], sizeof keys[3], "rs:{%s}:rmutex:qi", name);
    const char *argv[16];
    size_t lens[16];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)rs_script_mutex.body;
    argv[n++] = "4";
    for (int i = 0; i < 4; i++)
        argv[n++] = keys[i];
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "5000";       /* lease */
    argv[n++] = "rs:client:"; /* channel prefix */
    argv[n++] = "t";          /* mode */
    argv[n++] = "100";        /* max waiters */
    argv[n++] = "5000";       /* queue-entry lease */
    if (callid)
        argv[n++] = callid;   /* ARGV[9] */
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_mutex.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "EVAL %s: %s", op, r->str);
    return r;
}

static long long rx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *callid)
{
    redisReply *r = rx(k, name, op, tok, acq, callid);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d", op, r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

Test(rmutex, script_enter_idempotent)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    char buf[64];

    /* take it */
    redisReply *r = rx(k, "se", "acq", "tokA", "pa:1", NULL);
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                  r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1,
              "acq was not granted");
    char f[32];
    if (r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(f, sizeof f, "%s", r->element[1]->str);
    else
        snprintf(f, sizeof f, "%lld", r->element[1]->integer);
    freeReplyObject(r);
    cr_expect_eq(hold_count(&s, "se"), 1, "count after acq");

    /* enter twice with one call id: counted once */
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c1"), 2, "enter");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c1"), 2, "a retried enter");
    cr_expect_eq(hold_count(&s, "se"), 2, "count after a retried enter");

    /* foreign enters/leaves: 0, nothing changed */
    cr_expect_eq(rx_int(k, "se", "enter", "tokB", "pa:1", "pb:c1"), 0, "enter by another token");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:2", "pa:c9"), 0, "enter under another id");
    cr_expect_eq(rx_int(k, "se", "leave", "tokB", "pa:1", "pb:c2"), 0, "leave by another token");
    cr_expect_eq(hold_count(&s, "se"), 2, "a foreign call changed the count");

    /* leave twice with another call id: counted once */
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c2"), 1, "leave");
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c2"), 1, "a retried leave");
    cr_expect_eq(hold_count(&s, "se"), 1, "count after a retried leave");

    /* fresh ids count again; leave never goes below 1 */
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c3"), 2);
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c4"), 3);
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c4"), 3, "a retried enter at 3");
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c5"), 2);
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c6"), 1);
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c7"), 1, "leave at count 1");
    cr_expect_eq(hold_count(&s, "se"), 1);

    /* the token never moved */
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "HGET rs:{se}:rmutex f") ? buf : "(nil)", f,
                     "the fencing token changed");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{se}:rmutex"), 0);

    /* renew keeps the count; release ends it and later enters find nothing */
    cr_expect_eq(rx_int(k, "se", "renew", "tokA", "pa:1", NULL), 1);
    cr_expect_eq(hold_count(&s, "se"), 1);
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c8"), 2);
    cr_expect_eq(rx_int(k, "se", "rel", "tokA", "pa:1", NULL), 1);
    cr_expect(!has_owner(&s, "se"), "owned after rel");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c9"), 0, "enter after rel");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c8"), 0,
                 "a retried enter after rel");
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c10"), 0, "leave after rel");

    /* a new holder starts at 1 whatever the previous count */
    r = rx(k, "se", "acq", "tokB", "pb:1", NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1, "acq by B");
    freeReplyObject(r);
    cr_expect_eq(hold_count(&s, "se"), 1, "a new holder's count");
    cr_expect_eq(rx_int(k, "se", "enter", "tokB", "pb:1", "pa:c8"), 2,
                 "another holder's call id equal to an old one is a new call");
    redisFree(k);
    ts_server_stop(&s);
}
