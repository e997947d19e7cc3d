/*
 * uv_lock.c - redisync's non-blocking API in a libuv loop (Debian: libuv1-dev).
 *
 *   build/examples/uv_lock [URL]  (URL: argv[1], else $REDISYNC_URL, else
 *                                  redis://127.0.0.1:6379)
 *
 * One thread, one uv_loop_t. rs_client_fd(client) is watched by a uv_poll_t whose callback
 * calls rs_client_dispatch(client), which runs the done callbacks on the loop's thread:
 *
 *     rs_mutex_acquire_async(m, &deadline, granted, job, &req);  returns at once
 *     granted(0, hold, job): the job holds the mutex; a uv_timer_t ends its work 2 ms later
 *     timer fires: rs_hold_release_async(hold, released, job)     returns at once
 *
 * What it does, and checks (exit 0 only if all of it behaved):
 *   - 3 mutexes, 10 jobs each, all requested at the start in order: every job is granted
 *     once, the grants of one mutex come in the order the jobs asked (FIFO), two holds of one
 *     mutex never overlap, fencing tokens only rise, every release reports 0;
 *   - a deadline: while a "gate" mutex is held, a request with a 300 ms deadline gets
 *     done(ETIMEDOUT) with no hold;
 *   - a cancel: another request on the gate, 30 s deadline, is cancelled after 100 ms with
 *     rs_request_cancel and gets done(ECANCELED) with no hold;
 *   - after the gate's release, a last request on it is granted (the expired and cancelled
 *     requests left its queue) and released;
 *   - then every handle is closed, the loop runs out, and the client closes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <redisync.h>
#include <uv.h>

#define NAMES 3
#define JOBS 10 /* per name */

typedef struct lockname {
    rs_mutex_t *m;
    int next;            /* the job number the next grant must have (FIFO) */
    int busy;            /* a job holds it now */
    uint64_t last_fence;
} lockname_t;

typedef struct job {
    int id;              /* order of asking on its name */
    lockname_t *ln;
    rs_hold_t *hold;
    uv_timer_t work;
} job_t;

static uv_loop_t *loop;
static rs_client_t *client;
static uv_poll_t poller;
static uv_timer_t cancel_timer, guard;
static lockname_t names[NAMES];
static job_t jobs[NAMES][JOBS];
static rs_mutex_t *gate;
static rs_hold_t *gate_hold;
static rs_request_t *cancel_req;
static int granted_n, released_n, failures, order_errors, overlaps, fence_drops;
static int timed_out, cancelled, gate_released, last_done, stuck; /* answered */
static int timeout_ok, cancel_ok; /* answered as they should be */

static void fail(const char *what, int rc)
{
    fprintf(stderr, "uv_lock: %s: %s\n", what, rs_strerror(rc));
    failures++;
}

