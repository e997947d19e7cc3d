/*
 * test_mutex.h - static helpers shared by the test_mutex*.c files (moved from test_mutex.c):
 * new_mutex, zcard_q, wait_zcard and the locker thread.
 */
#ifndef TEST_MUTEX_H
#define TEST_MUTEX_H

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"

static inline rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}

static inline long long zcard_q(const ts_server_t *s, const char *name)
{
    return tu_zcard_q(s, "mutex", name);
}

static inline int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
{
    return tu_wait_zcard(s, "mutex", name, n, timeout_ms);
}

/* ---- a thread that locks ------------------------------------------------------------- */
typedef struct locker {
    rs_mutex_t *m;
    long hold_ms;        /* after locking, hold this long ... */
    int wait_release;    /* ... then, if set, wait until release is set before unlocking */
    atomic_int *order;   /* if set: a grant-order counter shared by several lockers */
    /* results */
    int rc;
    int unlock_rc;
    uint64_t fence;
    int pos;             /* value of *order taken at the grant */
    long long t_start, t_locked;
    char err[256];
    atomic_int locked;   /* lock returned */
    atomic_int release;
    atomic_int done;
    pthread_t th;
} locker_t;

static inline void *locker_main(void *arg)
{
    locker_t *L = arg;
    L->t_start = tu_mono_ms();
    L->rc = rs_mutex_lock(L->m);
    L->t_locked = tu_mono_ms();
    if (L->rc == 0) {
        L->fence = rs_mutex_fence(L->m);
        if (L->order)
            L->pos = atomic_fetch_add(L->order, 1);
    } else {
        snprintf(L->err, sizeof L->err, "%s", rs_client_lasterror(NULL));
    }
    atomic_store(&L->locked, 1);
    if (L->rc == 0) {
        if (L->hold_ms > 0)
            tu_sleep_ms(L->hold_ms);
        while (L->wait_release && !atomic_load(&L->release))
            tu_sleep_ms(5);
        L->unlock_rc = rs_mutex_unlock(L->m);
    }
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

/* ---- a thread that closes a client (close_while_unreachable, close_while_on_lost_runs) -- */
typedef struct closer {
    rs_client_t *c;
    atomic_int done;
    pthread_t th;
} closer_t;

static inline void *closer_main(void *arg)
{
    closer_t *k = arg;
    rs_client_close(k->c);
    atomic_store(&k->done, 1);
    return NULL;
}

#endif
