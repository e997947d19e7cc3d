/*
 * memory.c - what handles and clients cost in memory, and whether lock/unlock leaks
 * (`make bench`, or `make bench-memory`; issue targets: a handle under 256 bytes plus its
 * name, a client under 64 KiB plus its connections, no growth over a million lock/unlock
 * cycles).
 *
 * Heap in use is glibc's mallinfo2(): uordblks (bytes in allocated chunks, chunk headers
 * included, every arena) + hblkhd (mmap'd blocks). Each figure is a delta over many objects
 * made in a row, divided by their number, so the allocator's granularity averages out.
 *
 *   handles  10,000 mutex handles with 7-byte names, 10,000 with 200-byte names, and the same
 *            for the read-write lock and the semaphore (rs_sem_init also creates it in Redis:
 *            one round trip each), on one client. Per handle, and per handle minus its name.
 *   clients  100 clients opened against one server. rs_client_open leaves one pooled
 *            connection per client; the bench then frees those (rs__conn_pool_free, the
 *            library's own, which leaves the client usable) to tell the client from its
 *            connections, and finally runs one lock + unlock per client (which starts its
 *            watchdog thread with its own connection, and pools a connection again).
 *   cycles   CYCLES (1,000,000) uncontended rs_mutex_lock + rs_mutex_unlock, split over
 *            THREADS (4) threads of one client, each on its own mutex, in 20 phases. Heap in
 *            use and the process's RSS are sampled between phases (every thread waiting at a
 *            barrier, nothing held); growth after the first phase (the warm-up) must stay
 *            within GROWTH_TOLERANCE (under 0.07 bytes per cycle).
 *
 * Usage: redisync-memory [CYCLES] [THREADS]. Exit status 0 whatever the figures (it is a
 * benchmark), 1 on errors.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h" /* rs_handle_t, rs_call_t, rs__conn_pool_free */
#include "redis_server.h"
#include "redisync.h"

#define HANDLES 10000
#define LONG_NAME 200
#define CLIENTS 100
#define PHASES 20
#define GROWTH_TOLERANCE (64 * 1024) /* bytes, heap and RSS alike */
#define TARGET_HANDLE 256            /* bytes beyond the name */
#define TARGET_CLIENT (64 * 1024)    /* bytes beyond the connections */

static int g_errors;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("memory: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_errors++;
}

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Heap in use: allocated chunks of every arena plus mmap'd blocks. */
static long long heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (long long)mi.uordblks + (long long)mi.hblkhd;
}

static long long rss_bytes(void)
{
    long long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lld %lld", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * sysconf(_SC_PAGESIZE);
}

static const char *verdict(int ok)
{
    return ok ? "PASS" : "MISS";
}

/* ----- handles ------------------------------------------------------------------------- */
enum { K_MUTEX, K_RWLOCK, K_SEM };
static const char *const kind_names[] = {"mutex", "rwlock", "sem"};

static int handle_init(int kind, void **h, rs_client_t *c, const char *name)
{
    switch (kind) {
    case K_MUTEX:
        return rs_mutex_init((rs_mutex_t **)h, c, name);
    case K_RWLOCK:
        return rs_rwlock_init((rs_rwlock_t **)h, c, name);
    default:
        return rs_sem_init((rs_sem_t **)h, c, name, 1);
    }
}

static void handle_destroy(int kind, void *h)
{
    if (kind == K_MUTEX)
        rs_mutex_destroy(h);
    else if (kind == K_RWLOCK)
        rs_rwlock_destroy(h);
    else
        rs_sem_destroy(h);
}

/* Makes HANDLES handles of kind with names of namelen bytes; prints the cost per handle.
 * Returns 1 if it is under TARGET_HANDLE beyond the name, 0 if not, -1 on errors. */
static int measure_handles(rs_client_t *c, int kind, size_t namelen, void **hs)
{
    char name[LONG_NAME + 1];
    memset(name, 'n', sizeof name);
    long long before = heap_in_use();
    for (int i = 0; i < HANDLES; i++) {
        /* unique names of exactly namelen bytes: a number, padded */
        char num[16];
        int nl = snprintf(num, sizeof num, "%d", i);
        memset(name, 'n', namelen);
        memcpy(name + namelen - (size_t)nl, num, (size_t)nl);
        name[namelen] = '\0';
        int rc = handle_init(kind, &hs[i], c, name);
        if (rc) {
            fail("%s handle %d: %s (%s)", kind_names[kind], i, rs_strerror(rc),
                 rs_client_lasterror(c));
            for (int j = 0; j < i; j++)
                handle_destroy(kind, hs[j]);
            return -1;
        }
    }
    long long after = heap_in_use();
    for (int i = 0; i < HANDLES; i++)
        handle_destroy(kind, hs[i]);
    long long freed = heap_in_use();
    double per = (double)(after - before) / HANDLES;
    double beyond = per - (double)namelen;
    int ok = beyond < TARGET_HANDLE;
    printf("  %-6s  name %3zu B  %7.1f B per handle  %7.1f B beyond the name  %s   "
           "(left after destroying them all: %lld B)\n",
           kind_names[kind], namelen, per, beyond, verdict(ok), freed - before);
    return ok;
}

