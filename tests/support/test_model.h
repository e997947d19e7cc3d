/* What the randomized model checks of the scripts (tests/test_model_*.c) share: the owners
 * (threads of any processes) with their tokens, acquisition ids and what each believes it
 * has; the waiter queue as the model sees it; the seeded random choices; one EVALSHA call
 * shaped as the library sends it; the steps every queueing script answers alike (renew,
 * qrenew, cancel); the check of a queue key against the model; the run (seeds, steps, the
 * check after each); and the failure message naming the seed, the step and the call, so
 * that RS_MODEL_SEED=N replays a failing run.
 *
 * Header-only and asserting (Criterion): include it from tests/test_*.c only. One test
 * thread makes every call, so the run's state is plain statics.
 */
#ifndef REDISYNC_TESTS_SUPPORT_TEST_MODEL_H
#define REDISYNC_TESTS_SUPPORT_TEST_MODEL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "internal.h" /* rs_script_t */
#include "test_assert.h"

#define TM_OWNERS 6      /* owners in a run */
#define TM_STEPS 2500    /* random calls per seed */
#define TM_LEASE "60000" /* holds and queue entries never run out by themselves in a run */

typedef enum { TM_IDLE, TM_QUEUED, TM_HOLDING } tm_state_t;

typedef struct tm_owner {
    char tok[48];      /* owner token (a new one when a dead waiter's process comes back) */
    char tokhash[48];  /* SHA1 of it, as the scripts store it */
    char id[64];       /* its current or last acquisition id */
    tm_state_t st;
    int handed;        /* TM_HOLDING, granted while queued: it has not learned it yet */
    int lost;          /* TM_HOLDING in its own view, but the lease ran out or was forced */
    char fence[32];    /* TM_HOLDING: the token of its hold */
    char released[64]; /* the id of its last release, for a retry; "" if none */
    int n;             /* permits wanted or held (semaphore) */
    int count;         /* re-entries of its hold (rmutex, rwlock): 1 when granted */
    char lastcall[32]; /* the id of its last enter/leave call, and that call's op */
    const char *lastop;
    int gen, nid, ncalls;
} tm_owner_t;

/* The queue and owners of one primitive in one run. A model embeds it first and fills in
 * extra and freed, which the shared steps below call. */
typedef struct tm_world tm_world_t;
struct tm_world {
    redisContext *k;
    char sha[41];
    int nkeys;
    char key[6][64];
    tm_owner_t o[TM_OWNERS];
    int q[4 * TM_OWNERS], nq; /* live waiters (owner indexes), in arrival order */
    char dead[TM_STEPS][64];  /* ids of dead waiters' entries (they may linger in the queue) */
    int ndead;
    /* ARGV[9..] of owner i's calls, the primitive's own (at most 2); returns how many */
    int (*extra)(tm_world_t *w, int i, const char *argv[2]);
    /* a call freed something: the script serves its queue, the model does the same (and
     * checks the tokens of those it served) */
    void (*freed)(tm_world_t *w);
};

static unsigned tm_seed;
static int tm_step;
static unsigned long long tm_rng, tm_last_fence;
/* the highest token a grant of the run has handed out (tm_last_fence also follows faults) */
static unsigned long long tm_last_granted;
static char tm_what[192]; /* the call being made, for failure messages */
static int tm_trace;      /* RS_MODEL_TRACE=1: every call on stderr */

#define TM_FAIL_IF(cond, ...)                                                                 \
    do {                                                                                      \
        if (cond) {                                                                           \
            char msg_[256];                                                                   \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                         \
            cr_assert_fail("seed %u step %d (%s): %s", tm_seed, tm_step, tm_what, msg_);      \
        }                                                                                     \
    } while (0)

/* Copies an id or token between fields of the model (snprintf would warn of overlap). */
static inline void tm_set(char *dst, size_t len, const char *src)
{
    size_t n = strlen(src);
    if (n >= len)
        n = len - 1;
    memmove(dst, src, n);
    dst[n] = '\0';
}

static inline unsigned tm_rnd(unsigned n)
{
    tm_rng ^= tm_rng << 13;
    tm_rng ^= tm_rng >> 7;
    tm_rng ^= tm_rng << 17;
    return (unsigned)(tm_rng % n);
}

