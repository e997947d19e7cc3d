/*
 * test_rmutex.c - Criterion tests of the recursive distributed mutex (rs_rmutex_*), from
 * the public API down to the enter/leave operations of its Lua script (the mutex's script,
 * run under the kind "rmutex"; called directly with EVAL in rmutex/script_enter_idempotent).
 *
 * Every test starts its own redis-server on a free port and stops it. Cross-process tests
 * fork workers; each child opens its own client after fork() and reports through its exit
 * status (and pipes). Criterion assertions are only made in the test's main thread; helper
 * threads and children record results for it.
 *
 * Timing bounds are deliberately generous: the suite runs as -j6 on small, noisy machines.
 */
#include <criterion/criterion.h>

#include <errno.h>
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

TestSuite(rmutex, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static rs_rmutex_t *new_rmutex(rs_client_t *c, const char *name)
{
    rs_rmutex_t *m = NULL;
    int rc = rs_rmutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_rmutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    cr_assert_not_null(m);
    return m;
}

static rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}

/* HGET rs:{name}:rmutex n as an integer; -1 when absent. */
static long long hold_count(const ts_server_t *s, const char *name)
{
    return ts_cmd_int(s, "HGET rs:{%s}:rmutex n", name);
}

/* Whether rs:{name}:rmutex has an owner field. */
static int has_owner(const ts_server_t *s, const char *name)
{
    return ts_cmd_int(s, "HEXISTS rs:{%s}:rmutex o", name) == 1;
}

static long long zcard_rq(const ts_server_t *s, const char *name)
{
    return tu_zcard_q(s, "rmutex", name);
}

static int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
{
    return tu_wait_zcard(s, "rmutex", name, n, timeout_ms);
}

/* ---- a thread that runs one call ---------------------------------------------------- */
enum { OP_TRYLOCK, OP_UNLOCK, OP_LOCK, OP_DESTROY };

typedef struct call1 {
    rs_rmutex_t *m;
    int op;
    int rc;
} call1_t;

static void *call1_main(void *arg)
{
    call1_t *k = arg;
    switch (k->op) {
    case OP_TRYLOCK: k->rc = rs_rmutex_trylock(k->m); break;
    case OP_UNLOCK: k->rc = rs_rmutex_unlock(k->m); break;
    case OP_LOCK: k->rc = rs_rmutex_lock(k->m); break;
    default: k->rc = rs_rmutex_destroy(k->m); break;
    }
    return NULL;
}

/* Runs one call in a fresh thread (another owner than the test's thread). */
static int in_thread(rs_rmutex_t *m, int op)
{
    call1_t k = {.m = m, .op = op, .rc = -1};
    tu_thread_run(call1_main, &k);
    return k.rc;
}

/* ------------------------------------------------------------------------------------- */
/* 1. Re-entry: counts in Redis, exclusion, fencing, EPERM                                */

Test(rmutex, reentry_counts, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "rc");
    rs_rmutex_t *m2 = new_rmutex(c2, "rc");

    cr_expect_eq(rs_rmutex_fence(m), 0, "fence without a hold");
    cr_expect_eq(rs_rmutex_remaining(m), 0, "remaining without a hold");
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "unlock without a hold");

    /* 1: lock */
    int rc = rs_rmutex_lock(m);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    uint64_t f = rs_rmutex_fence(m);
    cr_expect_neq(f, 0, "fence while held");
    long rem = rs_rmutex_remaining(m);
    cr_expect(rem > 0 && rem <= 2000, "remaining while held: %ld", rem);
    cr_expect_eq(hold_count(&s, "rc"), 1, "count after lock");
    cr_expect(has_owner(&s, "rc"));
    cr_expect_eq(rs_rmutex_trylock(m2), EBUSY, "another client's trylock at count 1");

    /* 2: trylock by the holder re-enters */
    rc = rs_rmutex_trylock(m);
    cr_assert_eq(rc, 0, "trylock by the holder: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_fence(m), f, "fence changed on re-entry (trylock)");
    cr_expect_eq(hold_count(&s, "rc"), 2, "count after trylock re-entry");
    cr_expect_eq(rs_rmutex_trylock(m2), EBUSY, "another client's trylock at count 2");

    /* 3: timedlock by the holder re-enters */
    struct timespec dl = tu_abs_in(2000);
    rc = rs_rmutex_timedlock(m, &dl);
    cr_assert_eq(rc, 0, "timedlock by the holder: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_fence(m), f, "fence changed on re-entry (timedlock)");
    cr_expect_eq(hold_count(&s, "rc"), 3, "count after timedlock re-entry");
    cr_expect_eq(rs_rmutex_trylock(m2), EBUSY, "another client's trylock at count 3");

    /* others: another thread of the same client is another owner */
    cr_expect_eq(in_thread(m, OP_TRYLOCK), EBUSY, "trylock by another thread of the client");
    cr_expect_eq(in_thread(m, OP_UNLOCK), EPERM, "unlock by another thread");
    cr_expect_eq(rs_rmutex_unlock(m2), EPERM, "unlock by another client");
    cr_expect_eq(rs_rmutex_destroy(m), EBUSY, "destroy while held");
    cr_expect_eq(hold_count(&s, "rc"), 3, "the refused calls changed the count");
    cr_expect_eq(rs_rmutex_fence(m), f);

    /* unlock 3 -> 2 -> 1 */
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "unlock #1: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(hold_count(&s, "rc"), 2, "count after unlock #1");
    cr_expect_eq(rs_rmutex_fence(m), f);
    cr_expect_eq(rs_rmutex_trylock(m2), EBUSY, "another client's trylock after unlock #1");
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "unlock #2: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(hold_count(&s, "rc"), 1, "count after unlock #2");
    cr_expect_eq(rs_rmutex_fence(m), f);
    cr_expect_gt(rs_rmutex_remaining(m), 0);
    cr_expect_eq(rs_rmutex_trylock(m2), EBUSY, "another client's trylock after unlock #2");
    cr_expect_eq(in_thread(m, OP_TRYLOCK), EBUSY, "another thread's trylock after unlock #2");

    /* the last unlock releases */
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "unlock #3: %d %s", rc, rs_client_lasterror(c));
    cr_expect(!has_owner(&s, "rc"), "the key still has an owner after the last unlock");
    cr_expect_eq(hold_count(&s, "rc"), -1, "a count is left after the last unlock");
    cr_expect_eq(rs_rmutex_fence(m), 0, "fence after the last unlock");
    cr_expect_eq(rs_rmutex_remaining(m), 0, "remaining after the last unlock");
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "unlock beyond the count");
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "unlock beyond the count, again");

    /* another client takes it now, with a larger token */
    rc = rs_rmutex_trylock(m2);
    cr_expect_eq(rc, 0, "another client's trylock after the last unlock: %d %s", rc,
                 rs_client_lasterror(c2));
    uint64_t f2 = rs_rmutex_fence(m2);
    cr_expect_gt(f2, f, "the later holder's token %llu is not above %llu",
                 (unsigned long long)f2, (unsigned long long)f);
    cr_expect_eq(hold_count(&s, "rc"), 1, "the new holder's count");
    cr_expect_eq(rs_rmutex_trylock(m), EBUSY, "the former holder's trylock");
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "the former holder's unlock");
    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    cr_expect_eq(rs_rmutex_unlock(m2), EPERM);

    /* and the first client again: larger still */
    cr_expect_eq(rs_rmutex_lock(m), 0);
    cr_expect_gt(rs_rmutex_fence(m), f2, "a third holder's token");
    cr_expect_eq(rs_rmutex_unlock(m), 0);

    cr_expect_eq(rs_rmutex_destroy(m), 0, "destroy after release");
    cr_expect_eq(rs_rmutex_destroy(m2), 0);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 2. A waiter of another client blocks until the very last unlock                       */

