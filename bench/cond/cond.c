/*
 * cond.c - the condition variable's wake-up latency (`make bench`, issue 14's target:
 * signal -> woken waiter holding the mutex, median, at most the mutex's handoff plus one
 * round trip, measured in the same run).
 *
 * One redis-server, two clients (the signaller's and the waiter's), and in the same run:
 *   rtt       one round trip: rs_cond_signal with nobody waiting (one EVALSHA, the script's
 *             shortest path)
 *   lock      one uncontended rs_mutex_lock (one EVALSHA of the mutex's acquire, and the
 *             hold's registration): the round trip a woken waiter makes; unlocked untimed
 *   handoff   the mutex's handoff: the holder calls rs_mutex_unlock -> the waiter blocked in
 *             rs_mutex_lock (queued) returns holding it
 *   signal    the waiter sleeps in rs_cond_wait (queued, the mutex released); the signaller,
 *             not holding the mutex, calls rs_cond_signal -> the waiter's wait returns
 *             holding the mutex
 *   signal+unlock  the same, with the signaller holding the mutex: rs_cond_signal then
 *             rs_mutex_unlock (the pthread habit) -> the waiter's wait returns holding it
 * Each case runs ROUNDS times after WARMUP; medians and 99th percentiles in us, and the
 * verdict of the target for both signal cases.
 * Usage: redisync-bench-cond [ROUNDS]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"

#define WARMUP 20

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static double q_us(long long *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_ll);
    int i = (int)(q * (n - 1) + 0.5);
    return (double)v[i] / 1000.0;
}

typedef struct shared {
    rs_mutex_t *m;    /* the waiter's handle */
    rs_cond_t *cv;
    int mode;         /* 0: lock (handoff), 1: cond wait */
    int rounds;
    atomic_int go;    /* round number the waiter may start */
    atomic_llong t1;  /* when the waiter's call returned */
    atomic_int back;  /* rounds the waiter finished (signalled on cv_back: the main thread
                         sleeps, so that it takes no CPU from the path it measures) */
    pthread_mutex_t mu;
    pthread_cond_t cv_back;
    atomic_int errors;
} shared_t;

static void *waiter(void *arg)
{
    shared_t *sh = arg;
    for (int r = 1; r <= sh->rounds; r++) {
        while (atomic_load(&sh->go) < r)
            sched_yield();
        int rc;
        if (sh->mode == 0) {
            rc = rs_mutex_lock(sh->m); /* blocks: the main thread holds it */
        } else {
            rc = rs_mutex_lock(sh->m);
            if (rc == 0)
                rc = rs_cond_wait(sh->cv, sh->m);
        }
        atomic_store(&sh->t1, now_ns());
        if (rc != 0 || rs_mutex_fence(sh->m) == 0)
            atomic_fetch_add(&sh->errors, 1);
        rs_mutex_unlock(sh->m);
        pthread_mutex_lock(&sh->mu);
        atomic_store(&sh->back, r);
        pthread_cond_signal(&sh->cv_back);
        pthread_mutex_unlock(&sh->mu);
    }
    return NULL;
}

