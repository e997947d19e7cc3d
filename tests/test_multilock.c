/*
 * test_multilock.c - Criterion tests of the multilock (rs_multilock_*): several mutexes taken
 * all or nothing, in one global order.
 *
 * Every test starts its own redis-server(s) on free ports and stops them. Cross-process tests
 * fork workers; each child opens its own client after fork() and reports through its exit
 * status (or the test's redis). Criterion assertions are only made in the test's main
 * thread. Timing bounds are generous: the suite runs as -j6 on small, noisy machines.
 *
 * The suite "multilock" spans test_multilock.c (bad input, holding, trylock, timedlock, two
 * servers, a handle shared by threads), test_multilock_loss.c (lost parts),
 * test_multilock_procs.c (many processes, no deadlock) and test_multilock_script.c (one
 * script, one round trip); their shared helpers are in test_multilock.h.
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
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "test_assert.h"
#include "test_util.h"
#include "redisync.h"
#include "test_multilock.h"

TestSuite(multilock, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* 1. Bad input and the caller's own mistakes                                             */

Test(multilock, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_client(&s, 5000, NULL);
    rs_client_t *c2 = open_client(&s, 5000, NULL);
    rs_mutex_t *a = new_mutex(c, "a"), *b = new_mutex(c, "b");
    rs_mutex_t *a_again = new_mutex(c, "a");  /* a second handle of "a", same client */
    rs_mutex_t *a_other = new_mutex(c2, "a"); /* "a" through another client, same server */
    rs_mutex_t *b2 = new_mutex(c2, "b");

    rs_multilock_t *ml = (rs_multilock_t *)&ml; /* must be overwritten with NULL */
    rs_mutex_t *ab[] = {a, b};
    cr_expect_eq(rs_multilock_init(NULL, ab, 2), EINVAL, "NULL handle pointer");
    cr_expect_eq(rs_multilock_init(&ml, NULL, 2), EINVAL, "NULL parts");
    cr_expect_null(ml, "*ml is NULL after a failed init");
    cr_expect_eq(rs_multilock_init(&ml, ab, 0), EINVAL, "n == 0");
    rs_mutex_t *withnull[] = {a, NULL, b};
    cr_expect_eq(rs_multilock_init(&ml, withnull, 3), EINVAL, "a NULL part");
    rs_mutex_t *dup[] = {a, b, a};
    cr_expect_eq(rs_multilock_init(&ml, dup, 3), EINVAL, "the same handle twice");
    rs_mutex_t *dup2[] = {a_again, b, a};
    cr_expect_eq(rs_multilock_init(&ml, dup2, 3), EINVAL, "two handles of one mutex");
    rs_mutex_t *dup3[] = {a, a_other};
    cr_expect_eq(rs_multilock_init(&ml, dup3, 2), EINVAL,
                 "one mutex through two clients of one server");
    cr_expect_null(ml);

    cr_expect_eq(rs_multilock_lock(NULL), EINVAL);
    cr_expect_eq(rs_multilock_trylock(NULL), EINVAL);
    struct timespec dl = tu_abs_in(1000);
    cr_expect_eq(rs_multilock_timedlock(NULL, &dl), EINVAL);
    cr_expect_eq(rs_multilock_unlock(NULL), EINVAL);
    cr_expect_eq(rs_multilock_destroy(NULL), 0, "destroy(NULL) is a no-op");

    /* one part is fine */
    rs_multilock_t *one = new_ml(ab, 1);
    cr_expect_eq(rs_multilock_lock(one), 0);
    cr_expect_neq(rs_mutex_fence(a), 0);
    cr_expect_eq(rs_multilock_unlock(one), 0);
    cr_expect_eq(rs_multilock_destroy(one), 0);

    ml = new_ml(ab, 2);
    cr_expect_eq(rs_multilock_unlock(ml), EPERM, "unlock without holding");
    cr_expect_eq(rs_multilock_timedlock(ml, NULL), EINVAL, "NULL deadline");
    dl = tu_abs_in(1000);
    dl.tv_nsec = 1000000000L;
    cr_expect_eq(rs_multilock_timedlock(ml, &dl), EINVAL, "tv_nsec out of range");
    cr_expect(is_free(a_other) && is_free(b2), "the bad calls took nothing");

    int rc = rs_multilock_lock(ml);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    cr_expect_eq(rs_multilock_lock(ml), EDEADLK, "second lock by the holder");
    cr_expect_eq(rs_multilock_trylock(ml), EBUSY, "trylock by the holder");
    cr_expect_eq(rs_multilock_destroy(ml), EBUSY, "destroy while held");
    cr_expect_eq(rs_mutex_destroy(a), EBUSY, "a part cannot be destroyed while held");
    /* another thread of the process does not hold it */
    mlcall_t k = {.ml = ml, .parts = ab, .n = 2, .op = 3};
    mlcall_start(&k);
    cr_assert(mlcall_join(&k, 10000));
    cr_expect_eq(k.rc, EPERM, "unlock by a thread that does not hold it: %d", k.rc);
    cr_expect_eq(rs_multilock_unlock(ml), 0);
    cr_expect_eq(rs_multilock_unlock(ml), EPERM, "unlock twice");

    /* a part the thread already holds on its own: EDEADLK, and the other part is left free */
    cr_assert_eq(rs_mutex_lock(b), 0);
    cr_expect_eq(rs_multilock_lock(ml), EDEADLK, "lock with a part held by this thread");
    cr_expect_eq(rs_multilock_trylock(ml), EBUSY, "trylock with a part held by this thread");
    cr_expect(is_free(a_other), "the other part was released");
    cr_expect_eq(rs_mutex_unlock(b), 0, "the thread's own hold on b is untouched");

    cr_expect_eq(rs_multilock_destroy(ml), 0);
    rs_mutex_destroy(a);
    rs_mutex_destroy(b);
    rs_mutex_destroy(a_again);
    rs_mutex_destroy(a_other);
    rs_mutex_destroy(b2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 2. Holding: every part held, its own token, renewed like any hold                       */

Test(multilock, hold_fences_and_renewal)
{
    ts_server_t s;
    tu_start_server(&s);
    atomic_int lost = 0;
    rs_client_t *c = open_client(&s, 300, &lost);
    rs_client_t *c2 = open_client(&s, 5000, NULL);
    const char *names[] = {"f3", "f1", "f2"};
    rs_mutex_t *m[3], *o[3];
    for (int i = 0; i < 3; i++) {
        m[i] = new_mutex(c, names[i]);
        o[i] = new_mutex(c2, names[i]);
    }
    /* an earlier hold of f2 raises its counter: tokens are per name */
    cr_assert_eq(rs_mutex_lock(o[2]), 0);
    uint64_t before = rs_mutex_fence(o[2]);
    cr_assert_eq(rs_mutex_unlock(o[2]), 0);

    rs_multilock_t *ml = new_ml(m, 3);
    int rc = rs_multilock_lock(ml);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(c));
    uint64_t f[3];
    for (int i = 0; i < 3; i++) {
        f[i] = rs_mutex_fence(m[i]);
        cr_expect_neq(f[i], 0, "part %s has a token", names[i]);
        char buf[32];
        cr_expect_not_null(ts_cmd_str(&s, buf, sizeof buf, "HGET rs:{%s}:mutex f", names[i]));
        cr_expect_eq(strtoull(buf, NULL, 10), f[i], "part %s: Redis has its token", names[i]);
    }
    cr_expect_gt(f[2], before, "f2's token is above its earlier hold's");

    /* held for 2 s on a 300 ms lease: the watchdog renews every part */
    long long end = tu_mono_ms() + 2000;
    while (tu_mono_ms() < end) {
        for (int i = 0; i < 3; i++)
            cr_expect_eq(rs_mutex_trylock(o[i]), EBUSY, "%s is held", names[i]);
        tu_sleep_ms(200);
    }
    for (int i = 0; i < 3; i++) {
        cr_expect_gt(rs_mutex_remaining(m[i]), 0, "%s still confirmed", names[i]);
        cr_expect_eq(rs_mutex_fence(m[i]), f[i], "%s kept its token", names[i]);
    }
    rc = rs_multilock_unlock(ml);
    cr_expect_eq(rc, 0, "unlock: %d %s", rc, rs_client_lasterror(c));
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(rs_mutex_fence(m[i]), 0, "%s released locally", names[i]);
        cr_expect(is_free(o[i]), "%s released in Redis", names[i]);
    }
    cr_expect_eq(atomic_load(&lost), 0, "nothing was lost");

    /* the next multilock hold gets larger tokens on every part */
    cr_assert_eq(rs_multilock_trylock(ml), 0);
    for (int i = 0; i < 3; i++)
        cr_expect_gt(rs_mutex_fence(m[i]), f[i], "%s: a larger token", names[i]);
    cr_expect_eq(rs_multilock_unlock(ml), 0);

    cr_expect_eq(rs_multilock_destroy(ml), 0);
    for (int i = 0; i < 3; i++) {
        rs_mutex_destroy(m[i]);
        rs_mutex_destroy(o[i]);
    }
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 3. A part that cannot be taken leaves nothing held                                     */

Test(multilock, trylock_all_or_nothing)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_client(&s, 5000, NULL);
    rs_client_t *c2 = open_client(&s, 5000, NULL);
    /* keys sort as t1 < t2 < t3: hold the last one so that the others were taken first */
    const char *names[] = {"t3", "t1", "t2"};
    rs_mutex_t *m[3], *o[3];
    for (int i = 0; i < 3; i++) {
        m[i] = new_mutex(c, names[i]);
        o[i] = new_mutex(c2, names[i]);
    }
    rs_multilock_t *ml = new_ml(m, 3);
    for (int held = 0; held < 3; held++) {
        cr_assert_eq(rs_mutex_lock(o[held]), 0);
        int rc = rs_multilock_trylock(ml);
        cr_expect_eq(rc, EBUSY, "trylock with %s held elsewhere: %d %s", names[held], rc,
                     rs_client_lasterror(c));
        for (int i = 0; i < 3; i++) {
            cr_expect_eq(rs_mutex_fence(m[i]), 0, "%s: nothing held locally", names[i]);
            if (i != held)
                cr_expect(is_free(o[i]), "%s is free after the failed trylock (%s held)",
                          names[i], names[held]);
        }
        cr_expect_eq(rs_multilock_unlock(ml), EPERM, "nothing to unlock");
        cr_expect_eq(zcard_q(&s, names[held]), 0, "trylock never queues");
        cr_assert_eq(rs_mutex_unlock(o[held]), 0);
    }
    cr_expect_eq(rs_multilock_trylock(ml), 0, "all free now");
    cr_expect_eq(rs_multilock_unlock(ml), 0);
    rs_multilock_destroy(ml);
    for (int i = 0; i < 3; i++) {
        rs_mutex_destroy(m[i]);
        rs_mutex_destroy(o[i]);
    }
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 4. timedlock: one deadline for all parts; lock waits for the last part                  */

Test(multilock, timedlock_and_blocking_lock)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_client(&s, 5000, NULL);
    rs_client_t *c2 = open_client(&s, 5000, NULL);
    const char *names[] = {"w2", "w1", "w3"}; /* order: w1 w2 w3 */
    rs_mutex_t *m[3], *o[3];
    for (int i = 0; i < 3; i++) {
        m[i] = new_mutex(c, names[i]);
        o[i] = new_mutex(c2, names[i]);
    }
    rs_multilock_t *ml = new_ml(m, 3);
    cr_assert_eq(rs_mutex_lock(o[2]), 0, "hold w3, the last part in the order");

    struct timespec dl = tu_abs_in(800);
    long long t0 = tu_mono_ms();
    int rc = rs_multilock_timedlock(ml, &dl);
    long long el = tu_mono_ms() - t0;
    cr_expect_eq(rc, ETIMEDOUT, "timedlock with w3 held: %d %s", rc, rs_client_lasterror(c));
    cr_expect(el >= 700 && el < 4000, "timedlock took %lld ms for an 800 ms deadline", el);
    cr_expect(is_free(o[0]) && is_free(o[1]), "w1 and w2 were released");
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(rs_mutex_fence(m[i]), 0);
        cr_expect_eq(zcard_q(&s, names[i]), 0, "%s: no queue entry left", names[i]);
    }
    cr_expect_eq(rs_multilock_unlock(ml), EPERM);

    /* a deadline already past: one attempt per part, at once */
    dl = tu_abs_in(-1000);
    t0 = tu_mono_ms();
    rc = rs_multilock_timedlock(ml, &dl);
    el = tu_mono_ms() - t0;
    cr_expect_eq(rc, ETIMEDOUT, "past deadline with w3 held: %d", rc);
    cr_expect_lt(el, 1500, "past deadline took %lld ms", el);
    cr_expect(is_free(o[0]) && is_free(o[1]), "w1 and w2 were released");
    cr_expect_eq(zcard_q(&s, "w3"), 0, "a past deadline never queues");

    /* a blocking lock waits for w3 and gets all three when it is released */
    mlcall_t k = {.ml = ml, .parts = m, .n = 3, .op = 0};
    mlcall_start(&k);
    cr_assert(wait_zcard(&s, "w3", 1, 10000), "the multilock queued for w3");
    cr_expect_eq(rs_mutex_trylock(o[0]), EBUSY, "w1 is held by the waiting multilock");
    cr_expect_eq(atomic_load(&k.done), 0, "lock returned while w3 was held");
    long long t_rel = tu_mono_ms();
    cr_assert_eq(rs_mutex_unlock(o[2]), 0);
    cr_assert(tu_wait_atomic(&k.done, 1, 10000), "lock did not return after w3 was released");
    cr_expect_eq(k.rc, 0, "lock: %d", k.rc);
    cr_expect_lt(k.t_done - t_rel, 3000, "handoff took %lld ms", k.t_done - t_rel);
    for (int i = 0; i < 3; i++) {
        cr_expect_neq(k.fence[i], 0, "%s held by the multilock", names[i]);
        cr_expect_eq(rs_mutex_trylock(o[i]), EBUSY);
    }

    /* and a timedlock from here waits for it, then succeeds within its deadline */
    rs_mutex_t *p[3];
    for (int i = 0; i < 3; i++)
        p[i] = new_mutex(c2, names[i]);
    rs_multilock_t *ml2 = new_ml(p, 3);
    mlcall_t k2 = {.ml = ml2, .parts = p, .n = 3, .op = 2, .deadline = tu_abs_in(15000)};
    mlcall_start(&k2);
    cr_assert(wait_zcard(&s, "w1", 1, 10000), "the second multilock queued for w1");
    cr_assert(mlcall_join(&k, 10000), "first multilock thread");
    cr_expect_eq(k.unlock_rc, 0);
    cr_assert(tu_wait_atomic(&k2.done, 1, 10000));
    cr_expect_eq(k2.rc, 0, "timedlock after the release: %d", k2.rc);
    cr_assert(mlcall_join(&k2, 10000));
    cr_expect_eq(k2.unlock_rc, 0);

    rs_multilock_destroy(ml);
    rs_multilock_destroy(ml2);
    for (int i = 0; i < 3; i++) {
        rs_mutex_destroy(m[i]);
        rs_mutex_destroy(o[i]);
        rs_mutex_destroy(p[i]);
    }
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 5. Parts on two clients of two servers                                                 */

