/*
 * stress_cond.c - the condition variable: a bounded queue of producers and consumers under
 * one mutex and two conditions, across two clients (make check-tsan, check-valgrind).
 *
 * Two clients, one mutex, the conditions "not empty" and "not full", a queue of CAP items
 * (an atomic count: distributed exclusion is invisible to TSan). PRODUCERS threads put
 * ITEMS items each, CONSUMERS threads take them until all are taken. Every thread locks the
 * mutex and waits on a condition while the queue is full (producers) or empty (consumers):
 * half of them with rs_cond_wait, the others with rs_cond_timedwait and short deadlines
 * (which run out while the producers pause, every 50 items: ETIMEDOUT, the mutex held
 * again). Producers signal "not empty"
 * and now and then broadcast it; consumers signal "not full"; the consumer that takes the
 * last item broadcasts "not empty" so that the others see the end. Some threads share their
 * client's handles, the others have their own, and one consumer waits on a condition of the
 * other client than its mutex's (allowed). The watchdog renews holds and queue entries
 * throughout (300 ms leases).
 *
 * Checks: no two threads inside the critical section at once (an "inside" flag taken with
 * atomic_exchange); the count stays within 0..CAP; every wait returns 0 or, timed, ETIMEDOUT
 * and with the mutex held (a fencing token, and the critical section's checks); at the end
 * every item was taken exactly once (produced == consumed == PRODUCERS x ITEMS) and the
 * queue is empty. A lost wake-up hangs an untimed waiter: STRESS_TIMEOUT ends the program.
 */
#include "stress.h"

#define PRODUCERS 2
#define CONSUMERS 4
#define CAP 3

static const char *g_mutex = "stress-cond-m";
static rs_client_t *g_c[2];
static rs_mutex_t *g_m[2];                /* shared per client */
static rs_cond_t *g_nonempty[2], *g_nonfull[2];
static int g_total;
static atomic_int g_count, g_produced, g_consumed, g_inside, g_timeouts, g_waits;

/* The critical section's entry and exit checks (the mutex held). */
static void enter(const char *who, int id, rs_mutex_t *m)
{
    if (atomic_exchange(&g_inside, 1))
        FAILF("%s %d: another thread is inside the critical section", who, id);
    if (rs_mutex_fence(m) == 0)
        FAILF("%s %d: inside without a fencing token", who, id);
    int n = atomic_load_explicit(&g_count, memory_order_relaxed);
    if (n < 0 || n > CAP)
        FAILF("%s %d: count %d outside 0..%d", who, id, n, CAP);
}

static void leave_cs(void)
{
    atomic_store(&g_inside, 0);
}

/* One wait, timed or not; 0 woken, 1 timed out (the mutex is held in both cases). */
static int wait_on(const char *who, int id, rs_cond_t *cv, rs_mutex_t *m, int timed,
                   unsigned *seed)
{
    leave_cs();
    atomic_fetch_add(&g_waits, 1);
    int rc;
    if (timed) {
        struct timespec dl = st_abs_in(20 + (long)(st_rand(seed) % 80));
        rc = rs_cond_timedwait(cv, m, &dl);
    } else {
        rc = rs_cond_wait(cv, m);
    }
    if (rc != 0 && !(timed && rc == ETIMEDOUT))
        FAILF("%s %d: %s: %d %s (%s)", who, id, timed ? "timedwait" : "wait", rc,
              rs_strerror(rc), rs_client_lasterror(NULL));
    enter(who, id, m);
    if (rc == ETIMEDOUT)
        atomic_fetch_add(&g_timeouts, 1);
    return rc == ETIMEDOUT;
}

static void *producer_main(void *arg)
{
    int id = (int)(intptr_t)arg, k = id % 2;
    rs_client_t *c = g_c[k];
    rs_mutex_t *own = NULL, *m = g_m[k];
    if (id == 1 && rs_mutex_init(&own, c, g_mutex) != 0) /* a mutex handle of its own */
        FAILF("producer %d: rs_mutex_init: %s", id, rs_client_lasterror(c));
    if (own)
        m = own;
    unsigned seed = 7u * (unsigned)id + 3;
    int timed = id % 2 == 0, items = g_total / PRODUCERS;
    for (int i = 0; i < items; i++) {
        if (rs_mutex_lock(m) != 0) {
            FAILF("producer %d: lock: %s", id, rs_client_lasterror(c));
            break;
        }
        enter("producer", id, m);
        while (atomic_load_explicit(&g_count, memory_order_relaxed) >= CAP)
            wait_on("producer", id, g_nonfull[k], m, timed, &seed);
        int n = atomic_load_explicit(&g_count, memory_order_relaxed);
        atomic_store_explicit(&g_count, n + 1, memory_order_relaxed);
        atomic_fetch_add(&g_produced, 1);
        leave_cs();
        EXPECT_RC(st_rand(&seed) % 8 == 0 ? rs_cond_broadcast(g_nonempty[k])
                                          : rs_cond_signal(g_nonempty[k]), 0);
        EXPECT_RC(rs_mutex_unlock(m), 0);
        if (i % 50 == 49)
            st_sleep_ms(120); /* the consumers' timed waits run out meanwhile */
        else if (st_rand(&seed) % 4 == 0)
            st_sleep_ms((long)(st_rand(&seed) % 5));
    }
    if (own)
        EXPECT_RC(rs_mutex_destroy(own), 0);
    return NULL;
}

