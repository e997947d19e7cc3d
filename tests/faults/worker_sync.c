/*
 * worker_sync.c - the fault suite's workers for the primitives that hold nothing or hold to
 * run once: rs_once_t and rs_barrier_t (issue 14). See worker.c for the locks and the latch.
 *
 * once (once_loop): rounds; round R is the once "oR". Every worker runs round R until its
 * call returns 0 (fn succeeded here, or had succeeded elsewhere), then goes to R+1, so the
 * workers meet at every round and all but one wait. fn is a section on the checker, recorded
 * in "sec" as the locks' are (worker.c), the name being the round's: enter (which takes a
 * pending kill or stop command of the driver), a fenced read under the run's token, the
 * stop, a short hold, and for a run that succeeds a fenced write; a quarter of the runs fail
 * (fn returns 7, no fenced write: mode 'f') and the run goes to the next waiter. The record's
 * RC: run's return for a succeeding fn (0 only when the done mark was confirmed), RS_ELOST
 * for a failing fn that saw on_lost, else ONCE_FAILED. Each call that returned 0 is recorded
 * in "onc" (RAN 1 when fn ran there). A respawned worker starts a round below the highest
 * one started, which must be done already: it returns 0 at once without running fn.
 *
 * barrier (barrier_loop): every worker waits at the one barrier "B" of PARTIES (< workers)
 * in a loop, with deadlines of 2 s (a quarter of them 0.1-0.6 s: the wait times out and
 * withdraws its arrival under the faults, and is called again; a worker that got through
 * no wait for SYNC_BOUND_MS is a liveness failure). Around each wait it reads the barrier's
 * generation from the data server with a plain connection (G0 before the call, G1 after),
 * and records "SLOT GEN T_CALL T_RET RC G0 G1" in "bar": a party that passed must see
 * G1 > G0 (its generation, >= G0, tripped before it returned).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

#define ONCE_FAILED 1000 /* the record's RC for a run whose fn failed (not lost as seen) */
#define ONCE_FN_FAIL 7   /* what a failing fn returns */

typedef struct once_ctx {
    worker_t *w;
    char name[16];
    int ran, fail, rd, wr;
    uint64_t fence;
    int64_t t_acq, t_rel;
} once_ctx_t;

static int once_fn(void *arg, uint64_t fence)
{
    once_ctx_t *x = arg;
    worker_t *w = x->w;
    x->ran = 1;
    x->fence = fence;
    x->t_acq = now_us();
    if (fence == 0)
        api_bad(w, "w%d %s: a run was given fencing token 0", w->slot, x->name);
    long net_id = 0;
    int cmd = ck_enter(w, x->name, x->t_acq, &net_id);
    if (cmd == 'k') {
        ck_event(w, 'K', x->name, fence);
        raise(SIGKILL);
    }
    x->fail = rnd_range(&w->rng, 0, 99) < 25;
    long long v = 0;
    x->rd = ck_fread(w, x->name, fence, &v);
    if (cmd == 's') {
        ck_event(w, 'S', x->name, fence);
        raise(SIGSTOP);
    }
    sleep_us(rnd_range(&w->rng, 5, 40) * 1000);
    x->wr = x->fail ? -1 : x->rd == 1 ? ck_fwrite(w, x->name, fence, v) : 0;
    x->t_rel = now_us();
    return x->fail ? ONCE_FN_FAIL : 0;
}

/* The highest round any worker started (0 if none), and ours noted. */
static long long note_round(worker_t *w, int round)
{
    redisReply *r = ck_cmd(w->ck, "EVAL %s 1 oround %d",
                           "local v = tonumber(redis.call('GET', KEYS[1]) or '0') "
                           "if tonumber(ARGV[1]) > v then redis.call('SET', KEYS[1], ARGV[1]) end "
                           "return v",
                           round);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    freeReplyObject(r);
    return v;
}