static inline redisReply *tm_cmd(tm_world_t *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(w->k, fmt, ap);
    va_end(ap);
    TM_FAIL_IF(!r, "connection error");
    return r;
}

/* Element i of an array reply as text ("" when absent). */
static inline const char *tm_el(const redisReply *r, size_t i, char *buf, size_t len)
{
    buf[0] = '\0';
    if (i < r->elements && r->element[i]->type == REDIS_REPLY_STRING)
        snprintf(buf, len, "%s", r->element[i]->str);
    else if (i < r->elements && r->element[i]->type == REDIS_REPLY_INTEGER)
        snprintf(buf, len, "%lld", r->element[i]->integer);
    return buf;
}

/* A new grant's token: above every earlier one of the run. */
static inline void tm_saw_fence(const char *f)
{
    unsigned long long v = strtoull(f, NULL, 10);
    TM_FAIL_IF(v <= tm_last_fence, "fencing token %llu not above the previous %llu", v,
               tm_last_fence);
    tm_last_fence = v;
    tm_last_granted = v;
}

/* Owner i starts (again, as a new process): a new token, holding and wanting nothing. */
static inline void tm_new_owner(tm_world_t *w, int i)
{
    tm_owner_t *o = &w->o[i];
    o->gen++;
    snprintf(o->tok, sizeof o->tok, "tok%d.%d.%u", i, o->gen, tm_seed);
    redisReply *r = tm_cmd(w, "EVAL %s 0 %s", "return redis.sha1hex(ARGV[1])", o->tok);
    TM_FAIL_IF(r->type != REDIS_REPLY_STRING, "sha1hex");
    tm_set(o->tokhash, sizeof o->tokhash, r->str);
    freeReplyObject(r);
    o->st = TM_IDLE;
    o->handed = o->lost = o->n = 0;
    o->id[0] = o->fence[0] = o->released[0] = '\0';
}

static inline void tm_new_id(tm_world_t *w, int i)
{
    tm_owner_t *o = &w->o[i];
    snprintf(o->id, sizeof o->id, "p%d.%d:%d.%08x", i, o->gen, ++o->nid, tm_rnd(0x7fffffff));
}

/* SCRIPT LOAD of sc; its SHA1 into sha[41]. */
static inline void tm_load(tm_world_t *w, const rs_script_t *sc, char *sha)
{
    redisReply *r = redisCommand(w->k, "SCRIPT LOAD %b", sc->body, sc->len);
    cr_assert(r && r->type == REDIS_REPLY_STRING, "SCRIPT LOAD %s", sc->name);
    tm_set(sha, 41, r->str);
    freeReplyObject(r);
}

/* Connects, loads script s, names the keys PREFIX:{NAME}:KIND[:SUFFIX], starts the owners. */
static inline void tm_world_init(tm_world_t *w, const ts_server_t *s, const rs_script_t *sc,
                                 const char *kind, const char *const *suffixes, int nkeys)
{
    w->k = ts_connect(s);
    cr_assert_not_null(w->k);
    w->nkeys = nkeys;
    for (int j = 0; j < nkeys; j++)
        snprintf(w->key[j], sizeof w->key[j], "rs:{model%u}:%s%s%s", tm_seed, kind,
                 suffixes[j][0] ? ":" : "", suffixes[j]);
    tm_load(w, sc, w->sha);
    for (int i = 0; i < TM_OWNERS; i++)
        tm_new_owner(w, i);
}

/* Sends one command (argv), fails the test on a connection error or an error reply, and
 * with RS_MODEL_TRACE prints the call and the first element of its reply. */
static inline redisReply *tm_send(tm_world_t *w, int argc, const char **argv)
{
    size_t lens[24];
    for (int j = 0; j < argc; j++)
        lens[j] = strlen(argv[j]);
    redisReply *r = redisCommandArgv(w->k, argc, argv, lens);
    TM_FAIL_IF(!r, "connection error");
    if (tm_trace)
        fprintf(stderr, "%d: %s -> %s %lld\n", tm_step, tm_what,
                r->type == REDIS_REPLY_ARRAY ? "array" : "int",
                r->type == REDIS_REPLY_ARRAY && r->elements ? r->element[0]->integer
                                                            : r->integer);
    TM_FAIL_IF(r->type == REDIS_REPLY_ERROR, "%s", r->str);
    return r;
}

