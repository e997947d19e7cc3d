/*
 * test_sem_lease.c - semaphore tests of leases and lost permits: a holder killed
 * with kill -9, permits lost while held, a post retried after a stall, close releasing.
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
