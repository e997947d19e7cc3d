/*
 * stress_mutex.c - many threads on one distributed mutex (make check-tsan, check-valgrind).
 *
 * Phase 1: 8 threads x 200 lock/increment/unlock cycles through ONE shared rs_mutex_t.
 * Phase 2: the same through one handle per thread (one client, one name).
 * Phase 3: half the iterations, the threads split over two clients (wake-ups cross clients).
 * Leases are short (STRESS_LEASE_MS, 300 ms) so the watchdog renews while the workers run:
 * one section in 25 is held for 120 ms, past a renewal, while the others queue. The lock
 * call rotates through lock, trylock (retried on EBUSY) and timedlock with a 5 ms deadline
 * (retried on ETIMEDOUT, which exercises leaving the queue). An observer thread calls
 * rs_mutex_fence, rs_mutex_remaining, rs_mutex_setlease and rs_inspect on the shared handle
 * the whole time.
 *
 * Checks: no two threads inside at once; the counter equals the sections run; fencing tokens
 * rise strictly from section to section; a holder sees fence > 0 and remaining > 0 (or, if its
 * lease ran out, its unlock says RS_ELOST), the observer (holding nothing) sees 0 and 0; a holder's trylock is EBUSY and its lock EDEADLK; an
 * unlock without a hold is EPERM. If a hold is lost (the machine stalled past the lease:
 * on_lost or RS_ELOST), exclusion may legitimately have been broken: the exclusion checks are
 * then reported as a warning, not a failure.
 */
#include "stress.h"

#define NTHREADS 8

static const char *g_name = "stress-mutex";
static rs_mutex_t *g_shared;
static atomic_int g_inside;
static atomic_long g_counter;     /* relaxed load + store: a broken exclusion loses increments */
static atomic_ullong g_last_fence;
static atomic_int g_overlaps, g_fence_errors, g_elost;
static atomic_int g_workers_running;

typedef struct worker {
    int id;
    int iters;
    rs_client_t *c;
    rs_mutex_t *m; /* NULL: init (and destroy) a handle of its own on c */
} worker_t;