/* One script call as the library makes it, on keys: KEYS, then op, owner i's token,
 * acquisition id, lease, channel prefix, mode, max waiters, queue lease, and the primitive's
 * extra ARGV. */
static inline redisReply *tm_call_keys(tm_world_t *w, char (*keys)[64], int nkeys,
                                       const char *op, int i, const char *acq, const char *mode,
                                       const char *const *extra, int nextra)
{
    const char *argv[24];
    int n = 0;
    char nk[4];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[n++] = "EVALSHA";
    argv[n++] = w->sha;
    argv[n++] = nk;
    for (int j = 0; j < nkeys; j++)
        argv[n++] = keys[j];
    argv[n++] = op;
    argv[n++] = w->o[i].tok;
    argv[n++] = acq;
    argv[n++] = TM_LEASE;
    argv[n++] = "rs:client:";
    argv[n++] = mode ? mode : "q";
    argv[n++] = "100";
    argv[n++] = TM_LEASE;
    for (int j = 0; j < nextra; j++)
        argv[n++] = extra[j];
    return tm_send(w, n, argv);
}

/* The same on the model's own keys. */
static inline redisReply *tm_call(tm_world_t *w, const char *op, int i, const char *acq,
                                  const char *mode, const char *const *extra, int nextra)
{
    return tm_call_keys(w, w->key, w->nkeys, op, i, acq, mode, extra, nextra);
}

/* tm_call with owner i's own extra arguments. */
static inline redisReply *tm_call_owner(tm_world_t *w, const char *op, int i, const char *acq,
                                        const char *mode)
{
    const char *extra[2];
    int n = w->extra ? w->extra(w, i, extra) : 0;
    return tm_call(w, op, i, acq, mode, extra, n);
}

