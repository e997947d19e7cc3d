/*
 * test_multilock.h - static helpers shared by the test_multilock*.c files (moved from
 * test_multilock.c): clients, mutexes and multilocks, is_free, the queue of a part and
 * a thread that runs one multilock call.
 */
#ifndef TEST_MULTILOCK_H
#define TEST_MULTILOCK_H

#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "redis_server.h"
#include "test_assert.h"
#include "test_util.h"
#include "redisync.h"

/* ------------------------------------------------------------------------------------- */
/* Helpers                                                                                */

static inline void on_lost_cb(const char *kind, const char *name, void *arg)
{
    (void)kind;
    (void)name;
    atomic_fetch_add((atomic_int *)arg, 1);
}

static inline rs_client_t *open_client_ex(const ts_server_t *s, long lease_ms, atomic_int *lost)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s->url;
    cfg.lease_ms = lease_ms;
    cfg.timeout_ms = 5000;
    if (lost) {
        cfg.on_lost = on_lost_cb;
        cfg.on_lost_arg = lost;
    }
    rs_client_t *c = NULL;
    if (rs_client_open(&c, &cfg) != 0)
        return NULL;
    return c;
}

static inline rs_client_t *open_client(const ts_server_t *s, long lease_ms, atomic_int *lost)
{
    rs_client_t *c = open_client_ex(s, lease_ms, lost);
    cr_assert_not_null(c, "rs_client_open: %s", rs_client_lasterror(NULL));
    return c;
}

static inline rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}

static inline rs_multilock_t *new_ml(rs_mutex_t *const *parts, size_t n)
{
    rs_multilock_t *ml = NULL;
    int rc = rs_multilock_init(&ml, parts, n);
    cr_assert_eq(rc, 0, "rs_multilock_init: %d %s", rc, rs_client_lasterror(NULL));
    cr_assert_not_null(ml);
    return ml;
}

/* 1 if m (a handle of another client) can be taken now; it is released again at once. */
static inline int is_free(rs_mutex_t *m)
{
    int rc = rs_mutex_trylock(m);
    if (rc == 0) {
        cr_expect_eq(rs_mutex_unlock(m), 0);
        return 1;
    }
    return 0;
}

static inline long long zcard_q(const ts_server_t *s, const char *name)
{
    return ts_cmd_int(s, "ZCARD rs:{%s}:mutex:q", name);
}

static inline int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        if (zcard_q(s, name) == n)
            return 1;
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(10);
    }
}

/* A thread that runs one multilock call (0 lock, 1 trylock, 2 timedlock at deadline,
 * 3 unlock), records what it saw, then (after a lock) waits for `release` and unlocks. */
typedef struct mlcall {
    rs_multilock_t *ml;
    rs_mutex_t *const *parts;
    size_t n;
    int op;
    struct timespec deadline;
    int rc, unlock_rc;
    uint64_t fence[8];
    long long t_done;
    atomic_int done, release, finished;
    pthread_t th;
} mlcall_t;

static inline void *mlcall_main(void *arg)
{
    mlcall_t *k = arg;
    switch (k->op) {
    case 0: k->rc = rs_multilock_lock(k->ml); break;
    case 1: k->rc = rs_multilock_trylock(k->ml); break;
    case 2: k->rc = rs_multilock_timedlock(k->ml, &k->deadline); break;
    default: k->rc = rs_multilock_unlock(k->ml); break;
    }
    k->t_done = tu_mono_ms();
    for (size_t i = 0; i < k->n && i < 8; i++)
        k->fence[i] = rs_mutex_fence(k->parts[i]);
    atomic_store(&k->done, 1);
    if (k->op <= 2 && k->rc == 0) {
        while (!atomic_load(&k->release))
            tu_sleep_ms(5);
        k->unlock_rc = rs_multilock_unlock(k->ml);
    }
    atomic_store(&k->finished, 1);
    return NULL;
}

static inline void mlcall_start(mlcall_t *k)
{
    cr_assert_eq(pthread_create(&k->th, NULL, mlcall_main, k), 0);
}

static inline int mlcall_join(mlcall_t *k, long timeout_ms)
{
    atomic_store(&k->release, 1);
    if (!tu_wait_atomic(&k->finished, 1, timeout_ms))
        return 0;
    pthread_join(k->th, NULL);
    return 1;
}

#endif
