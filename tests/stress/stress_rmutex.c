/*
 * stress_rmutex.c - recursive mutex re-entry from several threads (make check-tsan,
 * check-valgrind).
 *
 * 6 threads x 100 iterations through ONE shared rs_rmutex_t (short leases: the watchdog
 * renews concurrently). Each section enters 1 to 3 times, rotating lock, trylock (the holder's
 * trylock succeeds) and timedlock for the re-entries, then leaves as many times. An observer
 * calls fence/remaining/setlease and rs_inspect meanwhile.
 *
 * Checks: exclusion (inside flag, lost increments); the fencing token is the same across the
 * re-entries of one section and rises from section to section; rs_inspect by the holder
 * reports the hold count of Redis equal to its depth; one unlock too many is EPERM; a hold
 * found lost (remaining 0, or a re-entry saying RS_ELOST) ends with an unlock saying RS_ELOST.
 * As in stress_mutex, exclusion is only a warning after a lost hold.
 */
#include "stress.h"

#define NTHREADS 6

static const char *g_name = "stress-rmutex";
static rs_client_t *g_c;
static rs_rmutex_t *g_m;
static atomic_int g_inside, g_overlaps, g_fence_errors, g_elost, g_running;
static atomic_long g_counter;
static atomic_ullong g_last_fence;

static int enter(rs_rmutex_t *m, int how, unsigned *seed)
{
    for (;;) {
        int rc;
        if (how == 0) {
            rc = rs_rmutex_lock(m);
        } else if (how == 1) {
            rc = rs_rmutex_trylock(m);
            if (rc == EBUSY) {
                st_sleep_ms(1 + (long)(st_rand(seed) % 3));
                continue;
            }
        } else {
            struct timespec dl = st_abs_in(5);
            rc = rs_rmutex_timedlock(m, &dl);
            if (rc == ETIMEDOUT)
                continue;
        }
        return rc;
    }
}

static void *worker_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    unsigned seed = 104729u * (unsigned)id + 3;
    int iters = st_scaled(100);
    EXPECT_RC(rs_rmutex_unlock(g_m), EPERM);
    for (int i = 0; i < iters; i++) {
        int depth = 1 + (id + i) % 3, rc = 0, held = 0, lost = 0;
        uint64_t f0 = 0;
        for (int d = 0; d < depth; d++) {
            if ((rc = enter(g_m, (id + i + d) % 3, &seed)) == RS_ELOST && held > 0) {
                lost = 1; /* a re-entry found the hold lost: the unlock below ends it */
                rc = 0;
                break;
            }
            if (rc) {
                FAILF("thread %d: enter %d of %d: %d %s (%s)", id, d + 1, depth, rc,
                      rs_strerror(rc), rs_client_lasterror(g_c));
                break;
            }
            held++;
            uint64_t f = rs_rmutex_fence(g_m);
            if (d == 0) {
                if (atomic_exchange(&g_inside, 1))
                    atomic_fetch_add(&g_overlaps, 1);
                f0 = f;
                if (f == 0 || f <= atomic_load(&g_last_fence))
                    atomic_fetch_add(&g_fence_errors, 1);
                atomic_store(&g_last_fence, f);
            } else if (f != f0) {
                FAILF("thread %d: fence changed on re-entry: %llu then %llu", id,
                      (unsigned long long)f0, (unsigned long long)f);
            }
        }
        if (rc == 0 && rs_rmutex_remaining(g_m) <= 0)
            lost = 1; /* the lease ran out: the first unlock must say RS_ELOST */
        if (rc == 0 && !lost) {
            if (i % 10 == 0) {
                rs_info_t info;
                rc = rs_inspect(g_c, "rmutex", g_name, &info);
                if (rc)
                    FAILF("thread %d: rs_inspect: %d %s", id, rc, rs_client_lasterror(g_c));
                else if (info.count != depth && rs_rmutex_remaining(g_m) > 0)
                    FAILF("thread %d: Redis counts %ld re-entries, the thread %d", id,
                          info.count, depth);
                rc = 0;
            }
            long v = atomic_load_explicit(&g_counter, memory_order_relaxed);
            if (i % 20 == id)
                st_sleep_ms(120); /* past a renewal */
            atomic_store_explicit(&g_counter, v + 1, memory_order_relaxed);
        }
        if (held > 0)
            atomic_store(&g_inside, 0);
        for (int d = 0; d < held; d++) {
            int urc = rs_rmutex_unlock(g_m);
            if (urc == RS_ELOST) {
                atomic_fetch_add(&g_elost, 1);
                break; /* a lost hold ends every re-entry */
            }
            if (lost && d == 0)
                FAILF("thread %d: the hold was lost, but unlock returned %d", id, urc);
            if (urc)
                FAILF("thread %d: unlock %d of %d: %d %s", id, d + 1, held, urc,
                      rs_client_lasterror(g_c));
        }
        if (i % 9 == 0)
            EXPECT_RC(rs_rmutex_unlock(g_m), EPERM);
        if (rc)
            break;
    }
    return NULL;
}

static void *observer_main(void *arg)
{
    (void)arg;
    while (atomic_load(&g_running)) {
        if (rs_rmutex_fence(g_m) != 0 || rs_rmutex_remaining(g_m) != 0)
            FAILF("observer: fence/remaining of a thread that holds nothing is not 0");
        EXPECT_RC(rs_rmutex_setlease(g_m, st_lease_ms()), 0);
        st_sleep_ms(3);
    }
    return NULL;
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server(&srv, "stress_rmutex");
    char prefix[64];
    g_c = st_open(&srv, ts_unique_prefix(prefix, sizeof prefix));
    if (rs_rmutex_init(&g_m, g_c, g_name) != 0) {
        fprintf(stderr, "stress_rmutex: rs_rmutex_init: %s\n", rs_client_lasterror(g_c));
        return 2;
    }
    pthread_t th[NTHREADS], obs;
    atomic_store(&g_running, 1);
    st_spawn(&obs, observer_main, NULL);
    for (int i = 0; i < NTHREADS; i++)
        st_spawn(&th[i], worker_main, (void *)(intptr_t)i);
    st_chaos_start(&srv);
    st_join_all(th, NTHREADS);
    st_chaos_stop();
    atomic_store(&g_running, 0);
    pthread_join(obs, NULL);

    long want = (long)NTHREADS * st_scaled(100), got = atomic_load(&g_counter);
    int lost = atomic_load(&st_lost) + atomic_load(&g_elost);
    int bad = atomic_load(&g_overlaps) + atomic_load(&g_fence_errors) + (got != want);
    if (bad && lost)
        fprintf(stderr, "stress_rmutex: WARNING: %d overlap(s), %d fence error(s), %ld/%ld "
                "sections after %d lost hold(s): exclusion not checked\n",
                atomic_load(&g_overlaps), atomic_load(&g_fence_errors), got, want, lost);
    else if (bad)
        FAILF("%d overlap(s), %d fence error(s), %ld/%ld sections counted",
              atomic_load(&g_overlaps), atomic_load(&g_fence_errors), got, want);
    EXPECT_RC(rs_rmutex_destroy(g_m), 0);
    EXPECT_RC(rs_client_close(g_c), 0);
    return st_finish(&srv, t0);
}