static inline long long tm_int(redisReply *r)
{
    TM_FAIL_IF(r->type != REDIS_REPLY_INTEGER, "reply type %d, not an integer", r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static inline void tm_q_remove(tm_world_t *w, int i)
{
    int n = 0;
    for (int j = 0; j < w->nq; j++)
        if (w->q[j] != i)
            w->q[n++] = w->q[j];
    w->nq = n;
}

/* Fault: waiter i's process dies, its queue entry's lease set in the past (qikey's info
 * "EXPIRYMS LEASEMS TOKENHASH ...": rest is what follows the expiry); i comes back anew. */
static inline void tm_kill_waiter(tm_world_t *w, int i, const char *qikey, const char *rest)
{
    tm_owner_t *o = &w->o[i];
    snprintf(tm_what, sizeof tm_what, "waiter %d (id %s) dies", i, o->id);
    freeReplyObject(tm_cmd(w, "HSET %s %s 1%s", qikey, o->id, rest));
    tm_q_remove(w, i);
    if (w->ndead < TM_STEPS)
        tm_set(w->dead[w->ndead++], sizeof w->dead[0], o->id);
    tm_new_owner(w, i);
}

/* Fault: the fencing counter fkey is ahead of the server clock (the clock was set back, or
 * the counter came from a master whose clock ran ahead): later tokens must be above it. */
static inline void tm_counter_ahead(tm_world_t *w, const char *fkey)
{
    unsigned long long ahead = tm_last_fence + 1000000000ULL;
    snprintf(tm_what, sizeof tm_what, "the fencing counter jumps to %llu", ahead);
    /* with the TTL a script gives it (core.lua FENCE_TTL): every key has one */
    freeReplyObject(tm_cmd(w, "SET %s %llu PX 2592000000", fkey, ahead));
    tm_last_fence = ahead;
}

/* A fresh hold: counted once, no enter/leave call seen yet. */
static inline void tm_fresh_hold(tm_owner_t *o)
{
    o->count = 1;
    o->lastcall[0] = '\0';
}

/* Reply r grants owner i a new hold (why: what made the model expect one); its token must be
 * above every earlier one. */
static inline void tm_expect_grant(tm_world_t *w, int i, redisReply *r, const char *why)
{
    tm_owner_t *o = &w->o[i];
    char f[32];
    TM_FAIL_IF(r->element[0]->integer != 1, "%s: reply %lld, not a grant", why,
               r->element[0]->integer);
    tm_el(r, 1, f, sizeof f);
    tm_saw_fence(f);
    tm_set(o->fence, sizeof o->fence, f);
    o->st = TM_HOLDING, o->handed = o->lost = 0;
    tm_fresh_hold(o);
}

/* Reply r is the grant owner i has already (a retry, or a waiter learning of it), with the
 * same token. */
static inline void tm_expect_grant_again(tm_world_t *w, int i, redisReply *r)
{
    tm_owner_t *o = &w->o[i];
    char f[32];
    TM_FAIL_IF(r->element[0]->integer != 1, "its own hold: reply %lld, not the grant again",
               r->element[0]->integer);
    TM_FAIL_IF(strcmp(tm_el(r, 1, f, sizeof f), o->fence) != 0,
               "the grant again with token %s, not %s", f, o->fence);
    o->handed = 0;
}

/* Reply r says busy (why: what made the model expect it), the caller queued or not. */
static inline void tm_expect_busy(redisReply *r, int queued, const char *why)
{
    TM_FAIL_IF(r->element[0]->integer != 0, "%s: reply %lld, not busy", why,
               r->element[0]->integer);
    TM_FAIL_IF(r->elements < 3 || r->element[2]->integer != queued,
               "busy reply's 'queued' is not %d", queued);
}

/* A new acquire found the primitive busy (why): with mode "q" the caller waits at the tail. */
static inline void tm_expect_busy_new(tm_world_t *w, int i, redisReply *r, const char *mode,
                                      const char *why)
{
    int queue = *mode == 'q';
    tm_expect_busy(r, queue, why);
    if (queue) {
        w->o[i].st = TM_QUEUED;
        w->q[w->nq++] = i;
    }
}

/* ----- the steps every queueing script shares ------------------------------------------ */

/* Renewal by a holder: 1, or 0 once its hold is lost (it then knows). */
static inline void tm_step_renew(tm_world_t *w, int i)
{
    tm_owner_t *o = &w->o[i];
    snprintf(tm_what, sizeof tm_what, "renew by owner %d, id %s%s", i, o->id,
             o->lost ? " (lost)" : "");
    long long v = tm_int(tm_call_owner(w, "renew", i, o->id, NULL));
    TM_FAIL_IF(v != !o->lost, "reply %lld", v);
    if (o->lost)
        o->st = TM_IDLE, o->lost = o->handed = 0;
}

/* The same acquire again: a holder's lost reply, or a waiter's re-sent call (woken or not).
 * The script serves its queue first, so a waiter may be granted now, with the token its hold
 * records. */
static inline void tm_step_acquire_again(tm_world_t *w, int i)
{
    tm_owner_t *o = &w->o[i];
    snprintf(tm_what, sizeof tm_what, "acq again by owner %d, id %s (%s)", i, o->id,
             o->st == TM_QUEUED ? "queued" : o->handed ? "granted" : "holding");
    redisReply *r = tm_call_owner(w, "acq", i, o->id, "q");
    if (o->st == TM_QUEUED)
        w->freed(w);
    if (o->st == TM_HOLDING)
        tm_expect_grant_again(w, i, r);
    else
        tm_expect_busy(r, 1, "still waiting");
    freeReplyObject(r);
}

/* Re-entry (the recursive mutex's, the rwlock's): enter or leave counts one more or one fewer
 * (never below 1: the last unlock is rel); the same call id again, a retry, counts nothing;
 * 0 once the hold is lost (it then knows). The call id follows the primitive's own ARGV. */
static inline void tm_step_count(tm_world_t *w, int i)
{
    tm_owner_t *o = &w->o[i];
    int retry = o->lastcall[0] && tm_rnd(4) == 0;
    const char *op = retry ? o->lastop : o->count > 1 && tm_rnd(2) ? "leave" : "enter";
    if (!retry)
        snprintf(o->lastcall, sizeof o->lastcall, "c%d.%d", i, ++o->ncalls);
    snprintf(tm_what, sizeof tm_what, "%s %s%s by owner %d (count %d), id %s%s", op,
             o->lastcall, retry ? " again" : "", i, o->count, o->id, o->lost ? " (lost)" : "");
    const char *extra[3];
    int n = w->extra ? w->extra(w, i, extra) : 0;
    extra[n++] = o->lastcall;
    long long v = tm_int(tm_call(w, op, i, o->id, NULL, extra, n));
    long long want = o->lost ? 0 : retry ? o->count : op[0] == 'e' ? o->count + 1 : o->count - 1;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    o->lastop = op;
    if (o->lost)
        o->st = TM_IDLE, o->lost = o->handed = 0;
    else
        o->count = (int)want;
}

/* Queue renewal by a waiter: 1 still queued, 2 granted meanwhile (it learns), 0 its entry is
 * gone (granted, then lost). */
static inline void tm_step_qrenew(tm_world_t *w, int i)
{
    tm_owner_t *o = &w->o[i];
    snprintf(tm_what, sizeof tm_what, "qrenew by owner %d, id %s%s", i, o->id,
             o->handed ? (o->lost ? " (granted, lost)" : " (granted)") : "");
    long long v = tm_int(tm_call_owner(w, "qrenew", i, o->id, NULL));
    long long want = o->st == TM_QUEUED ? 1 : o->lost ? 0 : 2;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    if (want == 2)
        o->handed = 0;
    else if (want == 0)
        o->st = TM_IDLE, o->lost = o->handed = 0;
}

/* A waiter gives up: granted meanwhile, it keeps the grant; else it leaves the queue, and
 * those behind it may be served. */
static inline void tm_step_cancel(tm_world_t *w, int i)
{
    tm_owner_t *o = &w->o[i];
    snprintf(tm_what, sizeof tm_what, "cancel by owner %d, id %s%s", i, o->id,
             o->handed ? (o->lost ? " (granted, lost)" : " (granted)") : "");
    redisReply *r = tm_call_owner(w, "cancel", i, o->id, NULL);
    TM_FAIL_IF(r->type != REDIS_REPLY_ARRAY, "reply type %d", r->type);
    long long k0 = r->element[0]->integer;
    if (o->st == TM_HOLDING && !o->lost) {
        tm_expect_grant_again(w, i, r);
    } else {
        TM_FAIL_IF(k0 != 0, "reply %lld, not left the queue", k0);
        tm_q_remove(w, i);
        o->st = TM_IDLE, o->lost = o->handed = 0;
        w->freed(w);
    }
    freeReplyObject(r);
}

/* The kinds of step every model makes, first in its list of kinds (TM_KINDS names them, in
 * this order); a model's own kinds follow from TM_K_OWN. */
enum { TM_K_AGAIN, TM_K_QRENEW, TM_K_CANCEL, TM_K_DIES, TM_K_RENEW, TM_K_AHEAD, TM_K_OWN };
#define TM_KINDS "acq again", "qrenew", "cancel", "waiter died", "renew", "counter ahead"

/* A step of waiter i, queued or granted without knowing yet: its re-sent acquire, a queue
 * renewal, a cancel, or, queued and may_die, its process dies (its entry in qikey
 * becomes "1" dead_rest). Returns the kind. */
static inline int tm_step_waiter(tm_world_t *w, int i, unsigned dice, int may_die,
                                 const char *qikey, const char *dead_rest)
{
    tm_owner_t *o = &w->o[i];
    if (o->st == TM_QUEUED) {
        if (dice < 40)
            return tm_step_acquire_again(w, i), TM_K_AGAIN;
        if (dice < 60)
            return tm_step_qrenew(w, i), TM_K_QRENEW;
        if (dice < 80 || !may_die)
            return tm_step_cancel(w, i), TM_K_CANCEL;
        return tm_kill_waiter(w, i, qikey, dead_rest), TM_K_DIES;
    }
    /* granted meanwhile: it learns by its woken call, its queue renewal or its cancel */
    if (dice < 50 && !o->lost)
        return tm_step_acquire_again(w, i), TM_K_AGAIN;
    if (dice < 75)
        return tm_step_qrenew(w, i), TM_K_QRENEW;
    return tm_step_cancel(w, i), TM_K_CANCEL;
}

/* Every key of the world that exists has a TTL (the scripts extend the queue's two keys
 * together, reading one TTL: primitives/common.lua q_keep). */
static inline void tm_check_ttls(tm_world_t *w)
{
    for (int j = 0; j < w->nkeys; j++) {
        redisReply *r = tm_cmd(w, "PTTL %s", w->key[j]);
        TM_FAIL_IF(r->type != REDIS_REPLY_INTEGER || r->integer == -1, "key %s has no TTL",
                   w->key[j]);
        freeReplyObject(r);
    }
}

/* The queue key qkey holds the model's live waiters, in order (dead entries may linger), and
 * every key has a TTL. */
static inline void tm_check_queue(tm_world_t *w, const char *qkey)
{
    tm_check_ttls(w);
    redisReply *r = tm_cmd(w, "ZRANGE %s 0 -1", qkey);
    int j = 0;
    for (size_t e = 0; e < r->elements; e++) {
        const char *id = r->element[e]->str;
        int dead = 0;
        for (int d = 0; d < w->ndead && !dead; d++)
            dead = strcmp(w->dead[d], id) == 0;
        if (dead)
            continue;
        TM_FAIL_IF(j >= w->nq, "queued %s, which the model does not have waiting", id);
        TM_FAIL_IF(strcmp(id, w->o[w->q[j]].id) != 0, "queue position %d holds %s, not %s", j,
                   id, w->o[w->q[j]].id);
        j++;
    }
    TM_FAIL_IF(j != w->nq, "%d live entries queued, the model has %d", j, w->nq);
    freeReplyObject(r);
}

/* The seeds a test runs: RS_MODEL_SEED=N alone, or a fixed three. Returns how many. */
static inline int tm_seeds(unsigned out[3])
{
    const char *env = getenv("RS_MODEL_SEED");
    if (env && *env) {
        out[0] = (unsigned)strtoul(env, NULL, 10);
        return 1;
    }
    out[0] = 1, out[1] = 20261123, out[2] = 4242;
    return 3;
}

static inline void tm_begin(unsigned seed)
{
    tm_seed = seed;
    tm_rng = 0x9e3779b97f4a7c15ULL ^ seed;
    tm_last_fence = 0;
    tm_last_granted = 0;
    tm_step = 0;
    tm_trace = getenv("RS_MODEL_TRACE") && atoi(getenv("RS_MODEL_TRACE")) > 0;
}

/* ----- the run ---------------------------------------------------------------------------- */

/* A model: its steps' names (for the log; every one must run in every seed), and how to
 * start it on a server, make one step for owner i, check the keys and free it. */
typedef struct tm_model {
    const char *kinds[16]; /* NULL-terminated */
    int first_kind;        /* the kinds below it are not this model's (not logged or required) */
    tm_world_t *(*start)(const ts_server_t *s);
    int (*step)(tm_world_t *w, int i, unsigned dice); /* the kind made, -1: none (i waits) */
    void (*check)(tm_world_t *w);
} tm_model_t;

/* TM_STEPS random steps per seed on one throwaway redis-server, the keys checked after each. */
static inline void tm_run(const tm_model_t *md)
{
    ts_server_t s;
    tu_start_server(&s);
    unsigned seeds[3];
    for (int k = 0, nseeds = tm_seeds(seeds); k < nseeds; k++) {
        tm_begin(seeds[k]);
        tm_world_t *w = md->start(&s);
        int counts[16] = {0}, nk = 0;
        while (md->kinds[nk])
            nk++;
        while (tm_step < TM_STEPS) {
            int i = (int)tm_rnd(TM_OWNERS);
            int kind = md->step(w, i, tm_rnd(100));
            if (kind < 0)
                continue;
            counts[kind]++;
            md->check(w);
            tm_step++;
        }
        char line[512];
        size_t used = 0;
        for (int j = md->first_kind; j < nk && used < sizeof line; j++)
            used += (size_t)snprintf(line + used, sizeof line - used, "%s%s %d",
                                     j > md->first_kind ? ", " : "", md->kinds[j], counts[j]);
        if (tm_last_fence)
            cr_log_info("seed %u: %d steps: %s; last token %llu", seeds[k], TM_STEPS, line,
                        tm_last_fence);
        else
            cr_log_info("seed %u: %d steps: %s", seeds[k], TM_STEPS, line);
        /* every kind of step happened in the suite's seeds, or the run proved less than it
         * claims (a seed of a sweep may miss a rare kind: not a fault of the script) */
        for (int j = md->first_kind; j < nk && nseeds > 1; j++)
            cr_expect_gt(counts[j], 0, "seed %u: no step \"%s\" ran", seeds[k], md->kinds[j]);
        redisFree(w->k);
        free(w);
    }
    ts_server_stop(&s);
}

#endif
