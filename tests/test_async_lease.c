/*
 * test_async_lease.c - the queue entries of pending requests (suite "async"): leases built
 * from the request's id and the name's key alone (in the request's block), renewed by the
 * client's watchdog in its one pipelined round (shared helpers in test_async.h):
 *   entries_renewed_in_one_batch  100 requests pending through several queue-entry leases:
 *                                 every entry still queued, each watchdog round one write
 *                                 batch (rs__watchdog_stats) with the 100 renewals in it, the
 *                                 server's EVALSHAs meanwhile those renewals alone (a renewal
 *                                 that failed would make its request ask again), then
 *                                 granted one after the other
 *   entry_lease_outlives_handle   20 times: requests pending, then cancelled and their handle
 *                                 destroyed while the watchdog may be renewing their entries
 *                                 (under ASan: a renewal rebuilds the call from the lease,
 *                                 never from the handle)
 *   entry_lease_registered_again  20 requests pending with 300 ms entries when the server is
 *                                 stopped for 1.2 s: their leases pass their local deadlines
 *                                 (lost), the requests queue again when it is back and their
 *                                 entries, whose leases live in the requests' blocks and are
 *                                 registered again, stay queued through 2 s (7 lease periods
 *                                 more) until the holder releases; each then granted once
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "internal.h" /* rs__watchdog_stats */
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"
#include "test_async.h"

#define NPEND 100

typedef struct wd_now {
    unsigned long rounds, renewals, batches;
} wd_now_t;

static void wd_now(rs_client_t *c, wd_now_t *w)
{
    rs_wd_stats_t st;
    rs__watchdog_stats(c, &st);
    w->rounds = atomic_load(&st.rounds);
    w->renewals = atomic_load(&st.renewals);
    w->batches = atomic_load(&st.batches);
}

/* Waits (at most 10 s) until a watchdog round ends, then reads the counters. */
static void after_round(rs_client_t *c, wd_now_t *w)
{
    wd_now(c, w);
    unsigned long r0 = w->rounds;
    long long end = tu_mono_ms() + 10000;
    while (w->rounds == r0 && tu_mono_ms() < end) {
        usleep(1000);
        wd_now(c, w);
    }
    cr_assert_neq(w->rounds, r0, "no watchdog round within 10 s");
}

/* n requests of c (queue entries of entry_ms) pending on name behind c2's hold (60 s),
 * every one queued; pend_end releases the hold, waits for every grant and closes it all. */
typedef struct pend {
    ts_server_t s;
    rs_client_t *c, *c2;
    rs_mutex_t *m, *m2;
    rs_hold_t *h;
    const char *name;
    tally_t t;
    treq_t r[NPEND];
    int n;
} pend_t;

static void pend_start(pend_t *p, const char *name, long entry_ms, long timeout_ms, int n)
{
    tu_start_server(&p->s);
    p->name = name;
    p->n = n;
    p->c = tu_open_client(&p->s, entry_ms, timeout_ms, NULL);
    p->c2 = tu_open_client(&p->s, 60000, timeout_ms, NULL);
    cr_assert_eq(rs_mutex_init(&p->m, p->c, name), 0);
    cr_assert_eq(rs_mutex_init(&p->m2, p->c2, name), 0);
    cr_assert_eq(rs_mutex_acquire(p->m2, NULL, &p->h), 0, "%s", rs_client_lasterror(p->c2));
    tally_pend(p->m, &p->t, p->r, n);
    cr_assert(tu_wait_zcard(&p->s, "mutex", name, n, 10000), "queued: %lld",
              tu_zcard_q(&p->s, "mutex", name));
}

static void pend_end(pend_t *p)
{
    cr_expect_eq(p->t.ran, 0);
    cr_assert_eq(rs_hold_release(p->h), 0);
    cr_assert(loop_until(p->c, &p->t.ran, p->n, 30000), "%d of %d done", p->t.ran, p->n);
    cr_expect_eq(p->t.ok, p->n, "errors: %d (last %d)", p->t.errs, p->t.last_rc);
    cr_expect_eq(p->t.overlap, 0, "grants overlapped");
    for (int i = 0; i < p->n; i++)
        cr_expect_eq(p->t.each[i], 1, "request %d completed %d times", i, p->t.each[i]);
    cr_expect_eq(rs_mutex_destroy(p->m), 0);
    cr_expect_eq(rs_mutex_destroy(p->m2), 0);
    rs_client_close(p->c2);
    rs_client_close(p->c);
    ts_server_stop(&p->s);
}

