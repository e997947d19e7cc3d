/*
 * worker_async.c - an event-loop worker of the fault suite (the mutex scenarios with
 * scenario_t.async; worker.c starts it when the driver passes async=N, N > 0).
 *
 * ONE thread: an epoll loop on rs_client_fd that calls rs_client_dispatch, and keeps N
 * (--pending, default 300) rs_mutex_acquire_async requests pending over the scenario's few
 * names, next to the blocking workers of the other slots on the same names, so that most of
 * them wait in the names' queues in Redis. Each request is one of
 *
 *   plain   deadline ASYNC_BOUND_MS (ETIMEDOUT there is a liveness failure, as for the
 *           blocking workers' lock; 5 s above their bound: when the process itself is
 *           stopped past the lease, each of its hundreds of requests waits out the stop,
 *           then, its queue entries having expired, the whole line again)
 *   short   deadline 20-600 ms: ETIMEDOUT or a grant
 *   cancel  no deadline; rs_request_cancel 0-300 ms after it was made: ECANCELED, or a grant
 *           that came first
 *
 * and a request that ends is made again at once, so N stay pending. A grant is a section as
 * the blocking mutex workers' (worker.c): t_acq when done(0) runs, the hold's token from
 * rs_hold_fence; enter on the checker (a fault command: "kill" records the event with the
 * count of requests pending and raise(SIGKILL); "stop" the same after the fenced read, then
 * raise(SIGSTOP)); the fenced read under the token; a short hold (1-4 ms, on the loop's
 * timer: the loop keeps dispatching meanwhile); the fenced write; t_rel; then
 * rs_hold_release_async, whose done(rc) records the section with rc ("SLOT GEN NAME FENCE
 * T_ACQ T_REL RC RD WR 1 x ONLOST T_REQ 0 T_END", ONLOST: on_lost calls for the name during
 * it, T_END: when done ran),
 * so the checker's I1-I4 and I6 treat it as any section. done must run exactly once per
 * request, with a hold iff rc is 0, and a code its kind allows (else an API violation).
 *
 * Every 50 ms the worker writes pend:SLOT (requests pending, for the driver's report at a
 * kill -9 or SIGSTOP of the process) and adds its requests' outcomes to the "aout" hash. At
 * the driver's stop it cancels every pending request, releases its holds and waits for
 * every done (30 s at most), then returns to worker_main, which destroys the handles (EBUSY
 * would be a request or hold left over) and closes the client.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "worker.h"

#define ASYNC_BOUND_MS (LOCK_BOUND_MS + 5000)

enum { K_PLAIN, K_SHORT, K_CANCEL };
enum { S_FREE, S_PENDING, S_HELD, S_RELEASING };
enum { O_GRANTED, O_TIMEDOUT, O_CANCELED, O_ECONN, O_LOST, O_OTHER, O_COUNT };
static const char *const out_names[O_COUNT] = {"granted", "ETIMEDOUT", "ECANCELED",
                                               "RS_ECONN", "release-RS_ELOST", "other"};

typedef struct areq {
    int ni, kind, state, cancelled;
    rs_request_t *req;
    rs_hold_t *hold;
    uint64_t fence;
    int64_t t_req, t_acq, t_rel;
    int64_t due;   /* held: when to write and release; a pending cancel-kind: when to cancel */
    int rd, wr;
    long long v;
    long onl0;
} areq_t;

static worker_t *g_w;
static int g_pending;          /* requests made whose done has not run */
static int g_stopping;
static long g_out[O_COUNT];    /* outcomes not yet added to "aout" */

static void name_of(int ni, char *buf, size_t len)
{
    snprintf(buf, len, "n%d", ni);
}

/* "K|S SLOT T NAME FENCE PENDING" */
static void event_pending(worker_t *w, char kind, const char *name, uint64_t fence)
{
    char buf[160];
    snprintf(buf, sizeof buf, "%c %d %lld %s %llu %d", kind, w->slot, (long long)now_us(), name,
             (unsigned long long)fence, g_pending);
    freeReplyObject(ck_cmd(w->ck, "RPUSH ev %s", buf));
}

