/* Test support: the small helpers every Criterion suite (tests/test_*.c) used to carry its
 * own copy of: clocks and sleeps, polling waits, pipes, clients, queue lengths, threads that
 * report "done", and forked children that are reaped with a timeout.
 *
 * Nothing here uses Criterion: test_util.c, like every .c of tests/support, is also linked
 * into programs without it (build/redisync-demo, build/redisync-bench, the stress and fault
 * programs). The helpers that assert (tu_start_server, tu_open_client, tu_spawn,
 * tu_assert_exit0, tu_thread_start, tu_thread_run) are static inline in test_assert.h, which
 * the suites include instead of this header. Build with -std=c11 -D_GNU_SOURCE -pthread.
 */
#ifndef REDISYNC_TESTS_SUPPORT_TEST_UTIL_H
#define REDISYNC_TESTS_SUPPORT_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "redis_server.h"
#include "redisync.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- clocks and waits ----------------------------------------------------------------- */

/* CLOCK_MONOTONIC in ms. */
long long tu_mono_ms(void);

/* Sleeps ms milliseconds (resumed after EINTR). */
void tu_sleep_ms(long ms);

/* CLOCK_REALTIME now + ms (negative: in the past), as the deadline of a timed call. */
struct timespec tu_abs_in(long ms);

/* N of the "deadline passed after N ms of waiting" in an ETIMEDOUT message; -1 if none. */
long tu_waited_ms(const char *text);

/* Polls (every 5 ms) until *v >= want; 1 if it got there within timeout_ms. */
int tu_wait_atomic(atomic_int *v, int want, long timeout_ms);

/* Reads exactly n bytes from fd within timeout_ms; 1 on success. */
int tu_read_full(int fd, void *buf, size_t n, long timeout_ms);

/* ---- Redis ------------------------------------------------------------------------------ */

/* ZCARD rs:{NAME}:KIND:q, the waiter queue of the primitive kind ("mutex", "rmutex",
 * "rwlock", "sem") called name; -1 on error. */
long long tu_zcard_q(const ts_server_t *s, const char *kind, const char *name);

/* Polls (every 10 ms) until tu_zcard_q is n; 1 if it got there within timeout_ms. */
int tu_wait_zcard(const ts_server_t *s, const char *kind, const char *name, long long n,
                  long timeout_ms);

/* ---- clients ---------------------------------------------------------------------------- */

/* An on_lost callback argument: counts the calls and remembers the latest kind and name
 * (written before n is incremented, so they are there once n is seen). fd > 0: also writes
 * one byte "L" per call to fd (children report through a pipe). Zero-initialise it. */
typedef struct tu_lost {
    atomic_int n;
    int fd;
    char kind[32];
    char name[64];
} tu_lost_t;

/* The on_lost callback for a tu_lost_t *arg. */
void tu_on_lost(const char *kind, const char *name, void *arg);

/* rs_config_init, then url, lease_ms, timeout_ms and (if lc) on_lost counting into lc. */
void tu_config(rs_config_t *cfg, const char *url, long lease_ms, long timeout_ms, tu_lost_t *lc);

/* Opens a client on s with this lease_ms and timeout_ms (0: the library's default) and, if
 * lc is set, tu_on_lost(lc) as on_lost. NULL on failure, without asserting (for children;
 * tests use tu_open_client). */
rs_client_t *tu_open_client_ex(const ts_server_t *s, long lease_ms, long timeout_ms,
                               tu_lost_t *lc);

/* ---- threads ---------------------------------------------------------------------------- */

/* Joins th if *done becomes non-zero within timeout_ms (the thread sets it last); 1 if
 * joined, 0 if not (the thread is then left running). */
int tu_thread_join(pthread_t th, atomic_int *done, long timeout_ms);

/* ---- forked workers' tally ------------------------------------------------------------- */

/* What the forked workers of a test (test_sentinel.c, test_redlock.c) count in shared
 * memory: per worker, the sections that ended well by phase, the failed calls by the test's
 * own code slot, and the words of the last failure. */
#define TU_WORKERS_MAX 8
#define TU_PHASES_MAX 3
#define TU_CODES_MAX 6
typedef struct tu_tally {
    atomic_int ok[TU_WORKERS_MAX][TU_PHASES_MAX];
    atomic_int err[TU_WORKERS_MAX][TU_CODES_MAX];
    char lasterr[TU_WORKERS_MAX][200];
} tu_tally_t;

/* Counts worker id's call: rc 0 is a success in phase; else a failure in slot, whose words
 * "WHAT RC: c's last error" are kept. */
void tu_tally_note(tu_tally_t *t, int id, int phase, int rc, int slot, const char *what,
                   rs_client_t *c);

/* Whether each of workers 0..n-1 has at least min successes in phase. */
int tu_tally_all_ok(tu_tally_t *t, int n, int phase, int min);

/* ---- forked children -------------------------------------------------------------------- */
/* Children are recorded (up to TU_MAX_KIDS at a time) so that a failed assertion, which
 * ends the test early, does not leave them behind: tests that fork use .fini = tu_kill_kids. */
#define TU_MAX_KIDS 16

/* Forks a child that runs fn(arg) and _exit()s with its return value; the child dies with
 * the test if the test process dies (PR_SET_PDEATHSIG). Returns the child's pid (recorded),
 * or -1 with errno if fork failed. Tests use tu_spawn, which asserts. */
pid_t tu_fork_kid(int (*fn)(void *), void *arg);

/* Waits for pid to end within timeout_ms: its wait status, -2 if waitpid failed, or -1 on
 * timeout (the child is then killed with SIGKILL and reaped). Forgets pid in every case. */
int tu_reap(pid_t pid, long timeout_ms);

/* Removes pid from the record (it was reaped elsewhere). */
void tu_kids_forget(pid_t pid);

/* SIGKILLs and reaps every recorded child. */
void tu_kill_kids(void);

#ifdef __cplusplus
}
#endif

#endif
