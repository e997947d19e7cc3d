/*
 * stress_async_dial.c - the event-loop API's dialer threads (lib/async_dial.c) under the
 * sanitizers (make check-tsan, check-valgrind): three redis-servers as redlock:// masters,
 * ROUNDS rounds. Each round opens a client, stops one master (SIGSTOP: the kernel still
 * accepts connections to it, nothing answers, so every dial to it hangs for its budget),
 * submits REQS rs_mutex_acquire_async requests on NAMES names (no deadline, a deadline 5 ms
 * away, one already past, one cancelled at once; a grant released at once with
 * rs_hold_release_async), dispatches for a random 0-300 ms, has the master resumed at a
 * random moment by another thread (before, during or after the close: a dial under way then
 * succeeds after the close began) and closes the client with whatever is pending.
 *
 * Checks: every done runs exactly once, with a code the contract allows (0, ETIMEDOUT,
 * EBUSY, ECANCELED, RS_ECONN); the close returns (a dialer thread is joined within a dial's
 * budget); at the end no library connection is left open on any master (a context a dialer
 * thread made after the close began and nobody freed would be one); TSan: the hand-over of
 * the dials between the threads; valgrind/ASan: nothing leaks.
 */
#include "stress.h"

#define NM 3
#define NAMES 8
#define REQS 24

typedef struct req {
    int i, ran, rc;
} req_t;

static int g_rel_ran, g_rel_want;

static void rel_done(int rc, rs_hold_t *hold, void *arg)
{
    (void)hold, (void)arg;
    g_rel_ran++;
    if (rc != 0 && rc != ECANCELED && rc != RS_ECONN && rc != RS_ELOST)
        FAILF("release: done(%d)", rc);
}

static void acq_done(int rc, rs_hold_t *hold, void *arg)
{
    req_t *r = arg;
    r->ran++;
    r->rc = rc;
    if (rc != 0 && rc != ETIMEDOUT && rc != EBUSY && rc != ECANCELED && rc != RS_ECONN)
        FAILF("request %d: done(%d)", r->i, rc);
    if (rc == 0 && hold) {
        g_rel_want++;
        if (rs_hold_release_async(hold, rel_done, NULL) != 0) {
            g_rel_ran++; /* refused (closing): the hold's memory went with it */
        }
    } else if (rc == 0) {
        FAILF("request %d: done(0) without a hold", r->i);
    }
}

typedef struct resumer {
    ts_server_t *s;
    long after_ms;
} resumer_t;

static void *resume_main(void *arg)
{
    resumer_t *r = arg;
    st_sleep_ms(r->after_ms);
    ts_server_resume(r->s);
    return NULL;
}

/* Dispatches c's completions for ms. */
static void pump(rs_client_t *c, long ms)
{
    for (long long end = st_mono_ms() + ms; st_mono_ms() < end; st_sleep_ms(5))
        rs_client_dispatch(c);
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv[NM];
    char url[256], prefix[64];
    st_start_redlock(srv, NM, url, sizeof url, prefix, sizeof prefix, "stress_async_dial");
    unsigned seed = 11;
    int rounds = st_scaled(20);
    long long close_max = 0;
    for (int round = 0; round < rounds; round++) {
        rs_client_t *c = st_open_url(url, prefix);
        rs_mutex_t *m[NAMES];
        char name[32];
        for (int i = 0; i < NAMES; i++) {
            snprintf(name, sizeof name, "stress-dial-%d", i);
            EXPECT_RC(rs_mutex_init(&m[i], c, name), 0);
        }
        ts_server_t *stopped = &srv[round % NM];
        ts_server_pause(stopped);
        resumer_t rs = {stopped, (long)(st_rand(&seed) % 600)};
        pthread_t th;
        st_spawn(&th, resume_main, &rs);
        static req_t r[REQS];
        memset(r, 0, sizeof r);
        g_rel_ran = g_rel_want = 0;
        for (int i = 0; i < REQS; i++) {
            r[i].i = i;
            struct timespec soon = st_abs_in(5), past = st_abs_in(-1);
            const struct timespec *dl = i % 4 == 1 ? &soon : i % 4 == 2 ? &past : NULL;
            rs_request_t *req = NULL;
            int rc = rs_mutex_acquire_async(m[i % NAMES], dl, acq_done, &r[i], &req);
            if (rc != 0) {
                FAILF("request %d: rs_mutex_acquire_async returned %d (%s)", i, rc,
                      rs_client_lasterror(c));
                r[i].ran = 1;
                continue;
            }
            if (i % 4 == 3)
                EXPECT_RC(rs_request_cancel(req), 0);
        }
        pump(c, (long)(st_rand(&seed) % 300));
        long long before = st_mono_ms();
        EXPECT_RC(rs_client_close(c), 0);
        long long took = st_mono_ms() - before;
        if (took > close_max)
            close_max = took;
        pthread_join(th, NULL);
        for (int i = 0; i < REQS; i++)
            if (r[i].ran != 1)
                FAILF("round %d: request %d: done ran %d times", round, i, r[i].ran);
        if (g_rel_ran != g_rel_want)
            FAILF("round %d: %d of %d releases done", round, g_rel_ran, g_rel_want);
        for (int i = 0; i < NAMES; i++)
            rs_mutex_destroy(m[i]);
    }
    if (st_verbose())
        fprintf(stderr, "stress_async_dial: %d rounds, the longest close %lld ms\n", rounds,
                close_max);
    st_stop_redlock(srv, NM);
    return st_summary(t0);
}
