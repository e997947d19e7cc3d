/*
 * stress_async.c - the event-loop API under load (make check-tsan, check-valgrind).
 *
 * Two clients on NNAMES mutex names, one rwlock and one semaphore of SEM_SIZE permits. Per
 * client:
 *   - a loop thread: epoll on rs_client_fd, rs_client_dispatch when readable; it keeps up to
 *     INFLIGHT requests pending, each on one of the mutexes (rs_mutex_acquire_async), the
 *     rwlock (rs_rwlock_acquire_read_async or _write_async) or the semaphore
 *     (rs_sem_acquire_async of 1 or 2 permits), rotating through: no deadline, a deadline
 *     5 ms away (ETIMEDOUT or a grant), a deadline already past (EBUSY, for the semaphore
 *     EAGAIN, or a grant) and a request cancelled right after submission (racing its
 *     grant: done must say ECANCELED whatever Redis did). A granted hold is released either
 *     at once with rs_hold_release_async (its done counted too) or handed to the releaser
 *     thread;
 *   - a blocking thread on the same names: rs_mutex_lock/unlock, and rs_mutex_acquire,
 *     rs_rwlock_acquire_read/_write and rs_sem_acquire whose hold objects go to the
 *     releaser thread (rs_hold_release from another thread).
 * Before their first acquisition the loop threads submit LATCH_WAITS rs_latch_wait_async on
 * a latch armed with count 1; main opens it once they are all pending.
 * At the end each client gets requests that cannot complete (behind a hold main keeps, on a
 * latch never opened, plus a release in flight) and is closed with them pending: their done
 * calls run inside rs_client_close.
 *
 * Checks: no two holders of one name inside at once (atomic "inside" flag, a counter read
 * then written relaxed, so a broken exclusion loses increments); a writer of the rwlock
 * alone inside (a writer flag and a reader count, each side checking the other's after
 * setting its own; the writers' counter as the mutexes'); never more than SEM_SIZE permits
 * held of the semaphore (a count of the permits inside); every done runs exactly
 * once (per-request counters) with a code the contract allows; a latch wait ends with 0 and
 * only after the count-down; requests pending at close end with ECANCELED inside the close;
 * no hold and no waiter is left in Redis. If a hold is lost (the machine stalled past the
 * lease), the exclusion checks become a warning, as in stress_mutex.
 *
 * STRESS_CLUSTER=1 (make check-tsan's and check-valgrind's Cluster pass) runs all of it on
 * three masters over redis-cluster://: the names' slots spread the requests over the
 * client's per-master pipelines and sharded wake-up channels; the checks are the same, the
 * connection check of st_finish on every master.
 */
#include "stress_async.h"

static void check_one(rs_client_t *c, const char *kind, const char *name, const char *when)
{
    rs_info_t info;
    int rc = rs_inspect(c, kind, name, &info);
    if (rc)
        FAILF("%s: rs_inspect(%s %s): %d %s", when, kind, name, rc, rs_client_lasterror(c));
    else if (info.nholders || info.waiters)
        FAILF("%s: %s %s has %u holder(s), %u waiter(s)", when, kind, name, info.nholders,
              info.waiters);
}

