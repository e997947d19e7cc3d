/*
 * test_cond.c - rs_cond_t, the condition variable across processes (issue 14), against a
 * real redis-server.
 *
 *   no_lost_wakeup_across_processes  a producer and three consumer processes move 300 items
 *                                 through a one-slot buffer under one mutex and two
 *                                 conditions, every wait with a 15 s deadline: a lost
 *                                 wake-up ends in ETIMEDOUT (counted) instead of a hang;
 *                                 every item is consumed exactly once
 *   signal_wakes_one_broadcast_all four waiters on two clients: signal wakes exactly one,
 *                                 broadcast the other three, with one message per client
 *                                 (seen by a PSUBSCRIBE on the client channels); each woken
 *                                 waiter holds the mutex with a token above the last
 *   timedwait_returns_holding     ETIMEDOUT (also for a deadline already past) returns
 *                                 holding the mutex with a new token, nothing left queued;
 *                                 rs_inspect and rs_list see a waiting condition
 *   killed_waiter_no_swallow      a waiter killed with SIGKILL: once its entry's lease has
 *                                 run out, a signal skips it and wakes the live waiter
 *   close_cancels_wait            rs_client_close of the condition's client: ECANCELED, the
 *                                 mutex (of another client) re-acquired
 *   errors                        EINVAL (NULLs, deadlines, an rmutex cast to rs_mutex_t),
 *                                 EPERM, RS_ELOST (nothing waited), EBUSY (the condition's
 *                                 and the mutex's destroy while waited with), WRONGTYPE
 *                                 (RS_ESERVER, the mutex still held)
 *   redis_unreachable             the server stopped: RS_ECONN, the mutex still held, and
 *                                 no entry outlives its lease
 *   cluster_other_masters         a 3-master Cluster (sharded wake-ups): the condition and
 *                                 the mutex on different masters; signal wakes one waiter
 *                                 of another client, broadcast two waiters of one client,
 *                                 timedwait times out holding the mutex
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "internal.h" /* rs__cluster_sharded: the tests link the static library */
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"

TestSuite(cond, .timeout = 120);

/* ----- producer / consumers ------------------------------------------------------------ */

#define ITEMS 300
#define CONSUMERS 3

typedef struct shared {
    ts_server_t srv;     /* the test's server, for the children */
    /* the one-slot buffer, guarded by the distributed mutex */
    int full;
    int item;
    int done;
    /* the outcome */
    atomic_int seen[ITEMS];
    atomic_int timeouts; /* a wait ran out its 15 s: a lost wake-up */
    atomic_int errors;
    atomic_int overlap;  /* two processes inside the mutex at once */
    atomic_int inside;
} shared_t;

static int fail(shared_t *sh)
{
    atomic_fetch_add(&sh->errors, 1);
    return 1;
}

/* wait with a 15 s deadline; a timeout is counted (and ends the worker) */
static int cwait(shared_t *sh, rs_cond_t *cv, rs_mutex_t *m)
{
    atomic_fetch_sub(&sh->inside, 1);
    struct timespec dl = tu_abs_in(15000);
    int rc = rs_cond_timedwait(cv, m, &dl);
    if (atomic_fetch_add(&sh->inside, 1) != 0)
        atomic_fetch_add(&sh->overlap, 1);
    if (rc == ETIMEDOUT)
        atomic_fetch_add(&sh->timeouts, 1);
    return rc;
}

static int enter(shared_t *sh, rs_mutex_t *m)
{
    if (rs_mutex_lock(m) != 0)
        return -1;
    if (atomic_fetch_add(&sh->inside, 1) != 0)
        atomic_fetch_add(&sh->overlap, 1);
    return 0;
}

static void leave_m(shared_t *sh, rs_mutex_t *m)
{
    atomic_fetch_sub(&sh->inside, 1);
    rs_mutex_unlock(m);
}

/* The buffer's mutex and its two conditions, on a client of a worker's own. */
typedef struct {
    rs_client_t *c;
    rs_mutex_t *m;
    rs_cond_t *not_full, *not_empty;
} queue_t;

static int queue_open(shared_t *sh, queue_t *q)
{
    memset(q, 0, sizeof *q);
    q->c = tu_open_client_ex(&sh->srv, 2000, 0, NULL);
    return !q->c || rs_mutex_init(&q->m, q->c, "buf") ||
           rs_cond_init(&q->not_full, q->c, "notfull") ||
           rs_cond_init(&q->not_empty, q->c, "notempty");
}

