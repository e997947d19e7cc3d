/*
 * test_model_rwlock.c - randomized model check of the read-write lock's script
 * (primitives/rwlock/rwlock.lua): thousands of random protocol calls sent straight to Redis
 * with EVALSHA, each reply compared with what a small model of the protocol (docs/scripts.md,
 * "rwlock") says, and the keys compared with the model after every step.
 *
 * Six owners, each with at most one hold at a time, read or write: acquire (try or queue),
 * the retry of an acquire whose reply was lost, a woken waiter's re-sent acquire, a second
 * id or an upgrade (refused), release and its retry, renewal, queue renewal, cancel and the
 * operator's force; the faults are a writer's or a reader's lease running out, a waiter that
 * dies and a fencing counter ahead of the clock. What must hold: one writer and no reader, or
 * readers only, exactly the model's; one FIFO queue for both modes, admitted from the head
 * (every reader up to the first writer, or that writer once nobody holds), never past a live
 * waiter; tokens rise with every grant; retries are answered as the first call was; a lost
 * hold is reported lost. Shared with the other models: tests/support/test_model.h.
 */
#include <criterion/criterion.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_model.h"

typedef struct rw_model {
    tm_world_t w;           /* keys: main, fence, queue, queue info, readers, reader info */
    char mode[TM_OWNERS];   /* 'r' or 'w': the mode of the owner's current acquisition */
    char wtomb[64];         /* the main key's 'r': the write id released last */
    int rtomb[TM_OWNERS];   /* the owner's read tombstone names its last read release */
    char relmode[TM_OWNERS]; /* the mode of the owner's last release */
    int granted[TM_OWNERS]; /* waiters the last call admitted, in order */
    int ngranted;
    char mbuf[2];           /* ARGV[9] of the call being made */
} rw_model_t;

/* Owners W_SLOT and R_SLOT are one thread with two handles: one token, the first always
 * writes, the second always reads, so that a read asked while holding the write lock is a
 * downgrade (granted at once) and a write asked while reading an upgrade (refused). One
 * thread waits in one call at a time: neither acts while the other is queued. */
#define W_SLOT 4
#define R_SLOT 5

static int partner(int i)
{
    return i == W_SLOT ? R_SLOT : i == R_SLOT ? W_SLOT : -1;
}

static void pair_token(rw_model_t *m)
{
    tm_set(m->w.o[R_SLOT].tok, sizeof m->w.o[R_SLOT].tok, m->w.o[W_SLOT].tok);
    tm_set(m->w.o[R_SLOT].tokhash, sizeof m->w.o[R_SLOT].tokhash, m->w.o[W_SLOT].tokhash);
}

static redisReply *call_as(rw_model_t *m, const char *op, int i, const char *acq,
                           const char *qmode, char mode)
{
    char ms[2] = {mode, '\0'};
    const char *extra[1] = {ms};
    return tm_call(&m->w, op, i, acq, qmode, extra, 1);
}

static int live(const rw_model_t *m, int i)
{
    return m->w.o[i].st == TM_HOLDING && !m->w.o[i].lost;
}

static int writer(const rw_model_t *m)
{
    for (int i = 0; i < TM_OWNERS; i++)
        if (live(m, i) && m->mode[i] == 'w')
            return i;
    return -1;
}

static int nreaders(const rw_model_t *m)
{
    int n = 0;
    for (int i = 0; i < TM_OWNERS; i++)
        n += live(m, i) && m->mode[i] == 'r';
    return n;
}

/* The script admits from the head: readers up to the first writer while no writer holds,
 * then that writer if no read hold is left. */
static void admit(rw_model_t *m)
{
    m->ngranted = 0;
    while (writer(m) < 0 && m->w.nq > 0) {
        int h = m->w.q[0];
        if (m->mode[h] == 'w' && nreaders(m) > 0)
            return;
        tm_q_remove(&m->w, h);
        tm_owner_t *o = &m->w.o[h];
        o->st = TM_HOLDING, o->handed = 1, o->lost = 0;
        m->granted[m->ngranted++] = h;
    }
}

