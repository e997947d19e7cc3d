/*
 * test_sem.c - Criterion tests of the distributed semaphore (rs_sem_*), from the public API
 * down to its Lua script (called directly with EVAL in sem/script_*).
 *
 * Every test starts its own redis-server on a free port and stops it. Cross-process tests
 * fork workers; each child opens its own client after fork() and reports through its exit
 * status (or a pipe). Criterion assertions are only made in the test's main thread; helper
 * threads and children record results for it.
 *
 * Timing bounds are deliberately generous: the suite runs as -j6 on small, noisy machines.
 *
 * The suite "sem" spans test_sem.c (trywait, timedwait, post, getvalue and post_n,
 * setsize, init and attach, bad input), test_sem_queue.c (never more than the size, FIFO
 * service, a request for several permits not starved, no polling), test_sem_lease.c (a
 * killed holder, lost permits, a post retried after a stall, close) and test_sem_script.c
 * (the Lua script called directly, WRONGTYPE); their shared helpers are in test_sem.h.
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

#include "redis_server.h"
#include "redisync.h"
#include "scripts.h"
#include "test_assert.h"
#include "test_sem.h"

TestSuite(sem, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* trywait: EAGAIN when none is free, and never ahead of a queued waiter                  */

Test(sem, trywait)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = new_sem(c, "tw", 1);
    cr_expect_eq(rs_sem_trywait(sem), 0);
    cr_expect_eq(rs_sem_trywait(sem), EAGAIN, "second permit by the same thread");
    cr_expect_eq(in_thread(sem, 0), EAGAIN, "another thread");
    cr_expect_eq(rs_sem_post(sem), 0);
    cr_expect_eq(in_thread(sem, 0), 0, "another thread, once free");
    cr_expect_eq(rs_sem_trywait(sem), EAGAIN);
    cr_expect_eq(zcard_q(&s, "tw"), 0, "trywait queued");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{tw}:sem:qi"), 0, "trywait wrote queue info");

    /* a waiter for 2 of 2 is first: the one free permit is not for a trywait */
    rs_sem_t *s2 = new_sem(c, "tj", 2);
    cr_assert_eq(rs_sem_wait(s2), 0);
    waiter_t B = {.s = s2, .n = 2, .deadline_ms = 15000, .wait_release = 1};
    waiter_start(&B);
    cr_assert(wait_zcard(&s, "tj", 1, 5000), "B did not queue");
    cr_expect_eq(value_of(s2), 1);
    cr_expect_eq(in_thread(s2, 0), EAGAIN, "trywait jumped ahead of a queued waiter");
    cr_expect_eq(atomic_load(&B.got), 0);
    cr_expect_eq(rs_sem_post(s2), 0);
    cr_assert(tu_wait_atomic(&B.got, 1, 5000), "B was not served");
    cr_expect_eq(B.rc, 0, "B: %d %s", B.rc, B.err);
    cr_expect_eq(value_of(s2), 0);
    atomic_store(&B.release, 1);
    cr_assert(waiter_join(&B, 5000));
    cr_expect_eq(B.post_rc, 0);
    cr_expect_eq(value_of(s2), 2);
    /* "tw" is still held by the thread of in_thread that took it and exited: the handle is
     * busy until the client is closed (which releases it in Redis) */
    cr_expect_eq(rs_sem_destroy(sem), EBUSY);
    cr_expect_eq(rs_client_close(c), 0);
    cr_expect_eq(rs_sem_destroy(sem), 0);
    cr_expect_eq(rs_sem_destroy(s2), 0);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* timedwait: ETIMEDOUT, leaves the queue, and unblocks those behind it                   */

