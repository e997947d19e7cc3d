/*
 * stress_faults.c - the library's reconnect and loss paths under concurrency (make
 * check-tsan, check-valgrind): threads keep locking while Redis drops their connections,
 * forgets its scripts, takes their holds away or restarts.
 *
 * Two clients (short leases). 4 lock threads (lock/timedlock/unlock on one mutex, their own
 * handles) and 2 latch threads (timed waits on a latch nobody opens, so the notifier keeps
 * subscribing and unsubscribing its channel). Meanwhile main injects, round after round:
 * CLIENT KILL TYPE pubsub (the subscriber reconnects and pokes every waiter), CLIENT KILL
 * TYPE normal (pool and watchdog connections break), SCRIPT FLUSH (NOSCRIPT in calls and in
 * the watchdog's pipeline), rs_force_release from a third client (holds lost: on_lost,
 * RS_ELOST), and a kill -9 + restart of redis-server (RS_ECONN, data loss).
 *
 * Checks: calls return only the codes these faults explain (0, RS_ECONN, RS_ELOST, ETIMEDOUT
 * for the timed calls, ENOENT/ECANCELED nowhere); after the faults every thread gets the
 * mutex again (recovery); every hold whose unlock said RS_ELOST was reported by on_lost once
 * and no other was (I6: on_lost calls == RS_ELOST unlocks, counted after the clients close).
 */
#include "stress.h"

#define LOCKERS 4
#define LATCHERS 2

static ts_server_t g_srv;
static char g_prefix[64];
static rs_client_t *g_c[2];
static atomic_int g_stop, g_elost, g_econn, g_sections, g_recovered;

static int allowed(int rc, int timed)
{
    return rc == 0 || rc == RS_ECONN || (timed && rc == ETIMEDOUT);
}

static void *locker_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    rs_client_t *c = g_c[id % 2];
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "faults") != 0) {
        FAILF("locker %d: init: %s", id, rs_client_lasterror(c));
        return NULL;
    }
    for (int i = 0; !atomic_load(&g_stop); i++) {
        int timed = i % 2, rc;
        if (timed) {
            struct timespec dl = st_abs_in(200);
            rc = rs_mutex_timedlock(m, &dl);
        } else {
            rc = rs_mutex_lock(m);
        }
        if (rc == RS_ECONN)
            atomic_fetch_add(&g_econn, 1);
        if (!allowed(rc, timed))
            FAILF("locker %d: lock: %d %s (%s)", id, rc, rs_strerror(rc), rs_client_lasterror(c));
        if (rc)
            continue;
        atomic_fetch_add(&g_sections, 1);
        st_sleep_ms(i % 10 == 0 ? 150 : 2); /* sometimes past a renewal */
        rc = rs_mutex_unlock(m);
        if (rc == RS_ELOST)
            atomic_fetch_add(&g_elost, 1);
        else if (rc == RS_ECONN)
            atomic_fetch_add(&g_econn, 1);
        else if (rc)
            FAILF("locker %d: unlock: %d %s (%s)", id, rc, rs_strerror(rc),
                  rs_client_lasterror(c));
    }
    /* recovery: the faults are over, a plain lock must work again */
    struct timespec dl = st_abs_in(30000);
    int rc = rs_mutex_timedlock(m, &dl);
    if (rc) {
        FAILF("locker %d: no recovery after the faults: %d %s (%s)", id, rc, rs_strerror(rc),
              rs_client_lasterror(c));
    } else {
        rc = rs_mutex_unlock(m);
        if (rc == RS_ELOST)
            atomic_fetch_add(&g_elost, 1);
        else if (rc)
            FAILF("locker %d: unlock after recovery: %d %s", id, rc, rs_client_lasterror(c));
        else
            atomic_fetch_add(&g_recovered, 1);
    }
    EXPECT_RC(rs_mutex_destroy(m), 0);
    return NULL;
}