Test(async, entries_renewed_in_one_batch)
{
    /* queue entries of 1 s: renewed every 333 ms; gone 2 s after their last renewal */
    static pend_t p;
    pend_start(&p, "ren", 1000, 0, NPEND);
    rs_client_t *c = p.c;
    /* three rounds first: entries queued over more than two thirds of a period start in two
     * groups, which the next rounds join */
    wd_now_t w0, w1;
    for (int i = 0; i < 3; i++)
        after_round(c, &w0);
    long long e0 = ts_info_ll(&p.s, "commandstats", "cmdstat_evalsha", "calls");
    usleep(2500 * 1000); /* past the entries' 2 s without a renewal */
    after_round(c, &w1);
    long long e1 = ts_info_ll(&p.s, "commandstats", "cmdstat_evalsha", "calls");
    unsigned long rounds = w1.rounds - w0.rounds, batches = w1.batches - w0.batches;
    unsigned long renewals = w1.renewals - w0.renewals;
    cr_expect_geq(rounds, 3, "%lu rounds in 2.5 s of 333 ms periods", rounds);
    cr_expect_eq(batches, rounds, "%lu write batches in %lu rounds: one each", batches, rounds);
    /* every entry in every round (a round may find a few entries out of step, once) */
    cr_expect_geq(renewals, (unsigned long)NPEND * (rounds - 1), "%lu renewals in %lu rounds",
                  renewals, rounds);
    /* the holder's lease is 60 s: no renewal of it, and no waiter's nap ends, meanwhile */
    cr_expect_eq(e1 - e0, (long long)renewals, "%lld EVALSHAs for %lu renewals", e1 - e0,
                 renewals);
    cr_expect_eq(tu_zcard_q(&p.s, "mutex", "ren"), NPEND, "every entry still queued");
    pend_end(&p);
}

#define NOUT 50

Test(async, entry_lease_outlives_handle)
{
    ts_server_t s;
    tu_start_server(&s);
    /* entries of 300 ms: a watchdog round every 100 ms */
    rs_client_t *c = tu_open_client(&s, 300, 0, NULL);
    rs_client_t *c2 = tu_open_client(&s, 60000, 0, NULL);
    rs_mutex_t *m2;
    cr_assert_eq(rs_mutex_init(&m2, c2, "out"), 0);
    rs_hold_t *h;
    cr_assert_eq(rs_mutex_acquire(m2, NULL, &h), 0, "%s", rs_client_lasterror(c2));
    static tally_t t;
    static treq_t r[NOUT];
    static rs_request_t *req[NOUT];
    for (int round = 0; round < 20; round++) {
        rs_mutex_t *m;
        cr_assert_eq(rs_mutex_init(&m, c, "out"), 0);
        memset(&t, 0, sizeof t);
        for (int i = 0; i < NOUT; i++) {
            r[i].t = &t;
            r[i].i = i;
            cr_assert_eq(rs_mutex_acquire_async(m, NULL, tally_done, &r[i], &req[i]), 0,
                         "%s", rs_client_lasterror(c));
        }
        cr_assert(tu_wait_zcard(&s, "mutex", "out", NOUT, 10000), "queued: %lld",
                  tu_zcard_q(&s, "mutex", "out"));
        usleep((useconds_t)(50 + round * 5) * 1000); /* into the rounds, at varying points */
        for (int i = 0; i < NOUT; i++)
            cr_assert_eq(rs_request_cancel(req[i]), 0);
        cr_assert(loop_until(c, &t.ran, NOUT, 10000), "%d of %d done", t.ran, NOUT);
        cr_expect_eq(t.errs, NOUT);
        cr_expect_eq(t.last_rc, ECANCELED);
        /* done ran: the handle goes at once, its entries' leases may still be in a round */
        cr_assert_eq(rs_mutex_destroy(m), 0, "%s", rs_client_lasterror(c));
    }
    cr_expect_eq(tu_zcard_q(&s, "mutex", "out"), 0, "entries left in the queue");
    cr_assert_eq(rs_hold_release(h), 0);
    cr_expect_eq(rs_mutex_destroy(m2), 0);
    rs_client_close(c2);
    rs_client_close(c);
    ts_server_stop(&s);
}

#define NAGAIN 20

Test(async, entry_lease_registered_again)
{
    /* entries of 300 ms (renewed every 100 ms); calls answered within 5 s or re-sent */
    static pend_t p;
    pend_start(&p, "again", 300, 5000, NAGAIN);
    /* past every entry's local deadline: the watchdog marks the leases lost and pokes the
     * requests, which ask again once the server answers (their entries expired there) */
    ts_server_pause(&p.s);
    usleep(1200 * 1000);
    ts_server_resume(&p.s);
    cr_assert(tu_wait_zcard(&p.s, "mutex", "again", NAGAIN, 10000), "queued again: %lld",
              tu_zcard_q(&p.s, "mutex", "again"));
    /* renewed from then on: a lease left lost (not registered again) would let its entry
     * expire 300 ms after the last renewal, and nothing would queue it again before the
     * holder's 60 s lease ran out */
    for (int i = 0; i < 20; i++) {
        usleep(100 * 1000);
        cr_assert_eq(tu_zcard_q(&p.s, "mutex", "again"), NAGAIN, "entries left after %d ms",
                     (i + 1) * 100);
    }
    pend_end(&p);
}
