/*
 * stress_close.c - closing a client while its threads are blocked in it, or busy with it
 * (make check-tsan, check-valgrind).
 *
 * Blocked: client H holds a mutex, an rmutex, a read and a write rwlock, a semaphore's only
 * permit and an armed latch. A fresh victim client V has threads blocked in rs_mutex_lock
 * (two, one shared handle), rs_mutex_timedlock, rs_rmutex_lock, rs_rwlock_wrlock,
 * rs_rwlock_rdlock, rs_sem_wait, rs_sem_timedwait and rs_latch_wait. main closes V: close
 * must return 0 and every blocked call ECANCELED (the contract). Then V's handles are
 * destroyed (0), H releases everything (0, no RS_ELOST), and V's queue entries must be gone:
 * the mutex has no holder afterwards, and H's trylocks on the rwlock and the semaphore, which
 * fail while anyone is queued, succeed.
 *
 * Busy: V's threads lock/unlock a mutex in a loop against H's threads; main closes V in the
 * middle. V's calls may only return 0 or ECANCELED; H's threads must keep getting the mutex
 * afterwards (V's holds were released by the close, not left to expire).
 */
#include "stress.h"

static char g_prefix[64];
static ts_server_t g_srv;

/* ---- blocked ----------------------------------------------------------------------------- */

enum { B_MUTEX1, B_MUTEX2, B_MUTEX_TIMED, B_RMUTEX, B_WRLOCK, B_RDLOCK, B_SEM, B_SEM_TIMED,
       B_LATCH, B_N };

typedef struct victim {
    rs_client_t *c;
    rs_mutex_t *m, *m_own;
    rs_rmutex_t *rm;
    rs_rwlock_t *rw1, *rw2;
    rs_sem_t *s;
    rs_latch_t *l;
} victim_t;

static victim_t g_v;
static atomic_int g_calling;
static int g_rc[B_N];

static void *blocked_main(void *arg)
{
    int what = (int)(intptr_t)arg;
    struct timespec dl = st_abs_in(120000);
    atomic_fetch_add(&g_calling, 1);
    int rc = -1;
    switch (what) {
    case B_MUTEX1:
    case B_MUTEX2: rc = rs_mutex_lock(g_v.m); break;
    case B_MUTEX_TIMED: rc = rs_mutex_timedlock(g_v.m_own, &dl); break;
    case B_RMUTEX: rc = rs_rmutex_lock(g_v.rm); break;
    case B_WRLOCK: rc = rs_rwlock_wrlock(g_v.rw1); break;
    case B_RDLOCK: rc = rs_rwlock_rdlock(g_v.rw2); break;
    case B_SEM: rc = rs_sem_wait(g_v.s); break;
    case B_SEM_TIMED: rc = rs_sem_timedwait(g_v.s, &dl); break;
    case B_LATCH: rc = rs_latch_wait(g_v.l); break;
    }
    g_rc[what] = rc;
    return NULL;
}

static void must(int rc, const char *what, rs_client_t *c)
{
    if (rc) {
        fprintf(stderr, "stress_close: setup: %s: %d %s\n", what, rc, rs_client_lasterror(c));
        exit(2);
    }
}

