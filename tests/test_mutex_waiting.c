/*
 * test_mutex_waiting.c - mutex tests of waiting and handoff: SIGSTOP past the lease, Redis restart, SCRIPT FLUSH, no polling, FIFO handoff, many threads.
 * (moved from test_mutex.c; suite "mutex", shared helpers in test_mutex.h).
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
#include "test_mutex.h"

/* ------------------------------------------------------------------------------------- */
/* 6. A holder stopped (SIGSTOP) past its lease                                           */

typedef struct stop_child {
    const ts_server_t *s;
    int sync_fd;
    int lost_fd;
} stop_child_t;

static int sigstop_child_main(void *arg)
{
    stop_child_t *k = arg;
    tu_lost_t lc = {0};
    lc.fd = k->lost_fd;
    rs_client_t *c = tu_open_client_ex(k->s, 400, 2000, &lc);
    if (!c)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "st") != 0)
        return 11;
    if (rs_mutex_lock(m) != 0)
        return 12;
    uint64_t f = rs_mutex_fence(m);
    if (write(k->sync_fd, &f, sizeof f) != (ssize_t)sizeof f)
        return 13;
    raise(SIGSTOP);
    /* continued, long after the lease ran out */
    int rc = rs_mutex_unlock(m);
    if (rc != RS_ELOST) {
        fprintf(stderr, "sigstop child: unlock returned %d (%s), want RS_ELOST\n", rc,
                rs_client_lasterror(c));
        return 20;
    }
    rc = rs_mutex_unlock(m);
    if (rc != EPERM) {
        fprintf(stderr, "sigstop child: second unlock returned %d, want EPERM\n", rc);
        return 21;
    }
    if (rs_mutex_fence(m) != 0 || rs_mutex_remaining(m) != 0)
        return 22;
    /* on_lost is delivered from the watchdog thread: give it time, then check it stays 1 */
    if (!tu_wait_atomic(&lc.n, 1, 3000))
        return 30;
    tu_sleep_ms(300);
    rs_mutex_destroy(m);
    rs_client_close(c);
    int n = atomic_load(&lc.n);
    return n == 1 ? 0 : 30 + (n > 9 ? 9 : n);
}

Test(mutex, holder_stopped_past_lease, .timeout = 60, .fini = tu_kill_kids)
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
    tu_sleep_ms(1500);

    rs_client_t *c = tu_open_client(&s, 5000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "st");
    int rc = rs_mutex_trylock(m);
    cr_assert_eq(rc, 0, "taking the mutex after the stopped holder's lease: %d %s", rc,
                 rs_client_lasterror(c));
    uint64_t pf = rs_mutex_fence(m);
    cr_expect_gt(pf, cf, "token above the stopped holder's");

    kill(pid, SIGCONT);
    st = tu_reap(pid, 15000);
    tu_assert_exit0(pid, st, "stopped holder (20: unlock not RS_ELOST, 21: second unlock not "
                             "EPERM, 30+n: on_lost called n times)");
    char buf[16];
    ssize_t n = read(lp[0], buf, sizeof buf); /* the child is gone: no more writers */
    cr_expect_eq(n, 1, "on_lost calls seen through the pipe: %zd", n);

    /* the child's unlock left our hold alone */
    cr_expect_eq(rs_mutex_fence(m), pf);
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{st}:mutex"), 0, "our lock key is still there");
    rc = rs_mutex_unlock(m);
    cr_expect_eq(rc, 0, "the new holder's unlock: %d %s", rc, rs_client_lasterror(c));
    close(sp[0]);
    close(lp[0]);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 7. Redis restarts while a thread waits                                                 */

