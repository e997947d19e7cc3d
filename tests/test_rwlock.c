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

TestSuite(rwlock, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* Small helpers (the common ones are tu_* in tests/support/test_util.h)                 */

static rs_rwlock_t *new_rw(rs_client_t *c, const char *name)
{
    rs_rwlock_t *rw = NULL;
    int rc = rs_rwlock_init(&rw, c, name);
    cr_assert_eq(rc, 0, "rs_rwlock_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return rw;
}

static long long zcard_q(const ts_server_t *s, const char *name)
{
    return tu_zcard_q(s, "rwlock", name);
}

static int wait_zcard(const ts_server_t *s, const char *name, long long n, long timeout_ms)
{
    return tu_wait_zcard(s, "rwlock", name, n, timeout_ms);
}

/* Polls until GET key on s is at least want; 1 if so within timeout_ms. */
static int wait_key_at_least(redisContext *k, const char *key, long long want, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        redisReply *r = redisCommand(k, "GET %s", key);
        long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        if (r)
            freeReplyObject(r);
        else
            return 0;
        if (v >= want)
            return 1;
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(5);
    }
}

/* ---- the exclusion checker ------------------------------------------------------------ */
/* KEYS: own counter, other mode's counter, violations, own maximum. ARGV[1]: the most of
 * this mode allowed at once (1 for writers). */
static const char CHK_ENTER[] =
    "local n = redis.call('INCR', KEYS[1]) "
    "local o = tonumber(redis.call('GET', KEYS[2]) or '0') "
    "if o > 0 or n > tonumber(ARGV[1]) then redis.call('INCR', KEYS[3]) end "
    "if n > tonumber(redis.call('GET', KEYS[4]) or '0') then redis.call('SET', KEYS[4], n) end "
    "return n";

/* Enters a section of mode write on the checker; 0, or -1 on a connection error. */
static int chk_enter(redisContext *k, int write)
{
    redisReply *r = write ? redisCommand(k, "EVAL %s 4 chk:w chk:r chk:viol chk:maxw 1", CHK_ENTER)
                          : redisCommand(k, "EVAL %s 4 chk:r chk:w chk:viol chk:maxr 1000000",
                                         CHK_ENTER);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int chk_exit(redisContext *k, int write)
{
    redisReply *r = redisCommand(k, "DECR %s", write ? "chk:w" : "chk:r");
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static long long chk_get(const ts_server_t *s, const char *key)
{
    long long v = ts_cmd_int(s, "GET %s", key);
    return v < 0 ? 0 : v;
}

/* ---- a thread that takes the lock once ------------------------------------------------ */
typedef struct locker {
    rs_rwlock_t *rw;
    int write;           /* wrlock, else rdlock */
    long timeout_ms;     /* > 0: the timed variant with a deadline this far ahead */
    long hold_ms;        /* after locking, hold this long ... */
    int wait_release;    /* ... then, if set, wait until release is set before unlocking */
    const ts_server_t *chk; /* if set: record the section on the checker */
    /* results */
    int rc, unlock_rc;
    uint64_t fence;
    long long t_start, t_locked, t_unlocked;
    char err[256];
    atomic_int locked;   /* the lock call returned */
    atomic_int release;
    atomic_int done;
    pthread_t th;
} locker_t;

static void *locker_main(void *arg)
{
    locker_t *L = arg;
    redisContext *k = L->chk ? ts_connect(L->chk) : NULL;
    L->t_start = tu_mono_ms();
    if (L->timeout_ms > 0) {
        struct timespec dl = tu_abs_in(L->timeout_ms);
        L->rc = L->write ? rs_rwlock_timedwrlock(L->rw, &dl) : rs_rwlock_timedrdlock(L->rw, &dl);
    } else {
        L->rc = L->write ? rs_rwlock_wrlock(L->rw) : rs_rwlock_rdlock(L->rw);
    }
    L->t_locked = tu_mono_ms();
    if (L->rc == 0)
        L->fence = rs_rwlock_fence(L->rw);
    else
        snprintf(L->err, sizeof L->err, "%s", rs_client_lasterror(NULL));
    if (L->rc == 0 && k)
        chk_enter(k, L->write);
    atomic_store(&L->locked, 1);
    if (L->rc == 0) {
        if (L->hold_ms > 0)
            tu_sleep_ms(L->hold_ms);
        while (L->wait_release && !atomic_load(&L->release))
            tu_sleep_ms(5);
        if (k)
            chk_exit(k, L->write);
        L->t_unlocked = tu_mono_ms();
        L->unlock_rc = rs_rwlock_unlock(L->rw);
    }
    if (k)
        redisFree(k);
    atomic_store(&L->done, 1);
    return NULL;
}

static void locker_start(locker_t *L)
{
    tu_thread_start(&L->th, locker_main, L);
}

/* Joins L if it finishes within timeout_ms; 1 if joined. */
static int locker_join(locker_t *L, long timeout_ms)
{
    return tu_thread_join(L->th, &L->done, timeout_ms);
}

/* ---- one call from another thread ----------------------------------------------------- */
enum { OP_TRYRD, OP_TRYWR, OP_UNLOCK };
typedef struct call1 {
    rs_rwlock_t *rw;
    int op;
    int rc;
} call1_t;

static void *call1_main(void *arg)
{
    call1_t *k = arg;
    k->rc = k->op == OP_TRYRD   ? rs_rwlock_tryrdlock(k->rw)
            : k->op == OP_TRYWR ? rs_rwlock_trywrlock(k->rw)
                                : rs_rwlock_unlock(k->rw);
    /* a successful try is undone at once, by the thread that holds it */
    if (k->rc == 0 && k->op != OP_UNLOCK)
        rs_rwlock_unlock(k->rw);
    return NULL;
}

static int in_thread(rs_rwlock_t *rw, int op)
{
    call1_t k = {.rw = rw, .op = op, .rc = -1};
    tu_thread_run(call1_main, &k);
    return k.rc;
}

/* The counts of the read holds in Redis ("ACQID COUNT FENCE LASTCALL" per owner), summed. */
static long long redis_read_counts(const ts_server_t *s, const char *name, long long *holders)
{
    redisContext *k = ts_connect(s);
    cr_assert_not_null(k);
    redisReply *r = redisCommand(k, "HVALS rs:{%s}:rwlock:ri", name);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    long long sum = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const char *sp = strchr(r->element[i]->str, ' ');
        sum += sp ? atoll(sp + 1) : 0;
    }
    if (holders)
        *holders = (long long)r->elements;
    freeReplyObject(r);
    redisFree(k);
    return sum;
}

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

/* ------------------------------------------------------------------------------------- */
/* Leases: renewal keeps holds, close releases them                                       */

Test(rwlock, renewal_and_close)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 300, 3000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "rn");
    rs_rwlock_t *rw2 = new_rw(c2, "rn");
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    cr_assert_eq(in_thread(rw, OP_TRYRD), 0);
    tu_sleep_ms(1200); /* four leases: the watchdog renews the read hold */
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

/* ------------------------------------------------------------------------------------- */
/* The script itself: idempotence of every mutating op, owner checks, head admission      */

/* EVAL of the rwlock script on name's keys; callid may be NULL. */
static redisReply *rx(redisContext *k, const char *name, const char *op, const char *tok,
                      const char *acq, const char *qmode, const char *mode, const char *callid)
{
    const char *sfx[6] = {"", ":fence", ":q", ":qi", ":rd", ":ri"};
    char keys[6][64];
    const char *argv[20];
    size_t lens[20];
    int n = 0;
    argv[n++] = "EVAL";
    argv[n++] = (const char *)rs_script_rwlock.body;
    argv[n++] = "6";
    for (int i = 0; i < 6; i++) {
        snprintf(keys[i], sizeof keys[i], "rs:{%s}:rwlock%s", name, sfx[i]);
        argv[n++] = keys[i];
    }
    argv[n++] = op;
    argv[n++] = tok;
    argv[n++] = acq;
    argv[n++] = "5000";       /* lease */
    argv[n++] = "rs:client:"; /* channel prefix */
    argv[n++] = qmode ? qmode : "q";
    argv[n++] = "100";        /* max waiters */
    argv[n++] = "10000";      /* queue entry lease */
    argv[n++] = mode;
    if (callid)
        argv[n++] = callid;
    for (int i = 0; i < n; i++)
        lens[i] = i == 1 ? rs_script_rwlock.len : strlen(argv[i]);
    redisReply *r = redisCommandArgv(k, n, argv, lens);
    cr_assert_not_null(r, "EVAL %s: connection error", op);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "EVAL %s: %s", op, r->str);
    return r;
}

