/*
 * test_sem_queue.c - semaphore tests of holders and the queue: never more than
 * the size across processes, FIFO service, a request for 3 permits not starved by single
 * ones, waiters that do not poll.
 * (moved from test_sem.c; suite "sem", shared helpers in test_sem.h).
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

/* ------------------------------------------------------------------------------------- */
/* Never more than N holders, and N are reached (forked processes)                        */

#define BH_PROCS 6
#define BH_ITERS 12
#define BH_SIZE 3

/* INCR the "inside" counter and raise the "max" key to it, atomically. */
static const char *const incr_max_lua =
    "local v = redis.call('INCR', KEYS[1]) "
    "if v > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], v) end "
    "return v";

static int bounded_child_main(void *arg)
{
    const ts_server_t *s = arg;
    rs_client_t *c = tu_open_client_ex(s, 2000, 0, NULL);
    if (!c)
        return 10;
    redisContext *k = ts_connect(s);
    if (!k)
        return 11;
    rs_sem_t *sem;
    if (rs_sem_init(&sem, c, "bh", BH_SIZE) != 0)
        return 12;
    for (int i = 0; i < BH_ITERS; i++) {
        int rc = rs_sem_wait(sem);
        if (rc != 0) {
            fprintf(stderr, "bounded child: wait %d %s\n", rc, rs_client_lasterror(c));
            return 20;
        }
        redisReply *r = redisCommand(k, "EVAL %s 2 t:in t:max", incr_max_lua);
        if (!r || r->type != REDIS_REPLY_INTEGER)
            return 21;
        freeReplyObject(r);
        tu_sleep_ms(15 + (getpid() + i) % 10);
        r = redisCommand(k, "DECR t:in");
        if (!r || r->type != REDIS_REPLY_INTEGER)
            return 22;
        freeReplyObject(r);
        rc = rs_sem_post(sem);
        if (rc != 0) {
            fprintf(stderr, "bounded child: post %d %s\n", rc, rs_client_lasterror(c));
            return 23;
        }
    }
    redisFree(k);
    if (rs_sem_destroy(sem) != 0)
        return 24;
    rs_client_close(c);
    return 0;
}

