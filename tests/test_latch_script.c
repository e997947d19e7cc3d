/*
 * test_latch_script.c - the countdown latch's keys and script (suite latch, moved from
 * test_latch.c): keys that expire without activity and a waiter that keeps them alive,
 * foreign keys (WRONGTYPE, nothing written), the Lua script called directly with EVAL
 * (retried calls, replies, pruning).
 */
#include "test_latch.h"

/* ------------------------------------------------------------------------------------- */
/* 8. Keys expire without activity; a waiter keeps them alive                             */

Test(latch, ttl_and_refresh)
{
    rs__latch_ttl_ms = 1200; /* this test's worker process only */
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *cw = tu_open_client(&s, 2000, 2000, NULL);
    rs_latch_t *l = new_latch(c, "tr", 1);
    long long ttl = ts_cmd_int(&s, "PTTL rs:{tr}:latch");
    cr_expect(ttl > 0 && ttl <= 1200, "PTTL after init: %lld", ttl);

    rs_latch_t *lw = new_latch(cw, "tr", 0);
    waiter_t w;
    waiter_start(&w, lw, 0);
    tu_sleep_ms(3500); /* nearly three TTLs: only the waiter's re-checks keep the key */
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{tr}:latch"), 1, "the waiter did not keep it alive");
    cr_expect_eq(atomic_load(&w.done), 0, "wait returned early: %d %s", w.rc, w.err);
    cr_assert_eq(rs_latch_count_down(l), 0);
    cr_expect(tu_wait_atomic(&w.done, 1, 5000), "not woken");
    cr_expect_eq(w.rc, 0, "wait: %d %s", w.rc, w.err);
    ttl = ts_cmd_int(&s, "PTTL rs:{tr}:latch:ids");
    cr_expect(ttl > 0 && ttl <= 1200, "PTTL of the ids after opening: %lld", ttl);

    /* nobody active: both keys go; the latch is then as if never armed */
    tu_sleep_ms(2000);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{tr}:latch rs:{tr}:latch:ids"), 0,
                 "keys outlived their TTL");
    cr_expect_eq(rs_latch_count_down(l), ENOENT, "count_down on an expired latch");
    unsigned n;
    cr_expect_eq(rs_latch_getcount(l, &n), ENOENT, "getcount on an expired latch");

    pthread_join(w.th, NULL);
    rs_latch_destroy(l);
    rs_latch_destroy(lw);
    rs_client_close(c);
    rs_client_close(cw);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 9. Foreign keys: WRONGTYPE, nothing written                                            */

Test(latch, error_wrongtype)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    char buf[128];
    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SET rs:{w}:latch foreign"));

    rs_latch_t *l = (rs_latch_t *)&s;
    int rc = rs_latch_init(&l, c, "w", 3);
    cr_expect_eq(rc, RS_ESERVER, "init over a foreign string key: %d", rc);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_null(l, "*out after a failed init");
    l = new_latch(c, "w", 0); /* attaching asks nothing */
    cr_expect_eq(rs_latch_count_down(l), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    unsigned n;
    cr_expect_eq(rs_latch_getcount(l, &n), RS_ESERVER);
    cr_expect_eq(rs_latch_rearm(l, 2), RS_ESERVER);
    struct timespec dl = tu_abs_in(2000);
    cr_expect_eq(rs_latch_timedwait(l, &dl), RS_ESERVER);
    cr_expect_eq(rs_latch_wait(l), RS_ESERVER);
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "GET rs:{w}:latch"), "foreign");
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w}:latch"), -1, "the foreign key got a TTL");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w}:latch:ids"), 0, "a failed call wrote keys");

    /* a foreign call-id key: the count does not move */
    rs_latch_t *l2 = new_latch(c, "w2", 2);
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{w2}:latch:ids x"), 1);
    cr_expect_eq(rs_latch_count_down(l2), RS_ESERVER);
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{w2}:latch n"), 2, "the count moved");
    cr_expect_eq(ts_cmd_int(&s, "LLEN rs:{w2}:latch:ids"), 1);
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w2}:latch:ids"), -1, "the foreign key got a TTL");

    rs_latch_destroy(l);
    rs_latch_destroy(l2);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 13. The script itself: retried calls, replies, pruning                                 */

