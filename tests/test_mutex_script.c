/*
 * test_mutex_script.c - mutex tests of the script itself, killed waiters, handles, close, fork, queue caps, forged wake-ups, orphans, on_lost.
 * (moved from test_mutex.c; suite "mutex", shared helpers in test_mutex.h).
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
#include "test_mutex.h"

/* 14. The script itself: idempotence, owner checks, queue leases                        */

/* EVAL of the mutex script on name's keys. qlease may be NULL (then "10000"). */
static redisReply *mx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *mode, const char *qlease)
{
    char keys[4][64];
    snprintf(keys[0], sizeof keys[0], "rs:{%s}:mutex", name);
    snprintf(keys[1], sizeof keys[1], "rs:{%s}:mutex:fence", name);
    snprintf(keys[2], sizeof keys[2], "rs:{%s}:mutex:q", name);
    snprintf(keys[3], sizeof keys[3], "rs:{%s}:mutex:qi", name);
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
    argv[n++] = "5000";        /* lease */
    argv[n++] = "rs:client:";  /* channel prefix */
    argv[n++] = mode ? mode : "q";
    argv[n++] = "100";         /* max waiters */
    argv[n++] = qlease ? qlease : "10000";
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_mutex.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "EVAL %s: %s", op, r->str);
    return r;
}

