/*
 * test_holds.c - holds as objects (rs_mutex_acquire, rs_rwlock_acquire_read/_write,
 * rs_sem_acquire, rs_hold_*; issue 16, first part): a hold that belongs to the program.
 *
 *   released_by_another_thread  taken on one thread, released on another; fence, remaining
 *   object_and_thread_exclude   a hold object and a thread's lock on one name exclude each
 *                               other, both ways, and the waiter gets it at the release
 *   two_objects_contend         two holds of one client on one mutex: the second waits (no
 *                               EDEADLK) and is granted at the first's release, token higher
 *   rwlock_objects              read objects share, a write object excludes; read fence 0
 *   sem_objects                 n permits in one hold; EAGAIN when too few are free
 *   lost_is_reported            the key deleted in Redis: rs_hold_lost, on_lost, RS_ELOST
 *   bad_input                   NULLs and bad arguments are EINVAL, *out NULL
 *   destroy_busy_then_close     a handle with an unreleased object is EBUSY to destroy;
 *                               close releases it in Redis, the release after it only frees
 *   fork_child                  a child's release is RS_EFORK and leaves the parent's hold
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"

TestSuite(holds, .timeout = 60);

static struct timespec past(void)
{
    struct timespec t = {1, 0};
    return t;
}

static void *release_it(void *arg)
{
    rs_hold_t *h = arg;
    return (void *)(intptr_t)rs_hold_release(h);
}

Test(holds, released_by_another_thread)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "obj"), 0);
    rs_hold_t *h = NULL;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h), 0, "%s", rs_client_lasterror(c));
    cr_assert_not_null(h);
    cr_expect_gt(rs_hold_fence(h), 0);
    cr_expect_gt(rs_hold_remaining(h), 0);
    cr_expect_eq(rs_hold_lost(h), 0);
    cr_expect_eq(rs_mutex_trylock(m), EBUSY, "the thread that took the object does not own it");
    pthread_t th;
    void *ret;
    cr_assert_eq(pthread_create(&th, NULL, release_it, h), 0);
    pthread_join(th, &ret);
    cr_expect_eq((intptr_t)ret, 0, "release on another thread");
    cr_expect_eq(rs_mutex_trylock(m), 0, "free after the release");
    cr_expect_eq(rs_mutex_unlock(m), 0);
    cr_expect_eq(rs_mutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

typedef struct waiter {
    rs_mutex_t *m;
    rs_hold_t *h;   /* object mode: the hold got */
    int object;
    atomic_int done;
    int rc;
} waiter_t;

static void *wait_for_it(void *arg)
{
    waiter_t *w = arg;
    if (w->object) {
        w->rc = rs_mutex_acquire(w->m, NULL, &w->h);
    } else {
        w->rc = rs_mutex_lock(w->m);
        if (w->rc == 0)
            w->rc = rs_mutex_unlock(w->m);
    }
    atomic_store(&w->done, 1);
    return NULL;
}

