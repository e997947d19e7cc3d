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
 *   handoff   contended handoff, HANDOFFS rounds each (the two kinds take turns), medians:
 *             a thread releases a mutex
 *             (rs_mutex_unlock) that another thread waits for in rs_mutex_lock, until that
 *             thread returns; against: a hold object released (rs_hold_release) while an
 *             rs_mutex_acquire_async waits for it, until its done runs from
 *             rs_client_dispatch (epoll on rs_client_fd), same loop thread; target at most
 *             1.1 times the blocking handoff (PASS/MISS)
 *   memory    PENDING requests waiting on a held mutex: heap bytes per pending request
 *             (mallinfo2: the request's one block, its queue-entry lease inside, and its
 *             slots in the client's heap and reply ring), target <= 512 beyond
 *             the handle, and the process's thread count before and while they wait;
 *             measured once they are all queued in Redis, and again after the watchdog's
 *             rounds below (its round buffers included)
 *   watchdog  while they wait (their queue-entry leases: 3 s, so a 1 s period), about
 *             ROUNDS_WAIT periods, from the start of a round to the start of another (after
 *             the first rounds): the watchdog's rounds per period, write batches per round (every
 *             renewal written before the first reply is read: one round trip), renewals per
 *             round and the last round's duration (library counters, lib/internal.h), the
 *             server's EVALSHA calls meanwhile (INFO commandstats) and one PING's round trip
 *             in the same run; target: one round per period, one batch per round, every
 *             entry renewed in it (PASS/MISS)
 *
 * Usage: redisync-bench-async [--cluster] [PAIRS [PENDING]]   (defaults 20000 10000)
 *
 * --cluster (make bench-async-cluster): the same rows against a Cluster of three masters
 * (tests/support/cluster.h) over redis-cluster://: the 256 names spread over the masters,
 * so the async pairs go out on three pipelines; the blocking pairs, the handoff and the
 * pending requests each on one name, on its master; the server-side counts (EVALSHA) summed
 * over the masters.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "cluster.h"
#include "internal.h" /* rs__watchdog_stats: the watchdog's counters */
#include "redis_server.h"
#include "redisync.h"

#define NAMES 256
#define WINDOW 256
#define PENDING_LEASE_MS 3000 /* the pending entries' lease: a watchdog period of 1 s */
#define ROUNDS_WAIT 4         /* periods watched */

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

/* The servers: one, or under --cluster the three masters; the URL the clients use. */
static ts_server_t g_node[3];
static int g_nnodes = 1;
static char g_url[200];

/* A connection to the server that holds key (under --cluster, its slot's master). */
static redisContext *conn_for(const char *key)
{
    int i = 0;
    if (g_nnodes > 1) {
        i = ts_cluster_owner(g_node, g_nnodes, (int)ts_cmd_int(&g_node[0], "CLUSTER KEYSLOT %s",
                                                              key));
        if (i < 0) {
            fprintf(stderr, "no master serves %s\n", key);
            exit(1);
        }
    }
    return redisConnect("127.0.0.1", g_node[i].port);
}

static rs_client_t *open_client(void)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = g_url;
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

/* ---- contended handoff ------------------------------------------------------------------ */

#define HANDOFFS 300

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

typedef struct hshared {
    rs_mutex_t *m;
    atomic_int go, back;
    atomic_llong t1;
} hshared_t;

static void *handoff_waiter(void *arg)
{
    hshared_t *sh = arg;
    for (int r = 1; r <= HANDOFFS; r++) {
        while (atomic_load(&sh->go) < r)
            sched_yield();
        if (rs_mutex_lock(sh->m) != 0)
            fprintf(stderr, "handoff: lock failed\n");
        atomic_store(&sh->t1, now_ns());
        rs_mutex_unlock(sh->m);
        atomic_store(&sh->back, r);
    }
    return NULL;
}

static int queued(redisContext *rc, const char *key)
{
    redisReply *r = redisCommand(rc, "ZCARD %s", key);
    int n = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : 0;
    if (r)
        freeReplyObject(r);
    return n;
}

static long long t_done;
static int h_ran;

static void handoff_done(int rc, rs_hold_t *hold, void *arg)
{
    (void)arg;
    t_done = now_ns();
    h_ran++;
    if (rc == 0)
        rs_hold_release(hold);
}

