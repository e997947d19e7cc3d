/*
 * test_script_types.c - "type checks before the first write" on the contended paths of the
 * read-write lock's and the semaphore's scripts, which TYPE only the keys their own reads
 * have not checked (issue 15: the six TYPE calls per call are gone from those paths), and of
 * the mutex's, whose queued acquire no longer reads the fencing counter (its busy answer
 * shows the hold's token) and whose renewal-free paths were reordered (issue 15).
 *
 * For each key of a name and each contended call (a queued acquire of either kind, a release
 * that hands over to a queued waiter, a waiter's cancel): the name is set up with a holder
 * and a queued waiter, that one key is replaced by a list (a type none of the keys has), and
 * the call must fail with WRONGTYPE having written nothing: every key of the name, its type,
 * its value (DUMP) and its TTL are the same after the call as before. The exceptions are the
 * calls that neither read nor write a key (prim_t.untouched): the mutex's queued acquire
 * answers with the holder's token from the lock's hash and never touches the fencing counter;
 * the rwlock's queued acquire behind another owner's live write hold never touches the read
 * holds' records (rwlock.lua, "behind").
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "redis_server.h"
#include "scripts.h"
#include "test_assert.h"

typedef struct prim {
    const rs_script_t *script;
    const char *kind;      /* the key's middle part: rs:{NAME}:KIND */
    const char *sfx[6];
    const char *extra[2];  /* ARGV[9] and ARGV[10] of the calls (rwlock: the mode) */
    int nkeys;             /* how many of sfx (0: all six) */
    unsigned untouched[6]; /* per key: bit c set when call c neither reads nor writes it */
} prim_t;

/* held by a writer, the queued acqs (calls 0 and 1) neither read nor write the read holds'
 * records (key 5): behind another owner's live write hold nothing can be granted or refused */
static const prim_t RWLOCK_W = {&rs_script_rwlock, "rwlock", {"", ":fence", ":q", ":qi", ":rd", ":ri"},
                                {"w", "-"}, 6, {0, 0, 0, 0, 0, 3u}};
static const prim_t RWLOCK_R = {&rs_script_rwlock, "rwlock", {"", ":fence", ":q", ":qi", ":rd", ":ri"},
                                {"r", "-"}, 6, {0}};
static const prim_t SEM = {&rs_script_semaphore, "sem",
                           {"", ":holders", ":hi", ":fence", ":q", ":qi"}, {"1", "1"}, 6, {0}};
/* the queued acq (calls 0 and 1) does not touch the mutex's fencing counter (key 1) */
static const prim_t MUTEX = {&rs_script_mutex, "mutex", {"", ":fence", ":q", ":qi"}, {"", ""}, 4,
                             {0, 3u}};

/* EVAL of p's script on name's keys: op by owner tok with acquisition id acq. */
static redisReply *ev(redisContext *k, const prim_t *p, const char *name, const char *op,
                      const char *tok, const char *acq, const char *qmode)
{
    char keys[6][96];
    const char *argv[20];
    size_t lens[20];
    int n = 0, nkeys = p->nkeys ? p->nkeys : 6;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)p->script->body;
    argv[n++] = nkeys == 4 ? "4" : "6";
    for (int i = 0; i < nkeys; i++) {
        snprintf(keys[i], sizeof keys[i], "rs:{%s}:%s%s", name, p->kind, p->sfx[i]);
        argv[n++] = keys[i];
    }
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "30000";      /* lease */
    argv[n++] = "rs:client:"; /* channel prefix */
    argv[n++] = qmode;
    argv[n++] = "100";        /* max waiters */
    argv[n++] = "30000";      /* queue entry lease */
    argv[n++] = p->extra[0];
    argv[n++] = p->extra[1];
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? p->script->len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    return r;
}

/* The call must succeed with an array whose first element is want (1 granted, 0 queued). */
static void ev_acq(redisContext *k, const prim_t *p, const char *name, const char *tok,
                   const char *acq, long long want)
{
    redisReply *r = ev(k, p, name, "acq", tok, acq, "q");
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                  r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == want,
              "acq %s: reply type %d%s%s", acq, r->type, r->type == REDIS_REPLY_ERROR ? ": " : "",
              r->type == REDIS_REPLY_ERROR ? r->str : "");
    freeReplyObject(r);
}

