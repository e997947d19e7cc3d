/*
 * test_rwlock_queue.c - read-write lock tests of the queue: a writer not starved by
 * overlapping readers, a reader re-entering while a writer waits, a write release waking
 * the head readers at once, timed waits leaving the queue, waiters that do not poll.
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
/* A writer is not starved by readers that keep overlapping                               */

typedef struct stream_reader {
    rs_rwlock_t *rw;
    const ts_server_t *s;
    long offset_ms, hold_ms;
    atomic_int *stop;
    int rc;
    int sections;
    int after_writer;     /* sections started after the writer was done */
    atomic_int *writer_done;
    pthread_t th;
} stream_reader_t;

static void *stream_reader_main(void *arg)
{
    stream_reader_t *r = arg;
    redisContext *k = ts_connect(r->s);
    if (!k) {
        r->rc = 1;
        return NULL;
    }
    tu_sleep_ms(r->offset_ms);
    while (!atomic_load(r->stop)) {
        int rc = rs_rwlock_rdlock(r->rw);
        if (rc != 0) {
            r->rc = 2;
            break;
        }
        if (atomic_load(r->writer_done))
            r->after_writer++;
        chk_enter(k, 0);
        tu_sleep_ms(r->hold_ms);
        chk_exit(k, 0);
        if (rs_rwlock_unlock(r->rw) != 0)
            r->rc = 3;
        r->sections++;
    }
    redisFree(k);
    return NULL;
}

typedef struct starve_child {
    const ts_server_t *s;
    int fd;
} starve_child_t;

/* Waits for the readers to be going, then takes the write lock once and reports how long
 * it waited (ms) through fd. */
static int starve_writer_child(void *arg)
{
    starve_child_t *a = arg;
    rs_client_t *c = tu_open_client_ex(a->s, 2000, 3000, NULL);
    if (!c)
        return 10;
    rs_rwlock_t *rw;
    if (rs_rwlock_init(&rw, c, "sv") != 0)
        return 11;
    redisContext *k = ts_connect(a->s);
    if (!k)
        return 12;
    if (!wait_key_at_least(k, "chk:maxr", 2, 10000))
        return 13; /* the readers never overlapped */
    tu_sleep_ms(200);
    long long t0 = tu_mono_ms();
    int rc = rs_rwlock_wrlock(rw);
    long long waited = tu_mono_ms() - t0;
    if (rc != 0)
        return 14;
    if (chk_enter(k, 1) != 0)
        return 15;
    tu_sleep_ms(100);
    chk_exit(k, 1);
    if (rs_rwlock_unlock(rw) != 0)
        return 16;
    if (write(a->fd, &waited, sizeof waited) != (ssize_t)sizeof waited)
        return 17;
    redisFree(k);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    return 0;
}

Test(rwlock, writer_not_starved, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    starve_child_t sc = {&s, p[1]};
    pid_t pid = tu_spawn(starve_writer_child, &sc);

    /* three readers, each holding 300 ms and coming straight back, staggered by 100 ms:
     * without a fair queue there is always a reader in and the writer never gets a turn */
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "sv");
    rs_rwlock_t *rw2 = new_rw(c2, "sv");
    atomic_int stop = 0, writer_done = 0;
    stream_reader_t rd[3];
    for (int i = 0; i < 3; i++) {
        rd[i] = (stream_reader_t){.rw = i == 2 ? rw2 : rw, .s = &s, .offset_ms = 100 * i,
                                  .hold_ms = 300, .stop = &stop, .writer_done = &writer_done};
        cr_assert_eq(pthread_create(&rd[i].th, NULL, stream_reader_main, &rd[i]), 0);
    }
    long long waited = -1;
    int got = tu_read_full(p[0], &waited, sizeof waited, 20000);
    atomic_store(&writer_done, 1);
    tu_sleep_ms(800);
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(rd[i].th, NULL);
    cr_assert(got, "the writer never got in while readers kept overlapping");
    tu_assert_exit0(pid, tu_reap(pid, 10000), "writer");
    cr_expect_lt(waited, 3000, "the writer waited %lld ms behind 300 ms read sections", waited);
    int after = 0;
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(rd[i].rc, 0, "reader %d failed: %d", i, rd[i].rc);
        after += rd[i].after_writer;
    }
    cr_expect_gt(after, 0, "readers did not come back after the writer");
    cr_expect_eq(chk_get(&s, "chk:viol"), 0, "a reader overlapped the writer");
    cr_expect_geq(chk_get(&s, "chk:maxr"), 2, "readers never overlapped");
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_client_close(c);
    rs_client_close(c2);
    close(p[0]);
    close(p[1]);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* A reader re-enters at once while a writer waits (no self-deadlock)                      */