Test(sem, never_more_than_size, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sem = new_sem(c, "bh", BH_SIZE);
    pid_t pids[BH_PROCS];
    for (int i = 0; i < BH_PROCS; i++)
        pids[i] = tu_spawn(bounded_child_main, &s);
    for (int i = 0; i < BH_PROCS; i++)
        tu_assert_exit0(pids[i], tu_reap(pids[i], 40000), "worker");
    cr_expect_eq(ts_cmd_int(&s, "GET t:max"), BH_SIZE, "most holders at once: %lld (size %d)",
                 ts_cmd_int(&s, "GET t:max"), BH_SIZE);
    cr_expect_eq(ts_cmd_int(&s, "GET t:in"), 0);
    cr_expect_eq(value_of(sem), BH_SIZE, "permits free after every worker posted");
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* FIFO service                                                                           */

Test(sem, fifo_order)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 2000, 0, NULL);
    rs_client_t *cb = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sa = new_sem(ca, "ff", 1);
    rs_sem_t *sb = new_sem(cb, "ff", 0);
    cr_assert_eq(rs_sem_wait(sa), 0);

    enum { NW = 5 };
    atomic_int order = 0;
    waiter_t W[NW];
    memset(W, 0, sizeof W);
    for (int i = 0; i < NW; i++) {
        /* alternate clients; the handle is shared by the threads of one client */
        W[i].s = i % 2 ? sb : sa;
        W[i].n = 1;
        W[i].deadline_ms = 20000;
        W[i].hold_ms = 30;
        W[i].order = &order;
        waiter_start(&W[i]);
        cr_assert(wait_zcard(&s, "ff", i + 1, 5000), "waiter %d did not queue", i);
    }
    cr_expect_eq(rs_sem_post(sa), 0);
    for (int i = 0; i < NW; i++) {
        cr_assert(waiter_join(&W[i], 15000), "waiter %d did not finish", i);
        cr_expect_eq(W[i].rc, 0, "waiter %d: %d %s", i, W[i].rc, W[i].err);
        cr_expect_eq(W[i].post_rc, 0, "waiter %d post", i);
        cr_expect_eq(W[i].pos, i, "waiter %d was served as number %d", i, W[i].pos);
        if (i > 0)
            cr_expect_gt(W[i].fence, W[i - 1].fence, "tokens rise in grant order");
    }
    cr_expect_eq(value_of(sa), 1);
    cr_expect_eq(zcard_q(&s, "ff"), 0);
    rs_sem_destroy(sa);
    rs_sem_destroy(sb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* A request for 3 permits is not starved by a stream of single-permit requests           */

typedef struct small {
    rs_sem_t *s;
    int id;
    atomic_int *stop, *inside;
    atomic_int rounds, errors;
    pthread_t th;
} small_t;

static void *small_main(void *arg)
{
    small_t *S = arg;
    while (!atomic_load(S->stop)) {
        struct timespec dl = tu_abs_in(20000);
        if (rs_sem_timedwait(S->s, &dl) != 0) {
            atomic_fetch_add(&S->errors, 1);
            tu_sleep_ms(50);
            continue;
        }
        atomic_fetch_add(S->inside, 1);
        /* uneven holds, so the holders do not fall into step and post together */
        tu_sleep_ms(20 + (S->id * 11 + atomic_load(&S->rounds) * 7) % 30);
        atomic_fetch_sub(S->inside, 1);
        if (rs_sem_post(S->s) != 0)
            atomic_fetch_add(&S->errors, 1);
        atomic_fetch_add(&S->rounds, 1);
    }
    return NULL;
}

Test(sem, multi_not_starved)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 2000, 0, NULL);
    rs_client_t *cb = tu_open_client(&s, 2000, 0, NULL);
    rs_sem_t *sa = new_sem(ca, "ms", 3);
    rs_sem_t *sb = new_sem(cb, "ms", 3);
    enum { NS = 6 };
    atomic_int stop = 0, inside = 0;
    small_t S[NS];
    memset(S, 0, sizeof S);
    for (int i = 0; i < NS; i++) {
        S[i].s = sa;
        S[i].id = i;
        S[i].stop = &stop;
        S[i].inside = &inside;
        cr_assert_eq(pthread_create(&S[i].th, NULL, small_main, &S[i]), 0);
    }
    /* let the stream run: the semaphore is saturated and single requests queue */
    long long until = tu_mono_ms() + 5000;
    int total = 0;
    while (tu_mono_ms() < until && total < 2 * NS) {
        tu_sleep_ms(20);
        total = 0;
        for (int i = 0; i < NS; i++)
            total += atomic_load(&S[i].rounds);
    }
    cr_expect_geq(total, 2 * NS, "the single-permit stream did not run");

    long long t0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(10000);
    int rc = rs_sem_timedwait_n(sb, 3, &dl);
    long long el = tu_mono_ms() - t0;
    cr_expect_eq(rc, 0, "3 permits: %d %s", rc, rs_client_lasterror(cb));
    cr_expect_lt(el, 3000, "3 permits took %lld ms", el);
    if (rc == 0) {
        /* it has all of them: no single holder may be inside meanwhile */
        int bad = 0;
        for (int i = 0; i < 20; i++) {
            if (atomic_load(&inside) != 0)
                bad++;
            tu_sleep_ms(5);
        }
        cr_expect_eq(bad, 0, "single holders inside while 3 of 3 were held");
        cr_expect_eq(rs_sem_post_n(sb, 3), 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < NS; i++) {
        pthread_join(S[i].th, NULL);
        cr_expect_eq(atomic_load(&S[i].errors), 0, "small %d had errors", i);
    }
    cr_expect_eq(value_of(sb), 3);
    rs_sem_destroy(sa);
    rs_sem_destroy(sb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* A waiter does not poll                                                                 */

Test(sem, waiters_do_not_poll)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 3000, 0, NULL);
    rs_client_t *cb = tu_open_client(&s, 3000, 0, NULL);
    rs_sem_t *sa = new_sem(ca, "np", 1);
    rs_sem_t *sb = new_sem(cb, "np", 1);
    cr_assert_eq(rs_sem_wait(sa), 0);

    waiter_t B = {.s = sb, .n = 1, .wait_release = 1};
    waiter_start(&B);
    cr_assert(wait_zcard(&s, "np", 1, 5000), "B did not queue");
    tu_sleep_ms(300);
    long long before = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_assert_geq(before, 1);
    tu_sleep_ms(2200);
    long long after = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    /* renewals only: the holder's and the waiter's entry, one each per second */
    cr_expect_leq(after - before, 10, "%lld EVALSHA calls in 2.2 s with one waiter",
                  after - before);
    cr_expect_eq(atomic_load(&B.got), 0, "B got the permit while A held it");

    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_sem_post(sa), 0);
    cr_assert(tu_wait_atomic(&B.got, 1, 5000), "B was not woken");
    cr_expect_eq(B.rc, 0, "B: %d %s", B.rc, B.err);
    cr_expect_lt(B.t_got - t0, 1000, "B got it %lld ms after the post", B.t_got - t0);
    atomic_store(&B.release, 1);
    cr_assert(waiter_join(&B, 5000));
    cr_expect_eq(B.post_rc, 0);
    rs_sem_destroy(sa);
    rs_sem_destroy(sb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}
