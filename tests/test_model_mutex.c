/*
 * test_model_mutex.c - randomized model check of the mutex's script
 * (primitives/mutex/mutex.lua, also the recursive mutex's): thousands of random protocol
 * calls sent straight to Redis with EVALSHA, each reply compared with what a small model of
 * the protocol (docs/scripts.md, "Keys and script protocols") says, and the keys compared
 * with the model after every step.
 *
 * The calls are the ones the library makes, in any order a set of owners could make them:
 * acquire (try, queue, adopt an orphan), the retry of an acquire whose reply was lost, the
 * re-sent acquire of a woken waiter, release and its retry, renewal, queue renewal, cancel,
 * and the operator's force; the faults are a holder whose lease runs out (its key expires),
 * a waiter that dies (its queue entry's lease is set in the past) and a fencing counter
 * ahead of the clock. What must hold: at most one holder, the one the model expects; a free
 * lock goes to the first live waiter (FIFO), never to a dead one, and a newcomer never
 * barges past a live waiter; fencing tokens rise with every grant; a retried acquire or
 * release is answered as the first call was; a lost hold is reported lost. The script's
 * uncontended fast paths and its full paths must agree with one model: a divergence shows
 * up as a wrong reply or a wrong key. Shared with the semaphore's: tests/support/test_model.h.
 */
#include <criterion/criterion.h>

#include <unistd.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_model.h"

typedef struct model {
    tm_world_t w;       /* keys: lock, fence, queue, queue info */
    int holder;         /* owner index, or -1 */
    char tombstone[64]; /* the lock's 'r': the id released last; "" once wiped */
    char lastcall[TM_OWNERS][32]; /* rmutex: the holder's last enter/leave call id and op */
    const char *lastop[TM_OWNERS];
    int ncalls[TM_OWNERS];
} model_t;

/* A grant: the hold count is 1, no enter/leave call seen yet. */
static void new_hold(model_t *m, int i)
{
    m->w.o[i].n = 1;
    m->lastcall[i][0] = '\0';
}

static redisReply *call(model_t *m, const char *op, int i, const char *acq, const char *mode)
{
    return tm_call(&m->w, op, i, acq, mode, NULL, 0);
}

static long long call_int(model_t *m, const char *op, int i, const char *acq)
{
    return tm_int(call(m, op, i, acq, NULL));
}

/* The lock is free: the script hands it to the first live waiter, if any (its fence is
 * read back from the lock). prev_wiped: the grant's 'r' is "" (force). */
static void hand_to_head(model_t *m)
{
    if (m->holder >= 0 || m->w.nq == 0)
        return;
    int h = m->w.q[0];
    tm_q_remove(&m->w, h);
    tm_owner_t *o = &m->w.o[h];
    o->st = TM_HOLDING;
    o->handed = 1;
    o->lost = 0;
    new_hold(m, h);
    redisReply *r = tm_cmd(&m->w, "HGET %s f", m->w.key[0]);
    TM_FAIL_IF(r->type != REDIS_REPLY_STRING, "no fencing token after handing over to %s", o->id);
    tm_set(o->fence, sizeof o->fence, r->str);
    freeReplyObject(r);
    tm_saw_fence(o->fence);
    m->holder = h;
}

/* The holder loses its hold (lease ran out, or force): it does not know yet. */
static void holder_lost(model_t *m)
{
    if (m->holder < 0)
        return;
    m->w.o[m->holder].lost = 1;
    m->holder = -1;
}

/* ----- the steps -------------------------------------------------------------------------- */

/* acquire by an idle owner, under a new id: try, or queue */
static void step_acquire(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    const char *mode = tm_rnd(3) == 0 ? "t" : "q";
    tm_new_id(&m->w, i);
    snprintf(tm_what, sizeof tm_what, "acq %s by owner %d, id %s", mode, i, o->id);
    redisReply *r = call(m, "acq", i, o->id, mode);
    /* free with live waiters (the holder's lease ran out): the head is served first */
    if (m->holder < 0)
        hand_to_head(m);
    char f[32];
    long long k0 = r->element[0]->integer;
    if (m->holder < 0) {
        TM_FAIL_IF(k0 != 1, "free, nobody waiting: reply %lld, not a grant", k0);
        tm_el(r, 1, f, sizeof f);
        tm_saw_fence(f);
        o->st = TM_HOLDING, o->handed = o->lost = 0;
        tm_set(o->fence, sizeof o->fence, f);
        new_hold(m, i);
        m->holder = i;
    } else {
        TM_FAIL_IF(k0 != 0, "held by owner %d: reply %lld, not busy", m->holder, k0);
        TM_FAIL_IF(r->elements < 3 || r->element[2]->integer != (*mode == 'q'),
                   "busy reply's 'queued' is not %d", *mode == 'q');
        if (*mode == 'q') {
            o->st = TM_QUEUED;
            m->w.q[m->w.nq++] = i;
        }
    }
    freeReplyObject(r);
}