typedef struct waiter {
    rs_rmutex_t *m;
    int rc, unlock_rc;
    uint64_t fence;
    atomic_int locked, release, done;
    pthread_t th;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    w->rc = rs_rmutex_lock(w->m);
    if (w->rc == 0)
        w->fence = rs_rmutex_fence(w->m);
    atomic_store(&w->locked, 1);
    if (w->rc == 0) {
        while (!atomic_load(&w->release))
            tu_sleep_ms(5);
        w->unlock_rc = rs_rmutex_unlock(w->m);
    }
    atomic_store(&w->done, 1);
    return NULL;
}

Test(rmutex, waiter_blocks_until_last_unlock, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "wb");
    rs_rmutex_t *m2 = new_rmutex(c2, "wb");

    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    uint64_t f = rs_rmutex_fence(m);

    waiter_t w = {.m = m2, .rc = -1, .unlock_rc = -1};
    cr_assert_eq(pthread_create(&w.th, NULL, waiter_main, &w), 0);
    cr_expect(wait_zcard(&s, "wb", 1, 5000), "the other client's lock did not queue");

    /* the holder re-enters at once although a waiter is queued */
    int rc = rs_rmutex_trylock(m);
    cr_expect_eq(rc, 0, "trylock by the holder with a waiter queued: %d %s", rc,
                 rs_client_lasterror(c));
    struct timespec past = tu_abs_in(-1000);
    rc = rs_rmutex_timedlock(m, &past);
    cr_expect_eq(rc, 0, "timedlock (past deadline) by the holder with a waiter queued: %d %s",
                 rc, rs_client_lasterror(c));
    cr_expect_eq(hold_count(&s, "wb"), 4);
    cr_expect_eq(rs_rmutex_fence(m), f);

    /* a timed wait of a third client runs out, and leaves the queue as it was */
    rs_client_t *c3 = tu_open_client(&s, 2000, 2000, NULL);
    rs_rmutex_t *m3 = new_rmutex(c3, "wb");
    struct timespec soon = tu_abs_in(400);
    rc = rs_rmutex_timedlock(m3, &soon);
    cr_expect_eq(rc, ETIMEDOUT, "timedlock of a third client: %d %s", rc, rs_client_lasterror(c3));
    cr_expect_eq(zcard_rq(&s, "wb"), 1, "the timed-out waiter stayed queued");
    cr_expect_eq(hold_count(&s, "wb"), 4);
    rs_rmutex_destroy(m3);
    rs_client_close(c3);

    for (int i = 0; i < 3; i++) {
        rc = rs_rmutex_unlock(m);
        cr_expect_eq(rc, 0, "unlock %d of 4: %d %s", i + 1, rc, rs_client_lasterror(c));
        cr_expect_eq(hold_count(&s, "wb"), 3 - i);
    }
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&w.locked), 0, "the waiter got it before the last unlock");
    cr_expect_eq(zcard_rq(&s, "wb"), 1, "the waiter left the queue before the last unlock");

    long long t0 = tu_mono_ms();
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "the last unlock: %d %s", rc, rs_client_lasterror(c));
    cr_expect(tu_wait_atomic(&w.locked, 1, 5000),
              "the waiter did not get it after the last unlock");
    long long el = tu_mono_ms() - t0;
    cr_expect_eq(w.rc, 0, "waiter's lock: %d", w.rc);
    cr_expect_lt(el, 3000, "handoff took %lld ms", el);
    cr_expect_gt(w.fence, f, "the waiter's token is not above the holder's");
    cr_expect_eq(hold_count(&s, "wb"), 1, "the new holder's count");
    cr_expect_eq(rs_rmutex_trylock(m), EBUSY, "the former holder's trylock");
    cr_expect_eq(rs_rmutex_unlock(m), EPERM);

    atomic_store(&w.release, 1);
    cr_expect(tu_wait_atomic(&w.done, 1, 5000), "the waiter did not finish");
    pthread_join(w.th, NULL);
    cr_expect_eq(w.unlock_rc, 0);

    rs_rmutex_destroy(m);
    rs_rmutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 3. Bad input                                                                           */

