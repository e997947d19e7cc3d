/*
 * test_once.c - rs_once_t, the fleet-wide pthread_once (issue 14), against a real
 * redis-server.
 *
 *   exactly_one_runs        six processes call run at once: fn runs once, never two at a
 *                           time, everyone returns 0
 *   failure_handed_on       fn fails in the first runner (its value is returned to it only);
 *                           a waiter runs fn next and succeeds; a later run does not call fn
 *   runner_killed_replaced  a runner killed inside fn (kill -9) is replaced once its lease
 *                           runs out, with a higher fencing token
 *   state_and_reset         state says done after a success; reset forgets it; the done
 *                           mark has a TTL of about 30 days
 *   timedrun_times_out      ETIMEDOUT while another runs, and nothing stays queued
 *   bad_input               NULLs, destroy while running (EBUSY), a foreign key (RS_ESERVER)
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"

TestSuite(once, .timeout = 60);

typedef struct shared {
    atomic_int runs, inside, overlap;
    _Atomic unsigned long long fence;
} shared_t;

static shared_t *shared_new(void)
{
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    cr_assert_neq(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    return sh;
}

/* fn: counts the run, checks nobody else is inside, takes 150 ms */
static int migrate(void *arg, uint64_t fence)
{
    shared_t *sh = arg;
    if (atomic_fetch_add(&sh->inside, 1) != 0)
        atomic_fetch_add(&sh->overlap, 1);
    atomic_fetch_add(&sh->runs, 1);
    atomic_store(&sh->fence, fence);
    tu_sleep_ms(150);
    atomic_fetch_sub(&sh->inside, 1);
    return 0;
}

static int fail7(void *arg, uint64_t fence)
{
    (void)fence;
    atomic_fetch_add(&((shared_t *)arg)->runs, 1);
    tu_sleep_ms(100);
    return 7;
}

static int hang(void *arg, uint64_t fence)
{
    shared_t *sh = arg;
    atomic_store(&sh->fence, fence);
    atomic_fetch_add(&sh->runs, 1);
    for (;;)
        pause();
    return 0;
}

static rs_once_t *once_of(rs_client_t *c, const char *name)
{
    rs_once_t *o = NULL;
    cr_assert_eq(rs_once_init(&o, c, name), 0, "%s", rs_client_lasterror(c));
    return o;
}

Test(once, exactly_one_runs)
{
    ts_server_t s;
    tu_start_server(&s);
    shared_t *sh = shared_new();
    pid_t pids[6];
    for (int i = 0; i < 6; i++) {
        pids[i] = fork();
        cr_assert_geq(pids[i], 0);
        if (pids[i] == 0) {
            rs_client_t *c = tu_open_client_ex(&s, 2000, 0, NULL);
            rs_once_t *o = NULL;
            int rc = c ? rs_once_init(&o, c, "migrate") : -1;
            if (rc == 0)
                rc = rs_once_run(o, migrate, sh);
            rs_once_destroy(o);
            rs_client_close(c);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < 6; i++) {
        int st;
        cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d: run did not return 0", i);
    }
    cr_expect_eq(atomic_load(&sh->runs), 1, "fn ran %d times", atomic_load(&sh->runs));
    cr_expect_eq(atomic_load(&sh->overlap), 0);
    munmap(sh, sizeof *sh);
    ts_server_stop(&s);
}

typedef struct runner {
    rs_once_t *o;
    int (*fn)(void *, uint64_t);
    shared_t *sh;
    int rc;
    atomic_int done;
} runner_t;

static void *run_thread(void *arg)
{
    runner_t *r = arg;
    r->rc = rs_once_run(r->o, r->fn, r->sh);
    atomic_store(&r->done, 1);
    return NULL;
}

Test(once, failure_handed_on)
{
    ts_server_t s;
    tu_start_server(&s);
    shared_t *fails = shared_new(), *ok = shared_new();
    rs_client_t *c1 = tu_open_client(&s, 2000, 0, NULL), *c2 = tu_open_client(&s, 2000, 0, NULL);
    runner_t a = {.o = once_of(c1, "job"), .fn = fail7, .sh = fails};
    runner_t b = {.o = once_of(c2, "job"), .fn = migrate, .sh = ok};
    pthread_t ta, tb;
    tu_thread_start(&ta, run_thread, &a);
    tu_sleep_ms(40); /* a runs first */
    tu_thread_start(&tb, run_thread, &b);
    cr_assert(tu_thread_join(ta, &a.done, 10000));
    cr_assert(tu_thread_join(tb, &b.done, 10000));
    cr_expect_eq(a.rc, 7, "the failing runner gets fn's value: %d", a.rc);
    cr_expect_eq(b.rc, 0, "the waiter ran fn next: %d", b.rc);
    cr_expect_eq(atomic_load(&fails->runs), 1);
    cr_expect_eq(atomic_load(&ok->runs), 1);
    /* done: a later run does not call fn */
    shared_t *later = shared_new();
    cr_expect_eq(rs_once_run(a.o, migrate, later), 0);
    cr_expect_eq(atomic_load(&later->runs), 0);
    rs_once_destroy(a.o);
    rs_once_destroy(b.o);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
}

Test(once, runner_killed_replaced)
{
    ts_server_t s;
    tu_start_server(&s);
    shared_t *sh = shared_new();
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        rs_client_t *c = tu_open_client_ex(&s, 600, 0, NULL);
        rs_once_t *o = NULL;
        if (c && rs_once_init(&o, c, "boot") == 0)
            rs_once_run(o, hang, sh);
        _exit(1);
    }
    long long until = tu_mono_ms() + 10000;
    while (atomic_load(&sh->runs) == 0 && tu_mono_ms() < until)
        tu_sleep_ms(10);
    cr_assert_eq(atomic_load(&sh->runs), 1, "the child never ran fn");
    unsigned long long f1 = atomic_load(&sh->fence);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    rs_client_t *c = tu_open_client(&s, 600, 0, NULL);
    rs_once_t *o = once_of(c, "boot");
    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_once_run(o, migrate, sh), 0);
    cr_expect_eq(atomic_load(&sh->runs), 2, "fn was not run again after the runner died");
    cr_expect_gt(atomic_load(&sh->fence), f1, "the new runner's token is not higher");
    cr_expect_lt(tu_mono_ms() - t0, 10000);
    rs_once_destroy(o);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(once, state_and_reset)
{
    ts_server_t s;
    tu_start_server(&s);
    shared_t *sh = shared_new();
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_once_t *o = once_of(c, "schema");
    int done = -1;
    cr_expect_eq(rs_once_state(o, &done), 0);
    cr_expect_eq(done, 0);
    cr_expect_eq(rs_once_run(o, migrate, sh), 0);
    cr_expect_eq(rs_once_state(o, &done), 0);
    cr_expect_eq(done, 1);
    long long ttl = ts_cmd_int(&s, "PTTL rs:{schema}:once");
    cr_expect(ttl > 29LL * 86400000 && ttl <= 30LL * 86400000, "done mark TTL %lld", ttl);
    rs_info_t in;
    cr_expect_eq(rs_inspect(c, "once", "schema", &in), 0);
    cr_expect_eq(in.count, 1, "inspect: done");
    cr_expect_eq(rs_once_reset(o), 0);
    cr_expect_eq(rs_once_state(o, &done), 0);
    cr_expect_eq(done, 0);
    cr_expect_eq(rs_once_run(o, migrate, sh), 0);
    cr_expect_eq(atomic_load(&sh->runs), 2, "after reset fn runs again");
    rs_once_destroy(o);
    rs_client_close(c);
    ts_server_stop(&s);
}

