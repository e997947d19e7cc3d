/*
 * test_rwlock.c - Criterion tests of the distributed read-write lock (rs_rwlock_*), from the
 * public API down to its Lua script (called directly with EVAL in rwlock/script_*).
 *
 * Every test starts its own redis-server on a free port and stops it. Cross-process tests
 * fork workers; each child opens its own client after fork() and reports through its exit
 * status, a pipe or the test's redis. Criterion assertions are only made in the test's main
 * thread; helper threads and children record results for it.
 *
 * Exclusion is checked with a small checker script on the test's redis: entering a section
 * atomically increments the section's own counter, reads the other mode's counter and counts
 * a violation if a writer would not be alone; it also keeps the maximum of each counter, so
 * "a writer is alone" is maxw == 1 with no violation, and "readers overlap" is maxr > 1.
 *
 * Timing bounds are deliberately generous: the suite runs as -j6 on small, noisy machines.
 *
 * The suite "rwlock" spans test_rwlock.c (basics, bad input, exclusion, readers sharing,
 * downgrade, try variants, fencing tokens), test_rwlock_queue.c (the queue: a writer not
 * starved, re-entry behind a queued writer, head readers woken together, timed waits
 * leaving the queue, no polling), test_rwlock_lease.c (leases: killed holders, renewal and
 * close, a lost hold) and test_rwlock_script.c (the Lua script called directly, the
 * inspection ops, forced holders); their shared helpers are in test_rwlock.h.
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

TestSuite(rwlock, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* Basics: re-entry in both modes, EPERM, EBUSY from destroy, counts kept in Redis          */

Test(rwlock, basics_and_reentry)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "b");
    rs_rwlock_t *rw2 = new_rw(c2, "b");

    cr_expect_eq(rs_rwlock_fence(rw), 0, "fence without a hold");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM, "unlock without a hold");

    /* read, re-entered three times: one read hold with count 3 in Redis */
    for (int i = 0; i < 3; i++) {
        int rc = rs_rwlock_rdlock(rw);
        cr_assert_eq(rc, 0, "rdlock #%d: %d %s", i, rc, rs_client_lasterror(c));
    }
    cr_expect_eq(rs_rwlock_tryrdlock(rw), 0, "tryrdlock by a reader re-enters");
    long long holders;
    cr_expect_eq(redis_read_counts(&s, "b", &holders), 4, "read count in Redis");
    cr_expect_eq(holders, 1, "one read hold per thread");
    cr_expect_eq(rs_rwlock_fence(rw), 0, "a read hold exposes no write token");
    cr_expect_eq(in_thread(rw, OP_UNLOCK), EPERM, "unlock by another thread");
    cr_expect_eq(rs_rwlock_unlock(rw2), EPERM, "unlock by another client");
    cr_expect_eq(rs_rwlock_destroy(rw), EBUSY, "destroy while held");
    cr_expect_eq(in_thread(rw, OP_TRYRD), 0, "another thread of the client reads too");
    cr_expect_eq(rs_rwlock_tryrdlock(rw2), 0, "another client reads too");
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), EBUSY, "trywrlock while read-held");
    for (int i = 0; i < 4; i++)
        cr_expect_eq(rs_rwlock_unlock(rw), 0, "read unlock #%d", i);
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM, "unlock beyond the count");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{b}:rwlock:ri"), 0, "read hold left in Redis");

    /* write, re-entered: same token, count in Redis, try by the writer re-enters */
    int rc = rs_rwlock_wrlock(rw);
    cr_assert_eq(rc, 0, "wrlock: %d %s", rc, rs_client_lasterror(c));
    uint64_t f = rs_rwlock_fence(rw);
    cr_expect_neq(f, 0, "fence while write-held");
    cr_expect_eq(rs_rwlock_wrlock(rw), 0, "wrlock re-entry");
    cr_expect_eq(rs_rwlock_trywrlock(rw), 0, "trywrlock re-entry");
    struct timespec dl = tu_abs_in(1000);
    cr_expect_eq(rs_rwlock_timedwrlock(rw, &dl), 0, "timedwrlock re-entry");
    cr_expect_eq(rs_rwlock_fence(rw), f, "re-entries keep the token");
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{b}:rwlock n"), 4, "write count in Redis");
    cr_expect_eq(rs_rwlock_tryrdlock(rw2), EBUSY, "tryrdlock while write-held");
    cr_expect_eq(rs_rwlock_trywrlock(rw2), EBUSY, "trywrlock while write-held");
    cr_expect_eq(in_thread(rw, OP_TRYWR), EBUSY, "trywrlock by another thread");
    cr_expect_eq(in_thread(rw, OP_UNLOCK), EPERM, "unlock by another thread");
    for (int i = 0; i < 3; i++)
        cr_expect_eq(rs_rwlock_unlock(rw), 0, "write unlock #%d", i);
    cr_expect_eq(ts_cmd_int(&s, "HGET rs:{b}:rwlock n"), 1, "write count after 3 unlocks");
    cr_expect_eq(rs_rwlock_fence(rw), f);
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "last write unlock");
    cr_expect_eq(rs_rwlock_fence(rw), 0, "fence after unlock");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM);

    /* every key carries a TTL */
    cr_expect_eq(rs_rwlock_rdlock(rw), 0);
    const char *keys[] = {"rs:{b}:rwlock", "rs:{b}:rwlock:fence", "rs:{b}:rwlock:rd",
                          "rs:{b}:rwlock:ri"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        long long t = ts_cmd_int(&s, "PTTL %s", keys[i]);
        cr_expect_gt(t, 0, "PTTL %s = %lld", keys[i], t);
    }
    cr_expect_eq(rs_rwlock_unlock(rw), 0);

    /* the next write hold has a larger token */
    cr_expect_eq(rs_rwlock_wrlock(rw2), 0);
    cr_expect_gt(rs_rwlock_fence(rw2), f, "tokens rise");
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);

    cr_expect_eq(rs_rwlock_destroy(rw), 0);
    cr_expect_eq(rs_rwlock_destroy(rw2), 0);
    cr_expect_eq(rs_rwlock_destroy(NULL), 0);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Bad input                                                                              */

