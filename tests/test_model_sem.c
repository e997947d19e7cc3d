/*
 * test_model_sem.c - randomized model check of the semaphore's script
 * (primitives/semaphore/semaphore.lua): thousands of random protocol calls sent straight to
 * Redis with EVALSHA, each reply compared with what a small model of the protocol
 * (docs/scripts.md) says, and the keys compared with the model after every step.
 *
 * Six owners share a semaphore of 3 permits and ask for 1 to 3 at a time: acquire (try or
 * queue), the retry of an acquire whose reply was lost, a woken waiter's re-sent acquire,
 * release and its retry, give (keep fewer permits; a retry of it), renewal, queue renewal,
 * cancel and the operator's force; the faults are a holder whose lease runs out, a waiter
 * that dies and a fencing counter ahead of the clock. What must hold: the holds are exactly
 * the model's, never more permits than the size; waiters are served strictly in arrival
 * order as far as the head's request fits (a large request is not passed by smaller ones
 * behind it, nor by a newcomer); a dead waiter is skipped; tokens rise with every grant;
 * retries are answered as the first call was; a lost hold is reported lost. Shared with the
 * mutex's model: tests/support/test_model.h.
 */
#include <criterion/criterion.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_model.h"

#define SIZE 3
#define SIZE_STR "3"

typedef struct sem_model {
    tm_world_t w;            /* keys: sem, holders, hinfo, fence, queue, queue info */
    int tomb[TM_OWNERS];     /* the owner's release tombstone is there (force wipes it) */
    int lapsed;              /* holds run out and perhaps not purged yet (force counts them) */
    int granted[TM_OWNERS];  /* waiters the last call served, in order */
    int ngranted;
    char nbuf[16];           /* ARGV[9] of the call being made */
} sem_model_t;

static redisReply *call(sem_model_t *m, const char *op, int i, const char *mode, int n)
{
    char ns[16];
    snprintf(ns, sizeof ns, "%d", n);
    const char *extra[2] = {ns, SIZE_STR};
    return tm_call(&m->w, op, i, m->w.o[i].id, mode, extra, 2);
}

static int taken(const sem_model_t *m)
{
    int t = 0;
    for (int i = 0; i < TM_OWNERS; i++)
        if (m->w.o[i].st == TM_HOLDING && !m->w.o[i].lost)
            t += m->w.o[i].n;
    return t;
}

/* The script serves the queue: heads, in order, as long as each one's request fits. */
static void serve(sem_model_t *m)
{
    m->ngranted = 0;
    while (m->w.nq > 0) {
        int h = m->w.q[0];
        tm_owner_t *o = &m->w.o[h];
        if (taken(m) + o->n > SIZE)
            break;
        tm_q_remove(&m->w, h);
        o->st = TM_HOLDING, o->handed = 1, o->lost = 0;
        m->granted[m->ngranted++] = h;
    }
}

/* Reads the tokens of the holds serve() gave (in grant order: they must rise). */
static void learn_served(sem_model_t *m)
{
    for (int g = 0; g < m->ngranted; g++) {
        tm_owner_t *o = &m->w.o[m->granted[g]];
        redisReply *r = tm_cmd(&m->w, "HGET %s %s", m->w.key[2], o->id);
        TM_FAIL_IF(r->type != REDIS_REPLY_STRING, "no hold recorded for served waiter %s",
                   o->id);
        const char *f = strrchr(r->str, ' ');
        TM_FAIL_IF(!f, "hold record '%s'", r->str);
        tm_set(o->fence, sizeof o->fence, f + 1);
        freeReplyObject(r);
        tm_saw_fence(o->fence);
    }
    m->ngranted = 0;
}

static void serve_and_learn(sem_model_t *m)
{
    serve(m);
    learn_served(m);
}

/* ----- the steps -------------------------------------------------------------------------- */

