/*
 * test_rwlock_script.c - read-write lock tests of its Lua script called directly
 * (idempotence, owner checks, head admission, the fast paths) and of the inspection ops
 * (info, force) with the holders that learn of a force.
 * (moved from test_rwlock.c; suite "rwlock", shared helpers in test_rwlock.h).
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
#include "test_rwlock.h"

/* ------------------------------------------------------------------------------------- */
/* The script itself: idempotence of every mutating op, owner checks, head admission      */

/* EVAL of the rwlock script on name's keys; callid may be NULL. */
static redisReply *rx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *qmode, const char *mode, const char *callid)
{
    const char *sfx[6] = {"", ":fence", ":q", ":qi", ":rd", ":ri"};
    char keys[6][64];
    const char *argv[20];
    size_t lens[20];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)rs_script_rwlock.body;
    argv[n++] = "6";
    for (int i = 0; i < 6; i++) {
        snprintf(keys[i], sizeof keys[i], "rs:{%s}:rwlock%s", name, sfx[i]);
        argv[n++] = keys[i];
    }
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "5000";       /* lease */
    argv[n++] = "rs:client:"; /* channel prefix */
    argv[n++] = qmode ? qmode : "q";
    argv[n++] = "100";        /* max waiters */
    argv[n++] = "10000";      /* queue entry lease */
    argv[n++] = mode;
    if (callid)
        argv[n++] = callid;
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_rwlock.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "EVAL %s: %s", op, r->str);
    return r;
}

