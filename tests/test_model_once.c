/*
 * test_model_once.c - randomized model check of the once's script (primitives/once/once.lua):
 * thousands of random protocol calls sent straight to Redis with EVALSHA, each reply compared
 * with a small model of docs/scripts.md ("once.lua"), and the keys compared after every step.
 *
 * The calls are the ones the library makes, in any order a set of owners could make them:
 * acquire (try, queue), a waiter's re-sent acquire, its queue renewal and cancel, the
 * runner's renewal, its "done" (fn succeeded) and its "rel" (fn failed), state, and the
 * operator's reset; the faults are a runner whose lease runs out and a waiter that dies.
 * What must hold: at most one runner, the one the model expects; a free run goes to the first
 * live waiter (FIFO), a failed run straight to the next one; once done, every acquire, cancel
 * and state says done and nobody stays queued; a done of a lost run sets no mark; tokens rise.
 * Shared driver and helpers: tests/support/test_model.h.
 */
#include <criterion/criterion.h>

#include <unistd.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_model.h"

typedef struct model {
    tm_world_t w;  /* keys: done, run, fence, queue, queue info */
    int holder;    /* the runner (owner index), or -1 */
    int done;      /* the done mark is set */
    int gone[TM_OWNERS]; /* queued in the owner's view, but its entry went with a done */
} model_t;

#define K_DONEKEY 0
#define K_RUN 1
#define K_FENCE 2
#define K_Q 3
#define K_QI 4

static void become_runner(model_t *m, int i, const char *fence)
{
    tm_owner_t *o = &m->w.o[i];
    tm_q_remove(&m->w, i);
    o->st = TM_HOLDING, o->lost = 0;
    tm_set(o->fence, sizeof o->fence, fence);
    tm_saw_fence(fence);
    m->holder = i;
}

/* The run is free: the script hands it to the first live waiter, if any. */
static void hand_to_head(model_t *m)
{
    if (m->holder >= 0 || m->w.nq == 0 || m->done)
        return;
    int h = m->w.q[0];
    redisReply *r = tm_cmd(&m->w, "HGET %s f", m->w.key[K_RUN]);
    TM_FAIL_IF(r->type != REDIS_REPLY_STRING, "no token after handing the run to %s",
               m->w.o[h].id);
    become_runner(m, h, r->str);
    m->w.o[h].handed = 1;
    freeReplyObject(r);
}

static void freed(tm_world_t *w)
{
    hand_to_head((model_t *)w);
}

static void expect_done(redisReply *r)
{
    TM_FAIL_IF(r->type != REDIS_REPLY_ARRAY || r->element[0]->integer != 2,
               "done: reply %lld, not {2}", r->type == REDIS_REPLY_ARRAY ?
               r->element[0]->integer : r->integer);
}

/* acquire under owner i's current id (a new one when fresh): done, a grant, or busy */
static void acquire(model_t *m, int i, const char *mode, int fresh)
{
    tm_owner_t *o = &m->w.o[i];
    if (fresh)
        tm_new_id(&m->w, i);
    snprintf(tm_what, sizeof tm_what, "acq %s by owner %d, id %s%s", mode, i, o->id,
             fresh ? "" : " (again)");
    int queued_before = 0;
    for (int j = 0; j < m->w.nq; j++)
        queued_before |= m->w.q[j] == i;
    redisReply *r = tm_call(&m->w, "acq", i, o->id, mode, NULL, 0);
    if (m->done) {
        expect_done(r);
        tm_q_remove(&m->w, i);
        o->st = TM_IDLE, m->gone[i] = 0;
    } else if (m->holder == i) {
        tm_expect_grant_again(&m->w, i, r);
    } else {
        if (m->holder < 0)
            hand_to_head(m); /* (the head may be this very caller: then it is granted) */
        if (m->holder == i) {
            m->w.o[i].handed = 0;
            tm_expect_grant_again(&m->w, i, r);
        } else if (m->holder < 0) {
            char f[32];
            TM_FAIL_IF(r->element[0]->integer != 1, "free, nobody ahead: reply %lld",
                       r->element[0]->integer);
            become_runner(m, i, tm_el(r, 1, f, sizeof f));
            m->gone[i] = 0;
        } else {
            int q = *mode == 'q';
            tm_expect_busy(r, q, "someone runs");
            if (q && !queued_before)
                m->w.q[m->w.nq++] = i;
            o->st = q || queued_before ? TM_QUEUED : TM_IDLE;
            m->gone[i] = 0;
        }
    }
    freeReplyObject(r);
}

/* The runner's done (fn succeeded) or rel (fn failed): 0 for a lost run (it then knows, and
 * nothing changes), else 1; returns whether the call counted. */
static int runner_ends(model_t *m, int i, const char *op, const char *what)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "%s by runner %d, id %s%s", what, i, o->id,
             o->lost ? " (lost)" : "");
    long long v = tm_int(tm_call(&m->w, op, i, o->id, NULL, NULL, 0));
    o->st = TM_IDLE, o->handed = 0;
    if (o->lost) {
        TM_FAIL_IF(v != 0, "a lost run counted: reply %lld", v);
        o->lost = 0;
        return 0;
    }
    TM_FAIL_IF(v != 1, "reply %lld", v);
    m->holder = -1;
    return 1;
}

static void step_done(model_t *m, int i)
{
    if (!runner_ends(m, i, "done", "done"))
        return;
    m->done = 1;
    for (int j = 0; j < m->w.nq; j++)
        m->gone[m->w.q[j]] = 1; /* told to retry; their entries are deleted */
    m->w.nq = 0;
}

