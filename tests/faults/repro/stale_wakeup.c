/*
 * stale_wakeup.c - deterministic reproduction of a mutual-exclusion failure found by
 * make test-faults (scenario mutex-lose): a wake-up message for a grant that Redis has since
 * lost is accepted after a later attempt under the same acquisition id found the mutex held
 * by someone else.
 *
 *   build/faults-repro/stale_wakeup [1|2]  exit 1 when the bug shows, 0 when it does not
 *                                         (no argument: variant 1, then variant 2)
 *
 * Three clients A, B, C of one redis-server (no persistence), lease 3000 ms. A holds "m",
 * B waits for it (queued under acquisition id X, retrying once per A's lease left, ~3.03 s).
 * DEBUG SLEEP lines up, on connections opened beforehand, so that the server then runs:
 *
 *   A rel         hands "m" to B's entry X (token T1) and PUBLISHes "X T1" to B
 *   FLUSHALL      the grant is lost (what a restart without persistence does)
 *   C acq         "m" is free: C holds it (token T2 > T1)
 *   B acq X       busy: B is queued again under the same id X
 *
 * B's waiter receives "X T1" while its attempt is in flight; lib/wait.c (around line 51-66)
 * takes the pending message as a grant, with the send time of that later attempt as the
 * lower bound of the lease ("the grant, if any, happened after this" is false for a message
 * that was published before the attempt ran). rs_mutex_lock returns 0 with the stale token T1
 * and a fresh local lease while C holds "m".
 *
 * Variant 1 (default): C releases within B's first renewal period; the release hands "m" to
 * B's re-queued entry X, so B's ghost hold becomes real and B's unlock returns 0: B and C
 * overlapped and nobody was told (no on_lost, no RS_ELOST), B's token is lower than C's.
 * Variant 2 (argument "2"): C holds past B's first renewal, which reports the loss (B's
 * unlock: RS_ELOST), but B's re-queued entry X is left in Redis: C's release hands "m" to
 * it, so "m" stays held by nobody for a whole lease, and B's next timedlock (10 s deadline)
 * fails at once with EDEADLK.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"

static ts_server_t srv;
static rs_client_t *ca, *cb, *cc;
static rs_mutex_t *ma, *mb, *mc;
static redisContext *k_sleep, *k_flush;
static int variant;
static volatile int go_b, go_c, rc_b = -1, rc_c = -1, un_b = -1, un_c = -1, relock_b = -1;
static unsigned long long f_b, f_c;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static rs_client_t *open_client(void)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = srv.url;
    cfg.lease_ms = 3000;
    cfg.timeout_ms = 2000;
    rs_client_t *c;
    if (rs_client_open(&c, &cfg) != 0) {
        fprintf(stderr, "rs_client_open: %s\n", rs_client_lasterror(NULL));
        exit(2);
    }
    return c;
}

static void send_raw(redisContext *k, const char *cmd)
{
    redisAppendCommand(k, cmd);
    int done = 0;
    while (!done)
        if (redisBufferWrite(k, &done) != REDIS_OK)
            exit(2);
}

static void inspect(const char *when)
{
    rs_info_t in;
    memset(&in, 0, sizeof in);
    int r = rs_inspect(ca, "mutex", "m", &in);
    printf("  Redis %s: inspect %d, holder %s, waiters %u (B's client id is %s)\n", when, r,
           in.nholders ? in.holders[0] : "-", in.waiters, rs_client_id(cb));
}

static void *lock_unlock(void *m)
{
    rs_mutex_lock(m);
    rs_mutex_unlock(m);
    return NULL;
}

/* c waits once (its notifier subscribes) and keeps a pooled connection */
static void warm(rs_client_t *c)
{
    rs_mutex_t *x, *y;
    rs_mutex_init(&x, ca, "warm");
    rs_mutex_init(&y, c, "warm");
    rs_mutex_lock(x);
    pthread_t t;
    pthread_create(&t, NULL, lock_unlock, y);
    usleep(200000);
    rs_mutex_unlock(x);
    pthread_join(t, NULL);
    rs_mutex_destroy(x);
    rs_mutex_destroy(y);
}

