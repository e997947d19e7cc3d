/*
 * test_model.c - randomized model check of the mutex's script (primitives/mutex/mutex.lua,
 * also the recursive mutex's): thousands of random protocol calls sent straight to Redis with
 * EVALSHA, each reply compared with what a small model of the protocol (docs/scripts.md,
 * "Keys and script protocols") says, and the keys compared with the model after every step.
 *
 * The calls are the ones the library makes, in any order a set of owners could make them:
 * acquire (try, queue, adopt an orphan), the retry of an acquire whose reply was lost, the
 * re-sent acquire of a woken waiter, release and its retry, renewal, queue renewal, cancel,
 * and the operator's force; the faults are a holder whose lease runs out (its key expires)
 * and a waiter that dies (its queue entry's lease is set in the past). What must hold: at
 * most one holder, the one the model expects; a free lock goes to the first live waiter
 * (FIFO), never to a dead one, and a newcomer never barges past a live waiter; fencing tokens
 * rise with every grant; a retried acquire or release is answered as the first call was; a
 * lost hold is reported lost. The script's uncontended fast paths and its full paths must
 * agree with one model: a divergence shows up as a wrong reply or a wrong key.
 *
 * A run is reproducible from its seed (printed on failure; RS_MODEL_SEED=N picks one).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "redis_server.h"
#include "scripts.h"
#include "test_assert.h"

#define MO 6          /* owners (threads, of any processes) */
#define STEPS 2500    /* random calls per seed */
#define LEASE "60000" /* long enough never to run out by itself during a run */
#define QLEASE "60000"

typedef enum { IDLE, QUEUED, HOLDING } ost_t;

typedef struct owner {
    char tok[48];      /* owner token (a new one when a dead waiter's process comes back) */
    char tokhash[48];  /* SHA1 of it, as the script stores it */
    char id[64];       /* its current or last acquisition id */
    ost_t st;
    int handed;        /* HOLDING, handed over while queued: it has not learned yet */
    int lost;          /* HOLDING in its own view, but the lease ran out or was forced */
    char fence[32];    /* HOLDING: the token of its hold */
    char released[64]; /* the id of its last release, for a retry; "" if none */
    int gen, nid;
} owner_t;

typedef struct model {
    redisContext *k;
    char sha[41];
    char key[4][64];         /* lock, fence, queue, queue info */
    owner_t o[MO];
    int holder;              /* owner index, or -1 */
    int q[4 * MO], nq;       /* live waiters, in arrival order */
    char dead[STEPS][64];    /* ids of dead waiters' entries (may linger in the queue) */
    int ndead;
    char tombstone[64];      /* the lock's 'r': the id released last; "" once wiped */
    unsigned long long last_fence;
    unsigned long long rng;
    unsigned seed;
    int step;
} model_t;

static char what_[192]; /* the step being made, for failure messages (one test thread) */

/* Copies an id or token between fields of the model (snprintf would warn of overlap). */
static void set_str(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src);
    if (n >= len)
        n = len - 1;
    memmove(dst, src, n);
    dst[n] = '\0';
}

static unsigned rnd(model_t *m, unsigned n)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    return (unsigned)(m->rng % n);
}

static redisReply *cmd(model_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(m->k, fmt, ap);
    va_end(ap);
    cr_assert_not_null(r, "seed %u step %d (%s): connection error", m->seed, m->step, what_);
    return r;
}

/* One call of mutex.lua: op by owner i under acquisition id acq, in mode (acq). */
static redisReply *call(model_t *m, const char *op, int i, const char *acq, const char *mode)
{
    const char *argv[16];
    size_t lens[16];
    int n = 0;
    argv[n++] = "EVALSHA";
    argv[n++] = m->sha;
    argv[n++] = "4";
    for (int j = 0; j < 4; j++)
        argv[n++] = m->key[j];
    argv[n++] = op;
    argv[n++] = m->o[i].tok;
    argv[n++] = acq;
    argv[n++] = LEASE;
    argv[n++] = "rs:client:";
    argv[n++] = mode ? mode : "q";
    argv[n++] = "100";
    argv[n++] = QLEASE;
    for (int j = 0; j < n; j++)
        lens[j] = strlen(argv[j]);
    redisReply *r = redisCommandArgv(m->k, n, argv, lens);
    cr_assert_not_null(r, "seed %u step %d (%s): connection error", m->seed, m->step, what_);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "seed %u step %d (%s): %s", m->seed, m->step,
                  what_, r->str);
    return r;
}

