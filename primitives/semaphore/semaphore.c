/*
 * semaphore.c - rs_sem_t, the distributed semaphore with leased permits (the C side of
 * semaphore.lua).
 *
 * One acquisition of n permits is one hold (rs_hold_t with count n) with one lease, renewed
 * by the watchdog like a mutex hold: wait = timedwait_n(1) without a deadline = rs__acquire
 * (lib/handle.c), which queues in Redis, sleeps until a release hands the permits over, and
 * registers the hold. A thread may hold several acquisitions through one handle; they sit in
 * the handle's hold list newest first (rs__handle_add prepends), so rs__handle_find gives the
 * thread's latest. post_n(k) gives back k permits starting with the latest acquisition: a
 * hold whose permits all go back is released with op "rel" (rs__release), a hold that keeps
 * some is shrunk with op "give", which carries the count the hold keeps: that count is the
 * call's id, so a retried give does not free permits twice.
 *
 * The semaphore's size lives in Redis. rs_sem_init makes one round trip: it creates the
 * semaphore with its permits if absent, or with permits 0 checks that it exists (ENOENT).
 * Every later call carries the handle's initial size, so a semaphore that expired after a long
 * disuse (7 days) is re-created by the next call; a handle attached with 0 gets ENOENT then.
 *
 * The script's own errors RSNOENT and RSINVAL arrive as ENOENT and EINVAL.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "scripts.h"

struct rs_sem {
    rs_handle_t h;
    unsigned initial; /* size to create the semaphore with when absent; 0: attach only */
};

static const char *const sem_keys[] = {NULL, "holders", "hi", "fence", "q", "qi"};
#define SEM_NKEYS 6
const rs_kind_t rs_kind_sem = {"sem", &rs_script_semaphore, sem_keys, SEM_NKEYS};

/* A call through s by the calling thread: ARGV[9] = arg (permits wanted, permits kept or new
 * size, by op), ARGV[10] = the handle's initial size. acqid NULL: a fresh id. */
static void sem_extras(rs_call_t *k, rs_sem_t *s, unsigned arg)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%u", arg);
    rs__call_extra(k, buf);
    snprintf(buf, sizeof buf, "%u", s->initial);
    rs__call_extra(k, buf);
}

static void sem_call(rs_call_t *k, rs_sem_t *s, const char *acqid, unsigned arg)
{
    rs__call_init(k, &s->h, acqid);
    sem_extras(k, s, arg);
}

/* The script's RSNOENT and RSINVAL arrive as ENOENT and EINVAL (lib/script.c); say which
 * semaphore. */
static int map_script_error(rs_sem_t *s, int rc)
{
    if (rc == ENOENT)
        return rs__fail(s->h.c, ENOENT, "semaphore \"%.*s\" does not exist", RS_HNAME(&s->h));
    if (rc == EINVAL)
        return rs__fail(s->h.c, EINVAL, "more permits wanted than semaphore \"%.*s\" has",
                        RS_HNAME(&s->h));
    return rc;
}

static int unexpected(rs_sem_t *s, const char *op)
{
    return rs__fail(s->h.c, RS_ESERVER, "unexpected reply to \"%s\" from the semaphore script", op);
}

/* Runs op with arg; on 0, *out is the reply (to free). */
static int run(rs_sem_t *s, const char *op, const char *acqid, unsigned arg, redisReply **out)
{
    rs_call_t k;
    sem_call(&k, s, acqid, arg);
    return map_script_error(s, rs__call_run(&k, op, "t", out));
}