static long long mx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq)
{
    redisReply *r = mx(k, name, op, tok, acq, NULL, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d", op, r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* acq reply: returns element 0; fence (element 1 of a grant) copied into fence. */
static long long mx_acq(redisContext *k, const char *name, const char *tok, const char *acq,
                        const char *mode, const char *qlease, char *fence, size_t flen,
                        long long *third)
{
    redisReply *r = mx(k, name, "acq", tok, acq, mode, qlease);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "acq: reply type %d", r->type);
    cr_assert_geq(r->elements, 1);
    long long k0 = r->element[0]->integer;
    if (fence && flen)
        fence[0] = '\0';
    if (third)
        *third = -99;
    if (r->elements >= 3) {
        redisReply *e = r->element[1];
        if (fence && flen) {
            if (e->type == REDIS_REPLY_STRING)
                snprintf(fence, flen, "%s", e->str);
            else if (e->type == REDIS_REPLY_INTEGER)
                snprintf(fence, flen, "%lld", e->integer);
        }
        if (third && r->element[2]->type == REDIS_REPLY_INTEGER)
            *third = r->element[2]->integer;
    }
    freeReplyObject(r);
    return k0;
}

static int hget_is(const ts_server_t *s, const char *key, const char *field, const char *want)
{
    char buf[128];
    char *v = ts_cmd_str(s, buf, sizeof buf, "HGET %s %s", key, field);
    if (!want)
        return v == NULL;
    return v && strcmp(v, want) == 0;
}

Test(mutex, script_idempotence, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    const char *L = "rs:{sc}:mutex";
    char f1[32], f1b[32], fx[32];
    long long third;

    /* acq twice with one token and acquisition id: granted twice, one token */
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:1", "q", NULL, f1, sizeof f1, &third), 1);
    cr_expect_gt(third, 0, "ttl of the grant");
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:1", "q", NULL, f1b, sizeof f1b, NULL), 1,
                 "a retried acq");
    cr_expect_str_eq(f1b, f1, "a retried acq returns the same token");
    cr_expect_neq(strtoull(f1, NULL, 10), 0);
    /* the same owner under another acquisition id: -1 (EDEADLK) */
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:2", "q", NULL, fx, sizeof fx, NULL), -1);
    cr_expect_eq(zcard_q(&s, "sc"), 0, "the owner was queued behind itself");

    /* release by the same token under another acquisition id: refused, hold intact */
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:2"), 0);
    cr_expect(hget_is(&s, L, "a", "pa:1"), "the hold survived a foreign release");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokB", "pa:1"), 0, "release by another token");
    cr_expect(hget_is(&s, L, "a", "pa:1"));

    /* renew: only the owner under its acquisition id */
    cr_expect_eq(mx_int(k, "sc", "renew", "tokB", "pb:1"), 0, "renew by a non-owner");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokB", "pa:1"), 0, "renew by a non-owner, owner's id");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokA", "pa:2"), 0, "renew under another id");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokA", "pa:1"), 1, "renew by the owner");

    /* a try while held: refused, never queued */
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(mx_acq(k, "sc", "tokB", "pb:1", "t", NULL, NULL, 0, &third), 0, "try");
        cr_expect_eq(third, 0, "a try reported itself queued");
    }
    cr_expect_eq(zcard_q(&s, "sc"), 0, "a try added to the queue");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{sc}:mutex:qi"), 0, "a try wrote queue info");

    /* release twice: 1 both times, the second recognises the tombstone */
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:1"), 1);
    cr_expect(hget_is(&s, L, "o", NULL), "released but still owned");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:1"), 1, "a retried release");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:2"), 0, "release under an id never granted");
    cr_expect_eq(mx_int(k, "sc", "renew", "tokA", "pa:1"), 0, "renew after release");

    /* a queued entry whose queue lease expired is skipped at release */
    char f3[32];
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:3", "q", NULL, f3, sizeof f3, NULL), 1);
    cr_expect_gt(strtoull(f3, NULL, 10), strtoull(f1, NULL, 10));
    cr_expect_eq(mx_acq(k, "sc", "tokC", "pc:1", "q", "50", NULL, 0, &third), 0);
    cr_expect_eq(third, 1, "the waiter was not queued");
    cr_expect_eq(zcard_q(&s, "sc"), 1);
    tu_sleep_ms(150);
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:3"), 1);
    cr_expect(!hget_is(&s, L, "a", "pc:1"), "the lock was handed to an expired waiter");
    cr_expect(hget_is(&s, L, "o", NULL), "the lock is owned after releasing to nobody");
    cr_expect_eq(zcard_q(&s, "sc"), 0, "the expired entry stayed queued");
    cr_expect_eq(mx_int(k, "sc", "qrenew", "tokC", "pc:1"), 0, "qrenew of a dropped entry");

    /* a live waiter gets the lock at release, and the release stays idempotent */
    char f4[32], f5[32], f5b[32];
    cr_expect_eq(mx_acq(k, "sc", "tokA", "pa:4", "q", NULL, f4, sizeof f4, NULL), 1);
    cr_expect_eq(mx_acq(k, "sc", "tokD", "pd:1", "q", NULL, NULL, 0, &third), 0);
    cr_expect_eq(third, 1);
    cr_expect_eq(mx_int(k, "sc", "qrenew", "tokD", "pd:1"), 1, "qrenew of a live entry");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:4"), 1);
    cr_expect(hget_is(&s, L, "a", "pd:1"), "not handed to the live waiter");
    cr_expect_eq(mx_int(k, "sc", "rel", "tokA", "pa:4"), 1, "a retried release after a handoff");
    cr_expect(hget_is(&s, L, "a", "pd:1"), "a retried release undid the handoff");
    cr_expect_eq(mx_int(k, "sc", "qrenew", "tokD", "pd:1"), 2, "qrenew after the handoff");
    cr_expect_eq(mx_acq(k, "sc", "tokD", "pd:1", "q", NULL, f5, sizeof f5, NULL), 1,
                 "the waiter's retried acq finds it granted");
    cr_expect_gt(strtoull(f5, NULL, 10), strtoull(f4, NULL, 10));
    cr_expect_eq(mx_acq(k, "sc", "tokD", "pd:1", "q", NULL, f5b, sizeof f5b, NULL), 1);
    cr_expect_str_eq(f5b, f5);
    cr_expect_eq(zcard_q(&s, "sc"), 0);

    /* cancel: a waiter leaving the queue; cancel after a grant keeps the grant */
    cr_expect_eq(mx_acq(k, "sc", "tokE", "pe:1", "q", NULL, NULL, 0, &third), 0);
    cr_expect_eq(zcard_q(&s, "sc"), 1);
    redisReply *r = mx(k, "sc", "cancel", "tokE", "pe:1", NULL, NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->integer == 0,
              "cancel of a queued waiter");
    freeReplyObject(r);
    cr_expect_eq(zcard_q(&s, "sc"), 0, "cancel left the entry");
    r = mx(k, "sc", "cancel", "tokD", "pd:1", NULL, NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->integer == 1,
              "cancel by the holder keeps the hold");
    freeReplyObject(r);
    cr_expect(hget_is(&s, L, "a", "pd:1"));
    cr_expect_eq(mx_int(k, "sc", "rel", "tokD", "pd:1"), 1);
    redisFree(k);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 15. A killed waiter is skipped                                                         */

