/*
 * test_model_cond.c - randomized model check of the condition variable's script
 * (primitives/cond/cond.lua): thousands of random protocol calls sent straight to Redis
 * with EVALSHA, each reply compared with a small model of docs/scripts.md ("cond.lua"), the
 * queue compared after every step, and every message the script publishes on the client
 * channels (read through a PSUBSCRIBE connection, synchronised with a PING after each step)
 * compared with the messages the model expects.
 *
 * The calls are the ones the library makes, in any order waiters of several clients could
 * make them: wait (a fresh one, or a retry of the last), qrenew and leave by a waiter that
 * may or may not have been woken, signal and broadcast by anyone, info; the fault is a
 * waiter that dies (its entry's lease set in the past). What must hold: FIFO order; signal
 * wakes the first live entry with one message "ACQID s" on its client's channel and skips
 * dead ones; broadcast wakes every live entry, one message per client naming its waiters in
 * order, and leaves nothing queued; a woken waiter's qrenew and leave say 0, a queued one's
 * 1; nothing is published otherwise. Shared driver: tests/support/test_model.h.
 */
#include <criterion/criterion.h>

#include <unistd.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_model.h"

#define CLIENTS 3 /* owners 0..5 belong to clients p0..p2 by their ids' PUBLICID */

static redisContext *sub; /* PSUBSCRIBE rs:client:* (one per seed; the last closed by fini) */

typedef struct model {
    tm_world_t w;
    int woken[TM_OWNERS];  /* queued in its own view, but a signal or broadcast took it */
    char want[TM_OWNERS * 2][1024]; /* "CHANNEL PAYLOAD" the step should publish, in order */
    int nwant;
} model_t;

#define K_Q 0
#define K_QI 1

/* Owner i's ids name client i % CLIENTS: "cN:..." */
static void new_id(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(o->id, sizeof o->id, "c%d:%d.%d.%08x", i % CLIENTS, i, ++o->nid, tm_rnd(0x7fffffff));
}

static void expect_msg(model_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void expect_msg(model_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->want[m->nwant++], sizeof m->want[0], fmt, ap);
    va_end(ap);
}

/* The messages published since the last sync, compared with want (in order). */
static void check_messages(model_t *m)
{
    redisReply *r;
    TM_FAIL_IF(redisAppendCommand(sub, "PING") != REDIS_OK, "PING");
    int got = 0;
    for (;;) {
        TM_FAIL_IF(redisGetReply(sub, (void **)&r) != REDIS_OK || !r, "subscriber read");
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
            strcmp(r->element[0]->str, "pong") == 0) {
            freeReplyObject(r);
            break;
        }
        TM_FAIL_IF(r->type != REDIS_REPLY_ARRAY || r->elements != 4, "odd subscriber reply");
        char line[1100];
        snprintf(line, sizeof line, "%s %s", r->element[2]->str, r->element[3]->str);
        TM_FAIL_IF(got >= m->nwant, "unexpected message \"%.100s\"", line);
        TM_FAIL_IF(strcmp(line, m->want[got]) != 0, "message \"%.90s\", the model says \"%.90s\"",
                   line, m->want[got]);
        got++;
        freeReplyObject(r);
    }
    TM_FAIL_IF(got != m->nwant, "%d messages, the model says %d (first missing: \"%.90s\")", got,
               m->nwant, m->want[got]);
    m->nwant = 0;
}

/* The model's queue entry i is taken by a signal or broadcast. */
static void take(model_t *m, int i)
{
    tm_q_remove(&m->w, i);
    m->woken[i] = 1;
}

static void step_wait(model_t *m, int i, int again)
{
    tm_owner_t *o = &m->w.o[i];
    if (!again) {
        new_id(m, i);
        m->woken[i] = 0;
    }
    snprintf(tm_what, sizeof tm_what, "wait%s by owner %d, id %s%s", again ? " again" : "", i,
             o->id, m->woken[i] ? " (woken)" : "");
    long long v = tm_int(tm_call(&m->w, "wait", i, o->id, "q", NULL, 0));
    TM_FAIL_IF(v != 1, "reply %lld", v);
    int queued = 0;
    for (int j = 0; j < m->w.nq; j++)
        queued |= m->w.q[j] == i;
    if (!queued)
        m->w.q[m->w.nq++] = i; /* (a retry after a signal queues it again: the C side then
                                  sends leave) */
    m->woken[i] = 0;
    o->st = TM_QUEUED;
}

