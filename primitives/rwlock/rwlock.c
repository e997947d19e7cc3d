/*
 * rwlock.c - rs_rwlock_t, the distributed read-write lock (the C side of rwlock.lua).
 *
 * Readers share, a writer excludes all; one FIFO queue in Redis serves both, so a queued
 * writer holds back later readers (no writer starvation), and a release admits the queue's
 * head directly (all the readers up to the next writer, or that writer) with one wake-up
 * message per admitted waiter. Acquiring and releasing are the generic rs__acquire and
 * rs__release of lib/handle.c; the mode travels as the script's ARGV[9] ("r" or "w", set with
 * rs__call_extra, so the hold's lease renews and releases the right hold).
 *
 * Local record: a thread has at most two holds through a handle, a write hold and a read
 * hold, each an rs_hold_t in the handle's list with its own acquisition id, fencing token,
 * lease and re-entry count. The list entries are rw_hold_t, which adds the mode to the
 * rs_hold_t it starts with (rs__release and rs__handle_destroy free them through that first
 * member, which is the same pointer). Re-entries (ops enter/leave, with a call id so a retry
 * never counts twice) go to Redis, which keeps each hold's count next to its owner; the local
 * count is the one that decides when the last unlock releases ("rel" ends every re-entry).
 *
 * Modes together: a writer may take the read lock (granted at once: downgrade) and then drop
 * the write hold with unlock, keeping the read hold. A thread holding only a read hold that
 * asks for the write lock gets EDEADLK at once, from the try variant too (upgrade would wait
 * for itself). rs_kind_rwlock is what inspection (primitives/inspect.c) needs to run the
 * script's "info" and "force" ops.
 */
#include <stdlib.h>

#include "internal.h"
#include "scripts.h"

struct rs_rwlock {
    rs_handle_t h;
};

/* One entry of the handle's hold list. */
typedef struct rw_hold {
    rs_hold_t base; /* first: the core sees (and frees) only this */
    int write;      /* 1 write hold, 0 read hold */
} rw_hold_t;

static const char *const rwlock_keys[] = {NULL, "fence", "q", "qi", "rd", "ri"};
const rs_kind_t rs_kind_rwlock = {"rwlock", &rs_script_rwlock, rwlock_keys, 6};

RS_API int rs_rwlock_init(rs_rwlock_t **out, rs_client_t *c, const char *name)
{
    if (out)
        *out = NULL;
    int rc = rs__rl_refuse(c, "rwlock", "its writer preference, re-entry and downgrade rest on "
                           "one queue order and direct handoff, which independent masters do "
                           "not share");
    if (rc)
        return rc;
    return rs__handle_new(out, sizeof **out, c, rs_kind_rwlock.name, rs_kind_rwlock.script, name,
                          rs_kind_rwlock.suffixes, rs_kind_rwlock.nkeys);
}

/* The calling thread's hold of one mode, or NULL. Only its owner removes it, so it stays
 * valid for the calling thread. */
static rw_hold_t *find(const rs_rwlock_t *rw, int write)
{
    rs_handle_t *h = (rs_handle_t *)&rw->h; /* the lock changes, not the handle */
    uint64_t tn = rs__thread_no();
    rw_hold_t *found = NULL;
    pthread_mutex_lock(&h->mu);
    for (rs_hold_t *p = h->holds; p && !found; p = p->next)
        if (p->thread_no == tn && ((rw_hold_t *)p)->write == write)
            found = (rw_hold_t *)p;
    pthread_mutex_unlock(&h->mu);
    return found;
}

static const char *mode_arg(int write)
{
    return write ? "w" : "r";
}

