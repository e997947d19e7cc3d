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

TestSuite(sem, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static rs_sem_t *new_sem(rs_client_t *c, const char *name, unsigned permits)
{
    rs_sem_t *s = NULL;
    int rc = rs_sem_init(&s, c, name, permits);
    cr_assert_eq(rc, 0, "rs_sem_init(%s, %u): %d %s", name, permits, rc, rs_client_lasterror(c));
    cr_assert_not_null(s);
    return s;
}

static int value_of(rs_sem_t *s)
{
    int v = -99;
    int rc = rs_sem_getvalue(s, &v);
    cr_assert_eq(rc, 0, "rs_sem_getvalue: %d %s", rc, rs_client_lasterror(NULL));
    return v;
}

static long long zcard_q(const ts_server_t *s, const char *name)
{
    return tu_zcard_q(s, "sem", name);
}

static int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
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

static void *waiter_main(void *arg)
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

static void waiter_start(waiter_t *W)
{
    tu_thread_start(&W->th, waiter_main, W);
}

/* Joins W if it finishes within timeout_ms; 1 if joined. */
static int waiter_join(waiter_t *W, long timeout_ms)
{
    return tu_thread_join(W->th, &W->done, timeout_ms);
}

/* ---- one call in another thread ----------------------------------------------------- */
typedef struct call1 {
    rs_sem_t *s;
    int op; /* 0 trywait, 1 post */
    int rc;
} call1_t;

static void *call1_main(void *arg)
{
    call1_t *k = arg;
    k->rc = k->op == 0 ? rs_sem_trywait(k->s) : rs_sem_post(k->s);
    return NULL;
}

static int in_thread(rs_sem_t *s, int op)
{
    call1_t k = {.s = s, .op = op, .rc = -1};
    tu_thread_run(call1_main, &k);
    return k.rc;
}

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
/* The permits of a kill -9'd holder come back when their lease runs out                  */

typedef struct kill_child {
    const ts_server_t *s;
    int fd;
} kill_child_t;

static int kill9_child_main(void *arg)
{
    kill_child_t *k = arg;
    rs_client_t *c = tu_open_client_ex(k->s, 500, 0, NULL);
    if (!c)
        return 10;
    rs_sem_t *sem;
    if (rs_sem_init(&sem, c, "k9", 3) != 0)
        return 11;
    if (rs_sem_timedwait_n(sem, 2, NULL) != 0)
        return 12;
    uint64_t f = rs_sem_fence(sem);
    if (write(k->fd, &f, sizeof f) != (ssize_t)sizeof f)
        return 13;
    for (;;)
        pause();
}

Test(sem, holder_killed, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    /* this process holds one permit of 3 throughout (its renewals keep the holder keys
     * alive, so the dead holder's entry must be purged by its own expiry) */
    rs_client_t *c = tu_open_client(&s, 1000, 0, NULL);
    rs_sem_t *sem = new_sem(c, "k9", 3);
    cr_assert_eq(rs_sem_wait(sem), 0);
    /* let the threads the wait just started settle before forking: under ASan a child
     * forked while a thread is being created can hang on ASan's thread registry lock
     * (gcc 12's libasan has no fork handling) */
    tu_sleep_ms(200);

    int p[2];
    cr_assert_eq(pipe(p), 0);
    kill_child_t kc = {&s, p[1]};
    pid_t pid = tu_spawn(kill9_child_main, &kc);
    uint64_t cf = 0;
    cr_assert(tu_read_full(p[0], &cf, sizeof cf, 10000), "the child did not take its permits");
    cr_expect_neq(cf, 0);
    cr_expect_eq(rs_sem_trywait(sem), EAGAIN, "a permit was free while 3 of 3 were held");
    cr_expect_eq(value_of(sem), 0);

    /* one waiter queued before the kill, one acquisition after it: both are served */
    waiter_t B = {.s = sem, .n = 1, .deadline_ms = 10000, .wait_release = 1};
    waiter_start(&B);
    cr_assert(wait_zcard(&s, "k9", 1, 5000), "B did not queue");
    tu_sleep_ms(700); /* past the child's lease: it is renewed */
    cr_expect_eq(atomic_load(&B.got), 0, "B got a permit while the child held two");
    kill(pid, SIGKILL);
    long long t0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(10000);
    int rc = rs_sem_timedwait(sem, &dl);
    long long el = tu_mono_ms() - t0;
    cr_assert_eq(rc, 0, "wait after the holder died: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(el, 500 + 2500, "took %lld ms (lease 500)", el);
    cr_expect_gt(rs_sem_fence(sem), cf, "token above the dead holder's");
    cr_assert(tu_wait_atomic(&B.got, 1, 5000), "B was not served");
    cr_expect_eq(B.rc, 0, "B: %d %s", B.rc, B.err);
    cr_expect_lt(B.t_got - t0, 500 + 2500, "B took %lld ms (lease 500)", B.t_got - t0);
    cr_expect_eq(value_of(sem), 0);
    atomic_store(&B.release, 1);
    cr_assert(waiter_join(&B, 5000));
    cr_expect_eq(B.post_rc, 0);
    cr_expect_eq(rs_sem_post_n(sem, 2), 0);
    cr_expect_eq(value_of(sem), 3);

    int st = tu_reap(pid, 5000);
    cr_expect(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status 0x%x", st);
    close(p[0]);
    close(p[1]);
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

/* ------------------------------------------------------------------------------------- */
/* A lost permit: RS_ELOST once, then EPERM; on_lost once                                 */

Test(sem, lost_permits)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc = {0};
    rs_client_t *c = tu_open_client(&s, 600, 0, &lc);
    rs_sem_t *sem = new_sem(c, "lp", 3);
    cr_assert_eq(rs_sem_wait(sem), 0);
    cr_assert_eq(rs_sem_timedwait_n(sem, 2, NULL), 0);
    /* both holds vanish from Redis */
    cr_expect_eq(ts_cmd_int(&s, "DEL rs:{lp}:sem:holders rs:{lp}:sem:hi"), 2);
    cr_assert(tu_wait_atomic(&lc.n, 2, 5000), "on_lost was not called for both holds");
    cr_expect_eq(rs_sem_post(sem), RS_ELOST, "post of part of a lost hold of 2");
    cr_expect_eq(rs_sem_post(sem), RS_ELOST, "post of a lost hold of 1");
    cr_expect_eq(rs_sem_post(sem), EPERM);
    cr_expect_eq(rs_sem_fence(sem), 0);
    cr_expect_eq(value_of(sem), 3);
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&lc.n), 2, "on_lost called more than once per hold");
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* A post whose reply never came (server stalled): RS_ECONN, the hold is kept as it was, and
 * the post sent again later gives back one permit in all, not two. */
Test(sem, post_retried_after_stall)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 6000, 500, NULL);
    rs_sem_t *sem = new_sem(c, "rs", 3);
    cr_assert_eq(rs_sem_timedwait_n(sem, 3, NULL), 0);
    uint64_t f = rs_sem_fence(sem);

    ts_server_pause(&s);
    long long t0 = tu_mono_ms();
    int rc = rs_sem_post(sem);
    long long el = tu_mono_ms() - t0;
    ts_server_resume(&s);
    cr_expect_eq(rc, RS_ECONN, "post, server stalled: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(el, 4000, "took %lld ms with timeout_ms 500", el);
    cr_expect_eq(rs_sem_fence(sem), f, "the hold changed after a failed post");
    /* the calls sent during the stall run now (each attempt of the one post) */
    long long end = tu_mono_ms() + 3000;
    while (value_of(sem) != 1 && tu_mono_ms() < end)
        tu_sleep_ms(20);
    cr_expect_eq(value_of(sem), 1, "the post sent during the stall did not run once");

    cr_expect_eq(rs_sem_post(sem), 0, "the post again");
    cr_expect_eq(value_of(sem), 1, "a retried post gave back a second permit");
    cr_expect_eq(rs_sem_post(sem), 0);
    cr_expect_eq(value_of(sem), 2);
    cr_expect_eq(rs_sem_post(sem), 0);
    cr_expect_eq(value_of(sem), 3);
    cr_expect_eq(rs_sem_post(sem), EPERM);
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* Closing the client gives its permits back at once. */
Test(sem, close_releases)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 30000, 0, NULL);
    rs_client_t *cb = tu_open_client(&s, 30000, 0, NULL);
    rs_sem_t *sa = new_sem(ca, "cl", 3);
    rs_sem_t *sb = new_sem(cb, "cl", 0);
    cr_assert_eq(rs_sem_timedwait_n(sa, 2, NULL), 0);
    cr_assert_eq(rs_sem_wait(sa), 0);
    cr_expect_eq(value_of(sb), 0);
    cr_expect_eq(rs_client_close(ca), 0);
    cr_expect_eq(value_of(sb), 3, "the closed client's permits did not come back");
    cr_expect_eq(rs_sem_destroy(sa), 0);
    rs_sem_destroy(sb);
    rs_client_close(cb);
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

/* ------------------------------------------------------------------------------------- */
/* The script itself: idempotence of retried calls, FIFO and handoff, TTLs, WRONGTYPE     */

/* EVAL of the semaphore script on name with the common arguments. */
static redisReply *sx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *mode, const char *arg, const char *init)
{
    static const char *const sfx[] = {"", ":holders", ":hi", ":fence", ":q", ":qi"};
    char keys[6][128];
    const char *argv[24];
    size_t lens[24];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)rs_script_semaphore.body;
    argv[n++] = "6";
    for (int i = 0; i < 6; i++) {
        snprintf(keys[i], sizeof keys[i], "rs:{%s}:sem%s", name, sfx[i]);
        argv[n++] = keys[i];
    }
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "5000";       /* lease */
    argv[n++] = "rs:client:"; /* channel prefix */
    argv[n++] = mode ? mode : "q";
    argv[n++] = "100";        /* max waiters */
    argv[n++] = "10000";      /* queue entry lease */
    argv[n++] = arg ? arg : "1";
    argv[n++] = init ? init : "3";
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_semaphore.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    return r;
}

