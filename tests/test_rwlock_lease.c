/*
 * test_rwlock_lease.c - read-write lock tests of leases: a reader or writer killed
 * with kill -9, renewal and close, a hold lost while held.
 * (moved from test_rwlock.c; suite "rwlock", shared helpers in test_rwlock.h).
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
#include "test_rwlock.h"

/* ------------------------------------------------------------------------------------- */
/* A reader killed with kill -9 stops blocking writers when its lease runs out             */

typedef struct kill_child {
    const ts_server_t *s;
    int fd;
} kill_child_t;

static int kill_reader_child(void *arg)
{
    kill_child_t *k = arg;
    rs_client_t *c = tu_open_client_ex(k->s, 500, 3000, NULL);
    if (!c)
        return 10;
    rs_rwlock_t *rw;
    if (rs_rwlock_init(&rw, c, "k9") != 0)
        return 11;
    if (rs_rwlock_rdlock(rw) != 0)
        return 12;
    char ok = 'R';
    if (write(k->fd, &ok, 1) != 1)
        return 13;
    for (;;)
        pause(); /* killed here, holding the read lock */
}

Test(rwlock, killed_reader, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    kill_child_t kc = {&s, p[1]};
    pid_t pid = tu_spawn(kill_reader_child, &kc);
    char ok = 0;
    cr_assert(tu_read_full(p[0], &ok, 1, 10000), "the child did not take the read lock");

    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "k9");
    rs_rwlock_t *rw2 = new_rw(c2, "k9");
    cr_expect_eq(rs_rwlock_trywrlock(rw), EBUSY, "the child reads");
    locker_t W = {.rw = rw, .write = 1, .wait_release = 1};
    locker_start(&W);
    cr_assert(wait_zcard(&s, "k9", 1, 5000), "the writer did not queue");
    tu_sleep_ms(1000); /* two of the child's leases: it renews, the writer keeps waiting */
    cr_expect_eq(atomic_load(&W.locked), 0, "the writer got in beside a live reader");
    cr_expect_eq(rs_rwlock_tryrdlock(rw2), EBUSY, "a reader jumped the queued writer");

    long long t0 = tu_mono_ms();
    kill(pid, SIGKILL);
    int st = tu_reap(pid, 5000);
    cr_expect(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status 0x%x", st);
    cr_assert(tu_wait_atomic(&W.locked, 1, 10000), "the writer never got in after the kill");
    long long el = W.t_locked - t0;
    cr_expect_eq(W.rc, 0, "writer: %d %s", W.rc, W.err);
    cr_expect_lt(el, 500 + 2500, "the writer got in %lld ms after the kill (lease 500)", el);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{k9}:rwlock:ri"), 0, "the dead reader's hold stayed");
    atomic_store(&W.release, 1);
    cr_assert(locker_join(&W, 5000));
    cr_expect_eq(W.unlock_rc, 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_client_close(c);
    rs_client_close(c2);
    close(p[0]);
    close(p[1]);
    ts_server_stop(&s);
}

/* A writer killed with kill -9: the readers queued behind it get in when its lease runs out
 * (the lock had been written before, so its main key carries a 10 s tombstone: the writer's
 * lease, not the key's TTL, has to end the hold). */
static int kill_writer_child(void *arg)
{
    kill_child_t *k = arg;
    rs_client_t *c = tu_open_client_ex(k->s, 500, 3000, NULL);
    if (!c)
        return 10;
    rs_rwlock_t *rw;
    if (rs_rwlock_init(&rw, c, "kw") != 0)
        return 11;
    if (rs_rwlock_wrlock(rw) != 0 || rs_rwlock_unlock(rw) != 0)
        return 12;
    if (rs_rwlock_wrlock(rw) != 0)
        return 13;
    char ok = 'W';
    if (write(k->fd, &ok, 1) != 1)
        return 14;
    for (;;)
        pause(); /* killed here, holding the write lock */
}

Test(rwlock, killed_writer, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    kill_child_t kc = {&s, p[1]};
    pid_t pid = tu_spawn(kill_writer_child, &kc);
    char ok = 0;
    cr_assert(tu_read_full(p[0], &ok, 1, 10000), "the child did not take the write lock");

    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "kw");
    locker_t R = {.rw = rw, .write = 0, .wait_release = 1};
    locker_start(&R);
    cr_assert(wait_zcard(&s, "kw", 1, 5000), "the reader did not queue");
    tu_sleep_ms(700);
    cr_expect_eq(atomic_load(&R.locked), 0, "the reader got in beside a live writer");
    long long t0 = tu_mono_ms();
    kill(pid, SIGKILL);
    int st = tu_reap(pid, 5000);
    cr_expect(st >= 0 && WIFSIGNALED(st), "child status 0x%x", st);
    cr_assert(tu_wait_atomic(&R.locked, 1, 15000), "the reader never got in after the kill");
    long long el = R.t_locked - t0;
    cr_expect_eq(R.rc, 0, "reader: %d %s", R.rc, R.err);
    cr_expect_lt(el, 500 + 2500, "the reader got in %lld ms after the kill (lease 500)", el);
    atomic_store(&R.release, 1);
    cr_assert(locker_join(&R, 5000));
    cr_expect_eq(R.unlock_rc, 0);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    close(p[0]);
    close(p[1]);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Leases: renewal keeps holds, close releases them                                       */

Test(rwlock, renewal_and_close)
{
    ts_server_t s;
    tu_start_server(&s);
    /* a 600 ms lease (renewed every 200 ms): 300 ms lost a renewal now and then when make
     * test ran six jobs on two busy cores */
    rs_client_t *c = tu_open_client(&s, 600, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "rn");
    rs_rwlock_t *rw2 = new_rw(c2, "rn");
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    cr_assert_eq(in_thread(rw, OP_TRYRD), 0);
    tu_sleep_ms(1200); /* two leases: the watchdog renews the read hold */
    cr_expect_eq(rs_rwlock_trywrlock(rw2), EBUSY, "the renewed read hold was lost");
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "unlock after renewals");
    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    tu_sleep_ms(1200);
    cr_expect_eq(rs_rwlock_tryrdlock(rw2), EBUSY, "the renewed write hold was lost");
    cr_expect_eq(rs_rwlock_rdlock(rw), 0);
    /* close releases both holds of the thread at once */
    rs_rwlock_destroy(rw); /* EBUSY: still held; close frees it */
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_client_close(c), 0);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), 0, "the closed client's holds stayed");
    cr_expect_lt(tu_mono_ms() - t0, 1000);
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);
    cr_expect_eq(rs_rwlock_destroy(rw), 0, "destroy after close");
    rs_rwlock_destroy(rw2);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* A hold lost while held: the next unlock says so                                        */

Test(rwlock, lost_hold)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "ls");
    rs_rwlock_t *rw2 = new_rw(c2, "ls");
    /* a read hold taken away behind its owner's back (an operator's DEL) */
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{ls}:rwlock:rd rs:{ls}:rwlock:ri"), 2);
    cr_expect_eq(rs_rwlock_rdlock(rw), RS_ELOST, "re-entry of a lost read hold");
    cr_expect_eq(rs_rwlock_unlock(rw), RS_ELOST, "unlock of a lost read hold");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM, "cleared with all its re-entries");
    /* the same for a write hold */
    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{ls}:rwlock"), 1);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), 0, "someone else takes it");
    cr_expect_eq(rs_rwlock_unlock(rw), RS_ELOST, "unlock of a lost write hold");
    cr_expect_eq(rs_rwlock_fence(rw), 0);
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM);
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{ls}:rwlock o"), 1, "the new writer was disturbed");
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}