/* One of three ways to take the mutex; 0 or an unexpected error. */
static int take(rs_mutex_t *m, int how, unsigned *seed)
{
    for (;;) {
        int rc;
        if (how == 0) {
            rc = rs_mutex_lock(m);
        } else if (how == 1) {
            rc = rs_mutex_trylock(m);
            if (rc == EBUSY) {
                st_sleep_ms(1 + (long)(st_rand(seed) % 3));
                continue;
            }
        } else {
            struct timespec dl = st_abs_in(5);
            rc = rs_mutex_timedlock(m, &dl);
            if (rc == ETIMEDOUT)
                continue;
        }
        return rc;
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    unsigned seed = 7919u * (unsigned)w->id + 1;
    rs_mutex_t *m = w->m;
    if (!m) {
        int rc = rs_mutex_init(&m, w->c, g_name);
        if (rc) {
            FAILF("worker %d: rs_mutex_init: %d %s", w->id, rc, rs_client_lasterror(w->c));
            return NULL;
        }
    }
    EXPECT_RC(rs_mutex_unlock(m), EPERM);
    for (int i = 0; i < w->iters; i++) {
        int rc = take(m, (w->id + i) % 3, &seed);
        if (rc) {
            FAILF("worker %d: lock: %d %s (%s)", w->id, rc, rs_strerror(rc),
                  rs_client_lasterror(w->c));
            break;
        }
        if (atomic_exchange(&g_inside, 1))
            atomic_fetch_add(&g_overlaps, 1);
        uint64_t f = rs_mutex_fence(m);
        unsigned long long last = atomic_load(&g_last_fence);
        if (f == 0 || f <= last)
            atomic_fetch_add(&g_fence_errors, 1);
        atomic_store(&g_last_fence, f);
        /* 0 only once the hold's local deadline passed: then the unlock must say so */
        int expired = rs_mutex_remaining(m) <= 0;
        long v = atomic_load_explicit(&g_counter, memory_order_relaxed);
        if (i % 7 == 3) {
            EXPECT_RC(rs_mutex_trylock(m), EBUSY);
            EXPECT_RC(rs_mutex_lock(m), EDEADLK);
        }
        if (i % 25 == w->id % 25)
            st_sleep_ms(120); /* past a renewal (lease/3) while the others queue */
        atomic_store_explicit(&g_counter, v + 1, memory_order_relaxed);
        atomic_store(&g_inside, 0);
        rc = rs_mutex_unlock(m);
        if (expired && rc != RS_ELOST)
            FAILF("worker %d: remaining was 0 while holding, then unlock returned %d", w->id, rc);
        if (rc == RS_ELOST) {
            atomic_fetch_add(&g_elost, 1);
        } else if (rc) {
            FAILF("worker %d: unlock: %d %s (%s)", w->id, rc, rs_strerror(rc),
                  rs_client_lasterror(w->c));
            break;
        }
    }
    if (!w->m)
        EXPECT_RC(rs_mutex_destroy(m), 0);
    return NULL;
}

/* Calls the non-blocking accessors on the shared handle while the workers run. */
static void *observer_main(void *arg)
{
    rs_client_t *c = arg;
    long rounds = 0;
    while (atomic_load(&g_workers_running) > 0) {
        if (rs_mutex_fence(g_shared) != 0)
            FAILF("observer: fence of a thread that holds nothing is not 0");
        if (rs_mutex_remaining(g_shared) != 0)
            FAILF("observer: remaining of a thread that holds nothing is not 0");
        EXPECT_RC(rs_mutex_setlease(g_shared, st_lease_ms()), 0);
        if (rounds % 4 == 0) {
            rs_info_t info;
            int rc = rs_inspect(c, "mutex", g_name, &info);
            if (rc)
                FAILF("observer: rs_inspect: %d %s", rc, rs_client_lasterror(c));
            else if (info.nholders > 1)
                FAILF("observer: rs_inspect shows %u holders", info.nholders);
        }
        rounds++;
        st_sleep_ms(3);
    }
    return NULL;
}

static void run_phase(const char *what, rs_client_t *c1, rs_client_t *c2, int shared, int iters)
{
    long long t0 = st_mono_ms();
    long before = atomic_load(&g_counter);
    pthread_t th[NTHREADS], obs;
    worker_t w[NTHREADS];
    atomic_store(&g_workers_running, 1);
    st_spawn(&obs, observer_main, c1);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker_t){i, iters, (c2 && i % 2) ? c2 : c1, shared ? g_shared : NULL};
        st_spawn(&th[i], worker_main, &w[i]);
    }
    st_join_all(th, NTHREADS);
    atomic_store(&g_workers_running, 0);
    pthread_join(obs, NULL);
    long done = atomic_load(&g_counter) - before;
    int lost = atomic_load(&st_lost) + atomic_load(&g_elost);
    int bad = atomic_load(&g_overlaps) + atomic_load(&g_fence_errors) +
              (done != (long)NTHREADS * iters);
    if (bad && lost)
        fprintf(stderr, "%s: WARNING: %s: %d overlap(s), %d fence error(s), %ld/%ld sections "
                "counted, after %d lost hold(s): exclusion not checked\n", st_prog, what,
                atomic_load(&g_overlaps), atomic_load(&g_fence_errors), done,
                (long)NTHREADS * iters, lost);
    else if (bad)
        FAILF("%s: %d overlap(s), %d fence error(s), %ld/%ld sections counted", what,
              atomic_load(&g_overlaps), atomic_load(&g_fence_errors), done,
              (long)NTHREADS * iters);
    atomic_store(&g_overlaps, 0);
    atomic_store(&g_fence_errors, 0);
    if (st_verbose() || lost)
        fprintf(stderr, "%s: %s: %ld sections in %lld ms, %d lost\n", st_prog, what, done,
                st_mono_ms() - t0, lost);
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server(&srv, "stress_mutex");
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    rs_client_t *c1 = st_open(&srv, prefix), *c2 = st_open(&srv, prefix);
    if (rs_mutex_init(&g_shared, c1, g_name) != 0) {
        fprintf(stderr, "stress_mutex: rs_mutex_init: %s\n", rs_client_lasterror(c1));
        return 2;
    }
    int iters = st_scaled(200);
    st_chaos_start(&srv);
    run_phase("shared handle", c1, NULL, 1, iters);
    run_phase("per-thread handles", c1, NULL, 0, iters);
    run_phase("two clients", c1, c2, 0, iters / 2 > 0 ? iters / 2 : 1);
    st_chaos_stop();
    EXPECT_RC(rs_mutex_destroy(g_shared), 0);
    EXPECT_RC(rs_client_close(c2), 0);
    EXPECT_RC(rs_client_close(c1), 0);
    return st_finish(&srv, t0);
}