Test(mutex, redis_restart_while_waiting, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lca = {0}, lcb = {0};
    rs_client_t *ca = tu_open_client(&s, 1000, 5000, &lca);
    rs_client_t *cb = tu_open_client(&s, 1000, 5000, &lcb);
    rs_mutex_t *ma = new_mutex(ca, "rr");
    rs_mutex_t *mb = new_mutex(cb, "rr");
    int rc = rs_mutex_lock(ma);
    cr_assert_eq(rc, 0, "A lock: %d %s", rc, rs_client_lasterror(ca));

    locker_t B = {.m = mb, .wait_release = 1};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "rr", 1, 5000), "B did not queue");
    tu_sleep_ms(100);
    cr_assert_eq(atomic_load(&B.locked), 0, "B got the mutex while A held it");

    ts_server_kill(&s);
    tu_sleep_ms(300);
    cr_assert_eq(ts_server_restart(&s), 0, "restart");
    long long t_up = tu_mono_ms();

    cr_assert(tu_wait_atomic(&B.locked, 1, 8000), "B did not return within 8 s of the restart");
    long long el = B.t_locked - t_up;
    cr_expect_eq(B.rc, 0, "B's lock after the restart: %d %s", B.rc, B.err);
    cr_expect_lt(el, 4000, "B acquired %lld ms after the restart", el);
    cr_expect_neq(B.fence, 0);

    /* A's hold is gone with the data: its watchdog reports it, its unlock says so */
    cr_expect(tu_wait_atomic(&lca.n, 1, 5000), "A's on_lost was not called");
    rc = rs_mutex_unlock(ma);
    cr_expect_eq(rc, RS_ELOST, "A's unlock: %d %s", rc, rs_client_lasterror(ca));
    cr_expect_eq(rs_mutex_unlock(ma), EPERM, "A's second unlock");

    atomic_store(&B.release, 1);
    cr_assert(locker_join(&B, 5000), "B did not finish");
    cr_expect_eq(B.unlock_rc, 0, "B's unlock: %d", B.unlock_rc);
    cr_expect_eq(atomic_load(&lca.n), 1, "A's on_lost calls");
    cr_expect_eq(atomic_load(&lcb.n), 0, "B's on_lost calls");
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 8. SCRIPT FLUSH between calls                                                          */

Test(mutex, script_flush, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 1000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "sf");
    rs_mutex_t *m2 = new_mutex(c2, "sf");
    for (int i = 0; i < 3; i++) {
        char buf[64];
        cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH"));
        int rc = rs_mutex_lock(m);
        cr_assert_eq(rc, 0, "lock after SCRIPT FLUSH: %d %s", rc, rs_client_lasterror(c));
        cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH"));
        cr_expect_eq(rs_mutex_trylock(m2), EBUSY, "trylock after SCRIPT FLUSH");
        cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH"));
        rc = rs_mutex_unlock(m);
        cr_expect_eq(rc, 0, "unlock after SCRIPT FLUSH: %d %s", rc, rs_client_lasterror(c));
    }
    /* the watchdog's renewal path too: flush while held across several renewals */
    cr_assert_eq(rs_mutex_setlease(m, 300), 0);
    cr_assert_eq(rs_mutex_lock(m), 0);
    for (int i = 0; i < 6; i++) {
        char buf[64];
        ts_cmd_str(&s, buf, sizeof buf, "SCRIPT FLUSH");
        tu_sleep_ms(100);
    }
    cr_expect_gt(rs_mutex_remaining(m), 0, "renewals went on after SCRIPT FLUSH");
    cr_expect_eq(rs_mutex_unlock(m), 0, "unlock after renewals across SCRIPT FLUSH");
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 9. Waiters do not poll                                                                 */

Test(mutex, waiters_do_not_poll, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 3000, 2000, NULL);
    rs_client_t *cb = tu_open_client(&s, 3000, 2000, NULL);
    rs_mutex_t *ma = new_mutex(ca, "np");
    rs_mutex_t *mb = new_mutex(cb, "np");
    int rc = rs_mutex_lock(ma);
    cr_assert_eq(rc, 0, "A lock: %d", rc);

    locker_t B = {.m = mb, .wait_release = 1};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "np", 1, 5000), "B did not queue");
    tu_sleep_ms(300);
    long long before = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_assert_geq(before, 1);
    tu_sleep_ms(2500);
    long long after = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_expect_leq(after - before, 10, "%lld EVALSHA calls in 2.5 s with one waiter",
                  after - before);
    cr_expect_eq(atomic_load(&B.locked), 0, "B got the mutex while A held it");

    long long t0 = tu_mono_ms();
    rc = rs_mutex_unlock(ma);
    cr_expect_eq(rc, 0, "A unlock: %d", rc);
    cr_assert(tu_wait_atomic(&B.locked, 1, 5000), "B was not woken");
    cr_expect_eq(B.rc, 0, "B lock: %d %s", B.rc, B.err);
    cr_expect_lt(B.t_locked - t0, 1000, "B acquired %lld ms after the unlock", B.t_locked - t0);
    atomic_store(&B.release, 1);
    cr_assert(locker_join(&B, 5000));
    cr_expect_eq(B.unlock_rc, 0);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 10. Handoff in FIFO order                                                              */

