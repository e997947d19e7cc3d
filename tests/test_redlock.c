/*
 * test_redlock.c - redlock:// deployments: three plain redis-servers on free 127.0.0.1
 * ports (tests/support/redis_server.h), each test its own.
 *
 *   url_*                  bad redlock URLs are EINVAL with a message naming the fault;
 *                          min_replicas is refused
 *   other_kinds_refused    rwlock, semaphore and latch init are ENOTSUP, saying why
 *   lock_unlock            a hold is on every master, its fence is the largest of theirs;
 *                          EBUSY, ETIMEDOUT, EDEADLK, EPERM as with one server; released
 *                          everywhere
 *   rmutex_reentry         re-entry under Redlock; same fence; EPERM beyond the count
 *   waiter_sleeps          a blocked lock is woken by the release (pub/sub on each master),
 *                          and does not poll the masters while it waits
 *   processes_exclude      four processes lock one mutex: never two in the critical section,
 *                          fences rise in the order of the sections, no error
 *   one_master_killed      the same, one master killed in the middle: work goes on
 *   one_master_paused      the same, one master stopped (SIGSTOP) in the middle: it accepts
 *                          connections and never answers; work goes on
 *   majority_down          two of three killed: every call returns an error within
 *                          timeout_ms (plus a margin), nothing hangs
 * Timing is asserted only as generous "within" bounds.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_redlock.h"
#include "test_util.h"

TestSuite(redlock, .timeout = 120);

/* ----- URLs and refusals ---------------------------------------------------------------- */

static void expect_bad(const char *url, const char *want)
{
    rs_config_t cfg = rl_config(url, NULL, 0, 300);
    rs_client_t *c = (rs_client_t *)&cfg;
    int rc = rs_client_open(&c, &cfg);
    const char *msg = rs_client_lasterror(NULL);
    cr_expect_eq(rc, EINVAL, "open(\"%s\") = %d (%s), want EINVAL", url, rc, msg);
    cr_expect_null(c, "open(\"%s\"): *out not NULL after failure", url);
    cr_expect(strstr(msg, want) != NULL, "open(\"%s\"): message \"%s\" lacks \"%s\"", url, msg,
              want);
    cr_expect(strstr(msg, "s3cr3t") == NULL, "open(\"%s\"): the password is in \"%s\"", url, msg);
}

Test(redlock, url_bad_forms_are_einval)
{
    expect_bad("redlock://", "needs the addresses of its masters");
    expect_bad("redlock://u:s3cr3t@", "needs the addresses of its masters");
    expect_bad("redlock://?db=1", "needs the addresses of its masters");
    expect_bad("redlock://h:1", "at least 3 masters, got 1");
    expect_bad("redlock://u:s3cr3t@h:1,h:2", "at least 3 masters, got 2");
    expect_bad("redlock://a:1,b:x,c:1", "port must be a number");
    expect_bad("redlock://a:1,b:0,c:1", "port must be a number");
    expect_bad("redlock://a:1,b:65536,c:1", "port must be a number");
    expect_bad("redlock://a:1,,c:1", "host is missing");
    expect_bad("redlock://a:1,b:1,c:1,", "empty redlock master address");
    expect_bad("redlock://a:1,b:1,A:1", "listed twice");
    expect_bad("redlock://a:1,b:1,c:1?x=1", "unknown query option");
    expect_bad("redlock://a:1,b:1,c:1?db=x", "db must be a number");
    expect_bad("redlock://a:1,b:1,c:1/3", "only ?db=N");
    expect_bad("redlock://u@a:1,b:1,c:1", "credentials");
}

Test(redlock, url_min_replicas_refused)
{
    rs_config_t cfg = rl_config("redlock://a:1,b:1,c:1", NULL, 0, 300);
    cfg.min_replicas = 1;
    rs_client_t *c = NULL;
    cr_expect_eq(rs_client_open(&c, &cfg), EINVAL);
    cr_expect(strstr(rs_client_lasterror(NULL), "min_replicas is not supported") != NULL,
              "message: %s", rs_client_lasterror(NULL));
}