Test(multilock, two_servers)
{
    ts_server_t s1, s2;
    tu_start_server(&s1);
    tu_start_server(&s2);
    rs_client_t *c1 = open_client(&s1, 5000, NULL);
    rs_client_t *c2 = open_client(&s2, 5000, NULL);
    rs_client_t *o1 = open_client(&s1, 5000, NULL);
    rs_client_t *o2 = open_client(&s2, 5000, NULL);
    /* "x" on both servers: two different mutexes, not a duplicate */
    rs_mutex_t *m[3] = {new_mutex(c2, "x"), new_mutex(c1, "x"), new_mutex(c2, "y")};
    rs_mutex_t *o[3] = {new_mutex(o2, "x"), new_mutex(o1, "x"), new_mutex(o2, "y")};
    const ts_server_t *srv[3] = {&s2, &s1, &s2};
    const char *names[3] = {"x", "x", "y"};
    rs_multilock_t *ml = new_ml(m, 3);

    int rc = rs_multilock_lock(ml);
    cr_assert_eq(rc, 0, "lock: %d %s", rc, rs_client_lasterror(NULL));
    for (int i = 0; i < 3; i++) {
        uint64_t f = rs_mutex_fence(m[i]);
        cr_expect_neq(f, 0, "part %d has a token", i);
        char buf[32];
        cr_expect_not_null(ts_cmd_str(srv[i], buf, sizeof buf, "HGET rs:{%s}:mutex f", names[i]));
        cr_expect_eq(strtoull(buf, NULL, 10), f, "part %d's token is on its own server", i);
        cr_expect_eq(rs_mutex_trylock(o[i]), EBUSY, "part %d is held", i);
    }
    cr_expect_eq(ts_cmd_int(&s1, "EXISTS rs:{y}:mutex"), 0, "nothing of y on the first server");
    rc = rs_multilock_unlock(ml);
    cr_expect_eq(rc, 0, "unlock: %d %s", rc, rs_client_lasterror(NULL));
    for (int i = 0; i < 3; i++)
        cr_expect(is_free(o[i]), "part %d released", i);

    /* all or nothing across servers: with y (second server) held, x of both is left free */
    cr_assert_eq(rs_mutex_lock(o[2]), 0);
    cr_expect_eq(rs_multilock_trylock(ml), EBUSY);
    cr_expect(is_free(o[0]) && is_free(o[1]), "x on both servers left free");
    struct timespec dl = tu_abs_in(500);
    cr_expect_eq(rs_multilock_timedlock(ml, &dl), ETIMEDOUT);
    cr_expect(is_free(o[0]) && is_free(o[1]), "x on both servers left free");
    cr_assert_eq(rs_mutex_unlock(o[2]), 0);
    cr_expect_eq(rs_multilock_trylock(ml), 0);
    cr_expect_eq(rs_multilock_unlock(ml), 0);

    rs_multilock_destroy(ml);
    for (int i = 0; i < 3; i++) {
        rs_mutex_destroy(m[i]);
        rs_mutex_destroy(o[i]);
    }
    rs_client_close(c1);
    rs_client_close(c2);
    rs_client_close(o1);
    rs_client_close(o2);
    ts_server_stop(&s1);
    ts_server_stop(&s2);
}