static int queue_close(queue_t *q)
{
    rs_cond_destroy(q->not_full);
    rs_cond_destroy(q->not_empty);
    rs_mutex_destroy(q->m);
    rs_client_close(q->c);
    return 0;
}

static int producer(void *arg)
{
    shared_t *sh = arg;
    queue_t q;
    if (queue_open(sh, &q))
        return fail(sh);
    rs_mutex_t *m = q.m;
    rs_cond_t *not_full = q.not_full, *not_empty = q.not_empty;
    for (int i = 0; i <= ITEMS; i++) {
        if (enter(sh, m))
            return fail(sh);
        while (sh->full)
            if (cwait(sh, not_full, m) != 0) {
                leave_m(sh, m);
                return fail(sh);
            }
        if (i == ITEMS)
            sh->done = 1;
        else
            sh->item = i, sh->full = 1;
        if ((i == ITEMS ? rs_cond_broadcast(not_empty) : rs_cond_signal(not_empty)) != 0)
            fail(sh);
        leave_m(sh, m);
    }
    return queue_close(&q);
}

static int consumer(void *arg)
{
    shared_t *sh = arg;
    queue_t q;
    if (queue_open(sh, &q))
        return fail(sh);
    rs_mutex_t *m = q.m;
    rs_cond_t *not_full = q.not_full, *not_empty = q.not_empty;
    for (;;) {
        if (enter(sh, m))
            return fail(sh);
        while (!sh->full && !sh->done)
            if (cwait(sh, not_empty, m) != 0) {
                leave_m(sh, m);
                return fail(sh);
            }
        if (!sh->full) { /* done */
            leave_m(sh, m);
            break;
        }
        atomic_fetch_add(&sh->seen[sh->item], 1);
        sh->full = 0;
        if (rs_cond_signal(not_full) != 0)
            fail(sh);
        leave_m(sh, m);
    }
    return queue_close(&q);
}

Test(cond, no_lost_wakeup_across_processes, .fini = tu_kill_kids)
{
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    cr_assert_neq(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    ts_server_t *s = &sh->srv;
    tu_start_server(s);
    pid_t kids[CONSUMERS + 1];
    for (int i = 0; i < CONSUMERS; i++)
        kids[i] = tu_spawn(consumer, sh);
    kids[CONSUMERS] = tu_spawn(producer, sh);
    for (int i = 0; i <= CONSUMERS; i++) {
        int st = tu_reap(kids[i], 100000);
        cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d: status %d", i,
                  st);
    }
    cr_expect_eq(atomic_load(&sh->timeouts), 0, "%d waits ran out: a wake-up was lost",
                 atomic_load(&sh->timeouts));
    cr_expect_eq(atomic_load(&sh->errors), 0);
    cr_expect_eq(atomic_load(&sh->overlap), 0, "two processes inside the mutex at once");
    int missed = 0, twice = 0;
    for (int i = 0; i < ITEMS; i++) {
        missed += atomic_load(&sh->seen[i]) == 0;
        twice += atomic_load(&sh->seen[i]) > 1;
    }
    cr_expect_eq(missed, 0, "%d items never consumed", missed);
    cr_expect_eq(twice, 0, "%d items consumed twice", twice);
    cr_expect_eq(ts_cmd_int(s, "EXISTS rs:{notempty}:cond rs:{notfull}:cond"), 0,
                 "entries left queued");
    ts_server_stop(s);
    munmap(sh, sizeof *sh);
}

/* ----- waiter threads ------------------------------------------------------------------- */