/* the same acquire again, its reply lost (holder), or a woken waiter's re-sent call */
static void step_acquire_again(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "acq again by owner %d, id %s (%s)", i, o->id,
             o->st == TM_QUEUED ? "queued" : o->handed ? "handed over" : "holding");
    redisReply *r = call(m, "acq", i, o->id, "q");
    if (m->holder < 0 && m->w.nq > 0 && m->w.q[0] != i)
        hand_to_head(m);
    char f[32];
    long long k0 = r->element[0]->integer;
    if (m->holder == i) {
        TM_FAIL_IF(k0 != 1, "its own hold: reply %lld, not the grant again", k0);
        TM_FAIL_IF(strcmp(tm_el(r, 1, f, sizeof f), o->fence) != 0,
                   "the grant again with token %s, not %s", f, o->fence);
        o->handed = 0;
    } else if (m->holder < 0) {
        /* free, and this waiter is the first live one: granted now */
        TM_FAIL_IF(k0 != 1, "free, first live waiter: reply %lld, not a grant", k0);
        tm_q_remove(&m->w, i);
        tm_el(r, 1, f, sizeof f);
        tm_saw_fence(f);
        o->st = TM_HOLDING, o->handed = o->lost = 0;
        tm_set(o->fence, sizeof o->fence, f);
        new_hold(m, i);
        m->holder = i;
    } else {
        TM_FAIL_IF(k0 != 0, "held by owner %d: reply %lld", m->holder, k0);
        TM_FAIL_IF(r->elements < 3 || r->element[2]->integer != 1, "a waiter left unqueued");
    }
    freeReplyObject(r);
}

/* a holder whose earlier call failed after the script ran asks anew: "Q" adopts, "q" refuses */
static void step_orphan(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    int adopt = tm_rnd(2);
    char old[64];
    tm_set(old, sizeof old, o->id);
    tm_new_id(&m->w, i);
    snprintf(tm_what, sizeof tm_what, "acq %s by holder %d under a new id %s (holds %s)",
             adopt ? "Q" : "q", i, o->id, old);
    redisReply *r = call(m, "acq", i, o->id, adopt ? "Q" : "q");
    long long k0 = r->element[0]->integer;
    if (adopt) {
        char f[32];
        TM_FAIL_IF(k0 != 1, "orphan not adopted: reply %lld", k0);
        tm_el(r, 1, f, sizeof f);
        tm_saw_fence(f);
        tm_set(o->fence, sizeof o->fence, f);
        new_hold(m, i);
    } else {
        TM_FAIL_IF(k0 != -1, "a second id of the holder: reply %lld, not -1", k0);
        tm_set(o->id, sizeof o->id, old); /* it keeps its hold under the old id */
    }
    freeReplyObject(r);
}

static void step_release(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "rel by owner %d, id %s%s", i, o->id,
             o->lost ? " (lost)" : "");
    long long v = call_int(m, "rel", i, o->id);
    if (o->lost) {
        TM_FAIL_IF(v != 0, "a lost hold released: reply %lld", v);
        o->st = TM_IDLE, o->lost = o->handed = 0;
        o->released[0] = '\0';
        return;
    }
    TM_FAIL_IF(v != 1, "the holder's release: reply %lld", v);
    m->holder = -1;
    o->st = TM_IDLE, o->handed = 0;
    tm_set(o->released, sizeof o->released, o->id);
    tm_set(m->tombstone, sizeof m->tombstone, o->id);
    hand_to_head(m);
}