static long long rx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *mode, const char *callid)
{
    redisReply *r = rx(k, name, op, tok, acq, NULL, mode, callid);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d", op, r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* acq: element 0 of the reply; element 1 (a grant's fence, a busy reply's ttl) into fence;
 * element 2 (a grant's ttl, a busy reply's queued flag) into third. */
static long long rx_acq(redisContext *k, const char *name, const char *tok, const char *acq,
                        const char *qmode, const char *mode, unsigned long long *fence,
                        long long *third)
{
    redisReply *r = rx(k, name, "acq", tok, acq, qmode, mode, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "acq: reply type %d", r->type);
    cr_assert_geq(r->elements, 1);
    long long k0 = r->element[0]->integer;
    if (fence)
        *fence = 0;
    if (third)
        *third = -99;
    if (r->elements >= 3) {
        redisReply *e = r->element[1];
        if (fence)
            *fence = e->type == REDIS_REPLY_STRING ? strtoull(e->str, NULL, 10)
                                                   : (unsigned long long)e->integer;
        if (third && r->element[2]->type == REDIS_REPLY_INTEGER)
            *third = r->element[2]->integer;
    }
    freeReplyObject(r);
    return k0;
}

/* The count of tok's read hold in Redis, -1 if none. */
static long long read_count_of(redisContext *k, const char *name, const char *tok)
{
    redisReply *r = redisCommand(k, "EVAL %s 1 rs:{%s}:rwlock:ri %s",
                                 "local v = redis.call('HGET', KEYS[1], redis.sha1hex(ARGV[1])) "
                                 "if not v then return -1 end "
                                 "return tonumber(string.match(v, '^%S+ (%d+) '))",
                                 name, tok);
    cr_assert(r && r->type == REDIS_REPLY_INTEGER, "read_count_of");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

Test(rwlock, script_idempotence)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    unsigned long long f1, f1b, fr, frb;
    long long third;

    /* write: acq twice with one id, one token; another id of the same owner is refused */
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:1", "q", "w", &f1, &third), 1);
    cr_expect_gt(third, 0);
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:1", "q", "w", &f1b, NULL), 1, "retried acq");
    cr_expect_eq(f1b, f1, "a retried acq returns the same token");
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:2", "q", "w", NULL, NULL), -1);
    cr_expect_eq(zcard_q(&s, "sc"), 0, "the owner was queued behind itself");

    /* enter/leave with a call id count once */
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "w", "c:1"), 2);
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "w", "c:1"), 2, "a retried enter");
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "w", "c:2"), 3);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokA", "pa:1", "w", "c:3"), 2);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokA", "pa:1", "w", "c:3"), 2, "a retried leave");
    cr_expect_eq(rx_int(k, "sc", "enter", "tokB", "pa:1", "w", "c:4"), 0, "enter by another");
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "r", "c:5"), 0, "enter of no read hold");

    /* renew: only the owner under its id and mode */
    cr_expect_eq(rx_int(k, "sc", "renew", "tokA", "pa:1", "w", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokA", "pa:2", "w", NULL), 0);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokB", "pa:1", "w", NULL), 0);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokA", "pa:1", "r", NULL), 0);

    /* the writer reads at once (downgrade); a reader's acq is idempotent too */
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:3", "t", "r", &fr, NULL), 1, "downgrade");
    cr_expect_gt(fr, f1, "read grants draw tokens");
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:3", "t", "r", &frb, NULL), 1);
    cr_expect_eq(frb, fr);
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:4", "t", "r", NULL, NULL), -1, "a second read id");

    /* others queue: readers B, C, a writer D, a reader E; a try stays out of the queue */
    cr_expect_eq(rx_acq(k, "sc", "tokB", "pb:1", "q", "r", NULL, &third), 0);
    cr_expect_eq(third, 1, "queued");
    cr_expect_eq(rx_acq(k, "sc", "tokC", "pc:1", "q", "r", NULL, NULL), 0);
    cr_expect_eq(rx_acq(k, "sc", "tokD", "pd:1", "q", "w", NULL, NULL), 0);
    cr_expect_eq(rx_acq(k, "sc", "tokE", "pe:1", "q", "r", NULL, NULL), 0);
    cr_expect_eq(rx_acq(k, "sc", "tokF", "pf:1", "t", "r", NULL, &third), 0);
    cr_expect_eq(third, 0, "a try reported itself queued");
    cr_expect_eq(zcard_q(&s, "sc"), 4);
    cr_expect_eq(rx_int(k, "sc", "qrenew", "tokB", "pb:1", "r", NULL), 1);

    /* the write release admits B and C together (A still reads), D and E wait */
    cr_expect_eq(rx_int(k, "sc", "rel", "tokA", "pa:1", "w", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokA", "pa:1", "w", NULL), 1, "a retried release");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{sc}:rwlock o"), 0);
    cr_expect_eq(read_count_of(k, "sc", "tokB"), 1, "B admitted");
    cr_expect_eq(read_count_of(k, "sc", "tokC"), 1, "C admitted");
    cr_expect_eq(read_count_of(k, "sc", "tokE"), -1, "E jumped the writer");
    cr_expect_eq(zcard_q(&s, "sc"), 2);
    cr_expect_eq(rx_int(k, "sc", "qrenew", "tokB", "pb:1", "r", NULL), 2, "granted meanwhile");
    cr_expect_eq(rx_acq(k, "sc", "tokB", "pb:1", "q", "r", NULL, NULL), 1, "B's retried acq");

    /* read re-entries count once per call id */
    cr_expect_eq(rx_int(k, "sc", "enter", "tokB", "pb:1", "r", "c:6"), 2);
    cr_expect_eq(rx_int(k, "sc", "enter", "tokB", "pb:1", "r", "c:6"), 2);
    cr_expect_eq(read_count_of(k, "sc", "tokB"), 2);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokB", "pb:1", "r", "c:7"), 1);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokB", "pb:1", "r", "c:7"), 1);

    /* read releases: the writer D only after the last reader */
    cr_expect_eq(rx_int(k, "sc", "rel", "tokA", "pa:3", "r", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokB", "pb:1", "r", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokB", "pb:1", "r", NULL), 1, "a retried read release");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokB", "pb:9", "r", NULL), 0, "release of a lost hold");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{sc}:rwlock o"), 0, "D admitted beside C");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokC", "pc:1", "r", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "qrenew", "tokD", "pd:1", "w", NULL), 2, "D admitted");
    cr_expect_eq(read_count_of(k, "sc", "tokE"), -1, "E beside the writer");
    redisReply *r = rx(k, "sc", "cancel", "tokD", "pd:1", "t", "w", NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->integer == 1,
              "cancel after the grant keeps it");
    freeReplyObject(r);

    /* E cancels while D holds; D's release then finds nobody */
    r = rx(k, "sc", "cancel", "tokE", "pe:1", "t", "r", NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->integer == 0,
              "cancel of a queued waiter");
    freeReplyObject(r);
    cr_expect_eq(zcard_q(&s, "sc"), 0);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokD", "pd:1", "w", NULL), 1);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{sc}:rwlock:ri"), 0);

    /* an expired read lease stops counting: a writer gets in */
    cr_expect_eq(rx_acq(k, "sc", "tokG", "pg:1", "t", "r", NULL, NULL), 1);
    unsigned long long busy_ttl;
    cr_expect_eq(rx_acq(k, "sc", "tokH", "ph:1", "t", "w", &busy_ttl, &third), 0);
    cr_expect_eq(third, 0, "a try queued");
    cr_expect(busy_ttl > 4000 && busy_ttl <= 5000,
              "busy: retry when the reader's lease runs out, not %llu ms", busy_ttl);
    r = redisCommand(k, "EVAL %s 1 rs:{sc}:rwlock:rd %s",
                     "return redis.call('ZADD', KEYS[1], 'XX', 1, redis.sha1hex(ARGV[1]))", "tokG");
    cr_assert(r && r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokG", "pg:1", "r", NULL), 0, "renew of an expired lease");
    cr_expect_eq(rx_acq(k, "sc", "tokH", "ph:1", "t", "w", NULL, NULL), 1, "writer after expiry");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokG", "pg:1", "r", NULL), 0, "the reader lost it");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokH", "ph:1", "w", NULL), 1);

    /* bad mode */
    const char *bad[] = {"EVAL", (const char *)rs_script_rwlock.body, "6", "a{x}", "b{x}",
                         "c{x}", "d{x}", "e{x}", "f{x}", "acq", "t", "p:1", "100", "c:", "t",
                         "1", "100", "x"};
    size_t bl[18];
    for (int i = 0; i < 18; i++)
        bl[i] = i == 1 ? rs_script_rwlock.len : strlen(bad[i]);
    r = redisCommandArgv(k, 18, bad, bl);
    cr_expect(r && r->type == REDIS_REPLY_ERROR, "a bad mode is an error");
    if (r)
        freeReplyObject(r);
    redisFree(k);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Inspection ops: info (read-only) and force, as primitives/inspect.c runs them          */