static long long sx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *arg)
{
    redisReply *r = sx(k, name, op, tok, acq, NULL, arg, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d %s", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* acq (or cancel) reply: element 0; the fence of a grant copied into fence, element 2 into
 * *third. */
static long long sx_acq(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *mode, const char *n, char *fence,
                        size_t flen, long long *third)
{
    redisReply *r = sx(k, name, op, tok, acq, mode, n, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "%s: reply type %d %s", op, r->type,
                 r->type == REDIS_REPLY_ERROR ? r->str : "");
    cr_assert_geq(r->elements, 1);
    long long k0 = r->element[0]->integer;
    if (fence && flen)
        fence[0] = '\0';
    if (third)
        *third = -99;
    if (r->elements >= 3) {
        redisReply *e = r->element[1];
        if (fence && flen)
            snprintf(fence, flen, "%s", e->type == REDIS_REPLY_STRING ? e->str : "?");
        if (third && r->element[2]->type == REDIS_REPLY_INTEGER)
            *third = r->element[2]->integer;
    }
    freeReplyObject(r);
    return k0;
}

/* Permits taken by live holders, from the "val" op. */
static long long sx_taken(redisContext *k, const char *name)
{
    redisReply *r = sx(k, name, "val", "tokZ", "pz:1", NULL, NULL, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "val: reply type %d", r->type);
    cr_assert_eq(r->elements, 2);
    long long t = r->element[1]->integer;
    freeReplyObject(r);
    return t;
}

static int holder_is(const ts_server_t *s, const char *name, const char *acq, int count)
{
    char buf[128];
    char *v = ts_cmd_str(s, buf, sizeof buf, "HGET rs:{%s}:sem:hi %s", name, acq);
    if (count < 0)
        return v == NULL;
    return v && atoi(v) == count;
}

Test(sem, script_protocol)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    char f1[32], f1b[32], fx[32];
    long long third;

    /* absent and attach-only */
    redisReply *r = sx(k, "sc", "init", "tokA", "pa:0", NULL, NULL, "0");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == -1, "init 0 of an absent one");
    freeReplyObject(r);
    r = sx(k, "sc", "acq", "tokA", "pa:0", "q", "1", "0");
    cr_expect(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "RSNOENT", 7) == 0, "acq, absent");
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{sc}:sem rs:{sc}:sem:q rs:{sc}:sem:holders"), 0);

    /* acq of 2 (size 3), twice with one id: one grant, one token */
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokA", "pa:1", "q", "2", f1, sizeof f1, &third), 1);
    cr_expect_gt(third, 0, "ttl of the grant");
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokA", "pa:1", "q", "2", f1b, sizeof f1b, NULL), 1,
                 "a retried acq");
    cr_expect_str_eq(f1b, f1);
    cr_expect_eq(sx_taken(k, "sc"), 2, "a retried acq took permits twice");
    /* the same owner may hold another acquisition */
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokA", "pa:2", "t", "1", fx, sizeof fx, NULL), 1);
    cr_expect_gt(strtoull(fx, NULL, 10), strtoull(f1, NULL, 10));
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:2", NULL), 1);
    cr_expect_eq(sx_taken(k, "sc"), 2);

    /* a try for 2 with 1 free: busy, never queued */
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokB", "pb:1", "t", "2", NULL, 0, &third), 0);
    cr_expect_eq(third, 0);
    cr_expect_eq(zcard_q(&s, "sc"), 0);
    /* queued: B for 2, then C for 1 (behind B although 1 is free) */
    r = sx(k, "sc", "acq", "tokB", "pb:1", "q", "2", NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_expect_eq(r->element[0]->integer, 0);
    cr_expect_gt(r->element[1]->integer, 0, "retry time");
    cr_expect_leq(r->element[1]->integer, 5000, "retry time beyond the holder's lease");
    cr_expect_eq(r->element[2]->integer, 1, "queued");
    freeReplyObject(r);
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokC", "pc:1", "q", "1", NULL, 0, &third), 0);
    cr_expect_eq(third, 1);
    cr_expect_eq(zcard_q(&s, "sc"), 2);
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokE", "pe:1", "t", "1", NULL, 0, NULL), 0,
                 "a try jumped the queue");
    r = sx(k, "sc", "acq", "tokD", "pd:1", "q", "4", NULL);
    cr_expect(r->type == REDIS_REPLY_ERROR && strncmp(r->str, "RSINVAL", 7) == 0, "4 of 3");
    freeReplyObject(r);
    cr_expect_eq(zcard_q(&s, "sc"), 2);
    cr_expect_eq(sx_int(k, "sc", "qrenew", "tokB", "pb:1", "2"), 1);

    /* give back 1 of A's 2 (A keeps 1): B (2) fits and is served, C waits; twice: once */
    cr_expect_eq(sx_int(k, "sc", "give", "tokX", "pa:1", "1"), 0, "give by another owner");
    cr_expect_eq(sx_int(k, "sc", "give", "tokA", "pa:1", "1"), 1);
    cr_expect(holder_is(&s, "sc", "pb:1", 2), "B was not handed its 2 permits");
    cr_expect(holder_is(&s, "sc", "pa:1", 1));
    cr_expect_eq(sx_int(k, "sc", "give", "tokA", "pa:1", "1"), 1, "a retried give");
    cr_expect(holder_is(&s, "sc", "pa:1", 1), "a retried give gave back twice");
    cr_expect_eq(sx_taken(k, "sc"), 3);
    cr_expect_eq(sx_int(k, "sc", "qrenew", "tokB", "pb:1", "2"), 2, "qrenew after the handoff");
    char fb[32];
    cr_expect_eq(sx_acq(k, "sc", "acq", "tokB", "pb:1", "q", "2", fb, sizeof fb, NULL), 1,
                 "B's retry finds its grant");
    cr_expect_gt(strtoull(fb, NULL, 10), strtoull(fx, NULL, 10));
    cr_expect_eq(zcard_q(&s, "sc"), 1);

    /* release A: C is served; a retried release is recognised */
    cr_expect_eq(sx_int(k, "sc", "rel", "tokB", "pa:1", NULL), 0, "release by another owner");
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:1", NULL), 1);
    cr_expect(holder_is(&s, "sc", "pc:1", 1), "C was not served");
    cr_expect(holder_is(&s, "sc", "pa:1", -1), "the released hold's record is still there");
    char tomb[64] = "r:", last[64] = "";
    cr_assert_not_null(ts_cmd_str(&s, tomb + 2, sizeof tomb - 2,
                                  "EVAL %s 0 tokA", "return redis.sha1hex(ARGV[1])"));
    cr_expect(ts_cmd_str(&s, last, sizeof last, "HGET rs:{sc}:sem:hi %s", tomb) &&
                  strcmp(last, "pa:1") == 0,
              "the owner's tombstone names %s, not pa:1", last);
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:1", NULL), 1, "a retried release");
    cr_expect_eq(sx_int(k, "sc", "give", "tokA", "pa:1", "1"), 0, "give after the release");
    cr_expect_eq(sx_int(k, "sc", "renew", "tokA", "pa:1", NULL), 0, "renew after the release");
    cr_expect_eq(sx_int(k, "sc", "rel", "tokA", "pa:9", NULL), 0, "an id never granted");
    cr_expect_eq(sx_taken(k, "sc"), 3);
    cr_expect_eq(sx_int(k, "sc", "renew", "tokB", "pb:1", NULL), 1);
    cr_expect_eq(sx_int(k, "sc", "renew", "tokC", "pb:1", NULL), 0, "renew by another owner");
    cr_expect_eq(sx_acq(k, "sc", "cancel", "tokC", "pc:1", "t", "1", NULL, 0, NULL), 1,
                 "cancel after the grant keeps it");
    cr_expect_eq(zcard_q(&s, "sc"), 0);

    /* every key has a TTL */
    r = redisCommand(k, "KEYS rs:{sc}:*");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    cr_expect_geq(r->elements, 4); /* the queue is empty: q and qi are gone */
    for (size_t i = 0; i < r->elements; i++) {
        long long ttl = ts_cmd_int(&s, "PTTL %s", r->element[i]->str);
        cr_expect_gt(ttl, 0, "%s has no TTL (%lld)", r->element[i]->str, ttl);
    }
    freeReplyObject(r);

    cr_expect_eq(sx_int(k, "sc", "rel", "tokB", "pb:1", NULL), 1);
    cr_expect_eq(sx_int(k, "sc", "rel", "tokC", "pc:1", NULL), 1);
    cr_expect_eq(sx_taken(k, "sc"), 0);

    /* WRONGTYPE: checked before any write */
    cr_expect_eq(ts_cmd_int(&s, "SET rs:{wt}:sem:q x"), -1); /* "OK" is not an integer */
    r = sx(k, "wt", "acq", "tokA", "pa:1", "q", "1", "3");
    cr_expect(r->type == REDIS_REPLY_ERROR && strstr(r->str, "WRONGTYPE"), "acq on a foreign key");
    freeReplyObject(r);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{wt}:sem rs:{wt}:sem:holders rs:{wt}:sem:fence"), 0,
                 "a refused call wrote");
    redisFree(k);
    ts_server_stop(&s);
}