static void blocked_round(int round)
{
    static const char *const names[B_N] = {"mutex_lock", "mutex_lock (2)", "mutex_timedlock",
                                           "rmutex_lock", "rwlock_wrlock", "rwlock_rdlock",
                                           "sem_wait", "sem_timedwait", "latch_wait"};
    rs_client_t *h = st_open(&g_srv, g_prefix);
    rs_mutex_t *hm;
    rs_rmutex_t *hrm;
    rs_rwlock_t *hrw1, *hrw2;
    rs_sem_t *hs;
    rs_latch_t *hl;
    must(rs_mutex_init(&hm, h, "m"), "mutex_init", h);
    must(rs_rmutex_init(&hrm, h, "rm"), "rmutex_init", h);
    must(rs_rwlock_init(&hrw1, h, "rw1"), "rwlock_init", h);
    must(rs_rwlock_init(&hrw2, h, "rw2"), "rwlock_init", h);
    must(rs_sem_init(&hs, h, "s", 1), "sem_init", h);
    must(rs_latch_init(&hl, h, "l", 0), "latch_init", h);
    must(rs_latch_rearm(hl, 1), "latch_rearm", h);
    must(rs_mutex_lock(hm), "mutex_lock", h);
    must(rs_rmutex_lock(hrm), "rmutex_lock", h);
    must(rs_rwlock_rdlock(hrw1), "rdlock", h);
    must(rs_rwlock_wrlock(hrw2), "wrlock", h);
    must(rs_sem_wait(hs), "sem_wait", h);

    g_v.c = st_open(&g_srv, g_prefix);
    rs_client_t *v = g_v.c;
    must(rs_mutex_init(&g_v.m, v, "m"), "mutex_init", v);
    must(rs_mutex_init(&g_v.m_own, v, "m"), "mutex_init", v);
    must(rs_rmutex_init(&g_v.rm, v, "rm"), "rmutex_init", v);
    must(rs_rwlock_init(&g_v.rw1, v, "rw1"), "rwlock_init", v);
    must(rs_rwlock_init(&g_v.rw2, v, "rw2"), "rwlock_init", v);
    must(rs_sem_init(&g_v.s, v, "s", 0), "sem_init", v);
    must(rs_latch_init(&g_v.l, v, "l", 0), "latch_init", v);

    atomic_store(&g_calling, 0);
    pthread_t th[B_N];
    for (int i = 0; i < B_N; i++) {
        g_rc[i] = -1;
        st_spawn(&th[i], blocked_main, (void *)(intptr_t)i);
    }
    /* wait until the mutex waiters are queued in Redis, then a little longer for the rest */
    long long until = st_mono_ms() + 20000;
    for (;;) {
        rs_info_t info;
        if (atomic_load(&g_calling) == B_N && rs_inspect(h, "mutex", "m", &info) == 0 &&
            info.waiters >= 3)
            break;
        if (st_mono_ms() > until) {
            FAILF("round %d: the victim's mutex waiters never queued", round);
            break;
        }
        st_sleep_ms(20);
    }
    st_sleep_ms(st_lease_ms() > 1000 ? 1000 : 300);

    long long t = st_mono_ms();
    EXPECT_RC(rs_client_close(v), 0);
    long long close_ms = st_mono_ms() - t;
    st_join_all(th, B_N);
    for (int i = 0; i < B_N; i++)
        if (g_rc[i] != ECANCELED)
            FAILF("round %d: %s blocked during close returned %d (%s), not ECANCELED", round,
                  names[i], g_rc[i], g_rc[i] > 0 ? rs_strerror(g_rc[i]) : "?");
    if (st_verbose())
        fprintf(stderr, "stress_close: round %d: close took %lld ms\n", round, close_ms);
    EXPECT_RC(rs_mutex_lock(g_v.m), ECANCELED); /* calls after close */
    EXPECT_RC(rs_mutex_destroy(g_v.m), 0);
    EXPECT_RC(rs_mutex_destroy(g_v.m_own), 0);
    EXPECT_RC(rs_rmutex_destroy(g_v.rm), 0);
    EXPECT_RC(rs_rwlock_destroy(g_v.rw1), 0);
    EXPECT_RC(rs_rwlock_destroy(g_v.rw2), 0);
    EXPECT_RC(rs_sem_destroy(g_v.s), 0);
    EXPECT_RC(rs_latch_destroy(g_v.l), 0); /* the last handle: frees the closed client */

    EXPECT_RC(rs_mutex_unlock(hm), 0);
    EXPECT_RC(rs_rmutex_unlock(hrm), 0);
    EXPECT_RC(rs_rwlock_unlock(hrw1), 0);
    EXPECT_RC(rs_rwlock_unlock(hrw2), 0);
    EXPECT_RC(rs_sem_post(hs), 0);
    EXPECT_RC(rs_latch_count_down(hl), 0);
    rs_info_t info;
    EXPECT_RC(rs_inspect(h, "mutex", "m", &info), 0);
    if (info.nholders != 0 || info.waiters != 0)
        FAILF("round %d: after the close the mutex has %u holder(s), %u waiter(s)", round,
              info.nholders, info.waiters);
    EXPECT_RC(rs_rwlock_trywrlock(hrw1), 0);
    EXPECT_RC(rs_rwlock_unlock(hrw1), 0);
    EXPECT_RC(rs_rwlock_trywrlock(hrw2), 0);
    EXPECT_RC(rs_rwlock_unlock(hrw2), 0);
    EXPECT_RC(rs_sem_trywait(hs), 0);
    EXPECT_RC(rs_sem_post(hs), 0);
    EXPECT_RC(rs_mutex_destroy(hm), 0);
    EXPECT_RC(rs_rmutex_destroy(hrm), 0);
    EXPECT_RC(rs_rwlock_destroy(hrw1), 0);
    EXPECT_RC(rs_rwlock_destroy(hrw2), 0);
    EXPECT_RC(rs_sem_destroy(hs), 0);
    EXPECT_RC(rs_latch_destroy(hl), 0);
    EXPECT_RC(rs_client_close(h), 0);
}