Test(redlock, other_kinds_refused)
{
    masters_t m;
    masters_up(&m);
    char prefix[32];
    ts_unique_prefix(prefix, sizeof prefix);
    /* db and credentials-free URL with ?db: every master's db 2 */
    char url[300];
    snprintf(url, sizeof url, "%s?db=2", m.url);
    rs_client_t *c = rl_open(url, prefix, 1000, 1000);

    rs_rwlock_t *rw = (rs_rwlock_t *)&m;
    cr_expect_eq(rs_rwlock_init(&rw, c, "x"), ENOTSUP);
    cr_expect_null(rw);
    cr_expect(strstr(rs_client_lasterror(c), "rwlock is not offered under redlock://") != NULL,
              "message: %s", rs_client_lasterror(c));
    rs_sem_t *s = (rs_sem_t *)&m;
    cr_expect_eq(rs_sem_init(&s, c, "x", 2), ENOTSUP);
    cr_expect_null(s);
    cr_expect(strstr(rs_client_lasterror(c), "sem is not offered under redlock://") != NULL,
              "message: %s", rs_client_lasterror(c));
    rs_latch_t *l = (rs_latch_t *)&m;
    cr_expect_eq(rs_latch_init(&l, c, "x", 2), ENOTSUP);
    cr_expect_null(l);
    cr_expect(strstr(rs_client_lasterror(c), "latch is not offered under redlock://") != NULL,
              "message: %s", rs_client_lasterror(c));

    /* the mutex works, in db 2 of every master */
    rs_mutex_t *mu = NULL;
    cr_assert_eq(rs_mutex_init(&mu, c, "x"), 0);
    cr_assert_eq(rs_mutex_lock(mu), 0, "lock: %s", rs_client_lasterror(c));
    redisContext *rc = ts_connect(&m.s[1]);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "SELECT 2");
    freeReplyObject(r);
    r = redisCommand(rc, "EXISTS %s:{x}:mutex", prefix);
    cr_expect(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1, "not in db 2");
    freeReplyObject(r);
    redisFree(rc);
    cr_expect_eq(rs_mutex_unlock(mu), 0);
    rs_mutex_destroy(mu);
    rs_client_close(c);
    masters_down(&m);
}

/* ----- basic use ------------------------------------------------------------------------ */

static void *other_trylock(void *arg)
{
    rs_mutex_t *m = arg;
    return (void *)(intptr_t)rs_mutex_trylock(m);
}