static void check_clean(rs_client_t *c, const char *when)
{
    check_one(c, "rwlock", "stress-async-rw", when);
    check_one(c, "sem", "stress-async-sem", when);
    for (int n = 0; n < NNAMES; n++) {
        char name[32];
        snprintf(name, sizeof name, "stress-async-%d", n);
        check_one(c, "mutex", name, when);
    }
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server_cluster(&srv, "stress_async");
    sa_conf.all = 1;
    sa_conf.slow = 1;
    sa_conf.seed = 3;
    sa_conf.give_up_s = 120;
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    rs_latch_t *arm = NULL;
    for (int i = 0; i < 2; i++) {
        client_t *cl = &g_cl[i];
        sa_client_init(cl, i, st_open(&srv, prefix), "stress-async-%d", st_scaled(2000),
                       st_scaled(300));
        if (rs_rwlock_init(&cl->rw, cl->c, "stress-async-rw") != 0 ||
            rs_sem_init(&cl->sem, cl->c, "stress-async-sem", SEM_SIZE) != 0) {
            fprintf(stderr, "stress_async: rwlock/sem init: %s\n", rs_client_lasterror(cl->c));
            return 2;
        }
        if ((i == 0 && rs_latch_init(&arm, cl->c, "stress-async-latch", 1) != 0) ||
            rs_latch_init(&cl->l, cl->c, "stress-async-latch", 0) != 0 ||
            rs_latch_init(&cl->l_shut, cl->c, "stress-async-shut", 0) != 0) {
            fprintf(stderr, "stress_async: rs_latch_init: %s\n", rs_client_lasterror(cl->c));
            return 2;
        }
    }
    sa_start();
    /* open the latch while the waits are pending */
    while (!atomic_load(&g_cl[0].latch_submitted) || !atomic_load(&g_cl[1].latch_submitted))
        st_sleep_ms(5);
    st_sleep_ms(100);
    atomic_store(&g_latch_open, 1);
    EXPECT_RC(rs_latch_count_down(arm), 0);
    sa_join();

    long sections;
    int lost = sa_check_run(&sections);
    if (atomic_load(&g_rw_counter) != atomic_load(&g_rw_writes))
        atomic_fetch_add(&g_rw_bad, 1);
    int rwbad = atomic_load(&g_rw_bad), sembad = atomic_load(&g_sem_bad);
    if ((rwbad || sembad) && lost)
        fprintf(stderr, "stress_async: WARNING: rwlock %d / semaphore %d overlap(s) after %d "
                "lost hold(s): exclusion not checked\n", rwbad, sembad, lost);
    else if (rwbad || sembad)
        FAILF("rwlock: %d overlap(s) or lost increment(s) (counter %ld for %ld writes); "
              "semaphore: %d time(s) above %d permits", rwbad, atomic_load(&g_rw_counter),
              atomic_load(&g_rw_writes), sembad, SEM_SIZE);
    for (int t = 0; t < T_NTYPES; t++)
        if (atomic_load(&g_type_grants[t]) == 0)
            FAILF("no async request of type %d was granted", t);
    check_clean(g_cl[0].c, "after the run");
    if (st_verbose() || lost)
        fprintf(stderr, "stress_async: %ld mutex sections, %ld async grants (mutex %ld, read "
                "%ld, write %ld, sem %ld), %ld ETIMEDOUT, %ld EBUSY/EAGAIN, %ld ECANCELED, %d "
                "lost; rwlock %ld reads %ld writes, semaphore %ld sections\n", sections,
                atomic_load(&g_granted), atomic_load(&g_type_grants[T_MUTEX]),
                atomic_load(&g_type_grants[T_READ]), atomic_load(&g_type_grants[T_WRITE]),
                atomic_load(&g_type_grants[T_SEM]), atomic_load(&g_timedout),
                atomic_load(&g_busy), atomic_load(&g_canceled), lost,
                atomic_load(&g_rw_reads), atomic_load(&g_rw_writes), atomic_load(&g_sem_sections));

    /* close with requests pending: main holds name 0, the rwlock (writing) and every permit
     * through hold objects of client 0 */
    rs_hold_t *kept[3] = {NULL, NULL, NULL};
    EXPECT_RC(rs_mutex_acquire(g_cl[0].m[0], NULL, &kept[0]), 0);
    EXPECT_RC(rs_rwlock_acquire_write(g_cl[0].rw, NULL, &kept[1]), 0);
    EXPECT_RC(rs_sem_acquire(g_cl[0].sem, SEM_SIZE, NULL, &kept[2]), 0);
    sa_close_both(kept, 3);
    rs_client_t *check = st_open(&srv, prefix);
    check_clean(check, "after the closes");
    for (int i = 0; st_cluster_on && i < ST_CLUSTER_NODES; i++) /* the names spread over all */
        if (ts_info_ll(&st_nodes[i], "commandstats", "cmdstat_evalsha", "calls") <= 0)
            FAILF("master %d ran no script: the names did not spread over the Cluster", i);
    EXPECT_RC(rs_client_close(check), 0);
    EXPECT_RC(rs_latch_destroy(arm), 0);
    for (int i = 0; i < 2; i++)
        sa_client_free(&g_cl[i]);
    return st_finish(&srv, t0);
}