/* The token of owner i's hold, as the keys have it ("" if none). */
static void hold_fence(rw_model_t *m, int i, char *buf, size_t len)
{
    tm_owner_t *o = &m->w.o[i];
    buf[0] = '\0';
    redisReply *r = m->mode[i] == 'w' ? tm_cmd(&m->w, "HGET %s f", m->w.key[0])
                                      : tm_cmd(&m->w, "HGET %s %s", m->w.key[5], o->tokhash);
    if (r->type == REDIS_REPLY_STRING) {
        if (m->mode[i] == 'w') {
            tm_set(buf, len, r->str);
        } else {
            char acq[64], f[32];
            if (sscanf(r->str, "%63s %*s %31s", acq, f) == 2)
                tm_set(buf, len, f);
        }
    }
    freeReplyObject(r);
}

static void learn_admitted(rw_model_t *m)
{
    for (int g = 0; g < m->ngranted; g++) {
        int i = m->granted[g];
        hold_fence(m, i, m->w.o[i].fence, sizeof m->w.o[i].fence);
        TM_FAIL_IF(!m->w.o[i].fence[0], "no hold recorded for admitted waiter %s",
                   m->w.o[i].id);
        tm_saw_fence(m->w.o[i].fence);
        tm_fresh_hold(&m->w.o[i]);
    }
    m->ngranted = 0;
}

static void admit_and_learn(rw_model_t *m)
{
    admit(m);
    learn_admitted(m);
}

/* ----- the steps -------------------------------------------------------------------------- */
enum { K_REREL = TM_K_OWN, K_ACQ, K_REL, K_REFUSED, K_RUNS_OUT, K_FORCE, K_DOWNGRADE, K_UPGRADE,
       K_COUNT };

/* Returns the kind of step it was: K_ACQ, K_DOWNGRADE or K_UPGRADE. */
static int step_acquire(rw_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    const char *qmode = tm_rnd(3) == 0 ? "t" : "q";
    m->mode[i] = i == W_SLOT ? 'w' : i == R_SLOT ? 'r' : tm_rnd(2) ? 'r' : 'w';
    tm_new_id(&m->w, i);
    snprintf(tm_what, sizeof tm_what, "acq %c %s by owner %d, id %s (writer %d, %d readers, %d "
             "queued)", m->mode[i], qmode, i, o->id, writer(m), nreaders(m), m->w.nq);
    redisReply *r = tm_call_owner(&m->w, "acq", i, o->id, qmode);
    int p = partner(i);
    if (p >= 0 && live(m, p)) {
        /* the same thread holds the other mode: a downgrade is granted at once, whatever is
         * queued; an upgrade is refused. Neither admits anyone. */
        if (i == R_SLOT)
            tm_expect_grant(&m->w, i, r, "a downgrade");
        else
            TM_FAIL_IF(r->element[0]->integer != -1, "an upgrade: reply %lld, not refused",
                       r->element[0]->integer);
        freeReplyObject(r);
        return i == R_SLOT ? K_DOWNGRADE : K_UPGRADE;
    }
    admit_and_learn(m);
    if (m->w.nq == 0 && writer(m) < 0 && (m->mode[i] == 'r' || nreaders(m) == 0)) {
        tm_expect_grant(&m->w, i, r, "admissible, nobody queued");
    } else {
        tm_expect_busy_new(&m->w, i, r, qmode, m->w.nq ? "waiters ahead" : "held");
    }
    freeReplyObject(r);
    return K_ACQ;
}

/* a holder asks under a new id: the same mode again, or write while reading (upgrade) */
static void step_refused(rw_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    char mode = m->mode[i] == 'r' && tm_rnd(2) ? 'w' : m->mode[i];
    char id[64];
    snprintf(id, sizeof id, "%s.x", o->id);
    snprintf(tm_what, sizeof tm_what, "acq %c by owner %d holding %c, new id %s", mode, i,
             m->mode[i], id);
    redisReply *r = call_as(m, "acq", i, id, "q", mode);
    TM_FAIL_IF(r->element[0]->integer != -1, "reply %lld, not refused",
               r->element[0]->integer);
    freeReplyObject(r);
}

