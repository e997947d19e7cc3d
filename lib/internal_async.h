/*
 * internal_async.h - the event-loop API's core (lib/timerheap.c, lib/async.c): what the
 * primitives call to start a non-blocking acquisition, and what client.c calls at close.
 * Part of internal.h, which includes it after handle.c's types; include that.
 */
#ifndef RS_INTERNAL_H
#error "include internal.h, not internal_async.h"
#endif

/* ----- timerheap.c ------------------------------------------------------------------- */
/* A binary min-heap of timers by due time: the deadlines and retry naps of every pending
 * request of a client, in one structure (no timer or thread per request). A timer embeds in
 * its owner; idx is its place in the heap (-1: not in it). */
typedef struct rs_timer {
    uint64_t due_ns;
    int idx;
} rs_timer_t;
typedef struct rs_theap {
    rs_timer_t **v;
    int n, cap;
} rs_theap_t;
/* Room for n timers in all: 0 or ENOMEM (so that rs__theap_set never fails after it). */
int rs__theap_reserve(rs_theap_t *h, int n);
/* Inserts t due at due_ns, or moves it there if it is in the heap already (room reserved). */
void rs__theap_set(rs_theap_t *h, rs_timer_t *t, uint64_t due_ns);
void rs__theap_del(rs_theap_t *h, rs_timer_t *t);
rs_timer_t *rs__theap_top(const rs_theap_t *h); /* the earliest, NULL if empty */
void rs__theap_free(rs_theap_t *h);

/* ----- async.c ----------------------------------------------------------------------- */
/* How a primitive's _async call differs from the generic acquisition. */
typedef struct rs_async_opts {
    unsigned count;  /* the hold's count (a semaphore's permits); 0: 1 */
    int zero_fence;  /* a read hold: fence 0 */
    int busy_rc;     /* what a past deadline that found it busy returns: EBUSY or EAGAIN */
} rs_async_opts_t;
/* Starts an acquisition of k (rs__call_init_object and extras done) without blocking: 0
 * and *req set, done to come from rs_client_dispatch; or an error at once (EINVAL, ENOMEM,
 * ENOTSUP, RS_EFORK, ECANCELED) and done never called. Called between rs__enter and
 * rs__leave. */
int rs__async_acquire(rs_call_t *k, const struct timespec *abstime, const rs_async_opts_t *o,
                      rs_done_fn *done, void *arg, rs_request_t **req);
/* An event to wait for (a latch opening), announced on a channel: op is the script op that
 * checks it; decode reads its reply: 0 happened, 1 not yet, or -error; *state is the
 * request's own memory between checks (starts at -1). It is checked once the channel is
 * subscribed, after every message on it, and every recheck_ms (rs__async_event's). */
typedef struct rs_async_event {
    const char *op;
    int (*decode)(rs_client_t *c, const redisReply *r, long long *state);
} rs_async_event_t;
/* Waits for ev on channel topic (which must live as long as k's handle) without blocking:
 * done(0, NULL, arg) when it happened; errors as rs__async_acquire. */
int rs__async_event(rs_call_t *k, const char *topic, const rs_async_event_t *ev,
                    long recheck_ms, const struct timespec *abstime, rs_done_fn *done, void *arg,
                    rs_request_t **req);
/* rs_client_close: stops the I/O thread after leaving Redis' queues (pending requests are
 * cancelled there, grants that raced are released); rs__async_finish, after the holds are
 * released, runs every completion still queued (pending ones get ECANCELED) and frees it
 * all. rs__async_forget: a fork child's close (frees without threads or callbacks). */
void rs__async_stop(rs_client_t *c);
void rs__async_finish(rs_client_t *c);
void rs__async_forget(rs_client_t *c);
