/*
 * test_async.h - what the event-loop API's tests share (test_async.c, test_async_modes.c):
 * an epoll loop on rs_client_fd that dispatches until a count is reached, and a tally of
 * acquisitions whose holds must come one after the other.
 */
#ifndef RS_TEST_ASYNC_H
#define RS_TEST_ASYNC_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <criterion/criterion.h>

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

#endif
