/*
 * test_async.h - what the event-loop API's tests share (test_async*.c): an epoll loop on
 * rs_client_fd that dispatches until a count is reached, a tally of acquisitions whose holds
 * must come one after the other, and the FIFO check over many names (fifo_t: one server in
 * test_async.c, three masters in test_async_cluster.c).
 */
#ifndef RS_TEST_ASYNC_H
#define RS_TEST_ASYNC_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>

#include "redisync.h"
#include "test_util.h"

#define TALLY_MAX 128

/* Runs rs_client_dispatch whenever rs_client_fd is readable, until *count >= want or
 * timeout_ms; whether it got there. */
static inline int loop_until(rs_client_t *c, const int *count, int want, long timeout_ms)
{
    int fd = rs_client_fd(c);
    cr_assert_geq(fd, 0, "%s", rs_client_lasterror(c));
    int ep = epoll_create1(EPOLL_CLOEXEC);
    cr_assert_geq(ep, 0);
    struct epoll_event ev = {.events = EPOLLIN};
    cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
    long long end = tu_mono_ms() + timeout_ms;
    while (*count < want && tu_mono_ms() < end) {
        struct epoll_event got;
        if (epoll_wait(ep, &got, 1, 50) > 0)
            rs_client_dispatch(c);
    }
    rs_client_dispatch(c);
    close(ep);
    return *count >= want;
}

typedef struct tally {
    int ran, ok, errs, last_rc, overlap;
    uint64_t last_fence;
    int each[TALLY_MAX];
} tally_t;

typedef struct treq {
    tally_t *t;
    int i;
} treq_t;

/* A done callback (arg a treq_t) that counts, and releases each hold at once */
static inline void tally_done(int rc, rs_hold_t *hold, void *arg)
{
    treq_t *r = arg;
    tally_t *t = r->t;
    t->ran++;
    t->each[r->i]++;
    if (rc) {
        t->errs++;
        t->last_rc = rc;
        return;
    }
    t->ok++;
    /* the holds come one after the other (each is released before the next done runs, on
     * this thread): each token must be above the last, or two grants coexisted */
    uint64_t f = rs_hold_fence(hold);
    if (f <= t->last_fence)
        t->overlap++;
    t->last_fence = f;
    rs_hold_release(hold);
}

/* n requests on m, each with tally_done and its own r[i] (counted in t, cleared first). */
static inline void tally_pend(rs_mutex_t *m, tally_t *t, treq_t *r, int n)
{
    memset(t, 0, sizeof *t);
    rs_request_t *req;
    for (int i = 0; i < n; i++) {
        r[i].t = t;
        r[i].i = i;
        cr_assert_eq(rs_mutex_acquire_async(m, NULL, tally_done, &r[i], &req), 0, "request %d: %s",
                     i, rs_client_lasterror(NULL));
    }
}

/* One request's completion, as one_done saw it (g_inside: set by a test around an _async
 * call; done must not run inside it) */
typedef struct one {
    int ran, rc;
    rs_hold_t *hold;
    pthread_t thread;
    int inside; /* set around the _async call: done must not run then */
} one_t;

static int g_inside;

static inline void one_done(int rc, rs_hold_t *hold, void *arg)
{
    one_t *o = arg;
    o->ran++;
    o->rc = rc;
    o->hold = hold;
    o->thread = pthread_self();
    o->inside = g_inside;
}

/* One request on m (deadline dl, or none) with one_done into *o (cleared first), dispatched
 * on c's loop until its done ran (within 10 s): once, and never inside the _async call. */
static inline void one_acquire(rs_client_t *c, rs_mutex_t *m, const struct timespec *dl,
                               one_t *o)
{
    rs_request_t *req = NULL;
    *o = (one_t){0};
    g_inside = 1;
    cr_assert_eq(rs_mutex_acquire_async(m, dl, one_done, o, &req), 0, "%s",
                 rs_client_lasterror(c));
    g_inside = 0;
    cr_assert_not_null(req);
    cr_expect_eq(o->ran, 0, "done ran inside the _async call");
    cr_assert(loop_until(c, &o->ran, 1, 10000), "no completion within 10 s");
    cr_expect_eq(o->ran, 1);
    cr_expect_eq(o->inside, 0, "done ran inside the _async call");
}

/* A first acquisition of m through c's loop, granted and released: the I/O thread, its
 * connections, the subscriber and the scripts stand after it. */
static inline void warm_up(rs_client_t *c, rs_mutex_t *m)
{
    one_t w;
    one_acquire(c, m, NULL, &w);
    cr_assert_eq(w.rc, 0, "done(%d)", w.rc);
    cr_assert_eq(rs_hold_release(w.hold), 0);
}

/* m: name on c; *hm: name on holder, which holds it (its hold in *h). */
static inline rs_mutex_t *mutex_held_by(rs_client_t *c, rs_client_t *holder, const char *name,
                                        rs_mutex_t **hm, rs_hold_t **h)
{
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, name), 0);
    cr_assert_eq(rs_mutex_init(hm, holder, name), 0);
    cr_assert_eq(rs_mutex_acquire(*hm, NULL, h), 0, "%s", rs_client_lasterror(holder));
    return m;
}