static void step_acquire(sem_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    const char *mode = tm_rnd(3) == 0 ? "t" : "q";
    o->n = 1 + (int)tm_rnd(SIZE);
    tm_new_id(&m->w, i);
    snprintf(tm_what, sizeof tm_what, "acq %s of %d by owner %d, id %s (taken %d, %d queued)",
             mode, o->n, i, o->id, taken(m), m->w.nq);
    redisReply *r = call(m, "acq", i, mode, o->n);
    m->lapsed = 0;
    serve_and_learn(m);
    if (m->w.nq == 0 && taken(m) + o->n <= SIZE) {
        tm_expect_grant(&m->w, i, r, "fits, nobody ahead");
    } else {
        tm_expect_busy_new(&m->w, i, r, mode, m->w.nq ? "waiters ahead" : "does not fit");
    }
    freeReplyObject(r);
}

static void step_release(sem_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "rel of %d by owner %d, id %s%s", o->n, i, o->id,
             o->lost ? " (lost)" : "");
    long long v = tm_int(call(m, "rel", i, NULL, 0));
    if (o->lost) {
        TM_FAIL_IF(v != 0, "a lost hold released: reply %lld", v);
        o->st = TM_IDLE, o->lost = o->handed = 0;
        o->released[0] = '\0';
        return;
    }
    TM_FAIL_IF(v != 1, "the holder's release: reply %lld", v);
    o->st = TM_IDLE, o->handed = 0;
    tm_set(o->released, sizeof o->released, o->id);
    m->tomb[i] = 1;
    serve_and_learn(m);
}

static void step_release_again(sem_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "rel again by owner %d, id %s (tombstone %s)", i,
             o->released, m->tomb[i] ? "there" : "wiped");
    tm_set(o->id, sizeof o->id, o->released);
    long long v = tm_int(call(m, "rel", i, NULL, 0));
    TM_FAIL_IF(v != m->tomb[i], "reply %lld, not %d", v, m->tomb[i]);
    o->released[0] = '\0';
}

/* keep fewer permits (1 .. n-1), or, holding one, the same call again (a retry) */
static void step_give(sem_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    int keep = o->n >= 2 ? 1 + (int)tm_rnd((unsigned)o->n - 1) : o->n;
    snprintf(tm_what, sizeof tm_what, "give: owner %d keeps %d of %d, id %s%s", i, keep, o->n,
             o->id, o->lost ? " (lost)" : "");
    long long v = tm_int(call(m, "give", i, NULL, keep));
    TM_FAIL_IF(v != !o->lost, "reply %lld", v);
    if (o->lost) {
        o->st = TM_IDLE, o->lost = o->handed = 0;
        return;
    }
    if (keep == o->n)
        return; /* the same call again: answered at once, nothing freed, nobody served */
    m->lapsed = 0;
    o->n = keep;
    serve_and_learn(m);
}

/* the operator's force: every hold dropped (tombstones too), the queue served afresh */
static void step_force(sem_model_t *m)
{
    int live = 0;
    for (int i = 0; i < TM_OWNERS; i++)
        live += m->w.o[i].st == TM_HOLDING && !m->w.o[i].lost;
    snprintf(tm_what, sizeof tm_what, "force (%d live holds, up to %d lapsed)", live, m->lapsed);
    long long v = tm_int(call(m, "force", 0, NULL, 0));
    TM_FAIL_IF(v < live || v > live + m->lapsed, "reply %lld", v);
    for (int i = 0; i < TM_OWNERS; i++) {
        if (m->w.o[i].st == TM_HOLDING)
            m->w.o[i].lost = 1;
        m->tomb[i] = 0;
    }
    m->lapsed = 0;
    serve_and_learn(m);
}

/* fault: holder i's lease runs out (its process stopped): its expiry is set in the past */
static void step_expire(sem_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "the lease of holder %d (id %s) runs out", i, o->id);
    freeReplyObject(tm_cmd(&m->w, "ZADD %s XX 1 %s", m->w.key[1], o->id));
    o->lost = 1;
    m->lapsed++;
}

