/*
 * stress_latch.c - countdown latch: threads waiting while others count down, round after
 * round (make check-tsan, check-valgrind).
 *
 * Two clients, one latch name, 100 rounds. Each round main arms the latch with COUNTERS
 * (rs_latch_init in round 0, rs_latch_rearm after), then WAITERS threads wait (rs_latch_wait
 * or rs_latch_timedwait, through a handle shared per client or their own) while COUNTERS
 * threads count down once each after a short random delay, also calling getcount. A barrier
 * separates the rounds. Some waiters start late, after the latch may already be open.
 *
 * Checks (I5): no wait returns before the count-down that reached 0 (each counter bumps an
 * atomic before its count-down, so a returning waiter must see all of them); every wait
 * returns 0; getcount is never above the armed count and is 0 at the end of a round; a
 * count-down at 0 is a no-op; a latch never armed says ENOENT.
 */
#include "stress.h"

#define WAITERS 4
#define COUNTERS 4

static const char *g_name = "stress-latch";
static rs_client_t *g_c[2];
static rs_latch_t *g_shared[2]; /* one handle per client, shared by its threads */
static pthread_barrier_t g_start, g_end;
static atomic_int g_downs;
static int g_rounds;

static void *waiter_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    rs_client_t *c = g_c[id % 2];
    rs_latch_t *own = NULL;
    if (id >= 2 && rs_latch_init(&own, c, g_name, 0) != 0) /* count 0: attach only */
        FAILF("waiter %d: rs_latch_init: %s", id, rs_client_lasterror(c));
    rs_latch_t *l = own ? own : g_shared[id % 2];
    unsigned seed = 31u * (unsigned)id + 5;
    for (int r = 0; r < g_rounds; r++) {
        pthread_barrier_wait(&g_start);
        if ((id + r) % 4 == 3)
            st_sleep_ms((long)(st_rand(&seed) % 30)); /* may start after the opening */
        int rc;
        if ((id + r) % 2) {
            struct timespec dl = st_abs_in(60000);
            rc = rs_latch_timedwait(l, &dl);
        } else {
            rc = rs_latch_wait(l);
        }
        if (rc)
            FAILF("waiter %d round %d: wait: %d %s (%s)", id, r, rc, rs_strerror(rc),
                  rs_client_lasterror(c));
        else if (atomic_load(&g_downs) != COUNTERS)
            FAILF("waiter %d round %d: wait returned after %d of %d count-downs", id, r,
                  atomic_load(&g_downs), COUNTERS);
        pthread_barrier_wait(&g_end);
    }
    if (own)
        EXPECT_RC(rs_latch_destroy(own), 0);
    return NULL;
}

static void *counter_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    rs_client_t *c = g_c[id % 2];
    rs_latch_t *l = g_shared[id % 2];
    unsigned seed = 17u * (unsigned)id + 11;
    for (int r = 0; r < g_rounds; r++) {
        pthread_barrier_wait(&g_start);
        st_sleep_ms((long)(st_rand(&seed) % 20));
        atomic_fetch_add(&g_downs, 1); /* before: a waiter may return as soon as it is sent */
        int rc = rs_latch_count_down(l);
        if (rc)
            FAILF("counter %d round %d: count_down: %d %s", id, r, rc, rs_client_lasterror(c));
        unsigned n = 99;
        rc = rs_latch_getcount(l, &n);
        if (rc || n >= COUNTERS)
            FAILF("counter %d round %d: getcount: %d, count %u", id, r, rc, n);
        pthread_barrier_wait(&g_end);
    }
    return NULL;
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server(&srv, "stress_latch");
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    g_rounds = st_scaled(100);
    for (int i = 0; i < 2; i++) {
        g_c[i] = st_open(&srv, prefix);
        if (rs_latch_init(&g_shared[i], g_c[i], g_name, 0) != 0) {
            fprintf(stderr, "stress_latch: rs_latch_init: %s\n", rs_client_lasterror(g_c[i]));
            return 2;
        }
    }
    unsigned n;
    EXPECT_RC(rs_latch_getcount(g_shared[0], &n), ENOENT);
    EXPECT_RC(rs_latch_count_down(g_shared[0]), ENOENT);
    pthread_barrier_init(&g_start, NULL, WAITERS + COUNTERS + 1);
    pthread_barrier_init(&g_end, NULL, WAITERS + COUNTERS + 1);
    pthread_t th[WAITERS + COUNTERS];
    for (int i = 0; i < WAITERS; i++)
        st_spawn(&th[i], waiter_main, (void *)(intptr_t)i);
    for (int i = 0; i < COUNTERS; i++)
        st_spawn(&th[WAITERS + i], counter_main, (void *)(intptr_t)i);
    rs_latch_t *arm = NULL;
    for (int r = 0; r < g_rounds; r++) {
        atomic_store(&g_downs, 0);
        if (r == 0) {
            EXPECT_RC(rs_latch_init(&arm, g_c[0], g_name, COUNTERS), 0);
        } else {
            EXPECT_RC(rs_latch_rearm(arm, COUNTERS), 0);
        }
        EXPECT_RC(rs_latch_getcount(arm, &n), 0);
        if (n != COUNTERS)
            FAILF("round %d: armed with %d, getcount says %u", r, COUNTERS, n);
        pthread_barrier_wait(&g_start);
        pthread_barrier_wait(&g_end);
        n = 99;
        EXPECT_RC(rs_latch_getcount(arm, &n), 0);
        if (n != 0)
            FAILF("round %d: count %u after every count-down", r, n);
        EXPECT_RC(rs_latch_count_down(arm), 0); /* at 0: a no-op */
    }
    st_join_all(th, WAITERS + COUNTERS);
    pthread_barrier_destroy(&g_start);
    pthread_barrier_destroy(&g_end);
    EXPECT_RC(rs_latch_destroy(arm), 0);
    for (int i = 0; i < 2; i++) {
        EXPECT_RC(rs_latch_destroy(g_shared[i]), 0);
        EXPECT_RC(rs_client_close(g_c[i]), 0);
    }
    return st_finish(&srv, t0);
}
