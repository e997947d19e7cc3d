/*
 * async.c - the event-loop API's figures (`make bench`, or alone: make bench-async; issue
 * 16's performance targets), measured in one run against one redis-server:
 *
 *   blocking  one thread, rs_mutex_lock + rs_mutex_unlock on one name, PAIRS times
 *   async     one loop thread, rs_mutex_acquire_async + rs_hold_release_async on NAMES
 *             names, one request in flight per name (WINDOW = NAMES: no contention; each
 *             release starts the name's next
 *             acquisition), PAIRS pairs: the I/O thread pipelines them
 *   target    async pairs/s at least 3 times blocking pairs/s (PASS/MISS)
 *   memory    PENDING requests waiting on a held mutex: heap bytes per pending request
 *             (mallinfo2, request + queue-entry lease + heap slot), target <= 512 beyond
 *             the handle, and the process's thread count before and while they wait
 *
 * Usage: redisync-bench-async [PAIRS [PENDING]]   (defaults 20000 10000)
 */
#include <dirent.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"

#define NAMES 256
#define WINDOW 256

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static rs_client_t *open_client(const ts_server_t *s)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s->url;
    cfg.lease_ms = 10000;
    rs_client_t *c;
    if (rs_client_open(&c, &cfg) != 0) {
        fprintf(stderr, "open: %s\n", rs_client_lasterror(NULL));
        exit(1);
    }
    return c;
}

/* ---- the async loop ------------------------------------------------------------------ */

typedef struct loop {
    rs_client_t *c;
    rs_mutex_t *m[NAMES];
    long started, pairs, target, errors;
} loop_t;

typedef struct slot {
    loop_t *lp;
    int name;
} slot_t;

static void acquired(int rc, rs_hold_t *hold, void *arg);

static void start_one(slot_t *s)
{
    loop_t *lp = s->lp;
    if (lp->started >= lp->target)
        return;
    lp->started++;
    rs_request_t *req;
    if (rs_mutex_acquire_async(lp->m[s->name], NULL, acquired, s, &req) != 0) {
        lp->errors++;
        lp->pairs++;
    }
}

static void released(int rc, rs_hold_t *hold, void *arg)
{
    slot_t *s = arg;
    (void)hold;
    if (rc)
        s->lp->errors++;
    s->lp->pairs++;
    start_one(s);
}

static void acquired(int rc, rs_hold_t *hold, void *arg)
{
    slot_t *s = arg;
    if (rc) {
        s->lp->errors++;
        s->lp->pairs++;
        start_one(s);
        return;
    }
    if (rs_hold_release_async(hold, released, s) != 0) {
        s->lp->errors++;
        s->lp->pairs++;
    }
}

static void run_loop(rs_client_t *c, loop_t *lp, const long *done_counter, long want)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, rs_client_fd(c), &ev);
    long long end = now_ns() + 120LL * 1000000000LL;
    while (*done_counter < want && now_ns() < end) {
        struct epoll_event got;
        if (epoll_wait(ep, &got, 1, 100) > 0)
            rs_client_dispatch(c);
    }
    close(ep);
    (void)lp;
}

/* ---- pending requests' memory ----------------------------------------------------------- */

static long pending_done;