Test(sem, timedwait_timeout)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = new_sem(c, "to", 1);
    cr_assert_eq(rs_sem_wait(sem), 0);

    waiter_t A = {.s = sem, .n = 1, .deadline_ms = 400};
    waiter_start(&A);
    cr_assert(waiter_join(&A, 10000));
    cr_expect_eq(A.rc, ETIMEDOUT, "timedwait: %d %s", A.rc, A.err);
    cr_expect_geq(A.t_got - A.t_start, 350, "timed out after %lld ms", A.t_got - A.t_start);
    cr_expect_lt(A.t_got - A.t_start, 3000, "timed out after %lld ms", A.t_got - A.t_start);
    cr_expect_eq(zcard_q(&s, "to"), 0, "the timed-out waiter stayed queued");
    cr_expect_eq(ts_cmd_int(&s, "HLEN rs:{to}:sem:qi"), 0);

    /* a deadline already past: one attempt, never queued */
    struct timespec past = tu_abs_in(-1000);
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_sem_timedwait(sem, &past), ETIMEDOUT);
    cr_expect_eq(rs_sem_timedwait_n(sem, 1, &past), ETIMEDOUT);
    cr_expect_lt(tu_mono_ms() - t0, 1000);
    cr_expect_eq(zcard_q(&s, "to"), 0);
    cr_expect_eq(rs_sem_post(sem), 0);

    /* a head waiting for 2 of 2 times out: the single waiter behind it is served then */
    rs_sem_t *s2 = new_sem(c, "tb", 2);
    cr_assert_eq(rs_sem_wait(s2), 0);
    waiter_t big = {.s = s2, .n = 2, .deadline_ms = 800};
    waiter_start(&big);
    cr_assert(wait_zcard(&s, "tb", 1, 5000), "big did not queue");
    waiter_t one = {.s = s2, .n = 1, .deadline_ms = 15000, .wait_release = 1};
    waiter_start(&one);
    cr_assert(wait_zcard(&s, "tb", 2, 5000), "one did not queue");
    cr_assert(waiter_join(&big, 10000));
    cr_expect_eq(big.rc, ETIMEDOUT, "big: %d %s", big.rc, big.err);
    cr_assert(tu_wait_atomic(&one.got, 1, 5000),
              "the waiter behind the timed-out head was not served");
    cr_expect_eq(one.rc, 0, "one: %d %s", one.rc, one.err);
    cr_expect_lt(one.t_got - big.t_got, 1500, "served %lld ms after the head left",
                 one.t_got - big.t_got);
    atomic_store(&one.release, 1);
    cr_assert(waiter_join(&one, 5000));
    cr_expect_eq(rs_sem_post(s2), 0);
    cr_expect_eq(value_of(s2), 2);
    rs_sem_destroy(s2);
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* post: EPERM without a permit, and post of part of an acquisition                       */

