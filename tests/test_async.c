/*
 * test_async.c - the event-loop API (issue 16): _async acquisitions, rs_hold_release_async,
 * rs_request_cancel, rs_client_fd and rs_client_dispatch, against a real redis-server.
 *
 *   grant_then_release_elsewhere  a free mutex is granted through dispatch (never inside the
 *                                 call); the hold is released on another thread; a release
 *                                 through rs_hold_release_async reports 0 via dispatch
 *   fifo_2000_over_20_names       one epoll loop thread, 2,000 requests queued on 20 held
 *                                 names: grants in FIFO order per name, never overlapping
 *                                 (a fenced counter in a separate key checks it), the
 *                                 process's thread count unchanged while they wait
 *   deadlines_fire                pending requests' deadlines end them with ETIMEDOUT (after
 *                                 the deadline, generous margin) and they leave the queue
 *   cancel_races_grant            a cancel right behind the release that grants: done gets
 *                                 ECANCELED and the grant is released (200 rounds)
 *   conn_killed                   CLIENT KILL of every connection while requests wait: all
 *                                 are granted once, in turn, none lost
 *   redis_restart                 Redis restarted while requests wait: each completes
 *                                 exactly once, grants never overlap
 *   close_pending                 rs_client_close with pending requests and an undelivered
 *                                 grant: every done(ECANCELED) runs inside close, the queue
 *                                 is empty and the mutex free afterwards
 *   fork_child                    a fork child's _async calls and rs_client_fd: RS_EFORK
 *   thread_bound_excludes         a thread's lock and an async hold exclude each other
 *   rwlock_and_sem                read holds share, a write waits; semaphore permits
 *   latch_wait                    40 waits complete when the count reaches 0, not before; a
 *                                 deadline ends one with ETIMEDOUT; an open latch completes
 *   script_flush                  pipelined requests that all meet NOSCRIPT (SCRIPT FLUSH):
 *                                 the script is loaded in the pipeline, each granted once
 *   threads_stress                4 threads submit and cancel, 2 more and the submitters
 *                                 dispatch: each done once, no overlap, nothing left held
 *   inflight_resent               calls sent to a stopped server that is then restarted
 *                                 empty: each is sent again on the new connection, granted once
 *   stalled_server                a stopped server: requests in flight end with RS_ECONN after
 *                                 about timeout_ms (deadline or not); served again after
 *   bad_input                     EINVAL at the call, done never called
 * conn_killed, redis_restart, script_flush, inflight_resent and stalled_server are in
 * test_async_faults.c; what both files share is in test_async.h.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"
#include "test_async.h"

TestSuite(async, .timeout = 120);

/* ---- an epoll loop on rs_client_fd ----------------------------------------------------- */

/* Runs the loop until *count >= want or timeout_ms passed: 1 if reached. */
static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void *release_it(void *arg)
{
    return (void *)(intptr_t)rs_hold_release(arg);
}

