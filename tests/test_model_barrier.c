/*
 * test_model_barrier.c - randomized model check of the barrier's script
 * (primitives/barrier/barrier.lua): thousands of random protocol calls sent straight to Redis
 * with EVALSHA, each reply compared with a small model of docs/scripts.md ("barrier.lua"),
 * and the keys compared after every step.
 *
 * The calls are the ones the library makes, in any order a set of parties could make them:
 * init (with the barrier's count, and with another, which must be refused and change
 * nothing), arrive under a fresh id, a waiting party's re-sent arrive (a lost reply), get,
 * withdraw (a timed-out or cancelled wait), and the same re-sent arrive and withdraw by a
 * party whose generation tripped (it may not have learned it yet), and info. What must hold:
 * a generation trips exactly when its parties-th distinct arrival comes, never earlier, and
 * the generation counter moves by one; exactly one serial party per generation, the one
 * whose arrival completed it, and a retried arrive or a withdraw of a counted party gets the
 * answer of the first time (the same generation, serial only for that party: the retry must
 * not make a second serial caller); a withdrawn party is not counted; a retried arrive of a
 * waiting party is not counted twice. Shared driver and helpers: tests/support/test_model.h.
 */
#include <criterion/criterion.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_model.h"

#define K_MAIN 0
#define K_IN 1
#define K_OUT 2

typedef enum { P_IDLE, P_WAITING, P_TRIPPED } pstate_t;

typedef struct model {
    tm_world_t w;               /* keys: barrier, in, out */
    int parties;                /* the barrier's count */
    long long g;                /* the current generation */
    pstate_t st[TM_OWNERS];
    long long pgen[TM_OWNERS];  /* P_WAITING: the generation it arrived in; P_TRIPPED: the
                                   generation that tripped with it */
    int serial[TM_OWNERS];      /* P_TRIPPED: it completed that generation */
    long long nout;             /* arrivals recorded in tripped generations (the out hash) */
} model_t;

static char parties_s[16];
static const char *const ttl_s = "86400000", *const out_s = "600000";

/* one call with the library's extra ARGV: parties, TTL, how long tripped arrivals last */
static redisReply *bcall(model_t *m, const char *op, int i, const char *id, const char *n)
{
    const char *extra[3] = {n ? n : parties_s, ttl_s, out_s};
    return tm_call(&m->w, op, i, id, NULL, extra, 3);
}

static long long arr(const redisReply *r, size_t k)
{
    TM_FAIL_IF(r->type != REDIS_REPLY_ARRAY, "reply type %d, not an array", r->type);
    TM_FAIL_IF(k >= r->elements || r->element[k]->type != REDIS_REPLY_INTEGER,
               "reply has no integer at %zu", k);
    return r->element[k]->integer;
}

static int waiting(const model_t *m)
{
    int n = 0;
    for (int j = 0; j < TM_OWNERS; j++)
        n += m->st[j] == P_WAITING;
    return n;
}

/* Party i's arrive: fresh (a new id) or again (its last id: a lost reply re-sent). */
static void arrive(model_t *m, int i, int fresh)
{
    tm_owner_t *o = &m->w.o[i];
    if (fresh)
        tm_new_id(&m->w, i);
    snprintf(tm_what, sizeof tm_what, "arrive by party %d, id %s%s (%d of %d waiting, gen %lld)",
             i, o->id, fresh ? "" : m->st[i] == P_TRIPPED ? " again, tripped" : " again",
             waiting(m), m->parties, m->g);
    redisReply *r = bcall(m, "arrive", i, o->id, NULL);
    long long v = arr(r, 0), g = arr(r, 1);
    if (m->st[i] == P_TRIPPED) {
        /* the answer of the first time: counted in pgen, serial only if it completed it */
        TM_FAIL_IF(v != 2, "a retried arrival of a tripped generation: reply %lld, not 2", v);
        TM_FAIL_IF(g != m->pgen[i], "tripped in generation %lld, the model says %lld", g,
                   m->pgen[i]);
        long long s = arr(r, 2);
        TM_FAIL_IF(s != m->serial[i], "told serial %lld, the model says %d (one serial per "
                   "generation)", s, m->serial[i]);
    } else if (m->st[i] == P_WAITING) {
        TM_FAIL_IF(v != 0 || g != m->g, "a retried arrival, still waiting: reply {%lld, %lld}, "
                   "not {0, %lld}", v, g, m->g);
    } else if (waiting(m) + 1 < m->parties) {
        TM_FAIL_IF(v != 0 || g != m->g, "arrival %d of %d: reply {%lld, %lld}, not {0, %lld}",
                   waiting(m) + 1, m->parties, v, g, m->g);
        m->st[i] = P_WAITING, m->pgen[i] = m->g;
    } else {
        TM_FAIL_IF(v != 1 || g != m->g, "the last arrival: reply {%lld, %lld}, not the trip "
                   "{1, %lld}", v, g, m->g);
        for (int j = 0; j < TM_OWNERS; j++)
            if (m->st[j] == P_WAITING || j == i) {
                m->st[j] = P_TRIPPED, m->pgen[j] = m->g, m->serial[j] = j == i;
                m->nout++;
            }
        m->g++;
    }
    freeReplyObject(r);
}