/* Every key of the name: its name, type, value and TTL, as one string to compare. */
static void snapshot(redisContext *k, const char *name, char *out, size_t len)
{
    redisReply *r = redisCommand(
        k, "EVAL %s 0 %s",
        "local out = {} "
        "for _, key in ipairs(redis.call('KEYS', 'rs:{' .. ARGV[1] .. '}:*')) do "
        "  out[#out + 1] = key .. '|' .. redis.call('TYPE', key).ok .. '|' .. "
        "    redis.sha1hex(redis.call('DUMP', key)) .. '|' .. "
        "    (redis.call('PTTL', key) > 0 and 'ttl' or tostring(redis.call('PTTL', key))) "
        "end "
        "table.sort(out) return table.concat(out, ' ')",
        name);
    cr_assert(r && r->type == REDIS_REPLY_STRING, "snapshot");
    cr_assert_lt(r->len, len, "snapshot too long");
    snprintf(out, len, "%s", r->str);
    freeReplyObject(r);
}

static void del_and_push(redisContext *k, const char *key)
{
    redisReply *r = redisCommand(k, "DEL %s", key);
    cr_assert_not_null(r);
    freeReplyObject(r);
    r = redisCommand(k, "RPUSH %s foreign", key);
    cr_assert(r && r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
}

enum { CALL_ACQ_H, CALL_ACQ_W, CALL_REL, CALL_CANCEL, NCALLS };
static const char *const CALL_NAME[NCALLS] = {"queued acq (the holder's kind)", "queued acq (the waiter's kind)",
                                              "rel handing over", "cancel"};

/* For every key and call: a holder h (kind `held`) and a queued waiter w (kind `waits`),
 * key i replaced by a list, then the call: WRONGTYPE, nothing written. */
static void check_all(const prim_t *held, const prim_t *waits)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    int cases = 0, want = 0, nkeys = held->nkeys ? held->nkeys : 6;
    for (int key = 0; key < nkeys; key++)
        for (int call = 0; call < NCALLS; call++) {
            if (held->untouched[key] & (1u << call))
                continue;
            want++;
            char name[32], kname[96], before[8192], after[8192];
            snprintf(name, sizeof name, "t%d.%d", key, call);
            ev_acq(k, held, name, "tokH", "ph:1.s", 1);
            ev_acq(k, waits, name, "tokW", "pw:1.s", 0);
            snprintf(kname, sizeof kname, "rs:{%s}:%s%s", name, held->kind, held->sfx[key]);
            del_and_push(k, kname);
            snapshot(k, name, before, sizeof before);
            redisReply *r;
            switch (call) {
            case CALL_ACQ_H:
                r = ev(k, held, name, "acq", "tokT", "pt:1.s", "q");
                break;
            case CALL_ACQ_W:
                r = ev(k, waits, name, "acq", "tokT", "pt:1.s", "q");
                break;
            case CALL_REL:
                r = ev(k, held, name, "rel", "tokH", "ph:1.s", "q");
                break;
            default:
                r = ev(k, waits, name, "cancel", "tokW", "pw:1.s", "q");
                break;
            }
            cr_expect(r->type == REDIS_REPLY_ERROR && strstr(r->str, "WRONGTYPE"),
                      "%s %s with %s a list: reply type %d %s", held->kind, CALL_NAME[call],
                      kname, r->type, r->type == REDIS_REPLY_ERROR ? r->str : "(not an error)");
            freeReplyObject(r);
            snapshot(k, name, after, sizeof after);
            cr_expect_str_eq(after, before, "%s %s with %s a list wrote something",
                             held->kind, CALL_NAME[call], kname);
            cases++;
        }
    cr_expect_eq(cases, want);
    cr_expect_geq(cases, nkeys * NCALLS - 2);
    redisFree(k);
    ts_server_stop(&s);
}

Test(script_types, rwlock_writer_waits_behind_writer)
{
    check_all(&RWLOCK_W, &RWLOCK_W);
}

Test(script_types, rwlock_reader_waits_behind_writer)
{
    check_all(&RWLOCK_W, &RWLOCK_R);
}

Test(script_types, rwlock_writer_waits_behind_reader)
{
    check_all(&RWLOCK_R, &RWLOCK_W);
}

Test(script_types, sem_contended_paths)
{
    check_all(&SEM, &SEM);
}

Test(script_types, mutex_contended_paths)
{
    check_all(&MUTEX, &MUTEX);
}
