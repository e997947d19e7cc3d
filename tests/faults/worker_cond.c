/*
 * worker_cond.c - the fault suite's worker for the condition variable, rs_cond_t (scenario
 * cond-aof; see worker.c for the locks' sections, worker_sync.c for once and the barrier).
 *
 * Producers (even slots) and consumers (odd slots) share one mutex "n0" and two conditions,
 * "nf" (not full) and "ne" (not empty), over a bounded FIFO buffer of COND_CAP items kept on
 * the checker as plain keys: cq:head, cq:tail (counters) and cq:s:I (the item at index I).
 * The workers read and write them in separate commands, so only the mutex keeps them
 * consistent: two consumers inside at once read the same head and consume one item twice,
 * two producers write the same slot and one item is lost.
 *
 * A section: lock n0 (timed, as the locks'); while the predicate is false (producer: the
 * buffer is full; consumer: empty) rs_cond_timedwait on its condition (2-3 s deadlines: a
 * waiter's entry killed with its process absorbs a signal until its lease runs out, and the
 * predicate is re-checked on every return, as POSIX requires); every 0 or ETIMEDOUT return
 * must hold n0 (rs_mutex_fence != 0). Then, on the hold the last wait re-acquired: t_acq,
 * the token, enter on the checker (a pending "kill" or "stop" of the driver, as worker.c),
 * a fenced read of ctr:n0, the buffer read (after the fenced read, so a stale holder's
 * commit is either visible here or refused later), a short hold, and the commit: one script
 * on the checker (CK_CPUT) that is the fenced write of ctr:n0 and, only if that is accepted,
 * the buffer update and its log entry "ITEM SLOT GEN TOKEN" in "cprod" or "ccons", all
 * atomic. A kill therefore falls before a commit (nothing changed: the item stays in the
 * buffer, or was never produced) or after it (recorded): no item is in doubt, and I10
 * accounts for every one exactly. Then a signal (a quarter broadcasts) of the other
 * condition, the unlock, and the section record in "sec" as worker.c's (so I1-I4 and I6 hold
 * for the mutex as for mutex-aof).
 *
 * --sabotage: 5 % of the sections skip the lock and the wait and commit unfenced (as code
 * that ignores the mutex would), recorded as truthful: I3 and I10 must report them.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker.h"

#define ORPHAN_WINDOW_US 5000000 /* as worker.c's: EDEADLK after a recent RS_ECONN */

/* KEYS hi ctr acc bad head tail cq:s:IDX log over; ARGV token expected new kind idx item
 * rec force cap -> 1 committed | 0 refused (the fenced write of CK_FWRITE, then the op) */
static const char CK_CPUT[] =
    "if ARGV[8] ~= '1' then\n"
    "  local hi = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
    "  local f = tonumber(ARGV[1])\n"
    "  if f < hi then return 0 end\n"
    "  if f > hi then redis.call('SET', KEYS[1], ARGV[1]) end\n"
    "end\n"
    "local cur = redis.call('GET', KEYS[2]) or '0'\n"
    "if cur ~= ARGV[2] then redis.call('INCR', KEYS[4]) end\n"
    "redis.call('SET', KEYS[2], ARGV[3])\n"
    "redis.call('INCR', KEYS[3])\n"
    "local idx = tonumber(ARGV[5])\n"
    "if ARGV[4] == 'p' then\n"
    "  redis.call('SET', KEYS[7], ARGV[6])\n"
    "  redis.call('SET', KEYS[6], tostring(idx + 1))\n"
    "  local head = tonumber(redis.call('GET', KEYS[5]) or '0')\n"
    "  if idx + 1 - head > tonumber(ARGV[9]) then redis.call('INCR', KEYS[9]) end\n"
    "  redis.call('RPUSH', KEYS[8], ARGV[7])\n"
    "elseif ARGV[4] == 'c' then\n"
    "  redis.call('SET', KEYS[5], tostring(idx + 1))\n"
    "  redis.call('RPUSH', KEYS[8], ARGV[7])\n"
    "end\n"
    "return 1\n";

/* cq:head and cq:tail as the checker has them now */
static void read_buf(worker_t *w, long long *head, long long *tail)
{
    redisReply *r = ck_cmd(w->ck, "MGET cq:head cq:tail");
    *head = *tail = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
        if (r->element[0]->type == REDIS_REPLY_STRING)
            *head = strtoll(r->element[0]->str, NULL, 10);
        if (r->element[1]->type == REDIS_REPLY_STRING)
            *tail = strtoll(r->element[1]->str, NULL, 10);
    }
    freeReplyObject(r);
}