typedef struct waiter_child {
    const ts_server_t *s;
} waiter_child_t;

static int waiter_child_main(void *arg)
{
    waiter_child_t *w = arg;
    rs_client_t *c = tu_open_client_ex(w->s, 400, 2000, NULL);
    if (!c)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "kw") != 0)
        return 11;
    rs_mutex_lock(m); /* killed while it waits */
    return 12;
}

Test(mutex, killed_waiter_skipped, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ch = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *mh = new_mutex(ch, "kw");
    cr_assert_eq(rs_mutex_lock(mh), 0);
    uint64_t fh = rs_mutex_fence(mh);

    waiter_child_t wc = {&s};
    pid_t pid = tu_spawn(waiter_child_main, &wc);
    cr_assert(wait_zcard(&s, "kw", 1, 10000), "the child waiter did not queue");

    rs_client_t *ct = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *mt = new_mutex(ct, "kw");
    locker_t T = {.m = mt, .wait_release = 1};
    locker_start(&T);
    cr_assert(wait_zcard(&s, "kw", 2, 5000), "the third waiter did not queue");
    tu_sleep_ms(100);

    kill(pid, SIGKILL);
    int st = tu_reap(pid, 5000);
    cr_assert(st >= 0 && WIFSIGNALED(st), "the waiter child was not killed (0x%x)", st);

    long long t0 = tu_mono_ms();
    int rc = rs_mutex_unlock(mh);
    cr_expect_eq(rc, 0, "holder unlock: %d", rc);
    cr_assert(tu_wait_atomic(&T.locked, 1, 10000), "the waiter behind the dead one never got it");
    cr_expect_eq(T.rc, 0, "T lock: %d %s", T.rc, T.err);
    cr_expect_lt(T.t_locked - t0, 400 + 2000 + 600, "T acquired %lld ms after the unlock",
                 T.t_locked - t0);
    cr_expect_gt(T.fence, fh);
    atomic_store(&T.release, 1);
    cr_assert(locker_join(&T, 5000));
    cr_expect_eq(T.unlock_rc, 0, "T unlock: %d", T.unlock_rc);
    cr_expect_eq(zcard_q(&s, "kw"), 0, "the dead waiter's entry is still queued");
    rs_mutex_destroy(mh);
    rs_mutex_destroy(mt);
    rs_client_close(ch);
    rs_client_close(ct);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* The holder thread locking again through a second handle of the same client            */

Test(mutex, same_thread_second_handle, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "h2");
    rs_mutex_t *m2 = new_mutex(c, "h2");
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f = rs_mutex_fence(m);
    int rc = rs_mutex_lock(m2);
    cr_expect_eq(rc, EDEADLK, "lock through a second handle by the holder thread: %d", rc);
    struct timespec dl = tu_abs_in(300);
    rc = rs_mutex_timedlock(m2, &dl);
    cr_expect_eq(rc, EDEADLK, "timedlock through a second handle by the holder thread: %d", rc);
    /* redisync.h: trylock returns "EBUSY otherwise (also when the calling thread holds it)" */
    rc = rs_mutex_trylock(m2);
    cr_expect_eq(rc, EBUSY, "trylock through a second handle by the holder thread: %d (%s)", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m2), EPERM, "unlock through the handle that does not hold");
    cr_expect_eq(zcard_q(&s, "h2"), 0, "the holder queued behind itself");
    cr_expect_eq(rs_mutex_fence(m), f, "the hold is untouched");
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* rs_client_close: blocked lock calls return ECANCELED, holds are released in Redis      */