Test(sem, post_eperm)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = new_sem(c, "pe", 3);
    cr_expect_eq(rs_sem_post(sem), EPERM, "post with no permit");
    cr_expect_eq(rs_sem_post_n(sem, 2), EPERM);
    cr_assert_eq(rs_sem_wait(sem), 0);
    cr_expect_eq(in_thread(sem, 1), EPERM, "post by another thread");
    cr_expect_eq(rs_sem_post_n(sem, 2), EPERM, "post of 2 with 1 held");
    cr_expect_eq(value_of(sem), 2, "a refused post gave something back");
    cr_expect_eq(rs_sem_post(sem), 0);
    cr_expect_eq(rs_sem_post(sem), EPERM, "post after the permit went back");
    cr_expect_eq(value_of(sem), 3);
    cr_expect_eq(rs_sem_destroy(sem), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* Holder records with permits (an owner's last release stays a while as "r:TOKENHASH"). */
static int live_holds(const ts_server_t *s, const char *name)
{
    redisContext *k = ts_connect(s);
    cr_assert_not_null(k);
    redisReply *r = redisCommand(k, "HGETALL rs:{%s}:sem:hi", name);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    int n = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        n += strncmp(r->element[i]->str, "r:", 2) != 0 && atoi(r->element[i + 1]->str) > 0;
    freeReplyObject(r);
    redisFree(k);
    return n;
}

Test(sem, getvalue_post_n_and_fence)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = new_sem(c, "gv", 5);
    cr_expect_eq(value_of(sem), 5);
    cr_expect_eq(rs_sem_fence(sem), 0);
    cr_assert_eq(rs_sem_timedwait_n(sem, 3, NULL), 0);
    uint64_t f1 = rs_sem_fence(sem);
    cr_expect_neq(f1, 0);
    cr_expect_eq(value_of(sem), 2);
    cr_assert_eq(rs_sem_wait(sem), 0);
    uint64_t f2 = rs_sem_fence(sem);
    cr_expect_gt(f2, f1, "the latest permit's token");
    cr_expect_eq(value_of(sem), 1);
    cr_expect_eq(rs_sem_destroy(sem), EBUSY, "destroy while holding");

    cr_expect_eq(rs_sem_post(sem), 0, "post of the latest acquisition (1 permit)");
    cr_expect_eq(rs_sem_fence(sem), f1);
    cr_expect_eq(value_of(sem), 2);
    cr_expect_eq(rs_sem_post(sem), 0, "3 -> 2");
    cr_expect_eq(rs_sem_fence(sem), f1, "the rest of the acquisition keeps its token");
    cr_expect_eq(value_of(sem), 3);
    /* the hold is one lease of 2 permits now */
    cr_expect_eq(live_holds(&s, "gv"), 1);
    tu_sleep_ms(2500); /* past the lease: renewed as one */
    cr_expect_eq(value_of(sem), 3);

    /* post_n across acquisitions: the latest first */
    cr_assert_eq(rs_sem_wait(sem), 0);
    cr_expect_eq(value_of(sem), 2);
    cr_expect_eq(rs_sem_post_n(sem, 4), EPERM, "4 with 3 held");
    cr_expect_eq(rs_sem_post_n(sem, 3), 0);
    cr_expect_eq(rs_sem_fence(sem), 0);
    cr_expect_eq(value_of(sem), 5);
    cr_expect_eq(rs_sem_post(sem), EPERM);
    cr_expect_eq(rs_sem_destroy(sem), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* setsize up and down                                                                    */

Test(sem, setsize)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = new_sem(c, "sz", 2);
    cr_assert_eq(rs_sem_wait(sem), 0);
    cr_assert_eq(rs_sem_wait(sem), 0);
    cr_expect_eq(rs_sem_trywait(sem), EAGAIN);

    /* up: a waiter queued for the third permit is served by the resize */
    waiter_t W3 = {.s = sem, .n = 1, .deadline_ms = 15000, .wait_release = 1};
    waiter_start(&W3);
    cr_assert(wait_zcard(&s, "sz", 1, 5000), "W3 did not queue");
    cr_expect_eq(rs_sem_setsize(sem, 4), 0);
    cr_assert(tu_wait_atomic(&W3.got, 1, 3000), "growing did not serve the waiter");
    cr_expect_eq(W3.rc, 0, "W3: %d %s", W3.rc, W3.err);
    cr_expect_eq(value_of(sem), 1);
    cr_expect_eq(rs_sem_trywait(sem), 0);
    cr_expect_eq(value_of(sem), 0);

    /* down to 2 with 4 held: holders keep theirs; new waits block until below 2 */
    cr_expect_eq(rs_sem_setsize(sem, 2), 0);
    cr_expect_eq(value_of(sem), 0);
    cr_expect_eq(rs_sem_trywait(sem), EAGAIN);
    waiter_t W = {.s = sem, .n = 1, .deadline_ms = 15000, .wait_release = 1};
    waiter_start(&W);
    cr_assert(wait_zcard(&s, "sz", 1, 5000), "W did not queue");
    atomic_store(&W3.release, 1); /* 3 held */
    cr_assert(waiter_join(&W3, 5000));
    cr_expect_eq(W3.post_rc, 0);
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&W.got), 0, "served with 3 held of 2");
    cr_expect_eq(rs_sem_post(sem), 0); /* 2 held */
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&W.got), 0, "served with 2 held of 2");
    cr_expect_eq(rs_sem_trywait(sem), EAGAIN);
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_sem_post(sem), 0); /* 1 held */
    cr_assert(tu_wait_atomic(&W.got, 1, 3000), "not served with 1 held of 2");
    cr_expect_eq(W.rc, 0, "W: %d %s", W.rc, W.err);
    cr_expect_lt(W.t_got - t0, 1500);
    cr_expect_eq(value_of(sem), 0);
    atomic_store(&W.release, 1);
    cr_assert(waiter_join(&W, 5000));
    cr_expect_eq(rs_sem_post(sem), 0);
    cr_expect_eq(value_of(sem), 2);

    /* a request for more than the size: EINVAL, at once and for a queued one */
    cr_expect_eq(rs_sem_timedwait_n(sem, 3, NULL), EINVAL);
    cr_expect_eq(zcard_q(&s, "sz"), 0);
    cr_expect_eq(rs_sem_setsize(sem, 3), 0);
    cr_assert_eq(rs_sem_wait(sem), 0);
    waiter_t W2 = {.s = sem, .n = 3, .deadline_ms = 15000};
    waiter_start(&W2);
    cr_assert(wait_zcard(&s, "sz", 1, 5000), "W2 did not queue");
    cr_expect_eq(rs_sem_setsize(sem, 2), 0);
    cr_assert(waiter_join(&W2, 5000), "a waiter for more than the new size stayed");
    cr_expect_eq(W2.rc, EINVAL, "W2: %d %s", W2.rc, W2.err);
    cr_expect_eq(zcard_q(&s, "sz"), 0);
    cr_expect_eq(rs_sem_post(sem), 0);
    cr_expect_eq(rs_sem_setsize(sem, 0), EINVAL);
    cr_expect_eq(value_of(sem), 2);
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* init: create, attach, ENOENT; a vanished semaphore is re-created                       */