static void step_qrenew(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "qrenew by owner %d, id %s%s", i, o->id,
             m->woken[i] ? " (woken)" : "");
    long long v = tm_int(tm_call(&m->w, "qrenew", i, o->id, "q", NULL, 0));
    long long want = m->woken[i] ? 0 : 1;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    if (want == 0)
        o->st = TM_IDLE, m->woken[i] = 0;
}

static void step_leave(model_t *m, int i)
{
    tm_owner_t *o = &m->w.o[i];
    snprintf(tm_what, sizeof tm_what, "leave by owner %d, id %s%s", i, o->id,
             m->woken[i] ? " (woken)" : "");
    long long v = tm_int(tm_call(&m->w, "leave", i, o->id, "q", NULL, 0));
    long long want = m->woken[i] ? 0 : 1;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    tm_q_remove(&m->w, i);
    o->st = TM_IDLE, m->woken[i] = 0;
}

/* Every Redis call made on this server so far, INFO and EVALSHA aside (INFO commandstats):
 * around one script call, the calls the script made. */
static long long server_calls(model_t *m)
{
    redisReply *r = tm_cmd(&m->w, "INFO commandstats");
    TM_FAIL_IF(r->type != REDIS_REPLY_STRING, "INFO reply");
    long long n = 0;
    for (const char *p = r->str; (p = strstr(p, "cmdstat_")) != NULL; p++)
        if (strncmp(p, "cmdstat_info:", 13) != 0 && strncmp(p, "cmdstat_evalsha:", 16) != 0 &&
            strstr(p, "calls="))
            n += atoll(strstr(p, "calls=") + 6);
    freeReplyObject(r);
    return n;
}

/* The calls a signal makes (docs/scripts.md): the head read; with someone queued the clock,
 * then per dead entry at the head its info read, its removal (ZREM, HDEL) and the next head
 * read, and for the first live one its info read, its removal and one PUBLISH. */
static long long signal_calls(model_t *m)
{
    redisReply *r = tm_cmd(&m->w, "ZRANGE %s 0 -1", m->w.key[K_Q]);
    long long dead = 0;
    const char *live = m->w.nq > 0 ? m->w.o[m->w.q[0]].id : NULL;
    for (size_t j = 0; j < r->elements && !(live && strcmp(r->element[j]->str, live) == 0); j++)
        dead++;
    size_t n = r->elements;
    freeReplyObject(r);
    if (n == 0)
        return 1;
    return 2 + 4 * dead + (live ? 4 : 0);
}

static void step_signal(model_t *m, int i)
{
    snprintf(tm_what, sizeof tm_what, "signal by owner %d (%d live waiting)", i, m->w.nq);
    long long calls = signal_calls(m), c0 = server_calls(m);
    long long v = tm_int(tm_call(&m->w, "signal", i, "op:0", "t", NULL, 0));
    long long made = server_calls(m) - c0;
    long long want = m->w.nq > 0;
    TM_FAIL_IF(v != want, "reply %lld, not %lld", v, want);
    TM_FAIL_IF(made != calls, "%lld Redis calls in the script, the model says %lld", made, calls);
    if (m->w.nq > 0) {
        int h = m->w.q[0];
        expect_msg(m, "rs:client:c%d %s s", h % CLIENTS, m->w.o[h].id);
        take(m, h);
    }
}

static void step_broadcast(model_t *m, int i)
{
    snprintf(tm_what, sizeof tm_what, "broadcast by owner %d (%d live waiting)", i, m->w.nq);
    long long v = tm_int(tm_call(&m->w, "broadcast", i, "op:0", "t", NULL, 0));
    TM_FAIL_IF(v != m->w.nq, "reply %lld, not %d", v, m->w.nq);
    /* one message per client, in the order of each client's first waiter */
    int done[CLIENTS] = {0};
    for (int j = 0; j < m->w.nq; j++) {
        int cl = m->w.q[j] % CLIENTS;
        if (done[cl])
            continue;
        done[cl] = 1;
        char payload[1024] = "*";
        for (int k = j; k < m->w.nq; k++)
            if (m->w.q[k] % CLIENTS == cl) {
                size_t used = strlen(payload);
                snprintf(payload + used, sizeof payload - used, " %s", m->w.o[m->w.q[k]].id);
            }
        expect_msg(m, "rs:client:c%d %s", cl, payload);
    }
    while (m->w.nq > 0)
        take(m, m->w.q[0]);
}