/* The uncontended paths (semaphore.lua's fast acquire and release): a grant still purges
 * the tombstones whose time is up, a lapsed hold still gives its permits back, and a
 * semaphore with more holds than the fast path looks at (64) still counts them all. */
Test(sem, script_fast_paths)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    char f[32], id[32];

    /* a tombstone due (TOMB_BASE + 1 ms): a grant purges it */
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fa}:sem s 3"), 1);
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fa}:sem:holders 1000000000000001 px:1"), 1);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fa}:sem:hi px:1 %s", "0 ab 5"), 1);
    cr_expect_eq(sx_acq(k, "fa", "acq", "tokA", "pa:1", "q", "3", f, sizeof f, NULL), 1);
    cr_expect(holder_is(&s, "fa", "px:1", -1), "the tombstone due is still there");
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{fa}:sem:holders"), 1, "only the new hold");
    cr_expect_eq(sx_int(k, "fa", "rel", "tokA", "pa:1", NULL), 1);
    cr_expect_eq(sx_int(k, "fa", "rel", "tokA", "pa:1", NULL), 1, "a retried release");
    cr_expect_eq(sx_taken(k, "fa"), 0);

    /* a lapsed hold of 2 permits (expiry 1 ms): its permits come back */
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fa}:sem:holders 1 px:2"), 1);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fa}:sem:hi px:2 %s", "2 ab 6"), 1);
    cr_expect_eq(sx_acq(k, "fa", "acq", "tokB", "pb:1", "t", "3", f, sizeof f, NULL), 1);
    cr_expect(holder_is(&s, "fa", "px:2", -1), "the lapsed hold is still there");
    cr_expect_eq(sx_int(k, "fa", "rel", "tokB", "pb:1", NULL), 1);

    /* one owner's releases leave one tombstone, not one each */
    char aid[32];
    for (int i = 0; i < 50; i++) {
        snprintf(aid, sizeof aid, "pt:%d", i);
        cr_assert_eq(sx_acq(k, "fa", "acq", "tokT", aid, "t", "1", f, sizeof f, NULL), 1);
        cr_assert_eq(sx_int(k, "fa", "rel", "tokT", aid, NULL), 1);
    }
    cr_expect_eq(sx_int(k, "fa", "rel", "tokT", "pt:49", NULL), 1, "the last one, retried");
    cr_expect_eq(sx_int(k, "fa", "rel", "tokT", "pt:48", NULL), 0, "an earlier one");
    cr_expect_leq(ts_cmd_int(&s, "ZCARD rs:{fa}:sem:holders"), 3, "tombstones per release");
    cr_expect_leq(ts_cmd_int(&s, "HLEN rs:{fa}:sem:hi"), 3, "tombstones per release");

    /* 70 holds of one permit each on a semaphore of 72: two more fit, a third does not */
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fm}:sem s 72"), 1);
    for (int i = 0; i < 70; i++) {
        snprintf(id, sizeof id, "pm:%d", i);
        cr_assert_eq(sx_acq(k, "fm", "acq", "tokM", id, "t", "1", f, sizeof f, NULL), 1, "%s", id);
    }
    cr_expect_eq(sx_acq(k, "fm", "acq", "tokN", "pn:1", "t", "2", f, sizeof f, NULL), 1);
    cr_expect_eq(sx_acq(k, "fm", "acq", "tokO", "po:1", "t", "1", f, sizeof f, NULL), 0,
                 "the 73rd permit of 72");
    cr_expect_eq(sx_taken(k, "fm"), 72);
    redisFree(k);
    ts_server_stop(&s);
}

/* A foreign key of another type: RS_ESERVER with the server's text, nothing written. */
Test(sem, wrongtype_through_the_api)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    cr_expect_eq(ts_cmd_int(&s, "RPUSH rs:{wa}:sem:holders x"), 1);
    rs_sem_t *sem = NULL;
    cr_expect_eq(rs_sem_init(&sem, c, "wa", 2), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{wa}:sem"), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}