Test(mutex, close_cancels_waiters_and_releases, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 5000, 2000, NULL);
    rs_client_t *cb = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *ma = new_mutex(ca, "cl");
    rs_mutex_t *mb = new_mutex(cb, "cl");
    cr_assert_eq(rs_mutex_lock(ma), 0);

    locker_t B = {.m = mb};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "cl", 1, 5000), "B did not queue");
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_client_close(cb), 0);
    cr_assert(locker_join(&B, 5000), "B's lock did not return after its client was closed");
    cr_expect_eq(B.rc, ECANCELED, "B's lock: %d %s", B.rc, B.err);
    cr_expect_lt(B.t_locked - t0, 3000);
    cr_expect_eq(zcard_q(&s, "cl"), 0, "the cancelled waiter is still queued");
    cr_expect_eq(rs_mutex_lock(mb), ECANCELED, "lock on a closed client");
    cr_expect_eq(rs_mutex_destroy(mb), 0, "destroy after close");

    /* closing the holder's client releases its hold (owner-checked) in Redis */
    cr_expect_eq(rs_client_close(ca), 0);
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{cl}:mutex o"), 0, "the hold survived close");
    cr_expect_eq(rs_mutex_destroy(ma), 0, "destroy after close");
    rs_client_t *cc = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *mc = new_mutex(cc, "cl");
    cr_expect_eq(rs_mutex_trylock(mc), 0, "free right after the holder's client closed");
    cr_expect_eq(rs_mutex_unlock(mc), 0);
    rs_mutex_destroy(mc);
    rs_client_close(cc);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* fork(): the parent's client is unusable in the child, and the parent's hold survives   */

typedef struct efork_arg {
    rs_client_t *c;
    rs_mutex_t *m;
} efork_arg_t;

static int efork_child_main(void *arg)
{
    efork_arg_t *a = arg;
    if (rs_mutex_lock(a->m) != RS_EFORK)
        return 20;
    if (rs_mutex_trylock(a->m) != RS_EFORK)
        return 21;
    if (rs_mutex_unlock(a->m) != RS_EFORK)
        return 22;
    rs_mutex_t *m2;
    if (rs_mutex_init(&m2, a->c, "fk") != RS_EFORK)
        return 23;
    if (rs_mutex_destroy(a->m) != 0)
        return 24;
    if (rs_client_close(a->c) != 0)
        return 25;
    return 0;
}

Test(mutex, fork_child_gets_efork, .timeout = 60, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "fk");
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f = rs_mutex_fence(m);
    /* let the watchdog thread settle into its timed wait, as it is most of the time: the
     * child inherits that state (and must still be able to close the client) */
    tu_sleep_ms(200);
    efork_arg_t a = {c, m};
    pid_t pid = tu_spawn(efork_child_main, &a);
    tu_assert_exit0(pid, tu_reap(pid, 5000),
                    "child using the parent's client (20-23: not RS_EFORK, "
                    "-1 status: hung in rs_mutex_destroy/rs_client_close)");
    tu_sleep_ms(1500); /* past the lease: the watchdog must still be renewing the parent's hold */
    cr_expect_eq(rs_mutex_fence(m), f);
    cr_expect_gt(rs_mutex_remaining(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), 0, "the parent's hold after the child closed its copy");
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* max_waiters: a full queue is RS_EQUEUE                                                 */

Test(mutex, queue_full, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 2000;
    cfg.max_waiters = 1;
    rs_client_t *ca, *cb, *cc;
    cr_assert_eq(rs_client_open(&ca, &cfg), 0);
    cr_assert_eq(rs_client_open(&cb, &cfg), 0);
    cr_assert_eq(rs_client_open(&cc, &cfg), 0);
    rs_mutex_t *ma = new_mutex(ca, "qf");
    rs_mutex_t *mb = new_mutex(cb, "qf");
    rs_mutex_t *mc = new_mutex(cc, "qf");
    cr_assert_eq(rs_mutex_lock(ma), 0);
    locker_t B = {.m = mb};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "qf", 1, 5000), "B did not queue");
    int rc = rs_mutex_lock(mc);
    cr_expect_eq(rc, RS_EQUEUE, "lock with a full queue: %d %s", rc, rs_client_lasterror(cc));
    cr_expect_eq(zcard_q(&s, "qf"), 1);
    cr_expect_eq(rs_mutex_unlock(ma), 0);
    cr_assert(locker_join(&B, 5000));
    cr_expect_eq(B.rc, 0, "B: %d %s", B.rc, B.err);
    cr_expect_eq(B.unlock_rc, 0);
    cr_expect_eq(rs_mutex_lock(mc), 0, "lock once the queue drained");
    cr_expect_eq(rs_mutex_unlock(mc), 0);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_mutex_destroy(mc);
    rs_client_close(ca);
    rs_client_close(cb);
    rs_client_close(cc);
    ts_server_stop(&s);
}