/* Party i gives up (deadline, close): withdrawn, or told it had been counted. */
static void withdraw(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "withdraw by party %d, id %s (%s)", i, o->id,
             m->st[i] == P_TRIPPED ? "tripped" : "waiting");
    redisReply *r = bcall(m, "withdraw", i, o->id, NULL);
    if (m->st[i] == P_WAITING) {
        TM_FAIL_IF(r->type != REDIS_REPLY_INTEGER || r->integer != 1,
                   "a waiting party's withdraw: not 1");
    } else {
        TM_FAIL_IF(arr(r, 0) != 2, "a counted party's withdraw: reply %lld, not 2", arr(r, 0));
        TM_FAIL_IF(arr(r, 1) != m->serial[i], "told serial %lld, the model says %d",
                   arr(r, 1), m->serial[i]);
    }
    m->st[i] = P_IDLE;
    freeReplyObject(r);
}

static void get(model_t *m, int i)
{
    snprintf(tm_what, sizeof tm_what, "get by party %d (gen %lld)", i, m->g);
    long long v = tm_int(bcall(m, "get", i, "op:0", NULL));
    TM_FAIL_IF(v != m->g, "generation %lld, the model says %lld", v, m->g);
    /* a waiter whose generation tripped returns now */
    if (m->st[i] == P_TRIPPED && tm_rnd(2))
        m->st[i] = P_IDLE;
}

/* init with the barrier's count: {n, g}; with another: refused, nothing changes */
static void init(model_t *m, int other)
{
    char n[16];
    snprintf(n, sizeof n, "%d", other ? m->parties + 1 + (int)tm_rnd(3) : m->parties);
    snprintf(tm_what, sizeof tm_what, "init with %s parties (the barrier has %d)", n,
             m->parties);
    if (!other) {
        redisReply *r = bcall(m, "init", 0, "op:0", n);
        TM_FAIL_IF(arr(r, 0) != m->parties || arr(r, 1) != m->g, "reply {%lld, %lld}",
                   arr(r, 0), arr(r, 1));
        freeReplyObject(r);
        return;
    }
    const char *argv[] = {"EVALSHA", m->w.sha, "3", m->w.key[0], m->w.key[1], m->w.key[2],
                          "init", "tok", "op:0", TM_LEASE, "rs:client:", "q", "100", TM_LEASE,
                          n, ttl_s, out_s};
    size_t lens[17];
    for (int j = 0; j < 17; j++)
        lens[j] = strlen(argv[j]);
    redisReply *r = redisCommandArgv(m->w.k, 17, argv, lens);
    TM_FAIL_IF(!r, "connection error");
    TM_FAIL_IF(r->type != REDIS_REPLY_ERROR || strncmp(r->str, "RSINVAL", 7) != 0,
               "another party count not refused");
    freeReplyObject(r);
}

static void info(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "info");
    redisReply *r = bcall(m, "info", 0, "op:0", NULL);
    TM_FAIL_IF(arr(r, 0) != 1 || arr(r, 4) != waiting(m) || arr(r, 8) != m->parties,
               "info {exists %lld, arrived %lld, parties %lld}, the model says {1, %d, %d}",
               arr(r, 0), arr(r, 4), arr(r, 8), waiting(m), m->parties);
    freeReplyObject(r);
}

