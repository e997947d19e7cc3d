/*
 * test_model_latch.c - randomized model check of the countdown latch's script
 * (primitives/latch/latch.lua): random init, count-down, rearm, get and force calls, with
 * retries of count-downs and rearms under the same call id, and the keys expiring, sent
 * straight to Redis; every reply and, after each call, the latch's count and openings are
 * compared with a small model of docs/latch.md: a late init never closes or rearms a latch,
 * a count-down or rearm is applied once however often it is sent, the count never goes below
 * 0, each count-down to 0 (or force) is one opening. The latch has no queue: owners here are
 * just callers. Shared with the other models: tests/support/test_model.h.
 */
#include <criterion/criterion.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_model.h"

#define WINDOW "600000" /* call ids are remembered far longer than a run */

typedef struct latch_model {
    tm_world_t w;      /* keys: the latch, its call ids */
    int armed, n, opens;
    char ids[TM_STEPS][32]; /* call ids applied while the keys lived */
    int nids;
    char rearm_id[TM_OWNERS][32]; /* each caller's last rearm, and its count, for a retry */
    int rearm_k[TM_OWNERS];
    char cbuf[16];
} latch_model_t;

static int was_applied(const latch_model_t *m, const char *id)
{
    for (int j = 0; j < m->nids; j++)
        if (strcmp(m->ids[j], id) == 0)
            return 1;
    return 0;
}

static long long call_count(latch_model_t *m, const char *op, int i, const char *id, int count,
                            redisReply **out)
{
    snprintf(m->cbuf, sizeof m->cbuf, "%d", count);
    const char *extra[3] = {m->cbuf, TM_LEASE, WINDOW};
    redisReply *r = tm_call(&m->w, op, i, id, NULL, extra, 3);
    if (out) {
        *out = r;
        return 0;
    }
    return tm_int(r);
}

/* ----- the steps -------------------------------------------------------------------------- */
enum { K_INIT = TM_K_OWN, K_DOWN, K_DOWN_AGAIN, K_REARM, K_REARM_AGAIN, K_GET, K_FORCE,
       K_EXPIRE };

static void step_init(latch_model_t *m, int i)
{
    int k = (int)tm_rnd(4);
    snprintf(tm_what, sizeof tm_what, "init %d by %d (armed %d, count %d)", k, i, m->armed, m->n);
    redisReply *r;
    call_count(m, "init", i, "-", k, &r);
    long long a = r->element[0]->integer, b = r->element[1]->integer;
    freeReplyObject(r);
    if (m->armed) {
        TM_FAIL_IF(a != 0 || b != m->n, "reply {%lld, %lld}, not {0, %d}: a late init changed it",
                   a, b, m->n);
    } else if (k == 0) {
        TM_FAIL_IF(a != 0 || b != -1, "reply {%lld, %lld}, not {0, -1}", a, b);
    } else {
        TM_FAIL_IF(a != 1 || b != k, "reply {%lld, %lld}, not {1, %d}", a, b, k);
        m->armed = 1, m->n = k;
    }
}

/* a count-down, new (again = 0) or the last one sent again (its reply lost) */
static void step_down(latch_model_t *m, int i, int again)
{
    tm_owner_t *o = &m->w.o[i];
    if (!again)
        snprintf(o->lastcall, sizeof o->lastcall, "d%d.%d", i, ++o->ncalls);
    snprintf(tm_what, sizeof tm_what, "down %s%s by %d (armed %d, count %d)", o->lastcall,
             again ? " again" : "", i, m->armed, m->n);
    long long v = call_count(m, "down", i, o->lastcall, 0, NULL);
    if (!m->armed) {
        TM_FAIL_IF(v != -1, "never armed: reply %lld, not -1", v);
        return; /* not recorded: an unarmed latch keeps no ids */
    }
    if (!was_applied(m, o->lastcall)) {
        if (m->n > 0 && --m->n == 0)
            m->opens++;
        tm_set(m->ids[m->nids++], sizeof m->ids[0], o->lastcall);
    }
    TM_FAIL_IF(v != m->n, "reply %lld, not the count %d", v, m->n);
}