Test(rmutex, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);

    rs_rmutex_t *m = (rs_rmutex_t *)(uintptr_t)1;
    cr_expect_eq(rs_rmutex_init(NULL, c, "x"), EINVAL, "NULL handle pointer");
    cr_expect_eq(rs_rmutex_init(&m, c, NULL), EINVAL, "NULL name");
    cr_expect_null(m, "*m not NULL after a failed init");
    m = (rs_rmutex_t *)(uintptr_t)1;
    cr_expect_eq(rs_rmutex_init(&m, c, ""), EINVAL, "empty name");
    cr_expect_null(m);
    cr_expect_eq(rs_rmutex_init(&m, NULL, "x"), EINVAL, "NULL client");
    cr_expect_null(m);
    char longname[RS_NAME_MAX + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    cr_expect_eq(rs_rmutex_init(&m, c, longname), EINVAL, "name of %d bytes", RS_NAME_MAX + 1);
    longname[RS_NAME_MAX] = '\0';
    rs_rmutex_t *ml = NULL;
    cr_expect_eq(rs_rmutex_init(&ml, c, longname), 0, "name of %d bytes", RS_NAME_MAX);
    if (ml) {
        cr_expect_eq(rs_rmutex_lock(ml), 0);
        cr_expect_eq(rs_rmutex_lock(ml), 0);
        cr_expect_eq(rs_rmutex_unlock(ml), 0);
        cr_expect_eq(rs_rmutex_unlock(ml), 0);
        cr_expect_eq(rs_rmutex_destroy(ml), 0);
    }

    /* NULL handles */
    struct timespec dl = tu_abs_in(1000);
    cr_expect_eq(rs_rmutex_lock(NULL), EINVAL);
    cr_expect_eq(rs_rmutex_trylock(NULL), EINVAL);
    cr_expect_eq(rs_rmutex_timedlock(NULL, &dl), EINVAL);
    cr_expect_eq(rs_rmutex_timedlock(NULL, NULL), EINVAL);
    cr_expect_eq(rs_rmutex_unlock(NULL), EINVAL);
    cr_expect_eq(rs_rmutex_setlease(NULL, 1000), EINVAL);
    cr_expect_eq(rs_rmutex_fence(NULL), 0);
    cr_expect_eq(rs_rmutex_remaining(NULL), 0);
    cr_expect_eq(rs_rmutex_destroy(NULL), 0);

    /* bad deadlines, while free and while held (a re-entry must check them too) */
    m = new_rmutex(c, "bi");
    cr_expect_eq(rs_rmutex_timedlock(m, NULL), EINVAL, "NULL deadline, free");
    dl.tv_nsec = 1000000000L;
    cr_expect_eq(rs_rmutex_timedlock(m, &dl), EINVAL, "tv_nsec 1e9, free");
    dl.tv_nsec = -1;
    cr_expect_eq(rs_rmutex_timedlock(m, &dl), EINVAL, "tv_nsec -1, free");
    cr_expect(!has_owner(&s, "bi"), "a refused timedlock took the lock");
    cr_expect_eq(rs_rmutex_lock(m), 0);
    cr_expect_eq(rs_rmutex_timedlock(m, NULL), EINVAL, "NULL deadline, held");
    dl.tv_nsec = 1000000000L;
    cr_expect_eq(rs_rmutex_timedlock(m, &dl), EINVAL, "tv_nsec 1e9, held");
    cr_expect_eq(hold_count(&s, "bi"), 1, "a refused re-entry changed the count");

    /* leases */
    cr_expect_eq(rs_rmutex_setlease(m, -1), EINVAL);
    cr_expect_eq(rs_rmutex_setlease(m, 10), EINVAL);
    cr_expect_eq(rs_rmutex_setlease(m, 0), 0);
    cr_expect_eq(rs_rmutex_setlease(m, 1500), 0);

    cr_expect_eq(rs_rmutex_unlock(m), 0);
    cr_expect_eq(rs_rmutex_unlock(m), EPERM);
    cr_expect_eq(rs_rmutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 4. destroy                                                                             */

Test(rmutex, destroy_busy)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "db");

    cr_expect_eq(rs_rmutex_lock(m), 0);
    cr_expect_eq(rs_rmutex_lock(m), 0);
    cr_expect_eq(rs_rmutex_destroy(m), EBUSY, "destroy at count 2");
    cr_expect_eq(in_thread(m, OP_DESTROY), EBUSY, "destroy by another thread at count 2");
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    cr_expect_eq(rs_rmutex_destroy(m), EBUSY, "destroy at count 1");
    cr_expect_eq(hold_count(&s, "db"), 1, "a refused destroy touched Redis");
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    cr_expect(!has_owner(&s, "db"));
    cr_expect_eq(rs_rmutex_destroy(m), 0, "destroy after release");

    /* a handle held by another thread: EBUSY for us too */
    m = new_rmutex(c, "db");
    waiter_t w = {.m = m, .rc = -1, .unlock_rc = -1};
    cr_assert_eq(pthread_create(&w.th, NULL, waiter_main, &w), 0);
    cr_assert(tu_wait_atomic(&w.locked, 1, 5000));
    cr_expect_eq(w.rc, 0);
    cr_expect_eq(rs_rmutex_destroy(m), EBUSY, "destroy while another thread holds");
    atomic_store(&w.release, 1);
    cr_expect(tu_wait_atomic(&w.done, 1, 5000));
    pthread_join(w.th, NULL);
    cr_expect_eq(w.unlock_rc, 0);
    cr_expect_eq(rs_rmutex_destroy(m), 0, "destroy after the other thread released");
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 5. A mutex and an rmutex of the same name are different objects                      */

Test(rmutex, independent_of_mutex)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c1 = tu_open_client(&s, 2000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 2000, NULL);
    rs_mutex_t *mx1 = new_mutex(c1, "same");
    rs_mutex_t *mx2 = new_mutex(c2, "same");
    rs_rmutex_t *rm1 = new_rmutex(c1, "same");
    rs_rmutex_t *rm2 = new_rmutex(c2, "same");

    /* different clients: one holds the mutex, the other the rmutex */
    int rc = rs_mutex_lock(mx1);
    cr_assert_eq(rc, 0, "mutex lock: %d %s", rc, rs_client_lasterror(c1));
    rc = rs_rmutex_trylock(rm2);
    cr_expect_eq(rc, 0, "rmutex trylock while the mutex of that name is held: %d %s", rc,
                 rs_client_lasterror(c2));
    cr_expect_eq(rs_rmutex_lock(rm2), 0, "rmutex re-entry");
    cr_expect_eq(rs_mutex_trylock(mx2), EBUSY, "the mutex is still exclusive");
    cr_expect_eq(rs_rmutex_trylock(rm1), EBUSY, "the rmutex is still exclusive");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{same}:mutex o"), 1);
    cr_expect_eq(hold_count(&s, "same"), 2);
    cr_expect_neq(ts_cmd_int(&s, "HGET rs:{same}:mutex n"), 2, "the rmutex's re-entry counted on the mutex");

    /* releasing one leaves the other */
    cr_expect_eq(rs_mutex_unlock(mx1), 0);
    cr_expect_eq(hold_count(&s, "same"), 2, "a mutex unlock touched the rmutex");
    cr_expect_eq(rs_rmutex_trylock(rm1), EBUSY);
    cr_expect_eq(rs_mutex_trylock(mx2), 0, "the mutex is free again");
    cr_expect_eq(rs_rmutex_unlock(rm2), 0);
    cr_expect_eq(rs_rmutex_unlock(rm2), 0);
    cr_expect_eq(rs_rmutex_trylock(rm1), 0, "the rmutex is free again");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{same}:mutex o"), 1, "an rmutex unlock freed the mutex");

    /* the same thread may hold both at once */
    cr_expect_eq(rs_mutex_unlock(mx2), 0);
    cr_expect_eq(rs_mutex_lock(mx1), 0, "one thread: mutex while holding the rmutex");
    cr_expect_eq(rs_rmutex_lock(rm1), 0, "and re-enter the rmutex");
    cr_expect_eq(rs_mutex_lock(mx1), EDEADLK, "the mutex stays non-recursive");
    cr_expect_eq(rs_rmutex_unlock(rm1), 0);
    cr_expect_eq(rs_rmutex_unlock(rm1), 0);
    cr_expect_eq(rs_mutex_unlock(mx1), 0);

    rs_mutex_destroy(mx1);
    rs_mutex_destroy(mx2);
    rs_rmutex_destroy(rm1);
    rs_rmutex_destroy(rm2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 6. Cross-process exclusion with re-entry                                               */

#define XP_PROCS 4
#define XP_ITERS 30

typedef struct xp_arg {
    const ts_server_t *s;
    int start_fd;  /* read end of the start barrier */
    int start_wfd; /* its write end: every child must close its copy, or no read sees EOF */
} xp_arg_t;

static int xp_child_main(void *arg)
{
    xp_arg_t *a = arg;
    char b;
    close(a->start_wfd);
    ssize_t rd = read(a->start_fd, &b, 1); /* EOF once every write end is closed */
    (void)rd;
    rs_client_t *c = tu_open_client_ex(a->s, 10000, 5000, NULL);
    if (!c)
        return 10;
    rs_rmutex_t *m;
    if (rs_rmutex_init(&m, c, "xr") != 0)
        return 11;
    redisContext *k = ts_connect(a->s);
    if (!k)
        return 12;
    for (int i = 0; i < XP_ITERS; i++) {
        int rc = rs_rmutex_lock(m);
        if (rc != 0) {
            fprintf(stderr, "xr child: lock %d: %s\n", rc, rs_client_lasterror(c));
            return 20;
        }
        uint64_t f = rs_rmutex_fence(m);
        if (f == 0)
            return 21;
        /* re-enter, alternating the three ways */
        struct timespec dl = tu_abs_in(5000);
        rc = i % 3 == 0 ? rs_rmutex_lock(m) : i % 3 == 1 ? rs_rmutex_trylock(m)
                                                          : rs_rmutex_timedlock(m, &dl);
        if (rc != 0) {
            fprintf(stderr, "xr child: re-entry %d: %s\n", rc, rs_client_lasterror(c));
            return 22;
        }
        if (rs_rmutex_fence(m) != f)
            return 23;
        redisReply *r = redisCommand(k, "HGET rs:{xr}:rmutex n");
        if (!r)
            return 24;
        int two = r->type == REDIS_REPLY_STRING && strcmp(r->str, "2") == 0;
        freeReplyObject(r);
        if (!two) {
            fprintf(stderr, "xr child: the count in Redis is not 2 after re-entry\n");
            return 25;
        }
        r = redisCommand(k, "GET xr:counter");
        if (!r)
            return 26;
        long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
        if (i % 8 == 0)
            tu_sleep_ms(1); /* widen the window a lost update would need */
        r = redisCommand(k, "SET xr:counter %lld", v + 1);
        if (!r)
            return 27;
        freeReplyObject(r);
        r = redisCommand(k, "RPUSH xr:tokens %llu", (unsigned long long)f);
        if (!r)
            return 28;
        freeReplyObject(r);
        rc = rs_rmutex_unlock(m);
        if (rc != 0) {
            fprintf(stderr, "xr child: inner unlock %d: %s\n", rc, rs_client_lasterror(c));
            return 30;
        }
        rc = rs_rmutex_unlock(m);
        if (rc != 0) {
            fprintf(stderr, "xr child: outer unlock %d: %s\n", rc, rs_client_lasterror(c));
            return 31;
        }
        if (rs_rmutex_unlock(m) != EPERM)
            return 32;
    }
    redisFree(k);
    rs_rmutex_destroy(m);
    rs_client_close(c);
    return 0;
}

Test(rmutex, cross_process_reentry, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int barrier[2];
    cr_assert_eq(pipe(barrier), 0);
    xp_arg_t a = {&s, barrier[0], barrier[1]};
    pid_t pids[XP_PROCS];
    for (int i = 0; i < XP_PROCS; i++)
        pids[i] = tu_spawn(xp_child_main, &a);
    close(barrier[0]);
    close(barrier[1]); /* go */
    for (int i = 0; i < XP_PROCS; i++)
        tu_assert_exit0(pids[i], tu_reap(pids[i], 50000), "exclusion worker");

    cr_expect_eq(ts_cmd_int(&s, "GET xr:counter"), XP_PROCS * XP_ITERS, "lost updates");
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    redisReply *r = redisCommand(k, "LRANGE xr:tokens 0 -1");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    cr_expect_eq(r->elements, (size_t)(XP_PROCS * XP_ITERS), "one token per section");
    unsigned long long prev = 0;
    for (size_t i = 0; i < r->elements; i++) {
        unsigned long long t = strtoull(r->element[i]->str, NULL, 10);
        cr_expect_gt(t, prev, "token #%zu (%llu) not above the previous (%llu)", i, t, prev);
        prev = t;
    }
    freeReplyObject(r);
    redisFree(k);
    cr_expect(!has_owner(&s, "xr"), "someone still holds it");
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 7. Renewal keeps a re-entered hold                                                     */

Test(rmutex, renewal_across_reentries)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 300, 2000, &lc);
    rs_client_t *c2 = tu_open_client(&s, 300, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "rn");
    rs_rmutex_t *m2 = new_rmutex(c2, "rn");
    int rc = rs_rmutex_lock(m);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    rc = rs_rmutex_lock(m);
    cr_assert_eq(rc, 0, "re-entry: %d %s", rc, rs_client_lasterror(c));
    uint64_t f = rs_rmutex_fence(m);

    long long end = tu_mono_ms() + 1500;
    int tries = 0;
    while (tu_mono_ms() < end) {
        rc = rs_rmutex_trylock(m2);
        cr_expect_eq(rc, EBUSY, "trylock by another client during the hold: %d", rc);
        if (rc == 0)
            rs_rmutex_unlock(m2);
        tries++;
        tu_sleep_ms(100);
    }
    cr_expect_geq(tries, 4);
    cr_expect_gt(rs_rmutex_remaining(m), 0, "the hold is still confirmed");
    cr_expect_eq(rs_rmutex_fence(m), f);
    cr_expect_eq(hold_count(&s, "rn"), 2, "the count survived the renewals");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{rn}:rmutex"), 0, "the lock key is alive in Redis");
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "first unlock after 1.5 s on a 300 ms lease: %d %s", rc,
                 rs_client_lasterror(c));
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "second unlock after 1.5 s on a 300 ms lease: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM);
    cr_expect_eq(rs_rmutex_trylock(m2), 0, "free after the two unlocks");
    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    tu_sleep_ms(100);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    rs_rmutex_destroy(m);
    rs_rmutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 8. A holder at count 2 killed with SIGKILL                                             */

typedef struct kill_child {
    const ts_server_t *s;
    int fd;     /* write: the token */
    int go_fd;  /* read: EOF means "die now" */
    int go_wfd; /* the write end of go, closed in the child */
} kill_child_t;

static int kill9_child_main(void *arg)
{
    kill_child_t *k = arg;
    close(k->go_wfd);
    rs_client_t *c = tu_open_client_ex(k->s, 500, 2000, NULL);
    if (!c)
        return 10;
    rs_rmutex_t *m;
    if (rs_rmutex_init(&m, c, "k9") != 0)
        return 11;
    if (rs_rmutex_lock(m) != 0)
        return 12;
    if (rs_rmutex_lock(m) != 0)
        return 13;
    uint64_t f = rs_rmutex_fence(m);
    if (write(k->fd, &f, sizeof f) != (ssize_t)sizeof f)
        return 14;
    char b;
    ssize_t rd = read(k->go_fd, &b, 1);
    (void)rd;
    raise(SIGKILL);
    return 15;
}

Test(rmutex, holder_killed_at_count_2, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int p[2], go[2];
    cr_assert_eq(pipe(p), 0);
    cr_assert_eq(pipe(go), 0);
    kill_child_t kc = {&s, p[1], go[0], go[1]};
    pid_t pid = tu_spawn(kill9_child_main, &kc);
    close(go[0]);
    close(p[1]);
    uint64_t cf = 0;
    cr_assert(tu_read_full(p[0], &cf, sizeof cf, 10000), "the child did not lock");
    cr_expect_eq(hold_count(&s, "k9"), 2, "the child's count");
    close(go[1]); /* die */

    rs_client_t *c = tu_open_client(&s, 2000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "k9");
    long long t0 = tu_mono_ms();
    int rc = rs_rmutex_lock(m);
    long long el = tu_mono_ms() - t0;
    cr_assert_eq(rc, 0, "lock after the holder died: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(el, 500 + 3000, "took %lld ms (lease 500)", el);
    cr_expect_gt(rs_rmutex_fence(m), cf, "token above the dead holder's");
    cr_expect_eq(hold_count(&s, "k9"), 1, "the new holder starts at count 1");

    int st = tu_reap(pid, 5000);
    cr_expect(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status 0x%x", st);
    cr_expect_eq(rs_rmutex_unlock(m), 0, "one unlock releases the new hold");
    cr_expect(!has_owner(&s, "k9"));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM);
    close(p[0]);
    rs_rmutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 9. A holder at count 2 stopped (SIGSTOP) past its lease                                */

typedef struct stop_child {
    const ts_server_t *s;
    int sync_fd;
    int lost_fd;
} stop_child_t;

static int sigstop_child_main(void *arg)
{
    stop_child_t *k = arg;
    static tu_lost_t lc;
    lc.fd = k->lost_fd;
    rs_client_t *c = tu_open_client_ex(k->s, 400, 2000, &lc);
    if (!c)
        return 10;
    rs_rmutex_t *m;
    if (rs_rmutex_init(&m, c, "st") != 0)
        return 11;
    if (rs_rmutex_lock(m) != 0)
        return 12;
    if (rs_rmutex_lock(m) != 0)
        return 13;
    uint64_t f = rs_rmutex_fence(m);
    if (write(k->sync_fd, &f, sizeof f) != (ssize_t)sizeof f)
        return 14;
    raise(SIGSTOP);
    /* continued, long after the lease ran out */
    int rc = rs_rmutex_unlock(m);
    if (rc != RS_ELOST) {
        fprintf(stderr, "sigstop child: unlock returned %d (%s), want RS_ELOST\n", rc,
                rs_client_lasterror(c));
        return 20;
    }
    rc = rs_rmutex_unlock(m);
    if (rc != EPERM) {
        fprintf(stderr, "sigstop child: second unlock returned %d (%s), want EPERM\n", rc,
                rs_client_lasterror(c));
        return 21;
    }
    if (rs_rmutex_fence(m) != 0 || rs_rmutex_remaining(m) != 0)
        return 22;
    /* the re-entries are gone: a lock call is a fresh acquisition (the parent holds it) */
    rc = rs_rmutex_trylock(m);
    if (rc != EBUSY) {
        fprintf(stderr, "sigstop child: trylock after the lost hold returned %d (%s), want "
                        "EBUSY\n", rc, rs_client_lasterror(c));
        return 23;
    }
    /* on_lost is delivered from the watchdog thread: give it time, then check it stays 1 */
    if (!tu_wait_atomic(&lc.n, 1, 3000))
        return 30;
    tu_sleep_ms(300);
    if (strcmp(lc.kind, "rmutex") != 0 || strcmp(lc.name, "st") != 0) {
        fprintf(stderr, "sigstop child: on_lost(%s, %s), want (rmutex, st)\n", lc.kind, lc.name);
        return 24;
    }
    rs_rmutex_destroy(m);
    rs_client_close(c);
    int n = atomic_load(&lc.n);
    return n == 1 ? 0 : 30 + (n > 9 ? 9 : n);
}

Test(rmutex, holder_stopped_past_lease, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int sp[2], lp[2];
    cr_assert_eq(pipe(sp), 0);
    cr_assert_eq(pipe(lp), 0);
    stop_child_t sc = {&s, sp[1], lp[1]};
    pid_t pid = tu_spawn(sigstop_child_main, &sc);
    close(sp[1]);
    close(lp[1]);
    uint64_t cf = 0;
    cr_assert(tu_read_full(sp[0], &cf, sizeof cf, 10000), "the child did not lock");

    /* wait until it has stopped itself */
    int st;
    long long end = tu_mono_ms() + 10000;
    pid_t w;
    while ((w = waitpid(pid, &st, WUNTRACED | WNOHANG)) == 0 && tu_mono_ms() < end)
        tu_sleep_ms(5);
    cr_assert(w == pid && WIFSTOPPED(st), "the child did not stop (0x%x)", st);
    cr_expect_eq(hold_count(&s, "st"), 2, "the stopped child's count");
    tu_sleep_ms(1500);

    rs_client_t *c = tu_open_client(&s, 5000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "st");
    int rc = rs_rmutex_trylock(m);
    cr_assert_eq(rc, 0, "taking the rmutex after the stopped holder's lease: %d %s", rc,
                 rs_client_lasterror(c));
    uint64_t pf = rs_rmutex_fence(m);
    cr_expect_gt(pf, cf, "token above the stopped holder's");
    cr_expect_eq(hold_count(&s, "st"), 1, "the new holder starts at count 1");

    kill(pid, SIGCONT);
    st = tu_reap(pid, 15000);
    tu_assert_exit0(pid, st, "stopped holder (20: unlock not RS_ELOST, 21: second unlock not "
                             "EPERM, 22: fence/remaining left, 23: trylock not EBUSY, 24: on_lost "
                             "arguments, 30+n: on_lost called n times)");
    char buf[16];
    ssize_t n = read(lp[0], buf, sizeof buf); /* the child is gone: no more writers */
    cr_expect_eq(n, 1, "on_lost calls seen through the pipe: %zd", n);

    /* the child's unlocks left our hold alone */
    cr_expect_eq(rs_rmutex_fence(m), pf);
    cr_expect_eq(hold_count(&s, "st"), 1, "the child's unlock changed our count");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{st}:rmutex"), 0, "our lock key is still there");
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, 0, "the new holder's unlock: %d %s", rc, rs_client_lasterror(c));
    close(sp[0]);
    close(lp[0]);
    rs_rmutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10. A re-entry on a lost hold                                                          */

/* The watchdog finds the hold gone (taken over) before the thread locks again. */
Test(rmutex, reentry_on_lost_hold_watchdog)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 300, 2000, &lc);
    rs_client_t *c2 = tu_open_client(&s, 5000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "lw");
    rs_rmutex_t *m2 = new_rmutex(c2, "lw");

    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{lw}:rmutex"), 1);
    int rc = rs_rmutex_trylock(m2);
    cr_assert_eq(rc, 0, "the other client takes it over: %d %s", rc, rs_client_lasterror(c2));
    uint64_t f2 = rs_rmutex_fence(m2);
    cr_expect(tu_wait_atomic(&lc.n, 1, 5000), "on_lost was not called");
    cr_expect_str_eq(lc.kind, "rmutex");
    cr_expect_str_eq(lc.name, "lw");
    cr_expect_eq(rs_rmutex_remaining(m), 0, "remaining of a lost hold");

    rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, RS_ELOST, "lock (re-entry) on a lost hold: %d %s", rc,
                 rs_client_lasterror(c));
    rc = rs_rmutex_trylock(m);
    cr_expect_eq(rc, RS_ELOST, "trylock (re-entry) on a lost hold: %d %s", rc,
                 rs_client_lasterror(c));
    struct timespec dl = tu_abs_in(500);
    rc = rs_rmutex_timedlock(m, &dl);
    cr_expect_eq(rc, RS_ELOST, "timedlock (re-entry) on a lost hold: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(hold_count(&s, "lw"), 1, "a re-entry on a lost hold counted on the new owner");

    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, RS_ELOST, "unlock of the lost hold: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "the unlock cleared all re-entries");
    cr_expect_eq(rs_rmutex_fence(m), 0);
    cr_expect_eq(rs_rmutex_fence(m2), f2, "the new holder's hold was touched");
    cr_expect_eq(hold_count(&s, "lw"), 1, "the new holder's count was touched");
    cr_expect(has_owner(&s, "lw"));
    cr_expect_eq(rs_rmutex_trylock(m), EBUSY, "a fresh acquisition after the lost hold");

    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, 0, "a fresh lock after the lost hold: %d %s", rc, rs_client_lasterror(c));
    cr_expect_gt(rs_rmutex_fence(m), f2);
    cr_expect_eq(hold_count(&s, "lw"), 1);
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&lc.n), 1, "on_lost called %d times", atomic_load(&lc.n));
    rs_rmutex_destroy(m);
    rs_rmutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* The re-entry itself finds the hold gone (long lease: the watchdog has not looked yet). */