Test(redlock, lock_unlock)
{
    masters_t m;
    masters_up(&m);
    char prefix[32], key[96];
    ts_unique_prefix(prefix, sizeof prefix);
    rs_client_t *c1 = rl_open(m.url, prefix, 2000, 1000);
    rs_client_t *c2 = rl_open(m.url, prefix, 2000, 1000);
    rs_mutex_t *a = NULL, *b = NULL, *a2 = NULL;
    cr_assert_eq(rs_mutex_init(&a, c1, "job"), 0);
    cr_assert_eq(rs_mutex_init(&a2, c1, "job"), 0);
    cr_assert_eq(rs_mutex_init(&b, c2, "job"), 0);

    cr_assert_eq(rs_mutex_lock(a), 0, "lock: %s", rs_client_lasterror(c1));
    uint64_t f = rs_mutex_fence(a), maxf = 0;
    cr_expect_gt(f, 0);
    cr_expect_gt(rs_mutex_remaining(a), 0);
    snprintf(key, sizeof key, "%s:{job}:mutex", prefix);
    /* a grant needs a quorum only: a master that answers late (a loaded machine) may miss it */
    int holding = 0, covered = 0, equal = 0;
    for (int i = 0; i < NM; i++) {
        char buf[64] = "";
        holding += ts_cmd_str(&m.s[i], buf, sizeof buf, "HGET %s f", key) != NULL && buf[0];
        uint64_t fi = strtoull(buf, NULL, 10);
        if (fi > maxf)
            maxf = fi;
        covered += buf[0] && fi <= f;
        equal += buf[0] && fi == f;
    }
    cr_expect_geq(holding, NM / 2 + 1, "the hold is on %d masters", holding);
    /* the token is the largest of the quorum that granted it; a master that granted after
     * the quorum was counted (late, on a loaded machine) may show a larger one of its own */
    cr_expect_geq(covered, NM / 2 + 1, "fence %llu is below the tokens of %d masters (largest "
                  "%llu)", (unsigned long long)f, NM - covered, (unsigned long long)maxf);
    cr_expect_geq(equal, 1, "fence %llu is no master's token (largest %llu)",
                  (unsigned long long)f, (unsigned long long)maxf);

    cr_expect_eq(rs_mutex_lock(a), EDEADLK);
    cr_expect_eq(rs_mutex_trylock(a), EBUSY);
    cr_expect_eq(rs_mutex_trylock(a2), EBUSY, "another handle, same thread");
    cr_expect_eq(rs_mutex_trylock(b), EBUSY, "%s", rs_client_lasterror(c2));
    struct timespec dl = tu_abs_in(300);
    cr_expect_eq(rs_mutex_timedlock(b, &dl), ETIMEDOUT);
    cr_expect_eq(rs_mutex_unlock(b), EPERM);
    pthread_t th;
    void *res;
    cr_assert_eq(pthread_create(&th, NULL, other_trylock, a), 0);
    pthread_join(th, &res);
    cr_expect_eq((int)(intptr_t)res, EBUSY, "another thread of the same client");

    /* kept past several leases by the watchdog's quorum renewals */
    tu_sleep_ms(2500);
    cr_expect_eq(rs_mutex_trylock(b), EBUSY);
    cr_expect_eq(rs_mutex_unlock(a), 0, "unlock: %s", rs_client_lasterror(c1));
    holding = 0;
    for (int i = 0; i < NM; i++) {
        char buf[64] = "";
        ts_cmd_str(&m.s[i], buf, sizeof buf, "HGET %s o", key);
        holding += buf[0] != 0;
    }
    cr_expect_leq(holding, NM - (NM / 2 + 1), "still held on %d masters", holding);
    cr_expect_eq(rs_mutex_unlock(a), EPERM);
    cr_expect_eq(rs_mutex_trylock(b), 0, "trylock after release: %s", rs_client_lasterror(c2));
    cr_expect_gt(rs_mutex_fence(b), f, "fence %llu after %llu",
                 (unsigned long long)rs_mutex_fence(b), (unsigned long long)f);
    cr_expect_eq(rs_mutex_unlock(b), 0);

    rs_mutex_destroy(a);
    rs_mutex_destroy(a2);
    rs_mutex_destroy(b);
    rs_client_close(c1);
    rs_client_close(c2);
    masters_down(&m);
}

Test(redlock, rmutex_reentry)
{
    masters_t m;
    masters_up(&m);
    char prefix[32];
    ts_unique_prefix(prefix, sizeof prefix);
    rs_client_t *c1 = rl_open(m.url, prefix, 1000, 1000);
    rs_client_t *c2 = rl_open(m.url, prefix, 1000, 1000);
    rs_rmutex_t *a = NULL, *b = NULL;
    cr_assert_eq(rs_rmutex_init(&a, c1, "r"), 0);
    cr_assert_eq(rs_rmutex_init(&b, c2, "r"), 0);
    cr_assert_eq(rs_rmutex_lock(a), 0, "lock: %s", rs_client_lasterror(c1));
    uint64_t f = rs_rmutex_fence(a);
    cr_expect_gt(f, 0);
    cr_expect_eq(rs_rmutex_lock(a), 0, "re-entry: %s", rs_client_lasterror(c1));
    cr_expect_eq(rs_rmutex_trylock(a), 0, "re-entry by trylock: %s", rs_client_lasterror(c1));
    cr_expect_eq(rs_rmutex_fence(a), f);
    cr_expect_eq(rs_rmutex_trylock(b), EBUSY);
    char key[96];
    snprintf(key, sizeof key, "%s:{r}:rmutex", prefix);
    /* every entry reached a quorum; a master that answered one of them late may count fewer */
    int counted = 0;
    for (int i = 0; i < NM; i++)
        counted += ts_cmd_int(&m.s[i], "HGET %s n", key) == 3;
    cr_expect_geq(counted, NM / 2 + 1, "the count is 3 on %d masters", counted);
    cr_expect_eq(rs_rmutex_unlock(a), 0);
    cr_expect_eq(rs_rmutex_unlock(a), 0);
    cr_expect_eq(rs_rmutex_trylock(b), EBUSY, "one entry left");
    cr_expect_eq(rs_rmutex_unlock(a), 0, "last unlock: %s", rs_client_lasterror(c1));
    cr_expect_eq(rs_rmutex_unlock(a), EPERM);
    cr_expect_eq(rs_rmutex_trylock(b), 0, "after the last unlock: %s", rs_client_lasterror(c2));
    cr_expect_gt(rs_rmutex_fence(b), f);
    cr_expect_eq(rs_rmutex_unlock(b), 0);
    rs_rmutex_destroy(a);
    rs_rmutex_destroy(b);
    rs_client_close(c1);
    rs_client_close(c2);
    masters_down(&m);
}

