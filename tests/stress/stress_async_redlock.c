/*
 * stress_async_redlock.c - the event-loop API under redlock:// under load (make check-tsan,
 * check-valgrind): three redis-servers, two clients on NNAMES mutex names. Per client:
 *   - a loop thread: epoll on rs_client_fd, rs_client_dispatch when readable; it keeps up to
 *     INFLIGHT rs_mutex_acquire_async requests pending, rotating through no deadline, a
 *     deadline 5 ms away (ETIMEDOUT or a grant), one already past (EBUSY or a grant) and one
 *     cancelled right after submission (racing its grant: done must say ECANCELED whatever
 *     the masters did); a granted hold is released with rs_hold_release_async (its done
 *     counted too) or handed to the releaser thread (rs_hold_release);
 *   - a blocking thread on the same names: rs_mutex_lock/unlock and rs_mutex_acquire (its
 *     hold released by the releaser thread).
 * At the end each client gets requests that cannot complete (behind a hold main keeps, plus
 * a release in flight) and is closed with them pending: their done calls run inside
 * rs_client_close.
 *
 * Checks: no two holders of one name inside at once (an atomic "inside" flag, a counter read
 * then written relaxed, so a broken exclusion loses increments); every done runs exactly once
 * with a code the contract allows; requests pending at close end with ECANCELED inside the
 * close; no hold and no waiter left on any master; no library connection left on any master.
 * If a hold is lost (the machine stalled past the lease) the exclusion checks become a
 * warning, as in stress_mutex.
 *
 * The threads, the done callbacks and the checks are stress_async.h's, as stress_async's
 * (sa_conf: the mutexes only, no slow sections); this file has the masters, the clients'
 * set-up and the check that every master is clean.
 */
#include "stress_async.h"

#define NM 3

/* No holder and no waiter of any name on any master (within a few seconds: a queue entry of
 * a request that ended while its master was slow expires with its queue lease). */
static void check_clean(ts_server_t *s, const char *prefix, const char *when)
{
    for (int n = 0; n < NNAMES; n++)
        for (int i = 0; i < NM; i++) {
            long long held = -1, queued = -1;
            for (long long until = st_mono_ms() + 3 * st_lease_ms() + 2000;
                 st_mono_ms() < until; st_sleep_ms(20)) {
                held = ts_cmd_int(&s[i], "HEXISTS %s:{stress-rl-%d}:mutex o", prefix, n);
                queued = ts_cmd_int(&s[i], "ZCARD %s:{stress-rl-%d}:mutex:q", prefix, n);
                if (held == 0 && queued == 0)
                    break;
            }
            if (held != 0 || queued != 0)
                FAILF("%s: name %d on master %d: held %lld, %lld waiter(s)", when, n, i, held,
                      queued);
        }
}

int main(void)
{
    long long t0 = st_mono_ms();
    sa_conf.seed = 7;
    sa_conf.give_up_s = 240;
    ts_server_t srv[NM];
    char url[256], prefix[64];
    st_start_redlock(srv, NM, url, sizeof url, prefix, sizeof prefix, "stress_async_redlock");
    for (int i = 0; i < 2; i++)
        sa_client_init(&g_cl[i], i, st_open_url(url, prefix), "stress-rl-%d", st_scaled(1000),
                       st_scaled(150));
    sa_start();
    sa_join();

    long sections;
    int lost = sa_check_run(&sections);
    check_clean(srv, prefix, "after the run");
    if (st_verbose() || lost)
        fprintf(stderr, "stress_async_redlock: %ld sections, %ld async grants, %ld ETIMEDOUT, "
                "%ld EBUSY, %ld ECANCELED, %d lost\n", sections, atomic_load(&g_granted),
                atomic_load(&g_timedout), atomic_load(&g_busy), atomic_load(&g_canceled), lost);

    /* close with requests pending: main holds name 0 through a hold object of client 0 */
    rs_hold_t *keep = NULL;
    EXPECT_RC(rs_mutex_acquire(g_cl[0].m[0], NULL, &keep), 0);
    sa_close_both(&keep, 1);
    check_clean(srv, prefix, "after the closes");
    for (int i = 0; i < 2; i++)
        sa_client_free(&g_cl[i]);
    st_stop_redlock(srv, NM);
    return st_summary(t0);
}
