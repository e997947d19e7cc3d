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
 *
 * The suite "rmutex" spans test_rmutex.c (re-entry, waiters, bad input, destroy, the mutex of
 * the same name, threads sharing a handle), test_rmutex_procs.c (forked processes),
 * test_rmutex_lease.c (renewal, lost holds, close) and test_rmutex_script.c (enter/leave by
 * EVAL); their shared helpers are in test_rmutex.h.
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
#include "test_rmutex.h"

TestSuite(rmutex, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
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