/* ----- lock/unlock cycles -------------------------------------------------------------- */
typedef struct cycles {
    rs_client_t *c;
    pthread_barrier_t start, end;
    long per_phase;           /* cycles per thread per phase */
    int failed;
} cycles_t;

typedef struct worker {
    cycles_t *cy;
    rs_mutex_t *m;
    pthread_t t;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    cycles_t *cy = w->cy;
    for (int ph = 0; ph < PHASES; ph++) {
        pthread_barrier_wait(&cy->start);
        for (long i = 0; i < cy->per_phase && !cy->failed; i++) {
            int rc = rs_mutex_lock(w->m);
            if (rc == 0)
                rc = rs_mutex_unlock(w->m);
            if (rc) {
                fail("lock/unlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(cy->c));
                cy->failed = 1;
            }
        }
        pthread_barrier_wait(&cy->end);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long cycles = argc > 1 ? atol(argv[1]) : 1000000;
    int nthreads = argc > 2 ? atoi(argv[2]) : 4;
    if (cycles < PHASES || nthreads < 1 || nthreads > 64) {
        fprintf(stderr, "usage: redisync-memory [CYCLES >= %d] [THREADS 1..64]\n", PHASES);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    ts_server_t srv;
    if (ts_server_start(&srv, NULL) != 0) {
        fprintf(stderr, "memory: cannot start redis-server\n");
        return 1;
    }
    double t_start = mono_s();
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = srv.url;
    rs_client_t *c = NULL;
    void **hs = calloc(HANDLES, sizeof *hs);
    rs_client_t **cs = calloc(CLIENTS, sizeof *cs);
    rs_mutex_t **ms = calloc(CLIENTS, sizeof *ms);
    if (!hs || !cs || !ms || rs_client_open(&c, &cfg)) {
        fail("setup: %s", rs_client_lasterror(NULL));
        goto out;
    }

    /* --- handles --- */
    printf("memory: heap in use = mallinfo2() uordblks + hblkhd (chunk headers included); "
           "sizeof(rs_handle_t) = %zu,\n        rs_call_t (on the stack, per call) = %zu\n",
           sizeof(rs_handle_t), sizeof(rs_call_t));
    printf("handles: %d of each, on one client (target: under %d B beyond the name)\n", HANDLES,
           TARGET_HANDLE);
    int handles_ok = 1;
    for (int kind = K_MUTEX; kind <= K_SEM; kind++) {
        static const size_t lens[2] = {7, LONG_NAME};
        for (int l = 0; l < 2; l++) {
            int ok = measure_handles(c, kind, lens[l], hs);
            if (ok < 0)
                goto out;
            handles_ok &= ok;
        }
    }

    /* --- clients --- */
    long long h0 = heap_in_use();
    for (int i = 0; i < CLIENTS; i++)
        if (rs_client_open(&cs[i], &cfg)) {
            fail("client %d: %s", i, rs_client_lasterror(NULL));
            goto out;
        }
    long long h1 = heap_in_use();
    for (int i = 0; i < CLIENTS; i++)
        rs__conn_pool_free(cs[i]);
    long long h2 = heap_in_use();
    for (int i = 0; i < CLIENTS; i++) {
        int rc = rs_mutex_init(&ms[i], cs[i], "memory:client");
        if (rc == 0)
            rc = rs_mutex_lock(ms[i]);
        if (rc == 0)
            rc = rs_mutex_unlock(ms[i]);
        if (rc) {
            fail("client %d lock/unlock: %s", i, rs_client_lasterror(cs[i]));
            goto out;
        }
    }
    long long h3 = heap_in_use();
    double with_conn = (double)(h1 - h0) / CLIENTS, no_conn = (double)(h2 - h0) / CLIENTS;
    double used = (double)(h3 - h0) / CLIENTS;
    printf("clients: %d opened against one server (target: under %d B beyond the "
           "connections)\n", CLIENTS, TARGET_CLIENT);
    printf("  open, with its pooled connection      %8.1f B per client\n", with_conn);
    printf("  open, connections freed               %8.1f B per client  %s\n", no_conn,
           verdict(no_conn < TARGET_CLIENT));
    printf("  so one connection (hiredis context)   %8.1f B\n", with_conn - no_conn);
    printf("  after one lock + unlock (watchdog thread and its connection, a pooled connection "
           "again,\n  the handle)                           %8.1f B per client\n", used);
    for (int i = 0; i < CLIENTS; i++) {
        rs_mutex_destroy(ms[i]);
        ms[i] = NULL;
        rs_client_close(cs[i]);
        cs[i] = NULL;
    }

    /* --- lock/unlock cycles --- */
    cycles_t cy;
    memset(&cy, 0, sizeof cy);
    cy.c = c;
    cy.per_phase = cycles / PHASES / nthreads;
    if (cy.per_phase < 1)
        cy.per_phase = 1;
    long total = cy.per_phase * nthreads * PHASES;
    pthread_barrier_init(&cy.start, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&cy.end, NULL, (unsigned)nthreads + 1);
    worker_t w[64];
    for (int i = 0; i < nthreads; i++) {
        char name[32];
        snprintf(name, sizeof name, "memory:cycle:%d", i);
        w[i].cy = &cy;
        if (rs_mutex_init(&w[i].m, c, name)) {
            fail("mutex: %s", rs_client_lasterror(c));
            for (int j = 0; j < i; j++)
                rs_mutex_destroy(w[j].m);
            goto out;
        }
    }
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&w[i].t, NULL, worker_main, &w[i]) != 0) {
            /* the started threads wait at a barrier counting all: end the process (the
             * server is killed at exit by tests/support/redis_server.c) */
            fail("pthread_create");
            exit(1);
        }
    printf("cycles: %ld uncontended rs_mutex_lock + rs_mutex_unlock, %d threads of one client "
           "(each on its own mutex),\n        %d phases of %ld; heap and RSS sampled between "
           "phases\n", total, nthreads, PHASES, cy.per_phase * nthreads);
    long long heap[PHASES], rss[PHASES];
    double t0 = mono_s(), t_warm = 0;
    for (int ph = 0; ph < PHASES; ph++) {
        pthread_barrier_wait(&cy.start);
        pthread_barrier_wait(&cy.end);
        heap[ph] = heap_in_use();
        rss[ph] = rss_bytes();
        if (ph == 0)
            t_warm = mono_s();
    }
    double t1 = mono_s();
    for (int i = 0; i < nthreads; i++) {
        pthread_join(w[i].t, NULL);
        rs_mutex_destroy(w[i].m);
    }
    if (cy.failed)
        goto out;
    long long heap_max = heap[1], rss_max = rss[1];
    for (int ph = 1; ph < PHASES; ph++) {
        if (heap[ph] > heap_max)
            heap_max = heap[ph];
        if (rss[ph] > rss_max)
            rss_max = rss[ph];
    }
    long after_warm = total - cy.per_phase * nthreads;
    long long heap_growth = heap[PHASES - 1] - heap[0], rss_growth = rss[PHASES - 1] - rss[0];
    printf("  took %.1f s: %.0f cycles/s, %.1f us per cycle per thread (warm-up phase %.1f s)\n",
           t1 - t0, (double)total / (t1 - t0), (t1 - t0) * 1e6 * nthreads / (double)total,
           t_warm - t0);
    printf("  heap in use after the warm-up %lld B, at the end %lld B, highest between %lld B: "
           "growth %+lld B\n  (%+.4f B per cycle)  %s\n", heap[0], heap[PHASES - 1], heap_max,
           heap_growth, (double)heap_growth / (double)after_warm,
           verdict(heap_growth <= GROWTH_TOLERANCE && heap_max - heap[0] <= GROWTH_TOLERANCE));
    printf("  RSS after the warm-up %lld KiB, at the end %lld KiB, highest between %lld KiB: "
           "growth %+lld KiB  %s\n", rss[0] / 1024, rss[PHASES - 1] / 1024, rss_max / 1024,
           rss_growth / 1024,
           verdict(rss_growth <= GROWTH_TOLERANCE && rss_max - rss[0] <= GROWTH_TOLERANCE));
    printf("  (PASS: no more than %d KiB above the warm-up's figure at any sample after it)\n",
           GROWTH_TOLERANCE / 1024);
    printf("memory: handles %s, clients %s; took %.1f s\n", verdict(handles_ok),
           verdict(no_conn < TARGET_CLIENT), mono_s() - t_start);

out:
    for (int i = 0; i < CLIENTS && ms && cs; i++) {
        rs_mutex_destroy(ms[i]);
        rs_client_close(cs[i]);
    }
    rs_client_close(c);
    free(hs);
    free(cs);
    free(ms);
    ts_server_stop(&srv);
    return g_errors ? 1 : 0;
}