Test(sem, init_attach_and_recreate)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = (rs_sem_t *)&s; /* must be set to NULL */
    cr_expect_eq(rs_sem_init(&sem, c, "ia", 0), ENOENT, "attach to an absent semaphore");
    cr_expect_null(sem);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{ia}:sem"), 0, "attaching created it");

    rs_sem_t *s3 = new_sem(c, "ia", 3);
    rs_sem_t *s0 = new_sem(c, "ia", 0);
    rs_sem_t *s7 = new_sem(c, "ia", 7);
    cr_expect_eq(value_of(s0), 3, "attached");
    cr_expect_eq(value_of(s7), 3, "an existing semaphore keeps its size");
    long long pttl = ts_cmd_int(&s, "PTTL rs:{ia}:sem");
    cr_expect_gt(pttl, 6LL * 86400 * 1000, "size record TTL %lld ms", pttl);
    cr_expect_leq(pttl, 7LL * 86400 * 1000);

    /* it vanishes (as after a long disuse) */
    cr_expect_eq(ts_cmd_int(&s, "DEL rs:{ia}:sem"), 1);
    cr_expect_eq(rs_sem_trywait(s0), ENOENT, "an attach-only handle re-created it");
    int v = -1;
    cr_expect_eq(rs_sem_getvalue(s0, &v), ENOENT);
    cr_expect_eq(rs_sem_trywait(s3), 0, "re-created with the handle's own size");
    cr_expect_eq(value_of(s0), 2);
    cr_expect_eq(rs_sem_post(s3), 0);
    cr_expect_eq(ts_cmd_int(&s, "DEL rs:{ia}:sem"), 1);
    cr_expect_eq(value_of(s7), 7, "getvalue re-creates with the handle's size");
    rs_sem_destroy(s0);
    rs_sem_destroy(s3);
    rs_sem_destroy(s7);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Bad input                                                                              */

Test(sem, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = NULL;
    struct timespec ok = tu_abs_in(1000), bad = tu_abs_in(1000);
    bad.tv_nsec = 1000000000L;
    int v = 0;

    cr_expect_eq(rs_sem_init(NULL, c, "bi", 1), EINVAL);
    cr_expect_eq(rs_sem_init(&sem, NULL, "bi", 1), EINVAL);
    cr_expect_eq(rs_sem_init(&sem, c, NULL, 1), EINVAL);
    cr_expect_eq(rs_sem_init(&sem, c, "", 1), EINVAL);
    cr_expect_eq(rs_sem_init(&sem, c, "bi", 0x80000000u), EINVAL);
    cr_expect_null(sem);

    cr_expect_eq(rs_sem_wait(NULL), EINVAL);
    cr_expect_eq(rs_sem_trywait(NULL), EINVAL);
    cr_expect_eq(rs_sem_timedwait(NULL, &ok), EINVAL);
    cr_expect_eq(rs_sem_timedwait_n(NULL, 1, &ok), EINVAL);
    cr_expect_eq(rs_sem_post(NULL), EINVAL);
    cr_expect_eq(rs_sem_post_n(NULL, 1), EINVAL);
    cr_expect_eq(rs_sem_getvalue(NULL, &v), EINVAL);
    cr_expect_eq(rs_sem_setsize(NULL, 1), EINVAL);
    cr_expect_eq(rs_sem_fence(NULL), 0);
    cr_expect_eq(rs_sem_destroy(NULL), 0);

    sem = new_sem(c, "bi", 2);
    cr_expect_eq(rs_sem_timedwait(sem, NULL), EINVAL, "NULL deadline");
    cr_expect_eq(rs_sem_timedwait(sem, &bad), EINVAL, "tv_nsec out of range");
    bad.tv_nsec = -1;
    cr_expect_eq(rs_sem_timedwait_n(sem, 1, &bad), EINVAL, "negative tv_nsec");
    cr_expect_eq(rs_sem_timedwait_n(sem, 0, NULL), EINVAL, "n = 0");
    cr_expect_eq(rs_sem_timedwait_n(sem, 3, NULL), EINVAL, "n above the size");
    cr_expect_eq(rs_sem_timedwait_n(sem, 0x80000000u, NULL), EINVAL);
    cr_expect_eq(rs_sem_post_n(sem, 0), EINVAL);
    cr_expect_eq(rs_sem_getvalue(sem, NULL), EINVAL);
    cr_expect_eq(rs_sem_setsize(sem, 0), EINVAL);
    cr_expect_eq(zcard_q(&s, "bi"), 0);
    cr_expect_eq(value_of(sem), 2, "bad input took a permit");
    /* n = size is fine */
    cr_expect_eq(rs_sem_timedwait_n(sem, 2, &ok), 0);
    cr_expect_eq(rs_sem_post_n(sem, 2), 0);
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}