static long long rx_int(redisContext *k, const char *name, const char *op, const char *tok,
                        const char *acq, const char *mode, const char *callid)
{
    redisReply *r = rx(k, name, op, tok, acq, NULL, mode, callid);
    cr_assert_eq(r->type, REDIS_REPLY_INTEGER, "%s: reply type %d", op, r->type);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* acq: element 0 of the reply; element 1 (a grant's fence, a busy reply's ttl) into fence;
 * element 2 (a grant's ttl, a busy reply's queued flag) into third. */
static long long rx_acq(redisContext *k, const char *name, const char *tok, const char *acq,
                        const char *qmode, const char *mode, unsigned long long *fence,
                        long long *third)
{
    redisReply *r = rx(k, name, "acq", tok, acq, qmode, mode, NULL);
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY, "acq: reply type %d", r->type);
    cr_assert_geq(r->elements, 1);
    long long k0 = r->element[0]->integer;
    if (fence)
        *fence = 0;
    if (third)
        *third = -99;
    if (r->elements >= 3) {
        redisReply *e = r->element[1];
        if (fence)
            *fence = e->type == REDIS_REPLY_STRING ? strtoull(e->str, NULL, 10)
                                                   : (unsigned long long)e->integer;
        if (third && r->element[2]->type == REDIS_REPLY_INTEGER)
            *third = r->element[2]->integer;
    }
    freeReplyObject(r);
    return k0;
}

