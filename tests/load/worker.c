/*
 * worker.c - one process of the load test (load.h): a client, a handle per (kind, name)
 * shared by its threads, and T threads that loop over the names until the shared end time.
 *
 * The mix per iteration: 70 % mutex, 8 % rwlock read, 4 % rwlock write, 9 % semaphore,
 * 9 % recursive mutex (a quarter of those re-enter once), on a name drawn at random. Every
 * wait is timed with a generous deadline (deadline_ms): a waiter that is not served by then
 * counts ETIMEDOUT, an error. An exclusive section is tiny: the exclusion counters and a
 * sched_yield() between the read and the write of the per-name counter, so the run measures
 * the library and Redis, not the work, yet a second holder would have a window to show in
 * (without the yield, --sabotage went unnoticed: sections of a microsecond hardly overlap). A
 * shared one (read hold, permit) sleeps 1 ms, so that holders do overlap and the table
 * shows sharing at work, not only exclusion.
 *
 * --sabotage tests the checks themselves: an eighth of the mutex sections then run without
 * the lock, and the run must report broken exclusion or lost increments.
 *
 * Any non-zero return is counted by code in the process's slot of the shared mapping (the
 * first few are printed with the library's message); so are on_lost calls and warnings.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "load.h"

typedef struct proc {
    const ld_config_t *cfg;
    ld_shared_t *sh;
    ld_proc_t *me;
    int index;
    rs_client_t *c;
    rs_mutex_t *mutex[LD_NAMES_MAX];
    rs_rmutex_t *rmutex[LD_NAMES_MAX];
    rs_rwlock_t *rwlock[LD_NAMES_MAX];
    rs_sem_t *sem[LD_NAMES_MAX];
} proc_t;

typedef struct thread {
    proc_t *p;
    int id;
    unsigned seed;
} thread_t;

static proc_t g_proc;
static atomic_int g_printed;

static void on_lost(const char *kind, const char *name, void *arg)
{
    (void)arg;
    atomic_fetch_add(&g_proc.me->onlost, 1);
    fprintf(stderr, "load: process %d: on_lost(%s, %s)\n", g_proc.index, kind, name);
}

static void lib_log(int level, const char *msg, void *arg)
{
    (void)arg;
    if (level < RS_LOG_WARN)
        return;
    if (atomic_fetch_add(&g_proc.me->warnings, 1) < 3 || g_proc.cfg->verbose)
        fprintf(stderr, "load: process %d: library: %s\n", g_proc.index, msg);
}

static void count_error(proc_t *p, const char *what, int name, int rc)
{
    atomic_fetch_add(&p->me->err[ld_err_slot(rc)], 1);
    if (atomic_fetch_add(&g_printed, 1) < 5)
        fprintf(stderr, "load: process %d: %s on name %d: %d %s (%s)\n", p->index, what, name,
                rc, rs_strerror(rc), rs_client_lasterror(p->c));
}

static unsigned next_rand(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (*seed >> 16) & 0x7fff;
}

static struct timespec abs_in(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_nsec + (ms % 1000) * 1000000LL;
    ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

static long long mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void record_wait(ld_shared_t *sh, long long us)
{
    int b = 0;
    while (b < LD_HIST - 1 && (1LL << b) <= us)
        b++;
    atomic_fetch_add(&sh->hist[b], 1);
    long long m = atomic_load(&sh->wait_max_us);
    while (us > m && !atomic_compare_exchange_weak(&sh->wait_max_us, &m, us)) {
    }
}

/* The section: raise the in-counter, check its limit, bump the exclusive counter with a
 * non-atomic read-modify-write, spin a little, lower the counter. Readers also check that
 * no writer is inside, and writers that no reader is (both sides raise before they look,
 * so one of two overlapping sections always sees the other). */
static void section(proc_t *p, int kind, int n)
{
    ld_name_t *nm = &p->sh->name[n];
    int limit = kind == K_SEM ? (int)p->cfg->sem_size : kind == K_RDLOCK ? 1 << 30 : 1;
    int now = atomic_fetch_add(&nm->in[kind], 1) + 1;
    int bad = now > limit;
    if (kind == K_RDLOCK && atomic_load(&nm->in[K_WRLOCK]) > 0)
        bad = 1;
    if (kind == K_WRLOCK && atomic_load(&nm->in[K_RDLOCK]) > 0)
        bad = 1;
    if (bad)
        atomic_fetch_add(&p->sh->violations[kind], 1);
    int m = atomic_load(&nm->max[kind]);
    while (now > m && !atomic_compare_exchange_weak(&nm->max[kind], &m, now)) {
    }
    atomic_fetch_add(&nm->acq[kind], 1);
    atomic_fetch_add(&p->me->acq[kind], 1);
    if (kind != K_RDLOCK && kind != K_SEM) {
        long v = atomic_load_explicit(&nm->count[kind], memory_order_relaxed);
        sched_yield(); /* a window for a second holder to show, if there were one */
        atomic_store_explicit(&nm->count[kind], v + 1, memory_order_relaxed);
    } else {
        tu_sleep_ms(1); /* shared holds last long enough to overlap, or sharing goes untested */
    }
    atomic_fetch_sub(&nm->in[kind], 1);
}