extern const rs_kind_t rs_kind_rwlock;

/* Runs op as inspect.c does: a temporary handle of rs_kind_rwlock, no mode argument. */
static redisReply *inspect_op(rs_client_t *c, const char *name, const char *op)
{
    rs_handle_t h;
    cr_assert_eq(rs__handle_init(&h, c, rs_kind_rwlock.name, rs_kind_rwlock.script, name,
                                 rs_kind_rwlock.suffixes, rs_kind_rwlock.nkeys), 0);
    rs_call_t call;
    rs__call_init(&call, &h, NULL);
    redisReply *r = NULL;
    int rc = rs__call_run(&call, op, "t", &r);
    rs__handle_destroy(&h);
    cr_assert_eq(rc, 0, "%s: %d %s", op, rc, rs_client_lasterror(c));
    return r;
}

typedef struct info {
    long long exists, nholders, ttl, waiters, writer, size, freep, count;
    unsigned long long fence;
    int nlisted;
    char listed[8][48];
} info_t;

static info_t get_info(rs_client_t *c, const char *name)
{
    redisReply *r = inspect_op(c, name, "info");
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_geq(r->elements, 9);
    info_t in = {0};
    long long *v[9] = {&in.exists, &in.nholders, &in.ttl, NULL, &in.waiters, &in.writer,
                       &in.size, &in.freep, &in.count};
    for (int i = 0; i < 9; i++) {
        redisReply *e = r->element[i];
        long long x = e->type == REDIS_REPLY_INTEGER ? e->integer
                      : e->type == REDIS_REPLY_STRING ? strtoll(e->str, NULL, 10)
                                                      : -99;
        if (i == 3)
            in.fence = (unsigned long long)x;
        else
            *v[i] = x;
    }
    for (size_t i = 9; i < r->elements && in.nlisted < 8; i++)
        snprintf(in.listed[in.nlisted++], sizeof in.listed[0], "%s", r->element[i]->str);
    freeReplyObject(r);
    return in;
}

static int listed(const info_t *in, const char *acq)
{
    for (int i = 0; i < in->nlisted; i++)
        if (strcmp(in->listed[i], acq) == 0)
            return 1;
    return 0;
}

/* The uncontended paths (rwlock.lua's fast acquire and release) leave the full paths' work
 * undone only where it is not needed: a reader's release still clears lapsed read holds and
 * old tombstones (or readers alone would grow the zset), and a writer still finds a lapsed
 * read hold and purges it before it takes the lock. */