RS_API int rs_sem_init(rs_sem_t **out, rs_client_t *c, const char *name, unsigned permits)
{
    if (!out)
        return rs__fail(c, EINVAL, "semaphore handle pointer is NULL");
    *out = NULL;
    int rc0 = rs__rl_refuse(c, "sem", "permits counted by independent masters do not bound the "
                            "holders (with 3 masters and 2 permits, 3 holders can each get a "
                            "quorum)");
    if (rc0)
        return rc0;
    if (permits > INT_MAX)
        return rs__fail(c, EINVAL, "permits must be at most %d, got %u", INT_MAX, permits);
    rs_sem_t *s = calloc(1, sizeof *s);
    if (!s)
        return rs__fail(c, ENOMEM, "out of memory");
    int rc = rs__handle_init(&s->h, c, "sem", &rs_script_semaphore, name, sem_keys, SEM_NKEYS);
    if (rc) {
        free(s);
        return rc;
    }
    s->initial = permits;
    if ((rc = rs__enter(c)) == 0) {
        redisReply *r;
        if ((rc = run(s, "init", NULL, 0, &r)) == 0) {
            if (r->type == REDIS_REPLY_INTEGER && r->integer == -1)
                rc = rs__fail(c, ENOENT, "semaphore \"%.*s\" does not exist", RS_HNAME(&s->h));
            else if (r->type != REDIS_REPLY_INTEGER || r->integer < 1)
                rc = unexpected(s, "init");
            freeReplyObject(r);
        }
        rs__leave(c);
    }
    if (rc) {
        rs__handle_destroy(&s->h);
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* The common path of every wait: n permits in one hold. */
static int waited(rs_sem_t *s, unsigned n, int try_only, const struct timespec *abstime)
{
    if (!s)
        return rs__fail(NULL, EINVAL, "semaphore is NULL");
    rs_client_t *c = s->h.c;
    if (n == 0 || n > INT_MAX)
        return rs__fail(c, EINVAL, "permits wanted must be 1 to %d, got %u", INT_MAX, n);
    uint64_t deadline = try_only ? 0 : RS_NO_DEADLINE;
    int rc = abstime ? rs__deadline_from(c, abstime, &deadline) : 0;
    if (rc || (rc = rs__enter(c)) != 0)
        return rc;
    rs_call_t k;
    sem_call(&k, s, NULL, n);
    rs_hold_t *hold;
    rc = rs__acquire(&k, try_only, deadline, &hold);
    if (rc == 0) {
        hold->count = n;
        rs__handle_add(&s->h, hold);
    } else if (rc == EBUSY && try_only) {
        rc = rs__fail(c, EAGAIN, "no permit of semaphore \"%.*s\" is free", RS_HNAME(&s->h));
    } else {
        rc = map_script_error(s, rc);
    }
    rs__leave(c);
    return rc;
}

RS_API int rs_sem_acquire(rs_sem_t *s, unsigned n, const struct timespec *abstime,
                          rs_hold_t **out)
{
    if (out)
        *out = NULL;
    if (!s || !out)
        return rs__fail(s ? s->h.c : NULL, EINVAL, s ? "hold pointer is NULL"
                                                     : "semaphore is NULL");
    rs_client_t *c = s->h.c;
    if (n == 0 || n > INT_MAX)
        return rs__fail(c, EINVAL, "permits wanted must be 1 to %d, got %u", INT_MAX, n);
    int rc = rs__enter(c);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init_object(&k, &s->h);
    sem_extras(&k, s, n);
    rc = rs__acquire_object(&k, abstime, out);
    if (rc == 0)
        (*out)->count = n;
    else if (rc == EBUSY)
        rc = rs__fail(c, EAGAIN, "no permit of semaphore \"%.*s\" is free", RS_HNAME(&s->h));
    else
        rc = map_script_error(s, rc);
    rs__leave(c);
    return rc;
}

RS_API int rs_sem_acquire_async(rs_sem_t *s, unsigned n, const struct timespec *abstime,
                                rs_done_fn *done, void *arg, rs_request_t **req)
{
    if (req)
        *req = NULL;
    if (!s)
        return rs__fail(NULL, EINVAL, "semaphore is NULL");
    rs_client_t *c = s->h.c;
    if (n == 0 || n > INT_MAX)
        return rs__fail(c, EINVAL, "permits wanted must be 1 to %d, got %u", INT_MAX, n);
    int rc = rs__enter(c);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init_object(&k, &s->h);
    sem_extras(&k, s, n);
    rs_async_opts_t o = {n, 0, EAGAIN};
    rc = rs__async_acquire(&k, abstime, &o, done, arg, req);
    rs__leave(c);
    return rc;
}

RS_API int rs_sem_wait(rs_sem_t *s)
{
    return waited(s, 1, 0, NULL);
}

RS_API int rs_sem_trywait(rs_sem_t *s)
{
    return waited(s, 1, 1, NULL);
}

RS_API int rs_sem_timedwait(rs_sem_t *s, const struct timespec *abstime)
{
    if (s && !abstime)
        return rs__fail(s->h.c, EINVAL, "deadline is NULL");
    return waited(s, 1, 0, abstime);
}

RS_API int rs_sem_timedwait_n(rs_sem_t *s, unsigned n, const struct timespec *abstime)
{
    return waited(s, n, 0, abstime);
}

/* Shrinks the calling thread's hold to keep permits (0 < keep < hold->count). On a
 * connection failure the hold is left as it was: a retried post sends the same count,
 * which Redis recognises if the first one got through. */
static int give_back(rs_sem_t *s, rs_hold_t *hold, unsigned keep)
{
    redisReply *r;
    int rc = run(s, "give", hold->acqid, keep, &r);
    if (rc)
        return rc;
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    if (v == 1) {
        pthread_mutex_lock(&s->h.mu);
        hold->count = keep;
        pthread_mutex_unlock(&s->h.mu);
        return 0;
    }
    if (v != 0)
        return unexpected(s, "give");
    /* not ours any more: the hold was lost; clear all of it, as an unlock would */
    rs__lease_set_lost(s->h.c, hold->lease);
    rs__handle_remove(&s->h, hold);
    return rs__release(&s->h, hold, "rel");
}

RS_API int rs_sem_post_n(rs_sem_t *s, unsigned n)
{
    if (!s)
        return rs__fail(NULL, EINVAL, "semaphore is NULL");
    rs_client_t *c = s->h.c;
    if (n == 0)
        return rs__fail(c, EINVAL, "permits to give back must be at least 1");
    int rc = rs__enter(c);
    if (rc)
        return rc;
    uint64_t tno = rs__thread_no();
    unsigned long long have = 0;
    pthread_mutex_lock(&s->h.mu);
    for (rs_hold_t *p = s->h.holds; p; p = p->next)
        if (p->thread_no == tno)
            have += p->count;
    pthread_mutex_unlock(&s->h.mu);
    if (have == 0)
        rc = rs__fail(c, EPERM, "this thread holds no permit of semaphore \"%.*s\"",
                      RS_HNAME(&s->h));
    else if (have < n)
        rc = rs__fail(c, EPERM, "this thread holds only %llu permits of semaphore \"%.*s\", not %u",
                      have, RS_HNAME(&s->h), n);
    /* latest acquisition first; the first failure is reported, the rest still go back */
    while (have >= n && n > 0) {
        rs_hold_t *hold = rs__handle_find(&s->h, tno);
        if (!hold)
            break; /* cannot happen: only this thread removes its holds */
        int one;
        if (hold->count <= n || rs__lease_is_lost(c, hold->lease)) {
            unsigned cnt = hold->count;
            rs__handle_remove(&s->h, hold);
            one = rs__release(&s->h, hold, "rel");
            n -= cnt < n ? cnt : n;
        } else {
            one = give_back(s, hold, hold->count - n);
            n = 0;
        }
        if (one && !rc)
            rc = one;
    }
    rs__leave(c);
    return rc;
}

RS_API int rs_sem_post(rs_sem_t *s)
{
    return rs_sem_post_n(s, 1);
}

RS_API int rs_sem_getvalue(rs_sem_t *s, int *value)
{
    if (!s)
        return rs__fail(NULL, EINVAL, "semaphore is NULL");
    rs_client_t *c = s->h.c;
    if (!value)
        return rs__fail(c, EINVAL, "value pointer is NULL");
    int rc = rs__enter(c);
    if (rc)
        return rc;
    redisReply *r;
    if ((rc = run(s, "val", NULL, 0, &r)) == 0) {
        if (r->type == REDIS_REPLY_INTEGER && r->integer == -1) {
            rc = rs__fail(c, ENOENT, "semaphore \"%.*s\" does not exist", RS_HNAME(&s->h));
        } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                   r->element[0]->type == REDIS_REPLY_INTEGER &&
                   r->element[1]->type == REDIS_REPLY_INTEGER) {
            long long v = r->element[0]->integer - r->element[1]->integer;
            /* after a shrink the holders may have more than the size: nothing is free */
            *value = v < 0 ? 0 : v > INT_MAX ? INT_MAX : (int)v;
        } else {
            rc = unexpected(s, "val");
        }
        freeReplyObject(r);
    }
    rs__leave(c);
    return rc;
}

RS_API int rs_sem_setsize(rs_sem_t *s, unsigned permits)
{
    if (!s)
        return rs__fail(NULL, EINVAL, "semaphore is NULL");
    rs_client_t *c = s->h.c;
    if (permits == 0 || permits > INT_MAX)
        return rs__fail(c, EINVAL, "the size must be 1 to %d, got %u", INT_MAX, permits);
    int rc = rs__enter(c);
    if (rc)
        return rc;
    redisReply *r;
    if ((rc = run(s, "size", NULL, permits, &r)) == 0) {
        if (r->type != REDIS_REPLY_INTEGER || r->integer != 1)
            rc = unexpected(s, "size");
        freeReplyObject(r);
    }
    rs__leave(c);
    return rc;
}

RS_API uint64_t rs_sem_fence(const rs_sem_t *s)
{
    rs_hold_t *hold = s ? rs__handle_find(&s->h, rs__thread_no()) : NULL;
    return hold ? hold->fence : 0;
}

RS_API int rs_sem_destroy(rs_sem_t *s)
{
    if (!s)
        return 0;
    int rc = rs__handle_destroy(&s->h);
    if (rc == 0)
        free(s);
    return rc;
}