Test(async, grant_then_release_elsewhere)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "a1"), 0);
    one_t o;
    one_acquire(c, m, NULL, &o);
    cr_expect(pthread_equal(o.thread, pthread_self()), "done ran on another thread");
    cr_assert_eq(o.rc, 0, "rc %d", o.rc);
    cr_assert_not_null(o.hold);
    cr_expect_gt(rs_hold_fence(o.hold), 0);
    cr_expect_gt(rs_hold_remaining(o.hold), 0);
    cr_expect_eq(rs_mutex_trylock(m), EBUSY);
    cr_expect_eq(rs_mutex_destroy(m), EBUSY, "a hold of the handle is out");
    pthread_t th;
    void *ret;
    cr_assert_eq(pthread_create(&th, NULL, release_it, o.hold), 0);
    pthread_join(th, &ret);
    cr_expect_eq((intptr_t)ret, 0);
    cr_expect_eq(rs_mutex_trylock(m), 0, "free after the release on the other thread");
    cr_expect_eq(rs_mutex_unlock(m), 0);

    /* a second acquisition, released without blocking */
    one_t o2, r2 = {0};
    one_acquire(c, m, NULL, &o2);
    cr_assert_eq(o2.rc, 0);
    cr_assert_eq(rs_hold_release_async(o2.hold, one_done, &r2), 0);
    cr_expect_eq(r2.ran, 0);
    cr_assert(loop_until(c, &r2.ran, 1, 10000));
    cr_expect_eq(r2.rc, 0);
    cr_expect_null(r2.hold);
    cr_expect_eq(rs_mutex_trylock(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    cr_expect_eq(rs_client_dispatch(c), 0, "nothing more queued");
    cr_expect_eq(rs_mutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- many requests on many names ---------------------------------------------------------- */

#define NAMES 20
#define PER 100

/* every name's store is the test's one connection, keys fence:N and count:N */
static redisContext *one_store(fifo_t *x, int name, char *fk, char *ck, size_t len)
{
    snprintf(fk, len, "fence:%d", name);
    snprintf(ck, len, "count:%d", name);
    return x->arg;
}

Test(async, fifo_2000_over_20_names)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 0, NULL);
    rs_client_t *blocker = tu_open_client(&s, 5000, 0, NULL);
    static fifo_t x;
    memset(&x, 0, sizeof x);
    x.names = NAMES;
    x.per = PER;
    x.store = one_store;
    x.arg = ts_connect(&s);
    cr_assert_not_null(x.arg);
    rs_mutex_t *m[NAMES], *bm[NAMES];
    rs_hold_t *bh[NAMES];
    char name[32];
    for (int i = 0; i < NAMES; i++) {
        snprintf(name, sizeof name, "acct%d", i);
        cr_assert_eq(rs_mutex_init(&m[i], c, name), 0);
        cr_assert_eq(rs_mutex_init(&bm[i], blocker, name), 0);
        cr_assert_eq(rs_mutex_acquire(bm[i], NULL, &bh[i]), 0);
    }
    /* the I/O thread and the subscriber exist after a first request */
    rs_mutex_t *wm;
    cr_assert_eq(rs_mutex_init(&wm, c, "warm"), 0);
    warm_up(c, wm);
    int before = threads_now();

    fifo_submit(&x, m, c);
    for (int n = 0; n < NAMES; n++) {
        snprintf(name, sizeof name, "acct%d", n);
        cr_assert(tu_wait_zcard(&s, "mutex", name, PER, 20000), "%s: not all queued (%lld)",
                  name, tu_zcard_q(&s, "mutex", name));
    }
    cr_expect_eq(threads_now(), before, "threads while 2,000 wait: %d, before %d",
                 threads_now(), before);
    cr_expect_eq(x.granted + x.errors, 0, "granted while the blockers hold");
    for (int i = 0; i < NAMES; i++)
        cr_assert_eq(rs_hold_release(bh[i]), 0);
    cr_assert(loop_until(c, &x.released, NAMES * PER, 60000), "granted %d released %d errors %d",
              x.granted, x.released, x.errors);
    fifo_expect_all(&x);
    cr_expect_eq(threads_now(), before);
    for (int i = 0; i < NAMES; i++) {
        cr_expect_eq(rs_mutex_destroy(m[i]), 0);
        cr_expect_eq(rs_mutex_destroy(bm[i]), 0);
    }
    rs_mutex_destroy(wm);
    redisFree(x.arg);
    rs_client_close(blocker);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- deadlines ------------------------------------------------------------------------ */

Test(async, deadlines_fire)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_client_t *c2 = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m, *m2;
    cr_assert_eq(rs_mutex_init(&m, c, "dl"), 0);
    cr_assert_eq(rs_mutex_init(&m2, c2, "dl"), 0);
    cr_assert_eq(rs_mutex_lock(m2), 0);
    static many_t t;
    static many_req_t r[50];
    long long start = tu_mono_ms();
    struct timespec dl = tu_abs_in(400);
    rs_request_t *req;
    many_pend(m, &dl, &t, r, 50);
    cr_assert(loop_until(c, &t.ran, 50, 20000), "ran %d of 50", t.ran);
    cr_expect_eq(t.timedout, 50, "ok %d timedout %d other %d", t.ok, t.timedout, t.other);
    for (int i = 0; i < 50; i++)
        cr_expect_geq(t.at_ms[i] - start, 390, "request %d ended %lld ms after the start", i,
                      t.at_ms[i] - start);
    cr_expect(tu_wait_zcard(&s, "mutex", "dl", 0, 5000), "entries left in the queue");
    /* a past deadline: one attempt, EBUSY */
    one_t o = {0};
    struct timespec past = {1, 0};
    cr_assert_eq(rs_mutex_acquire_async(m, &past, one_done, &o, &req), 0);
    cr_assert(loop_until(c, &o.ran, 1, 10000));
    cr_expect_eq(o.rc, EBUSY);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c2);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- cancel against grant ----------------------------------------------------------------- */

Test(async, cancel_races_grant)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "race"), 0);
    int canceled = 0;
    for (int round = 0; round < 200; round++) {
        cancel_race_round(c, m, "race", &s, round, 1500, 3000);
        canceled++;
    }
    cr_expect_eq(canceled, 200);
    cr_expect_eq(tu_zcard_q(&s, "mutex", "race"), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- close -------------------------------------------------------------------------------- */

Test(async, close_pending)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_client_t *c2 = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m, *m2, *f, *f2;
    cr_assert_eq(rs_mutex_init(&m, c, "cl"), 0);
    cr_assert_eq(rs_mutex_init(&m2, c2, "cl"), 0);
    cr_assert_eq(rs_mutex_init(&f, c, "clfree"), 0);
    cr_assert_eq(rs_mutex_init(&f2, c2, "clfree"), 0);
    cr_assert_eq(rs_mutex_lock(m2), 0);
    static many_t t;
    static many_req_t r[51];
    many_pend(m, NULL, &t, r, 50);
    cr_assert(tu_wait_zcard(&s, "mutex", "cl", 50, 10000));
    /* a grant completed but not dispatched */
    many_pend_one(f, NULL, &t, r, 50);
    wait_readable(c, 10000); /* readable: the grant is queued */
    cr_assert_eq(t.ran, 0);
    cr_assert_eq(rs_mutex_trylock(f2), EBUSY, "the grant is not queued");
    cr_assert_eq(rs_client_close(c), 0);
    many_expect_canceled(&t, 51);
    cr_expect_eq(tu_zcard_q(&s, "mutex", "cl"), 0, "entries left in the queue");
    cr_expect_eq(rs_mutex_trylock(f2), 0, "the undelivered grant was released");
    cr_expect_eq(rs_mutex_unlock(f2), 0);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(f);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(f2);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ---- fork ----------------------------------------------------------------------------------- */

static rs_mutex_t *g_fork_m;

static void never(int rc, rs_hold_t *hold, void *arg)
{
    (void)rc, (void)hold, (void)arg;
    _exit(9);
}

static int fork_child(void *arg)
{
    rs_client_t *c = arg;
    rs_request_t *req;
    if (rs_mutex_acquire_async(g_fork_m, NULL, never, NULL, &req) != RS_EFORK)
        return 1;
    if (rs_client_fd(c) != -1)
        return 2;
    if (rs_client_dispatch(c) != 0)
        return 3;
    return rs_client_close(c) == 0 ? 0 : 4;
}

Test(async, fork_child, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    cr_assert_eq(rs_mutex_init(&g_fork_m, c, "fk"), 0);
    one_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(g_fork_m, NULL, one_done, &o, &req), 0);
    cr_assert(loop_until(c, &o.ran, 1, 10000));
    pid_t pid = tu_fork_kid(fork_child, c);
    cr_assert_gt(pid, 0);
    int st = tu_reap(pid, 10000);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    cr_expect_eq(rs_hold_lost(o.hold), 0);
    cr_expect_eq(rs_hold_release(o.hold), 0, "the parent's hold survived the child");
    rs_mutex_destroy(g_fork_m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- mixing with the thread-bound calls ------------------------------------------------- */

Test(async, thread_bound_excludes)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "mix"), 0);
    cr_assert_eq(rs_mutex_lock(m), 0);
    one_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(m, NULL, one_done, &o, &req), 0);
    cr_expect_eq(loop_until(c, &o.ran, 1, 300), 0, "granted while a thread holds it");
    cr_assert_eq(rs_mutex_unlock(m), 0);
    cr_assert(loop_until(c, &o.ran, 1, 10000));
    cr_assert_eq(o.rc, 0);
    struct timespec dl = tu_abs_in(200);
    cr_expect_eq(rs_mutex_timedlock(m, &dl), ETIMEDOUT, "the thread got it while the async "
                 "hold is out");
    cr_assert_eq(rs_hold_release(o.hold), 0);
    cr_expect_eq(rs_mutex_trylock(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(async, rwlock_and_sem)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_rwlock_t *rw;
    cr_assert_eq(rs_rwlock_init(&rw, c, "rw"), 0);
    one_t r1 = {0}, r2 = {0}, w = {0};
    rs_request_t *req;
    cr_assert_eq(rs_rwlock_acquire_read_async(rw, NULL, one_done, &r1, &req), 0);
    cr_assert_eq(rs_rwlock_acquire_read_async(rw, NULL, one_done, &r2, &req), 0);
    cr_assert(loop_until(c, &r2.ran, 1, 10000));
    cr_assert(loop_until(c, &r1.ran, 1, 10000));
    cr_assert_eq(r1.rc, 0);
    cr_assert_eq(r2.rc, 0);
    cr_expect_eq(rs_hold_fence(r1.hold), 0, "a read hold has no token");
    cr_assert_eq(rs_rwlock_acquire_write_async(rw, NULL, one_done, &w, &req), 0);
    cr_expect_eq(loop_until(c, &w.ran, 1, 300), 0, "the writer got in with readers");
    cr_assert_eq(rs_hold_release(r1.hold), 0);
    cr_assert_eq(rs_hold_release(r2.hold), 0);
    cr_assert(loop_until(c, &w.ran, 1, 10000));
    cr_assert_eq(w.rc, 0);
    cr_expect_gt(rs_hold_fence(w.hold), 0);
    cr_assert_eq(rs_hold_release(w.hold), 0);
    rs_rwlock_destroy(rw);

    rs_sem_t *sem;
    cr_assert_eq(rs_sem_init(&sem, c, "sem", 3), 0);
    one_t a = {0}, b = {0};
    cr_assert_eq(rs_sem_acquire_async(sem, 2, NULL, one_done, &a, &req), 0);
    cr_assert(loop_until(c, &a.ran, 1, 10000));
    cr_assert_eq(a.rc, 0);
    struct timespec past = {1, 0};
    cr_assert_eq(rs_sem_acquire_async(sem, 2, &past, one_done, &b, &req), 0);
    cr_assert(loop_until(c, &b.ran, 1, 10000));
    cr_expect_eq(b.rc, EAGAIN, "2 of 3 permits out, 2 more: %d", b.rc);
    b.ran = 0;
    cr_assert_eq(rs_sem_acquire_async(sem, 2, NULL, one_done, &b, &req), 0);
    cr_expect_eq(loop_until(c, &b.ran, 1, 300), 0);
    cr_assert_eq(rs_hold_release(a.hold), 0);
    cr_assert(loop_until(c, &b.ran, 1, 10000));
    cr_assert_eq(b.rc, 0);
    cr_assert_eq(rs_hold_release(b.hold), 0);
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- bad input ------------------------------------------------------------------------------ */

Test(async, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    rs_sem_t *sem;
    rs_rwlock_t *rw;
    cr_assert_eq(rs_mutex_init(&m, c, "bad"), 0);
    cr_assert_eq(rs_sem_init(&sem, c, "bad", 2), 0);
    cr_assert_eq(rs_rwlock_init(&rw, c, "bad"), 0);
    one_t o = {0};
    rs_request_t *req = (rs_request_t *)&o;
    cr_expect_eq(rs_mutex_acquire_async(m, NULL, NULL, &o, &req), EINVAL);
    cr_expect_null(req, "req not cleared");
    cr_expect_eq(rs_mutex_acquire_async(m, NULL, one_done, &o, NULL), EINVAL);
    cr_expect_eq(rs_mutex_acquire_async(NULL, NULL, one_done, &o, &req), EINVAL);
    struct timespec bad = {time(NULL) + 10, 1000000000L};
    cr_expect_eq(rs_mutex_acquire_async(m, &bad, one_done, &o, &req), EINVAL);
    cr_expect_eq(rs_rwlock_acquire_read_async(rw, &bad, one_done, &o, &req), EINVAL);
    cr_expect_eq(rs_rwlock_acquire_write_async(rw, NULL, NULL, &o, &req), EINVAL);
    cr_expect_eq(rs_rwlock_acquire_read_async(NULL, NULL, one_done, &o, &req), EINVAL);
    cr_expect_eq(rs_sem_acquire_async(sem, 0, NULL, one_done, &o, &req), EINVAL);
    cr_expect_eq(rs_sem_acquire_async(sem, 1, NULL, one_done, &o, NULL), EINVAL);
    cr_expect_eq(rs_sem_acquire_async(NULL, 1, NULL, one_done, &o, &req), EINVAL);
    cr_expect_eq(rs_hold_release_async(NULL, one_done, &o), EINVAL);
    cr_expect_eq(rs_request_cancel(NULL), EINVAL);
    cr_expect_eq(rs_client_fd(NULL), -1);
    cr_expect_eq(rs_client_dispatch(NULL), 0);
    /* a real hold: release_async without done is EINVAL and leaves it held */
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h), 0);
    cr_expect_eq(rs_hold_release_async(h, NULL, NULL), EINVAL);
    cr_expect_eq(rs_hold_lost(h), 0);
    cr_expect_eq(rs_hold_release(h), 0);
    tu_sleep_ms(200);
    cr_expect_eq(rs_client_dispatch(c), 0);
    cr_expect_eq(o.ran, 0, "done was called for a refused call");
    rs_mutex_destroy(m);
    rs_sem_destroy(sem);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- latch ---------------------------------------------------------------------------------- */

Test(async, latch_wait)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_client_t *c2 = tu_open_client(&s, 3000, 0, NULL);
    rs_latch_t *l, *l2;
    cr_assert_eq(rs_latch_init(&l, c, "gate", 2), 0);
    cr_assert_eq(rs_latch_init(&l2, c2, "gate", 0), 0);
    static many_t t;
    memset(&t, 0, sizeof t);
    static many_req_t r[40];
    rs_request_t *req;
    for (int i = 0; i < 40; i++) {
        r[i].t = &t;
        r[i].i = i;
        cr_assert_eq(rs_latch_wait_async(l, NULL, many_done, &r[i], &req), 0, "%s",
                     rs_client_lasterror(c));
    }
    /* one with a deadline that passes while closed */
    one_t o = {0};
    struct timespec dl = tu_abs_in(300);
    cr_assert_eq(rs_latch_wait_async(l, &dl, one_done, &o, &req), 0);
    cr_assert(loop_until(c, &o.ran, 1, 10000));
    cr_expect_eq(o.rc, ETIMEDOUT);
    cr_expect_eq(t.ran, 0, "done before the latch opened");
    cr_assert_eq(rs_latch_count_down(l2), 0);
    cr_expect_eq(loop_until(c, &t.ran, 1, 300), 0, "done at count 1");
    cr_assert_eq(rs_latch_count_down(l2), 0);
    cr_assert(loop_until(c, &t.ran, 40, 10000), "ran %d of 40", t.ran);
    cr_expect_eq(t.ok, 40);
    /* open: a wait completes at once (through dispatch) */
    one_t o2 = {0};
    cr_assert_eq(rs_latch_wait_async(l, NULL, one_done, &o2, &req), 0);
    cr_expect_eq(o2.ran, 0);
    cr_assert(loop_until(c, &o2.ran, 1, 10000));
    cr_expect_eq(o2.rc, 0);
    cr_expect_null(o2.hold);
    cr_expect_eq(rs_latch_wait_async(l, NULL, NULL, NULL, &req), EINVAL);
    cr_expect_eq(rs_latch_destroy(l), 0);
    cr_expect_eq(rs_latch_destroy(l2), 0);
    rs_client_close(c2);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ---- many threads at once ------------------------------------------------------------------- */

#define ST_THREADS 4
#define ST_PER 150
#define ST_NAMES 5

typedef struct st_shared {
    rs_client_t *c;
    rs_mutex_t *m[ST_NAMES];
    atomic_int active[ST_NAMES];
    atomic_int ran, ok, canceled, other, overlap, twice;
    atomic_int stop;
} st_shared_t;

typedef struct st_req {
    st_shared_t *sh;
    int name;
    atomic_int ran;
} st_req_t;

static void st_done(int rc, rs_hold_t *hold, void *arg)
{
    st_req_t *r = arg;
    st_shared_t *sh = r->sh;
    if (atomic_fetch_add(&r->ran, 1) != 0)
        atomic_fetch_add(&sh->twice, 1);
    if (rc == 0) {
        if (atomic_fetch_add(&sh->active[r->name], 1) != 0)
            atomic_fetch_add(&sh->overlap, 1);
        atomic_fetch_sub(&sh->active[r->name], 1);
        atomic_fetch_add(&sh->ok, 1);
        if (rs_hold_release(hold) != 0)
            atomic_fetch_add(&sh->other, 1);
    } else if (rc == ECANCELED) {
        atomic_fetch_add(&sh->canceled, 1);
    } else {
        atomic_fetch_add(&sh->other, 1);
    }
    atomic_fetch_add(&sh->ran, 1); /* last: the request may be reused once counted */
}

static st_req_t st_reqs[ST_THREADS][ST_PER];

/* req is valid until done runs: a cancel must not race the dispatch that runs done, so the
 * program serialises the two (here one mutex around dispatch and check-then-cancel) */
static pthread_mutex_t st_mu = PTHREAD_MUTEX_INITIALIZER;

static int st_dispatch(rs_client_t *c)
{
    pthread_mutex_lock(&st_mu);
    int n = rs_client_dispatch(c);
    pthread_mutex_unlock(&st_mu);
    return n;
}

typedef struct st_arg {
    st_shared_t *sh;
    int id;
} st_arg_t;

static void *st_submitter(void *arg)
{
    st_arg_t *a = arg;
    unsigned seed = (unsigned)a->id * 7919u + 1;
    for (int i = 0; i < ST_PER; i++) {
        st_req_t *r = &st_reqs[a->id][i];
        r->sh = a->sh;
        r->name = (int)(rand_r(&seed) % ST_NAMES);
        rs_request_t *req;
        if (rs_mutex_acquire_async(a->sh->m[r->name], NULL, st_done, r, &req) != 0) {
            atomic_fetch_add(&a->sh->other, 1);
            atomic_fetch_add(&a->sh->ran, 1);
            continue;
        }
        if (rand_r(&seed) % 3 == 0) {
            if (rand_r(&seed) % 2)
                usleep(rand_r(&seed) % 500);
            pthread_mutex_lock(&st_mu);
            if (atomic_load(&r->ran) == 0)
                rs_request_cancel(req);
            pthread_mutex_unlock(&st_mu);
        }
        if (i % 10 == 0)
            st_dispatch(a->sh->c); /* this thread dispatches too, sometimes */
    }
    return NULL;
}

static void *st_dispatcher(void *arg)
{
    st_shared_t *sh = arg;
    while (!atomic_load(&sh->stop)) {
        if (st_dispatch(sh->c) == 0)
            usleep(200);
    }
    return NULL;
}

Test(async, threads_stress)
{
    ts_server_t s;
    tu_start_server(&s);
    static st_shared_t sh;
    memset(&sh, 0, sizeof sh);
    sh.c = tu_open_client(&s, 3000, 0, NULL);
    char name[32];
    for (int i = 0; i < ST_NAMES; i++) {
        snprintf(name, sizeof name, "st%d", i);
        cr_assert_eq(rs_mutex_init(&sh.m[i], sh.c, name), 0);
    }
    pthread_t d[2], t[ST_THREADS];
    st_arg_t args[ST_THREADS];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&d[i], NULL, st_dispatcher, &sh), 0);
    for (int i = 0; i < ST_THREADS; i++) {
        args[i].sh = &sh;
        args[i].id = i;
        cr_assert_eq(pthread_create(&t[i], NULL, st_submitter, &args[i]), 0);
    }
    for (int i = 0; i < ST_THREADS; i++)
        pthread_join(t[i], NULL);
    long long end = tu_mono_ms() + 60000;
    while (atomic_load(&sh.ran) < ST_THREADS * ST_PER && tu_mono_ms() < end)
        tu_sleep_ms(20);
    atomic_store(&sh.stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(d[i], NULL);
    cr_expect_eq(atomic_load(&sh.ran), ST_THREADS * ST_PER, "ran %d", atomic_load(&sh.ran));
    cr_expect_eq(atomic_load(&sh.twice), 0, "a done ran twice");
    cr_expect_eq(atomic_load(&sh.overlap), 0);
    cr_expect_eq(atomic_load(&sh.other), 0, "other errors");
    cr_expect_eq(atomic_load(&sh.ok) + atomic_load(&sh.canceled), ST_THREADS * ST_PER);
    for (int i = 0; i < ST_NAMES; i++) {
        cr_expect_eq(rs_mutex_trylock(sh.m[i]), 0, "st%d stayed taken", i);
        rs_mutex_unlock(sh.m[i]);
        snprintf(name, sizeof name, "st%d", i);
        cr_expect_eq(tu_zcard_q(&s, "mutex", name), 0);
        cr_expect_eq(rs_mutex_destroy(sh.m[i]), 0);
    }
    rs_client_close(sh.c);
    ts_server_stop(&s);
}