/* One round of a cancel racing the grant of mutex m (named name, on c's loop): m taken by a
 * blocking acquisition, a request behind it, the hold released (on odd rounds once server s
 * queued the request), the request cancelled (on every fourth round after up to jitter_us):
 * its done runs once, with ECANCELED and no hold; the grant, if it came, was released: a
 * blocking timedlock takes m within free_ms. */
static inline void cancel_race_round(rs_client_t *c, rs_mutex_t *m, const char *name,
                                     const ts_server_t *s, int round, int jitter_us, long free_ms)
{
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(m, NULL, &h), 0, "%s", rs_client_lasterror(c));
    one_t o = {0};
    rs_request_t *req;
    cr_assert_eq(rs_mutex_acquire_async(m, NULL, one_done, &o, &req), 0);
    if (round % 2) /* queued first, then the race */
        tu_wait_zcard(s, "mutex", name, 1, 2000);
    cr_assert_eq(rs_hold_release(h), 0);
    if (round % 4 == 3)
        usleep((useconds_t)(rand() % jitter_us));
    cr_assert_eq(rs_request_cancel(req), 0);
    cr_assert(loop_until(c, &o.ran, 1, 10000), "round %d: no completion", round);
    cr_assert_eq(o.ran, 1);
    cr_assert_eq(o.rc, ECANCELED, "round %d: rc %d", round, o.rc);
    cr_assert_null(o.hold);
    struct timespec dl = tu_abs_in(free_ms);
    cr_assert_eq(rs_mutex_timedlock(m, &dl), 0, "round %d: the mutex stayed taken (%s)", round,
                 rs_client_lasterror(c));
    cr_assert_eq(rs_mutex_unlock(m), 0);
}

/* Many requests' completions by kind, with when each ran */
typedef struct many {
    int ran, ok, timedout, canceled, other;
    int ran_each[256];
    long long at_ms[256];
} many_t;

typedef struct many_req {
    many_t *t;
    int i;
} many_req_t;

static inline void many_done(int rc, rs_hold_t *hold, void *arg)
{
    many_req_t *r = arg;
    many_t *t = r->t;
    t->ran++;
    t->ran_each[r->i]++;
    t->at_ms[r->i] = tu_mono_ms();
    if (rc == 0) {
        t->ok++;
        rs_hold_release(hold);
    } else if (rc == ETIMEDOUT) {
        t->timedout++;
    } else if (rc == ECANCELED) {
        t->canceled++;
    } else {
        t->other++;
    }
}

/* Request i on m (deadline dl, or none), with many_done and its own r[i], counted in t. */
static inline void many_pend_one(rs_mutex_t *m, const struct timespec *dl, many_t *t,
                                 many_req_t *r, int i)
{
    rs_request_t *req;
    r[i].t = t;
    r[i].i = i;
    cr_assert_eq(rs_mutex_acquire_async(m, dl, many_done, &r[i], &req), 0, "request %d: %s", i,
                 rs_client_lasterror(NULL));
}

/* Requests 0 to n - 1 on m as many_pend_one's (t cleared first). */
static inline void many_pend(rs_mutex_t *m, const struct timespec *dl, many_t *t, many_req_t *r,
                             int n)
{
    memset(t, 0, sizeof *t);
    for (int i = 0; i < n; i++)
        many_pend_one(m, dl, t, r, i);
}

/* After a close with requests 0 to n - 1 of t pending: each done ran once, inside the close,
 * with ECANCELED. */
static inline void many_expect_canceled(const many_t *t, int n)
{
    cr_expect_eq(t->ran, n, "done calls run inside close: %d", t->ran);
    cr_expect_eq(t->canceled, n, "canceled %d ok %d other %d", t->canceled, t->ok, t->other);
    for (int i = 0; i < n; i++)
        cr_expect_eq(t->ran_each[i], 1);
}

/* Waits until c's rs_client_fd is readable (a completion is queued for dispatch), at most
 * timeout_ms; whether it is. */
static inline int wait_readable(rs_client_t *c, long timeout_ms)
{
    int fd = rs_client_fd(c);
    long long end = tu_mono_ms() + timeout_ms;
    while (tu_mono_ms() < end) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(fd, &rd);
        struct timeval tv = {0, 50000};
        if (select(fd + 1, &rd, NULL, NULL, &tv) > 0)
            return 1;
    }
    return 0;
}

/* ---- FIFO over many names: per requests pending on each of names mutexes, each grant
 * checked in order, never overlapping, its fencing token taken by a store (a Lua compare
 * and set on the name's own keys, on the connection and keys x->store gives), then released
 * without blocking --------------------------------------------------------------------- */
#define FIFO_NAMES_MAX 20
#define FIFO_PER_MAX 100