static void check(tm_world_t *w)
{
    model_t *m = (model_t *)w;
    redisReply *r = tm_cmd(w, "HMGET %s n g", w->key[K_MAIN]);
    TM_FAIL_IF(r->element[0]->type != REDIS_REPLY_STRING || atoi(r->element[0]->str) != m->parties,
               "parties in Redis differ from %d", m->parties);
    TM_FAIL_IF(r->element[1]->type != REDIS_REPLY_STRING ||
                   strtoll(r->element[1]->str, NULL, 10) != m->g,
               "generation %s, the model says %lld",
               r->element[1]->type == REDIS_REPLY_STRING ? r->element[1]->str : "none", m->g);
    freeReplyObject(r);
    /* the arrivals: exactly the waiting parties' ids */
    r = tm_cmd(w, "SMEMBERS %s", w->key[K_IN]);
    TM_FAIL_IF((int)r->elements != waiting(m), "%zu arrivals counted, the model has %d waiting",
               r->elements, waiting(m));
    for (size_t e = 0; e < r->elements; e++) {
        int found = 0;
        for (int j = 0; j < TM_OWNERS && !found; j++)
            found = m->st[j] == P_WAITING && strcmp(m->w.o[j].id, r->element[e]->str) == 0;
        TM_FAIL_IF(!found, "%s is counted, but is no waiting party's", r->element[e]->str);
    }
    freeReplyObject(r);
    /* every arrival of a tripped generation is remembered, once, with its answer */
    r = tm_cmd(w, "HLEN %s", w->key[K_OUT]);
    TM_FAIL_IF(r->integer != m->nout, "%lld tripped arrivals remembered, the model has %lld",
               r->integer, m->nout);
    freeReplyObject(r);
    for (int j = 0; j < TM_OWNERS; j++) {
        if (m->st[j] != P_TRIPPED)
            continue;
        char want[48];
        snprintf(want, sizeof want, "%lld %d", m->pgen[j], m->serial[j]);
        r = tm_cmd(w, "HGET %s %s", w->key[K_OUT], m->w.o[j].id);
        TM_FAIL_IF(r->type != REDIS_REPLY_STRING || strcmp(r->str, want) != 0,
                   "party %d's tripped arrival recorded as '%s', not '%s'", j,
                   r->type == REDIS_REPLY_STRING ? r->str : "nothing", want);
        freeReplyObject(r);
    }
}

enum { K_ARRIVE = TM_K_OWN, K_AGAIN_WAITING, K_AGAIN_TRIPPED, K_WITHDRAW, K_WITHDRAW_TRIPPED,
       K_GET, K_INIT, K_INIT_OTHER, K_INFO };

static int step(tm_world_t *w, int i, unsigned dice)
{
    model_t *m = (model_t *)w;
    if (dice < 2)
        return init(m, 1), K_INIT_OTHER;
    if (dice < 4)
        return init(m, 0), K_INIT;
    if (dice < 7)
        return info(m), K_INFO;
    switch (m->st[i]) {
    case P_IDLE:
        return arrive(m, i, 1), K_ARRIVE;
    case P_WAITING:
        if (dice < 40)
            return get(m, i), K_GET;
        if (dice < 70)
            return arrive(m, i, 0), K_AGAIN_WAITING;
        if (dice < 82)
            return withdraw(m, i), K_WITHDRAW;
        return -1; /* it sleeps */
    case P_TRIPPED:
        if (dice < 40)
            return arrive(m, i, 0), K_AGAIN_TRIPPED;
        if (dice < 60)
            return withdraw(m, i), K_WITHDRAW_TRIPPED;
        if (dice < 80)
            return get(m, i), K_GET;
        m->st[i] = P_IDLE; /* it returned and goes on */
        return -1;
    }
    return -1;
}

static tm_world_t *start(const ts_server_t *s)
{
    static const char *const suffixes[] = {"", "in", "out"};
    model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    tm_world_init(&m->w, s, &rs_script_barrier, "barrier", suffixes, 3);
    m->parties = 2 + (int)tm_rnd(TM_OWNERS - 2); /* 2..5 of the 6 parties */
    snprintf(parties_s, sizeof parties_s, "%d", m->parties);
    snprintf(tm_what, sizeof tm_what, "the first init, %d parties", m->parties);
    redisReply *r = bcall(m, "init", 0, "op:0", NULL);
    TM_FAIL_IF(arr(r, 0) != m->parties || arr(r, 1) != 0, "first init");
    freeReplyObject(r);
    return &m->w;
}

Test(model, barrier_script_against_model, .timeout = 120)
{
    static const tm_model_t model = {
        .kinds = {TM_KINDS, "arrive", "arrive again (waiting)", "arrive again (tripped)",
                  "withdraw", "withdraw (tripped)", "get", "init", "init (other count)",
                  "info", NULL},
        .first_kind = TM_K_OWN, .start = start, .step = step, .check = check};
    tm_run(&model);
}
