/*
 * mutex.c - replacing a pthread mutex with a redisync mutex.
 *
 *   build/examples/mutex [URL]        (URL: argv[1], else $REDISYNC_URL, else
 *                                      redis://127.0.0.1:6379)
 *
 * A counter is shared by several processes with two threads each (it lives in shared
 * memory here; in real life it would be a file, a row, a remote service). Every increment
 * reads the counter, pauses, and writes it back: without a lock, increments get lost. A
 * pthread mutex cannot protect it across processes (or machines); rs_mutex_t can, with the
 * same shape of code:
 *
 *     pthread_mutex_t m;                  rs_mutex_t *m;
 *     pthread_mutex_init(&m, NULL);       rs_mutex_init(&m, client, "counter");
 *     pthread_mutex_lock(&m);             rs_mutex_lock(m);
 *     ...                                 ...   (rs_mutex_fence(m): this hold's token)
 *     pthread_mutex_unlock(&m);           rs_mutex_unlock(m);   (RS_ELOST: hold was lost)
 *     pthread_mutex_destroy(&m);          rs_mutex_destroy(m);
 *
 * It also shows fencing tokens: the "resource" remembers the highest token it has seen and
 * would refuse a write carrying a lower one (a holder that lost its lease without noticing).
 *
 * Every process opens its own client after fork(): a client opened before fork() is
 * unusable in the child. Exits 0 when no increment was lost and the tokens only rose.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <redisync.h>

#define NPROC 3   /* processes */
#define NTHREAD 2 /* threads per process, sharing one handle (like one pthread_mutex_t) */
#define NINCR 50  /* increments per thread */

/* The shared resource. */
struct resource {
    long counter;               /* protected by the distributed mutex, and only by it */
    _Atomic uint64_t max_fence; /* highest fencing token seen */
    atomic_int stale_writes;    /* writes that came with a token lower than one seen before */
};

static struct resource *res;
static const char *url;
static char lock_name[64];

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* What a fenced resource does: accept a write only with a token >= the highest seen. */
static void write_counter(long value, uint64_t fence)
{
    uint64_t seen = atomic_load(&res->max_fence);
    while (fence > seen && !atomic_compare_exchange_weak(&res->max_fence, &seen, fence)) {
    }
    if (fence < seen) {
        atomic_fetch_add(&res->stale_writes, 1);
        return; /* refused */
    }
    res->counter = value;
}

static void *worker_thread(void *arg)
{
    rs_mutex_t *m = arg;
    for (int i = 0; i < NINCR; i++) {
        int rc = rs_mutex_lock(m);
        if (rc) {
            fprintf(stderr, "mutex: lock: %s\n", rs_strerror(rc));
            return (void *)1;
        }
        long v = res->counter; /* read ... */
        pause_us(200);         /* ... think (the window where increments get lost) ... */
        write_counter(v + 1, rs_mutex_fence(m)); /* ... write */
        rc = rs_mutex_unlock(m);
        if (rc) {
            fprintf(stderr, "mutex: unlock: %s\n", rs_strerror(rc));
            return (void *)1;
        }
    }
    return NULL;
}

static int worker_process(int id)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *client;
    int rc = rs_client_open(&client, &cfg);
    if (rc) {
        fprintf(stderr, "mutex: process %d: %s\n", id, rs_client_lasterror(NULL));
        return 1;
    }
    rs_mutex_t *m;
    rc = rs_mutex_init(&m, client, lock_name);
    if (rc) {
        fprintf(stderr, "mutex: init: %s\n", rs_client_lasterror(client));
        rs_client_close(client);
        return 1;
    }
    pthread_t t[NTHREAD];
    int failed = 0;
    for (int i = 0; i < NTHREAD; i++)
        if (pthread_create(&t[i], NULL, worker_thread, m) != 0)
            return 1;
    for (int i = 0; i < NTHREAD; i++) {
        void *r;
        pthread_join(t[i], &r);
        failed |= r != NULL;
    }
    rs_mutex_destroy(m);
    rs_client_close(client);
    return failed;
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : NULL; /* NULL: $REDISYNC_URL, else redis://127.0.0.1:6379 */
    snprintf(lock_name, sizeof lock_name, "examples:mutex:%ld", (long)getpid());

    /* check the address once here, for a clear message */
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *probe;
    if (rs_client_open(&probe, &cfg) != 0) {
        fprintf(stderr, "mutex: %s\n", rs_client_lasterror(NULL));
        return 1;
    }
    rs_client_close(probe);

    res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) {
        perror("mutex: mmap");
        return 1;
    }
    memset(res, 0, sizeof *res);

    long expected = (long)NPROC * NTHREAD * NINCR;
    printf("mutex: %d processes x %d threads each add 1 to a shared counter %d times,\n"
           "       each increment a read, a 200 us pause and a write, under the rs_mutex_t "
           "\"%s\"\n",
           NPROC, NTHREAD, NINCR, lock_name);
    fflush(stdout);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t kids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        kids[i] = fork();
        if (kids[i] < 0) {
            perror("mutex: fork");
            return 1;
        }
        if (kids[i] == 0)
            _exit(worker_process(i));
    }
    int failed = 0;
    for (int i = 0; i < NPROC; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;

    printf("mutex: counter = %ld (expected %ld) in %.2f s; highest fencing token %" PRIu64
           "; stale writes refused: %d\n",
           res->counter, expected, secs, atomic_load(&res->max_fence),
           atomic_load(&res->stale_writes));
    if (failed || res->counter != expected || atomic_load(&res->stale_writes) != 0) {
        printf("mutex: FAILED\n");
        return 1;
    }
    printf("mutex: ok: no increment lost\n");
    return 0;
}