Test(rwlock, reader_reenters_while_writer_waits)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c3 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "re");
    rs_rwlock_t *rw2 = new_rw(c2, "re");
    rs_rwlock_t *rw3 = new_rw(c3, "re");

    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    locker_t W = {.rw = rw2, .write = 1, .wait_release = 1, .chk = &s};
    locker_start(&W);
    cr_assert(wait_zcard(&s, "re", 1, 5000), "the writer did not queue");

    /* a new reader queues behind the writer... */
    cr_expect_eq(rs_rwlock_tryrdlock(rw3), EBUSY, "a new reader jumped a queued writer");
    locker_t R3 = {.rw = rw3, .write = 0, .wait_release = 1, .chk = &s};
    locker_start(&R3);
    cr_assert(wait_zcard(&s, "re", 2, 5000), "the new reader did not queue");

    /* ...but the holder re-enters at once, blocking and try alike */
    long long t0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(5000);
    int rc = rs_rwlock_timedrdlock(rw, &dl);
    long long el = tu_mono_ms() - t0;
    cr_expect_eq(rc, 0, "re-entry behind a queued writer: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(el, 1500, "re-entry took %lld ms", el);
    cr_expect_eq(rs_rwlock_rdlock(rw), 0);
    cr_expect_eq(rs_rwlock_tryrdlock(rw), 0);
    cr_expect_eq(redis_read_counts(&s, "re", NULL), 4);
    cr_expect_eq(zcard_q(&s, "re"), 2, "the waiters stay queued");
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&W.locked), 0, "the writer got in beside a reader");
    cr_expect_eq(atomic_load(&R3.locked), 0, "the late reader jumped the writer");

    for (int i = 0; i < 3; i++)
        cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(atomic_load(&W.locked), 0, "the writer got in before the last unlock");
    t0 = tu_mono_ms();
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "last read unlock");
    cr_assert(tu_wait_atomic(&W.locked, 1, 5000), "the writer was not admitted");
    cr_expect_eq(W.rc, 0, "writer: %d %s", W.rc, W.err);
    cr_expect_lt(W.t_locked - t0, 1500, "writer admitted %lld ms after the unlock", W.t_locked - t0);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&R3.locked), 0, "the reader got in beside the writer");
    atomic_store(&W.release, 1);
    cr_assert(tu_wait_atomic(&R3.locked, 1, 5000), "the reader was not admitted after the writer");
    cr_expect_eq(R3.rc, 0);
    atomic_store(&R3.release, 1);
    cr_assert(locker_join(&W, 5000));
    cr_assert(locker_join(&R3, 5000));
    cr_expect_eq(W.unlock_rc, 0);
    cr_expect_eq(R3.unlock_rc, 0);
    cr_expect_eq(chk_get(&s, "chk:viol"), 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_rwlock_destroy(rw3);
    rs_client_close(c);
    rs_client_close(c2);
    rs_client_close(c3);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* A write release admits every reader at the head of the queue at once                    */

#define WK_READERS 3

typedef struct wake_child {
    const ts_server_t *s;
    int fd;
} wake_child_t;

/* rdlock (queued behind the writer), then wait until all WK_READERS hold at once, report
 * the time of the grant, and hold a little longer. */
static int wake_reader_child(void *arg)
{
    wake_child_t *w = arg;
    rs_client_t *c = tu_open_client_ex(w->s, 2000, 3000, NULL);
    if (!c)
        return 10;
    rs_rwlock_t *rw;
    if (rs_rwlock_init(&rw, c, "wk") != 0)
        return 11;
    redisContext *k = ts_connect(w->s);
    if (!k)
        return 12;
    if (!wait_key_at_least(k, "wk:go", 1, 15000))
        return 18; /* the writer never took the lock */
    if (rs_rwlock_rdlock(rw) != 0)
        return 13;
    long long t = tu_mono_ms();
    if (chk_enter(k, 0) != 0)
        return 14;
    redisReply *r = redisCommand(k, "INCR wk:in");
    if (r)
        freeReplyObject(r);
    if (!wait_key_at_least(k, "wk:in", WK_READERS, 10000))
        return 15; /* the readers were not admitted together */
    if (write(w->fd, &t, sizeof t) != (ssize_t)sizeof t)
        return 16;
    tu_sleep_ms(300);
    chk_exit(k, 0);
    if (rs_rwlock_unlock(rw) != 0)
        return 17;
    redisFree(k);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    return 0;
}

Test(rwlock, write_release_wakes_head_readers, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    /* the readers are forked before this process starts library threads */
    wake_child_t wc = {&s, p[1]};
    pid_t pids[WK_READERS];
    for (int i = 0; i < WK_READERS; i++)
        pids[i] = tu_spawn(wake_reader_child, &wc);
    /* the writer's long lease: a reader not admitted by the release itself would only
     * retry after about 4 s */
    rs_client_t *c = tu_open_client(&s, 4000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "wk");
    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    cr_assert_eq(ts_cmd_int(&s, "SET wk:go 1"), -1); /* "OK": not an integer */
    cr_assert(wait_zcard(&s, "wk", WK_READERS, 10000), "the readers did not queue");
    /* behind them a writer, and behind it another reader */
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c3 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw2 = new_rw(c2, "wk");
    rs_rwlock_t *rw3 = new_rw(c3, "wk");
    locker_t W2 = {.rw = rw2, .write = 1, .hold_ms = 200, .chk = &s};
    locker_start(&W2);
    cr_assert(wait_zcard(&s, "wk", WK_READERS + 1, 5000), "the second writer did not queue");
    locker_t R4 = {.rw = rw3, .write = 0, .chk = &s};
    locker_start(&R4);
    cr_assert(wait_zcard(&s, "wk", WK_READERS + 2, 5000), "the last reader did not queue");
    long long evalsha0 = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");

    long long t0 = tu_mono_ms();
    cr_assert_eq(rs_rwlock_unlock(rw), 0);
    long long tmax = 0;
    for (int i = 0; i < WK_READERS; i++) {
        long long t = 0;
        cr_assert(tu_read_full(p[0], &t, sizeof t, 15000), "reader %d never held with the others",
                  i);
        if (t - t0 > tmax)
            tmax = t - t0;
    }
    long long evalsha1 = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_expect_lt(tmax, 1500, "the last head reader was admitted %lld ms after the release", tmax);
    /* the release admitted all of them: they did not need an acq each to get in */
    cr_expect_leq(evalsha1 - evalsha0, 10,
                  "%lld EVALSHA between the release and all readers in", evalsha1 - evalsha0);
    for (int i = 0; i < WK_READERS; i++)
        tu_assert_exit0(pids[i], tu_reap(pids[i], 10000), "head reader");

    cr_assert(locker_join(&W2, 10000), "the second writer did not finish");
    cr_assert(locker_join(&R4, 10000), "the last reader did not finish");
    cr_expect_eq(W2.rc, 0, "second writer: %d %s", W2.rc, W2.err);
    cr_expect_eq(R4.rc, 0, "last reader: %d %s", R4.rc, R4.err);
    cr_expect_geq(R4.t_locked, W2.t_unlocked, "the last reader jumped the second writer");
    cr_expect_gt(W2.t_locked, t0 + 250, "the second writer overlapped the head readers");
    cr_expect_eq(chk_get(&s, "chk:viol"), 0, "sections overlapping a writer");
    cr_expect_geq(chk_get(&s, "chk:maxr"), WK_READERS);
    cr_expect_eq(zcard_q(&s, "wk"), 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_rwlock_destroy(rw3);
    rs_client_close(c);
    rs_client_close(c2);
    rs_client_close(c3);
    close(p[0]);
    close(p[1]);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* timed variants: ETIMEDOUT, leave the queue, and what was behind moves up               */

Test(rwlock, timed_timeout_leaves_queue)
{
    ts_server_t s;
    tu_start_server(&s);
    /* the first reader's long lease: nobody behind it retries on their own for 6 s */
    rs_client_t *c = tu_open_client(&s, 6000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c3 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "tm");
    rs_rwlock_t *rw2 = new_rw(c2, "tm");
    rs_rwlock_t *rw3 = new_rw(c3, "tm");

    /* write-held: both timed variants time out and leave nothing queued */
    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    for (int write = 0; write < 2; write++) {
        struct timespec dl = tu_abs_in(500);
        long long t0 = tu_mono_ms();
        int rc = write ? rs_rwlock_timedwrlock(rw2, &dl) : rs_rwlock_timedrdlock(rw2, &dl);
        long long el = tu_mono_ms() - t0;
        cr_expect_eq(rc, ETIMEDOUT, "timed%slock: %d %s", write ? "wr" : "rd", rc,
                     rs_client_lasterror(c2));
        cr_expect(el >= 450 && el < 3000, "timed%slock returned after %lld ms (deadline 500)",
                  write ? "wr" : "rd", el);
        cr_expect_eq(zcard_q(&s, "tm"), 0, "the timed-out waiter stayed queued");
        cr_expect_eq(ts_cmd_int(&s, "HLEN rs:{tm}:rwlock:qi"), 0);
    }
    /* a past deadline: one attempt, never queued */
    struct timespec past = tu_abs_in(-1000);
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_rwlock_timedrdlock(rw2, &past), ETIMEDOUT);
    cr_expect_eq(rs_rwlock_timedwrlock(rw2, &past), ETIMEDOUT);
    cr_expect_lt(tu_mono_ms() - t0, 1000);
    cr_expect_eq(zcard_q(&s, "tm"), 0, "a past deadline queued");
    cr_expect_eq(rs_rwlock_unlock(rw2), EPERM, "the timeouts left no hold");
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(rs_rwlock_timedwrlock(rw2, &past), 0, "a past deadline on a free lock takes it");
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);

    /* read-held; a timed writer queues, a reader queues behind it; when the writer gives
     * up, the reader behind it is admitted beside the first reader */
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    locker_t W = {.rw = rw2, .write = 1, .timeout_ms = 1000};
    locker_start(&W);
    cr_assert(wait_zcard(&s, "tm", 1, 5000), "the timed writer did not queue");
    locker_t R = {.rw = rw3, .write = 0, .wait_release = 1};
    locker_start(&R);
    cr_assert(wait_zcard(&s, "tm", 2, 5000), "the reader did not queue behind the writer");
    cr_assert(locker_join(&W, 10000), "the timed writer did not return");
    cr_expect_eq(W.rc, ETIMEDOUT, "timed writer: %d %s", W.rc, W.err);
    cr_assert(tu_wait_atomic(&R.locked, 1, 5000), "the reader behind the writer was not admitted");
    cr_expect_eq(R.rc, 0, "reader: %d %s", R.rc, R.err);
    cr_expect_lt(R.t_locked - W.t_locked, 1500, "reader admitted %lld ms after the writer left",
                 R.t_locked - W.t_locked);
    cr_expect_eq(zcard_q(&s, "tm"), 0);
    atomic_store(&R.release, 1);
    cr_assert(locker_join(&R, 5000));
    cr_expect_eq(R.unlock_rc, 0);
    cr_expect_eq(rs_rwlock_unlock(rw), 0);

    /* a timed acquisition that succeeds */
    struct timespec dl = tu_abs_in(3000);
    cr_expect_eq(rs_rwlock_timedwrlock(rw3, &dl), 0);
    cr_expect_neq(rs_rwlock_fence(rw3), 0);
    cr_expect_eq(rs_rwlock_unlock(rw3), 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_rwlock_destroy(rw3);
    rs_client_close(c);
    rs_client_close(c2);
    rs_client_close(c3);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Waiters do not poll                                                                    */

Test(rwlock, waiters_do_not_poll)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *ca = tu_open_client(&s, 3000, 3000, NULL);
    rs_client_t *cb = tu_open_client(&s, 3000, 3000, NULL);
    rs_rwlock_t *ra = new_rw(ca, "np");
    rs_rwlock_t *rb = new_rw(cb, "np");
    cr_assert_eq(rs_rwlock_wrlock(ra), 0);

    locker_t B = {.rw = rb, .write = 0, .wait_release = 1};
    locker_start(&B);
    cr_assert(wait_zcard(&s, "np", 1, 5000), "the reader did not queue");
    tu_sleep_ms(200);
    long long before = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    cr_assert_geq(before, 1);
    tu_sleep_ms(2200);
    long long after = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    /* the writer's renewals and the waiter's queue-entry renewals, one per second each */
    cr_expect_leq(after - before, 8, "%lld EVALSHA calls in 2.2 s with one waiting reader",
                  after - before);
    cr_expect_eq(atomic_load(&B.locked), 0, "the reader got in beside the writer");

    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_rwlock_unlock(ra), 0);
    cr_assert(tu_wait_atomic(&B.locked, 1, 5000), "the reader was not woken");
    cr_expect_eq(B.rc, 0, "reader: %d %s", B.rc, B.err);
    cr_expect_lt(B.t_locked - t0, 1000, "reader admitted %lld ms after the unlock", B.t_locked - t0);
    atomic_store(&B.release, 1);
    cr_assert(locker_join(&B, 5000));
    cr_expect_eq(B.unlock_rc, 0);
    rs_rwlock_destroy(ra);
    rs_rwlock_destroy(rb);
    rs_client_close(ca);
    rs_client_close(cb);
    ts_server_stop(&s);
}