typedef struct waiter {
    rs_cond_t *cv;
    rs_mutex_t *m;
    long ms;         /* 0: no deadline */
    int rc;
    uint64_t before, after; /* fencing tokens: before the wait, after it */
    int unlock_rc;
    atomic_int woke; /* set when wait returned (the thread still holds m then) */
    atomic_int go;   /* set by the test: unlock and end */
    atomic_int done;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    if (rs_mutex_lock(w->m) != 0) {
        w->rc = -1;
    } else {
        w->before = rs_mutex_fence(w->m);
        if (w->ms) {
            struct timespec dl = tu_abs_in(w->ms);
            w->rc = rs_cond_timedwait(w->cv, w->m, &dl);
        } else {
            w->rc = rs_cond_wait(w->cv, w->m);
        }
        w->after = rs_mutex_fence(w->m);
        atomic_store(&w->woke, 1);
        while (!atomic_load(&w->go))
            tu_sleep_ms(5);
        w->unlock_rc = w->after ? rs_mutex_unlock(w->m) : -2;
    }
    atomic_store(&w->woke, 1);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Polls until ZCARD key is n; 1 if within timeout_ms. */
static int wait_zcard(const ts_server_t *s, const char *key, long long n, long timeout_ms)
{
    for (long long end = tu_mono_ms() + timeout_ms; tu_mono_ms() < end; tu_sleep_ms(10))
        if (ts_cmd_int(s, "ZCARD %s", key) == n)
            return 1;
    return 0;
}

static rs_cond_t *cond_of(rs_client_t *c, const char *name)
{
    rs_cond_t *cv = NULL;
    cr_assert_eq(rs_cond_init(&cv, c, name), 0, "%s", rs_client_lasterror(c));
    return cv;
}

static rs_mutex_t *mutex_of(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    cr_assert_eq(rs_mutex_init(&m, c, name), 0, "%s", rs_client_lasterror(c));
    return m;
}

static int count_woke(waiter_t *w, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += atomic_load(&w[i].woke);
    return k;
}

/* Reads the broadcast messages ("* ...") that a PSUBSCRIBE on rs:client:* receives within
 * ms; how many. */
static int broadcast_messages(redisContext *sub, long ms)
{
    struct timeval tv = {0, 50 * 1000};
    redisSetTimeout(sub, tv);
    int n = 0;
    long long end = tu_mono_ms() + ms;
    while (tu_mono_ms() < end) {
        redisReply *r = NULL;
        if (redisGetReply(sub, (void **)&r) != REDIS_OK || !r) {
            if (sub->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                sub->err = 0;
                sub->errstr[0] = '\0';
                continue;
            }
            break;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
            strcmp(r->element[0]->str, "pmessage") == 0 &&
            strncmp(r->element[3]->str, "* ", 2) == 0)
            n++;
        freeReplyObject(r);
    }
    return n;
}

Test(cond, signal_wakes_one_broadcast_all)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *sub = ts_connect(&s);
    cr_assert_not_null(sub);
    redisReply *r = redisCommand(sub, "PSUBSCRIBE rs:client:*");
    cr_assert_not_null(r);
    freeReplyObject(r);
    rs_client_t *c[2];
    rs_cond_t *cv[2];
    rs_mutex_t *m[2];
    for (int i = 0; i < 2; i++) {
        c[i] = tu_open_client(&s, 2000, 0, NULL);
        cv[i] = cond_of(c[i], "ev");
        m[i] = mutex_of(c[i], "state");
    }
    waiter_t w[4];
    pthread_t t[4];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 4; i++) {
        w[i].cv = cv[i % 2];
        w[i].m = m[i % 2];
        tu_thread_start(&t[i], waiter_main, &w[i]);
    }
    cr_assert(wait_zcard(&s, "rs:{ev}:cond", 4, 10000), "four waiters queued");
    cr_assert_eq(count_woke(w, 4), 0, "a waiter returned without a signal");
    rs_client_t *sig = tu_open_client(&s, 2000, 0, NULL);
    rs_cond_t *scv = cond_of(sig, "ev");
    cr_assert_eq(rs_cond_signal(scv), 0, "%s", rs_client_lasterror(sig));
    for (long long end = tu_mono_ms() + 10000; count_woke(w, 4) < 1 && tu_mono_ms() < end;)
        tu_sleep_ms(5);
    tu_sleep_ms(300); /* room for a second (wrong) wake-up */
    cr_expect_eq(count_woke(w, 4), 1, "signal woke %d waiters", count_woke(w, 4));
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{ev}:cond"), 3);
    int first = -1;
    for (int i = 0; i < 4; i++)
        if (atomic_load(&w[i].woke))
            first = i;
    cr_assert_geq(first, 0);
    cr_expect_eq(w[first].rc, 0);
    cr_expect_gt(w[first].after, w[first].before, "no new token after the wait");
    /* the others still wait; broadcast wakes them all, one message per client */
    cr_expect_eq(broadcast_messages(sub, 50), 0);
    cr_assert_eq(rs_cond_broadcast(scv), 0, "%s", rs_client_lasterror(sig));
    cr_expect_eq(broadcast_messages(sub, 300), 2, "one broadcast message per waiting client");
    atomic_store(&w[first].go, 1);
    for (int i = 0; i < 4; i++)
        atomic_store(&w[i].go, 1);
    for (int i = 0; i < 4; i++) {
        cr_assert(tu_thread_join(t[i], &w[i].done, 20000), "waiter %d did not return", i);
        cr_expect_eq(w[i].rc, 0, "waiter %d: rc %d", i, w[i].rc);
        cr_expect_eq(w[i].unlock_rc, 0, "waiter %d did not hold the mutex", i);
        cr_expect_gt(w[i].after, w[i].before, "waiter %d: no new token", i);
    }
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{ev}:cond rs:{ev}:cond:qi"), 0, "keys left");
    cr_expect_eq(rs_cond_signal(scv), 0, "a signal with nobody waiting is a no-op");
    rs_cond_destroy(scv);
    rs_client_close(sig);
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(rs_cond_destroy(cv[i]), 0);
        rs_mutex_destroy(m[i]);
        rs_client_close(c[i]);
    }
    redisFree(sub);
    ts_server_stop(&s);
}