Test(rwlock, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = NULL;
    cr_expect_eq(rs_rwlock_init(NULL, c, "x"), EINVAL);
    cr_expect_eq(rs_rwlock_init(&rw, c, NULL), EINVAL);
    cr_expect_null(rw);
    cr_expect_eq(rs_rwlock_init(&rw, c, ""), EINVAL);
    char big[RS_NAME_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cr_expect_eq(rs_rwlock_init(&rw, c, big), EINVAL, "name over RS_NAME_MAX");
    big[RS_NAME_MAX] = '\0';
    cr_expect_eq(rs_rwlock_init(&rw, c, big), 0, "name of RS_NAME_MAX bytes");
    cr_expect_eq(rs_rwlock_destroy(rw), 0);

    struct timespec dl = tu_abs_in(1000);
    cr_expect_eq(rs_rwlock_rdlock(NULL), EINVAL);
    cr_expect_eq(rs_rwlock_tryrdlock(NULL), EINVAL);
    cr_expect_eq(rs_rwlock_timedrdlock(NULL, &dl), EINVAL);
    cr_expect_eq(rs_rwlock_wrlock(NULL), EINVAL);
    cr_expect_eq(rs_rwlock_trywrlock(NULL), EINVAL);
    cr_expect_eq(rs_rwlock_timedwrlock(NULL, &dl), EINVAL);
    cr_expect_eq(rs_rwlock_unlock(NULL), EINVAL);
    cr_expect_eq(rs_rwlock_fence(NULL), 0);
    cr_expect_eq(rs_rwlock_destroy(NULL), 0);

    rw = new_rw(c, "}odd{name");
    cr_expect_eq(rs_rwlock_timedrdlock(rw, NULL), EINVAL, "NULL deadline");
    cr_expect_eq(rs_rwlock_timedwrlock(rw, NULL), EINVAL, "NULL deadline");
    dl.tv_nsec = 1000000000L;
    cr_expect_eq(rs_rwlock_timedrdlock(rw, &dl), EINVAL, "tv_nsec out of range");
    cr_expect_eq(rs_rwlock_timedwrlock(rw, &dl), EINVAL, "tv_nsec out of range");
    dl.tv_nsec = -1;
    cr_expect_eq(rs_rwlock_timedwrlock(rw, &dl), EINVAL, "negative tv_nsec");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM, "the failed calls took nothing");
    /* an odd name works like any other */
    cr_expect_eq(rs_rwlock_wrlock(rw), 0);
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(rs_rwlock_destroy(rw), 0);

    /* a foreign key of another type: RS_ESERVER, nothing written */
    char buf[64];
    cr_assert_not_null(ts_cmd_str(&s, buf, sizeof buf, "SET rs:{w}:rwlock:rd foreign"));
    rw = new_rw(c, "w");
    cr_expect_eq(rs_rwlock_rdlock(rw), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "lasterror: %s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_rwlock_trywrlock(rw), RS_ESERVER);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{w}:rwlock rs:{w}:rwlock:fence rs:{w}:rwlock:ri"), 0,
                 "the failed calls wrote keys");
    cr_expect_eq(ts_cmd_int(&s, "PTTL rs:{w}:rwlock:rd"), -1, "the foreign key got a TTL");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM);
    cr_expect_eq(rs_rwlock_destroy(rw), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Exclusion across processes and threads: a writer is alone, readers overlap              */

#define MIX_PROCS 3
#define MIX_THREADS 2
#define MIX_RUN_MS 3000

typedef struct mix_arg {
    const ts_server_t *s;
    rs_rwlock_t *rw;   /* shared handle of the process */
    unsigned seed;
    int rc;            /* 0 ok */
    int sections_r, sections_w;
} mix_arg_t;

/* Random reads (2/3) and writes (1/3) for MIX_RUN_MS, each section checked. */
static void *mix_thread(void *arg)
{
    mix_arg_t *a = arg;
    redisContext *k = ts_connect(a->s);
    if (!k) {
        a->rc = 1;
        return NULL;
    }
    long long end = tu_mono_ms() + MIX_RUN_MS;
    while (tu_mono_ms() < end && a->rc == 0) {
        int write = rand_r(&a->seed) % 3 == 0;
        int rc = write ? rs_rwlock_wrlock(a->rw) : rs_rwlock_rdlock(a->rw);
        if (rc != 0) {
            fprintf(stderr, "mix: lock(%d): %d %s\n", write, rc, rs_client_lasterror(NULL));
            a->rc = 2;
            break;
        }
        if (write && rs_rwlock_fence(a->rw) == 0)
            a->rc = 3;
        if (chk_enter(k, write) != 0)
            a->rc = 4;
        tu_sleep_ms(write ? 5 + rand_r(&a->seed) % 10 : 10 + rand_r(&a->seed) % 30);
        if (chk_exit(k, write) != 0)
            a->rc = 5;
        rc = rs_rwlock_unlock(a->rw);
        if (rc != 0) {
            fprintf(stderr, "mix: unlock: %d %s\n", rc, rs_client_lasterror(NULL));
            a->rc = 6;
        }
        if (write)
            a->sections_w++;
        else
            a->sections_r++;
    }
    redisFree(k);
    return NULL;
}

/* Runs MIX_THREADS mix threads on one client and handle; 0 if all went well. */
static int mix_run(const ts_server_t *s, unsigned seed, int *nr, int *nw)
{
    rs_client_t *c = tu_open_client_ex(s, 1500, 3000, NULL);
    if (!c)
        return 10;
    rs_rwlock_t *rw;
    if (rs_rwlock_init(&rw, c, "mix") != 0)
        return 11;
    mix_arg_t a[MIX_THREADS];
    pthread_t th[MIX_THREADS];
    for (int i = 0; i < MIX_THREADS; i++) {
        a[i] = (mix_arg_t){.s = s, .rw = rw, .seed = seed * 31 + (unsigned)i};
        if (pthread_create(&th[i], NULL, mix_thread, &a[i]) != 0)
            return 12;
    }
    int rc = 0;
    for (int i = 0; i < MIX_THREADS; i++) {
        pthread_join(th[i], NULL);
        if (a[i].rc && !rc)
            rc = 20 + a[i].rc;
        *nr += a[i].sections_r;
        *nw += a[i].sections_w;
    }
    if (rs_rwlock_destroy(rw) != 0 && !rc)
        rc = 13;
    rs_client_close(c);
    return rc;
}

static int mix_child(void *arg)
{
    const ts_server_t *s = arg;
    int nr = 0, nw = 0;
    int rc = mix_run(s, (unsigned)getpid(), &nr, &nw);
    return rc ? rc : (nr > 0 && nw > 0 ? 0 : 30);
}

Test(rwlock, writer_alone_readers_overlap, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    pid_t pids[MIX_PROCS];
    for (int i = 0; i < MIX_PROCS; i++)
        pids[i] = tu_spawn(mix_child, &s);
    int nr = 0, nw = 0;
    int rc = mix_run(&s, 7, &nr, &nw);
    cr_expect_eq(rc, 0, "the test process's threads failed: %d", rc);
    for (int i = 0; i < MIX_PROCS; i++)
        tu_assert_exit0(pids[i], tu_reap(pids[i], 40000), "mix worker");

    cr_expect_gt(nw, 0, "no write sections");
    cr_expect_eq(chk_get(&s, "chk:viol"), 0, "sections overlapping a writer");
    cr_expect_eq(chk_get(&s, "chk:maxw"), 1, "max writers at once");
    cr_expect_geq(chk_get(&s, "chk:maxr"), 2, "readers never overlapped");
    cr_expect_eq(chk_get(&s, "chk:w"), 0);
    cr_expect_eq(chk_get(&s, "chk:r"), 0);
    cr_expect_eq(zcard_q(&s, "mix"), 0, "queue left behind");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{mix}:rwlock:ri"), 0, "read holds left behind");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{mix}:rwlock o"), 0, "write hold left behind");
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Readers share: several processes and threads hold the read lock at the same time        */