Test(rwlock, script_fast_paths_purge)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    unsigned long long f;

    /* a lapsed read hold and an old tombstone (expiry 1 ms after the epoch) */
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fp}:rwlock:rd 1 deadbeef 1 r:px:1"), 2);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fp}:rwlock:ri deadbeef %s", "px:0.1 1 5 -"), 1);
    cr_expect_eq(rx_acq(k, "fp", "tokA", "pa:1", "q", "r", &f, NULL), 1, "a reader shares");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokA", "pa:1", "r", NULL), 1);
    cr_expect_eq(ts_cmd_int(&s, "ZSCORE rs:{fp}:rwlock:rd deadbeef"), -1, "lapsed hold kept");
    cr_expect_eq(ts_cmd_int(&s, "ZSCORE rs:{fp}:rwlock:rd r:px:1"), -1, "old tombstone kept");
    cr_expect_eq(ts_cmd_int(&s, "HLEN rs:{fp}:rwlock:ri"), 0, "lapsed hold's record kept");
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{fp}:rwlock:rd"), 1, "only the new tombstone");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokA", "pa:1", "r", NULL), 1, "a retried release");

    /* one owner's read releases leave one tombstone, not one each */
    char id[32];
    for (int i = 0; i < 50; i++) {
        snprintf(id, sizeof id, "pt:%d", i);
        cr_assert_eq(rx_acq(k, "fp", "tokT", id, "t", "r", &f, NULL), 1, "%s", id);
        cr_assert_eq(rx_int(k, "fp", "rel", "tokT", id, "r", NULL), 1, "%s", id);
    }
    cr_expect_eq(rx_int(k, "fp", "rel", "tokT", "pt:49", "r", NULL), 1, "the last, retried");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokT", "pt:48", "r", NULL), 0, "an earlier one");
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{fp}:rwlock:rd"), 2, "tombstones: tokA's and tokT's");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokA", "pa:1", "r", NULL), 1, "tokA's, retried");

    /* a writer behind a lapsed read hold: granted, the hold purged */
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fp2}:rwlock:rd 1 deadbeef"), 1);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fp2}:rwlock:ri deadbeef %s", "px:0.1 1 5 -"), 1);
    cr_expect_eq(rx_acq(k, "fp2", "tokB", "pb:1", "t", "w", &f, NULL), 1, "writer granted");
    cr_expect_eq(ts_cmd_int(&s, "HLEN rs:{fp2}:rwlock:ri"), 0);
    cr_expect_eq(rx_int(k, "fp2", "rel", "tokB", "pb:1", "w", NULL), 1);
    cr_expect_eq(rx_int(k, "fp2", "rel", "tokB", "pb:1", "w", NULL), 1, "a retried release");
    cr_expect_eq(rx_int(k, "fp2", "rel", "tokC", "pc:1", "w", NULL), 0, "not a holder");
    /* the keys outlive no hold by more than half a lease beyond the hold's own */
    long long ttl = ts_cmd_int(&s, "PTTL rs:{fp2}:rwlock");
    cr_expect(ttl > 0 && ttl <= 15000, "PTTL of the main key after the release: %lld", ttl);
    redisFree(k);
    ts_server_stop(&s);
}