static int list_cond(const char *kind, const char *name, void *arg)
{
    if (strcmp(kind, "cond") == 0 && strcmp(name, "t") == 0)
        ++*(int *)arg;
    return 0;
}

Test(cond, timedwait_returns_holding)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_cond_t *cv = cond_of(c, "t");
    rs_mutex_t *m = mutex_of(c, "tm");
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f0 = rs_mutex_fence(m);
    long long tw0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(200);
    cr_expect_eq(rs_cond_timedwait(cv, m, &dl), ETIMEDOUT);
    long long tw1 = tu_mono_ms();
    /* how long it waited: from its start (after tw0; 100 ms spared) to its return */
    long waited = tu_waited_ms(rs_client_lasterror(c));
    cr_expect(waited >= 100 && waited <= tw1 - tw0 + 1,
              "\"%s\": %ld ms of waiting, not 100 to %lld", rs_client_lasterror(c), waited,
              tw1 - tw0 + 1);
    uint64_t f1 = rs_mutex_fence(m);
    cr_expect_gt(f1, f0, "ETIMEDOUT without holding the mutex again (token %llu)",
                 (unsigned long long)f1);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{t}:cond"), 0, "the entry stayed queued");
    dl = tu_abs_in(-1000); /* already past */
    cr_expect_eq(rs_cond_timedwait(cv, m, &dl), ETIMEDOUT);
    cr_expect_gt(rs_mutex_fence(m), f1);
    /* a timed waiter signalled in time returns 0 */
    waiter_t w = {.cv = cv, .m = m, .ms = 20000};
    cr_assert_eq(rs_mutex_unlock(m), 0);
    pthread_t t;
    tu_thread_start(&t, waiter_main, &w);
    cr_assert(wait_zcard(&s, "rs:{t}:cond", 1, 10000));
    /* inspection sees the waiter, and the listing the condition */
    rs_info_t in;
    cr_assert_eq(rs_inspect(c, "cond", "t", &in), 0, "%s", rs_client_lasterror(c));
    cr_expect(in.exists && in.waiters == 1 && in.nholders == 0, "exists %d waiters %u",
              in.exists, in.waiters);
    int listed = 0;
    cr_assert_eq(rs_list(c, "*", list_cond, &listed), 0);
    cr_expect_eq(listed, 1, "rs_list did not name cond \"t\"");
    cr_assert_eq(rs_cond_signal(cv), 0);
    atomic_store(&w.go, 1);
    cr_assert(tu_thread_join(t, &w.done, 20000));
    cr_expect_eq(w.rc, 0);
    cr_expect_eq(w.unlock_rc, 0);
    rs_cond_destroy(cv);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

static int doomed_waiter(void *arg)
{
    const ts_server_t *s = arg;
    rs_client_t *c = tu_open_client_ex(s, 600, 0, NULL);
    rs_cond_t *cv = NULL;
    rs_mutex_t *m = NULL;
    if (!c || rs_cond_init(&cv, c, "k") || rs_mutex_init(&m, c, "km") || rs_mutex_lock(m))
        return 2;
    rs_cond_wait(cv, m); /* killed in here */
    return 3;
}