/* a release retried (its reply lost): 1 while the lock's tombstone names it, else 0 */
static void step_release_again(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "rel again by owner %d, id %s (tombstone %s)", i,
             o->released, m->tombstone[0] ? m->tombstone : "none");
    long long v = call_int(m, "rel", i, o->released);
    long long want = strcmp(m->tombstone, o->released) == 0;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    o->released[0] = '\0';
}

static void step_renew(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "renew by owner %d, id %s%s", i, o->id,
             o->lost ? " (lost)" : "");
    long long v = call_int(m, "renew", i, o->id);
    TM_FAIL_IF(v != !o->lost, "reply %lld", v);
    if (o->lost)
        o->st = TM_IDLE, o->lost = o->handed = 0;
}

/* The recursive mutex's re-entry (same script): enter or leave counts one more or one fewer
 * (never below 1: the last unlock is rel); the same call id again, a retry, counts nothing. */
static void step_count(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    int retry = m->lastcall[i][0] && tm_rnd(4) == 0;
    const char *op = retry ? m->lastop[i] : o->n > 1 && tm_rnd(2) ? "leave" : "enter";
    if (!retry)
        snprintf(m->lastcall[i], sizeof m->lastcall[i], "c%d.%d", i, ++m->ncalls[i]);
    snprintf(tm_what, sizeof tm_what, "%s %s%s by owner %d (count %d), id %s%s", op,
             m->lastcall[i], retry ? " again" : "", i, o->n, o->id, o->lost ? " (lost)" : "");
    const char *extra[1] = {m->lastcall[i]};
    long long v = tm_int(tm_call(&m->w, op, i, o->id, NULL, extra, 1));
    long long want = o->lost ? 0 : retry ? o->n : op[0] == 'e' ? o->n + 1 : o->n - 1;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    m->lastop[i] = op;
    if (o->lost)
        o->st = TM_IDLE, o->lost = o->handed = 0;
    else
        o->n = (int)want;
}

static void step_qrenew(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "qrenew by owner %d, id %s%s", i, o->id,
             o->handed ? (o->lost ? " (handed, lost)" : " (handed)") : "");
    long long v = call_int(m, "qrenew", i, o->id);
    long long want = o->st == TM_QUEUED ? 1 : o->lost ? 0 : 2;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    if (want == 2)
        o->handed = 0;
    else if (want == 0)
        o->st = TM_IDLE, o->lost = o->handed = 0;
}

static void step_cancel(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "cancel by owner %d, id %s%s", i, o->id,
             o->handed ? (o->lost ? " (handed, lost)" : " (handed)") : "");
    redisReply *r = call(m, "cancel", i, o->id, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    long long k0 = r->element[0]->integer;
    if (o->st == TM_HOLDING && !o->lost) {
        char f[32];
        TM_FAIL_IF(k0 != 1, "handed over, yet cancel says %lld", k0);
        TM_FAIL_IF(strcmp(tm_el(r, 1, f, sizeof f), o->fence) != 0, "token %s, not %s", f,
                   o->fence);
        o->handed = 0;
    } else {
        TM_FAIL_IF(k0 != 0, "reply %lld, not left the queue", k0);
        tm_q_remove(&m->w, i);
        o->st = TM_IDLE, o->lost = o->handed = 0;
        hand_to_head(m); /* a free lock goes on to the next live waiter */
    }
    freeReplyObject(r);
}

/* the operator's force: drops the hold, hands to the first live waiter; the tombstone goes */
static void step_force(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "force (holder %d)", m->holder);
    long long v = call_int(m, "force", 0, "op:0");
    TM_FAIL_IF(v != (m->holder >= 0), "reply %lld", v);
    if (m->holder >= 0) {
        holder_lost(m);
        m->tombstone[0] = '\0';
        hand_to_head(m);
    }
}

/* fault: the holder's lease runs out (its process stopped); the key, tombstone and all, goes */
static void step_expire_holder(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "the lease of holder %d runs out", m->holder);
    freeReplyObject(tm_cmd(&m->w, "PEXPIRE %s 1", m->w.key[0]));
    usleep(3000);
    holder_lost(m);
    m->tombstone[0] = '\0';
}