static void *latcher_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    rs_client_t *c = g_c[id % 2];
    rs_latch_t *l;
    if (rs_latch_init(&l, c, "faults", 0) != 0) {
        FAILF("latcher %d: init: %s", id, rs_client_lasterror(c));
        return NULL;
    }
    while (!atomic_load(&g_stop)) {
        struct timespec dl = st_abs_in(150);
        int rc = rs_latch_timedwait(l, &dl);
        /* never armed (or forgotten by a restart): it waits for arming, so ETIMEDOUT */
        if (rc != ETIMEDOUT && rc != RS_ECONN)
            FAILF("latcher %d: timedwait: %d %s (%s)", id, rc, rs_strerror(rc),
                  rs_client_lasterror(c));
    }
    EXPECT_RC(rs_latch_destroy(l), 0);
    return NULL;
}

static void fault(int round, rs_client_t *op)
{
    const char *what = "?";
    switch (round % 5) {
    case 0:
        what = "CLIENT KILL TYPE pubsub";
        ts_cmd_int(&g_srv, "CLIENT KILL TYPE pubsub");
        break;
    case 1:
        what = "CLIENT KILL TYPE normal";
        ts_cmd_int(&g_srv, "CLIENT KILL TYPE normal");
        break;
    case 2:
        what = "SCRIPT FLUSH";
        ts_cmd_int(&g_srv, "SCRIPT FLUSH");
        break;
    case 3: {
        what = "rs_force_release";
        int rc = rs_force_release(op, "mutex", "faults");
        if (rc != 0 && rc != RS_ECONN)
            FAILF("rs_force_release: %d %s", rc, rs_client_lasterror(op));
        break;
    }
    case 4:
        what = "kill -9 and restart";
        ts_server_kill(&g_srv);
        st_sleep_ms(150);
        if (ts_server_restart(&g_srv) != 0) {
            fprintf(stderr, "stress_faults: cannot restart redis-server\n");
            exit(2);
        }
        break;
    }
    if (st_verbose())
        fprintf(stderr, "stress_faults: round %d: %s\n", round, what);
}

int main(void)
{
    long long t0 = st_mono_ms();
    st_start_server(&g_srv, "stress_faults");
    ts_unique_prefix(g_prefix, sizeof g_prefix);
    g_c[0] = st_open(&g_srv, g_prefix);
    g_c[1] = st_open(&g_srv, g_prefix);
    rs_client_t *op = st_open(&g_srv, g_prefix);
    pthread_t th[LOCKERS + LATCHERS];
    for (int i = 0; i < LOCKERS; i++)
        st_spawn(&th[i], locker_main, (void *)(intptr_t)i);
    for (int i = 0; i < LATCHERS; i++)
        st_spawn(&th[LOCKERS + i], latcher_main, (void *)(intptr_t)i);
    int rounds = st_scaled(15) < 5 ? 5 : st_scaled(15);
    for (int r = 0; r < rounds; r++) {
        st_sleep_ms(st_lease_ms() > 1000 ? 1000 : 350);
        fault(r, op);
    }
    st_sleep_ms(300);
    atomic_store(&g_stop, 1);
    st_join_all(th, LOCKERS + LATCHERS);
    EXPECT_RC(rs_client_close(op), 0);
    EXPECT_RC(rs_client_close(g_c[1]), 0);
    EXPECT_RC(rs_client_close(g_c[0]), 0);
    /* every on_lost has been delivered once the clients are closed */
    if (atomic_load(&st_lost) != atomic_load(&g_elost))
        FAILF("on_lost was called %d time(s) but %d unlock(s) returned RS_ELOST",
              atomic_load(&st_lost), atomic_load(&g_elost));
    if (atomic_load(&g_recovered) != LOCKERS)
        FAILF("%d of %d lock threads recovered", atomic_load(&g_recovered), LOCKERS);
    if (st_verbose())
        fprintf(stderr, "stress_faults: %d sections, %d RS_ELOST, %d RS_ECONN\n",
                atomic_load(&g_sections), atomic_load(&g_elost), atomic_load(&g_econn));
    return st_finish(&g_srv, t0);
}