static void step_info(model_t *m)
{
    snprintf(tm_what, sizeof tm_what, "info (%d live waiting)", m->w.nq);
    redisReply *r = tm_call(&m->w, "info", 0, "op:0", "t", NULL, 0);
    TM_FAIL_IF(r->type != REDIS_REPLY_ARRAY || r->elements < 9, "info shape");
    /* dead entries may linger until a signal passes them: at least the live ones */
    TM_FAIL_IF(r->element[4]->integer < m->w.nq, "info says %lld waiting, the model %d",
               r->element[4]->integer, m->w.nq);
    freeReplyObject(r);
}

static void check(tm_world_t *w)
{
    model_t *m = (model_t *)w;
    tm_check_queue(w, w->key[K_Q]);
    /* every queued id has its entry info, and no info is left without a queue entry */
    redisReply *r = tm_cmd(w, "ZCARD %s", w->key[K_Q]);
    long long nq = r->integer;
    freeReplyObject(r);
    r = tm_cmd(w, "HLEN %s", w->key[K_QI]);
    TM_FAIL_IF(r->integer != nq, "%lld entry infos for %lld queued", r->integer, nq);
    freeReplyObject(r);
    if (nq > 0) {
        r = tm_cmd(w, "PTTL %s", w->key[K_Q]);
        TM_FAIL_IF(r->integer <= 0, "the queue has no TTL (%lld)", r->integer);
        freeReplyObject(r);
    }
    check_messages(m);
}

enum { K_WAIT, K_WAIT_AGAIN, K_QRENEW, K_LEAVE, K_SIGNAL, K_BROADCAST, K_INFO, K_DIES };

static int step(tm_world_t *w, int i, unsigned dice)
{
    model_t *m = (model_t *)w;
    tm_owner_t *o = &w->o[i];
    if (dice < 15)
        return step_signal(m, i), K_SIGNAL;
    if (dice < 20)
        return step_broadcast(m, i), K_BROADCAST;
    if (dice < 23)
        return step_info(m), K_INFO;
    if (o->st == TM_IDLE)
        return step_wait(m, i, 0), K_WAIT;
    /* queued in its own view (perhaps woken meanwhile) */
    if (dice > 94 && !m->woken[i]) {
        tm_kill_waiter(w, i, w->key[K_QI], " " TM_LEASE " x");
        m->woken[i] = 0;
        return K_DIES;
    }
    if (dice < 45)
        return step_qrenew(m, i), K_QRENEW;
    if (dice < 55)
        return step_wait(m, i, 1), K_WAIT_AGAIN;
    return step_leave(m, i), K_LEAVE;
}

static tm_world_t *start(const ts_server_t *s)
{
    static const char *const suffixes[] = {"", "qi"};
    model_t *m = calloc(1, sizeof *m);
    cr_assert_not_null(m);
    tm_world_init(&m->w, s, &rs_script_cond, "cond", suffixes, 2);
    if (sub)
        redisFree(sub); /* the previous seed's */
    sub = ts_connect(s);
    cr_assert_not_null(sub);
    redisReply *r = redisCommand(sub, "PSUBSCRIBE rs:client:*");
    cr_assert_not_null(r);
    freeReplyObject(r);
    return &m->w;
}

static void close_sub(void)
{
    if (sub)
        redisFree(sub);
    sub = NULL;
}

Test(model, cond_script_against_model, .timeout = 120, .fini = close_sub)
{
    static const tm_model_t model = {
        .kinds = {"wait", "wait again", "qrenew", "leave", "signal", "broadcast", "info",
                  "waiter died", NULL},
        .first_kind = 0, .start = start, .step = step, .check = check};
    tm_run(&model);
}