/* ----- waiting ---------------------------------------------------------------------------- */

typedef struct waiter_arg {
    rs_mutex_t *m;
    atomic_int started, done;
    int rc;
    long long got_ms;
} waiter_arg_t;

static void *waiter(void *p)
{
    waiter_arg_t *w = p;
    atomic_store(&w->started, 1);
    w->rc = rs_mutex_lock(w->m);
    w->got_ms = tu_mono_ms();
    if (w->rc == 0)
        rs_mutex_unlock(w->m);
    atomic_store(&w->done, 1);
    return NULL;
}

static long long evalsha_calls(masters_t *m)
{
    long long n = 0;
    for (int i = 0; i < NM; i++)
        n += ts_info_ll(&m->s[i], "commandstats", "cmdstat_evalsha", "calls");
    return n;
}

Test(redlock, waiter_sleeps_until_release)
{
    masters_t m;
    masters_up(&m);
    char prefix[32];
    ts_unique_prefix(prefix, sizeof prefix);
    /* a long lease: a waiter that missed the wake-up would sleep for it (30 s) */
    rs_client_t *c1 = rl_open(m.url, prefix, 30000, 2000);
    rs_client_t *c2 = rl_open(m.url, prefix, 30000, 2000);
    rs_mutex_t *a = NULL, *b = NULL;
    cr_assert_eq(rs_mutex_init(&a, c1, "w"), 0);
    cr_assert_eq(rs_mutex_init(&b, c2, "w"), 0);
    cr_assert_eq(rs_mutex_lock(a), 0);
    waiter_arg_t w = {.m = b};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, waiter, &w), 0);
    long long until = tu_mono_ms() + 5000;
    while (!atomic_load(&w.started) && tu_mono_ms() < until)
        tu_sleep_ms(10);
    tu_sleep_ms(500); /* it has queued on the masters and sleeps */
    long long before = evalsha_calls(&m);
    tu_sleep_ms(1500);
    long long during = evalsha_calls(&m) - before;
    cr_expect_eq(atomic_load(&w.done), 0, "the waiter got a held mutex");
    /* no polling: the rechecks against a lost wake-up double from 20 ms (lib/redlock.c), so
     * this window (500 to 2000 ms into the wait) holds at most two (about 620 and 1260 ms),
     * on 3 masters, plus a stray renewal round: 9 calls. A 100 ms poll would make 45. */
    cr_expect_leq(during, 9, "%lld script calls on the masters in 1.5 s of waiting", during);
    long long t_rel = tu_mono_ms();
    cr_expect_eq(rs_mutex_unlock(a), 0);
    until = tu_mono_ms() + 10000;
    while (!atomic_load(&w.done) && tu_mono_ms() < until)
        tu_sleep_ms(5);
    cr_assert(atomic_load(&w.done), "the waiter was not woken by the release");
    pthread_join(th, NULL);
    cr_expect_eq(w.rc, 0, "waiter's lock: %d", w.rc);
    cr_log_info("woken %lld ms after the release", w.got_ms - t_rel);
    cr_expect_lt(w.got_ms - t_rel, 5000, "woken only %lld ms after the release",
                 w.got_ms - t_rel);
    rs_mutex_destroy(a);
    rs_mutex_destroy(b);
    rs_client_close(c1);
    rs_client_close(c2);
    masters_down(&m);
}

/* ----- several processes ------------------------------------------------------------------ */