Test(rmutex, reentry_on_lost_hold_redis)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 30000, 2000, &lc);
    rs_rmutex_t *m = new_rmutex(c, "lr");

    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    uint64_t f = rs_rmutex_fence(m);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{lr}:rmutex"), 1);

    int rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, RS_ELOST, "re-entry after the key vanished: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect(!has_owner(&s, "lr"), "the failed re-entry took the lock");
    cr_expect(tu_wait_atomic(&lc.n, 1, 3000), "on_lost was not called");
    cr_expect_str_eq(lc.kind, "rmutex");
    rc = rs_rmutex_trylock(m);
    cr_expect_eq(rc, RS_ELOST, "trylock on the lost hold: %d", rc);

    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, RS_ELOST, "unlock of the lost hold: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "the unlock cleared all re-entries");
    cr_expect_eq(rs_rmutex_fence(m), 0);

    rc = rs_rmutex_lock(m);
    cr_expect_eq(rc, 0, "a fresh lock: %d %s", rc, rs_client_lasterror(c));
    cr_expect_gt(rs_rmutex_fence(m), f);
    cr_expect_eq(hold_count(&s, "lr"), 1);
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    cr_expect_eq(rs_rmutex_unlock(m), EPERM);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&lc.n), 1, "on_lost called %d times", atomic_load(&lc.n));

    /* the unlock of a re-entry (leave) is what finds the hold gone */
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{lr}:rmutex"), 1);
    rs_client_t *c2 = tu_open_client(&s, 30000, 2000, NULL);
    rs_rmutex_t *m2 = new_rmutex(c2, "lr");
    cr_assert_eq(rs_rmutex_trylock(m2), 0, "another client takes it over");
    uint64_t f2 = rs_rmutex_fence(m2);
    rc = rs_rmutex_unlock(m);
    cr_expect_eq(rc, RS_ELOST, "unlock at count 3 after a takeover: %d %s", rc,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_rmutex_unlock(m), EPERM, "the unlock cleared all re-entries");
    cr_expect_eq(rs_rmutex_fence(m), 0);
    cr_expect_eq(hold_count(&s, "lr"), 1, "the lost unlock changed the new holder's count");
    cr_expect_eq(rs_rmutex_fence(m2), f2);
    cr_expect_eq(rs_rmutex_trylock(m), EBUSY, "the new holder's hold was released");
    cr_expect(tu_wait_atomic(&lc.n, 2, 3000), "on_lost was not called for the second loss");
    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    rs_rmutex_destroy(m2);
    rs_client_close(c2);
    cr_expect_eq(rs_rmutex_trylock(m), 0, "a fresh trylock");
    cr_expect_eq(rs_rmutex_unlock(m), 0);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&lc.n), 2, "on_lost called %d times", atomic_load(&lc.n));
    rs_rmutex_destroy(m);
    rs_client_close(c);
    cr_expect_eq(atomic_load(&lc.n), 2, "on_lost called %d times", atomic_load(&lc.n));
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10b. Closing the client releases a re-entered hold                                     */