/* ----- the check after every step ------------------------------------------------------- */
static void check_keys(model_t *m)
{
    redisReply *r = tm_cmd(&m->w, "HMGET %s o a", m->w.key[0]);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    int held = r->element[0]->type == REDIS_REPLY_STRING;
    if (m->holder < 0) {
        TM_FAIL_IF(held, "the lock is owned (by %s), the model says free",
                   r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "?");
    } else {
        tm_owner_t *o = &m->w.o[m->holder];
        TM_FAIL_IF(!held, "the lock is free, the model says held by owner %d (%s)", m->holder,
                   o->id);
        TM_FAIL_IF(strcmp(r->element[0]->str, o->tokhash) != 0 ||
                       r->element[1]->type != REDIS_REPLY_STRING ||
                       strcmp(r->element[1]->str, o->id) != 0,
                   "held under id %s, the model says %s", r->element[1]->str, o->id);
    }
    freeReplyObject(r);
    tm_check_queue(&m->w, m->w.key[2]);
}

/* ----- the run ---------------------------------------------------------------------------- */
static void run(const ts_server_t *s, unsigned seed)
{
    static const char *const suffixes[] = {"", "fence", "q", "qi"};
    model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    tm_begin(seed);
    m->holder = -1;
    tm_world_init(&m->w, s, &rs_script_mutex, "mutex", suffixes, 4);

    int counts[16] = {0};
    for (tm_step = 0; tm_step < TM_STEPS; tm_step++) {
        int i = (int)tm_rnd(TM_OWNERS);
        tm_owner_t *o = &m->w.o[i];
        unsigned dice = tm_rnd(100);
        int kind;
        if (o->st == TM_IDLE) {
            if (o->released[0] && dice < 15)
                step_release_again(m, i), kind = 0;
            else
                step_acquire(m, i), kind = 1;
        } else if (o->st == TM_QUEUED) {
            if (dice < 40)
                step_acquire_again(m, i), kind = 2;
            else if (dice < 60)
                step_qrenew(m, i), kind = 3;
            else if (dice < 80)
                step_cancel(m, i), kind = 4;
            else
                tm_kill_waiter(&m->w, i, m->w.key[3], " " TM_LEASE " 0"), kind = 5;
        } else if (o->handed) {
            /* it learns by its woken call, its queue renewal or its cancel */
            if (dice < 50 && !o->lost)
                step_acquire_again(m, i), kind = 2;
            else if (dice < 75)
                step_qrenew(m, i), kind = 3;
            else
                step_cancel(m, i), kind = 4;
        } else if (o->lost) {
            if (dice < 40)
                step_release(m, i), kind = 6;
            else if (dice < 80)
                step_renew(m, i), kind = 7;
            else
                step_count(m, i), kind = 12;
        } else {
            if (dice < 35)
                step_release(m, i), kind = 6;
            else if (dice < 50)
                step_count(m, i), kind = 12;
            else if (dice < 62)
                step_renew(m, i), kind = 7;
            else if (dice < 72)
                step_acquire_again(m, i), kind = 2;
            else if (dice < 80)
                step_orphan(m, i), kind = 8;
            else if (dice < 88)
                step_expire_holder(m), kind = 9;
            else if (dice < 96)
                step_force(m), kind = 10;
            else
                tm_counter_ahead(&m->w, m->w.key[1]), kind = 11;
        }
        counts[kind]++;
        check_keys(m);
    }
    cr_log_info("seed %u: %d steps: re-released %d, acq %d, acq again %d, qrenew %d, cancel %d, "
                "waiter died %d, rel %d, renew %d, orphan %d, lease ran out %d, force %d, counter "
                "ahead %d, enter/leave %d; last token %llu", seed, TM_STEPS, counts[0],
                counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], counts[7],
                counts[8], counts[9], counts[10], counts[11], counts[12], tm_last_fence);
    /* every kind of step happened, or the run proved less than it claims */
    for (int kind = 0; kind <= 12; kind++)
        cr_expect_gt(counts[kind], 0, "seed %u: step kind %d never ran", seed, kind);
    redisFree(m->w.k);
    free(m);
}

Test(model, mutex_script_against_model, .timeout = 120)
{
    ts_server_t s;
    tu_start_server(&s);
    unsigned seeds[3];
    for (int i = 0, n = tm_seeds(seeds); i < n; i++)
        run(&s, seeds[i]);
    ts_server_stop(&s);
}