/* The count of tok's read hold in Redis, -1 if none. */
static long long read_count_of(redisContext *k, const char *name, const char *tok)
{
    redisReply *r = redisCommand(k, "EVAL %s 1 rs:{%s}:rwlock:ri %s",
                                 "local v = redis.call('HGET', KEYS[1], redis.sha1hex(ARGV[1])) "
                                 "if not v then return -1 end "
                                 "return tonumber(string.match(v, '^%S+ (%d+) '))",
                                 name, tok);
    cr_assert(r && r->type == REDIS_REPLY_INTEGER, "read_count_of");
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

Test(rwlock, script_idempotence)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    unsigned long long f1, f1b, fr, frb;
    long long third;

    /* write: acq twice with one id, one token; another id of the same owner is refused */
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:1", "q", "w", &f1, &third), 1);
    cr_expect_gt(third, 0);
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:1", "q", "w", &f1b, NULL), 1, "retried acq");
    cr_expect_eq(f1b, f1, "a retried acq returns the same token");
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:2", "q", "w", NULL, NULL), -1);
    cr_expect_eq(zcard_q(&s, "sc"), 0, "the owner was queued behind itself");

    /* enter/leave with a call id count once */
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "w", "c:1"), 2);
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "w", "c:1"), 2, "a retried enter");
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "w", "c:2"), 3);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokA", "pa:1", "w", "c:3"), 2);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokA", "pa:1", "w", "c:3"), 2, "a retried leave");
    cr_expect_eq(rx_int(k, "sc", "enter", "tokB", "pa:1", "w", "c:4"), 0, "enter by another");
    cr_expect_eq(rx_int(k, "sc", "enter", "tokA", "pa:1", "r", "c:5"), 0, "enter of no read hold");

    /* renew: only the owner under its id and mode */
    cr_expect_eq(rx_int(k, "sc", "renew", "tokA", "pa:1", "w", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokA", "pa:2", "w", NULL), 0);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokB", "pa:1", "w", NULL), 0);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokA", "pa:1", "r", NULL), 0);

    /* the writer reads at once (downgrade); a reader's acq is idempotent too */
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:3", "t", "r", &fr, NULL), 1, "downgrade");
    cr_expect_gt(fr, f1, "read grants draw tokens");
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:3", "t", "r", &frb, NULL), 1);
    cr_expect_eq(frb, fr);
    cr_expect_eq(rx_acq(k, "sc", "tokA", "pa:4", "t", "r", NULL, NULL), -1, "a second read id");

    /* others queue: readers B, C, a writer D, a reader E; a try stays out of the queue */
    cr_expect_eq(rx_acq(k, "sc", "tokB", "pb:1", "q", "r", NULL, &third), 0);
    cr_expect_eq(third, 1, "queued");
    cr_expect_eq(rx_acq(k, "sc", "tokC", "pc:1", "q", "r", NULL, NULL), 0);
    cr_expect_eq(rx_acq(k, "sc", "tokD", "pd:1", "q", "w", NULL, NULL), 0);
    cr_expect_eq(rx_acq(k, "sc", "tokE", "pe:1", "q", "r", NULL, NULL), 0);
    cr_expect_eq(rx_acq(k, "sc", "tokF", "pf:1", "t", "r", NULL, &third), 0);
    cr_expect_eq(third, 0, "a try reported itself queued");
    cr_expect_eq(zcard_q(&s, "sc"), 4);
    cr_expect_eq(rx_int(k, "sc", "qrenew", "tokB", "pb:1", "r", NULL), 1);

    /* the write release admits B and C together (A still reads), D and E wait */
    cr_expect_eq(rx_int(k, "sc", "rel", "tokA", "pa:1", "w", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokA", "pa:1", "w", NULL), 1, "a retried release");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{sc}:rwlock o"), 0);
    cr_expect_eq(read_count_of(k, "sc", "tokB"), 1, "B admitted");
    cr_expect_eq(read_count_of(k, "sc", "tokC"), 1, "C admitted");
    cr_expect_eq(read_count_of(k, "sc", "tokE"), -1, "E jumped the writer");
    cr_expect_eq(zcard_q(&s, "sc"), 2);
    cr_expect_eq(rx_int(k, "sc", "qrenew", "tokB", "pb:1", "r", NULL), 2, "granted meanwhile");
    cr_expect_eq(rx_acq(k, "sc", "tokB", "pb:1", "q", "r", NULL, NULL), 1, "B's retried acq");

    /* read re-entries count once per call id */
    cr_expect_eq(rx_int(k, "sc", "enter", "tokB", "pb:1", "r", "c:6"), 2);
    cr_expect_eq(rx_int(k, "sc", "enter", "tokB", "pb:1", "r", "c:6"), 2);
    cr_expect_eq(read_count_of(k, "sc", "tokB"), 2);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokB", "pb:1", "r", "c:7"), 1);
    cr_expect_eq(rx_int(k, "sc", "leave", "tokB", "pb:1", "r", "c:7"), 1);

    /* read releases: the writer D only after the last reader */
    cr_expect_eq(rx_int(k, "sc", "rel", "tokA", "pa:3", "r", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokB", "pb:1", "r", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokB", "pb:1", "r", NULL), 1, "a retried read release");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokB", "pb:9", "r", NULL), 0, "release of a lost hold");
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{sc}:rwlock o"), 0, "D admitted beside C");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokC", "pc:1", "r", NULL), 1);
    cr_expect_eq(rx_int(k, "sc", "qrenew", "tokD", "pd:1", "w", NULL), 2, "D admitted");
    cr_expect_eq(read_count_of(k, "sc", "tokE"), -1, "E beside the writer");
    redisReply *r = rx(k, "sc", "cancel", "tokD", "pd:1", "t", "w", NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->integer == 1,
              "cancel after the grant keeps it");
    freeReplyObject(r);

    /* E cancels while D holds; D's release then finds nobody */
    r = rx(k, "sc", "cancel", "tokE", "pe:1", "t", "r", NULL);
    cr_expect(r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->integer == 0,
              "cancel of a queued waiter");
    freeReplyObject(r);
    cr_expect_eq(zcard_q(&s, "sc"), 0);
    cr_expect_eq(rx_int(k, "sc", "rel", "tokD", "pd:1", "w", NULL), 1);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{sc}:rwlock:ri"), 0);

    /* an expired read lease stops counting: a writer gets in */
    cr_expect_eq(rx_acq(k, "sc", "tokG", "pg:1", "t", "r", NULL, NULL), 1);
    unsigned long long busy_ttl;
    cr_expect_eq(rx_acq(k, "sc", "tokH", "ph:1", "t", "w", &busy_ttl, &third), 0);
    cr_expect_eq(third, 0, "a try queued");
    cr_expect(busy_ttl > 4000 && busy_ttl <= 5000,
              "busy: retry when the reader's lease runs out, not %llu ms", busy_ttl);
    r = redisCommand(k, "EVAL %s 1 rs:{sc}:rwlock:rd %s",
                     "return redis.call('ZADD', KEYS[1], 'XX', 1, redis.sha1hex(ARGV[1]))", "tokG");
    cr_assert(r && r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
    cr_expect_eq(rx_int(k, "sc", "renew", "tokG", "pg:1", "r", NULL), 0, "renew of an expired lease");
    cr_expect_eq(rx_acq(k, "sc", "tokH", "ph:1", "t", "w", NULL, NULL), 1, "writer after expiry");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokG", "pg:1", "r", NULL), 0, "the reader lost it");
    cr_expect_eq(rx_int(k, "sc", "rel", "tokH", "ph:1", "w", NULL), 1);

    /* bad mode */
    const char *bad[] = {"EVAL", (const char *)rs_script_rwlock.body, "6", "a{x}", "b{x}",
                         "c{x}", "d{x}", "e{x}", "f{x}", "acq", "t", "p:1", "100", "c:", "t",
                         "1", "100", "x"};
    size_t bl[18];
    for (int i = 0; i < 18; i++)
        bl[i] = i == 1 ? rs_script_rwlock.len : strlen(bad[i]);
    r = redisCommandArgv(k, 18, bad, bl);
    cr_expect(r && r->type == REDIS_REPLY_ERROR, "a bad mode is an error");
    if (r)
        freeReplyObject(r);
    redisFree(k);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Inspection ops: info (read-only) and force, as primitives/inspect.c runs them          */

extern const rs_kind_t rs_kind_rwlock;

/* Runs op as inspect.c does: a temporary handle of rs_kind_rwlock, no mode argument. */
static redisReply *inspect_op(rs_client_t *c, const char *name, const char *op)
{
    rs_handle_t h;
    cr_assert_eq(rs__handle_init(&h, c, rs_kind_rwlock.name, rs_kind_rwlock.script, name,
                                 rs_kind_rwlock.suffixes, rs_kind_rwlock.nkeys), 0);
    rs_call_t call;
    rs__call_init(&call, &h, NULL);
    redisReply *r = NULL;
    int rc = rs__call_run(&call, op, "t", &r);
    rs__handle_destroy(&h);
    cr_assert_eq(rc, 0, "%s: %d %s", op, rc, rs_client_lasterror(c));
    return r;
}

typedef struct info {
    long long exists, nholders, ttl, waiters, writer, size, freep, count;
    unsigned long long fence;
    int nlisted;
    char listed[8][48];
} info_t;

static info_t get_info(rs_client_t *c, const char *name)
{
    redisReply *r = inspect_op(c, name, "info");
    cr_assert_eq(r->type, REDIS_REPLY_ARRAY);
    cr_assert_geq(r->elements, 9);
    info_t in = {0};
    long long *v[9] = {&in.exists, &in.nholders, &in.ttl, NULL, &in.waiters, &in.writer,
                       &in.size, &in.freep, &in.count};
    for (int i = 0; i < 9; i++) {
        redisReply *e = r->element[i];
        long long x = e->type == REDIS_REPLY_INTEGER ? e->integer
                      : e->type == REDIS_REPLY_STRING ? strtoll(e->str, NULL, 10)
                                                      : -99;
        if (i == 3)
            in.fence = (unsigned long long)x;
        else
            *v[i] = x;
    }
    for (size_t i = 9; i < r->elements && in.nlisted < 8; i++)
        snprintf(in.listed[in.nlisted++], sizeof in.listed[0], "%s", r->element[i]->str);
    freeReplyObject(r);
    return in;
}

static int listed(const info_t *in, const char *acq)
{
    for (int i = 0; i < in->nlisted; i++)
        if (strcmp(in->listed[i], acq) == 0)
            return 1;
    return 0;
}

/* The uncontended paths (rwlock.lua's fast acquire and release) leave the full paths' work
 * undone only where it is not needed: a reader's release still clears lapsed read holds and
 * old tombstones (or readers alone would grow the zset), and a writer still finds a lapsed
 * read hold and purges it before it takes the lock. */
Test(rwlock, script_fast_paths_purge)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    unsigned long long f;

    /* a lapsed read hold and an old tombstone (expiry 1 ms after the epoch) */
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fp}:rwlock:rd 1 deadbeef 1 r:px:1"), 2);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fp}:rwlock:ri deadbeef %s", "px:0.1 1 5 -"), 1);
    cr_expect_eq(rx_acq(k, "fp", "tokA", "pa:1", "q", "r", &f, NULL), 1, "a reader shares");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokA", "pa:1", "r", NULL), 1);
    cr_expect_eq(ts_cmd_int(&s, "ZSCORE rs:{fp}:rwlock:rd deadbeef"), -1, "lapsed hold kept");
    cr_expect_eq(ts_cmd_int(&s, "ZSCORE rs:{fp}:rwlock:rd r:px:1"), -1, "old tombstone kept");
    cr_expect_eq(ts_cmd_int(&s, "HLEN rs:{fp}:rwlock:ri"), 0, "lapsed hold's record kept");
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{fp}:rwlock:rd"), 1, "only the new tombstone");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokA", "pa:1", "r", NULL), 1, "a retried release");

    /* one owner's read releases leave one tombstone, not one each */
    char id[32];
    for (int i = 0; i < 50; i++) {
        snprintf(id, sizeof id, "pt:%d", i);
        cr_assert_eq(rx_acq(k, "fp", "tokT", id, "t", "r", &f, NULL), 1, "%s", id);
        cr_assert_eq(rx_int(k, "fp", "rel", "tokT", id, "r", NULL), 1, "%s", id);
    }
    cr_expect_eq(rx_int(k, "fp", "rel", "tokT", "pt:49", "r", NULL), 1, "the last, retried");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokT", "pt:48", "r", NULL), 0, "an earlier one");
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{fp}:rwlock:rd"), 2, "tombstones: tokA's and tokT's");
    cr_expect_eq(rx_int(k, "fp", "rel", "tokA", "pa:1", "r", NULL), 1, "tokA's, retried");

    /* a writer behind a lapsed read hold: granted, the hold purged */
    cr_assert_eq(ts_cmd_int(&s, "ZADD rs:{fp2}:rwlock:rd 1 deadbeef"), 1);
    cr_assert_eq(ts_cmd_int(&s, "HSET rs:{fp2}:rwlock:ri deadbeef %s", "px:0.1 1 5 -"), 1);
    cr_expect_eq(rx_acq(k, "fp2", "tokB", "pb:1", "t", "w", &f, NULL), 1, "writer granted");
    cr_expect_eq(ts_cmd_int(&s, "HLEN rs:{fp2}:rwlock:ri"), 0);
    cr_expect_eq(rx_int(k, "fp2", "rel", "tokB", "pb:1", "w", NULL), 1);
    cr_expect_eq(rx_int(k, "fp2", "rel", "tokB", "pb:1", "w", NULL), 1, "a retried release");
    cr_expect_eq(rx_int(k, "fp2", "rel", "tokC", "pc:1", "w", NULL), 0, "not a holder");
    /* the keys outlive no hold by more than half a lease beyond the hold's own */
    long long ttl = ts_cmd_int(&s, "PTTL rs:{fp2}:rwlock");
    cr_expect(ttl > 0 && ttl <= 15000, "PTTL of the main key after the release: %lld", ttl);
    redisFree(k);
    ts_server_stop(&s);
}