static void *consumer_main(void *arg)
{
    int id = (int)(intptr_t)arg, k = id % 2;
    rs_client_t *c = g_c[k];
    rs_mutex_t *own = NULL, *m = g_m[k];
    rs_cond_t *ne = g_nonempty[k], *nf = g_nonfull[k];
    if (id >= 2 && rs_mutex_init(&own, c, g_mutex) != 0)
        FAILF("consumer %d: rs_mutex_init: %s", id, rs_client_lasterror(c));
    if (own)
        m = own;
    if (id == 3) /* its condition on the other client than its mutex */
        ne = g_nonempty[1 - k];
    unsigned seed = 13u * (unsigned)id + 1;
    int timed = id % 2 == 1;
    for (;;) {
        if (rs_mutex_lock(m) != 0) {
            FAILF("consumer %d: lock: %s", id, rs_client_lasterror(c));
            break;
        }
        enter("consumer", id, m);
        while (atomic_load_explicit(&g_count, memory_order_relaxed) == 0 &&
               atomic_load(&g_consumed) < g_total)
            wait_on("consumer", id, ne, m, timed, &seed);
        if (atomic_load(&g_consumed) >= g_total) {
            leave_cs();
            EXPECT_RC(rs_mutex_unlock(m), 0);
            break;
        }
        int n = atomic_load_explicit(&g_count, memory_order_relaxed);
        atomic_store_explicit(&g_count, n - 1, memory_order_relaxed);
        int done = atomic_fetch_add(&g_consumed, 1) + 1 == g_total;
        leave_cs();
        EXPECT_RC(rs_cond_signal(nf), 0);
        if (done) /* one broadcast wakes the waiters of the name, of both clients */
            EXPECT_RC(rs_cond_broadcast(g_nonempty[0]), 0);
        EXPECT_RC(rs_mutex_unlock(m), 0);
    }
    if (own)
        EXPECT_RC(rs_mutex_destroy(own), 0);
    return NULL;
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server(&srv, "stress_cond");
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    g_total = PRODUCERS * st_scaled(800);
    for (int i = 0; i < 2; i++) {
        g_c[i] = st_open(&srv, prefix);
        if (rs_mutex_init(&g_m[i], g_c[i], g_mutex) != 0 ||
            rs_cond_init(&g_nonempty[i], g_c[i], "stress-cond-ne") != 0 ||
            rs_cond_init(&g_nonfull[i], g_c[i], "stress-cond-nf") != 0) {
            fprintf(stderr, "stress_cond: init: %s\n", rs_client_lasterror(g_c[i]));
            return 2;
        }
    }
    /* wait without holding the mutex: EPERM */
    EXPECT_RC(rs_cond_wait(g_nonempty[0], g_m[0]), EPERM);
    pthread_t th[PRODUCERS + CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++)
        st_spawn(&th[i], consumer_main, (void *)(intptr_t)i);
    for (int i = 0; i < PRODUCERS; i++)
        st_spawn(&th[CONSUMERS + i], producer_main, (void *)(intptr_t)i);
    st_join_all(th, PRODUCERS + CONSUMERS);
    if (atomic_load(&g_produced) != g_total || atomic_load(&g_consumed) != g_total ||
        atomic_load(&g_count) != 0)
        FAILF("produced %d, consumed %d of %d, %d left in the queue",
              atomic_load(&g_produced), atomic_load(&g_consumed), g_total,
              atomic_load(&g_count));
    if (st_verbose())
        fprintf(stderr, "stress_cond: %d items, %d waits, %d timed out\n", g_total,
                atomic_load(&g_waits), atomic_load(&g_timeouts));
    for (int i = 0; i < 2; i++) {
        EXPECT_RC(rs_cond_destroy(g_nonempty[i]), 0);
        EXPECT_RC(rs_cond_destroy(g_nonfull[i]), 0);
        EXPECT_RC(rs_mutex_destroy(g_m[i]), 0);
        EXPECT_RC(rs_client_close(g_c[i]), 0);
    }
    return st_finish(&srv, t0);
}
