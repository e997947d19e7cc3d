/*
 * test_multilock_procs.c - many processes take overlapping sets of mutexes in random orders
 * with multilocks: no deadlock, no overlap.
 * (moved from test_multilock.c; suite "multilock", shared helpers in test_multilock.h).
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "test_assert.h"
#include "test_util.h"
#include "redisync.h"
#include "test_multilock.h"

/* ------------------------------------------------------------------------------------- */
/* 7. Many processes, overlapping sets in random orders: no deadlock, no overlap            */

#define DL_PROCS 6
#define DL_ITERS 30
#define DL_NAMES 5

typedef struct dl_arg {
    const ts_server_t *s;
    int start_fd, start_wfd;
    int seed;
} dl_arg_t;

static int dl_child_main(void *arg)
{
    dl_arg_t *a = arg;
    char b;
    close(a->start_wfd);
    ssize_t rd = read(a->start_fd, &b, 1);
    (void)rd;
    unsigned seed = (unsigned)a->seed * 2654435761u ^ (unsigned)getpid();
    rs_client_t *c = open_client_ex(a->s, 10000, NULL);
    if (!c)
        return 10;
    rs_mutex_t *m[DL_NAMES];
    for (int i = 0; i < DL_NAMES; i++) {
        char name[8];
        snprintf(name, sizeof name, "n%d", i);
        if (rs_mutex_init(&m[i], c, name) != 0)
            return 11;
    }
    redisContext *k = ts_connect(a->s);
    if (!k)
        return 12;
    for (int it = 0; it < DL_ITERS; it++) {
        int idx[DL_NAMES];
        for (int i = 0; i < DL_NAMES; i++)
            idx[i] = i;
        for (int i = DL_NAMES - 1; i > 0; i--) { /* a random order */
            int j = (int)(rand_r(&seed) % (unsigned)(i + 1));
            int t = idx[i];
            idx[i] = idx[j];
            idx[j] = t;
        }
        int n = 2 + (int)(rand_r(&seed) % (DL_NAMES - 1)); /* 2..5 names */
        rs_mutex_t *parts[DL_NAMES];
        for (int i = 0; i < n; i++)
            parts[i] = m[idx[i]];
        rs_multilock_t *ml;
        if (rs_multilock_init(&ml, parts, (size_t)n) != 0)
            return 13;
        int rc;
        if (it % 5 == 4) {
            struct timespec dl = tu_abs_in(40000);
            rc = rs_multilock_timedlock(ml, &dl);
        } else {
            rc = rs_multilock_lock(ml);
        }
        if (rc != 0) {
            fprintf(stderr, "dl child: lock %d: %s\n", rc, rs_client_lasterror(c));
            return 20;
        }
        for (int i = 0; i < n; i++) {
            if (rs_mutex_fence(parts[i]) == 0)
                return 21;
            redisReply *r = redisCommand(k, "INCR g:n%d", idx[i]);
            if (!r)
                return 22;
            long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
            freeReplyObject(r);
            if (v != 1) {
                r = redisCommand(k, "INCR overlaps");
                if (r)
                    freeReplyObject(r);
            }
            r = redisCommand(k, "EVAL %s 1 max:n%d %lld", "local m = tonumber(redis.call('GET', KEYS[1]) or 0) if tonumber(ARGV[1]) > m then redis.call('SET', KEYS[1], ARGV[1]) end return 0", idx[i], v);
            if (r)
                freeReplyObject(r);
        }
        tu_sleep_ms(1 + it % 3); /* widen the window an overlap would need */
        for (int i = 0; i < n; i++) {
            redisReply *r = redisCommand(k, "DECR g:n%d", idx[i]);
            if (!r)
                return 23;
            freeReplyObject(r);
        }
        rc = rs_multilock_unlock(ml);
        if (rc != 0) {
            fprintf(stderr, "dl child: unlock %d: %s\n", rc, rs_client_lasterror(c));
            return 30;
        }
        if (rs_multilock_destroy(ml) != 0)
            return 31;
    }
    redisFree(k);
    for (int i = 0; i < DL_NAMES; i++)
        rs_mutex_destroy(m[i]);
    rs_client_close(c);
    return 0;
}

Test(multilock, overlapping_sets_no_deadlock, .fini = tu_kill_kids)
{
    ts_server_t s;
    tu_start_server(&s);
    int barrier[2];
    cr_assert_eq(pipe(barrier), 0);
    dl_arg_t a[DL_PROCS];
    pid_t pids[DL_PROCS];
    for (int i = 0; i < DL_PROCS; i++) {
        a[i] = (dl_arg_t){&s, barrier[0], barrier[1], i + 1};
        pids[i] = tu_spawn(dl_child_main, &a[i]);
    }
    close(barrier[0]);
    close(barrier[1]); /* go */
    long long t0 = tu_mono_ms();
    for (int i = 0; i < DL_PROCS; i++) {
        long left = 45000 - (long)(tu_mono_ms() - t0);
        int st = tu_reap(pids[i], left > 0 ? left : 1);
        cr_expect_neq(st, -1, "worker %d did not finish in time (deadlock?)", i);
        cr_expect(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "worker %d failed (status 0x%x)", i, st);
    }
    cr_expect_eq(ts_cmd_int(&s, "EXISTS overlaps"), 0, "%lld overlapping holds",
                 ts_cmd_int(&s, "GET overlaps"));
    for (int i = 0; i < DL_NAMES; i++) {
        cr_expect_eq(ts_cmd_int(&s, "GET max:n%d", i), 1, "max concurrent holders of n%d", i);
        cr_expect_eq(ts_cmd_int(&s, "GET g:n%d", i), 0, "guard of n%d back to 0", i);
        cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{n%d}:mutex o", i), 0, "n%d left held", i);
        cr_expect_eq(ts_cmd_int(&s, "ZCARD rs:{n%d}:mutex:q", i), 0, "n%d: waiters left", i);
    }
    ts_server_stop(&s);
}