static struct timespec deadline_in(long ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static void close_one(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Everything is over (or stuck): close every handle; uv_run then returns. */
static void finish(void)
{
    uv_walk(loop, close_one, NULL);
}

static int all_done(void)
{
    return released_n == NAMES * JOBS && timed_out + cancelled == 2 && gate_released &&
           last_done;
}

static void maybe_finish(void)
{
    if (all_done())
        finish();
}

/* ---- the jobs: FIFO per name, no overlap, rising tokens ---- */

static void job_released(int rc, rs_hold_t *hold, void *arg)
{
    job_t *j = arg;
    (void)hold;
    released_n++;
    if (rc != 0)
        fprintf(stderr, "uv_lock: job %d: release: %s: %s\n", j->id, rs_strerror(rc),
                rs_client_lasterror(NULL)), failures++;
    maybe_finish();
}

static void work_done(uv_timer_t *t)
{
    job_t *j = t->data;
    j->ln->busy = 0; /* handed back before the release: the next grant may come at once */
    int rc = rs_hold_release_async(j->hold, job_released, j);
    j->hold = NULL;
    if (rc != 0) {
        fail("release_async", rc);
        released_n++;
        maybe_finish();
    }
}

static void job_granted(int rc, rs_hold_t *hold, void *arg)
{
    job_t *j = arg;
    lockname_t *ln = j->ln;
    if (rc != 0) {
        fprintf(stderr, "uv_lock: job %d: %s: %s\n", j->id, rs_strerror(rc),
                rs_client_lasterror(NULL)); /* inside done: this request's message */
        failures++;
        released_n++; /* nothing to release */
        maybe_finish();
        return;
    }
    granted_n++;
    if (j->id != ln->next)
        order_errors++;
    ln->next = j->id + 1;
    if (ln->busy)
        overlaps++;
    ln->busy = 1;
    uint64_t f = rs_hold_fence(hold);
    if (f <= ln->last_fence)
        fence_drops++;
    ln->last_fence = f;
    j->hold = hold;
    uv_timer_start(&j->work, work_done, 2, 0); /* the work: 2 ms */
}

/* ---- the gate: a deadline that expires, a cancel, then a last grant ---- */

static void last_released(int rc, rs_hold_t *hold, void *arg)
{
    (void)hold, (void)arg;
    if (rc != 0)
        fail("last release", rc);
    last_done = 1;
    maybe_finish();
}

static void last_granted(int rc, rs_hold_t *hold, void *arg)
{
    (void)arg;
    if (rc != 0) {
        fail("last request on the gate", rc);
        last_done = 1;
        maybe_finish();
        return;
    }
    rc = rs_hold_release_async(hold, last_released, NULL);
    if (rc != 0) {
        fail("last release_async", rc);
        last_done = 1;
        maybe_finish();
    }
}

static void gate_released_cb(int rc, rs_hold_t *hold, void *arg)
{
    (void)hold, (void)arg;
    if (rc != 0)
        fail("gate release", rc);
    gate_released = 1;
    /* the expired and the cancelled request left the queue: this one gets it at once */
    struct timespec dl = deadline_in(10000);
    rs_request_t *req;
    rc = rs_mutex_acquire_async(gate, &dl, last_granted, NULL, &req);
    if (rc != 0) {
        fail("last acquire_async", rc);
        last_done = 1;
    }
    maybe_finish();
}

/* Both waiters behind the gate have their answer: open it. */
static void gate_waiter_over(void)
{
    if (timed_out + cancelled < 2)
        return;
    int rc = rs_hold_release_async(gate_hold, gate_released_cb, NULL);
    gate_hold = NULL;
    if (rc != 0) {
        fail("gate release_async", rc);
        gate_released = last_done = 1;
        maybe_finish();
    }
}

static void deadline_done(int rc, rs_hold_t *hold, void *arg)
{
    (void)arg;
    if (rc != ETIMEDOUT || hold != NULL) {
        fprintf(stderr, "uv_lock: deadline request: %s (want ETIMEDOUT)\n", rs_strerror(rc));
        failures++;
        if (hold)
            rs_hold_release(hold); /* not ours to keep (a failure already) */
    } else {
        timeout_ok = 1;
    }
    timed_out = 1;
    gate_waiter_over();
}

static void cancel_done(int rc, rs_hold_t *hold, void *arg)
{
    (void)arg;
    cancel_req = NULL; /* invalid from here on */
    if (rc != ECANCELED || hold != NULL) {
        fprintf(stderr, "uv_lock: cancelled request: %s (want ECANCELED)\n", rs_strerror(rc));
        failures++;
        if (hold)
            rs_hold_release(hold);
    } else {
        cancel_ok = 1;
    }
    cancelled = 1;
    gate_waiter_over();
}

static void cancel_now(uv_timer_t *t)
{
    (void)t;
    if (!cancel_req)
        return; /* done already ran: cancel_done reports it */
    int rc = rs_request_cancel(cancel_req);
    if (rc != 0)
        fail("rs_request_cancel", rc);
}

static void gate_granted(int rc, rs_hold_t *hold, void *arg)
{
    (void)arg;
    if (rc != 0) {
        fail("gate", rc);
        timed_out = cancelled = gate_released = last_done = 1;
        maybe_finish();
        return;
    }
    gate_hold = hold;
    rs_request_t *req;
    struct timespec dl = deadline_in(300);
    if ((rc = rs_mutex_acquire_async(gate, &dl, deadline_done, NULL, &req)) != 0) {
        fail("deadline acquire_async", rc);
        timed_out = 1;
    }
    dl = deadline_in(30000);
    if ((rc = rs_mutex_acquire_async(gate, &dl, cancel_done, NULL, &cancel_req)) != 0) {
        fail("cancel acquire_async", rc);
        cancelled = 1;
    } else {
        uv_timer_start(&cancel_timer, cancel_now, 100, 0);
    }
    gate_waiter_over(); /* only if both calls failed */
}

/* ---- the loop's side ---- */

static void readable(uv_poll_t *p, int status, int events)
{
    (void)p, (void)events;
    if (status < 0) {
        fprintf(stderr, "uv_lock: poll: %s\n", uv_strerror(status));
        failures++;
        return;
    }
    rs_client_dispatch(client); /* runs the done callbacks here, on the loop's thread */
}

static void too_long(uv_timer_t *t)
{
    (void)t;
    fprintf(stderr, "uv_lock: stuck: %d of %d jobs released, gate %d/%d/%d/%d\n", released_n,
            NAMES * JOBS, timed_out, cancelled, gate_released, last_done);
    stuck = 1;
    finish();
}

int main(int argc, char **argv)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = argc > 1 ? argv[1] : NULL;
    cfg.lease_ms = 5000;
    int rc = rs_client_open(&client, &cfg);
    if (rc) {
        fprintf(stderr, "open: %s: %s\n", rs_strerror(rc), rs_client_lasterror(NULL));
        return 1;
    }
    int fd = rs_client_fd(client); /* before the first request, as the header asks */
    if (fd < 0) {
        fprintf(stderr, "rs_client_fd: %s\n", rs_client_lasterror(client));
        return 1;
    }
    loop = uv_default_loop();
    uv_poll_init(loop, &poller, fd);
    uv_poll_start(&poller, UV_READABLE, readable);
    uv_timer_init(loop, &cancel_timer);
    uv_timer_init(loop, &guard);
    uv_timer_start(&guard, too_long, 30000, 0);

    if ((rc = rs_mutex_init(&gate, client, "uv-gate")) != 0) {
        fprintf(stderr, "init: %s\n", rs_client_lasterror(client));
        return 1;
    }
    for (int n = 0; n < NAMES; n++) {
        char name[32];
        snprintf(name, sizeof name, "uv-lock-%d", n);
        if ((rc = rs_mutex_init(&names[n].m, client, name)) != 0) {
            fprintf(stderr, "init: %s\n", rs_client_lasterror(client));
            return 1;
        }
    }
    rs_request_t *req;
    if ((rc = rs_mutex_acquire_async(gate, NULL, gate_granted, NULL, &req)) != 0) {
        fprintf(stderr, "gate acquire_async: %s\n", rs_client_lasterror(client));
        return 1;
    }
    /* all the jobs ask now, in order; their grants must come in that order per name */
    for (int k = 0; k < JOBS; k++) {
        for (int n = 0; n < NAMES; n++) {
            job_t *j = &jobs[n][k];
            j->id = k;
            j->ln = &names[n];
            uv_timer_init(loop, &j->work);
            j->work.data = j;
            struct timespec dl = deadline_in(20000);
            if ((rc = rs_mutex_acquire_async(j->ln->m, &dl, job_granted, j, &req)) != 0) {
                fprintf(stderr, "acquire_async: %s\n", rs_client_lasterror(client));
                return 1;
            }
        }
    }

    uv_run(loop, UV_RUN_DEFAULT); /* returns once finish() closed every handle */
    int closed = uv_loop_close(loop);

    int destroy_errors = 0;
    if (!stuck) { /* stuck: requests may still be pending, rs_client_close cancels them */
        destroy_errors += rs_mutex_destroy(gate) != 0;
        for (int n = 0; n < NAMES; n++)
            destroy_errors += rs_mutex_destroy(names[n].m) != 0;
    }
    rs_client_close(client);

    printf("uv_lock: %d jobs granted on %d mutexes, released %d, order errors %d, overlaps %d, "
           "token drops %d, deadline %s, cancel %s, failures %d\n",
           granted_n, NAMES, released_n, order_errors, overlaps, fence_drops,
           timeout_ok ? "ETIMEDOUT" : "FAILED", cancel_ok ? "ECANCELED" : "FAILED", failures);
    int ok = !stuck && granted_n == NAMES * JOBS && released_n == NAMES * JOBS &&
             order_errors == 0 && overlaps == 0 && fence_drops == 0 && failures == 0 &&
             timeout_ok && cancel_ok && gate_released && last_done && closed == 0 &&
             destroy_errors == 0;
    printf("uv_lock: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