static void done_rel(int rc, rs_hold_t *hold, void *arg)
{
    areq_t *q = arg;
    worker_t *w = g_w;
    char name[16];
    name_of(q->ni, name, sizeof name);
    if (q->state != S_RELEASING)
        api_bad(w, "w%d %s: a release's done ran in state %d (twice?)", w->slot, name, q->state);
    if (hold)
        api_bad(w, "w%d %s: a release's done came with a hold", w->slot, name);
    if (rc == RS_ELOST) {
        w->elost++;
        g_out[O_LOST]++;
    } else if (rc != 0) {
        count_err(w, "unlock", rc);
        if (rc != RS_ECONN)
            api_bad(w, "w%d: rs_hold_release_async %s: done(%d %s)", w->slot, name, rc,
                    rs_strerror(rc));
    }
    char rec[256];
    snprintf(rec, sizeof rec, "%d %d %s %llu %lld %lld %d %d %d 1 x %ld %lld 0 %lld", w->slot,
             w->gen, name, (unsigned long long)q->fence, (long long)q->t_acq,
             (long long)q->t_rel, rc, q->rd, q->wr,
             atomic_load(&g_onlost_name[q->ni]) - q->onl0, (long long)q->t_req,
             (long long)now_us());
    redisAppendCommand(w->ck, "DEL in:%d", w->slot);
    redisAppendCommand(w->ck, "RPUSH sec %s", rec);
    redisAppendCommand(w->ck, "INCR n:%d", w->slot);
    for (int i = 0; i < 3; i++) {
        redisReply *r;
        if (redisGetReply(w->ck, (void **)&r) != REDIS_OK) {
            fprintf(stderr, "faults[w%d]: checker connection failed\n", w->slot);
            exit(3);
        }
        freeReplyObject(r);
    }
    q->state = S_FREE;
}

/* A grant: the section's first half (its second is release_due, on the timer). */
static void grant(areq_t *q, rs_hold_t *hold)
{
    worker_t *w = g_w;
    char name[16];
    name_of(q->ni, name, sizeof name);
    q->hold = hold;
    q->t_acq = now_us();
    q->state = S_HELD;
    q->onl0 = atomic_load(&g_onlost_name[q->ni]);
    q->fence = rs_hold_fence(hold);
    if (q->fence == 0)
        api_bad(w, "w%d %s: a granted mutex hold object has fencing token 0", w->slot, name);
    long net_id = 0;
    int cmd = ck_enter(w, name, q->t_acq, &net_id);
    if (cmd == 'k') {
        event_pending(w, 'K', name, q->fence);
        raise(SIGKILL);
    }
    q->rd = ck_fread(w, name, q->fence, &q->v);
    if (cmd == 's') {
        event_pending(w, 'S', name, q->fence);
        raise(SIGSTOP);
    }
    q->due = now_us() + rnd_range(&w->rng, 1, 4) * 1000;
}

static void release_due(areq_t *q)
{
    worker_t *w = g_w;
    char name[16];
    name_of(q->ni, name, sizeof name);
    q->wr = q->rd == 1 ? ck_fwrite(w, name, q->fence, q->v) : 0;
    q->t_rel = now_us();
    q->state = S_RELEASING;
    rs_hold_t *h = q->hold;
    q->hold = NULL;
    int rc = rs_hold_release_async(h, done_rel, q);
    if (rc != 0) { /* done will not run: the section ends here, its hold left to its lease */
        api_bad(w, "w%d: rs_hold_release_async %s returned %d (%s)", w->slot, name, rc,
                rs_client_lasterror(w->c));
        done_rel(rc, NULL, q);
    }
}

static void done_acq(int rc, rs_hold_t *hold, void *arg)
{
    areq_t *q = arg;
    worker_t *w = g_w;
    char name[16];
    name_of(q->ni, name, sizeof name);
    if (q->state != S_PENDING) {
        api_bad(w, "w%d %s: an acquisition's done ran in state %d (twice?)", w->slot, name,
                q->state);
        return;
    }
    g_pending--;
    q->req = NULL;
    if ((rc == 0) != (hold != NULL)) {
        api_bad(w, "w%d %s: done(%d) with hold %p", w->slot, name, rc, (void *)hold);
        q->state = S_FREE;
        return;
    }
    if (rc == 0) {
        g_out[O_GRANTED]++;
        grant(q, hold);
        return;
    }
    q->state = S_FREE;
    if (rc == ETIMEDOUT && q->kind == K_SHORT) {
        g_out[O_TIMEDOUT]++;
    } else if (rc == ETIMEDOUT && q->kind == K_PLAIN) {
        g_out[O_TIMEDOUT]++;
        count_err(w, "lock", rc);
        live_bad(w, "w%d gen %d: async request on %s waited %lld ms without a grant", w->slot,
                 w->gen, name, (long long)(now_us() - q->t_req) / 1000);
    } else if (rc == ECANCELED && q->cancelled) {
        g_out[O_CANCELED]++;
    } else if (rc == RS_ECONN) {
        g_out[O_ECONN]++;
        count_err(w, "lock", rc);
    } else {
        g_out[O_OTHER]++;
        count_err(w, "lock", rc);
        api_bad(w, "w%d: a kind %d async request on %s (cancelled %d) ended with %d (%s)",
                w->slot, q->kind, name, q->cancelled, rc, rs_strerror(rc));
    }
}