Test(rmutex, close_releases_reentered_hold)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 30000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 30000, 2000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "cl");
    rs_rmutex_t *m2 = new_rmutex(c2, "cl");
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_assert_eq(rs_rmutex_lock(m), 0);
    cr_expect_eq(hold_count(&s, "cl"), 2);
    uint64_t f = rs_rmutex_fence(m);
    cr_expect_eq(rs_client_close(c), 0);
    cr_expect(!has_owner(&s, "cl"), "closing the client left the hold in Redis");
    int rc = rs_rmutex_trylock(m2);
    cr_expect_eq(rc, 0, "trylock after the holder's client closed: %d %s", rc,
                 rs_client_lasterror(c2));
    cr_expect_gt(rs_rmutex_fence(m2), f);
    cr_expect_eq(rs_rmutex_destroy(m), 0, "destroy after close");
    cr_expect_eq(rs_rmutex_unlock(m2), 0);
    rs_rmutex_destroy(m2);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10c. Threads sharing one handle exclude each other, with re-entry                      */

#define SH_THREADS 4
#define SH_ITERS 15

typedef struct shared_arg {
    rs_rmutex_t *m;
    long *counter;        /* plain, guarded only by the rmutex */
    atomic_int *inside;   /* threads inside the section: must never exceed 1 */
    int errors;
    char err[160];
    pthread_t th;
} shared_arg_t;