static void *thr_c(void *a)
{
    (void)a;
    rc_c = rs_mutex_lock(mc);
    f_c = rs_mutex_fence(mc);
    printf("C lock: %d, token %llu\n", rc_c, f_c);
    while (!go_c)
        usleep(1000);
    un_c = rs_mutex_unlock(mc);
    printf("C unlock: %d\n", un_c);
    return NULL;
}

static void *helper(void *a)
{
    usleep(40000);
    send_raw(k_flush, "FLUSHALL");
    usleep(40000);
    pthread_create((pthread_t *)a, NULL, thr_c, NULL);
    return NULL;
}

static void *thr_b(void *a)
{
    (void)a;
    rc_b = rs_mutex_lock(mb);
    f_b = rs_mutex_fence(mb);
    printf("B lock: %d, token %llu, lease left %ld ms\n", rc_b, f_b, rs_mutex_remaining(mb));
    if (variant == 2) {
        /* until a renewal finds C there; a genuine grant (renewals keep succeeding) is no
         * ghost: then the bug did not show */
        for (int i = 0; i < 500 && rs_mutex_remaining(mb) > 0; i++)
            usleep(10000);
        if (rs_mutex_remaining(mb) > 0) {
            printf("B's hold is genuine: its renewals succeed (not a ghost)\n");
            un_b = rs_mutex_unlock(mb);
            relock_b = 0;
            return NULL;
        }
        un_b = rs_mutex_unlock(mb);
        printf("B unlock after its renewal failed: %d (%s)\n", un_b, rs_strerror(un_b));
        inspect("after B's unlock");
        while (!go_b)
            usleep(1000);
        inspect("after C's release");
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 10;
        relock_b = rs_mutex_timedlock(mb, &dl);
        printf("B timedlock (10 s deadline): %d (%s)\n", relock_b, rs_client_lasterror(cb));
        if (relock_b == 0)
            rs_mutex_unlock(mb);
        return NULL;
    }
    while (!go_b)
        usleep(1000);
    un_b = rs_mutex_unlock(mb);
    printf("B unlock: %d (%s)\n", un_b, rs_strerror(un_b));
    return NULL;
}

static int run(int v)
{
    variant = v;
    go_b = go_c = 0;
    rc_b = rc_c = un_b = un_c = relock_b = -1;
    f_b = f_c = 0;
    printf("-- variant %d\n", v);
    if (ts_server_start(&srv, NULL) != 0)
        return 2;
    ca = open_client();
    cb = open_client();
    cc = open_client();
    rs_mutex_init(&ma, ca, "m");
    rs_mutex_init(&mb, cb, "m");
    rs_mutex_init(&mc, cc, "m");
    warm(cb);
    warm(cc);
    if (rs_mutex_lock(ma) != 0)
        return 2;
    k_sleep = ts_connect(&srv); /* connected (accepted by the server) beforehand, so that */
    k_flush = ts_connect(&srv); /* their commands are read in the order they are sent */
    pthread_t tb, tc, th;
    double t0 = now();
    pthread_create(&tb, NULL, thr_b, NULL);
    while (now() < t0 + 2.80)
        usleep(1000);
    send_raw(k_sleep, "DEBUG SLEEP 0.8");
    pthread_create(&th, NULL, helper, &tc);
    int ua = rs_mutex_unlock(ma); /* runs after the stall, first */
    printf("A unlock: %d\n", ua);
    pthread_join(th, NULL);
    while (rc_c == -1)
        usleep(1000);
    usleep(300000);
    int both = rc_b == 0 && rc_c == 0;
    printf("at +%.2f s: C holds (token %llu); B %s\n", now() - t0, f_c,
           both ? "ALSO holds, with an older token" : "waits");
    if (variant == 2) {
        inspect("while C holds");
        usleep(1500000);
    }
    go_c = 1;
    pthread_join(tc, NULL);
    usleep(200000);
    go_b = 1;
    pthread_join(tb, NULL);
    redisFree(k_sleep);
    redisFree(k_flush);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_mutex_destroy(mc);
    rs_client_close(ca);
    rs_client_close(cb);
    rs_client_close(cc);
    ts_server_stop(&srv);
    int bug = variant == 2 ? (both || relock_b == EDEADLK) : (both && un_b == 0);
    printf("variant %d: %s\n", v, bug ? "BUG: reproduced" : "not reproduced");
    return bug ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1)
        return run(atoi(argv[1]));
    int a = run(1);
    int b = run(2);
    return a || b ? 1 : 0;
}
