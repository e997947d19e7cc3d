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
    /* the release tombstones: a free lock keeps its last hold's 'a' (the id released last)
     * and 'r' (the one released before it, carried by the grant); a held lock only 'r';
     * "" once the key is gone. A retried release of either is answered 1. */
    char rel_a[64], rel_r[64];
    /* a second mutex, B, taken only together with this one by multilock.lua (parts A and B,
     * one acquisition id) and released part by part by mutex.lua, as rs_multilock does */
    char bkey[4][64];
    char ml_sha[41];
    int b_holder;       /* owner index, or -1 */
    char b_id[64];      /* the id it holds B under */
    unsigned long long b_last_fence;
} model_t;

/* A grant: the hold count is 1, no enter/leave call seen yet; the grant of a free lock carries
 * the id released last into 'r' (an orphan's adoption, of a held lock, keeps 'r'). */
static void new_hold(model_t *m, int i)
{
    tm_fresh_hold(&m->w.o[i]);
    if (m->rel_a[0])
        tm_set(m->rel_r, sizeof m->rel_r, m->rel_a);
    m->rel_a[0] = '\0';
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
    redisReply *r = tm_call_owner(&m->w, "acq", i, o->id, mode);
    /* free with live waiters (the holder's lease ran out): the head is served first */
    if (m->holder < 0)
        hand_to_head(m);
    if (m->holder < 0) {
        tm_expect_grant(&m->w, i, r, "free, nobody waiting");
        new_hold(m, i);
        m->holder = i;
    } else {
        tm_expect_busy_new(&m->w, i, r, mode, "held");
        /* the counter a busy answer shows: a wake-up whose token is not above it is taken
         * for stale (lib/wait.c), so it must not be below any token granted yet */
        char seen[32];
        unsigned long long v = strtoull(tm_el(r, 3, seen, sizeof seen), NULL, 10);
        TM_FAIL_IF(v < tm_last_granted, "busy reply's counter %llu below the last grant's %llu",
                   v, tm_last_granted);
        /* the holder's lease left (the waiter's sleep bound): above 0 and not beyond the
         * lock's own TTL, read just after (1 s for the time between the two) */
        long long ttl = strtoll(tm_el(r, 1, seen, sizeof seen), NULL, 10);
        long long pttl = tm_int(tm_cmd(&m->w, "PTTL %s", m->w.key[0]));
        TM_FAIL_IF(ttl <= 0 || ttl > pttl + 1000, "busy reply's holder lease left %lld, PTTL %lld",
                   ttl, pttl);
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
    redisReply *r = tm_call_owner(&m->w, "acq", i, o->id, adopt ? "Q" : "q");
    long long k0 = r->element[0]->integer;
    if (adopt) {
        tm_expect_grant(&m->w, i, r, "an orphan to adopt");
        new_hold(m, i);
    } else {
        TM_FAIL_IF(k0 != -1, "a second id of the holder: reply %lld, not -1", k0);
        tm_set(o->id, sizeof o->id, old); /* it keeps its hold under the old id */
    }
    freeReplyObject(r);
}

/* The multilock holder i releases part B too (whatever became of its hold of A). */
static void release_b(model_t *m, int i)
{
    if (m->b_holder != i)
        return;
    snprintf(tm_what, sizeof tm_what, "rel of part B by owner %d, id %s", i, m->b_id);
    long long v = tm_int(tm_call_keys(&m->w, m->bkey, 4, "rel", i, m->b_id, NULL, NULL, 0));
    TM_FAIL_IF(v != 1, "reply %lld", v);
    m->b_holder = -1;
}

static void step_release(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    release_b(m, i);
    snprintf(tm_what, sizeof tm_what, "rel by owner %d, id %s%s", i, o->id,
             o->lost ? " (lost)" : "");
    long long v = tm_int(tm_call_owner(&m->w, "rel", i, o->id, NULL));
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
    tm_set(m->rel_a, sizeof m->rel_a, o->id); /* the next grant, a handoff too, carries it */
    hand_to_head(m);
}

static redisReply *multilock_call(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    const char *argv[] = {"EVALSHA", m->ml_sha, "6", m->w.key[0], m->w.key[1], m->w.key[2],
                          m->bkey[0], m->bkey[1], m->bkey[2], o->tok, o->id, TM_LEASE};
    redisReply *r = tm_send(&m->w, (int)(sizeof argv / sizeof argv[0]), argv);
    TM_FAIL_IF(r->type != REDIS_REPLY_ARRAY || r->elements < 2, "reply type %d", r->type);
    return r;
}

/* multilock.lua takes A and B under one id, or nothing: A busy or with anyone queued (dead
 * entries too: they go first) is part 1's refusal, B busy part 2's. A grant is sent again at
 * once (its reply lost) and must be answered with the same tokens. Returns whether it was
 * granted. */
static int step_multilock(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    tm_new_id(&m->w, i);
    redisReply *r = tm_cmd(&m->w, "ZCARD %s", m->w.key[2]);
    long long queued = r->integer;
    freeReplyObject(r);
    snprintf(tm_what, sizeof tm_what, "multilock of A and B by owner %d, id %s (A: holder %d, "
             "%lld queued; B: holder %d)", i, o->id, m->holder, queued, m->b_holder);
    r = multilock_call(m, i);
    long long k0 = r->element[0]->integer, part = r->element[1]->integer;
    char fa[32], fb[32], again[32];
    tm_el(r, 1, fa, sizeof fa);
    tm_el(r, 2, fb, sizeof fb);
    freeReplyObject(r);
    if (m->holder >= 0 || queued > 0 || m->b_holder >= 0) {
        long long want = m->holder >= 0 || queued > 0 ? 1 : 2;
        TM_FAIL_IF(k0 != 0 || part != want, "reply {%lld, %lld}, not part %lld busy", k0, part,
                   want);
        return 0;
    }
    TM_FAIL_IF(k0 != 1, "both free, nobody queued: reply %lld, not a grant", k0);
    tm_saw_fence(fa);
    unsigned long long b = strtoull(fb, NULL, 10);
    TM_FAIL_IF(b <= m->b_last_fence, "part B's token %llu not above %llu", b, m->b_last_fence);
    m->b_last_fence = b;
    tm_set(o->fence, sizeof o->fence, fa);
    o->st = TM_HOLDING, o->handed = o->lost = 0;
    new_hold(m, i);
    m->holder = m->b_holder = i;
    tm_set(m->b_id, sizeof m->b_id, o->id);

    snprintf(tm_what, sizeof tm_what, "multilock again by owner %d, id %s", i, o->id);
    r = multilock_call(m, i);
    TM_FAIL_IF(r->element[0]->integer != 1 || strcmp(tm_el(r, 1, again, sizeof again), fa) != 0 ||
                   strcmp(tm_el(r, 2, again, sizeof again), fb) != 0,
               "reply %lld: not the grant again (%s, %s)", r->element[0]->integer, fa, fb);
    freeReplyObject(r);
    return 1;
}

/* a release retried (its reply lost): 1 while a tombstone names it, else 0 */
static void step_release_again(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "rel again by owner %d, id %s (tombstones '%s' '%s')", i,
             o->released, m->rel_a, m->rel_r);
    long long v = tm_int(tm_call_owner(&m->w, "rel", i, o->released, NULL));
    long long want = strcmp(m->rel_r, o->released) == 0 ||
                     (m->rel_a[0] && strcmp(m->rel_a, o->released) == 0);
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    o->released[0] = '\0';
}