static void *shared_main(void *arg)
{
    shared_arg_t *a = arg;
    for (int i = 0; i < SH_ITERS; i++) {
        int rc = rs_rmutex_lock(a->m);
        if (rc) {
            snprintf(a->err, sizeof a->err, "lock %d: %s", rc, rs_client_lasterror(NULL));
            a->errors++;
            return NULL;
        }
        uint64_t f = rs_rmutex_fence(a->m);
        if ((rc = rs_rmutex_lock(a->m)) != 0) {
            snprintf(a->err, sizeof a->err, "re-entry %d", rc);
            a->errors++;
            rs_rmutex_unlock(a->m);
            return NULL;
        }
        if (atomic_fetch_add(a->inside, 1) != 0)
            a->errors++;
        long v = *a->counter;
        tu_sleep_ms(1);
        *a->counter = v + 1;
        if (rs_rmutex_fence(a->m) != f)
            a->errors++;
        atomic_fetch_sub(a->inside, 1);
        if (rs_rmutex_unlock(a->m) != 0)
            a->errors++;
        if (rs_rmutex_unlock(a->m) != 0)
            a->errors++;
        if (rs_rmutex_unlock(a->m) != EPERM)
            a->errors++;
    }
    return NULL;
}

Test(rmutex, threads_share_handle)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 10000, 5000, NULL);
    rs_rmutex_t *m = new_rmutex(c, "sh");
    long counter = 0;
    atomic_int inside = 0;
    shared_arg_t a[SH_THREADS];
    for (int i = 0; i < SH_THREADS; i++) {
        a[i] = (shared_arg_t){.m = m, .counter = &counter, .inside = &inside};
        cr_assert_eq(pthread_create(&a[i].th, NULL, shared_main, &a[i]), 0);
    }
    for (int i = 0; i < SH_THREADS; i++) {
        pthread_join(a[i].th, NULL);
        cr_expect_eq(a[i].errors, 0, "thread %d: %d errors (%s)", i, a[i].errors, a[i].err);
    }
    cr_expect_eq(counter, SH_THREADS * SH_ITERS, "lost updates among threads of one client");
    cr_expect(!has_owner(&s, "sh"));
    cr_expect_eq(rs_rmutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 11. The script: enter/leave are idempotent per call id                                 */

/* EVAL of the mutex script on name's rmutex keys, ARGV as in mutex.lua's header. */
static redisReply *rx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *callid)
{
    char keys[4][64];
    snprintf(keys[0], sizeof keys[0], "rs:{%s}:rmutex", name);
    snprintf(keys[1], sizeof keys[1], "rs:{%s}:rmutex:fence", name);
    snprintf(keys[2], sizeof keys[2], "rs:{%s}:rmutex:q", name);
    snprintf(keys[3], sizeof keys[3], "rs:{%s}:rmutex:qi", name);
    const char *argv[16];
    size_t lens[16];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)rs_script_mutex.body;
    argv[n++] = "4";
    for (int i = 0; i < 4; i++)
        argv[n++] = keys[i];
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "5000";       /* lease */
    argv[n++] = "rs:client:"; /* channel prefix */
    argv[n++] = "t";          /* mode */
    argv[n++] = "100";        /* max waiters */
    argv[n++] = "5000";       /* queue-entry lease */
    if (callid)
        argv[n++] = callid;   /* ARGV[9] */
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_mutex.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "EVAL %s: %s", op, r->str);
    return r;
}

