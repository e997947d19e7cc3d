/*
 * once.c - rs_once_t, a fleet-wide pthread_once (the C side of once.lua; issue 14).
 *
 * run = the mutex's acquisition (rs__acquire: queue in Redis, sleep until woken, the hold
 * registered with the watchdog) on the once's run hold, except that the script answers
 * "done" ({2}) once a run has succeeded: rs__acquire then returns 0 with no hold, and so does
 * run, without calling fn. The caller that gets the run hold calls fn(arg, fence) while the
 * watchdog renews the hold; fn's 0 sends "done" (the mark is set, every queued waiter is told
 * to retry, and finds it done), anything else sends "rel" (the hold goes straight to the
 * first waiter, who runs fn next) and is returned to this caller only. A runner that dies or
 * loses its lease is replaced when the lease runs out: its waiters' sleeps are bounded by it.
 * A runner whose hold was lost while fn ran gets RS_ELOST from run, and the mark is not set
 * (the next runner runs fn again: fence fn's effects with the token it was given). A grant
 * whose lease is already over when fn would start (the process was stopped after Redis
 * granted it: make test-faults, once-aof, saw fn run 0.6 s after another runner's success)
 * is let go and asked again, so fn does not start on a hold known to be gone.
 *
 * Not offered under redlock:// (the done mark would be one master's word).
 */
#include <stdio.h>

#include "internal.h"
#include "scripts.h"

struct rs_once {
    rs_handle_t h;
};

static const char *const once_keys[] = {NULL, "run", "fence", "q", "qi"};
const rs_kind_t rs_kind_once = {"once", &rs_script_once, once_keys, 5};

RS_API int rs_once_init(rs_once_t **out, rs_client_t *c, const char *name)
{
    if (!out)
        return rs__fail(c, EINVAL, "once handle pointer is NULL");
    *out = NULL;
    int rc = rs__rl_refuse(c, "once", "its done mark would be one master's word");
    if (rc)
        return rc;
    return rs__handle_new(out, sizeof **out, c, rs_kind_once.name, rs_kind_once.script, name,
                          rs_kind_once.suffixes, rs_kind_once.nkeys);
}

static int ran(rs_once_t *o, int (*fn)(void *, uint64_t), void *arg,
               const struct timespec *abstime)
{
    if (!o)
        return rs__fail(NULL, EINVAL, "once is NULL");
    if (!fn)
        return rs__fail(o->h.c, EINVAL, "fn is NULL");
    uint64_t deadline = RS_NO_DEADLINE;
    int rc = rs__handle_begin(&o->h, "once", abstime, &deadline);
    if (rc)
        return rc;
    atomic_fetch_add(&o->h.inside, 1);
    rs_call_t k;
    rs__call_init_object(&k, &o->h); /* fn may hand its work to other threads */
    rs_hold_t *hold = NULL;
    rc = rs__acquire(&k, 0, deadline, &hold);
    while (rc == 0 && hold && rs__lease_remaining_ms(o->h.c, hold->lease) <= 0) {
        /* granted, but its lease was over before fn could start (this process was stopped,
         * or the grant's reply came late): another runner may have run fn since. Not run:
         * let the hold go (it is not ours any more, or about to lapse) and ask again; a
         * success meanwhile answers "done" */
        rs__release(&o->h, hold, "rel");
        hold = NULL;
        rs__call_init_object(&k, &o->h);
        rc = rs__acquire(&k, 0, deadline, &hold);
    }
    if (rc == 0 && hold) {
        int frc = fn(arg, hold->fence);
        if (frc == 0) {
            rc = rs__release(&o->h, hold, "done");
            if (rc == RS_ELOST)
                rs__fail(o->h.c, RS_ELOST, "once \"%.*s\": fn succeeded, but the run hold had "
                         "been lost meanwhile (the next runner runs fn again)",
                         RS_HNAME(&o->h));
        } else {
            /* fn failed: its value is this caller's; the run goes to the next waiter */
            rs__release(&o->h, hold, "rel");
            rc = frc;
        }
    }
    atomic_fetch_sub(&o->h.inside, 1);
    rs__leave(o->h.c);
    return rc;
}

RS_API int rs_once_run(rs_once_t *o, int (*fn)(void *arg, uint64_t fence), void *arg)
{
    return ran(o, fn, arg, NULL);
}

RS_API int rs_once_timedrun(rs_once_t *o, int (*fn)(void *arg, uint64_t fence), void *arg,
                            const struct timespec *abstime)
{
    if (o && !abstime)
        return rs__fail(o->h.c, EINVAL, "deadline is NULL");
    return ran(o, fn, arg, abstime);
}

/* op "state" or "reset": an integer reply */
static int int_op(rs_once_t *o, const char *op, long long *v)
{
    if (!o)
        return rs__fail(NULL, EINVAL, "once is NULL");
    int rc = rs__enter(o->h.c);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init(&k, &o->h, NULL);
    redisReply *r;
    rc = rs__call_run(&k, op, "t", &r);
    if (rc == 0) {
        if (r->type == REDIS_REPLY_INTEGER)
            *v = r->integer;
        else
            rc = rs__fail(o->h.c, RS_ESERVER, "unexpected reply from the once script (%s)", op);
        freeReplyObject(r);
    }
    rs__leave(o->h.c);
    return rc;
}

RS_API int rs_once_state(rs_once_t *o, int *done)
{
    if (o && !done)
        return rs__fail(o->h.c, EINVAL, "done is NULL");
    long long v = 0;
    int rc = int_op(o, "state", &v);
    if (rc == 0)
        *done = v == 1;
    return rc;
}

RS_API int rs_once_reset(rs_once_t *o)
{
    long long v = 0;
    return int_op(o, "reset", &v);
}

RS_API int rs_once_destroy(rs_once_t *o)
{
    return o ? rs__handle_free(&o->h) : 0;
}
