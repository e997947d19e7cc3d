/*
 * stress_barrier.c - the cyclic barrier: parties over two clients, generation after
 * generation (make check-tsan, check-valgrind).
 *
 * PARTIES threads, half on each client, some sharing their client's handle and the others
 * with their own, wait GENS generations in a row (rs_barrier_wait, or rs_barrier_timedwait
 * with a deadline far enough never to run out), with short random pauses between. The trip's
 * message is read by the subscriber thread and handed to every waiter of the client (the
 * payload, under the notifier's lock), and each handle keeps its client's subscription to the
 * barrier's channel until it is destroyed.
 *
 * Checks: every wait returns 0 or RS_BARRIER_SERIAL; each generation has exactly one serial
 * caller and every party passes it; nobody passes a generation before every party arrived at
 * it (an atomic count of arrivals per generation, bumped before the wait).
 */
#include "stress.h"

#define PARTIES 6
#define GENS_MAX 400

static const char *g_name = "stress-barrier";
static rs_client_t *g_c[2];
static rs_barrier_t *g_shared[2];
static int g_gens;
static atomic_int g_arrived[GENS_MAX], g_passed[GENS_MAX], g_serial[GENS_MAX];

static void *party_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    rs_client_t *c = g_c[id % 2];
    rs_barrier_t *own = NULL;
    if (id >= 2 && rs_barrier_init(&own, c, g_name, PARTIES) != 0)
        FAILF("party %d: rs_barrier_init: %s", id, rs_client_lasterror(c));
    rs_barrier_t *b = own ? own : g_shared[id % 2];
    unsigned seed = 29u * (unsigned)id + 7;
    for (int g = 0; g < g_gens; g++) {
        atomic_fetch_add(&g_arrived[g], 1);
        int rc;
        if ((id + g) % 3 == 0) {
            struct timespec dl = st_abs_in(60000);
            rc = rs_barrier_timedwait(b, &dl);
        } else {
            rc = rs_barrier_wait(b);
        }
        if (rc != 0 && rc != RS_BARRIER_SERIAL) {
            FAILF("party %d generation %d: %d %s (%s)", id, g, rc, rs_strerror(rc),
                  rs_client_lasterror(c));
            break;
        }
        if (atomic_load(&g_arrived[g]) < PARTIES)
            FAILF("party %d passed generation %d after %d of %d arrivals", id, g,
                  atomic_load(&g_arrived[g]), PARTIES);
        if (rc == RS_BARRIER_SERIAL)
            atomic_fetch_add(&g_serial[g], 1);
        atomic_fetch_add(&g_passed[g], 1);
        if (st_rand(&seed) % 3 == 0)
            st_sleep_ms((long)(st_rand(&seed) % 4));
    }
    if (own)
        EXPECT_RC(rs_barrier_destroy(own), 0);
    return NULL;
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server(&srv, "stress_barrier");
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    g_gens = st_scaled(GENS_MAX);
    for (int i = 0; i < 2; i++) {
        g_c[i] = st_open(&srv, prefix);
        if (rs_barrier_init(&g_shared[i], g_c[i], g_name, PARTIES) != 0) {
            fprintf(stderr, "stress_barrier: rs_barrier_init: %s\n",
                    rs_client_lasterror(g_c[i]));
            return 2;
        }
    }
    pthread_t th[PARTIES];
    for (int i = 0; i < PARTIES; i++)
        st_spawn(&th[i], party_main, (void *)(intptr_t)i);
    st_join_all(th, PARTIES);
    for (int g = 0; g < g_gens; g++)
        if (atomic_load(&g_serial[g]) != 1 || atomic_load(&g_passed[g]) != PARTIES) {
            FAILF("generation %d: %d serial caller(s), %d of %d passed", g,
                  atomic_load(&g_serial[g]), atomic_load(&g_passed[g]), PARTIES);
            break;
        }
    for (int i = 0; i < 2; i++) {
        EXPECT_RC(rs_barrier_destroy(g_shared[i]), 0);
        EXPECT_RC(rs_client_close(g_c[i]), 0);
    }
    return st_finish(&srv, t0);
}
