/*
 * stress_rwlock.c - readers and writers on one distributed read-write lock (make check-tsan,
 * check-valgrind).
 *
 * 4 reader and 2 writer threads x 100 iterations through ONE shared rs_rwlock_t, plus one
 * reader and one writer on a second client (short leases: the watchdog renews concurrently).
 * Readers rotate rdlock, tryrdlock (retried on EBUSY) and timedrdlock, sometimes re-enter,
 * and try an upgrade (EDEADLK). Writers rotate wrlock, trywrlock and timedwrlock, sometimes
 * re-enter, and sometimes downgrade (rdlock while writing, then unlock the write hold and
 * keep reading).
 *
 * Checks: a writer is alone (no reader, no other writer inside); readers never see a writer;
 * the counter writers increment loses nothing; writers' fencing tokens rise; a thread that
 * holds nothing gets EPERM from unlock and fence 0. Exclusion is only a warning after a lost
 * hold (see stress_mutex.c); after RS_ELOST the section unlocks what is left until EPERM.
 */
#include "stress.h"

#define READERS 4
#define WRITERS 2

static const char *g_name = "stress-rw";
static rs_client_t *g_c[2];
static rs_rwlock_t *g_rw[2];
static atomic_int g_readers, g_writer, g_violations, g_fence_errors, g_elost;
static atomic_long g_counter, g_writes;
static atomic_ullong g_last_fence;

typedef struct thr {
    int id, write, cl;
} thr_t;

static int take(rs_rwlock_t *rw, int write, int how, unsigned *seed)
{
    for (;;) {
        int rc;
        if (how == 0) {
            rc = write ? rs_rwlock_wrlock(rw) : rs_rwlock_rdlock(rw);
        } else if (how == 1) {
            rc = write ? rs_rwlock_trywrlock(rw) : rs_rwlock_tryrdlock(rw);
            if (rc == EBUSY) {
                st_sleep_ms(1 + (long)(st_rand(seed) % 3));
                continue;
            }
        } else {
            struct timespec dl = st_abs_in(5);
            rc = write ? rs_rwlock_timedwrlock(rw, &dl) : rs_rwlock_timedrdlock(rw, &dl);
            if (rc == ETIMEDOUT)
                continue;
        }
        return rc;
    }
}

/* One section's bookkeeping: once a hold of the section is found lost (RS_ELOST), the
 * library has cleared that hold entirely, so a later unlock of it is EPERM. */
typedef struct section {
    rs_rwlock_t *rw;
    int id, lost;
} section_t;

/* A call of the section that should succeed: 0, or RS_ELOST (the hold was lost). */
static void ok_or_lost(section_t *x, int rc, const char *what)
{
    if (rc == RS_ELOST) {
        x->lost = 1;
        atomic_fetch_add(&g_elost, 1);
    } else if (rc == EPERM && x->lost) {
        /* the lost hold was already cleared */
    } else if (rc) {
        FAILF("thread %d: %s: %d %s (%s)", x->id, what, rc, rs_strerror(rc),
              rs_client_lasterror(NULL));
    }
}

/* After a loss: unlock whatever the thread still holds, until EPERM. */
static void drain(section_t *x)
{
    int rc;
    while ((rc = rs_rwlock_unlock(x->rw)) == 0 || rc == RS_ELOST) {
    }
    if (rc != EPERM)
        FAILF("thread %d: draining after a lost hold: %d %s", x->id, rc, rs_strerror(rc));
}

static void read_section(void)
{
    atomic_fetch_add(&g_readers, 1);
    if (atomic_load(&g_writer))
        atomic_fetch_add(&g_violations, 1);
    st_sleep_ms(1);
    if (atomic_load(&g_writer))
        atomic_fetch_add(&g_violations, 1);
    atomic_fetch_sub(&g_readers, 1);
}

static void reader(section_t *x, int i)
{
    rs_rwlock_t *rw = x->rw;
    int reenter = i % 4 == 1;
    if (reenter)
        ok_or_lost(x, rs_rwlock_rdlock(rw), "read re-entry");
    if (i % 10 == 3)
        EXPECT_RC(rs_rwlock_wrlock(rw), EDEADLK); /* upgrade */
    if (rs_rwlock_fence(rw) != 0)
        FAILF("reader %d: write fence %llu without a write hold", x->id,
              (unsigned long long)rs_rwlock_fence(rw));
    read_section();
    if (i % 30 == x->id)
        st_sleep_ms(120); /* past a renewal */
    if (reenter && !x->lost)
        ok_or_lost(x, rs_rwlock_unlock(rw), "unlock (read re-entry)");
    ok_or_lost(x, rs_rwlock_unlock(rw), "unlock (read)");
}