/* max_waiters counts waiters, not arrival numbers: a queue whose tail's number reached the
 * cap but that holds fewer waiters admits one more (common.lua q_add uses the tail's number
 * only to skip its ZCARD below the cap). maxw 2: B (1) and C (2) queue, B gets the lock, D
 * joins behind C. (Admitting past the cap is queue_full's failure.) */
Test(mutex, queue_numbers_past_the_cap_are_not_full, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 5000;
    cfg.max_waiters = 2;
    rs_client_t *cl[4];
    rs_mutex_t *m[4];
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(rs_client_open(&cl[i], &cfg), 0);
        m[i] = new_mutex(cl[i], "qn");
    }
    cr_assert_eq(rs_mutex_lock(m[0]), 0);
    locker_t B = {.m = m[1], .wait_release = 1}, C = {.m = m[2]}, D = {.m = m[3]};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "qn", 1, 5000), "B did not queue");
    locker_start(&C);
    cr_assert(wait_zcard(&s, "qn", 2, 5000), "C did not queue");
    cr_expect_eq(rs_mutex_unlock(m[0]), 0);
    for (int i = 0; i < 500 && !atomic_load(&B.locked); i++)
        tu_sleep_ms(10);
    cr_assert(atomic_load(&B.locked), "B was not handed the lock");
    cr_assert_eq(zcard_q(&s, "qn"), 1);
    locker_start(&D);
    cr_expect(wait_zcard(&s, "qn", 2, 5000), "D did not queue behind C (tail number 2, 1 waiter)");
    cr_expect_eq(atomic_load(&D.done), 0, "D's lock returned: %d %s", D.rc, D.err);
    atomic_store(&B.release, 1);
    cr_assert(locker_join(&B, 10000));
    cr_assert(locker_join(&C, 10000));
    cr_assert(locker_join(&D, 10000));
    cr_expect_eq(B.rc, 0, "B: %d %s", B.rc, B.err);
    cr_expect_eq(C.rc, 0, "C: %d %s", C.rc, C.err);
    cr_expect_eq(D.rc, 0, "D: %d %s", D.rc, D.err);
    for (int i = 0; i < 4; i++) {
        rs_mutex_destroy(m[i]);
        rs_client_close(cl[i]);
    }
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* A forged wake-up never grants: whoever can PUBLISH on a client's channel but cannot read */
/* the queue keys knows the channel and can guess acquisition ids "PUBLICID:N", but not   */
/* their secret; such messages at worst make the waiter retry (docs/security.md)         */

typedef struct forged_waiter {
    rs_mutex_t *m;
    atomic_int done;
    int rc;
    uint64_t fence;
} forged_waiter_t;

static void *forged_wait_main(void *arg)
{
    forged_waiter_t *w = arg;
    struct timespec dl = tu_abs_in(20000);
    w->rc = rs_mutex_timedlock(w->m, &dl);
    w->fence = rs_mutex_fence(w->m);
    if (w->rc == 0)
        rs_mutex_unlock(w->m);
    atomic_store(&w->done, 1);
    return NULL;
}