#define OV_PROCS 3
#define OV_THREADS 2
#define OV_ALL (OV_PROCS + OV_THREADS)

/* rdlock, announce, wait until every reader holds, unlock. 0 if all of it happened. */
static int overlap_reader(const ts_server_t *s, rs_rwlock_t *rw)
{
    redisContext *k = ts_connect(s);
    if (!k)
        return 1;
    int rc = rs_rwlock_rdlock(rw);
    if (rc != 0) {
        redisFree(k);
        return 2;
    }
    redisReply *r = redisCommand(k, "INCR ov:in");
    if (r)
        freeReplyObject(r);
    int all = wait_key_at_least(k, "ov:in", OV_ALL, 15000);
    if (rs_rwlock_unlock(rw) != 0)
        rc = 3;
    redisFree(k);
    return rc ? rc : all ? 0 : 4;
}

static int overlap_child(void *arg)
{
    const ts_server_t *s = arg;
    rs_client_t *c = tu_open_client_ex(s, 1000, 3000, NULL);
    if (!c)
        return 10;
    rs_rwlock_t *rw;
    if (rs_rwlock_init(&rw, c, "ov") != 0)
        return 11;
    int rc = overlap_reader(s, rw);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    return rc;
}

typedef struct ov_thread {
    const ts_server_t *s;
    rs_rwlock_t *rw;
    int rc;
} ov_thread_t;

