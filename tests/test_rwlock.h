/*
 * test_rwlock.h - static helpers shared by the test_rwlock*.c files (moved from
 * test_rwlock.c): new_rw, zcard_q, wait_zcard, wait_key_at_least, the exclusion checker,
 * the locker thread, one call from another thread and the read counts in Redis.
 */
#ifndef TEST_RWLOCK_H
#define TEST_RWLOCK_H

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static inline rs_rwlock_t *new_rw(rs_client_t *c, const char *name)
{
    rs_rwlock_t *rw = NULL;
    int rc = rs_rwlock_init(&rw, c, name);
    cr_assert_eq(rc, 0, "rs_rwlock_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return rw;
}

static inline long long zcard_q(const ts_server_t *s, const char *name)
{
    return tu_zcard_q(s, "rwlock", name);
}

static inline int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
{
    return tu_wait_zcard(s, "rwlock", name, n, timeout_ms);
}

/* Polls until GET key on s is at least want; 1 if so within timeout_ms. */
static inline int wait_key_at_least(redisContext *k, const char *key, long long want,
                                    long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        redisReply *r = redisCommand(k, "GET %s", key);
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        if (r)
            freeReplyObject(r);
        else
            return 0;
        if (v >= want)
            return 1;
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(5);
    }
}

/* ---- the exclusion checker ------------------------------------------------------------ */
/* KEYS: own counter, other mode's counter, violations, own maximum. ARGV[1]: the most of
 * this mode allowed at once (1 for writers). */
static const char CHK_ENTER[] =
    "local n = redis.call('INCR', KEYS[1]) "
    "local o = tonumber(redis.call('GET', KEYS[2]) or '0') "
    "if o > 0 or n > tonumber(ARGV[1]) then redis.call('INCR', KEYS[3]) end "
    "if n > tonumber(redis.call('GET', KEYS[4]) or '0') then redis.call('SET', KEYS[4], n) end "
    "return n";

/* Enters a section of mode write on the checker; 0, or -1 on a connection error. */
static inline int chk_enter(redisContext *k, int write)
{
    redisReply *r = write ? redisCommand(k, "EVAL %s 4 chk:w chk:r chk:viol chk:maxw 1", CHK_ENTER)
                          : redisCommand(k, "EVAL %s 4 chk:r chk:w chk:viol chk:maxr 1000000",
                                         CHK_ENTER);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static inline int chk_exit(redisContext *k, int write)
{
    redisReply *r = redisCommand(k, "DECR %s", write ? "chk:w" : "chk:r");
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static inline long long chk_get(const ts_server_t *s, const char *key)
{
    long long v = ts_cmd_int(s, "GET %s", key);
    return v < 0 ? 0 : v;
}

/* ---- a thread that takes the lock once ------------------------------------------------ */
typedef struct locker {
    rs_rwlock_t *rw;
    int write;           /* wrlock, else rdlock */
    long timeout_ms;     /* > 0: the timed variant with a deadline this far ahead */
    long hold_ms;        /* after locking, hold this long ... */
    int wait_release;    /* ... then, if set, wait until release is set before unlocking */
    const ts_server_t *chk; /* if set: record the section on the checker */
    /* results */
    int rc, unlock_rc;
    uint64_t fence;
    long long t_start, t_locked, t_unlocked;
    char err[256];
    atomic_int locked;   /* the lock call returned */
    atomic_int release;
    atomic_int done;
    pthread_t th;
} locker_t;

static inline void *locker_main(void *arg)
{
    locker_t *L = arg;
    redisContext *k = L->chk ? ts_connect(L->chk) : NULL;
    L->t_start = tu_mono_ms();
    if (L->timeout_ms > 0) {
        struct timespec dl = tu_abs_in(L->timeout_ms);
        L->rc = L->write ? rs_rwlock_timedwrlock(L->rw, &dl) : rs_rwlock_timedrdlock(L->rw, &dl);
    } else {
        L->rc = L->write ? rs_rwlock_wrlock(L->rw) : rs_rwlock_rdlock(L->rw);
    }
    L->t_locked = tu_mono_ms();
    if (L->rc == 0)
        L->fence = rs_rwlock_fence(L->rw);
    else
        snprintf(L->err, sizeof L->err, "%s", rs_client_lasterror(NULL));
    if (L->rc == 0 && k)
        chk_enter(k, L->write);
    atomic_store(&L->locked, 1);
    if (L->rc == 0) {
        if (L->hold_ms > 0)
            tu_sleep_ms(L->hold_ms);
        while (L->wait_release && !atomic_load(&L->release))
            tu_sleep_ms(5);
        if (k)
            chk_exit(k, L->write);
        L->t_unlocked = tu_mono_ms();
        L->unlock_rc = rs_rwlock_unlock(L->rw);
    }
    if (k)
        redisFree(k);
    atomic_store(&L->done, 1);
    return NULL;
}

static inline void locker_start(locker_t *L)
{
    tu_thread_start(&L->th, locker_main, L);
}

/* Joins L if it finishes within timeout_ms; 1 if joined. */
static inline int locker_join(locker_t *L, long timeout_ms)
{
    return tu_thread_join(L->th, &L->done, timeout_ms);
}

/* ---- one call from another thread ----------------------------------------------------- */
enum { OP_TRYRD, OP_TRYWR, OP_UNLOCK };
typedef struct call1 {
    rs_rwlock_t *rw;
    int op;
    int rc;
} call1_t;

static inline void *call1_main(void *arg)
{
    call1_t *k = arg;
    k->rc = k->op == OP_TRYRD   ? rs_rwlock_tryrdlock(k->rw)
            : k->op == OP_TRYWR ? rs_rwlock_trywrlock(k->rw)
                                : rs_rwlock_unlock(k->rw);
    /* a successful try is undone at once, by the thread that holds it */
    if (k->rc == 0 && k->op != OP_UNLOCK)
        rs_rwlock_unlock(k->rw);
    return NULL;
}

static inline int in_thread(rs_rwlock_t *rw, int op)
{
    call1_t k = {.rw = rw, .op = op, .rc = -1};
    tu_thread_run(call1_main, &k);
    return k.rc;
}

/* The counts of the read holds in Redis ("ACQID COUNT FENCE LASTCALL" per owner), summed. */
static inline long long redis_read_counts(const ts_server_t *s, const char *name,
                                          long long *holders)
{
    redisContext *k = ts_connect(s);
    cr_assert_not_null(k);
    redisReply *r = redisCommand(k, "HVALS rs:{%s}:rwlock:ri", name);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    long long sum = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const char *sp = strchr(r->element[i]->str, ' ');
        sum += sp ? atoll(sp + 1) : 0;
    }
    if (holders)
        *holders = (long long)r->elements;
    freeReplyObject(r);
    redisFree(k);
    return sum;
}

#endif