void once_loop(worker_t *w)
{
    long long top = note_round(w, 0);
    int round = top > 1 ? (int)top - 1 : 1; /* a respawn: one done round first */
    int64_t since = now_us();                /* the round's first call */
    while (stop_value(w) == 0) {
        once_ctx_t x;
        memset(&x, 0, sizeof x);
        x.w = w;
        x.rd = x.wr = -1;
        snprintf(x.name, sizeof x.name, "o%d", round);
        rs_once_t *o = NULL;
        int rc;
        for (int tries = 0; (rc = rs_once_init(&o, w->c, x.name)) != 0; tries++) {
            if (rc != RS_ECONN || tries > 40) {
                api_bad(w, "w%d: rs_once_init %s returned %d (%s)", w->slot, x.name, rc,
                        rs_client_lasterror(w->c));
                exit(5);
            }
            sleep_us(50000);
        }
        note_round(w, round);
        long onl0 = atomic_load(&g_onlost);
        atomic_store(&g_lost_t, 0);
        struct timespec dl = abs_in_ms(SYNC_BOUND_MS);
        int64_t t_call = now_us();
        if (w->sabotage && rnd_range(&w->rng, 0, 99) < 5) /* runs fn without the once */
            rc = once_fn(&x, w->last_fence ? w->last_fence : 1) == 0 ? 0 : ONCE_FN_FAIL;
        else
            rc = rs_once_timedrun(o, once_fn, &x, &dl);
        int64_t t_ret = now_us();
        rs_once_destroy(o);
        if (x.ran) {
            long onl = atomic_load(&g_onlost) - onl0;
            int rec_rc = rc;
            if (x.fail) {
                if (rc != ONCE_FN_FAIL)
                    api_bad(w, "w%d %s: fn failed with %d, run returned %d", w->slot, x.name,
                            ONCE_FN_FAIL, rc);
                rec_rc = onl > 0 ? RS_ELOST : ONCE_FAILED;
                w->fail_runs++;
            }
            if (rec_rc == RS_ELOST)
                w->elost++;
            if (x.fence > w->last_fence)
                w->last_fence = x.fence;
            char rec[256];
            snprintf(rec, sizeof rec, "%d %d %s %llu %lld %lld %d %d %d 1 %c %ld %lld %lld",
                     w->slot, w->gen, x.name, (unsigned long long)x.fence, (long long)x.t_acq,
                     (long long)x.t_rel, rec_rc, x.rd, x.wr, x.fail ? 'f' : 'x', onl,
                     (long long)t_call, (long long)atomic_load(&g_lost_t));
            freeReplyObject(ck_cmd(w->ck, "DEL in:%d", w->slot));
            freeReplyObject(ck_cmd(w->ck, "RPUSH sec %s", rec));
        }
        if (rc == 0) {
            char rec[128];
            snprintf(rec, sizeof rec, "%d %d %d %lld %lld %d", w->slot, w->gen, round,
                     (long long)t_call, (long long)t_ret, x.ran);
            freeReplyObject(ck_cmd(w->ck, "RPUSH onc %s", rec));
            freeReplyObject(ck_cmd(w->ck, "INCR n:%d", w->slot));
            round++;
            since = now_us();
            continue;
        }
        if (x.ran && x.fail)
            continue; /* fn failed here: the next waiter runs it; this one queues again */
        if (rc == ETIMEDOUT || now_us() - since > (int64_t)SYNC_BOUND_MS * 1000) {
            live_bad(w, "w%d gen %d: once %s not done after %lld ms (last call: %d)", w->slot,
                     w->gen, x.name, (long long)(now_us() - since) / 1000, rc);
            since = now_us();
        }
        if (rc != ETIMEDOUT && rc != RS_ECONN && rc != RS_ELOST)
            api_bad(w, "w%d: once %s returned %d (%s: %s)", w->slot, x.name, rc,
                    rs_strerror(rc), rs_client_lasterror(w->c));
        if (rc != RS_ELOST)
            count_err(w, "once", rc);
        sleep_us(rnd_range(&w->rng, 10, 50) * 1000);
    }
}

/* ---- the barrier ----------------------------------------------------------------------- */

/* The barrier's generation on the data server, -1 when it cannot be read now. */
static long long read_gen(worker_t *w, redisContext **d)
{
    if (!*d) {
        struct timeval tv = {1, 0};
        *d = redisConnectWithTimeout("127.0.0.1", w->data_port, tv);
        if (!*d || (*d)->err) {
            if (*d)
                redisFree(*d);
            *d = NULL;
            return -1;
        }
        redisSetTimeout(*d, tv);
    }
    redisReply *r = redisCommand(*d, "HGET %s:{%s}:barrier g", w->prefix, BARRIER_NAME);
    if (!r) {
        redisFree(*d);
        *d = NULL;
        return -1;
    }
    long long g = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : -1;
    freeReplyObject(r);
    return g;
}

void barrier_loop(worker_t *w)
{
    rs_barrier_t *b = NULL;
    int rc;
    for (int tries = 0; (rc = rs_barrier_init(&b, w->c, BARRIER_NAME, (unsigned)w->sem_size)) != 0;
         tries++) {
        if (rc != RS_ECONN || tries > 40) {
            api_bad(w, "w%d: rs_barrier_init returned %d (%s)", w->slot, rc,
                    rs_client_lasterror(w->c));
            exit(5);
        }
        sleep_us(50000);
    }
    redisContext *d = NULL;
    int64_t since = now_us(); /* the last pass (or the start) */
    while (stop_value(w) == 0) {
        long long g0 = read_gen(w, &d);
        long ms = rnd_range(&w->rng, 0, 99) < 25 ? rnd_range(&w->rng, 10, 80) : 2000;
        struct timespec dl = abs_in_ms(ms);
        int64_t t_call = now_us();
        if (w->sabotage && rnd_range(&w->rng, 0, 99) < 5)
            rc = 0; /* passes without waiting */
        else
            rc = rs_barrier_timedwait(b, &dl);
        int64_t t_ret = now_us();
        long long g1 = read_gen(w, &d);
        char rec[160];
        snprintf(rec, sizeof rec, "%d %d %lld %lld %d %lld %lld", w->slot, w->gen,
                 (long long)t_call, (long long)t_ret, rc, g0, g1);
        freeReplyObject(ck_cmd(w->ck, "RPUSH bar %s", rec));
        if (rc == 0 || rc == RS_BARRIER_SERIAL) {
            freeReplyObject(ck_cmd(w->ck, "INCR n:%d", w->slot));
            since = now_us();
            continue;
        }
        count_err(w, "barrier", rc);
        if (rc != ETIMEDOUT && rc != RS_ECONN)
            api_bad(w, "w%d: barrier wait returned %d (%s: %s)", w->slot, rc, rs_strerror(rc),
                    rs_client_lasterror(w->c));
        if (now_us() - since > (int64_t)SYNC_BOUND_MS * 1000 && stop_value(w) == 0) {
            live_bad(w, "w%d gen %d: no barrier pass for %lld ms", w->slot, w->gen,
                     (long long)(now_us() - since) / 1000);
            since = now_us();
        }
    }
    if (d)
        redisFree(d);
    if ((rc = rs_barrier_destroy(b)) != 0)
        api_bad(w, "w%d: barrier destroy returned %d", w->slot, rc);
}