static void *overlap_thread(void *arg)
{
    ov_thread_t *t = arg;
    t->rc = overlap_reader(t->s, t->rw);
    return NULL;
}

Test(rwlock, readers_share, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    pid_t pids[OV_PROCS];
    for (int i = 0; i < OV_PROCS; i++)
        pids[i] = tu_spawn(overlap_child, &s);
    rs_client_t *c = tu_open_client(&s, 1000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "ov"); /* one handle shared by the threads */
    ov_thread_t t[OV_THREADS];
    pthread_t th[OV_THREADS];
    for (int i = 0; i < OV_THREADS; i++) {
        t[i] = (ov_thread_t){.s = &s, .rw = rw, .rc = -1};
        cr_assert_eq(pthread_create(&th[i], NULL, overlap_thread, &t[i]), 0);
    }
    for (int i = 0; i < OV_THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(t[i].rc, 0, "reader thread %d: %d", i, t[i].rc);
    }
    for (int i = 0; i < OV_PROCS; i++)
        tu_assert_exit0(pids[i], tu_reap(pids[i], 20000), "reader process");
    cr_expect_eq(ts_cmd_int(&s, "GET ov:in"), OV_ALL);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{ov}:rwlock:ri"), 0, "read holds left behind");
    cr_expect_eq(rs_rwlock_destroy(rw), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Downgrade; upgrade refused                                                             */

Test(rwlock, downgrade)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "dg");
    rs_rwlock_t *rw2 = new_rw(c2, "dg");

    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    uint64_t f = rs_rwlock_fence(rw);
    cr_expect_neq(f, 0);
    /* a reader and a writer of another client queue */
    locker_t R = {.rw = rw2, .write = 0, .wait_release = 1};
    locker_start(&R);
    cr_assert(wait_zcard(&s, "dg", 1, 5000), "the reader did not queue");

    /* the writer takes the read lock at once, queue or not */
    long long t0 = tu_mono_ms();
    int rc = rs_rwlock_rdlock(rw);
    cr_expect_eq(rc, 0, "rdlock by the writer: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(tu_mono_ms() - t0, 1500);
    cr_expect_eq(rs_rwlock_fence(rw), f, "the write token stays while both are held");
    cr_expect_eq(rs_rwlock_wrlock(rw), 0, "a writer holding both re-enters the write lock");
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "drops one write re-entry");
    cr_expect_eq(rs_rwlock_fence(rw), f);
    cr_expect_eq(atomic_load(&R.locked), 0, "the reader got in beside the writer");

    /* unlock drops the write hold; the queued reader joins the downgraded one */
    t0 = tu_mono_ms();
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "unlock drops the write hold");
    cr_expect_eq(rs_rwlock_fence(rw), 0, "no write token after the downgrade");
    cr_assert(tu_wait_atomic(&R.locked, 1, 5000), "the queued reader was not admitted");
    cr_expect_eq(R.rc, 0, "reader: %d %s", R.rc, R.err);
    cr_expect_lt(R.t_locked - t0, 1500, "reader admitted %lld ms after the downgrade",
                 R.t_locked - t0);
    long long holders;
    cr_expect_eq(redis_read_counts(&s, "dg", &holders), 2);
    cr_expect_eq(holders, 2, "two readers at once");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{dg}:rwlock o"), 0, "write hold left in Redis");
    cr_expect_eq(rs_rwlock_trywrlock(rw2), EBUSY, "a writer while two read");
    cr_expect_eq(rs_rwlock_wrlock(rw), EDEADLK, "the downgraded thread cannot upgrade back");

    /* the downgraded thread keeps reading until its own unlock */
    atomic_store(&R.release, 1);
    cr_assert(locker_join(&R, 5000));
    cr_expect_eq(R.unlock_rc, 0);
    cr_expect_eq(in_thread(rw2, OP_TRYWR), EBUSY, "still read-held by the downgraded thread");
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "read unlock");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), 0, "free at last");
    cr_expect_gt(rs_rwlock_fence(rw2), f);
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