/* A new hold of one mode (the thread holds none of that mode). */
static int take(rs_rwlock_t *rw, int write, int try_only, uint64_t deadline)
{
    /* allocated before asking Redis, so that a grant never meets ENOMEM */
    rw_hold_t *x = calloc(1, sizeof *x);
    if (!x)
        return rs__fail(rw->h.c, ENOMEM, "out of memory");
    rs_call_t k;
    rs__call_init(&k, &rw->h, NULL);
    rs__call_extra(&k, mode_arg(write));
    rs_hold_t *hold;
    int rc = rs__acquire(&k, try_only, deadline, &hold);
    if (rc) {
        free(x);
        if (rc == EDEADLK)
            rs__fail(rw->h.c, EDEADLK, "this thread already holds rwlock \"%.*s\"%s",
                     RS_HNAME(&rw->h),
                     write ? " (for reading, through another handle, or upgrade)"
                           : " (through another handle)");
        return rc;
    }
    x->base = *hold;
    x->base.next = NULL;
    x->write = write;
    free(hold);
    rs__handle_add(&rw->h, &x->base);
    return 0;
}

/* Runs enter or leave on the thread's hold x. Returns 0 with the local count updated;
 * RS_ELOST (nothing changed) if the hold was lost; another error from the call, after which
 * an enter has not counted and a leave has counted locally anyway (see rs_rwlock_unlock). */
static int count_call(rs_rwlock_t *rw, rw_hold_t *x, const char *op)
{
    rs_client_t *c = rw->h.c;
    int leave = op[0] == 'l';
    if (rs__lease_is_lost(c, x->base.lease))
        return RS_ELOST;
    rs_call_t k;
    rs__call_init(&k, &rw->h, x->base.acqid);
    rs__call_extra(&k, mode_arg(x->write));
    char callid[RS_ACQID_MAX];
    rs__acq_id(c, callid);
    rs__call_extra(&k, callid);
    redisReply *r;
    int rc = rs__call_run(&k, op, "t", &r);
    if (rc == 0) {
        long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        freeReplyObject(r);
        if (n == 0) {
            rs__lease_set_lost(c, x->base.lease);
            return RS_ELOST;
        }
        if (n < 0)
            rc = rs__fail(c, RS_ESERVER, "unexpected reply from the rwlock script (%s)", op);
    }
    if (rc == 0 || leave) {
        if (leave)
            x->base.count--;
        else
            x->base.count++;
    }
    return rc;
}

/* rdlock, wrlock and their try and timed variants: one path, as in musl. */
static int locked(rs_rwlock_t *rw, int write, int try_only, const struct timespec *abstime)
{
    uint64_t deadline = try_only ? 0 : RS_NO_DEADLINE;
    int rc = rs__handle_begin(rw ? &rw->h : NULL, "rwlock", abstime, &deadline);
    if (rc)
        return rc;
    rw_hold_t *x = find(rw, write);
    if (x) {
        /* re-entry: at once, whatever is queued */
        rc = count_call(rw, x, "enter");
        if (rc == RS_ELOST)
            rs__fail(rw->h.c, rc, "the %s hold on rwlock \"%.*s\" had been lost; unlock it first",
                     write ? "write" : "read", RS_HNAME(&rw->h));
    } else if (write && find(rw, 0)) {
        rc = rs__fail(rw->h.c, EDEADLK,
                      "this thread holds rwlock \"%.*s\" for reading: upgrading would deadlock",
                      RS_HNAME(&rw->h));
    } else {
        rc = take(rw, write, try_only, deadline);
    }
    rs__leave(rw->h.c);
    return rc;
}

RS_API int rs_rwlock_rdlock(rs_rwlock_t *rw)
{
    return locked(rw, 0, 0, NULL);
}

RS_API int rs_rwlock_tryrdlock(rs_rwlock_t *rw)
{
    return locked(rw, 0, 1, NULL);
}

RS_API int rs_rwlock_timedrdlock(rs_rwlock_t *rw, const struct timespec *abstime)
{
    if (rw && !abstime)
        return rs__fail(rw->h.c, EINVAL, "deadline is NULL");
    return locked(rw, 0, 0, abstime);
}

RS_API int rs_rwlock_wrlock(rs_rwlock_t *rw)
{
    return locked(rw, 1, 0, NULL);
}

RS_API int rs_rwlock_trywrlock(rs_rwlock_t *rw)
{
    return locked(rw, 1, 1, NULL);
}

RS_API int rs_rwlock_timedwrlock(rs_rwlock_t *rw, const struct timespec *abstime)
{
    if (rw && !abstime)
        return rs__fail(rw->h.c, EINVAL, "deadline is NULL");
    return locked(rw, 1, 0, abstime);
}