static long long rx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *callid)
{
    redisReply *r = rx(k, name, op, tok, acq, callid);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d", op, r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

Test(rmutex, script_enter_idempotent)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    char buf[64];

    /* take it */
    redisReply *r = rx(k, "se", "acq", "tokA", "pa:1", NULL);
    cr_assert(r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                  r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1,
              "acq was not granted");
    char f[32];
    if (r->element[1]->type == REDIS_REPLY_STRING)
        snprintf(f, sizeof f, "%s", r->element[1]->str);
    else
        snprintf(f, sizeof f, "%lld", r->element[1]->integer);
    freeReplyObject(r);
    cr_expect_eq(hold_count(&s, "se"), 1, "count after acq");

    /* enter twice with one call id: counted once */
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c1"), 2, "enter");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c1"), 2, "a retried enter");
    cr_expect_eq(hold_count(&s, "se"), 2, "count after a retried enter");

    /* foreign enters/leaves: 0, nothing changed */
    cr_expect_eq(rx_int(k, "se", "enter", "tokB", "pa:1", "pb:c1"), 0, "enter by another token");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:2", "pa:c9"), 0, "enter under another id");
    cr_expect_eq(rx_int(k, "se", "leave", "tokB", "pa:1", "pb:c2"), 0, "leave by another token");
    cr_expect_eq(hold_count(&s, "se"), 2, "a foreign call changed the count");

    /* leave twice with another call id: counted once */
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c2"), 1, "leave");
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c2"), 1, "a retried leave");
    cr_expect_eq(hold_count(&s, "se"), 1, "count after a retried leave");

    /* fresh ids count again; leave never goes below 1 */
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c3"), 2);
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c4"), 3);
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c4"), 3, "a retried enter at 3");
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c5"), 2);
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c6"), 1);
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c7"), 1, "leave at count 1");
    cr_expect_eq(hold_count(&s, "se"), 1);

    /* the token never moved */
    cr_expect_str_eq(ts_cmd_str(&s, buf, sizeof buf, "HGET rs:{se}:rmutex f") ? buf : "(nil)", f,
                     "the fencing token changed");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{se}:rmutex"), 0);

    /* renew keeps the count; release ends it and later enters find nothing */
    cr_expect_eq(rx_int(k, "se", "renew", "tokA", "pa:1", NULL), 1);
    cr_expect_eq(hold_count(&s, "se"), 1);
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c8"), 2);
    cr_expect_eq(rx_int(k, "se", "rel", "tokA", "pa:1", NULL), 1);
    cr_expect(!has_owner(&s, "se"), "owned after rel");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c9"), 0, "enter after rel");
    cr_expect_eq(rx_int(k, "se", "enter", "tokA", "pa:1", "pa:c8"), 0,
                 "a retried enter after rel");
    cr_expect_eq(rx_int(k, "se", "leave", "tokA", "pa:1", "pa:c10"), 0, "leave after rel");

    /* a new holder starts at 1 whatever the previous count */
    r = rx(k, "se", "acq", "tokB", "pb:1", NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1, "acq by B");
    freeReplyObject(r);
    cr_expect_eq(hold_count(&s, "se"), 1, "a new holder's count");
    cr_expect_eq(rx_int(k, "se", "enter", "tokB", "pb:1", "pa:c8"), 2,
                 "another holder's call id equal to an old one is a new call");
    redisFree(k);
    ts_server_stop(&s);
}
