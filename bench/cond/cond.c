/*
 * cond.c - the condition variable's wake-up latency (`make bench`, issue 14's target:
 * signal -> woken waiter holding the mutex, median, at most the mutex's handoff plus one
 * round trip, measured in the same run).
 *
 * One redis-server, two clients (the signaller's and the waiter's). Every round measures
 * each case once, in this order, so that the load of a shared machine, which changes from
 * second to second, weighs on all of them alike (medians of separate blocks of rounds
 * differed by 2x from block to block on a loaded VM):
 *   ping      one raw round trip: PING on a plain hiredis connection
 *   rtt       one library round trip: rs_cond_signal with nobody waiting (one EVALSHA, the
 *             script's shortest path)
 *   lock      one uncontended rs_mutex_lock (the mutex's fast path: one EVALSHA, and the
 *             hold's registration): what a woken waiter sends; unlocked untimed
 *   handoff   the mutex's handoff: the holder calls rs_mutex_unlock -> the waiter blocked in
 *             rs_mutex_lock (queued) returns holding it
 *   signal    the waiter sleeps in rs_cond_wait (queued, the mutex released); the signaller,
 *             not holding the mutex, calls rs_cond_signal -> the waiter's wait returns
 *             holding the mutex
 *   signal+unlock  the same, with the signaller holding the mutex: rs_cond_signal then
 *             rs_mutex_unlock (the pthread habit) -> the waiter's wait returns holding it
 * Before handoff and signal the waiter is seen queued in Redis and then left SETTLE us (50)
 * to fall asleep, so that both start from a sleeping waiter. Medians and 99th percentiles in
 * us over ROUNDS rounds after WARMUP, the median of the per-round difference signal -
 * handoff (what the wake-up costs beyond a handoff: the waiter's re-acquisition), and the
 * target's verdict: signal <= handoff + ping (PASS/MISS), also shown against rtt, and paired:
 * the median of the per-round signal - handoff against the median ping.
 * The woken waiter's re-acquisition is sent by the subscriber thread as the signal's message
 * arrives (primitives/cond/cond.c, relock_t), so its round trip overlaps the waiter's wake-up.
 * Usage: redisync-bench-cond [ROUNDS [SETTLE]]
 */
#include <hiredis.h>
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

enum { C_PING, C_RTT, C_LOCK, C_HAND, C_SIG, C_SIGU, C_DIFF, NCASES };

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

/* The waiter thread, told what to do by the main thread one round at a time. */
typedef struct shared {
    rs_mutex_t *m; /* the waiter's handle */
    rs_cond_t *cv;
    pthread_mutex_t mu;
    pthread_cond_t cv_go, cv_back;
    int go;         /* round the waiter may start (0: none yet, -1: exit) */
    int mode;       /* of that round: 0 lock (handoff), 1 cond wait */
    int back;       /* rounds the waiter finished */
    long long t1;   /* when the waiter's call returned */
    atomic_int errors;
} shared_t;

static void *waiter(void *arg)
{
    shared_t *sh = arg;
    for (int r = 1;; r++) {
        pthread_mutex_lock(&sh->mu);
        while (sh->go != -1 && sh->go < r)
            pthread_cond_wait(&sh->cv_go, &sh->mu);
        int mode = sh->mode, stop = sh->go == -1;
        pthread_mutex_unlock(&sh->mu);
        if (stop)
            return NULL;
        int rc = rs_mutex_lock(sh->m); /* mode 0: blocks, the main thread holds it */
        if (rc == 0 && mode == 1)
            rc = rs_cond_wait(sh->cv, sh->m);
        long long t1 = now_ns();
        if (rc != 0 || rs_mutex_fence(sh->m) == 0)
            atomic_fetch_add(&sh->errors, 1);
        rs_mutex_unlock(sh->m);
        pthread_mutex_lock(&sh->mu);
        sh->t1 = t1;
        sh->back = r;
        pthread_cond_signal(&sh->cv_back);
        pthread_mutex_unlock(&sh->mu);
    }
}

static void start_round(shared_t *sh, int r, int mode)
{
    pthread_mutex_lock(&sh->mu);
    sh->go = r;
    sh->mode = mode;
    pthread_cond_signal(&sh->cv_go);
    pthread_mutex_unlock(&sh->mu);
}

/* Sleeps until the waiter finished round r; when its call returned. */
static long long end_round(shared_t *sh, int r)
{
    pthread_mutex_lock(&sh->mu);
    while (sh->back < r)
        pthread_cond_wait(&sh->cv_back, &sh->mu);
    long long t1 = sh->t1;
    pthread_mutex_unlock(&sh->mu);
    return t1;
}