#define NWORKERS 4
#define MAXSECT 20000
#define NCODES 5 /* RS_ELOST, RS_ECONN, ETIMEDOUT, ECANCELED, other */
_Static_assert(NWORKERS <= TU_WORKERS_MAX && NCODES <= TU_CODES_MAX, "tu_tally_t too small");

typedef struct sect {
    uint64_t fence;
    int unlock_rc;
} sect_t;

typedef struct shared {
    atomic_int stop;
    atomic_int phase;         /* 0 before the kill, 1 after */
    atomic_int in_cs[2];      /* who is in the critical section of the mutex [0] and the
                                 rmutex [1] (worker id + 1), 0 none */
    atomic_int overlaps;      /* times a worker found someone else inside */
    tu_tally_t t;             /* sections and failures per worker */
    atomic_int nsect;         /* sections in grant order (incremented inside the section) */
    sect_t sect[MAXSECT];
} shared_t;

static int code_slot(int rc)
{
    switch (rc) {
    case RS_ELOST: return 0;
    case RS_ECONN: return 1;
    case ETIMEDOUT: return 2;
    case ECANCELED: return 3;
    }
    return 4;
}

static void worker(shared_t *sh, int id, const char *url, const char *prefix, int rec)
{
    /* SIGPIPE at its default: a write to the killed master must not end the worker (the
     * library sends with MSG_NOSIGNAL, lib/conn.c) */
    signal(SIGPIPE, SIG_DFL);
    rs_config_t cfg = rl_config(url, prefix, 1000, 3000);
    rs_client_t *c = NULL;
    rs_mutex_t *m = NULL;
    rs_rmutex_t *r = NULL;
    if (rs_client_open(&c, &cfg) != 0 || rs_mutex_init(&m, c, "hot") != 0 ||
        rs_rmutex_init(&r, c, "hotr") != 0) {
        snprintf(sh->t.lasterr[id], sizeof sh->t.lasterr[id], "open: %s",
                 rs_client_lasterror(c));
        _exit(2);
    }
    unsigned it = 0;
    while (!atomic_load(&sh->stop)) {
        int phase = atomic_load(&sh->phase);
        int use_r = rec && (it++ % 2);
        struct timespec dl = tu_abs_in(30000);
        int rc = use_r ? rs_rmutex_timedlock(r, &dl) : rs_mutex_timedlock(m, &dl);
        if (rc == 0 && use_r)
            rc = rs_rmutex_lock(r); /* re-entry */
        if (rc != 0) {
            tu_tally_note(&sh->t, id, 0, rc, code_slot(rc), "lock", c);
            tu_sleep_ms(10);
            continue;
        }
        atomic_int *in_cs = &sh->in_cs[use_r];
        int was = atomic_exchange(in_cs, id + 1);
        if (was != 0)
            atomic_fetch_add(&sh->overlaps, 1);
        int i = 0;
        if (!use_r) {
            i = atomic_fetch_add(&sh->nsect, 1);
            if (i < MAXSECT)
                sh->sect[i].fence = rs_mutex_fence(m);
        }
        tu_sleep_ms(1);
        if (atomic_load(in_cs) != id + 1)
            atomic_fetch_add(&sh->overlaps, 1);
        atomic_store(in_cs, 0);
        if (use_r)
            rc = rs_rmutex_unlock(r);
        if (rc == 0)
            rc = use_r ? rs_rmutex_unlock(r) : rs_mutex_unlock(m);
        if (!use_r && i < MAXSECT)
            sh->sect[i].unlock_rc = rc;
        tu_tally_note(&sh->t, id, phase, rc, code_slot(rc), "unlock", c);
        /* some work between sections: Redlock has no FIFO order, and a process that locks
         * again at once can win every time against waiters that must first be woken */
        tu_sleep_ms(2 + id);
    }
    rs_mutex_destroy(m);
    rs_rmutex_destroy(r);
    rs_client_close(c);
    _exit(0);
}

#define KILL_NONE 0
#define KILL_ONE 1
#define PAUSE_ONE 2 /* SIGSTOP: a master that accepts and never answers */

