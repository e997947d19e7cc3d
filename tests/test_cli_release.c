/*
 * test_cli_release.c - `redisync release --force` and the kinds that hold nothing (issue 14).
 *
 *   kinds_without_holds_refused  with a waiter queued on a cond (the library, in this
 *                                process), `release --force -k cond` exits 2 saying a
 *                                condition variable has no holds and wakes nobody (the
 *                                waiter is still queued and still waiting: before, it ran a
 *                                broadcast and printed "nothing was held"); -k latch and -k
 *                                barrier exit 2 too; -k once, which has a run hold, is
 *                                accepted ("nothing was held")
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>

#include "test_cli.h"

TestSuite(cli_release, .timeout = 60);

typedef struct cwait {
    rs_mutex_t *m;
    rs_cond_t *cv;
    int rc, unlock_rc;
    atomic_int done;
} cwait_t;

static void *cwait_main(void *arg)
{
    cwait_t *w = arg;
    w->rc = rs_mutex_lock(w->m);
    if (w->rc == 0) {
        struct timespec dl = tu_abs_in(30000);
        w->rc = rs_cond_timedwait(w->cv, w->m, &dl);
        w->unlock_rc = rs_mutex_unlock(w->m);
    }
    atomic_store(&w->done, 1);
    return NULL;
}

Test(cli_release, kinds_without_holds_refused, .init = setup, .fini = teardown)
{
    start_server();
    rs_client_t *c = tu_open_client(&T.srv, 2000, 0, NULL);
    cwait_t w;
    memset(&w, 0, sizeof w);
    cr_assert_eq(rs_mutex_init(&w.m, c, "rm"), 0);
    cr_assert_eq(rs_cond_init(&w.cv, c, "rc"), 0);
    pthread_t th;
    pthread_create(&th, NULL, cwait_main, &w);
    cr_assert(wait_cmd_int(1, 10000, "ZCARD %s", "rs:{rc}:cond"), "the waiter never queued");

    cr_expect_eq(run("c", "release", "--force", "-k", "cond", "rc", NULL), 2, "stdout: %s",
                 out_of("c"));
    cr_expect(strstr(err_of("c"), "condition variable has no holds") != NULL, "stderr: %s",
              err_of("c"));
    /* nobody was woken: the waiter is still queued and still waiting */
    tu_sleep_ms(200);
    cr_expect_eq(ts_cmd_int(&T.srv, "ZCARD %s", "rs:{rc}:cond"), 1);
    cr_expect_eq(atomic_load(&w.done), 0, "the waiter was woken");

    cr_expect_eq(run("l", "release", "--force", "-k", "latch", "rl", NULL), 2);
    cr_expect(strstr(err_of("l"), "latch has no holds") != NULL, "stderr: %s", err_of("l"));
    cr_expect_eq(run("b", "release", "--force", "-k", "barrier", "rb", NULL), 2);
    cr_expect(strstr(err_of("b"), "barrier has no holds") != NULL, "stderr: %s", err_of("b"));
    cr_expect_eq(run("o", "release", "--force", "-k", "once", "ro", NULL), 0, "stderr: %s",
                 err_of("o"));
    cr_expect(strstr(out_of("o"), "nothing was held") != NULL, "stdout: %s", out_of("o"));
    /* the library's own force on a barrier: EINVAL, not the script's unknown op */
    cr_expect_eq(rs_force_release(c, "barrier", "rb"), EINVAL);

    cr_expect_eq(rs_cond_signal(w.cv), 0);
    pthread_join(th, NULL);
    cr_expect_eq(w.rc, 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(w.unlock_rc, 0);
    cr_expect_eq(rs_cond_destroy(w.cv), 0);
    cr_expect_eq(rs_mutex_destroy(w.m), 0);
    rs_client_close(c);
}