Test(rwlock, script_info_and_force)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 3000, NULL);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    cr_expect_str_eq(rs_kind_rwlock.name, "rwlock");
    cr_expect_eq(rs_kind_rwlock.nkeys, 6);

    info_t in = get_info(c, "in");
    cr_expect_eq(in.exists, 0);
    cr_expect_eq(in.nholders, 0);
    cr_expect_eq(in.ttl, -1);
    cr_expect_eq(in.fence, 0);
    cr_expect_eq(in.writer, 0);
    cr_expect(in.size == -1 && in.freep == -1 && in.count == -1);
    cr_expect_eq(ts_cmd_int(&s, "DBSIZE"), 0, "info wrote something");

    /* a writer that also reads (one owner), a reader and a writer queued */
    unsigned long long fw, fb;
    cr_assert_eq(rx_acq(k, "in", "tokA", "pa:1", "q", "w", &fw, NULL), 1);
    cr_assert_eq(rx_acq(k, "in", "tokA", "pa:2", "q", "r", NULL, NULL), 1);
    cr_assert_eq(rx_acq(k, "in", "tokB", "pb:1", "q", "r", NULL, NULL), 0);
    cr_assert_eq(rx_acq(k, "in", "tokC", "pc:1", "q", "w", NULL, NULL), 0);
    in = get_info(c, "in");
    cr_expect_eq(in.exists, 1);
    cr_expect_eq(in.nholders, 1, "one owner thread holds (write + its own read)");
    cr_expect_eq(in.writer, 1);
    cr_expect(in.ttl > 0 && in.ttl <= 5000, "ttl %lld", in.ttl);
    cr_expect_eq(in.fence, fw, "the write hold's token");
    cr_expect_eq(in.waiters, 2);
    cr_expect(in.nlisted >= 1 && strcmp(in.listed[0], "pa:1") == 0, "the writer first");

    /* the write release admits B beside A's read hold; C waits for both */
    cr_assert_eq(rx_int(k, "in", "rel", "tokA", "pa:1", "w", NULL), 1);
    in = get_info(c, "in");
    cr_expect_eq(in.writer, 0);
    cr_expect_eq(in.nholders, 2);
    cr_expect(listed(&in, "pa:2") && listed(&in, "pb:1"), "the readers are listed");
    cr_expect_eq(in.waiters, 1);
    cr_expect(in.ttl > 0 && in.ttl <= 5000);
    cr_assert_eq(rx_acq(k, "in", "tokB", "pb:1", "q", "r", &fb, NULL), 1);
    cr_expect_eq(in.fence, fb, "without a writer: the latest grant's token");

    /* force drops both read holds and admits the writer C */
    redisReply *r = inspect_op(c, "in", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 2, "force dropped %lld holds",
              r->type == REDIS_REPLY_INTEGER ? r->integer : -1);
    freeReplyObject(r);
    cr_expect_eq(rx_int(k, "in", "renew", "tokA", "pa:2", "r", NULL), 0, "a forced reader renews");
    cr_expect_eq(rx_int(k, "in", "rel", "tokB", "pb:1", "r", NULL), 0, "a forced reader releases");
    cr_expect_eq(rx_int(k, "in", "qrenew", "tokC", "pc:1", "w", NULL), 2, "C admitted by force");
    in = get_info(c, "in");
    cr_expect_eq(in.writer, 1);
    cr_expect_eq(in.nholders, 1);
    cr_expect(in.nlisted == 1 && strcmp(in.listed[0], "pc:1") == 0);
    cr_expect_eq(in.waiters, 0);
    r = inspect_op(c, "in", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    r = inspect_op(c, "in", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 0, "nothing left to force");
    freeReplyObject(r);
    in = get_info(c, "in");
    cr_expect_eq(in.nholders, 0);
    cr_expect_eq(in.ttl, -1);
    cr_expect_gt(ts_cmd_int(&s, "EXISTS rs:{in}:rwlock:fence"), 0, "force keeps the counter");

    /* a read-only hold keeps the main key (what rs_list recognises) alive */
    cr_assert_eq(rx_acq(k, "in2", "tokD", "pd:1", "t", "r", NULL, NULL), 1);
    cr_expect_eq(ts_cmd_int(&s, "EXISTS rs:{in2}:rwlock"), 1, "no main key under a read hold");
    cr_expect_gt(ts_cmd_int(&s, "PTTL rs:{in2}:rwlock"), 0);
    redisFree(k);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* A forced release is noticed by the holders: their next renewal fails, unlock says so. */
typedef struct lost_count {
    atomic_int n;
} lost_count_t;

static void count_lost(const char *kind, const char *name, void *arg)
{
    (void)name;
    if (strcmp(kind, "rwlock") == 0)
        atomic_fetch_add(&((lost_count_t *)arg)->n, 1);
}

Test(rwlock, forced_holders_learn)
{
    ts_server_t s;
    tu_start_server(&s);
    lost_count_t lc = {0};
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 300;
    cfg.on_lost = count_lost;
    cfg.on_lost_arg = &lc;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0);
    rs_client_t *c2 = tu_open_client(&s, 2000, 3000, NULL);
    rs_rwlock_t *rw = new_rw(c, "fo");
    rs_rwlock_t *rw2 = new_rw(c2, "fo");
    cr_assert_eq(rs_rwlock_wrlock(rw), 0);
    cr_assert_eq(rs_rwlock_rdlock(rw), 0);
    redisReply *r = inspect_op(c2, "fo", "force");
    cr_expect(r->type == REDIS_REPLY_INTEGER && r->integer == 2);
    freeReplyObject(r);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), 0, "the lock is free after the force");
    cr_expect(tu_wait_atomic(&lc.n, 2, 3000), "on_lost for both holds: %d", atomic_load(&lc.n));
    cr_expect_eq(rs_rwlock_unlock(rw), RS_ELOST, "the forced write hold");
    cr_expect_eq(rs_rwlock_unlock(rw), RS_ELOST, "the forced read hold");
    cr_expect_eq(rs_rwlock_unlock(rw), EPERM);
    cr_expect_eq(rs_rwlock_unlock(rw2), 0, "the new writer was disturbed");
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}