static void writer(section_t *x, int i)
{
    rs_rwlock_t *rw = x->rw;
    if (atomic_exchange(&g_writer, 1) || atomic_load(&g_readers) > 0)
        atomic_fetch_add(&g_violations, 1);
    uint64_t f = rs_rwlock_fence(rw);
    if (f == 0 || f <= atomic_load(&g_last_fence))
        atomic_fetch_add(&g_fence_errors, 1);
    atomic_store(&g_last_fence, f);
    int reenter = i % 5 == 2;
    if (reenter) {
        ok_or_lost(x, rs_rwlock_wrlock(rw), "write re-entry");
        if (!x->lost && rs_rwlock_fence(rw) != f)
            FAILF("writer %d: fence changed on re-entry", x->id);
    }
    long v = atomic_load_explicit(&g_counter, memory_order_relaxed);
    if (i % 30 == x->id)
        st_sleep_ms(120);
    atomic_store_explicit(&g_counter, v + 1, memory_order_relaxed);
    atomic_fetch_add(&g_writes, 1);
    if (reenter && !x->lost)
        ok_or_lost(x, rs_rwlock_unlock(rw), "unlock (write re-entry)");
    if (i % 4 == 0 && !x->lost) {
        /* downgrade: take the read lock while writing, drop the write hold, keep reading */
        ok_or_lost(x, rs_rwlock_rdlock(rw), "rdlock (downgrade)");
        atomic_fetch_add(&g_readers, 1);
        atomic_store(&g_writer, 0);
        ok_or_lost(x, rs_rwlock_unlock(rw), "unlock (write, downgrade)");
        if (rs_rwlock_fence(rw) != 0)
            FAILF("writer %d: write fence after the write hold ended", x->id);
        atomic_fetch_sub(&g_readers, 1);
        read_section();
        ok_or_lost(x, rs_rwlock_unlock(rw), "unlock (read, after downgrade)");
    } else {
        atomic_store(&g_writer, 0);
        ok_or_lost(x, rs_rwlock_unlock(rw), "unlock (write)");
    }
}

static void *thr_main(void *arg)
{
    thr_t *t = arg;
    rs_rwlock_t *rw = g_rw[t->cl];
    unsigned seed = 65537u * (unsigned)t->id + 9;
    int iters = st_scaled(100);
    EXPECT_RC(rs_rwlock_unlock(rw), EPERM);
    for (int i = 0; i < iters; i++) {
        int rc = take(rw, t->write, (t->id + i) % 3, &seed);
        if (rc) {
            FAILF("thread %d: %s lock: %d %s (%s)", t->id, t->write ? "write" : "read", rc,
                  rs_strerror(rc), rs_client_lasterror(g_c[t->cl]));
            break;
        }
        section_t x = {rw, t->id, 0};
        if (t->write)
            writer(&x, i);
        else
            reader(&x, i);
        if (x.lost)
            drain(&x);
    }
    return NULL;
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server(&srv, "stress_rwlock");
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    for (int i = 0; i < 2; i++) {
        g_c[i] = st_open(&srv, prefix);
        if (rs_rwlock_init(&g_rw[i], g_c[i], g_name) != 0) {
            fprintf(stderr, "stress_rwlock: rs_rwlock_init: %s\n", rs_client_lasterror(g_c[i]));
            return 2;
        }
    }
    enum { N = READERS + WRITERS + 2 };
    pthread_t th[N];
    thr_t t[N];
    for (int i = 0; i < N; i++) {
        int write = i >= READERS && i < READERS + WRITERS ? 1 : i == N - 1;
        t[i] = (thr_t){i, write, i >= READERS + WRITERS};
        st_spawn(&th[i], thr_main, &t[i]);
    }
    st_chaos_start(&srv);
    st_join_all(th, N);
    st_chaos_stop();
    long want = atomic_load(&g_writes), got = atomic_load(&g_counter);
    long expect_writes = (long)(WRITERS + 1) * st_scaled(100);
    int lost = atomic_load(&st_lost) + atomic_load(&g_elost);
    int bad = atomic_load(&g_violations) + atomic_load(&g_fence_errors) + (got != want) +
              (want != expect_writes);
    if (bad && lost)
        fprintf(stderr, "stress_rwlock: WARNING: %d violation(s), %d fence error(s), %ld/%ld "
                "writes counted after %d lost hold(s): exclusion not checked\n",
                atomic_load(&g_violations), atomic_load(&g_fence_errors), got, expect_writes,
                lost);
    else if (bad)
        FAILF("%d exclusion violation(s), %d fence error(s), counter %ld, %ld writes, %ld "
              "expected", atomic_load(&g_violations), atomic_load(&g_fence_errors), got, want,
              expect_writes);
    for (int i = 0; i < 2; i++) {
        EXPECT_RC(rs_rwlock_destroy(g_rw[i]), 0);
        EXPECT_RC(rs_client_close(g_c[i]), 0);
    }
    return st_finish(&srv, t0);
}