Test(cond, killed_waiter_no_swallow, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    pid_t kid = tu_spawn(doomed_waiter, &s);
    cr_assert(wait_zcard(&s, "rs:{k}:cond", 1, 10000), "the child did not queue");
    kill(kid, SIGKILL);
    tu_reap(kid, 10000);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_cond_t *cv = cond_of(c, "k");
    rs_mutex_t *m = mutex_of(c, "km");
    waiter_t w = {.cv = cv, .m = m};
    pthread_t t;
    tu_thread_start(&t, waiter_main, &w);
    cr_assert(wait_zcard(&s, "rs:{k}:cond", 2, 10000), "behind the dead entry");
    tu_sleep_ms(900); /* the dead entry's lease (600 ms) runs out */
    cr_assert_eq(rs_cond_signal(cv), 0);
    for (long long end = tu_mono_ms() + 10000; !atomic_load(&w.woke) && tu_mono_ms() < end;)
        tu_sleep_ms(5);
    cr_expect(atomic_load(&w.woke), "the dead waiter swallowed the signal");
    if (!atomic_load(&w.woke))
        rs_cond_broadcast(cv);
    atomic_store(&w.go, 1);
    cr_assert(tu_thread_join(t, &w.done, 20000));
    cr_expect_eq(w.rc, 0);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{k}:cond"), 0, "the dead entry stayed");
    rs_cond_destroy(cv);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(cond, close_cancels_wait)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *cc = tu_open_client(&s, 2000, 0, NULL), *mc = tu_open_client(&s, 2000, 0, NULL);
    rs_cond_t *cv = cond_of(cc, "x");
    rs_mutex_t *m = mutex_of(mc, "xm"); /* the mutex of another client */
    waiter_t w = {.cv = cv, .m = m};
    pthread_t t;
    tu_thread_start(&t, waiter_main, &w);
    cr_assert(wait_zcard(&s, "rs:{x}:cond", 1, 10000));
    cr_assert_eq(rs_client_close(cc), 0);
    for (long long end = tu_mono_ms() + 10000; !atomic_load(&w.woke) && tu_mono_ms() < end;)
        tu_sleep_ms(5);
    cr_expect_eq(w.rc, ECANCELED);
    cr_expect_gt(w.after, w.before, "ECANCELED without the mutex of the open client");
    atomic_store(&w.go, 1);
    cr_assert(tu_thread_join(t, &w.done, 20000));
    cr_expect_eq(w.unlock_rc, 0);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{x}:cond"), 0, "the entry stayed queued");
    cr_expect_eq(rs_cond_destroy(cv), 0);
    rs_mutex_destroy(m);
    rs_client_close(mc);
    ts_server_stop(&s);
}

