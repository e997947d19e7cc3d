/*
 * test_sem.h - static helpers shared by the test_sem*.c files (moved from test_sem.c):
 * new_sem, value_of, zcard_q, wait_zcard, the waiter thread and one call in another thread.
 */
#ifndef TEST_SEM_H
#define TEST_SEM_H

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static inline rs_sem_t *new_sem(rs_client_t *c, const char *name, unsigned permits)
{
    rs_sem_t *s = NULL;
    int rc = rs_sem_init(&s, c, name, permits);
    cr_assert_eq(rc, 0, "rs_sem_init(%s, %u): %d %s", name, permits, rc, rs_client_lasterror(c));
    cr_assert_not_null(s);
    return s;
}

static inline int value_of(rs_sem_t *s)
{
    int v = -99;
    int rc = rs_sem_getvalue(s, &v);
    cr_assert_eq(rc, 0, "rs_sem_getvalue: %d %s", rc, rs_client_lasterror(NULL));
    return v;
}

static inline long long zcard_q(const ts_server_t *s, const char *name)
{
    return tu_zcard_q(s, "sem", name);
}

static inline int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
{
    return tu_wait_zcard(s, "sem", name, n, timeout_ms);
}

/* ---- a thread that waits for permits ------------------------------------------------ */
typedef struct waiter {
    rs_sem_t *s;
    unsigned n;          /* permits wanted (1: rs_sem_wait / rs_sem_timedwait) */
    long deadline_ms;    /* > 0: relative deadline; 0: none */
    long hold_ms;        /* after the grant, hold this long ... */
    int wait_release;    /* ... then, if set, wait until release is set before posting */
    atomic_int *order;   /* if set: a grant-order counter shared by several waiters */
    /* results */
    int rc, post_rc, pos;
    uint64_t fence;
    long long t_start, t_got;
    char err[256];
    atomic_int got;      /* the wait returned */
    atomic_int release;
    atomic_int done;
    pthread_t th;
} waiter_t;

static inline void *waiter_main(void *arg)
{
    waiter_t *W = arg;
    W->t_start = tu_mono_ms();
    struct timespec dl = tu_abs_in(W->deadline_ms);
    if (W->n == 1)
        W->rc = W->deadline_ms > 0 ? rs_sem_timedwait(W->s, &dl) : rs_sem_wait(W->s);
    else
        W->rc = rs_sem_timedwait_n(W->s, W->n, W->deadline_ms > 0 ? &dl : NULL);
    W->t_got = tu_mono_ms();
    if (W->rc == 0) {
        W->fence = rs_sem_fence(W->s);
        if (W->order)
            W->pos = atomic_fetch_add(W->order, 1);
    } else {
        snprintf(W->err, sizeof W->err, "%s", rs_client_lasterror(NULL));
    }
    atomic_store(&W->got, 1);
    if (W->rc == 0) {
        if (W->hold_ms > 0)
            tu_sleep_ms(W->hold_ms);
        while (W->wait_release && !atomic_load(&W->release))
            tu_sleep_ms(5);
        W->post_rc = rs_sem_post_n(W->s, W->n);
    }
    atomic_store(&W->done, 1);
    return NULL;
}

static inline void waiter_start(waiter_t *W)
{
    tu_thread_start(&W->th, waiter_main, W);
}

/* Joins W if it finishes within timeout_ms; 1 if joined. */
static inline int waiter_join(waiter_t *W, long timeout_ms)
{
    return tu_thread_join(W->th, &W->done, timeout_ms);
}

/* ---- one call in another thread ----------------------------------------------------- */
typedef struct call1 {
    rs_sem_t *s;
    int op; /* 0 trywait, 1 post */
    int rc;
} call1_t;

static inline void *call1_main(void *arg)
{
    call1_t *k = arg;
    k->rc = k->op == 0 ? rs_sem_trywait(k->s) : rs_sem_post(k->s);
    return NULL;
}

static inline int in_thread(rs_sem_t *s, int op)
{
    call1_t k = {.s = s, .op = op, .rc = -1};
    tu_thread_run(call1_main, &k);
    return k.rc;
}

#endif