/* EVAL of the latch script on name's keys; window NULL: "600000". */
static redisReply *lx(redisContext *k, const char *name, const char *op, const char *id,
                      const char *count, const char *window)
{
    char keys[2][64];
    snprintf(keys[0], sizeof keys[0], "rs:{%s}:latch", name);
    snprintf(keys[1], sizeof keys[1], "rs:{%s}:latch:ids", name);
    const char *argv[] = {"EVAL", (const char *)rs_script_latch.body, "2", keys[0], keys[1],
                          op, "tok", id, "5000", "rs:client:", "t", "100", "5000", count,
                          "60000", window ? window : "600000"};
    size_t n = sizeof argv / sizeof argv[0], lens[sizeof argv / sizeof argv[0]];
    for (size_t i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_latch.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, (int)n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    return r;
}

static long long lx_int(redisContext *k, const char *name, const char *op, const char *id,
                        const char *count)
{
    redisReply *r = lx(k, name, op, id, count, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d (%s)", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* An array reply of integers into v[0..n-1]; returns the element count. */
static size_t lx_arr(redisContext *k, const char *name, const char *op, const char *count,
                     long long *v, size_t n)
{
    redisReply *r = lx(k, name, op, "x:0", count, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "%s: reply type %d (%s)", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    size_t m = r->elements;
    for (size_t i = 0; i < m && i < n; i++) {
        cr_assert_eq(r->element[i]->type, REDIS_REPLY_INTEGER);
        v[i] = r->element[i]->integer;
    }
    freeReplyObject(r);
    return m;
}

Test(latch, script_idempotence)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    long long v[3];

    /* never armed */
    cr_expect_eq(lx_arr(k, "sc", "get", "0", v, 3), 3);
    cr_expect(v[0] == 0 && v[1] == 0 && v[2] == 0, "get: {%lld %lld %lld}", v[0], v[1], v[2]);
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), -1, "down, never armed");
    cr_expect_eq(lx_arr(k, "sc", "init", "0", v, 2), 2);
    cr_expect(v[0] == 0 && v[1] == -1, "init 0: {%lld %lld}", v[0], v[1]);
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "nothing written for a never-armed latch");

    /* arming, and a late init */
    lx_arr(k, "sc", "init", "3", v, 2);
    cr_expect(v[0] == 1 && v[1] == 3, "init 3: {%lld %lld}", v[0], v[1]);
    lx_arr(k, "sc", "init", "7", v, 2);
    cr_expect(v[0] == 0 && v[1] == 3, "init 7 on an armed latch: {%lld %lld}", v[0], v[1]);

    /* a count-down sent twice counts once */
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), 2);
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), 2, "retried count-down counted twice");
    cr_expect_eq(lx_int(k, "sc", "down", "A:2", "0"), 1);
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{sc}:latch:ids"), 2);

    /* a rearm sent twice applies once, even after count-downs in between; a count-down
     * from before the rearm sent again is not applied to the new arming */
    cr_expect_eq(lx_int(k, "sc", "rearm", "R:1", "5"), 5);
    cr_expect_eq(lx_int(k, "sc", "down", "A:3", "0"), 4);
    cr_expect_eq(lx_int(k, "sc", "rearm", "R:1", "5"), 4, "retried rearm applied twice");
    cr_expect_eq(lx_int(k, "sc", "down", "A:1", "0"), 4, "old count-down applied again");

    /* the opening: one PUBLISH on the latch's channel, openings counted */
    long long pub = publishes(&s);
    cr_expect_eq(lx_int(k, "sc", "down", "B:1", "0"), 3);
    cr_expect_eq(lx_int(k, "sc", "down", "B:2", "0"), 2);
    cr_expect_eq(lx_int(k, "sc", "down", "B:3", "0"), 1);
    cr_expect_eq(publishes(&s), pub, "published before the opening");
    cr_expect_eq(lx_int(k, "sc", "down", "B:4", "0"), 0);
    cr_expect_eq(publishes(&s), pub + 1, "one PUBLISH per opening");
    cr_expect_eq(lx_int(k, "sc", "down", "B:4", "0"), 0);
    cr_expect_eq(lx_int(k, "sc", "down", "B:5", "0"), 0, "count-down at 0");
    cr_expect_eq(publishes(&s), pub + 1, "published again at 0");
    lx_arr(k, "sc", "get", "0", v, 3);
    cr_expect(v[0] == 1 && v[1] == 0 && v[2] == 1, "get: {%lld %lld %lld}", v[0], v[1], v[2]);

    /* a count-down that was a no-op at 0, sent again after a rearm, stays a no-op */
    cr_expect_eq(lx_int(k, "sc", "rearm", "R:2", "2"), 2);
    cr_expect_eq(lx_int(k, "sc", "down", "B:5", "0"), 2, "no-op count-down applied later");
    lx_arr(k, "sc", "get", "0", v, 3);
    cr_expect(v[0] == 1 && v[1] == 2 && v[2] == 1, "get: {%lld %lld %lld}", v[0], v[1], v[2]);
    lx_arr(k, "sc", "init", "9", v, 2);
    cr_expect(v[0] == 0 && v[1] == 2, "init on a rearmed latch: {%lld %lld}", v[0], v[1]);

    /* TTLs: set on both keys by every call */
    long long t1 = ts_cmd_int(&s, "PTTL rs:{sc}:latch"), t2 = ts_cmd_int(&s, "PTTL rs:{sc}:latch:ids");
    cr_expect(t1 > 0 && t1 <= 60000, "PTTL latch %lld", t1);
    cr_expect(t2 > 0 && t2 <= 60000, "PTTL ids %lld", t2);

    /* ids past the window are pruned when a new one is recorded */
    tu_sleep_ms(30);
    redisReply *r = lx(k, "sc", "down", "C:1", "0", "10");
    cr_expect_eq(r->type, REDIS_REPLY_INTEGER);
    cr_expect_eq(r->integer, 1);
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{sc}:latch:ids"), 1, "old ids not pruned");

    /* bad calls are refused before any write */
    r = lx(k, "sc", "rearm", "R:3", "0", NULL);
    cr_expect_eq(r->type, REDIS_REPLY_ERROR, "rearm 0 accepted");
    freeReplyObject(r);
    r = lx(k, "sc", "frob", "R:4", "0", NULL);
    cr_expect_eq(r->type, REDIS_REPLY_ERROR, "unknown op accepted");
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{sc}:latch n"), 1);
    redisFree(k);
    ts_server_stop(&s);
}
