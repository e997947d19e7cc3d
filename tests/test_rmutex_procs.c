/*
 * test_rmutex_procs.c - rmutex tests with forked processes: cross-process exclusion with
 * re-entry, a holder at count 2 killed (SIGKILL) or stopped (SIGSTOP) past its lease.
 * (moved from test_rmutex.c; suite "rmutex", shared helpers in test_rmutex.h).
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