Test(cond, errors)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lost = {0};
    rs_client_t *c = tu_open_client(&s, 300, 0, &lost);
    rs_cond_t *cv = NULL;
    rs_mutex_t *m = mutex_of(c, "em");
    cr_expect_eq(rs_cond_init(NULL, c, "e"), EINVAL);
    cr_expect_eq(rs_cond_init(&cv, c, NULL), EINVAL);
    cr_expect_null(cv);
    cv = cond_of(c, "e");
    cr_expect_eq(rs_cond_wait(NULL, m), EINVAL);
    cr_expect_eq(rs_cond_wait(cv, NULL), EINVAL);
    cr_expect(strstr(rs_client_lasterror(c), "mutex is NULL") != NULL, "%s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_cond_signal(NULL), EINVAL);
    cr_expect_eq(rs_cond_broadcast(NULL), EINVAL);
    cr_expect_eq(rs_cond_destroy(NULL), 0);
    /* EPERM: not held */
    cr_expect_eq(rs_cond_wait(cv, m), EPERM);
    cr_expect(strstr(rs_client_lasterror(c), "does not hold") != NULL, "%s",
              rs_client_lasterror(c));
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f = rs_mutex_fence(m);
    cr_expect_eq(rs_cond_timedwait(cv, m, NULL), EINVAL);
    struct timespec bad = {1, 1000000000L};
    cr_expect_eq(rs_cond_timedwait(cv, m, &bad), EINVAL);
    cr_expect_eq(rs_mutex_fence(m), f, "bad input changed the hold");
    /* a recursive mutex: not supported */
    rs_rmutex_t *rm = NULL;
    cr_assert_eq(rs_rmutex_init(&rm, c, "erm"), 0);
    cr_assert_eq(rs_rmutex_lock(rm), 0);
    cr_expect_eq(rs_cond_wait(cv, (rs_mutex_t *)(void *)rm), EINVAL);
    cr_expect(strstr(rs_client_lasterror(c), "rmutex") != NULL, "%s", rs_client_lasterror(c));
    cr_expect_neq(rs_rmutex_fence(rm), 0, "the rmutex was released");
    cr_expect_eq(rs_rmutex_unlock(rm), 0);
    rs_rmutex_destroy(rm);
    /* EBUSY: destroy while a thread waits through the handle */
    cr_assert_eq(rs_mutex_unlock(m), 0);
    waiter_t w = {.cv = cv, .m = m};
    pthread_t t;
    tu_thread_start(&t, waiter_main, &w);
    cr_assert(wait_zcard(&s, "rs:{e}:cond", 1, 10000));
    cr_expect_eq(rs_cond_destroy(cv), EBUSY);
    cr_expect_eq(rs_mutex_destroy(m), EBUSY, "the mutex a thread waits with was destroyed");
    cr_assert_eq(rs_cond_signal(cv), 0);
    atomic_store(&w.go, 1);
    cr_assert(tu_thread_join(t, &w.done, 20000));
    cr_expect_eq(w.rc, 0);
    /* WRONGTYPE on a foreign key: RS_ESERVER, the mutex still held */
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{foreign}:cond x"), 1);
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{foreign2}:cond:qi x"), 1);
    rs_cond_t *fc = cond_of(c, "foreign"), *fc2 = cond_of(c, "foreign2");
    cr_assert_eq(rs_mutex_lock(m), 0);
    f = rs_mutex_fence(m);
    cr_expect_eq(rs_cond_wait(fc, m), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "%s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_cond_wait(fc2, m), RS_ESERVER);
    cr_expect_eq(rs_mutex_fence(m), f, "the mutex was released by a failed wait");
    cr_expect_eq(rs_cond_signal(fc), RS_ESERVER);
    cr_expect_eq(rs_cond_broadcast(fc), RS_ESERVER);
    cr_expect_eq(ts_cmd_int(&s, "LLEN rs:{foreign}:cond"), 1, "the foreign key was touched");
    rs_cond_destroy(fc);
    rs_cond_destroy(fc2);
    /* RS_ELOST: the hold was lost before the wait; nothing waited */
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{em}:mutex"), 1);
    cr_assert(tu_wait_atomic(&lost.n, 1, 10000), "the loss was not noticed");
    cr_expect_eq(rs_cond_wait(cv, m), RS_ELOST);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{e}:cond"), 0, "a lost hold waited");
    cr_expect_eq(rs_mutex_unlock(m), RS_ELOST);
    cr_expect_eq(rs_cond_destroy(cv), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(cond, redis_unreachable)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 600, 500, NULL);
    rs_cond_t *cv = cond_of(c, "u");
    rs_mutex_t *m = mutex_of(c, "um");
    cr_assert_eq(rs_mutex_lock(m), 0);
    struct timespec dl = tu_abs_in(50); /* subscribes the notifier first */
    cr_assert_eq(rs_cond_timedwait(cv, m, &dl), ETIMEDOUT);
    uint64_t f = rs_mutex_fence(m);
    ts_server_pause(&s);
    long long t0 = tu_mono_ms();
    int rc = rs_cond_wait(cv, m);
    long long took = tu_mono_ms() - t0;
    ts_server_resume(&s);
    cr_expect_eq(rc, RS_ECONN, "rc %d: %s", rc, rs_client_lasterror(c));
    cr_expect_lt(took, 5000, "RS_ECONN after %lld ms (timeout_ms 500)", took);
    cr_expect_eq(rs_mutex_fence(m), f, "the mutex record changed");
    /* the call sent while the server was stopped may run now: its entry lives its lease
     * (600 ms; the keys 2 x that, raised by half) and no longer */
    long long end = tu_mono_ms() + 10000;
    while (ts_cmd_int(&s, "EXISTS rs:{u}:cond") != 0 && tu_mono_ms() < end)
        tu_sleep_ms(50);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{u}:cond"), 0, "an entry outlived its lease");
    rs_mutex_unlock(m);
    rs_cond_destroy(cv);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* The condition's and the mutex's names on different masters of a 3-master Cluster, whose
 * clients take sharded wake-ups (Redis 7.0): no script touches both, every wake-up comes. */
Test(cond, cluster_other_masters)
{
    ts_server_t nodes[3];
    cr_assert_eq(ts_cluster_start(nodes, 3), 0);
    char prefix[32], url[160];
    ts_unique_prefix(prefix, sizeof prefix);
    ts_cluster_url(url, sizeof url, &nodes[0]);
    /* a mutex name on another master than the condition "cc" */
    char key[96], mname[16] = "";
    snprintf(key, sizeof key, "%s:{cc}:cond", prefix);
    int cown = ts_cluster_owner(nodes, 3, (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key));
    for (int i = 0; i < 64 && !mname[0]; i++) {
        snprintf(key, sizeof key, "%s:{m%d}:mutex", prefix, i);
        int own = ts_cluster_owner(nodes, 3, (int)ts_cmd_int(&nodes[0], "CLUSTER KEYSLOT %s", key));
        if (own >= 0 && own != cown)
            snprintf(mname, sizeof mname, "m%d", i);
    }
    cr_assert(cown >= 0 && mname[0], "names on two masters");
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = 2000;
    cfg.timeout_ms = 3000;
    rs_client_t *c1 = NULL, *c2 = NULL;
    cr_assert_eq(rs_client_open(&c1, &cfg), 0, "%s", rs_client_lasterror(NULL));
    cr_assert_eq(rs_client_open(&c2, &cfg), 0, "%s", rs_client_lasterror(NULL));
    cr_expect_eq(rs__cluster_sharded(c1), 1, "sharded wake-ups expected on Redis 7");
    rs_cond_t *cv1 = cond_of(c1, "cc"), *cv2 = cond_of(c2, "cc");
    rs_mutex_t *m1 = mutex_of(c1, mname), *m2 = mutex_of(c2, mname);
    /* signal: one waiter of c2, woken by c1 */
    waiter_t w[3];
    pthread_t t[3];
    memset(w, 0, sizeof w);
    w[0].cv = cv2, w[0].m = m2;
    tu_thread_start(&t[0], waiter_main, &w[0]);
    snprintf(key, sizeof key, "%s:{cc}:cond", prefix);
    long long end = tu_mono_ms() + 10000;
    while (ts_cmd_int(&nodes[cown], "ZCARD %s", key) != 1 && tu_mono_ms() < end)
        tu_sleep_ms(10);
    cr_assert_eq(rs_cond_signal(cv1), 0, "%s", rs_client_lasterror(c1));
    atomic_store(&w[0].go, 1);
    cr_assert(tu_thread_join(t[0], &w[0].done, 20000), "the signal did not wake the waiter");
    cr_expect_eq(w[0].rc, 0);
    cr_expect_eq(w[0].unlock_rc, 0);
    cr_expect_gt(w[0].after, w[0].before);
    /* broadcast: two waiters of c2 */
    memset(w, 0, sizeof w);
    for (int i = 1; i < 3; i++) {
        w[i].cv = cv2, w[i].m = m2;
        tu_thread_start(&t[i], waiter_main, &w[i]);
    }
    end = tu_mono_ms() + 10000;
    while (ts_cmd_int(&nodes[cown], "ZCARD %s", key) != 2 && tu_mono_ms() < end)
        tu_sleep_ms(10);
    cr_assert_eq(rs_cond_broadcast(cv1), 0, "%s", rs_client_lasterror(c1));
    for (int i = 1; i < 3; i++) /* both may go: the one holding the mutex lets the other in */
        atomic_store(&w[i].go, 1);
    for (int i = 1; i < 3; i++) {
        cr_assert(tu_thread_join(t[i], &w[i].done, 20000), "broadcast did not wake waiter %d", i);
        cr_expect_eq(w[i].rc, 0);
        cr_expect_eq(w[i].unlock_rc, 0);
    }
    /* timedwait: ETIMEDOUT holding the mutex */
    cr_assert_eq(rs_mutex_lock(m1), 0);
    struct timespec dl = tu_abs_in(200);
    cr_expect_eq(rs_cond_timedwait(cv1, m1, &dl), ETIMEDOUT);
    cr_expect_neq(rs_mutex_fence(m1), 0);
    cr_expect_eq(rs_mutex_unlock(m1), 0);
    rs_cond_destroy(cv1);
    rs_cond_destroy(cv2);
    rs_mutex_destroy(m1);
    rs_mutex_destroy(m2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_cluster_stop(nodes, 3);
}
