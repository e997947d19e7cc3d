/*
 * test_cond_relock.c - a woken condition waiter's re-acquisition of the mutex, sent by the
 * subscriber thread as the waking message arrives (primitives/cond/cond.c, relock_t), and
 * every way that early send can meet trouble. Each test checks that the early send was made
 * (the client's cond_presends counter), so that it exercises that path and not the waiter's
 * own send, and that the wait returns holding the mutex with a higher fencing token. The
 * signals come from another client: a signal of the waiter's own client borrows the idle
 * connection the early send would take (it then is the waiter's, as before).
 *
 *   sent_at_the_wake_up          signal: the waiter returns holding the mutex, one early send
 *   noscript_sent_again          SCRIPT FLUSH before the signal: the early send meets
 *                                NOSCRIPT; the script is loaded and the call sent again
 *   dead_connection_sent_again   the idle connection killed (CLIENT KILL) before the signal:
 *                                the early send's reply never comes; a new connection
 *   mutex_held_elsewhere         another client holds the mutex at the signal: the early send
 *                                queues the waiter, the holder's unlock hands it over through
 *                                the waiter registered before the send
 *   broadcast_more_than_idle     a broadcast wakes four waiters of one client with fewer idle
 *                                connections: some sent early, the others by their threads;
 *                                all four hold the mutex in turn, never two at once
 *   over_tls                     the same as the first over TLS (the subscriber thread writes
 *                                on a TLS connection the waiter then reads)
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "internal.h" /* rs_client's cond_presends: the tests link the static library */
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_tls.h"
#include "test_util.h"

TestSuite(cond_relock, .timeout = 60);

typedef struct {
    rs_client_t *c;
    rs_cond_t *cv;
    rs_mutex_t *m;
    atomic_int *inside; /* holders of the mutex right now (shared by the waiters) */
    atomic_int overlap;
    uint64_t before, after;
    int rc, unlock_rc;
    atomic_int done;
} waiter_t;

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    w->rc = -1;
    if (rs_mutex_lock(w->m) == 0) {
        w->before = rs_mutex_fence(w->m);
        w->rc = rs_cond_wait(w->cv, w->m);
        w->after = rs_mutex_fence(w->m);
        if (w->inside && atomic_fetch_add(w->inside, 1) != 0)
            atomic_fetch_add(&w->overlap, 1);
        tu_sleep_ms(5);
        if (w->inside)
            atomic_fetch_sub(w->inside, 1);
        w->unlock_rc = rs_mutex_unlock(w->m);
    }
    atomic_store(&w->done, 1);
    return NULL;
}

static unsigned presends(rs_client_t *c)
{
    return atomic_load(&c->cond_presends);
}

/* Polls until the condition "cv" has n waiters and the mutex "cm" is free (the waiters
 * released it); 1 if within 10 s. */
static int waiting(const ts_server_t *s, long long n)
{
    for (int i = 0; i < 1000; i++) {
        if (ts_cmd_int(s, "ZCARD rs:{cv}:cond") == n && ts_cmd_int(s, "HEXISTS rs:{cm}:mutex o") == 0)
            return 1;
        tu_sleep_ms(10);
    }
    return 0;
}

/* One waiter on client c signalled by client sc; before the signal, fault() (may be NULL)
 * meddles with server s. */
static void one_waiter(rs_client_t *c, rs_client_t *sc, const ts_server_t *s,
                       void (*fault)(const ts_server_t *s))
{
    rs_cond_t *cv, *scv;
    rs_mutex_t *m;
    cr_assert_eq(rs_cond_init(&cv, c, "cv"), 0);
    cr_assert_eq(rs_cond_init(&scv, sc, "cv"), 0);
    cr_assert_eq(rs_mutex_init(&m, c, "cm"), 0);
    waiter_t w = {.c = c, .cv = cv, .m = m};
    pthread_t t;
    tu_thread_start(&t, waiter_main, &w);
    cr_assert(waiting(s, 1), "the waiter never queued");
    if (fault)
        fault(s);
    unsigned p0 = presends(c);
    cr_assert_eq(rs_cond_signal(scv), 0, "%s", rs_client_lasterror(sc));
    cr_assert(tu_thread_join(t, &w.done, 20000), "the waiter never returned");
    cr_expect_eq(w.rc, 0, "wait: %d", w.rc);
    cr_expect_gt(w.after, w.before, "not holding with a new token (%llu after %llu)",
                 (unsigned long long)w.after, (unsigned long long)w.before);
    cr_expect_eq(w.unlock_rc, 0, "unlock after the wait: %d", w.unlock_rc);
    cr_expect_eq(presends(c) - p0, 1, "early sends: %u", presends(c) - p0);
    cr_expect_eq(ts_cmd_int(s, "HEXISTS rs:{cm}:mutex o"), 0, "the mutex was left held");
    rs_cond_destroy(cv);
    rs_cond_destroy(scv);
    rs_mutex_destroy(m);
}

/* one_waiter on a server of its own, the waiter's and the signaller's clients on it */
static void on_a_server(void (*fault)(const ts_server_t *s))
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 0, NULL), *sc = tu_open_client(&s, 5000, 0, NULL);
    one_waiter(c, sc, &s, fault);
    rs_client_close(c);
    rs_client_close(sc);
    ts_server_stop(&s);
}