/* ------------------------------------------------------------------------------------- */
/* 8. One multilock handle shared by the threads of a process                              */

typedef struct shared_arg {
    rs_multilock_t *ml;
    atomic_int *inside;
    atomic_int *overlaps;
    int rc;
} shared_arg_t;

static void *shared_main(void *arg)
{
    shared_arg_t *a = arg;
    for (int i = 0; i < 15 && a->rc == 0; i++) {
        int rc = rs_multilock_lock(a->ml);
        if (rc) {
            a->rc = rc;
            break;
        }
        if (atomic_fetch_add(a->inside, 1) != 0)
            atomic_fetch_add(a->overlaps, 1);
        tu_sleep_ms(1);
        atomic_fetch_sub(a->inside, 1);
        a->rc = rs_multilock_unlock(a->ml);
    }
    return NULL;
}

Test(multilock, shared_handle_threads)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_client(&s, 5000, NULL);
    rs_mutex_t *m[2] = {new_mutex(c, "s2"), new_mutex(c, "s1")};
    rs_multilock_t *ml = new_ml(m, 2);
    atomic_int inside = 0, overlaps = 0;
    shared_arg_t a[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (shared_arg_t){ml, &inside, &overlaps, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, shared_main, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(a[i].rc, 0, "thread %d: %d", i, a[i].rc);
    }
    cr_expect_eq(atomic_load(&overlaps), 0, "two threads inside at once");
    cr_expect_eq(rs_multilock_destroy(ml), 0);
    rs_mutex_destroy(m[0]);
    rs_mutex_destroy(m[1]);
    rs_client_close(c);
    ts_server_stop(&s);
}