static void pending_cb(int rc, rs_hold_t *hold, void *arg)
{
    (void)arg;
    if (rc == 0)
        rs_hold_release(hold);
    pending_done++;
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 20000;
    long pending = argc > 2 ? atol(argv[2]) : 10000;
    ts_server_t s;
    if (ts_server_start(&s, NULL) != 0) {
        fprintf(stderr, "cannot start redis-server\n");
        return 1;
    }
    rs_client_t *c = open_client(&s);

    /* blocking: one thread, lock + unlock on one name */
    rs_mutex_t *bm;
    rs_mutex_init(&bm, c, "bench-blocking");
    for (int i = 0; i < 200; i++) /* warm-up */
        if (rs_mutex_lock(bm) == 0)
            rs_mutex_unlock(bm);
    long bpairs = pairs / 4 > 2000 ? pairs / 4 : 2000;
    long long t0 = now_ns();
    long berr = 0;
    for (long i = 0; i < bpairs; i++) {
        if (rs_mutex_lock(bm) != 0 || rs_mutex_unlock(bm) != 0)
            berr++;
    }
    double bsec = (double)(now_ns() - t0) / 1e9;
    double brate = (double)bpairs / bsec;

    /* async: one loop thread, NAMES names, WINDOW in flight */
    static loop_t lp;
    static slot_t slots[WINDOW];
    lp.c = c;
    for (int i = 0; i < NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "bench-async-%d", i);
        rs_mutex_init(&lp.m[i], c, name);
    }
    lp.target = 500; /* warm-up: the I/O thread, the subscriber, the scripts */
    for (int i = 0; i < WINDOW; i++) {
        slots[i].lp = &lp;
        slots[i].name = i % NAMES;
        start_one(&slots[i]);
    }
    run_loop(c, &lp, &lp.pairs, lp.target);
    lp.started = lp.pairs = lp.errors = 0;
    lp.target = pairs;
    t0 = now_ns();
    for (int i = 0; i < WINDOW; i++)
        start_one(&slots[i]);
    run_loop(c, &lp, &lp.pairs, pairs);
    double asec = (double)(now_ns() - t0) / 1e9;
    double arate = (double)lp.pairs / asec;

    /* pending requests: memory and threads */
    rs_client_t *holder = open_client(&s);
    rs_mutex_t *hm, *pm;
    rs_mutex_init(&hm, holder, "bench-pending");
    rs_mutex_init(&pm, c, "bench-pending");
    rs_mutex_lock(hm);
    int th0 = threads_now();
    struct mallinfo2 m0 = mallinfo2();
    rs_request_t *req;
    for (long i = 0; i < pending; i++)
        rs_mutex_acquire_async(pm, NULL, pending_cb, NULL, &req);
    redisContext *rc = redisConnect("127.0.0.1", s.port);
    long long queued = 0;
    long long qend = now_ns() + 60LL * 1000000000LL;
    while (queued < pending && now_ns() < qend) {
        redisReply *r = redisCommand(rc, "ZCARD rs:{bench-pending}:mutex:q");
        queued = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
        if (r)
            freeReplyObject(r);
        usleep(20000);
    }
    struct mallinfo2 m1 = mallinfo2();
    int th1 = threads_now();
    double per = (double)((long long)m1.uordblks - (long long)m0.uordblks) / (double)pending;
    rs_mutex_unlock(hm);
    run_loop(c, &lp, &pending_done, pending);
    redisFree(rc);

    printf("redisync event-loop API (one redis-server, one run)\n");
    printf("  blocking lock+unlock, 1 thread, 1 name:         %8.0f pairs/s  (%ld pairs, %ld errors)\n",
           brate, bpairs, berr);
    printf("  async acquire+release, 1 loop thread, %d names: %8.0f pairs/s  (%ld pairs, %ld errors, %d in flight)\n",
           NAMES, arate, lp.pairs, lp.errors, WINDOW);
    printf("  ratio async/blocking: %.2f (target >= 3): %s\n", arate / brate,
           arate >= 3 * brate ? "PASS" : "MISS");
    printf("  %ld pending requests (%lld queued in Redis): %.0f heap bytes each (target <= 512): %s\n",
           pending, queued, per, per <= 512 ? "PASS" : "MISS");
    printf("  threads: %d before, %d while they wait (%s); %ld completed after the release\n",
           th0, th1, th0 == th1 ? "none added" : "ADDED", pending_done);
    for (int i = 0; i < NAMES; i++)
        rs_mutex_destroy(lp.m[i]);
    rs_mutex_destroy(bm);
    rs_mutex_destroy(hm);
    rs_mutex_destroy(pm);
    rs_client_close(holder);
    rs_client_close(c);
    ts_server_stop(&s);
    return 0;
}