Test(rwlock, upgrade_refused)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "up");
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_rwlock_wrlock(rw), EDEADLK, "wrlock while read-held");
    cr_expect_eq(rs_rwlock_trywrlock(rw), EDEADLK, "trywrlock while read-held");
    struct timespec dl = tu_abs_in(3000);
    cr_expect_eq(rs_rwlock_timedwrlock(rw, &dl), EDEADLK, "timedwrlock while read-held");
    cr_expect_lt(tu_mono_ms() - t0, 1000, "upgrade refusals must be immediate");
    cr_expect_eq(zcard_q(&s, "up"), 0, "an upgrade attempt queued");
    cr_expect_eq(rs_rwlock_fence(rw), 0);
    cr_expect_eq(redis_read_counts(&s, "up", NULL), 2, "the read hold is intact");
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM);
    cr_expect_eq(rs_rwlock_wrlock(rw), 0, "a write lock after the read hold ended");
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* try variants: EBUSY, never queue, never jump the queue                                  */

Test(rwlock, try_busy)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "tr");
    rs_rwlock_t *rw2 = new_rw(c2, "tr");

    cr_assert_eq(rs_rwlock_trywrlock(rw), 0, "trywrlock on a free lock");
    cr_expect_neq(rs_rwlock_fence(rw), 0);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(rs_rwlock_tryrdlock(rw2), EBUSY);
        cr_expect_eq(rs_rwlock_trywrlock(rw2), EBUSY);
    }
    cr_expect_eq(zcard_q(&s, "tr"), 0, "a try queued");
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{tr}:rwlock:qi"), 0, "a try wrote queue info");
    cr_expect_eq(rs_rwlock_unlock(rw2), EPERM, "the failed tries left no hold");
    cr_expect_eq(rs_rwlock_unlock(rw), 0);

    cr_assert_eq(rs_rwlock_tryrdlock(rw), 0, "tryrdlock on a free lock");
    cr_expect_eq(rs_rwlock_tryrdlock(rw2), 0, "tryrdlock beside a reader");
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), EBUSY, "trywrlock beside a reader");

    /* a writer queued behind the reader: tryrdlock may not jump it */
    locker_t W = {.rw = rw2, .write = 1, .wait_release = 1};
    locker_start(&W);
    cr_assert(wait_zcard(&s, "tr", 1, 5000));
    cr_expect_eq(in_thread(rw, OP_TRYRD), EBUSY, "tryrdlock jumped a queued writer");
    cr_expect_eq(in_thread(rw, OP_TRYWR), EBUSY);
    cr_expect_eq(zcard_q(&s, "tr"), 1);
    cr_expect_eq(rs_rwlock_tryrdlock(rw), 0, "but the reader itself re-enters");
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_assert(tu_wait_atomic(&W.locked, 1, 5000));
    cr_expect_eq(W.rc, 0);
    atomic_store(&W.release, 1);
    cr_assert(locker_join(&W, 5000));
    cr_expect_eq(W.unlock_rc, 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Fencing tokens                                                                         */

Test(rwlock, fence)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "fz");
    uint64_t prev = 0;
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(rs_rwlock_wrlock(rw), 0);
        uint64_t f = rs_rwlock_fence(rw);
        cr_expect_gt(f, prev, "write token #%d (%llu) not above %llu", i, (unsigned long long)f,
                     (unsigned long long)prev);
        cr_expect_eq(rs_rwlock_rdlock(rw), 0);
        cr_expect_eq(rs_rwlock_fence(rw), f, "a read hold beside the write hold");
        cr_expect_eq(rs_rwlock_unlock(rw), 0);
        cr_expect_eq(rs_rwlock_fence(rw), 0, "the write hold ended: no token");
        cr_expect_eq(rs_rwlock_unlock(rw), 0);
        cr_expect_eq(in_thread(rw, OP_TRYRD), 0, "read grants take tokens too");
        prev = f;
    }
    /* read grants draw from the same counter: tokens kept rising through them */
    unsigned long long counter = (unsigned long long)ts_cmd_int(&s, "GET rs:{fz}:rwlock:fence");
    cr_expect_geq(counter, prev + 2, "the counter did not count read grants");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{fz}:rwlock:fence"), 86400000LL, "fence counter TTL");
    /* the counter lost: tokens still rise (server clock floor) */
    cr_expect_eq(ts_cmd_int(&s, "DEL rs:{fz}:rwlock:fence"), 1);
    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    cr_expect_gt(rs_rwlock_fence(rw), prev, "token after the counter was lost");
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    ts_server_stop(&s);
}