/* medians in us: *blocking, *async */
static void handoff(rs_client_t *c, double *blocking, double *async)
{
    static long long b[HANDOFFS], a[HANDOFFS];
    rs_client_t *holder = open_client();
    redisContext *rc = conn_for("rs:{bench-handoff}:mutex:q");
    rs_mutex_t *hm, *wm;
    rs_mutex_init(&hm, holder, "bench-handoff");
    rs_mutex_init(&wm, c, "bench-handoff");
    hshared_t sh = {.m = wm};
    pthread_t th;
    pthread_create(&th, NULL, handoff_waiter, &sh);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, rs_client_fd(c), &ev);
    /* the two kinds take turns, round by round, so that both see the same load (this VM's
     * scheduling delays drift over seconds: two blocks of rounds measured one after the
     * other gave ratios from 0.75 to 2.5 in one hour) */
    for (int r = 1; r <= HANDOFFS; r++) {
        rs_mutex_lock(hm);
        atomic_store(&sh.go, r);
        while (queued(rc, "rs:{bench-handoff}:mutex:q") < 1)
            usleep(200);
        long long t0 = now_ns();
        rs_mutex_unlock(hm);
        while (atomic_load(&sh.back) < r)
            usleep(100);
        b[r - 1] = atomic_load(&sh.t1) - t0;

        rs_hold_t *h;
        rs_mutex_acquire(hm, NULL, &h);
        rs_request_t *req;
        rs_mutex_acquire_async(wm, NULL, handoff_done, NULL, &req);
        while (queued(rc, "rs:{bench-handoff}:mutex:q") < 1)
            usleep(200);
        int want = h_ran + 1;
        t0 = now_ns();
        rs_hold_release(h);
        while (h_ran < want) {
            struct epoll_event got;
            if (epoll_wait(ep, &got, 1, 1000) > 0)
                rs_client_dispatch(c);
        }
        a[r - 1] = t_done - t0;
    }
    pthread_join(th, NULL);
    close(ep);
    qsort(b, HANDOFFS, sizeof *b, cmp_ll);
    qsort(a, HANDOFFS, sizeof *a, cmp_ll);
    *blocking = (double)b[HANDOFFS / 2] / 1000.0;
    *async = (double)a[HANDOFFS / 2] / 1000.0;
    redisFree(rc);
    rs_mutex_destroy(hm);
    rs_mutex_destroy(wm);
    rs_client_close(holder);
}

/* ---- pending requests' memory ----------------------------------------------------------- */

static long pending_done;

/* the EVALSHA calls of every server */
static long long evalsha_calls(void)
{
    long long n = 0;
    for (int i = 0; i < g_nnodes; i++) {
        long long v = ts_info_ll(&g_node[i], "commandstats", "cmdstat_evalsha", "calls");
        n += v > 0 ? v : 0;
    }
    return n;
}

/* The watchdog's counters right after one of its rounds ends (a snapshot taken during a
 * round would count its write batch but not the round). 0, or -1 if none ended in 10 s. */
typedef struct wd_snap {
    unsigned long rounds, renewals, batches;
    uint64_t start_ns, dur_ns;
} wd_snap_t;

static void wd_read(rs_client_t *c, wd_snap_t *s)
{
    rs_wd_stats_t st;
    rs__watchdog_stats(c, &st);
    s->rounds = atomic_load(&st.rounds);
    s->renewals = atomic_load(&st.renewals);
    s->batches = atomic_load(&st.batches);
    s->start_ns = atomic_load(&st.last_start_ns);
    s->dur_ns = atomic_load(&st.last_round_ns);
}

static int after_round(rs_client_t *c, wd_snap_t *s)
{
    wd_read(c, s);
    unsigned long r0 = s->rounds;
    long long end = now_ns() + 10LL * 1000000000LL;
    do {
        usleep(500);
        wd_read(c, s);
    } while (s->rounds == r0 && now_ns() < end);
    return s->rounds == r0 ? -1 : 0;
}

/* one PING's round trip in us, median of 101 */
static double ping_us(redisContext *rc)
{
    long long t[101];
    for (int i = 0; i < 101; i++) {
        long long t0 = now_ns();
        redisReply *r = redisCommand(rc, "PING");
        t[i] = now_ns() - t0;
        if (r)
            freeReplyObject(r);
    }
    qsort(t, 101, sizeof *t, cmp_ll);
    return (double)t[50] / 1000.0;
}

static void pending_cb(int rc, rs_hold_t *hold, void *arg)
{
    (void)arg;
    if (rc == 0)
        rs_hold_release(hold);
    pending_done++;
}