static int slow(void *arg, uint64_t fence)
{
    (void)fence;
    atomic_fetch_add(&((shared_t *)arg)->runs, 1);
    tu_sleep_ms(1500);
    return 0;
}

Test(once, timedrun_times_out)
{
    ts_server_t s;
    tu_start_server(&s);
    shared_t *sh = shared_new();
    rs_client_t *c1 = tu_open_client(&s, 3000, 0, NULL), *c2 = tu_open_client(&s, 3000, 0, NULL);
    runner_t a = {.o = once_of(c1, "t"), .fn = slow, .sh = sh};
    pthread_t ta;
    tu_thread_start(&ta, run_thread, &a);
    while (atomic_load(&sh->runs) == 0)
        tu_sleep_ms(5);
    rs_once_t *o2 = once_of(c2, "t");
    struct timespec dl = tu_abs_in(200);
    cr_expect_eq(rs_once_timedrun(o2, migrate, sh, &dl), ETIMEDOUT);
    cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{t}:once:q"), 0, "the timed-out waiter left an entry");
    cr_assert(tu_thread_join(ta, &a.done, 10000));
    cr_expect_eq(a.rc, 0);
    dl = tu_abs_in(2000);
    cr_expect_eq(rs_once_timedrun(o2, migrate, sh, &dl), 0, "done now");
    cr_expect_eq(atomic_load(&sh->runs), 1);
    rs_once_destroy(a.o);
    rs_once_destroy(o2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
}

Test(once, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    shared_t *sh = shared_new();
    rs_client_t *c = tu_open_client(&s, 3000, 0, NULL);
    rs_once_t *o = NULL;
    cr_expect_eq(rs_once_init(NULL, c, "x"), EINVAL);
    cr_expect_eq(rs_once_init(&o, c, ""), EINVAL);
    cr_expect_null(o);
    o = once_of(c, "x");
    cr_expect_eq(rs_once_run(NULL, migrate, sh), EINVAL);
    cr_expect_eq(rs_once_run(o, NULL, sh), EINVAL);
    cr_expect(strstr(rs_client_lasterror(c), "fn") != NULL, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_once_timedrun(o, migrate, sh, NULL), EINVAL);
    cr_expect_eq(rs_once_state(o, NULL), EINVAL);
    cr_expect_eq(rs_once_destroy(NULL), 0);
    /* destroy while a thread runs through the handle */
    runner_t a = {.o = o, .fn = slow, .sh = sh};
    pthread_t ta;
    tu_thread_start(&ta, run_thread, &a);
    while (atomic_load(&sh->runs) == 0)
        tu_sleep_ms(5);
    cr_expect_eq(rs_once_destroy(o), EBUSY);
    cr_assert(tu_thread_join(ta, &a.done, 10000));
    cr_expect_eq(rs_once_destroy(o), 0);
    /* a foreign key of another type */
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{foreign}:once x"), 1);
    rs_once_t *f = once_of(c, "foreign");
    int done;
    cr_expect_eq(rs_once_state(f, &done), RS_ESERVER);
    cr_expect_eq(rs_once_run(f, migrate, sh), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "%s",
              rs_client_lasterror(c));
    rs_once_destroy(f);
    rs_client_close(c);
    ts_server_stop(&s);
}