/* Polls Redis on ctx until the integer reply of the command is want (50 us apart). */
static int await_int(redisContext *ctx, long long want, const char *cmd)
{
    for (int i = 0; i < 100000; i++) {
        redisReply *rep = redisCommand(ctx, cmd);
        if (!rep)
            return -1;
        long long v = rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
        freeReplyObject(rep);
        if (v == want)
            return 0;
        usleep(50);
    }
    return -1;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    int settle_us = argc > 2 ? atoi(argv[2]) : 50;
    if (rounds < 10 || settle_us < 0) {
        fprintf(stderr, "usage: redisync-bench-cond [ROUNDS >= 10 [SETTLE_US]]\n");
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
    redisContext *raw = ts_connect(&s);
    if (!raw || rs_mutex_init(&m1, c1, "bc") || rs_mutex_init(&m2, c2, "bc") ||
        rs_cond_init(&cv1, c1, "bcv") || rs_cond_init(&cv2, c2, "bcv") ||
        rs_cond_init(&idle, c1, "idle")) {
        fprintf(stderr, "bench-cond: init: %s\n", rs_client_lasterror(c1));
        return 1;
    }
    long long *v[NCASES];
    for (int i = 0; i < NCASES; i++)
        if (!(v[i] = calloc((size_t)total, sizeof(long long))))
            return 1;

    shared_t sh = {.m = m2, .cv = cv2};
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv_go, NULL);
    pthread_cond_init(&sh.cv_back, NULL);
    pthread_t th;
    pthread_create(&th, NULL, waiter, &sh);
    int r = 0, fail = 0;
    for (int i = 0; i < total && !fail; i++) {
        long long t0 = now_ns();
        redisReply *rep = redisCommand(raw, "PING");
        v[C_PING][i] = now_ns() - t0;
        fail |= !rep;
        freeReplyObject(rep);

        t0 = now_ns();
        fail |= rs_cond_signal(idle) != 0;
        v[C_RTT][i] = now_ns() - t0;

        t0 = now_ns();
        fail |= rs_mutex_lock(m1) != 0;
        v[C_LOCK][i] = now_ns() - t0;
        rs_mutex_unlock(m1);

        /* handoff: the waiter queues on the mutex the main thread holds */
        fail |= rs_mutex_lock(m1) != 0;
        start_round(&sh, ++r, 0);
        fail |= await_int(raw, 1, "ZCARD rs:{bc}:mutex:q") != 0;
        usleep((useconds_t)settle_us);
        t0 = now_ns();
        rs_mutex_unlock(m1);
        v[C_HAND][i] = end_round(&sh, r) - t0;

        /* signal, then signal + unlock: the waiter is queued on the condition and has
         * released the mutex */
        for (int u = 0; u < 2; u++) {
            start_round(&sh, ++r, 1);
            fail |= await_int(raw, 1, "ZCARD rs:{bcv}:cond") != 0;
            fail |= await_int(raw, 0, "HEXISTS rs:{bc}:mutex o") != 0;
            usleep((useconds_t)settle_us);
            if (u)
                fail |= rs_mutex_lock(m1) != 0;
            t0 = now_ns();
            rs_cond_signal(cv1);
            if (u)
                rs_mutex_unlock(m1);
            v[u ? C_SIGU : C_SIG][i] = end_round(&sh, r) - t0;
        }
        v[C_DIFF][i] = v[C_SIG][i] - v[C_HAND][i];
    }
    pthread_mutex_lock(&sh.mu);
    sh.go = -1;
    pthread_cond_signal(&sh.cv_go);
    pthread_mutex_unlock(&sh.mu);
    pthread_join(th, NULL);
    if (fail || atomic_load(&sh.errors)) {
        fprintf(stderr, "bench-cond: %d rounds failed: %s\n", atomic_load(&sh.errors),
                rs_client_lasterror(c2));
        return 1;
    }

    static const char *const label[NCASES] = {
        "ping: one raw round trip (PING)",
        "rtt: rs_cond_signal, nobody waiting (one EVALSHA)",
        "lock: one uncontended rs_mutex_lock",
        "handoff: unlock called -> waiter's lock returns",
        "signal -> wait returns holding the mutex",
        "signal + unlock (under the mutex) -> wait returns",
        "signal - handoff, per round (the re-acquisition)",
    };
    double med[NCASES];
    printf("bench-cond: %d rounds (after %d warm-up), every case once per round, one "
           "redis-server, two clients\n", rounds, WARMUP);
    printf("%-58s %9s %9s\n", "", "median", "p99");
    for (int i = 0; i < NCASES; i++) {
        med[i] = q_us(v[i] + WARMUP, rounds, 0.5);
        printf("%-58s %6.1f us %6.1f us\n", label[i], med[i],
               q_us(v[i] + WARMUP, rounds, 0.99));
    }
    double target = med[C_HAND] + med[C_PING], target_r = med[C_HAND] + med[C_RTT];
    printf("target: signal median <= handoff + one round trip (ping) = %.1f us: signal "
           "%.1f us %s, signal + unlock %.1f us %s\n", target, med[C_SIG],
           med[C_SIG] <= target ? "PASS" : "MISS", med[C_SIGU],
           med[C_SIGU] <= target ? "PASS" : "MISS");
    printf("        (against handoff + rtt = %.1f us: signal %s; the re-acquisition %.1f us "
           "against lock %.1f us)\n", target_r, med[C_SIG] <= target_r ? "PASS" : "MISS",
           med[C_DIFF], med[C_LOCK]);
    /* paired: each round's signal against the same round's handoff, so that the load of
     * that moment weighs on both (the medians above come from different rounds) */
    printf("paired: median per round of signal - handoff %.1f us <= one round trip (ping) "
           "%.1f us: %s\n", med[C_DIFF], med[C_PING], med[C_DIFF] <= med[C_PING] ? "PASS" : "MISS");
    redisFree(raw);
    rs_cond_destroy(cv1);
    rs_cond_destroy(cv2);
    rs_cond_destroy(idle);
    rs_mutex_destroy(m1);
    rs_mutex_destroy(m2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
    for (int i = 0; i < NCASES; i++)
        free(v[i]);
    return 0;
}