typedef struct fifo fifo_t;
typedef struct fifo_req {
    fifo_t *x;
    int name, seq;
} fifo_req_t;
struct fifo {
    /* name's store: the connection, and its fence and count keys written to fk, ck */
    redisContext *(*store)(fifo_t *x, int name, char *fk, char *ck, size_t len);
    void *arg;
    int names, per;
    int active[FIFO_NAMES_MAX];   /* a hold of the name is out */
    int next_seq[FIFO_NAMES_MAX]; /* the sequence number the next grant of the name must carry */
    int granted, errors, overlaps, disorder, fence_refused, released, rel_errors, last_rc;
    /* set t_from_ms (tu_mono_ms) to have the longest wait measured: from t_from_ms to a
     * name's first grant, and between its grants, into max_gap_ms */
    long long t_from_ms, max_gap_ms;
    long long t_last[FIFO_NAMES_MAX];
    int ran[FIFO_NAMES_MAX * FIFO_PER_MAX];
    fifo_req_t rq[FIFO_NAMES_MAX * FIFO_PER_MAX];
};

static inline void fifo_released(int rc, rs_hold_t *hold, void *arg)
{
    fifo_t *x = arg;
    (void)hold;
    x->released++;
    if (rc)
        x->rel_errors++;
}

static inline void fifo_done(int rc, rs_hold_t *hold, void *arg)
{
    static const char fence_lua[] =
        "local v = tonumber(redis.call('GET', KEYS[1]) or '0') "
        "if tonumber(ARGV[1]) > v then redis.call('SET', KEYS[1], ARGV[1]) "
        "redis.call('INCR', KEYS[2]) return 1 end return 0";
    fifo_req_t *r = arg;
    fifo_t *x = r->x;
    x->ran[r->name * x->per + r->seq]++;
    if (rc) {
        x->errors++;
        x->last_rc = rc;
        return;
    }
    x->granted++;
    if (x->t_from_ms) {
        long long now = tu_mono_ms(), from = x->t_last[r->name] ? x->t_last[r->name] : x->t_from_ms;
        if (now - from > x->max_gap_ms)
            x->max_gap_ms = now - from;
        x->t_last[r->name] = now;
    }
    if (x->active[r->name])
        x->overlaps++;
    if (r->seq != x->next_seq[r->name])
        x->disorder++;
    x->next_seq[r->name] = r->seq + 1;
    x->active[r->name] = 1;
    char fk[128], ck[128];
    redisContext *store = x->store(x, r->name, fk, ck, sizeof fk);
    redisReply *rep = redisCommand(store, "EVAL %s 2 %s %s %llu", fence_lua, fk, ck,
                                   (unsigned long long)rs_hold_fence(hold));
    if (!rep || rep->type != REDIS_REPLY_INTEGER || rep->integer != 1)
        x->fence_refused++;
    if (rep)
        freeReplyObject(rep);
    x->active[r->name] = 0; /* handed back: the next grant may come */
    if (rs_hold_release_async(hold, fifo_released, x) != 0)
        x->rel_errors++;
}

/* Sends every request: sequence number by sequence number, name by name. */
static inline void fifo_submit(fifo_t *x, rs_mutex_t **m, rs_client_t *c)
{
    cr_assert(x->names <= FIFO_NAMES_MAX && x->per <= FIFO_PER_MAX);
    rs_request_t *req;
    for (int seq = 0; seq < x->per; seq++)
        for (int n = 0; n < x->names; n++) {
            fifo_req_t *r = &x->rq[n * x->per + seq];
            r->x = x;
            r->name = n;
            r->seq = seq;
            cr_assert_eq(rs_mutex_acquire_async(m[n], NULL, fifo_done, r, &req), 0, "%s",
                         rs_client_lasterror(c));
        }
}

/* Once every request was released: each granted once, in order, never two at once, every
 * token taken by the store (per of them for each name). */
static inline void fifo_expect_all(fifo_t *x)
{
    int all = x->names * x->per;
    cr_expect_eq(x->granted, all);
    cr_expect_eq(x->errors, 0, "last error %d", x->last_rc);
    cr_expect_eq(x->overlaps, 0);
    cr_expect_eq(x->disorder, 0, "grants out of FIFO order");
    cr_expect_eq(x->fence_refused, 0, "a fencing token did not rise");
    cr_expect_eq(x->rel_errors, 0);
    for (int i = 0; i < all; i++)
        cr_expect_eq(x->ran[i], 1, "request %d: done ran %d times", i, x->ran[i]);
    for (int n = 0; n < x->names; n++) {
        char fk[128], ck[128];
        redisContext *store = x->store(x, n, fk, ck, sizeof fk);
        redisReply *rep = redisCommand(store, "GET %s", ck);
        cr_expect(rep && rep->type == REDIS_REPLY_STRING && atoi(rep->str) == x->per,
                  "name %d: %s tokens taken, not %d", n, rep && rep->str ? rep->str : "no",
                  x->per);
        if (rep)
            freeReplyObject(rep);
    }
}

#endif
