/*
 * test_latch.h - what the test_latch*.c files share (moved from test_latch.c): the latch's
 * test hook, the small helpers (real_ms, new_latch, count_of, numsub, wait_numsub,
 * publishes), a thread that waits (waiter_t) and a forked waiter (child_waiter).
 *
 * Timing bounds are deliberately generous: the suite runs as -j6 on small, noisy machines.
 */
#ifndef TEST_LATCH_H
#define TEST_LATCH_H

#include <criterion/criterion.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "scripts.h"
#include "test_assert.h"

/* primitives/latch/latch.c: the keys' TTL (a test hook; hidden in the shared library) */
extern long rs__latch_ttl_ms;

#define DAY_MS 86400000LL

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static inline long long real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline rs_latch_t *new_latch(rs_client_t *c, const char *name, unsigned count)
{
    rs_latch_t *l = NULL;
    int rc = rs_latch_init(&l, c, name, count);
    cr_assert_eq(rc, 0, "rs_latch_init(%s, %u): %d %s", name, count, rc, rs_client_lasterror(c));
    cr_assert_not_null(l);
    return l;
}

/* The count through the API; -1 - error on failure. */
static inline long long count_of(rs_latch_t *l)
{
    unsigned n = 12345;
    int rc = rs_latch_getcount(l, &n);
    return rc ? -1 - rc : (long long)n;
}

/* Subscribers of channel (PUBSUB NUMSUB); -1 on error. */
static inline long long numsub(const ts_server_t *s, const char *channel)
{
    redisContext *k = ts_connect(s);
    if (!k)
        return -1;
    redisReply *r = redisCommand(k, "PUBSUB NUMSUB %s", channel);
    long long n = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_INTEGER)
        n = r->element[1]->integer;
    if (r)
        freeReplyObject(r);
    redisFree(k);
    return n;
}

/* Polls until channel has n subscribers; 1 if it got there within timeout_ms. */
static inline int wait_numsub(const ts_server_t *s, const char *channel, long long n, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        if (numsub(s, channel) == n)
            return 1;
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(10);
    }
}

static inline long long publishes(const ts_server_t *s)
{
    long long n = ts_info_ll(s, "commandstats", "cmdstat_publish", "calls");
    return n < 0 ? 0 : n; /* absent until the first PUBLISH */
}

/* ---- a thread that waits ------------------------------------------------------------- */
typedef struct waiter {
    rs_latch_t *l;
    long dl_ms;          /* 0: rs_latch_wait; else rs_latch_timedwait, deadline now + dl_ms */
    int rc;
    long long t_ret;     /* CLOCK_REALTIME ms when the call returned */
    char err[256];
    atomic_int done;
    pthread_t th;
} waiter_t;

static inline void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    if (w->dl_ms) {
        struct timespec dl = tu_abs_in(w->dl_ms);
        w->rc = rs_latch_timedwait(w->l, &dl);
    } else {
        w->rc = rs_latch_wait(w->l);
    }
    w->t_ret = real_ms();
    if (w->rc)
        snprintf(w->err, sizeof w->err, "%s", rs_client_lasterror(NULL));
    atomic_store(&w->done, 1);
    return NULL;
}

static inline void waiter_start(waiter_t *w, rs_latch_t *l, long dl_ms)
{
    memset(w, 0, sizeof *w);
    w->l = l;
    w->dl_ms = dl_ms;
    w->rc = -1;
    tu_thread_start(&w->th, waiter_main, w);
}

/* A forked waiter: attaches to the latch (count 0), reports "ready", waits, and pushes its
 * return time (CLOCK_REALTIME ms) to t:ret, or its error to t:err. */
typedef struct child_arg {
    const ts_server_t *s;
    const char *name;
} child_arg_t;

static inline int child_waiter(void *arg)
{
    child_arg_t *a = arg;
    redisContext *k = ts_connect(a->s);
    if (!k)
        return 2;
    rs_client_t *c = tu_open_client_ex(a->s, 2000, 2000, NULL);
    if (!c)
        return 3;
    rs_latch_t *l = NULL;
    if (rs_latch_init(&l, c, a->name, 0) != 0)
        return 4;
    freeReplyObject(redisCommand(k, "RPUSH t:ready %d", (int)getpid()));
    int rc = rs_latch_wait(l);
    long long t = real_ms();
    if (rc) {
        freeReplyObject(redisCommand(k, "RPUSH t:err %s", rs_client_lasterror(c)));
        return 5;
    }
    freeReplyObject(redisCommand(k, "RPUSH t:ret %lld", t));
    rs_latch_destroy(l);
    rs_client_close(c);
    redisFree(k);
    return 0;
}

#endif