static void run_workers(int kill_one)
{
    masters_t m;
    masters_up(&m);
    char prefix[32];
    ts_unique_prefix(prefix, sizeof prefix);
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    cr_assert_neq(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    pid_t pids[NWORKERS];
    for (int i = 0; i < NWORKERS; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0)
            worker(sh, i, m.url, prefix, 1);
    }
    /* a few hundred contended sections before (and after) the kill */
    int want = kill_one ? 25 : 100;
    long long until = tu_mono_ms() + 40000;
    while (!tu_tally_all_ok(&sh->t, NWORKERS, 0, want) && tu_mono_ms() < until)
        tu_sleep_ms(20);
    int started = tu_tally_all_ok(&sh->t, NWORKERS, 0, want);
    if (started && kill_one) {
        if (kill_one == PAUSE_ONE)
            ts_server_pause(&m.s[1]);
        else
            ts_server_kill(&m.s[1]);
        atomic_store(&sh->phase, 1);
        until = tu_mono_ms() + 40000;
        while (!tu_tally_all_ok(&sh->t, NWORKERS, 1, 50) && tu_mono_ms() < until)
            tu_sleep_ms(20);
    }
    atomic_store(&sh->stop, 1);
    tu_tally_reap(&sh->t, pids, NWORKERS, tu_mono_ms() + 20000);
    if (kill_one == PAUSE_ONE)
        ts_server_resume(&m.s[1]);
    cr_assert(started, "workers did not get going");

    int errs[NCODES] = {0};
    for (int i = 0; i < NWORKERS; i++) {
        for (int k = 0; k < NCODES; k++)
            errs[k] += atomic_load(&sh->t.err[i][k]);
        if (kill_one)
            cr_expect_geq(atomic_load(&sh->t.ok[i][1]), 50,
                          "worker %d stalled after the kill (%s)", i, sh->t.lasterr[i]);
    }
    int n = atomic_load(&sh->nsect);
    if (n > MAXSECT)
        n = MAXSECT;
    cr_log_info("redlock%s: %d mutex sections; errors ELOST %d ECONN %d ETIMEDOUT %d "
                "ECANCELED %d other %d",
                kill_one == KILL_ONE ? " (one master killed)"
                : kill_one == PAUSE_ONE ? " (one master paused)" : "", n, errs[0],
                errs[1], errs[2], errs[3], errs[4]);
    cr_expect_eq(atomic_load(&sh->overlaps), 0, "%d overlapping critical sections",
                 atomic_load(&sh->overlaps));
    /* a master killed takes nothing a quorum needs: no error at all */
    cr_expect_eq(errs[0] + errs[1] + errs[2] + errs[3] + errs[4], 0,
                 "errors: ELOST %d ECONN %d ETIMEDOUT %d ECANCELED %d other %d", errs[0],
                 errs[1], errs[2], errs[3], errs[4]);
    /* fences rise in grant order (the sections are numbered inside the critical section) */
    int bad = 0;
    for (int i = 1; i < n; i++)
        if (sh->sect[i].fence <= sh->sect[i - 1].fence) {
            if (!bad)
                cr_log_error("section %d fence %llu after %llu", i,
                             (unsigned long long)sh->sect[i].fence,
                             (unsigned long long)sh->sect[i - 1].fence);
            bad++;
        }
    cr_expect_eq(bad, 0, "%d sections with a fence not above the previous one", bad);
    munmap(sh, sizeof *sh);
    masters_down(&m);
}

Test(redlock, processes_exclude)
{
    run_workers(KILL_NONE);
}

Test(redlock, one_master_killed)
{
    run_workers(KILL_ONE);
}

Test(redlock, one_master_paused)
{
    run_workers(PAUSE_ONE);
}

/* ----- a majority down ---------------------------------------------------------------------- */

typedef struct timed_arg {
    rs_mutex_t *m;
    int rc;
    long long ms;
    atomic_int done;
} timed_arg_t;

static void *blocking_lock(void *p)
{
    timed_arg_t *a = p;
    long long t0 = tu_mono_ms();
    a->rc = rs_mutex_lock(a->m);
    a->ms = tu_mono_ms() - t0;
    if (a->rc == 0)
        rs_mutex_unlock(a->m);
    atomic_store(&a->done, 1);
    return NULL;
}