static void step_release(rw_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "rel %c by owner %d, id %s%s", m->mode[i], i, o->id,
             o->lost ? " (lost)" : "");
    long long v = tm_int(tm_call_owner(&m->w, "rel", i, o->id, NULL));
    if (o->lost) {
        TM_FAIL_IF(v != 0, "a lost hold released: reply %lld", v);
        o->st = TM_IDLE, o->lost = o->handed = 0;
        o->released[0] = '\0';
        return;
    }
    TM_FAIL_IF(v != 1, "the holder's release: reply %lld", v);
    o->st = TM_IDLE, o->handed = 0;
    tm_set(o->released, sizeof o->released, o->id);
    m->relmode[i] = m->mode[i];
    if (m->mode[i] == 'w')
        tm_set(m->wtomb, sizeof m->wtomb, o->id);
    else
        m->rtomb[i] = 1;
    admit_and_learn(m);
}

static void step_release_again(rw_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    char mode = m->relmode[i];
    int want = mode == 'w' ? strcmp(m->wtomb, o->released) == 0 : m->rtomb[i];
    snprintf(tm_what, sizeof tm_what, "rel %c again by owner %d, id %s (tombstone %s)", mode, i,
             o->released, want ? "names it" : "does not");
    long long v = tm_int(call_as(m, "rel", i, o->released, NULL, mode));
    TM_FAIL_IF(v != want, "reply %lld, not %d", v, want);
    o->released[0] = '\0';
}

/* the operator's force: every live hold dropped (tombstones kept), the head admitted */
static void step_force(rw_model_t *m)
{
    int held = 0;
    for (int i = 0; i < TM_OWNERS; i++)
        held += live(m, i);
    snprintf(tm_what, sizeof tm_what, "force (%d live holds)", held);
    long long v = tm_int(call_as(m, "force", 0, "op:0", NULL, 'w'));
    TM_FAIL_IF(v != held, "reply %lld", v);
    for (int i = 0; i < TM_OWNERS; i++)
        if (m->w.o[i].st == TM_HOLDING)
            m->w.o[i].lost = 1;
    admit_and_learn(m);
}

/* fault: holder i's lease runs out (its process stopped): its expiry is set in the past */
static void step_expire(rw_model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "the %c lease of owner %d (id %s) runs out", m->mode[i], i,
             o->id);
    if (m->mode[i] == 'w')
        freeReplyObject(tm_cmd(&m->w, "HSET %s x 1", m->w.key[0]));
    else
        freeReplyObject(tm_cmd(&m->w, "ZADD %s XX 1 %s", m->w.key[4], o->tokhash));
    o->lost = 1;
}

/* ----- the check after every step ------------------------------------------------------- */
static void check(tm_world_t *w)
{
    rw_model_t *m = (rw_model_t *)w;
    int wr = writer(m);
    redisReply *r = tm_cmd(&m->w, "HMGET %s o a x", m->w.key[0]);
    int has = r->element[0]->type == REDIS_REPLY_STRING &&
              r->element[2]->type == REDIS_REPLY_STRING && strtoll(r->element[2]->str, NULL,
                                                                   10) > 1000;
    if (wr < 0) {
        TM_FAIL_IF(has, "a live writer (%s), the model has none", r->element[1]->str);
    } else {
        TM_FAIL_IF(!has, "no live writer, the model has owner %d (%s)", wr, m->w.o[wr].id);
        TM_FAIL_IF(strcmp(r->element[0]->str, m->w.o[wr].tokhash) != 0 ||
                       strcmp(r->element[1]->str, m->w.o[wr].id) != 0,
                   "the writer is %s, the model says %s", r->element[1]->str, m->w.o[wr].id);
    }
    freeReplyObject(r);
    /* live read holds: scored by their expiry; tombstones are "r:..." */
    r = tm_cmd(&m->w, "ZRANGEBYSCORE %s (1000 +inf", m->w.key[4]);
    int n = 0;
    for (size_t e = 0; e < r->elements; e++) {
        const char *tok = r->element[e]->str;
        if (strncmp(tok, "r:", 2) == 0)
            continue;
        int who = -1;
        for (int i = 0; i < TM_OWNERS && who < 0; i++)
            if (live(m, i) && m->mode[i] == 'r' && strcmp(m->w.o[i].tokhash, tok) == 0)
                who = i;
        TM_FAIL_IF(who < 0, "a read hold of %s the model does not know of", tok);
        char f[32];
        hold_fence(m, who, f, sizeof f);
        TM_FAIL_IF(strcmp(f, m->w.o[who].fence) != 0, "reader %d's token %s, the model has %s",
                   who, f, m->w.o[who].fence);
        n++;
    }
    freeReplyObject(r);
    TM_FAIL_IF(n != nreaders(m), "%d live read holds, the model has %d", n, nreaders(m));
    TM_FAIL_IF(wr >= 0 && n > (partner(wr) >= 0 && live(m, partner(wr))),
               "the model has a writer and other readers");
    tm_check_queue(&m->w, m->w.key[2]);
}