Test(rwlock, script_info_and_force)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    cr_expect_str_eq(rs_kind_rwlock.name, "rwlock");
    cr_expect_eq(rs_kind_rwlock.nkeys, 6);

    info_t in = get_info(c, "in");
    cr_expect_eq(in.exists, 0);
    cr_expect_eq(in.nholders, 0);
    cr_expect_eq(in.ttl, -1);
    cr_expect_eq(in.fence, 0);
    cr_expect_eq(in.writer, 0);
    cr_expect(in.size == -1 && in.freep == -1 && in.count == -1);
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "info wrote something");

    /* a writer that also reads (one owner), a reader and a writer queued */
    unsigned long long fw, fb;
    cr_assert_eq(rx_acq(k, "in", "tokA", "pa:1", "q", "w", &fw, NULL), 1);
    cr_assert_eq(rx_acq(k, "in", "tokA", "pa:2", "q", "r", NULL, NULL), 1);
    cr_assert_eq(rx_acq(k, "in", "tokB", "pb:1", "q", "r", NULL, NULL), 0);
    cr_assert_eq(rx_acq(k, "in", "tokC", "pc:1", "q", "w", NULL, NULL), 0);
    in = get_info(c, "in");
    cr_expect_eq(in.exists, 1);
    cr_expect_eq(in.nholders, 1, "one owner thread holds (write + its own read)");
    cr_expect_eq(in.writer, 1);
    cr_expect(in.ttl > 0 && in.ttl <= 5000, "ttl %lld", in.ttl);
    cr_expect_eq(in.fence, fw, "the write hold's token");
    cr_expect_eq(in.waiters, 2);
    cr_expect(in.nlisted >= 1 && strcmp(in.listed[0], "pa:1") == 0, "the writer first");

    /* the write release admits B beside A's read hold; C waits for both */
    cr_assert_eq(rx_int(k, "in", "rel", "tokA", "pa:1", "w", NULL), 1);
    in = get_info(c, "in");
    cr_expect_eq(in.writer, 0);
    cr_expect_eq(in.nholders, 2);
    cr_expect(listed(&in, "pa:2") && listed(&in, "pb:1"), "the readers are listed");
    cr_expect_eq(in.waiters, 1);
    cr_expect(in.ttl > 0 && in.ttl <= 5000);
    cr_assert_eq(rx_acq(k, "in", "tokB", "pb:1", "q", "r", &fb, NULL), 1);
    cr_expect_eq(in.fence, fb, "without a writer: the latest grant's token");

    /* force drops both read holds and admits the writer C */
    redisReply *r = inspect_op(c, "in", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 2, "force dropped %lld holds",
              r->type == REDIS_REPLY_INTEGER ? r->integer : -1);
    freeReplyObject(r);
    cr_expect_eq(rx_int(k, "in", "renew", "tokA", "pa:2", "r", NULL), 0, "a forced reader renews");
    cr_expect_eq(rx_int(k, "in", "rel", "tokB", "pb:1", "r", NULL), 0, "a forced reader releases");
    cr_expect_eq(rx_int(k, "in", "qrenew", "tokC", "pc:1", "w", NULL), 2, "C admitted by force");
    in = get_info(c, "in");
    cr_expect_eq(in.writer, 1);
    cr_expect_eq(in.nholders, 1);
    cr_expect(in.nlisted == 1 && strcmp(in.listed[0], "pc:1") == 0);
    cr_expect_eq(in.waiters, 0);
    r = inspect_op(c, "in", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    r = inspect_op(c, "in", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 0, "nothing left to force");
    freeReplyObject(r);
    in = get_info(c, "in");
    cr_expect_eq(in.nholders, 0);
    cr_expect_eq(in.ttl, -1);
    cr_expect_gt(ts_cmd_int(&s, "EXISTS rs:{in}:rwlock:fence"), 0, "force keeps the counter");

    /* a read-only hold keeps the main key (what rs_list recognises) alive */
    cr_assert_eq(rx_acq(k, "in2", "tokD", "pd:1", "t", "r", NULL, NULL), 1);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{in2}:rwlock"), 1, "no main key under a read hold");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{in2}:rwlock"), 0);
    redisFree(k);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* A forced release is noticed by the holders: their next renewal fails, unlock says so. */
typedef struct lost_count {
    atomic_int n;
} lost_count_t;

static void count_lost(const char *kind, const char *name, void *arg)
{
    (void)name;
    if (strcmp(kind, "rwlock") == 0)
        atomic_fetch_add(&((lost_count_t *)arg)->n, 1);
}

Test(rwlock, forced_holders_learn)
{
    ts_server_t s;
    tu_start_server(&s);
    lost_count_t lc = {0};
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 300;
    cfg.on_lost = count_lost;
    cfg.on_lost_arg = &lc;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "fo");
    rs_rwlock_t *rw2 = new_rw(c2, "fo");
    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    redisReply *r = inspect_op(c2, "fo", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 2);
    freeReplyObject(r);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), 0, "the lock is free after the force");
    cr_expect(tu_wait_atomic(&lc.n, 2, 3000), "on_lost for both holds: %d", atomic_load(&lc.n));
    cr_expect_eq(rs_rwlock_unlock(rw), RS_ELOST, "the forced write hold");
    cr_expect_eq(rs_rwlock_unlock(rw), RS_ELOST, "the forced read hold");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM);
    cr_expect_eq(rs_rwlock_unlock(rw2), 0, "the new writer was disturbed");
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}