static void unlock_count(worker_t *w, rs_mutex_t *m, int *pending_lost)
{
    int u = rs_mutex_unlock(m);
    if (u == RS_ELOST || *pending_lost)
        w->elost++;
    *pending_lost = 0;
    if (u == RS_ECONN)
        w->last_econn[0] = now_us();
    if (u != 0 && u != RS_ELOST) {
        count_err(w, "unlock", u);
        if (u != RS_ECONN)
            api_bad(w, "w%d: unlock n0 returned %d (%s: %s)", w->slot, u, rs_strerror(u),
                    rs_client_lasterror(w->c));
    }
}

/* One section (see above); returns the checker's stop flag. */
static long long cond_section(worker_t *w, rs_mutex_t *m, rs_cond_t *mine, rs_cond_t *other,
                              const char *sha, long *seq)
{
    int producer = w->slot % 2 == 0;
    long onl0 = atomic_load(&g_onlost);
    atomic_store(&g_lost_t, 0);
    int pending_lost = 0; /* a wait's RS_ELOST whose hold's unlock may not tell it again */
    int64_t t_req = now_us();
    int fake = w->sabotage && rnd_range(&w->rng, 0, 99) < 5;
    if (!fake) {
        struct timespec dl = abs_in_ms(LOCK_BOUND_MS);
        int rc = rs_mutex_timedlock(m, &dl);
        if (rc == RS_ECONN)
            w->last_econn[0] = now_us();
        if (rc != 0) {
            int orphan = rc == EDEADLK && rs_mutex_fence(m) == 0 && w->last_econn[0] &&
                         now_us() - w->last_econn[0] <= ORPHAN_WINDOW_US;
            count_err(w, "lock", orphan ? -EDEADLK : rc);
            if (rc == ETIMEDOUT)
                live_bad(w, "w%d gen %d: lock n0 waited %lld ms without getting it", w->slot,
                         w->gen, (long long)(now_us() - t_req) / 1000);
            else if (rc != RS_ECONN && !orphan)
                api_bad(w, "w%d: lock n0 returned %d (%s: %s)", w->slot, rc, rs_strerror(rc),
                        rs_client_lasterror(w->c));
            sleep_us(rnd_range(&w->rng, 10, 50) * 1000);
            return stop_value(w);
        }
        /* the predicate, under the mutex; each wait returns holding it (a new hold) */
        for (;;) {
            long long head, tail;
            read_buf(w, &head, &tail);
            if (producer ? tail - head < COND_CAP : tail > head)
                break;
            long long stop = stop_value(w);
            if (stop) {
                unlock_count(w, m, &pending_lost);
                return stop;
            }
            struct timespec wdl = abs_in_ms(rnd_range(&w->rng, 2000, 3000));
            rc = rs_cond_timedwait(mine, m, &wdl);
            if ((rc == 0 || rc == ETIMEDOUT) && rs_mutex_fence(m) != 0)
                continue;
            if (rc == 0 || rc == ETIMEDOUT)
                api_bad(w, "w%d: cond wait returned %d without holding the mutex", w->slot, rc);
            else {
                count_err(w, "wait", rc);
                if (rc == RS_ECONN)
                    w->last_econn[0] = now_us();
                if (rc == RS_ELOST)
                    pending_lost = 1;
                else if (rc != RS_ECONN)
                    api_bad(w, "w%d: cond wait returned %d (%s: %s)", w->slot, rc,
                            rs_strerror(rc), rs_client_lasterror(w->c));
            }
            /* the section is abandoned: release what is held, start over */
            if (rs_mutex_fence(m) != 0)
                unlock_count(w, m, &pending_lost);
            else if (pending_lost)
                w->elost++;
            sleep_us(rnd_range(&w->rng, 10, 50) * 1000);
            return stop_value(w);
        }
    }
    int64_t t_acq = now_us();
    uint64_t fence = fake ? (w->last_fence ? w->last_fence : 1) : rs_mutex_fence(m);
    if (!fake)
        w->last_fence = fence;
    if (fence == 0)
        api_bad(w, "w%d n0: a granted mutex hold has fencing token 0", w->slot);

    long net_id = 0;
    int cmd = ck_enter(w, "n0", t_acq, &net_id);
    if (cmd == 'k') {
        ck_event(w, 'K', "n0", fence);
        raise(SIGKILL);
    }
    int rd = -1, wr = -1;
    long long v = 0;
    if (fake)
        v = ck_int(w->ck, "GET ctr:n0");
    else
        rd = ck_fread(w, "n0", fence, &v);
    if (v < 0)
        v = 0;
    if (cmd == 's') {
        ck_event(w, 'S', "n0", fence);
        raise(SIGSTOP);
    }
    long long head, tail;
    read_buf(w, &head, &tail);
    char kind = 'n', item[64] = "-";
    long long idx = producer ? tail : head;
    if (producer && (fake || tail - head < COND_CAP)) {
        kind = 'p';
        snprintf(item, sizeof item, "%d.%d.%ld", w->slot, w->gen, (*seq)++);
    } else if (!producer && (fake || tail > head)) {
        kind = 'c';
        redisReply *r = ck_cmd(w->ck, "GET cq:s:%lld", idx);
        if (r->type == REDIS_REPLY_STRING)
            snprintf(item, sizeof item, "%s", r->str);
        freeReplyObject(r);
    }
    sleep_us(rnd_range(&w->rng, 2, 25) * 1000);
    if (fake || rd == 1) {
        char rec[160];
        snprintf(rec, sizeof rec, "%s %d %d %llu", item, w->slot, w->gen,
                 (unsigned long long)fence);
        redisReply *r = ck_cmd(w->ck, "EVALSHA %s 9 hi:n0 ctr:n0 acc:n0 bad:n0 cq:head cq:tail "
                               "cq:s:%lld %s cq:over %llu %lld %lld %s %lld %s %s %d %d",
                               sha, idx, producer ? "cprod" : "ccons",
                               (unsigned long long)fence, v, v + 1, kind == 'p' ? "p" : kind == 'c' ? "c" : "n", idx, item, rec, fake,
                               COND_CAP);
        wr = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        freeReplyObject(r);
    }
    if (wr == 1 && kind != 'n') {
        int rc = rnd_range(&w->rng, 0, 99) < 25 ? rs_cond_broadcast(other) : rs_cond_signal(other);
        if (rc != 0) {
            count_err(w, "signal", rc);
            if (rc != RS_ECONN)
                api_bad(w, "w%d: cond signal returned %d (%s: %s)", w->slot, rc,
                        rs_strerror(rc), rs_client_lasterror(w->c));
        }
    }
    int64_t t_rel = now_us();
    int rc = 0;
    if (!fake) {
        rc = rs_mutex_unlock(m);
        if (rc == RS_ECONN)
            w->last_econn[0] = now_us();
        if (rc == RS_ELOST) {
            w->elost++;
            int u = rs_mutex_unlock(m);
            if (u != EPERM)
                api_bad(w, "w%d n0: mutex unlock after RS_ELOST returned %d, not EPERM", w->slot, u);
        } else if (rc != 0) {
            count_err(w, "unlock", rc);
            if (rc != RS_ECONN)
                api_bad(w, "w%d: unlock n0 returned %d (%s: %s)", w->slot, rc, rs_strerror(rc),
                        rs_client_lasterror(w->c));
        }
    }
    char rec[256];
    snprintf(rec, sizeof rec, "%d %d n0 %llu %lld %lld %d %d %d 1 %c %ld %lld %lld", w->slot,
             w->gen, (unsigned long long)fence, (long long)t_acq, (long long)t_rel, rc, rd, wr,
             kind, atomic_load(&g_onlost) - onl0, (long long)t_req,
             (long long)atomic_load(&g_lost_t));
    freeReplyObject(ck_cmd(w->ck, "DEL in:%d", w->slot));
    freeReplyObject(ck_cmd(w->ck, "RPUSH sec %s", rec));
    freeReplyObject(ck_cmd(w->ck, "INCR n:%d", w->slot));
    sleep_us(rnd_range(&w->rng, 0, 15) * 1000);
    return stop_value(w);
}

