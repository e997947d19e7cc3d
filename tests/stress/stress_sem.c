/*
 * stress_sem.c - threads of two clients sharing a semaphore of 3 leased permits (make
 * check-tsan, check-valgrind).
 *
 * 8 threads x 100 iterations (6 on one client through one shared handle, 2 on a second
 * client): take 1 permit (sem_wait, trywait retried on EAGAIN, timedwait retried on
 * ETIMEDOUT) or 2 at once (timedwait_n), sometimes a second acquisition on top, then give
 * them back with post or post_n (partial post_n shrinks the latest acquisition). An observer
 * calls getvalue and fence meanwhile; short leases keep the watchdog renewing.
 *
 * Checks: never more than 3 permits taken at once (counted locally); getvalue stays within
 * 0..3; a holder's fence is > 0; post without a permit is EPERM; at the end every permit is
 * free again. Exclusion is only a warning after a lost hold (see stress_mutex.c); after
 * RS_ELOST the section posts what is left until EPERM.
 */
#include "stress.h"

#define NTHREADS 8
#define SIZE 3

static const char *g_name = "stress-sem";
static rs_client_t *g_c[2];
static rs_sem_t *g_s[2];
static atomic_int g_taken, g_max_seen, g_violations, g_elost, g_running;

static int take(rs_sem_t *s, unsigned n, int how, unsigned *seed)
{
    for (;;) {
        int rc;
        if (n > 1) {
            struct timespec dl = st_abs_in(20);
            rc = rs_sem_timedwait_n(s, n, &dl);
            if (rc == ETIMEDOUT)
                continue;
        } else if (how == 0) {
            rc = rs_sem_wait(s);
        } else if (how == 1) {
            rc = rs_sem_trywait(s);
            if (rc == EAGAIN) {
                st_sleep_ms(1 + (long)(st_rand(seed) % 3));
                continue;
            }
        } else {
            struct timespec dl = st_abs_in(5);
            rc = rs_sem_timedwait(s, &dl);
            if (rc == ETIMEDOUT)
                continue;
        }
        return rc;
    }
}

static void count_in(int n)
{
    int now = atomic_fetch_add(&g_taken, n) + n;
    if (now > SIZE)
        atomic_fetch_add(&g_violations, 1);
    int m = atomic_load(&g_max_seen);
    while (now > m && !atomic_compare_exchange_weak(&g_max_seen, &m, now)) {
    }
}

/* One section: the permits it counted in, and whether one of its holds was lost (the
 * library then clears that hold entirely, so a later post for it is EPERM). */
typedef struct section {
    rs_sem_t *s;
    int id, mine, lost;
} section_t;

static void post(section_t *x, unsigned n)
{
    if (x->lost)
        return; /* drained at the end of the section */
    x->mine -= (int)n;
    atomic_fetch_sub(&g_taken, (int)n); /* before: the permits may be taken as soon as sent */
    int rc = n == 1 ? rs_sem_post(x->s) : rs_sem_post_n(x->s, n);
    if (rc == RS_ELOST) {
        x->lost = 1;
        atomic_fetch_add(&g_elost, 1);
    } else if (rc) {
        FAILF("thread %d: post_n(%u): %d %s (%s)", x->id, n, rc, rs_strerror(rc),
              rs_client_lasterror(NULL));
    }
}

static void *worker_main(void *arg)
{
    int id = (int)(intptr_t)arg;
    rs_sem_t *s = g_s[id >= 6];
    unsigned seed = 257u * (unsigned)id + 1;
    int iters = st_scaled(100);
    EXPECT_RC(rs_sem_post(s), EPERM);
    for (int i = 0; i < iters; i++) {
        unsigned n = (id + i) % 5 == 0 ? 2 : 1;
        int rc = take(s, n, (id + i) % 3, &seed);
        if (rc) {
            FAILF("thread %d: take %u: %d %s (%s)", id, n, rc, rs_strerror(rc),
                  rs_client_lasterror(NULL));
            break;
        }
        section_t x = {s, id, (int)n, 0};
        count_in((int)n);
        if (rs_sem_fence(s) == 0)
            FAILF("thread %d: fence 0 while holding a permit", id);
        unsigned extra = 0;
        if (n == 1 && i % 7 == 0 && rs_sem_trywait(s) == 0) {
            extra = 1; /* a second acquisition by the same thread */
            x.mine++;
            count_in(1);
        }
        st_sleep_ms(i % 30 == id ? 120 : 1);
        if (extra && i % 2 == 0) {
            post(&x, 2); /* both acquisitions in one call */
        } else {
            if (extra)
                post(&x, 1); /* the latest acquisition first */
            if (n == 2 && i % 2) {
                post(&x, 1); /* shrink the hold of 2 to 1 ("give") */
                post(&x, 1);
            } else {
                post(&x, n);
            }
        }
        if (x.lost) {
            /* give back what is left, until EPERM */
            atomic_fetch_sub(&g_taken, x.mine);
            while ((rc = rs_sem_post(s)) == 0 || rc == RS_ELOST) {
            }
            if (rc != EPERM)
                FAILF("thread %d: draining after a lost hold: %d %s", id, rc, rs_strerror(rc));
        }
    }
    return NULL;
}

static void *observer_main(void *arg)
{
    (void)arg;
    while (atomic_load(&g_running)) {
        int v = -1;
        int rc = rs_sem_getvalue(g_s[0], &v);
        if (rc || v < 0 || v > SIZE)
            FAILF("observer: getvalue: %d, value %d", rc, v);
        if (rs_sem_fence(g_s[0]) != 0)
            FAILF("observer: fence of a thread that holds nothing is not 0");
        st_sleep_ms(5);
    }
    return NULL;
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server(&srv, "stress_sem");
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    for (int i = 0; i < 2; i++) {
        g_c[i] = st_open(&srv, prefix);
        if (rs_sem_init(&g_s[i], g_c[i], g_name, SIZE) != 0) {
            fprintf(stderr, "stress_sem: rs_sem_init: %s\n", rs_client_lasterror(g_c[i]));
            return 2;
        }
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
    int lost = atomic_load(&st_lost) + atomic_load(&g_elost);
    if (atomic_load(&g_violations) && lost)
        fprintf(stderr, "stress_sem: WARNING: more than %d permits taken %d time(s) after %d "
                "lost hold(s)\n", SIZE, atomic_load(&g_violations), lost);
    else if (atomic_load(&g_violations))
        FAILF("more than %d permits taken at once, %d time(s) (max %d)", SIZE,
              atomic_load(&g_violations), atomic_load(&g_max_seen));
    int v = -1;
    EXPECT_RC(rs_sem_getvalue(g_s[1], &v), 0);
    if (v != SIZE)
        FAILF("%d permits free at the end, not %d", v, SIZE);
    for (int i = 0; i < 2; i++) {
        EXPECT_RC(rs_sem_destroy(g_s[i]), 0);
        EXPECT_RC(rs_client_close(g_c[i]), 0);
    }
    return st_finish(&srv, t0);
}