/* Ends one re-entry of the write hold if the thread has one, else of its read hold. The
 * last one (or any, once the hold was lost) releases the hold in Redis, which admits the
 * waiters at the queue's head. A leave that fails (RS_ECONN...) still counts locally: the
 * count in Redis is informational (rel ends every re-entry), and a caller unwinding its
 * locks must not be left with a hold that the watchdog renews for ever. */
RS_API int rs_rwlock_unlock(rs_rwlock_t *rw)
{
    int rc = rs__handle_begin(rw ? &rw->h : NULL, "rwlock", NULL, NULL);
    if (rc)
        return rc;
    rw_hold_t *x = find(rw, 1);
    if (!x)
        x = find(rw, 0);
    if (!x) {
        rc = rs__fail(rw->h.c, EPERM, "this thread does not hold rwlock \"%.*s\"",
                      RS_HNAME(&rw->h));
    } else if (x->base.count > 1 && (rc = count_call(rw, x, "leave")) != RS_ELOST) {
        /* one re-entry fewer */
    } else {
        /* the last unlock of this hold, or the hold was lost: all its re-entries end here */
        rs__handle_remove(&rw->h, &x->base);
        rc = rs__release(&rw->h, &x->base, "rel");
    }
    rs__leave(rw->h.c);
    return rc;
}

/* A hold object of one mode: its own owner, so no re-entry and no upgrade to refuse. */
static int acquire_object(rs_rwlock_t *rw, int write, const struct timespec *abstime,
                          rs_hold_t **out)
{
    if (out)
        *out = NULL;
    if (!out)
        return rs__fail(rw ? rw->h.c : NULL, EINVAL, "hold pointer is NULL");
    int rc = rs__handle_begin(rw ? &rw->h : NULL, "rwlock", NULL, NULL);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init_object(&k, &rw->h);
    rs__call_extra(&k, mode_arg(write));
    rc = rs__acquire_object(&k, abstime, out);
    if (rc == 0 && !write)
        (*out)->fence = 0; /* a read hold has no token of its own (rs_rwlock_fence) */
    rs__leave(rw->h.c);
    return rc;
}

RS_API int rs_rwlock_acquire_read(rs_rwlock_t *rw, const struct timespec *abstime,
                                  rs_hold_t **out)
{
    return acquire_object(rw, 0, abstime, out);
}

RS_API int rs_rwlock_acquire_write(rs_rwlock_t *rw, const struct timespec *abstime,
                                   rs_hold_t **out)
{
    return acquire_object(rw, 1, abstime, out);
}

static int acquire_async(rs_rwlock_t *rw, int write, const struct timespec *abstime,
                         rs_done_fn *done, void *arg, rs_request_t **req)
{
    if (req)
        *req = NULL;
    int rc = rs__handle_begin(rw ? &rw->h : NULL, "rwlock", NULL, NULL);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init_object(&k, &rw->h);
    rs__call_extra(&k, mode_arg(write));
    rs_async_opts_t o = {1, !write, EBUSY};
    rc = rs__async_acquire(&k, abstime, &o, done, arg, req);
    rs__leave(rw->h.c);
    return rc;
}

RS_API int rs_rwlock_acquire_read_async(rs_rwlock_t *rw, const struct timespec *abstime,
                                        rs_done_fn *done, void *arg, rs_request_t **req)
{
    return acquire_async(rw, 0, abstime, done, arg, req);
}

RS_API int rs_rwlock_acquire_write_async(rs_rwlock_t *rw, const struct timespec *abstime,
                                         rs_done_fn *done, void *arg, rs_request_t **req)
{
    return acquire_async(rw, 1, abstime, done, arg, req);
}

RS_API uint64_t rs_rwlock_fence(const rs_rwlock_t *rw)
{
    rw_hold_t *x = rw ? find(rw, 1) : NULL;
    return x ? x->base.fence : 0;
}

RS_API int rs_rwlock_destroy(rs_rwlock_t *rw)
{
    return rs__handle_free(rw ? &rw->h : NULL);
}