Test(holds, object_and_thread_exclude)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "mix"), 0);
    /* an object held: a thread's lock waits for it */
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h), 0);
    struct timespec dl = tu_abs_in(200);
    cr_expect_eq(rs_mutex_timedlock(m, &dl), ETIMEDOUT);
    waiter_t w = {.m = m, .object = 0};
    pthread_t th;
    tu_thread_start(&th, wait_for_it, &w);
    tu_sleep_ms(100);
    cr_expect_eq(atomic_load(&w.done), 0, "the thread's lock did not wait for the object");
    cr_expect_eq(rs_hold_release(h), 0);
    cr_assert(tu_thread_join(th, &w.done, 5000), "the waiting thread was not served");
    cr_expect_eq(w.rc, 0);
    /* a thread holding: an object waits (a past deadline is one attempt: EBUSY) */
    cr_assert_eq(rs_mutex_lock(m), 0);
    struct timespec p = past();
    rs_hold_t *h2 = (rs_hold_t *)&p;
    cr_expect_eq(rs_mutex_acquire(m, &p, &h2), EBUSY);
    cr_expect_null(h2);
    dl = tu_abs_in(200);
    cr_expect_eq(rs_mutex_acquire(m, &dl, &h2), ETIMEDOUT);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    cr_expect_eq(rs_mutex_acquire(m, &p, &h2), 0, "free: one attempt is enough");
    cr_expect_eq(rs_hold_release(h2), 0);
    cr_expect_eq(rs_mutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(holds, two_objects_contend)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "two"), 0);
    rs_hold_t *h1;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h1), 0);
    uint64_t f1 = rs_hold_fence(h1);
    waiter_t w = {.m = m, .object = 1};
    pthread_t th;
    tu_thread_start(&th, wait_for_it, &w);
    tu_sleep_ms(150);
    cr_expect_eq(atomic_load(&w.done), 0, "the second hold did not wait for the first");
    cr_expect_eq(rs_hold_release(h1), 0);
    cr_assert(tu_thread_join(th, &w.done, 5000), "the second hold was not granted");
    cr_assert_eq(w.rc, 0, "second acquire: %d", w.rc);
    cr_expect_gt(rs_hold_fence(w.h), f1, "tokens rise");
    cr_expect_eq(rs_hold_release(w.h), 0, "released by the thread that did not take it");
    cr_expect_eq(rs_mutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(holds, rwlock_objects)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_rwlock_t *rw;
    cr_assert_eq(rs_rwlock_init(&rw, c, "rw"), 0);
    rs_hold_t *r1, *r2, *wr;
    struct timespec p = past();
    cr_assert_eq(rs_rwlock_acquire_read(rw, NULL, &r1), 0);
    cr_assert_eq(rs_rwlock_acquire_read(rw, &p, &r2), 0, "readers share");
    cr_expect_eq(rs_hold_fence(r1), 0, "a read hold has no token");
    cr_expect_eq(rs_rwlock_acquire_write(rw, &p, &wr), EBUSY);
    cr_expect_eq(rs_rwlock_trywrlock(rw), EBUSY, "a thread's write lock waits for the readers");
    cr_expect_eq(rs_hold_release(r1), 0);
    cr_expect_eq(rs_hold_release(r2), 0);
    cr_assert_eq(rs_rwlock_acquire_write(rw, &p, &wr), 0);
    cr_expect_gt(rs_hold_fence(wr), 0);
    cr_expect_eq(rs_rwlock_tryrdlock(rw), EBUSY);
    cr_expect_eq(rs_hold_release(wr), 0);
    cr_expect_eq(rs_rwlock_tryrdlock(rw), 0);
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(rs_rwlock_destroy(rw), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(holds, sem_objects)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_sem_t *sm;
    cr_assert_eq(rs_sem_init(&sm, c, "sem", 3), 0);
    rs_hold_t *a, *b;
    struct timespec p = past();
    cr_assert_eq(rs_sem_acquire(sm, 2, NULL, &a), 0);
    cr_expect_eq(rs_sem_acquire(sm, 2, &p, &b), EAGAIN, "one permit left");
    int v = -1;
    cr_expect_eq(rs_sem_getvalue(sm, &v), 0);
    cr_expect_eq(v, 1);
    cr_assert_eq(rs_sem_acquire(sm, 1, &p, &b), 0);
    cr_expect_gt(rs_hold_fence(a), 0);
    cr_expect_eq(rs_hold_release(a), 0, "both permits go back");
    cr_expect_eq(rs_sem_getvalue(sm, &v), 0);
    cr_expect_eq(v, 2);
    cr_expect_eq(rs_hold_release(b), 0);
    cr_expect_eq(rs_sem_acquire(sm, 0, NULL, &a), EINVAL);
    cr_expect_eq(rs_sem_destroy(sm), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(holds, lost_is_reported)
{
    ts_server_t s;
    tu_start_server(&s);
    tu_lost_t lc;
    memset(&lc, 0, sizeof lc);
    rs_client_t *c = tu_open_client(&s, 600, 0, &lc);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "gone"), 0);
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h), 0);
    cr_assert_eq(ts_cmd_int(&s, "DEL rs:{gone}:mutex"), 1);
    long long until = tu_mono_ms() + 3000;
    while (!rs_hold_lost(h) && tu_mono_ms() < until)
        tu_sleep_ms(20);
    cr_expect_eq(rs_hold_lost(h), 1, "the watchdog did not find the hold gone");
    cr_expect_eq(rs_hold_remaining(h), 0);
    cr_expect(tu_wait_atomic(&lc.n, 1, 2000), "on_lost was not called");
    cr_expect_str_eq(lc.kind, "mutex");
    cr_expect_eq(rs_hold_release(h), RS_ELOST);
    cr_expect_eq(rs_mutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(holds, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    rs_rwlock_t *rw;
    rs_sem_t *sm;
    cr_assert_eq(rs_mutex_init(&m, c, "bad"), 0);
    cr_assert_eq(rs_rwlock_init(&rw, c, "bad"), 0);
    cr_assert_eq(rs_sem_init(&sm, c, "bad", 1), 0);
    rs_hold_t *h = (rs_hold_t *)&s;
    cr_expect_eq(rs_mutex_acquire(NULL, NULL, &h), EINVAL);
    cr_expect_null(h);
    cr_expect_eq(rs_mutex_acquire(m, NULL, NULL), EINVAL);
    cr_expect_neq(strstr(rs_client_lasterror(c), "NULL"), NULL, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_rwlock_acquire_read(NULL, NULL, &h), EINVAL);
    cr_expect_eq(rs_rwlock_acquire_write(rw, NULL, NULL), EINVAL);
    cr_expect_eq(rs_sem_acquire(NULL, 1, NULL, &h), EINVAL);
    cr_expect_eq(rs_sem_acquire(sm, 1, NULL, NULL), EINVAL);
    struct timespec bad = {1, 2000000000L};
    h = (rs_hold_t *)&s;
    cr_expect_eq(rs_mutex_acquire(m, &bad, &h), EINVAL, "tv_nsec out of range");
    cr_expect_null(h);
    cr_expect_eq(rs_hold_release(NULL), EINVAL);
    cr_expect_eq(rs_hold_fence(NULL), 0);
    cr_expect_eq(rs_hold_remaining(NULL), 0);
    cr_expect_eq(rs_hold_lost(NULL), 0);
    rs_mutex_destroy(m);
    rs_rwlock_destroy(rw);
    rs_sem_destroy(sm);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(holds, destroy_busy_then_close)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "left"), 0);
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h), 0);
    cr_expect_eq(rs_mutex_destroy(m), EBUSY, "destroyed under a hold object");
    cr_expect_eq(rs_client_close(c), 0);
    char buf[64];
    cr_expect_null(ts_cmd_str(&s, buf, sizeof buf, "HGET rs:{left}:mutex o"),
                   "close did not release the hold object in Redis");
    cr_expect_eq(rs_hold_release(h), 0, "after close the release only frees");
    cr_expect_eq(rs_mutex_destroy(m), 0);
    ts_server_stop(&s);
}

Test(holds, fork_child)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "forked"), 0);
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0)
        _exit(rs_hold_release(h) == RS_EFORK ? 0 : 1);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's release was not RS_EFORK");
    cr_expect_eq(rs_mutex_trylock(m), EBUSY, "the child's release freed the parent's hold");
    cr_expect_eq(rs_hold_release(h), 0);
    cr_expect_eq(rs_mutex_destroy(m), 0);
    rs_client_close(c);
    ts_server_stop(&s);
}