/* the operator's force: drops the hold, hands to the first live waiter; the tombstone goes */
static void step_force(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "force (holder %d)", m->holder);
    long long v = tm_int(tm_call_owner(&m->w, "force", 0, "op:0", NULL));
    TM_FAIL_IF(v != (m->holder >= 0), "reply %lld", v);
    if (m->holder >= 0) {
        holder_lost(m);
        m->rel_a[0] = m->rel_r[0] = '\0'; /* the key is deleted, tombstones and all */
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
    m->rel_a[0] = m->rel_r[0] = '\0';
}

/* ----- the check after every step ------------------------------------------------------- */
static void check(tm_world_t *w)
{
    model_t *m = (model_t *)w;
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
    r = tm_cmd(&m->w, "HMGET %s o a", m->bkey[0]);
    int b_held = r->element[0]->type == REDIS_REPLY_STRING;
    TM_FAIL_IF(b_held != (m->b_holder >= 0) ||
                   (b_held && (strcmp(r->element[0]->str, m->w.o[m->b_holder].tokhash) != 0 ||
                               strcmp(r->element[1]->str, m->b_id) != 0)),
               "part B is %s, the model says %s", b_held ? r->element[1]->str : "free",
               m->b_holder >= 0 ? m->b_id : "free");
    freeReplyObject(r);
}