static void step_rearm(latch_model_t *m, int i, int again)
{
    tm_owner_t *o = &m->w.o[i];
    if (!again) {
        snprintf(m->rearm_id[i], sizeof m->rearm_id[i], "r%d.%d", i, ++o->ncalls);
        m->rearm_k[i] = 1 + (int)tm_rnd(3);
    }
    int k = m->rearm_k[i];
    snprintf(tm_what, sizeof tm_what, "rearm %d, id %s%s by %d (armed %d, count %d)", k,
             m->rearm_id[i], again ? " again" : "", i, m->armed, m->n);
    long long v = call_count(m, "rearm", i, m->rearm_id[i], k, NULL);
    if (was_applied(m, m->rearm_id[i])) {
        TM_FAIL_IF(v != (m->armed ? m->n : 0), "a retried rearm: reply %lld, not %d", v, m->n);
        return;
    }
    TM_FAIL_IF(v != k, "reply %lld, not %d", v, k);
    m->armed = 1, m->n = k;
    tm_set(m->ids[m->nids++], sizeof m->ids[0], m->rearm_id[i]);
}

static void step_get(latch_model_t *m, int i)
{
    snprintf(tm_what, sizeof tm_what, "get by %d", i);
    redisReply *r;
    call_count(m, "get", i, "-", 0, &r);
    long long a = r->element[0]->integer, b = r->element[1]->integer, c = r->element[2]->integer;
    freeReplyObject(r);
    TM_FAIL_IF(a != m->armed || b != (m->armed ? m->n : 0) || c != (m->armed ? m->opens : 0),
               "reply {%lld, %lld, %lld}, not {%d, %d, %d}", a, b, c, m->armed, m->n, m->opens);
}

/* the operator's force: opens a closed latch */
static void step_force(latch_model_t *m, int i)
{
    snprintf(tm_what, sizeof tm_what, "force (armed %d, count %d)", m->armed, m->n);
    long long v = call_count(m, "force", i, "-", 0, NULL);
    int closed = m->armed && m->n > 0;
    TM_FAIL_IF(v != closed, "reply %lld, not %d", v, closed);
    if (closed)
        m->n = 0, m->opens++;
}

/* fault: both keys expire (a latch unused for its TTL): never armed again, ids forgotten */
static void step_expire(latch_model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "the latch expires");
    freeReplyObject(tm_cmd(&m->w, "DEL %s %s", m->w.key[0], m->w.key[1]));
    m->armed = m->n = m->opens = 0;
    m->nids = 0;
}

static int step(tm_world_t *w, int i, unsigned dice)
{
    latch_model_t *m = (latch_model_t *)w;
    tm_owner_t *o = &w->o[i];
    if (dice < 15)
        return step_init(m, i), K_INIT;
    if (dice < 45)
        return step_down(m, i, 0), K_DOWN;
    if (dice < 55 && o->lastcall[0])
        return step_down(m, i, 1), K_DOWN_AGAIN;
    if (dice < 65)
        return step_rearm(m, i, 0), K_REARM;
    if (dice < 72 && m->rearm_id[i][0])
        return step_rearm(m, i, 1), K_REARM_AGAIN;
    if (dice < 85)
        return step_get(m, i), K_GET;
    if (dice < 95)
        return step_force(m, i), K_FORCE;
    if (dice < 97)
        return step_expire(m), K_EXPIRE;
    return -1;
}

static void check(tm_world_t *w)
{
    latch_model_t *m = (latch_model_t *)w;
    redisReply *r = tm_cmd(w, "HMGET %s n o", w->key[0]);
    long long n = r->element[0]->type == REDIS_REPLY_STRING ? atoll(r->element[0]->str) : -1;
    long long o = r->element[1]->type == REDIS_REPLY_STRING ? atoll(r->element[1]->str) : -1;
    freeReplyObject(r);
    TM_FAIL_IF(n != (m->armed ? m->n : -1) || o != (m->armed ? m->opens : -1),
               "count %lld, openings %lld; the model has %d, %d", n, o, m->armed ? m->n : -1,
               m->armed ? m->opens : -1);
}

static tm_world_t *start(const ts_server_t *s)
{
    static const char *const suffixes[] = {"", "ids"};
    latch_model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    tm_world_init(&m->w, s, &rs_script_latch, "latch", suffixes, 2);
    return &m->w;
}

Test(model, latch_script_against_model, .timeout = 120)
{
    /* the queue's kinds do not apply to a latch: its own start at TM_K_OWN */
    static const tm_model_t model = {
        .kinds = {TM_KINDS, "init", "down", "down again", "rearm", "rearm again", "get", "force",
                  "expired", NULL},
        .first_kind = TM_K_OWN, .start = start, .step = step, .check = check};
    tm_run(&model);
}