Test(mutex, forged_wakeup_never_grants, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *holder = tu_open_client(&s, 5000, 2000, NULL);
    rs_client_t *waiter = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *mh = new_mutex(holder, "forged");
    forged_waiter_t w = {.m = new_mutex(waiter, "forged")};
    cr_assert_eq(rs_mutex_lock(mh), 0);
    uint64_t f0 = rs_mutex_fence(mh);
    pthread_t th;
    tu_thread_start(&th, forged_wait_main, &w);
    cr_assert(wait_zcard(&s, "forged", 1, 5000), "the waiter never queued");

    /* every id the waiter's client can have used so far, as a route ("ID:N", what retry
     * messages carry) and with secrets a forger might try, each with a fence far above */
    const char *id = rs_client_id(waiter);
    long long delivered = 0;
    for (int n = 0; n < 64; n++) {
        const char *forms[] = {"%s:%x %llu", "%s:%x.0000000000000000 %llu",
                               "%s:%x.ffffffffffffffff %llu", "%s:%x. %llu", "%s:%x.%s %llu"};
        for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
            char msg[128];
            if (k == 4)
                snprintf(msg, sizeof msg, "%s:%x.%s %llu", id, n, id,
                         (unsigned long long)f0 + 1000000);
            else
                snprintf(msg, sizeof msg, forms[k], id, n, (unsigned long long)f0 + 1000000);
            delivered += ts_cmd_int(&s, "PUBLISH rs:client:%s %s", id, msg);
        }
    }
    cr_expect_gt(delivered, 0, "no forged message reached the waiter's subscriber");
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&w.done), 0, "a forged wake-up granted the lock (rc %d, fence %llu)",
                 w.rc, (unsigned long long)w.fence);
    cr_expect_eq(zcard_q(&s, "forged"), 1, "the waiter left the queue");
    cr_expect_eq(rs_mutex_remaining(mh) > 0, 1, "the holder lost its hold");

    /* the real release still hands over, with the real token */
    cr_expect_eq(rs_mutex_unlock(mh), 0);
    cr_assert(tu_thread_join(th, &w.done, 10000), "the waiter was not served after the release");
    cr_expect_eq(w.rc, 0, "waiter: %d", w.rc);
    cr_expect(w.fence > f0 && w.fence != f0 + 1000000,
              "the waiter's token %llu is not the handover's (holder had %llu)",
              (unsigned long long)w.fence, (unsigned long long)f0);
    rs_mutex_destroy(w.m);
    rs_mutex_destroy(mh);
    rs_client_close(waiter);
    rs_client_close(holder);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* An orphan (Redis holds the mutex for this thread under the id of a lock that returned  */
/* RS_ECONN after its script ran) is adopted by the thread's next lock, with a new token   */

Test(mutex, orphan_of_failed_lock_is_adopted, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 300, NULL);
    rs_client_t *other = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "orphan");
    rs_mutex_t *o = new_mutex(other, "orphan");
    cr_assert_eq(rs_mutex_lock(m), 0); /* connections and subscriber up before the stall */
    uint64_t f0 = rs_mutex_fence(m);
    cr_assert_eq(rs_mutex_unlock(m), 0);

    /* the server sleeps 1 s; the lock gives up after 300 ms, then Redis runs it */
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    redisAppendCommand(k, "DEBUG SLEEP 1");
    int done = 0;
    while (!done)
        cr_assert_eq(redisBufferWrite(k, &done), REDIS_OK);
    tu_sleep_ms(50);
    int rc = rs_mutex_lock(m);
    cr_assert_eq(rc, RS_ECONN, "lock during the stall: %d", rc);
    cr_expect_eq(rs_mutex_fence(m), 0, "a failed lock left a local hold");
    struct timeval tv = {3, 0};
    redisSetTimeout(k, tv);
    redisReply *r;
    if (redisGetReply(k, (void **)&r) == REDIS_OK)
        freeReplyObject(r);
    redisFree(k);
    rs_info_t in;
    cr_assert_eq(rs_inspect(c, "mutex", "orphan", &in), 0);
    cr_assert_eq(in.nholders, 1, "the failed lock did not run after the stall: no orphan");
    uint64_t orphan_fence = in.fence;
    cr_expect_eq(rs_mutex_trylock(o), EBUSY, "the orphan does not exclude others");

    /* the thread's next lock takes the orphan over at once, with a fresh token */
    struct timespec dl = tu_abs_in(10000);
    rc = rs_mutex_timedlock(m, &dl);
    cr_expect_eq(rc, 0, "lock after the orphan: %d (%s)", rc, rs_client_lasterror(c));
    cr_expect_gt(rs_mutex_fence(m), orphan_fence, "the adopted hold kept the orphan's token");
    cr_expect_gt(orphan_fence, f0);
    cr_expect_eq(rs_mutex_trylock(o), EBUSY);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    cr_expect_eq(rs_mutex_trylock(o), 0, "the adopted hold was not released");
    cr_expect_eq(rs_mutex_unlock(o), 0);

    /* a second handle of the thread still gets EDEADLK: that hold is known locally */
    rs_mutex_t *m2 = new_mutex(c, "orphan");
    cr_assert_eq(rs_mutex_lock(m), 0);
    cr_expect_eq(rs_mutex_lock(m2), EDEADLK);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(o);
    rs_mutex_destroy(m);
    rs_client_close(other);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* A peer that can read the queue keys sees the whole acquisition id: with confirm_wakeups
 * the woken waiter asks Redis once more, so even its forged grant only causes a retry */