/* ----- the run ---------------------------------------------------------------------------- */
enum { K_REREL = TM_K_OWN, K_ACQ, K_REL, K_ORPHAN, K_RUNS_OUT, K_FORCE, K_COUNT, K_MULTI_NO,
       K_MULTI };

static int step(tm_world_t *w, int i, unsigned dice)
{
    model_t *m = (model_t *)w;
    tm_owner_t *o = &w->o[i];
    if (o->st == TM_IDLE) {
        if (o->released[0] && dice < 15)
            return step_release_again(m, i), K_REREL;
        /* a multilock gets both parts only when A is free and nobody queued: try it then */
        if (dice < 20 || (m->holder < 0 && m->w.nq == 0 && dice < 90))
            return step_multilock(m, i) ? K_MULTI : K_MULTI_NO;
        return step_acquire(m, i), K_ACQ;
    }
    if (o->st == TM_QUEUED || o->handed)
        return tm_step_waiter(w, i, dice, 1, w->key[3], " " TM_LEASE " 0");
    if (o->lost) {
        /* a multilock that learns of a lost part unlocks every part */
        if (dice < 40 || m->b_holder == i)
            return step_release(m, i), K_REL;
        if (dice < 80)
            return tm_step_renew(w, i), TM_K_RENEW;
        return tm_step_count(w, i), K_COUNT;
    }
    if (dice < 35)
        return step_release(m, i), K_REL;
    if (dice < 50)
        return tm_step_count(w, i), K_COUNT;
    if (dice < 62)
        return tm_step_renew(w, i), TM_K_RENEW;
    if (dice < 72)
        return tm_step_acquire_again(w, i), TM_K_AGAIN;
    if (dice < 80)
        return step_orphan(m, i), K_ORPHAN;
    if (dice < 88)
        return step_expire_holder(m), K_RUNS_OUT;
    if (dice < 96)
        return step_force(m), K_FORCE;
    return tm_counter_ahead(w, w->key[1]), TM_K_AHEAD;
}

static void freed(tm_world_t *w)
{
    hand_to_head((model_t *)w); /* a free lock goes on to the first live waiter */
}

static tm_world_t *start(const ts_server_t *s)
{
    static const char *const suffixes[] = {"", "fence", "q", "qi"};
    model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->holder = m->b_holder = -1;
    m->w.freed = freed;
    tm_world_init(&m->w, s, &rs_script_mutex, "mutex", suffixes, 4);
    for (int j = 0; j < 4; j++)
        snprintf(m->bkey[j], sizeof m->bkey[j], "rs:{model%u}:mutex-b%s%s", tm_seed,
                 suffixes[j][0] ? ":" : "", suffixes[j]);
    tm_load(&m->w, &rs_script_multilock, m->ml_sha);
    return &m->w;
}

Test(model, mutex_script_against_model, .timeout = 120)
{
    static const tm_model_t model = {
        .kinds = {TM_KINDS, "re-released", "acq", "rel", "orphan", "lease ran out", "force",
                  "enter/leave", "multilock refused", "multilock granted", NULL},
        .start = start, .step = step, .check = check};
    tm_run(&model);
}