Test(redlock, majority_down)
{
    masters_t m;
    masters_up(&m);
    char prefix[32];
    ts_unique_prefix(prefix, sizeof prefix);
    const long timeout = 500, margin = 3000;
    rs_client_t *c = rl_open(m.url, prefix, 1000, timeout);
    rs_client_t *c2 = rl_open(m.url, prefix, 1000, timeout);
    rs_mutex_t *held = NULL, *other = NULL;
    rs_rmutex_t *rheld = NULL;
    cr_assert_eq(rs_mutex_init(&held, c, "h"), 0);
    cr_assert_eq(rs_rmutex_init(&rheld, c, "rh"), 0);
    cr_assert_eq(rs_mutex_init(&other, c2, "o"), 0);
    cr_assert_eq(rs_mutex_lock(held), 0);
    cr_assert_eq(rs_rmutex_lock(rheld), 0);

    ts_server_kill(&m.s[0]);
    ts_server_kill(&m.s[2]);

    long long t0 = tu_mono_ms();
    int rc = rs_mutex_trylock(other);
    long long dt = tu_mono_ms() - t0;
    cr_expect(rc == RS_ECONN, "trylock: %d (%s)", rc, rs_client_lasterror(c2));
    cr_expect_lt(dt, timeout + margin, "trylock took %lld ms", dt);
    cr_expect(strstr(rs_client_lasterror(c2), "quorum") != NULL, "message: %s",
              rs_client_lasterror(c2));

    t0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(60000);
    rc = rs_mutex_timedlock(other, &dl);
    dt = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "timedlock: %d (%s)", rc, rs_client_lasterror(c2));
    cr_expect_lt(dt, timeout + margin, "timedlock took %lld ms", dt);

    timed_arg_t a = {.m = other};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, blocking_lock, &a), 0);
    long long until = tu_mono_ms() + timeout + margin + 2000;
    while (!atomic_load(&a.done) && tu_mono_ms() < until)
        tu_sleep_ms(10);
    cr_assert(atomic_load(&a.done), "lock did not return with two of three masters down");
    pthread_join(th, NULL);
    cr_expect_eq(a.rc, RS_ECONN, "lock: %d", a.rc);
    cr_expect_lt(a.ms, timeout + margin, "lock took %lld ms", a.ms);

    /* the holds: re-entry and unlock fail with a documented code, within the bound */
    t0 = tu_mono_ms();
    rc = rs_rmutex_lock(rheld);
    dt = tu_mono_ms() - t0;
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "rmutex re-entry: %d", rc);
    cr_expect_lt(dt, timeout + margin, "re-entry took %lld ms", dt);
    t0 = tu_mono_ms();
    rc = rs_mutex_unlock(held);
    dt = tu_mono_ms() - t0;
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "unlock: %d (%s)", rc, rs_client_lasterror(c));
    cr_expect_lt(dt, timeout + margin, "unlock took %lld ms", dt);
    cr_expect_eq(rs_mutex_unlock(held), EPERM, "the hold is cleared either way");
    t0 = tu_mono_ms();
    rc = rs_rmutex_unlock(rheld);
    dt = tu_mono_ms() - t0;
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "rmutex unlock: %d", rc);
    cr_expect_lt(dt, timeout + margin, "rmutex unlock took %lld ms", dt);

    rs_mutex_destroy(held);
    rs_rmutex_destroy(rheld);
    rs_mutex_destroy(other);
    t0 = tu_mono_ms();
    rs_client_close(c);
    rs_client_close(c2);
    cr_expect_lt(tu_mono_ms() - t0, 2 * (timeout + margin), "close took %lld ms",
                 tu_mono_ms() - t0);

    /* and a client cannot be opened on one master of three */
    rs_config_t cfg = rl_config(m.url, prefix, 1000, timeout);
    rs_client_t *c3 = NULL;
    t0 = tu_mono_ms();
    cr_expect_eq(rs_client_open(&c3, &cfg), RS_ECONN);
    cr_expect_lt(tu_mono_ms() - t0, timeout + margin);
    cr_expect(strstr(rs_client_lasterror(NULL), "only 1 of 3 redlock masters reachable") != NULL,
              "message: %s", rs_client_lasterror(NULL));
    masters_down(&m);
}