Test(cond_relock, sent_at_the_wake_up)
{
    on_a_server(NULL);
}

static void flush_scripts(const ts_server_t *s)
{
    char buf[16];
    cr_assert_str_eq(ts_cmd_str(s, buf, sizeof buf, "SCRIPT FLUSH"), "OK");
}

Test(cond_relock, noscript_sent_again)
{
    on_a_server(flush_scripts);
}

static void kill_normal(const ts_server_t *s)
{
    cr_assert_geq(ts_cmd_int(s, "CLIENT KILL TYPE normal"), 1);
}

Test(cond_relock, dead_connection_sent_again)
{
    on_a_server(kill_normal);
}

Test(cond_relock, mutex_held_elsewhere)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 0, NULL), *o = tu_open_client(&s, 5000, 0, NULL);
    rs_cond_t *cv, *ocv;
    rs_mutex_t *m, *om;
    cr_assert_eq(rs_cond_init(&cv, c, "cv"), 0);
    cr_assert_eq(rs_cond_init(&ocv, o, "cv"), 0);
    cr_assert_eq(rs_mutex_init(&m, c, "cm"), 0);
    cr_assert_eq(rs_mutex_init(&om, o, "cm"), 0);
    waiter_t w = {.c = c, .cv = cv, .m = m};
    pthread_t t;
    tu_thread_start(&t, waiter_main, &w);
    cr_assert(waiting(&s, 1), "the waiter never queued");
    cr_assert_eq(rs_mutex_lock(om), 0);
    uint64_t held = rs_mutex_fence(om);
    unsigned p0 = presends(c);
    cr_assert_eq(rs_cond_signal(ocv), 0);
    /* the early send queues the waiter behind the holder */
    int queued = 0;
    for (int i = 0; i < 1000 && !queued; i++, tu_sleep_ms(10))
        queued = ts_cmd_int(&s, "ZCARD rs:{cm}:mutex:q") == 1;
    cr_expect(queued, "the woken waiter never queued on the mutex");
    cr_expect_eq(atomic_load(&w.done), 0, "the wait returned while another client held the mutex");
    cr_assert_eq(rs_mutex_unlock(om), 0);
    cr_assert(tu_thread_join(t, &w.done, 20000), "the waiter never returned");
    cr_expect_eq(w.rc, 0, "wait: %d", w.rc);
    cr_expect_gt(w.after, held, "token %llu not above the other holder's %llu",
                 (unsigned long long)w.after, (unsigned long long)held);
    cr_expect_eq(w.unlock_rc, 0);
    cr_expect_eq(presends(c) - p0, 1, "early sends: %u", presends(c) - p0);
    rs_cond_destroy(cv);
    rs_cond_destroy(ocv);
    rs_mutex_destroy(m);
    rs_mutex_destroy(om);
    rs_client_close(c);
    rs_client_close(o);
    ts_server_stop(&s);
}

Test(cond_relock, broadcast_more_than_idle)
{
    enum { N = 4 };
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 0, NULL), *sc = tu_open_client(&s, 5000, 0, NULL);
    rs_cond_t *cv, *scv;
    rs_mutex_t *m[N];
    cr_assert_eq(rs_cond_init(&cv, c, "cv"), 0);
    cr_assert_eq(rs_cond_init(&scv, sc, "cv"), 0);
    atomic_int inside = 0;
    waiter_t w[N];
    pthread_t t[N];
    memset(w, 0, sizeof w);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(rs_mutex_init(&m[i], c, "cm"), 0);
        w[i] = (waiter_t){.c = c, .cv = cv, .m = m[i], .inside = &inside};
        tu_thread_start(&t[i], waiter_main, &w[i]);
    }
    cr_assert(waiting(&s, N), "the waiters never queued");
    unsigned p0 = presends(c);
    cr_assert_eq(rs_cond_broadcast(scv), 0);
    for (int i = 0; i < N; i++) {
        cr_assert(tu_thread_join(t[i], &w[i].done, 20000), "waiter %d never returned", i);
        cr_expect_eq(w[i].rc, 0, "waiter %d: %d", i, w[i].rc);
        cr_expect_eq(w[i].unlock_rc, 0, "waiter %d's unlock: %d", i, w[i].unlock_rc);
        cr_expect_eq(atomic_load(&w[i].overlap), 0, "waiter %d held with another", i);
        cr_expect_gt(w[i].after, w[i].before);
    }
    unsigned n = presends(c) - p0;
    cr_expect(n >= 1 && n <= N, "early sends: %u", n);
    cr_expect_eq(ts_cmd_int(&s, "HEXISTS rs:{cm}:mutex o"), 0, "the mutex was left held");
    for (int i = 0; i < N; i++)
        rs_mutex_destroy(m[i]);
    rs_cond_destroy(cv);
    rs_cond_destroy(scv);
    rs_client_close(c);
    rs_client_close(sc);
    ts_server_stop(&s);
}

Test(cond_relock, over_tls)
{
    env_t e;
    env_start(&e, NULL, 0);
    rs_client_t *c = open_ok(e.url, 5000, NULL), *sc = open_ok(e.url, 5000, NULL);
    one_waiter(c, sc, &e.s, NULL);
    rs_client_close(c);
    rs_client_close(sc);
    env_stop(&e);
}