/* ----- the check after every step ------------------------------------------------------- */
static void check(tm_world_t *w)
{
    sem_model_t *m = (sem_model_t *)w;
    /* live holds: scored by their expiry, above the lapsed ones (1) and below the tombstones */
    redisReply *r = tm_cmd(&m->w, "ZRANGEBYSCORE %s (1000 (1000000000000000", m->w.key[1]);
    int live = 0;
    for (size_t e = 0; e < r->elements; e++) {
        const char *id = r->element[e]->str;
        int who = -1;
        for (int i = 0; i < TM_OWNERS && who < 0; i++)
            if (m->w.o[i].st == TM_HOLDING && !m->w.o[i].lost && strcmp(m->w.o[i].id, id) == 0)
                who = i;
        TM_FAIL_IF(who < 0, "%s holds permits the model does not know of", id);
        redisReply *h = tm_cmd(&m->w, "HGET %s %s", m->w.key[2], id);
        char want[96];
        snprintf(want, sizeof want, "%d %s %s", m->w.o[who].n, m->w.o[who].tokhash,
                 m->w.o[who].fence);
        TM_FAIL_IF(h->type != REDIS_REPLY_STRING || strcmp(h->str, want) != 0,
                   "hold %s is '%s', the model says '%s'", id,
                   h->type == REDIS_REPLY_STRING ? h->str : "(none)", want);
        freeReplyObject(h);
        live++;
    }
    freeReplyObject(r);
    int want_live = 0;
    for (int i = 0; i < TM_OWNERS; i++)
        want_live += m->w.o[i].st == TM_HOLDING && !m->w.o[i].lost;
    TM_FAIL_IF(live != want_live, "%d live holds, the model has %d", live, want_live);
    TM_FAIL_IF(taken(m) > SIZE, "the model itself holds %d permits", taken(m));
    tm_check_queue(&m->w, m->w.key[4]);
}

/* ----- the run ---------------------------------------------------------------------------- */
enum { K_REREL = TM_K_OWN, K_ACQ, K_REL, K_GIVE, K_RUNS_OUT, K_FORCE };

static int step(tm_world_t *w, int i, unsigned dice)
{
    sem_model_t *m = (sem_model_t *)w;
    tm_owner_t *o = &w->o[i];
    if (o->st == TM_IDLE) {
        if (o->released[0] && dice < 15)
            return step_release_again(m, i), K_REREL;
        return step_acquire(m, i), K_ACQ;
    }
    if (o->st == TM_QUEUED || o->handed)
        return tm_step_waiter(w, i, dice, 1, w->key[5],
                              " " TM_LEASE " 0 1");
    if (o->lost) {
        if (dice < 50)
            return step_release(m, i), K_REL;
        if (dice < 80)
            return tm_step_renew(w, i), TM_K_RENEW;
        return step_give(m, i), K_GIVE;
    }
    if (dice < 40)
        return step_release(m, i), K_REL;
    if (dice < 50)
        return tm_step_renew(w, i), TM_K_RENEW;
    if (dice < 62)
        return step_give(m, i), K_GIVE;
    if (dice < 72)
        return tm_step_acquire_again(w, i), TM_K_AGAIN;
    if (dice < 86)
        return step_expire(m, i), K_RUNS_OUT;
    if (dice < 94)
        return step_force(m), K_FORCE;
    return tm_counter_ahead(w, w->key[3]), TM_K_AHEAD;
}

/* ARGV[9], ARGV[10]: the permits the owner wants or holds, the size to create it with */
static int extra(tm_world_t *w, int i, const char *argv[2])
{
    sem_model_t *m = (sem_model_t *)w;
    snprintf(m->nbuf, sizeof m->nbuf, "%d", w->o[i].n);
    argv[0] = m->nbuf;
    argv[1] = SIZE_STR;
    return 2;
}

static void freed(tm_world_t *w)
{
    sem_model_t *m = (sem_model_t *)w;
    m->lapsed = 0; /* every call that serves counts the permits taken, purging first */
    serve_and_learn(m);
}

static tm_world_t *start(const ts_server_t *s)
{
    static const char *const suffixes[] = {"", "holders", "hi", "fence", "q", "qi"};
    sem_model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->w.extra = extra;
    m->w.freed = freed;
    tm_world_init(&m->w, s, &rs_script_semaphore, "sem", suffixes, 6);
    return &m->w;
}

Test(model, sem_script_against_model, .timeout = 120)
{
    static const tm_model_t model = {
        .kinds = {TM_KINDS, "re-released", "acq", "rel", "give", "lease ran out", "force",
                  NULL},
        .start = start, .step = step, .check = check};
    tm_run(&model);
}