int main(int argc, char **argv)
{
    int cluster = argc > 1 && strcmp(argv[1], "--cluster") == 0;
    argc -= cluster, argv += cluster;
    long pairs = argc > 1 ? atol(argv[1]) : 20000;
    long pending = argc > 2 ? atol(argv[2]) : 10000;
    if (cluster) {
        g_nnodes = 3;
        if (ts_cluster_start(g_node, 3) != 0) {
            fprintf(stderr, "cannot start a Cluster of 3 masters\n");
            return 1;
        }
        int n = snprintf(g_url, sizeof g_url, "redis-cluster://");
        for (int i = 0; i < 3; i++)
            n += snprintf(g_url + n, sizeof g_url - (size_t)n, "%s127.0.0.1:%d", i ? "," : "",
                          g_node[i].port);
    } else {
        if (ts_server_start(&g_node[0], NULL) != 0) {
            fprintf(stderr, "cannot start redis-server\n");
            return 1;
        }
        snprintf(g_url, sizeof g_url, "%s", g_node[0].url);
    }
    rs_client_t *c = open_client();

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

    double hb, ha;
    handoff(c, &hb, &ha);

    /* pending requests: memory and threads */
    rs_client_t *holder = open_client();
    rs_mutex_t *hm, *pm;
    rs_mutex_init(&hm, holder, "bench-pending");
    rs_mutex_init(&pm, c, "bench-pending");
    rs_mutex_setlease(pm, PENDING_LEASE_MS);
    /* the holder's lease: 60 s, so that no waiter's nap (the holder's lease left) ends and
     * checks again while the rounds are counted */
    rs_mutex_setlease(hm, 60000);
    rs_mutex_lock(hm);
    int th0 = threads_now();
    struct mallinfo2 m0 = mallinfo2();
    rs_request_t *req;
    for (long i = 0; i < pending; i++)
        rs_mutex_acquire_async(pm, NULL, pending_cb, NULL, &req);
    redisContext *rc = conn_for("rs:{bench-pending}:mutex:q");
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

    /* the watchdog's rounds while they wait: from the end of one round to the end of the
     * first one ROUNDS_WAIT periods later (two rounds first: entries queued over more than
     * two thirds of a period start in two groups, which the second round joins) */
    wd_snap_t s0, s1;
    int snap = after_round(c, &s0) == 0 && after_round(c, &s0) == 0 && after_round(c, &s0) == 0;
    long long e0 = evalsha_calls();
    usleep((useconds_t)(ROUNDS_WAIT * PENDING_LEASE_MS / 3 - PENDING_LEASE_MS / 6) * 1000);
    snap = snap && after_round(c, &s1) == 0;
    long long e1 = evalsha_calls();
    /* from the start of the first round counted out to the start of the last one */
    double wsec = snap ? (double)(s1.start_ns - s0.start_ns) / 1e9 : 0;
    uint64_t last_ns = snap ? s1.dur_ns : 0;
    double ping = ping_us(rc);
    struct mallinfo2 m2 = mallinfo2();
    double per2 = (double)((long long)m2.uordblks - (long long)m0.uordblks) / (double)pending;
    int th2 = threads_now();
    double periods = wsec * 1000.0 / (PENDING_LEASE_MS / 3.0);
    unsigned long rounds = snap ? s1.rounds - s0.rounds : 0;
    unsigned long batches = snap ? s1.batches - s0.batches : 0;
    unsigned long renewals = snap ? s1.renewals - s0.renewals : 0;
    double per_round = rounds ? (double)renewals / (double)rounds : 0;
    int wd_pass = snap && rounds >= 1 && (double)rounds <= periods * 1.25 &&
                  batches == rounds && per_round >= 0.99 * (double)pending;
    rs_mutex_unlock(hm);
    run_loop(c, &lp, &pending_done, pending);
    redisFree(rc);

    printf("redisync event-loop API (%s, one run)\n",
           cluster ? "a Cluster of 3 masters, redis-cluster://" : "one redis-server");
    printf("  blocking lock+unlock, 1 thread, 1 name:         %8.0f pairs/s  "
           "(%ld pairs, %ld errors)\n", brate, bpairs, berr);
    printf("  async acquire+release, 1 loop thread, %d names: %8.0f pairs/s  "
           "(%ld pairs, %ld errors, %d in flight)\n", NAMES, arate, lp.pairs, lp.errors, WINDOW);
    printf("  ratio async/blocking: %.2f (target >= 3): %s\n", arate / brate,
           arate >= 3 * brate ? "PASS" : "MISS");
    printf("  contended handoff, median of %d: blocking %.0f us, async (through dispatch) %.0f us: "
           "ratio %.2f (target <= 1.1): %s\n", HANDOFFS, hb, ha, ha / hb,
           ha <= 1.1 * hb ? "PASS" : "MISS");
    printf("  %ld pending requests (%lld queued in Redis): %.0f heap bytes each when queued, "
           "%.0f after %lu watchdog rounds (target <= 512): %s\n", pending, queued, per, per2,
           rounds, per <= 512 && per2 <= 512 ? "PASS" : "MISS");
    printf("  threads: %d before, %d while they wait, %d after the rounds (%s); %ld completed "
           "after the release\n", th0, th1, th2, th0 == th1 && th1 == th2 ? "none added" : "ADDED",
           pending_done);
    printf("  watchdog, %ld entries pending, %.2f s (%.2f periods of %d ms): %lu rounds, %lu "
           "write batches (%.2f a round), %.0f renewals a round, last round %.1f ms against one "
           "PING %.0f us; server EVALSHA calls meanwhile %lld (target: 1 round a period, 1 "
           "batch a round, every entry in it): %s\n", pending, wsec, periods,
           PENDING_LEASE_MS / 3, rounds, batches, rounds ? (double)batches / (double)rounds : 0,
           per_round, (double)last_ns / 1e6, ping, e1 - e0, wd_pass ? "PASS" : "MISS");
    for (int i = 0; i < NAMES; i++)
        rs_mutex_destroy(lp.m[i]);
    rs_mutex_destroy(bm);
    rs_mutex_destroy(hm);
    rs_mutex_destroy(pm);
    rs_client_close(holder);
    rs_client_close(c);
    for (int i = 0; i < g_nnodes; i++)
        ts_server_stop(&g_node[i]);
    return 0;
}