static long long call_int(model_t *m, const char *op, int i, const char *acq)
{
    redisReply *r = call(m, op, i, acq, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "seed %u step %d (%s): reply type %d", m->seed,
                 m->step, what_, r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static const char *str_el(const redisReply *r, size_t i, char *buf, size_t len)
{
    buf[0] = '\0';
    if (i < r->elements && r->element[i]->type == REDIS_REPLY_STRING)
        snprintf(buf, len, "%s", r->element[i]->str);
    else if (i < r->elements && r->element[i]->type == REDIS_REPLY_INTEGER)
        snprintf(buf, len, "%lld", r->element[i]->integer);
    return buf;
}

#define FAIL_IF(cond, ...)                                                                    \
    do {                                                                                      \
        if (cond) {                                                                           \
            char msg_[256];                                                                   \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                         \
            cr_assert_fail("seed %u step %d (%s): %s", m->seed, m->step, what_, msg_);      \
        }                                                                                     \
    } while (0)

/* A new grant's token: above every earlier one. */
static void saw_fence(model_t *m, const char *f)
{
    unsigned long long v = strtoull(f, NULL, 10);
    FAIL_IF(v <= m->last_fence, "fencing token %llu not above the previous %llu", v,
            m->last_fence);
    m->last_fence = v;
}

static void new_incarnation(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    o->gen++;
    snprintf(o->tok, sizeof o->tok, "tok%d.%d.%u", i, o->gen, m->seed);
    redisReply *r = cmd(m, "EVAL %s 0 %s", "return redis.sha1hex(ARGV[1])", o->tok);
    cr_assert_eq(r->type, REDIS_REPLY_STRING);
    set_str(o->tokhash, sizeof o->tokhash, r->str);
    freeReplyObject(r);
    o->st = IDLE;
    o->handed = o->lost = 0;
    o->id[0] = o->fence[0] = o->released[0] = '\0';
}

static void new_id(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(o->id, sizeof o->id, "p%d.%d:%d.%08x", i, o->gen, ++o->nid, rnd(m, 0x7fffffff));
}

static void q_remove(model_t *m, int i)
{
    int w = 0;
    for (int j = 0; j < m->nq; j++)
        if (m->q[j] != i)
            m->q[w++] = m->q[j];
    m->nq = w;
}

/* The lock is free: the script hands it to the first live waiter, if any (its fence is
 * read back from the lock). prev_wiped: the grant's 'r' is "" (force). */
static void hand_to_head(model_t *m)
{
    if (m->holder >= 0 || m->nq == 0)
        return;
    int h = m->q[0];
    q_remove(m, h);
    owner_t *o = &m->o[h];
    o->st = HOLDING;
    o->handed = 1;
    o->lost = 0;
    redisReply *r = cmd(m, "HGET %s f", m->key[0]);
    FAIL_IF(r->type != REDIS_REPLY_STRING, "no fencing token after handing over to %s", o->id);
    set_str(o->fence, sizeof o->fence, r->str);
    freeReplyObject(r);
    saw_fence(m, o->fence);
    m->holder = h;
}

/* The holder loses its hold (lease ran out, or force): it does not know yet. */
static void holder_lost(model_t *m)
{
    if (m->holder < 0)
        return;
    m->o[m->holder].lost = 1;
    m->holder = -1;
}

/* ----- the steps -------------------------------------------------------------------------- */

/* acquire by an idle owner, under a new id: try, or queue */
static void step_acquire(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    const char *mode = rnd(m, 3) == 0 ? "t" : "q";
    new_id(m, i);
    snprintf(what_, sizeof what_, "acq %s by owner %d, id %s", mode, i, o->id);
    redisReply *r = call(m, "acq", i, o->id, mode);
    /* free with live waiters (the holder's lease ran out): the head is served first */
    if (m->holder < 0)
        hand_to_head(m);
    char f[32];
    long long k0 = r->element[0]->integer;
    if (m->holder < 0) {
        FAIL_IF(k0 != 1, "free, nobody waiting: reply %lld, not a grant", k0);
        str_el(r, 1, f, sizeof f);
        saw_fence(m, f);
        o->st = HOLDING, o->handed = o->lost = 0;
        set_str(o->fence, sizeof o->fence, f);
        m->holder = i;
    } else {
        FAIL_IF(k0 != 0, "held by owner %d: reply %lld, not busy", m->holder, k0);
        FAIL_IF(r->elements < 3 || r->element[2]->integer != (*mode == 'q'),
                "busy reply's 'queued' is not %d", *mode == 'q');
        if (*mode == 'q') {
            o->st = QUEUED;
            m->q[m->nq++] = i;
        }
    }
    freeReplyObject(r);
}

/* the same acquire again, its reply lost (holder), or a woken waiter's re-sent call */
static void step_acquire_again(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(what_, sizeof what_, "acq again by owner %d, id %s (%s)", i, o->id,
             o->st == QUEUED ? "queued" : o->handed ? "handed over" : "holding");
    redisReply *r = call(m, "acq", i, o->id, "q");
    if (m->holder < 0 && m->nq > 0 && m->q[0] != i)
        hand_to_head(m);
    char f[32];
    long long k0 = r->element[0]->integer;
    if (m->holder == i) {
        FAIL_IF(k0 != 1, "its own hold: reply %lld, not the grant again", k0);
        FAIL_IF(strcmp(str_el(r, 1, f, sizeof f), o->fence) != 0,
                "the grant again with token %s, not %s", f, o->fence);
        o->handed = 0;
    } else if (m->holder < 0) {
        /* free, and this waiter is the first live one: granted now */
        FAIL_IF(k0 != 1, "free, first live waiter: reply %lld, not a grant", k0);
        q_remove(m, i);
        str_el(r, 1, f, sizeof f);
        saw_fence(m, f);
        o->st = HOLDING, o->handed = o->lost = 0;
        set_str(o->fence, sizeof o->fence, f);
        m->holder = i;
    } else {
        FAIL_IF(k0 != 0, "held by owner %d: reply %lld", m->holder, k0);
        FAIL_IF(r->elements < 3 || r->element[2]->integer != 1, "a waiter left unqueued");
    }
    freeReplyObject(r);
}

/* a holder whose earlier call failed after the script ran asks anew: "Q" adopts, "q" refuses */
static void step_orphan(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    int adopt = rnd(m, 2);
    char old[64];
    set_str(old, sizeof old, o->id);
    new_id(m, i);
    snprintf(what_, sizeof what_, "acq %s by holder %d under a new id %s (holds %s)",
             adopt ? "Q" : "q", i, o->id, old);
    redisReply *r = call(m, "acq", i, o->id, adopt ? "Q" : "q");
    long long k0 = r->element[0]->integer;
    if (adopt) {
        char f[32];
        FAIL_IF(k0 != 1, "orphan not adopted: reply %lld", k0);
        str_el(r, 1, f, sizeof f);
        saw_fence(m, f);
        set_str(o->fence, sizeof o->fence, f);
    } else {
        FAIL_IF(k0 != -1, "a second id of the holder: reply %lld, not -1", k0);
        set_str(o->id, sizeof o->id, old); /* it keeps its hold under the old id */
    }
    freeReplyObject(r);
}

static void step_release(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(what_, sizeof what_, "rel by owner %d, id %s%s", i, o->id,
             o->lost ? " (lost)" : "");
    long long v = call_int(m, "rel", i, o->id);
    if (o->lost) {
        FAIL_IF(v != 0, "a lost hold released: reply %lld", v);
        o->st = IDLE, o->lost = o->handed = 0;
        o->released[0] = '\0';
        return;
    }
    FAIL_IF(v != 1, "the holder's release: reply %lld", v);
    m->holder = -1;
    o->st = IDLE, o->handed = 0;
    set_str(o->released, sizeof o->released, o->id);
    set_str(m->tombstone, sizeof m->tombstone, o->id);
    hand_to_head(m);
}

/* a release retried (its reply lost): 1 while the lock's tombstone names it, else 0 */
static void step_release_again(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(what_, sizeof what_, "rel again by owner %d, id %s (tombstone %s)", i,
             o->released, m->tombstone[0] ? m->tombstone : "none");
    long long v = call_int(m, "rel", i, o->released);
    long long want = strcmp(m->tombstone, o->released) == 0;
    FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    o->released[0] = '\0';
}

static void step_renew(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(what_, sizeof what_, "renew by owner %d, id %s%s", i, o->id,
             o->lost ? " (lost)" : "");
    long long v = call_int(m, "renew", i, o->id);
    FAIL_IF(v != !o->lost, "reply %lld", v);
    if (o->lost)
        o->st = IDLE, o->lost = o->handed = 0;
}

static void step_qrenew(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(what_, sizeof what_, "qrenew by owner %d, id %s%s", i, o->id,
             o->handed ? (o->lost ? " (handed, lost)" : " (handed)") : "");
    long long v = call_int(m, "qrenew", i, o->id);
    long long want = o->st == QUEUED ? 1 : o->lost ? 0 : 2;
    FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    if (want == 2)
        o->handed = 0;
    else if (want == 0)
        o->st = IDLE, o->lost = o->handed = 0;
}

static void step_cancel(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(what_, sizeof what_, "cancel by owner %d, id %s%s", i, o->id,
             o->handed ? (o->lost ? " (handed, lost)" : " (handed)") : "");
    redisReply *r = call(m, "cancel", i, o->id, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    long long k0 = r->element[0]->integer;
    if (o->st == HOLDING && !o->lost) {
        char f[32];
        FAIL_IF(k0 != 1, "handed over, yet cancel says %lld", k0);
        FAIL_IF(strcmp(str_el(r, 1, f, sizeof f), o->fence) != 0, "token %s, not %s", f,
                o->fence);
        o->handed = 0;
    } else {
        FAIL_IF(k0 != 0, "reply %lld, not left the queue", k0);
        q_remove(m, i);
        o->st = IDLE, o->lost = o->handed = 0;
        hand_to_head(m); /* a free lock goes on to the next live waiter */
    }
    freeReplyObject(r);
}

/* the operator's force: drops the hold, hands to the first live waiter; the tombstone goes */
static void step_force(model_t *m)
{
    snprintf(what_, sizeof what_, "force (holder %d)", m->holder);
    long long v = call_int(m, "force", 0, "op:0");
    FAIL_IF(v != (m->holder >= 0), "reply %lld", v);
    if (m->holder >= 0) {
        holder_lost(m);
        m->tombstone[0] = '\0';
        hand_to_head(m);
    }
}

/* fault: the holder's lease runs out (its process stopped); the key, tombstone and all, goes */
static void step_expire_holder(model_t *m)
{
    snprintf(what_, sizeof what_, "the lease of holder %d runs out", m->holder);
    freeReplyObject(cmd(m, "PEXPIRE %s 1", m->key[0]));
    usleep(3000);
    holder_lost(m);
    m->tombstone[0] = '\0';
}

/* fault: a waiter's process dies; its entry's lease is made to lie in the past */
static void step_kill_waiter(model_t *m, int i)
{
    owner_t *o = &m->o[i];
    snprintf(what_, sizeof what_, "waiter %d (id %s) dies", i, o->id);
    freeReplyObject(cmd(m, "HSET %s %s %s", m->key[3], o->id, "1 " QLEASE " 0"));
    q_remove(m, i);
    if (m->ndead < (int)(sizeof m->dead / sizeof m->dead[0]))
        set_str(m->dead[m->ndead++], sizeof m->dead[0], o->id);
    new_incarnation(m, i);
}

/* fault: the fencing counter is ahead of the server clock (the clock was set back, or the
 * counter came from a master whose clock ran ahead): the next token must still be above it */
static void step_counter_ahead(model_t *m)
{
    unsigned long long ahead = m->last_fence + 1000000000ULL;
    snprintf(what_, sizeof what_, "the fencing counter jumps to %llu", ahead);
    freeReplyObject(cmd(m, "SET %s %llu", m->key[1], ahead));
    m->last_fence = ahead;
}

/* ----- the check after every step ------------------------------------------------------- */
static int is_dead(const model_t *m, const char *id)
{
    for (int j = 0; j < m->ndead; j++)
        if (strcmp(m->dead[j], id) == 0)
            return 1;
    return 0;
}

static void check_keys(model_t *m)
{
    redisReply *r = cmd(m, "HMGET %s o a", m->key[0]);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    int held = r->element[0]->type == REDIS_REPLY_STRING;
    if (m->holder < 0) {
        FAIL_IF(held, "the lock is owned (by %s), the model says free",
                r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "?");
    } else {
        owner_t *o = &m->o[m->holder];
        FAIL_IF(!held, "the lock is free, the model says held by owner %d (%s)", m->holder,
                o->id);
        FAIL_IF(strcmp(r->element[0]->str, o->tokhash) != 0 ||
                    r->element[1]->type != REDIS_REPLY_STRING ||
                    strcmp(r->element[1]->str, o->id) != 0,
                "held under id %s, the model says %s", r->element[1]->str, o->id);
    }
    freeReplyObject(r);
    /* the queue: the live entries, in the model's order (dead ones may linger) */
    r = cmd(m, "ZRANGE %s 0 -1", m->key[2]);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    int j = 0;
    for (size_t e = 0; e < r->elements; e++) {
        const char *id = r->element[e]->str;
        if (is_dead(m, id))
            continue;
        FAIL_IF(j >= m->nq, "queued %s, which the model does not have waiting", id);
        FAIL_IF(strcmp(id, m->o[m->q[j]].id) != 0, "queue position %d holds %s, not %s", j, id,
                m->o[m->q[j]].id);
        j++;
    }
    FAIL_IF(j != m->nq, "%d live entries queued, the model has %d", j, m->nq);
    freeReplyObject(r);
}

/* ----- the run ---------------------------------------------------------------------------- */
static void run(const ts_server_t *s, unsigned seed)
{
    model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->seed = seed;
    m->rng = 0x9e3779b97f4a7c15ULL ^ seed;
    m->holder = -1;
    m->k = ts_connect(s);
    cr_assert_not_null(m->k);
    char name[32];
    snprintf(name, sizeof name, "model%u", seed);
    snprintf(m->key[0], sizeof m->key[0], "rs:{%s}:mutex", name);
    snprintf(m->key[1], sizeof m->key[1], "rs:{%s}:mutex:fence", name);
    snprintf(m->key[2], sizeof m->key[2], "rs:{%s}:mutex:q", name);
    snprintf(m->key[3], sizeof m->key[3], "rs:{%s}:mutex:qi", name);
    redisReply *r = redisCommand(m->k, "SCRIPT LOAD %b", rs_script_mutex.body,
                                 rs_script_mutex.len);
    cr_assert(r && r->type == REDIS_REPLY_STRING);
    set_str(m->sha, sizeof m->sha, r->str);
    freeReplyObject(r);
    for (int i = 0; i < MO; i++)
        new_incarnation(m, i);

    int counts[16] = {0};
    for (m->step = 0; m->step < STEPS; m->step++) {
        int i = (int)rnd(m, MO);
        owner_t *o = &m->o[i];
        unsigned dice = rnd(m, 100);
        int kind;
        if (o->st == IDLE) {
            if (o->released[0] && dice < 15)
                step_release_again(m, i), kind = 0;
            else
                step_acquire(m, i), kind = 1;
        } else if (o->st == QUEUED) {
            if (dice < 40)
                step_acquire_again(m, i), kind = 2;
            else if (dice < 60)
                step_qrenew(m, i), kind = 3;
            else if (dice < 80)
                step_cancel(m, i), kind = 4;
            else
                step_kill_waiter(m, i), kind = 5;
        } else if (o->handed) {
            /* it learns by its woken call, its queue renewal or its cancel */
            if (dice < 50 && !o->lost)
                step_acquire_again(m, i), kind = 2;
            else if (dice < 75)
                step_qrenew(m, i), kind = 3;
            else
                step_cancel(m, i), kind = 4;
        } else if (o->lost) {
            if (dice < 50)
                step_release(m, i), kind = 6;
            else
                step_renew(m, i), kind = 7;
        } else {
            if (dice < 50)
                step_release(m, i), kind = 6;
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
                step_counter_ahead(m), kind = 11;
        }
        counts[kind]++;
        check_keys(m);
    }
    cr_log_info("seed %u: %d steps: re-released %d, acq %d, acq again %d, qrenew %d, cancel %d, "
                "waiter died %d, rel %d, renew %d, orphan %d, lease ran out %d, force %d, counter "
                "ahead %d; last token %llu", seed, STEPS, counts[0], counts[1], counts[2],
                counts[3], counts[4], counts[5], counts[6], counts[7], counts[8], counts[9],
                counts[10], counts[11], m->last_fence);
    /* every kind of step happened, or the run proved less than it claims */
    for (int kind = 0; kind <= 11; kind++)
        cr_expect_gt(counts[kind], 0, "seed %u: step kind %d never ran", seed, kind);
    redisFree(m->k);
    free(m);
}

Test(model, mutex_script_against_model, .timeout = 120)
{
    ts_server_t s;
    tu_start_server(&s);
    const char *env = getenv("RS_MODEL_SEED");
    if (env && *env) {
        run(&s, (unsigned)strtoul(env, NULL, 10));
    } else {
        static const unsigned seeds[] = {1, 20261123, 4242};
        for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++)
            run(&s, seeds[i]);
    }
    ts_server_stop(&s);
}