Test(mutex, forged_wakeup_by_key_reader_with_confirm, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *holder = tu_open_client(&s, 5000, 2000, NULL);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 5000;
    cfg.timeout_ms = 2000;
    cfg.confirm_wakeups = 1;
    rs_client_t *waiter = NULL;
    cr_assert_eq(rs_client_open(&waiter, &cfg), 0, "%s", rs_client_lasterror(NULL));
    rs_mutex_t *mh = new_mutex(holder, "forgedk");
    forged_waiter_t w = {.m = new_mutex(waiter, "forgedk")};
    cr_assert_eq(rs_mutex_lock(mh), 0);
    uint64_t f0 = rs_mutex_fence(mh);
    pthread_t th;
    tu_thread_start(&th, forged_wait_main, &w);
    cr_assert(wait_zcard(&s, "forgedk", 1, 5000), "the waiter never queued");

    char acqid[128] = "";
    redisContext *rc = ts_connect(&s);
    cr_assert_not_null(rc);
    redisReply *q = redisCommand(rc, "ZRANGE rs:{forgedk}:mutex:q 0 0");
    cr_assert(q && q->type == REDIS_REPLY_ARRAY && q->elements == 1, "the queue entry");
    snprintf(acqid, sizeof acqid, "%s", q->element[0]->str);
    freeReplyObject(q);
    redisFree(rc);
    char msg[200];
    snprintf(msg, sizeof msg, "%s %llu", acqid, (unsigned long long)f0 + 1000000);
    long long got = ts_cmd_int(&s, "PUBLISH rs:client:%s %s", rs_client_id(waiter), msg);
    cr_expect_eq(got, 1, "the forged grant did not reach the waiter's subscriber");
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&w.done), 0, "a forged grant with the real id was trusted");
    cr_expect_eq(zcard_q(&s, "forgedk"), 1, "the waiter left the queue");

    cr_expect_eq(rs_mutex_unlock(mh), 0);
    cr_assert(tu_thread_join(th, &w.done, 10000), "the waiter was not served after the release");
    cr_expect_eq(w.rc, 0, "waiter: %d", w.rc);
    cr_expect(w.fence > f0 && w.fence != f0 + 1000000, "token %llu", (unsigned long long)w.fence);
    rs_mutex_destroy(w.m);
    rs_mutex_destroy(mh);
    rs_client_close(waiter);
    rs_client_close(holder);
    ts_server_stop(&s);
}

/* A slow on_lost callback still running when the client is closed. The watchdog runs the
 * callbacks with its lock released; a close that asked it to stop meanwhile went unseen, the
 * watchdog then slept with no deadline (no lease left) and close joined it for ever. Seen as
 * a rare hang of sentinel::failover_processes_carry_on in "close". */
static atomic_int slow_lost_entered;

static void slow_on_lost(const char *kind, const char *name, void *arg)
{
    (void)kind, (void)name, (void)arg;
    atomic_store(&slow_lost_entered, 1);
    tu_sleep_ms(500);
}

Test(mutex, close_while_on_lost_runs, .timeout = 30)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 300;
    cfg.on_lost = slow_on_lost;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0);
    rs_mutex_t *m = new_mutex(c, "cl");
    cr_assert_eq(rs_mutex_lock(m), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{cl}:mutex"), 1);
    cr_assert(tu_wait_atomic(&slow_lost_entered, 1, 5000), "on_lost was not called");
    cr_expect_eq(rs_mutex_unlock(m), RS_ELOST);
    rs_mutex_destroy(m);
    /* the callback sleeps for 500 ms more: close asks the watchdog to stop meanwhile */
    closer_t cl = {.c = c};
    cr_assert_eq(pthread_create(&cl.th, NULL, closer_main, &cl), 0);
    cr_expect(tu_thread_join(cl.th, &cl.done, 5000), "rs_client_close did not return within 5 s");
    ts_server_stop(&s);
}