/* ----- the run ---------------------------------------------------------------------------- */
static int step(tm_world_t *w, int i, unsigned dice)
{
    rw_model_t *m = (rw_model_t *)w;
    tm_owner_t *o = &w->o[i];
    if (partner(i) >= 0 && w->o[partner(i)].st == TM_QUEUED)
        return -1; /* that thread is blocked in the other handle's call */
    if (o->st == TM_IDLE) {
        if (o->released[0] && dice < 15)
            return step_release_again(m, i), K_REREL;
        return step_acquire(m, i);
    }
    if (o->st == TM_QUEUED || o->handed)
        return tm_step_waiter(w, i, dice, partner(i) < 0, w->key[3],
                              m->mode[i] == 'w' ? " " TM_LEASE " 0 w" : " " TM_LEASE " 0 r");
    if (o->lost) {
        if (dice < 50)
            return step_release(m, i), K_REL;
        if (dice < 80)
            return tm_step_renew(w, i), TM_K_RENEW;
        return tm_step_count(w, i), K_COUNT;
    }
    if (dice < 35)
        return step_release(m, i), K_REL;
    if (dice < 45)
        return tm_step_count(w, i), K_COUNT;
    if (dice < 55)
        return tm_step_renew(w, i), TM_K_RENEW;
    if (dice < 63)
        return tm_step_acquire_again(w, i), TM_K_AGAIN;
    if (dice < 70)
        return step_refused(m, i), K_REFUSED;
    if (dice < 84)
        return step_expire(m, i), K_RUNS_OUT;
    if (dice < 92)
        return step_force(m), K_FORCE;
    return tm_counter_ahead(w, w->key[1]), TM_K_AHEAD;
}

/* ARGV[9]: the mode of the owner's hold or request */
static int extra(tm_world_t *w, int i, const char *argv[2])
{
    rw_model_t *m = (rw_model_t *)w;
    m->mbuf[0] = m->mode[i];
    argv[0] = m->mbuf;
    return 1;
}

static void freed(tm_world_t *w)
{
    admit_and_learn((rw_model_t *)w); /* readers behind a writer that gave up get in */
}

static tm_world_t *start(const ts_server_t *s)
{
    static const char *const suffixes[] = {"", "fence", "q", "qi", "rd", "ri"};
    rw_model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    m->w.extra = extra;
    m->w.freed = freed;
    tm_world_init(&m->w, s, &rs_script_rwlock, "rwlock", suffixes, 6);
    pair_token(m);
    return &m->w;
}

Test(model, rwlock_script_against_model, .timeout = 120)
{
    static const tm_model_t model = {
        .kinds = {TM_KINDS, "re-released", "acq", "rel", "refused", "lease ran out", "force",
                  "downgrade", "upgrade refused", "enter/leave", NULL},
        .start = start, .step = step, .check = check};
    tm_run(&model);
}