static void one(thread_t *t)
{
    proc_t *p = t->p;
    unsigned r = next_rand(&t->seed) % 100;
    int n = (int)(next_rand(&t->seed) % (unsigned)p->cfg->names);
    int kind = r < 70 ? K_MUTEX : r < 78 ? K_RDLOCK : r < 82 ? K_WRLOCK : r < 91 ? K_SEM : K_RMUTEX;
    struct timespec dl = abs_in(p->cfg->deadline_ms);
    long long t0 = mono_us();
    int rc, rc2 = 0, again = 0;
    switch (kind) {
    case K_MUTEX:
        if (p->cfg->sabotage && next_rand(&t->seed) % 8 == 0) {
            section(p, kind, n); /* --sabotage: no lock at all; the checks must fail */
            return;
        }
        if ((rc = rs_mutex_timedlock(p->mutex[n], &dl)) != 0)
            break;
        record_wait(p->sh, mono_us() - t0);
        section(p, kind, n);
        rc2 = rs_mutex_unlock(p->mutex[n]);
        break;
    case K_RDLOCK:
    case K_WRLOCK:
        rc = kind == K_RDLOCK ? rs_rwlock_timedrdlock(p->rwlock[n], &dl)
                              : rs_rwlock_timedwrlock(p->rwlock[n], &dl);
        if (rc)
            break;
        record_wait(p->sh, mono_us() - t0);
        section(p, kind, n);
        rc2 = rs_rwlock_unlock(p->rwlock[n]);
        break;
    case K_SEM:
        if ((rc = rs_sem_timedwait(p->sem[n], &dl)) != 0)
            break;
        record_wait(p->sh, mono_us() - t0);
        section(p, kind, n);
        rc2 = rs_sem_post(p->sem[n]);
        break;
    default:
        if ((rc = rs_rmutex_timedlock(p->rmutex[n], &dl)) != 0)
            break;
        record_wait(p->sh, mono_us() - t0);
        if (next_rand(&t->seed) % 4 == 0) {
            /* re-entry: immediate for the holder, whatever is queued */
            if ((rc2 = rs_rmutex_timedlock(p->rmutex[n], &dl)) == 0)
                again = 1;
            else
                count_error(p, "rmutex re-entry", n, rc2);
        }
        section(p, kind, n);
        if (again && (rc2 = rs_rmutex_unlock(p->rmutex[n])) != 0)
            count_error(p, "rmutex inner unlock", n, rc2);
        rc2 = rs_rmutex_unlock(p->rmutex[n]);
        break;
    }
    if (rc)
        count_error(p, ld_kind_names[kind], n, rc);
    else if (rc2)
        count_error(p, "release", n, rc2);
}

static void *thread_main(void *arg)
{
    thread_t *t = arg;
    while (tu_mono_ms() < atomic_load(&t->p->sh->end_ms))
        one(t);
    return NULL;
}

static int setup(proc_t *p)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = p->cfg->url;
    cfg.prefix = p->cfg->prefix;
    cfg.lease_ms = p->cfg->lease_ms;
    cfg.timeout_ms = 10000; /* 2 shared cores and hundreds of threads: Redis may lag */
    cfg.on_lost = on_lost;
    cfg.log = lib_log;
    int rc = rs_client_open(&p->c, &cfg);
    if (rc) {
        fprintf(stderr, "load: process %d: rs_client_open: %s\n", p->index,
                rs_client_lasterror(NULL));
        return rc;
    }
    for (int n = 0; n < p->cfg->names && rc == 0; n++) {
        char name[32];
        snprintf(name, sizeof name, "load-%d", n);
        if ((rc = rs_mutex_init(&p->mutex[n], p->c, name)) == 0 &&
            (rc = rs_rmutex_init(&p->rmutex[n], p->c, name)) == 0 &&
            (rc = rs_rwlock_init(&p->rwlock[n], p->c, name)) == 0)
            rc = rs_sem_init(&p->sem[n], p->c, name, p->cfg->sem_size);
    }
    if (rc)
        fprintf(stderr, "load: process %d: init: %s\n", p->index, rs_client_lasterror(p->c));
    return rc;
}

void ld_worker(const ld_config_t *cfg, ld_shared_t *sh, int i)
{
    proc_t *p = &g_proc;
    p->cfg = cfg;
    p->sh = sh;
    p->me = &sh->proc[i];
    p->index = i;
    int status = 0;
    if (setup(p) != 0) {
        atomic_store(&sh->go, -1);
        status = 2;
    }
    atomic_store(&p->me->ready, 1);
    while (atomic_load(&sh->go) == 0)
        tu_sleep_ms(2);
    if (status == 0 && atomic_load(&sh->go) > 0) {
        pthread_t th[LD_THREADS_MAX];
        thread_t t[LD_THREADS_MAX];
        int started = 0;
        for (int k = 0; k < cfg->threads; k++) {
            t[k] = (thread_t){p, k, cfg->seed ^ (unsigned)(i * 7919 + k * 104729 + 1)};
            if (pthread_create(&th[k], NULL, thread_main, &t[k]) != 0) {
                fprintf(stderr, "load: process %d: pthread_create failed\n", i);
                status = 2;
                break;
            }
            started++;
        }
        for (int k = 0; k < started; k++)
            pthread_join(th[k], NULL);
    }
    for (int n = 0; n < cfg->names; n++) {
        rs_mutex_destroy(p->mutex[n]);
        rs_rmutex_destroy(p->rmutex[n]);
        rs_rwlock_destroy(p->rwlock[n]);
        rs_sem_destroy(p->sem[n]);
    }
    int rc = rs_client_close(p->c);
    if (rc) {
        fprintf(stderr, "load: process %d: rs_client_close: %d %s\n", i, rc, rs_strerror(rc));
        status = status ? status : 1;
    }
    fflush(stderr);
    _exit(status);
}