/* ---- busy -------------------------------------------------------------------------------- */

#define BUSY_V 4
#define BUSY_H 2

static atomic_int g_stop_h;
static atomic_long g_h_sections;

typedef struct busy {
    rs_client_t *c;
    rs_mutex_t *m;
    int victim;
} busy_t;

static void *busy_main(void *arg)
{
    busy_t *b = arg;
    for (;;) {
        if (!b->victim && atomic_load(&g_stop_h))
            break;
        struct timespec dl = st_abs_in(20000);
        int rc = b->victim ? rs_mutex_lock(b->m) : rs_mutex_timedlock(b->m, &dl);
        if (rc == ECANCELED && b->victim)
            break;
        if (rc) {
            FAILF("busy %s: lock: %d %s (%s)", b->victim ? "victim" : "holder", rc,
                  rs_strerror(rc), rs_client_lasterror(b->c));
            break;
        }
        if (!b->victim)
            atomic_fetch_add(&g_h_sections, 1);
        st_sleep_ms(1);
        rc = rs_mutex_unlock(b->m);
        if (rc == ECANCELED && b->victim)
            break; /* the close releases that hold */
        if (rc) {
            FAILF("busy %s: unlock: %d %s", b->victim ? "victim" : "holder", rc,
                  rs_client_lasterror(b->c));
            break;
        }
    }
    return NULL;
}

static void busy_round(int round)
{
    rs_client_t *h = st_open(&g_srv, g_prefix), *v = st_open(&g_srv, g_prefix);
    rs_mutex_t *hm, *vm[BUSY_V];
    must(rs_mutex_init(&hm, h, "busy"), "mutex_init", h);
    pthread_t th[BUSY_V + BUSY_H];
    busy_t b[BUSY_V + BUSY_H];
    atomic_store(&g_stop_h, 0);
    for (int i = 0; i < BUSY_V + BUSY_H; i++) {
        if (i < BUSY_V) {
            must(rs_mutex_init(&vm[i], v, "busy"), "mutex_init", v);
            b[i] = (busy_t){v, vm[i], 1};
        } else {
            b[i] = (busy_t){h, hm, 0};
        }
        st_spawn(&th[i], busy_main, &b[i]);
    }
    st_sleep_ms(200 + 50 * round);
    EXPECT_RC(rs_client_close(v), 0);
    st_join_all(th, BUSY_V);
    long before = atomic_load(&g_h_sections);
    st_sleep_ms(300);
    atomic_store(&g_stop_h, 1);
    st_join_all(th + BUSY_V, BUSY_H);
    if (atomic_load(&g_h_sections) == before)
        FAILF("busy round %d: the holder's threads made no progress after the close", round);
    for (int i = 0; i < BUSY_V; i++)
        EXPECT_RC(rs_mutex_destroy(vm[i]), 0);
    EXPECT_RC(rs_mutex_destroy(hm), 0);
    EXPECT_RC(rs_client_close(h), 0);
}

int main(void)
{
    long long t0 = st_mono_ms();
    st_start_server(&g_srv, "stress_close");
    ts_unique_prefix(g_prefix, sizeof g_prefix);
    int rounds = st_scaled(3) < 3 ? st_scaled(3) : 3;
    for (int r = 0; r < rounds; r++) {
        blocked_round(r);
        busy_round(r);
    }
    return st_finish(&g_srv, t0);
}