/* Polls Redis until the integer reply of "VERB KEY [FIELD]" is want. */
static void await_int(const ts_server_t *s, long long want, const char *verb, const char *key,
                      const char *field)
{
    for (int i = 0; i < 200000; i++) {
        long long v = field ? ts_cmd_int(s, "%s %s %s", verb, key, field)
                            : ts_cmd_int(s, "%s %s", verb, key);
        if (v == want)
            return;
        usleep(50);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    if (rounds < 10) {
        fprintf(stderr, "usage: redisync-bench-cond [ROUNDS >= 10]\n");
        return 2;
    }
    int total = rounds + WARMUP;
    ts_server_t s;
    if (ts_server_start(&s, NULL) != 0)
        return 1;
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    rs_client_t *c1, *c2;
    if (rs_client_open(&c1, &cfg) || rs_client_open(&c2, &cfg)) {
        fprintf(stderr, "bench-cond: open: %s\n", rs_client_lasterror(NULL));
        ts_server_stop(&s);
        return 1;
    }
    rs_mutex_t *m1, *m2;
    rs_cond_t *cv1, *cv2, *idle;
    if (rs_mutex_init(&m1, c1, "bc") || rs_mutex_init(&m2, c2, "bc") ||
        rs_cond_init(&cv1, c1, "bcv") || rs_cond_init(&cv2, c2, "bcv") ||
        rs_cond_init(&idle, c1, "idle")) {
        fprintf(stderr, "bench-cond: init: %s\n", rs_client_lasterror(c1));
        return 1;
    }
    long long *rtt = calloc((size_t)total, sizeof(long long));
    long long *hand = calloc((size_t)total, sizeof(long long));
    long long *sig = calloc((size_t)total, sizeof(long long));
    long long *sigu = calloc((size_t)total, sizeof(long long));
    long long *lk = calloc((size_t)total, sizeof(long long));
    if (!rtt || !hand || !sig || !sigu || !lk)
        return 1;

    /* rtt: interleaved through the other cases' rounds would disturb them; its own loop */
    for (int i = 0; i < total; i++) {
        long long t0 = now_ns();
        if (rs_cond_signal(idle) != 0)
            return 1;
        rtt[i] = now_ns() - t0;
        t0 = now_ns();
        if (rs_mutex_lock(m1) != 0)
            return 1;
        lk[i] = now_ns() - t0;
        rs_mutex_unlock(m1);
    }

    /* handoff, then the two signal cases, each with a fresh waiter thread */
    for (int mode = 0; mode < 3; mode++) {
        shared_t sh = {.m = m2, .cv = cv2, .mode = mode == 0 ? 0 : 1, .rounds = total};
        pthread_mutex_init(&sh.mu, NULL);
        pthread_cond_init(&sh.cv_back, NULL);
        pthread_t th;
        if (mode == 0 && rs_mutex_lock(m1) != 0)
            return 1;
        pthread_create(&th, NULL, waiter, &sh);
        for (int r = 1; r <= total; r++) {
            atomic_store(&sh.go, r);
            long long t0;
            if (mode == 0) {
                /* the waiter is queued on the mutex */
                await_int(&s, 1, "ZCARD", "rs:{bc}:mutex:q", NULL);
                t0 = now_ns();
                rs_mutex_unlock(m1);
            } else {
                /* the waiter is queued on the condition and has released the mutex */
                await_int(&s, 1, "ZCARD", "rs:{bcv}:cond", NULL);
                await_int(&s, 0, "HEXISTS", "rs:{bc}:mutex", "o");
                if (mode == 1) {
                    t0 = now_ns();
                    rs_cond_signal(cv1);
                } else {
                    rs_mutex_lock(m1);
                    t0 = now_ns();
                    rs_cond_signal(cv1);
                    rs_mutex_unlock(m1);
                }
            }
            pthread_mutex_lock(&sh.mu);
            while (atomic_load(&sh.back) < r)
                pthread_cond_wait(&sh.cv_back, &sh.mu);
            pthread_mutex_unlock(&sh.mu);
            long long d = atomic_load(&sh.t1) - t0;
            (mode == 0 ? hand : mode == 1 ? sig : sigu)[r - 1] = d;
            if (mode == 0 && r < total)
                rs_mutex_lock(m1); /* hold it again for the next round */
        }
        pthread_join(th, NULL);
        if (atomic_load(&sh.errors)) {
            fprintf(stderr, "bench-cond: %d rounds failed: %s\n", atomic_load(&sh.errors),
                    rs_client_lasterror(c2));
            return 1;
        }
    }

    double r50 = q_us(rtt + WARMUP, rounds, 0.5), r99 = q_us(rtt + WARMUP, rounds, 0.99);
    double l50 = q_us(lk + WARMUP, rounds, 0.5), l99 = q_us(lk + WARMUP, rounds, 0.99);
    double h50 = q_us(hand + WARMUP, rounds, 0.5), h99 = q_us(hand + WARMUP, rounds, 0.99);
    double s50 = q_us(sig + WARMUP, rounds, 0.5), s99 = q_us(sig + WARMUP, rounds, 0.99);
    double u50 = q_us(sigu + WARMUP, rounds, 0.5), u99 = q_us(sigu + WARMUP, rounds, 0.99);
    printf("bench-cond: %d rounds each (after %d warm-up), one redis-server, two clients\n",
           rounds, WARMUP);
    printf("%-58s %9s %9s\n", "", "median", "p99");
    printf("%-58s %6.1f us %6.1f us\n", "rtt: one round trip (signal, nobody waiting)", r50, r99);
    printf("%-58s %6.1f us %6.1f us\n", "lock: one uncontended rs_mutex_lock", l50, l99);
    printf("%-58s %6.1f us %6.1f us\n", "handoff: unlock called -> waiter's lock returns", h50,
           h99);
    printf("%-58s %6.1f us %6.1f us\n", "signal -> wait returns holding the mutex", s50, s99);
    printf("%-58s %6.1f us %6.1f us\n", "signal + unlock (under the mutex) -> wait returns", u50,
           u99);
    double target = h50 + r50, target_l = h50 + l50;
    printf("target: median <= handoff + rtt = %.1f us: signal %.1f us %s, signal + unlock "
           "%.1f us %s\n",
           target, s50, s50 <= target ? "PASS" : "MISS", u50, u50 <= target ? "PASS" : "MISS");
    printf("        median <= handoff + lock = %.1f us: signal %s, signal + unlock %s\n",
           target_l, s50 <= target_l ? "PASS" : "MISS", u50 <= target_l ? "PASS" : "MISS");
    rs_cond_destroy(cv1);
    rs_cond_destroy(cv2);
    rs_cond_destroy(idle);
    rs_mutex_destroy(m1);
    rs_mutex_destroy(m2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
    free(rtt);
    free(hand);
    free(sig);
    free(sigu);
    free(lk);
    return 0;
}