static void step_fail(model_t *m, int i)
{
    if (runner_ends(m, i, "rel", "rel (fn failed)"))
        hand_to_head(m); /* the failed run goes straight to the next waiter */
}

static void step_waiter(model_t *m, int i, unsigned dice)
{
    tm_owner_t *o = &m->w.o[i];
    if (dice < 45)
        return acquire(m, i, "q", 0);
    if (dice < 70) {
        snprintf(tm_what, sizeof tm_what, "qrenew by owner %d, id %s", i, o->id);
        long long v = tm_int(tm_call(&m->w, "qrenew", i, o->id, NULL, NULL, 0));
        long long want = m->holder == i ? 2 : (m->gone[i] || m->done) ? 0 : 1;
        TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
        if (want == 2)
            o->handed = 0;
        if (want == 0)
            o->st = TM_IDLE, m->gone[i] = 0;
        return;
    }
    snprintf(tm_what, sizeof tm_what, "cancel by owner %d, id %s", i, o->id);
    redisReply *r = tm_call(&m->w, "cancel", i, o->id, NULL, NULL, 0);
    if (m->holder == i) {
        tm_expect_grant_again(&m->w, i, r);
    } else if (m->done) {
        expect_done(r);
        o->st = TM_IDLE, m->gone[i] = 0;
    } else {
        TM_FAIL_IF(r->element[0]->integer != 0, "reply %lld, not left", r->element[0]->integer);
        tm_q_remove(&m->w, i);
        o->st = TM_IDLE, m->gone[i] = 0;
        hand_to_head(m);
    }
    freeReplyObject(r);
}

static void step_state(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "state (done %d)", m->done);
    long long v = tm_int(tm_call(&m->w, "state", 0, "op:0", NULL, NULL, 0));
    TM_FAIL_IF(v != m->done, "reply %lld", v);
}

static void step_reset(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "reset (done %d)", m->done);
    long long v = tm_int(tm_call(&m->w, "reset", 0, "op:0", NULL, NULL, 0));
    TM_FAIL_IF(v != m->done, "reply %lld", v);
    m->done = 0;
}

/* fault: the runner's lease runs out (its process stopped); the run key goes */
static void step_expire(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "the lease of runner %d runs out", m->holder);
    freeReplyObject(tm_cmd(&m->w, "PEXPIRE %s 1", m->w.key[K_RUN]));
    usleep(3000);
    m->w.o[m->holder].lost = 1;
    m->holder = -1;
}

static void check(tm_world_t *w)
{
    model_t *m = (model_t *)w;
    redisReply *r = tm_cmd(w, "HMGET %s o a", w->key[K_RUN]);
    int held = r->element[0]->type == REDIS_REPLY_STRING;
    TM_FAIL_IF(held != (m->holder >= 0), "the run is %s, the model says %s",
               held ? r->element[1]->str : "free", m->holder >= 0 ? w->o[m->holder].id : "free");
    if (held)
        TM_FAIL_IF(strcmp(r->element[0]->str, w->o[m->holder].tokhash) != 0 ||
                       strcmp(r->element[1]->str, w->o[m->holder].id) != 0,
                   "run held under %s, the model says %s", r->element[1]->str,
                   w->o[m->holder].id);
    freeReplyObject(r);
    tm_check_queue(w, w->key[K_Q]);
    long long d = 0;
    r = tm_cmd(w, "EXISTS %s", w->key[K_DONEKEY]);
    d = r->integer;
    freeReplyObject(r);
    TM_FAIL_IF(d != m->done, "done mark %lld, the model says %d", d, m->done);
}

enum { K_ACQ = TM_K_OWN, K_DONE, K_FAIL, K_STATE, K_RESET, K_RUNS_OUT, K_WAIT };

static int step(tm_world_t *w, int i, unsigned dice)
{
    model_t *m = (model_t *)w;
    tm_owner_t *o = &w->o[i];
    if (dice < 4)
        return step_state(m), K_STATE;
    if (dice < 7 && m->done)
        return step_reset(m), K_RESET;
    if (dice < 8)
        return tm_counter_ahead(w, w->key[K_FENCE]), TM_K_AHEAD;
    if (o->st == TM_IDLE)
        return acquire(m, i, tm_rnd(3) == 0 ? "t" : "q", 1), K_ACQ;
    if (o->st == TM_QUEUED && m->holder != i) {
        if (dice > 92 && !m->gone[i] && !m->done) {
            tm_kill_waiter(w, i, w->key[K_QI], " " TM_LEASE " 0");
            tm_q_remove(w, i);
            o->st = TM_IDLE;
            return TM_K_DIES;
        }
        return step_waiter(m, i, dice), K_WAIT;
    }
    if (o->handed && dice < 30)
        return step_waiter(m, i, dice), K_WAIT;
    if (!o->lost && m->holder == i && dice > 92)
        return step_expire(m), K_RUNS_OUT;
    if (dice < 25)
        return tm_step_renew(w, i), TM_K_RENEW;
    if (dice < 60)
        return step_done(m, i), K_DONE;
    return step_fail(m, i), K_FAIL;
}

static tm_world_t *start(const ts_server_t *s)
{
    static const char *const suffixes[] = {"", "run", "fence", "q", "qi"};
    model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->holder = -1;
    m->w.freed = freed;
    tm_world_init(&m->w, s, &rs_script_once, "once", suffixes, 5);
    return &m->w;
}

Test(model, once_script_against_model, .timeout = 120)
{
    static const tm_model_t model = {
        .kinds = {TM_KINDS, "acq", "done", "rel (fn failed)", "state", "reset",
                  "lease ran out", "waiter call", NULL},
        .first_kind = TM_K_DIES, .start = start, .step = step, .check = check};
    tm_run(&model);
}