void cond_loop(worker_t *w)
{
    rs_mutex_t *m = NULL;
    rs_cond_t *nf = NULL, *ne = NULL;
    int rc = 0;
    for (int tries = 0; tries < 40; tries++) {
        if ((!m && (rc = rs_mutex_init(&m, w->c, "n0")) != 0) ||
            (!nf && (rc = rs_cond_init(&nf, w->c, "nf")) != 0) ||
            (!ne && (rc = rs_cond_init(&ne, w->c, "ne")) != 0)) {
            if (rc != RS_ECONN)
                break;
            sleep_us(50000);
            continue;
        }
        break;
    }
    if (rc != 0) {
        api_bad(w, "w%d: cond scenario init returned %d (%s)", w->slot, rc,
                rs_client_lasterror(w->c));
        exit(5);
    }
    char sha[41];
    ck_load(w->ck, CK_CPUT, sha);
    long seq = 0;
    int producer = w->slot % 2 == 0;
    while (cond_section(w, m, producer ? nf : ne, producer ? ne : nf, sha, &seq) == 0) {
    }
    if ((rc = rs_cond_destroy(nf)) != 0 || (rc = rs_cond_destroy(ne)) != 0 ||
        (rc = rs_mutex_destroy(m)) != 0)
        api_bad(w, "w%d: cond scenario destroy returned %d after every unlock", w->slot, rc);
}