Test(mutex, fifo_handoff, .timeout = 60)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 2000, 2000, NULL);
    rs_mutex_t *ma = new_mutex(ca, "ff");
    cr_assert_eq(rs_mutex_lock(ma), 0);
    uint64_t fa = rs_mutex_fence(ma);

    enum { NW = 3 };
    rs_client_t *cw[NW];
    rs_mutex_t *mw[NW];
    locker_t W[NW];
    atomic_int order = 0;
    memset(W, 0, sizeof W);
    for (int i = 0; i < NW; i++) {
        cw[i] = tu_open_client(&s, 2000, 2000, NULL);
        mw[i] = new_mutex(cw[i], "ff");
        W[i].m = mw[i];
        W[i].order = &order;
        W[i].hold_ms = 50;
        locker_start(&W[i]);
        cr_assert(wait_zcard(&s, "ff", i + 1, 5000), "waiter %d did not queue", i);
        tu_sleep_ms(200);
    }
    cr_assert_eq(atomic_load(&order), 0, "a waiter got the mutex while A held it");
    cr_assert_eq(rs_mutex_unlock(ma), 0);
    for (int i = 0; i < NW; i++)
        cr_assert(locker_join(&W[i], 10000), "waiter %d did not finish", i);
    uint64_t prev = fa;
    for (int i = 0; i < NW; i++) {
        cr_expect_eq(W[i].rc, 0, "waiter %d: lock %d %s", i, W[i].rc, W[i].err);
        cr_expect_eq(W[i].pos, i, "waiter %d (queued %d-th) was served %d-th", i, i, W[i].pos);
        cr_expect_eq(W[i].unlock_rc, 0, "waiter %d: unlock %d", i, W[i].unlock_rc);
        cr_expect_gt(W[i].fence, prev, "waiter %d token", i);
        prev = W[i].fence;
    }
    cr_expect_eq(zcard_q(&s, "ff"), 0);
    for (int i = 0; i < NW; i++) {
        rs_mutex_destroy(mw[i]);
        rs_client_close(cw[i]);
    }
    rs_mutex_destroy(ma);
    rs_client_close(ca);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 11. Many threads of one client                                                         */

#define TS_THREADS 8
#define TS_ITERS 50

typedef struct ts_shared {
    rs_mutex_t *shared;       /* NULL: each thread inits its own handle */
    rs_client_t *c;
    volatile int counter;
    atomic_int errors;
    atomic_int in_section;
    atomic_int overlaps;
} ts_shared_t;

static void *ts_thread_main(void *arg)
{
    ts_shared_t *sh = arg;
    rs_mutex_t *m = sh->shared;
    if (!m && rs_mutex_init(&m, sh->c, "th") != 0) {
        atomic_fetch_add(&sh->errors, 1);
        return NULL;
    }
    for (int i = 0; i < TS_ITERS; i++) {
        int rc = rs_mutex_lock(m);
        if (rc != 0) {
            fprintf(stderr, "thread lock: %d %s\n", rc, rs_client_lasterror(NULL));
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        if (atomic_fetch_add(&sh->in_section, 1) != 0)
            atomic_fetch_add(&sh->overlaps, 1);
        int v = sh->counter;
        sched_yield();
        sh->counter = v + 1;
        atomic_fetch_sub(&sh->in_section, 1);
        rc = rs_mutex_unlock(m);
        if (rc != 0) {
            fprintf(stderr, "thread unlock: %d %s\n", rc, rs_client_lasterror(NULL));
            atomic_fetch_add(&sh->errors, 1);
        }
    }
    if (!sh->shared && rs_mutex_destroy(m) != 0)
        atomic_fetch_add(&sh->errors, 1);
    return NULL;
}

static void run_threads(int shared_handle)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 5000, NULL);
    ts_shared_t sh;
    memset(&sh, 0, sizeof sh);
    sh.c = c;
    if (shared_handle)
        sh.shared = new_mutex(c, "th");
    pthread_t th[TS_THREADS];
    for (int i = 0; i < TS_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, ts_thread_main, &sh), 0);
    for (int i = 0; i < TS_THREADS; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(atomic_load(&sh.errors), 0, "errors");
    cr_expect_eq(atomic_load(&sh.overlaps), 0, "overlapping sections");
    cr_expect_eq(sh.counter, TS_THREADS * TS_ITERS, "lost increments");
    cr_expect_eq(zcard_q(&s, "th"), 0, "queue left behind");
    if (sh.shared)
        cr_expect_eq(rs_mutex_destroy(sh.shared), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(mutex, threads_own_handles, .timeout = 60)
{
    run_threads(0);
}

Test(mutex, threads_shared_handle, .timeout = 60)
{
    run_threads(1);
}

/* ------------------------------------------------------------------------------------- */
