/* Test support for the Criterion suites: test_util.h plus the helpers that assert.
 *
 * Header-only (static inline) on purpose: every .c of tests/support is also linked into
 * programs without Criterion (the demo, the benchmark, the stress and fault programs), so
 * nothing that calls Criterion may live in one. Include this from tests/test_*.c only, and
 * call these helpers from the test's main thread (Criterion asserts there only).
 */
#ifndef REDISYNC_TESTS_SUPPORT_TEST_ASSERT_H
#define REDISYNC_TESTS_SUPPORT_TEST_ASSERT_H

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>

#include "test_util.h"

/* Starts a throwaway redis-server (ts_server_start with no extra args), or fails the test. */
static inline void tu_start_server(ts_server_t *s)
{
    cr_assert_eq(ts_server_start(s, NULL), 0, "cannot start redis-server");
}

/* tu_open_client_ex, failing the test when the client cannot be opened. */
static inline rs_client_t *tu_open_client(const ts_server_t *s, long lease_ms, long timeout_ms,
                                          tu_lost_t *lc)
{
    rs_client_t *c = tu_open_client_ex(s, lease_ms, timeout_ms, lc);
    cr_assert_not_null(c, "rs_client_open: %s", rs_client_lasterror(NULL));
    return c;
}

/* tu_fork_kid, failing the test when fork fails. */
static inline pid_t tu_spawn(int (*fn)(void *), void *arg)
{
    pid_t pid = tu_fork_kid(fn, arg);
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    return pid;
}

/* Fails the test unless st (from tu_reap) says that pid exited with status 0. */
static inline void tu_assert_exit0(pid_t pid, int st, const char *what)
{
    cr_assert_neq(st, -1, "%s (pid %d) did not finish in time", what, (int)pid);
    cr_assert(st >= 0 && WIFEXITED(st), "%s (pid %d) did not exit normally (status 0x%x)", what,
              (int)pid, st);
    cr_assert_eq(WEXITSTATUS(st), 0, "%s (pid %d) failed with exit code %d", what, (int)pid,
                 WEXITSTATUS(st));
}

/* Starts fn(arg) in a new thread *th, or fails the test. */
static inline void tu_thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
    cr_assert_eq(pthread_create(th, NULL, fn, arg), 0);
}

/* Runs fn(arg) in a fresh thread (another owner than the test's thread) and joins it. */
static inline void tu_thread_run(void *(*fn)(void *), void *arg)
{
    pthread_t th;
    tu_thread_start(&th, fn, arg);
    pthread_join(th, NULL);
}

/* Reaps workers pids[0..n-1] by until (tu_mono_ms); the test fails for one still running
 * then (it is killed) or one that did not exit 0, naming its last failure. */
static inline void tu_tally_reap(const tu_tally_t *t, const pid_t *pids, int n, long long until)
{
    for (int i = 0; i < n; i++) {
        long long left = until - tu_mono_ms();
        int st = tu_reap(pids[i], left > 0 ? (long)left : 0);
        cr_log_info("worker %d: last error: %s", i, t->lasterr[i]);
        if (st == -1)
            cr_expect_fail("worker %d did not stop (a call that never returned?); last error: %s",
                           i, t->lasterr[i]);
        else
            cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "worker %d: status %d (%s)", i, st, t->lasterr[i]);
    }
}

#endif