static void submit(areq_t *q)
{
    worker_t *w = g_w;
    memset(q, 0, sizeof *q);
    q->ni = (int)rnd_range(&w->rng, 0, w->names - 1);
    long r = rnd_range(&w->rng, 0, 99);
    q->kind = r < 70 ? K_PLAIN : r < 90 ? K_SHORT : K_CANCEL;
    long ms = q->kind == K_PLAIN ? ASYNC_BOUND_MS : rnd_range(&w->rng, 20, 600);
    struct timespec dl = abs_in_ms(ms);
    q->t_req = now_us();
    if (q->kind == K_CANCEL)
        q->due = q->t_req + rnd_range(&w->rng, 0, 300) * 1000;
    q->state = S_PENDING;
    g_pending++;
    int rc = rs_mutex_acquire_async(w->h[q->ni], q->kind == K_CANCEL ? NULL : &dl, done_acq, q,
                                    &q->req);
    if (rc != 0) {
        g_pending--;
        q->state = S_FREE;
        api_bad(w, "w%d: rs_mutex_acquire_async n%d returned %d (%s)", w->slot, q->ni, rc,
                rs_client_lasterror(w->c));
        sleep_us(20000);
    }
}

/* pend:SLOT, the outcomes so far into "aout"; returns the stop flag. */
static long long publish(worker_t *w)
{
    int n = 1;
    redisAppendCommand(w->ck, "SET pend:%d %d", w->slot, g_pending);
    for (int k = 0; k < O_COUNT; k++)
        if (g_out[k]) {
            redisAppendCommand(w->ck, "HINCRBY aout %s %ld", out_names[k], g_out[k]);
            g_out[k] = 0;
            n++;
        }
    redisAppendCommand(w->ck, "GET stop");
    long long stop = 0;
    for (int i = 0; i <= n; i++) {
        redisReply *r;
        if (redisGetReply(w->ck, (void **)&r) != REDIS_OK) {
            fprintf(stderr, "faults[w%d]: checker connection failed\n", w->slot);
            exit(3);
        }
        if (i == n && r->type == REDIS_REPLY_STRING)
            stop = strtoll(r->str, NULL, 10);
        freeReplyObject(r);
    }
    return stop;
}

void async_loop(worker_t *w)
{
    g_w = w;
    int n = w->async_pending;
    areq_t *q = calloc((size_t)n, sizeof *q);
    int efd = rs_client_fd(w->c);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    if (!q || efd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) != 0) {
        fprintf(stderr, "faults[w%d]: async setup: fd %d: %s (%s)\n", w->slot, efd,
                strerror(errno), rs_client_lasterror(w->c));
        exit(4);
    }
    int64_t next_pub = 0, give_up = 0;
    for (;;) {
        int64_t now = now_us(), next = now + 20000;
        int busy = 0;
        for (int i = 0; i < n; i++) {
            areq_t *x = &q[i];
            if (x->state == S_HELD && x->due <= now)
                release_due(x);
            else if (x->state == S_PENDING && x->kind == K_CANCEL && x->due && x->due <= now) {
                x->due = 0;
                x->cancelled = 1;
                int rc = rs_request_cancel(x->req); /* this thread dispatches: req is valid */
                if (rc != 0)
                    api_bad(w, "w%d: rs_request_cancel returned %d", w->slot, rc);
            }
            if (x->state == S_FREE && !g_stopping)
                submit(x);
            if ((x->state == S_HELD || (x->state == S_PENDING && x->kind == K_CANCEL && x->due)) &&
                x->due < next)
                next = x->due;
            busy += x->state != S_FREE;
        }
        if (g_stopping && busy == 0)
            break;
        if (now >= next_pub) {
            long long stop = publish(w);
            next_pub = now + 50000;
            if (stop && !g_stopping) {
                g_stopping = 1;
                give_up = now + 30000000;
                for (int i = 0; i < n; i++)
                    if (q[i].state == S_PENDING) {
                        q[i].cancelled = 1;
                        q[i].due = 0;
                        if (rs_request_cancel(q[i].req) != 0)
                            api_bad(w, "w%d: rs_request_cancel at the stop failed", w->slot);
                    }
            }
            if (g_stopping && now > give_up) {
                live_bad(w, "w%d: %d request(s) or hold(s) not done 30 s after the stop "
                         "(every pending request was cancelled)", w->slot, busy);
                break;
            }
        }
        int ms = (int)((next - now_us() + 999) / 1000);
        struct epoll_event got;
        if (epoll_wait(ep, &got, 1, ms < 0 ? 0 : ms > 20 ? 20 : ms) < 0 && errno != EINTR)
            api_bad(w, "w%d: epoll_wait: %s", w->slot, strerror(errno));
        rs_client_dispatch(w->c);
    }
    publish(w);
    close(ep);
    free(q);
}
