/*
 * rmutex.c - rs_rmutex_t, the recursive (reentrant) distributed mutex.
 *
 * It runs the mutex's script (primitives/mutex/mutex.lua: the queue, handoff and fencing
 * logic are the same, and one copy of them is easier to keep right than two) under its own
 * kind "rmutex", so its keys never meet a mutex's of the same name. What it adds is the hold
 * count, kept in Redis next to the owner (ops enter and leave, each carrying a call id so a
 * retried call never counts twice) and mirrored in the thread's hold record. The fencing
 * token is the first acquisition's for all re-entries; the last unlock releases ("rel").
 * Under Redlock enter and leave go to every master at once (lib/redlock.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "scripts.h"

struct rs_rmutex {
    rs_handle_t h;
};

static const char *const rmutex_keys[] = {NULL, "fence", "q", "qi"};
const rs_kind_t rs_kind_rmutex = {"rmutex", &rs_script_mutex, rmutex_keys, 4};

RS_API int rs_rmutex_init(rs_rmutex_t **out, rs_client_t *c, const char *name)
{
    return rs__handle_new(out, sizeof **out, c, rs_kind_rmutex.name, rs_kind_rmutex.script, name,
                          rs_kind_rmutex.suffixes, rs_kind_rmutex.nkeys);
}

/* Runs enter or leave on the thread's hold. 0 with hold->count updated, or RS_ELOST. */
static int count_call(rs_rmutex_t *m, rs_hold_t *hold, const char *op)
{
    if (rs__lease_is_lost(m->h.c, hold->lease))
        return RS_ELOST;
    rs_call_t k;
    rs__call_init(&k, &m->h, hold->acqid);
    char callid[RS_ACQID_MAX];
    rs__acq_id(m->h.c, callid);
    rs__call_extra(&k, callid);
    if (m->h.c->ep.mode == RS_MODE_REDLOCK) {
        /* on every master; each keeps its own count (shown by inspection), the thread's
         * record is the one that decides: it is lost only when more masters deny the hold
         * than a quorum could spare */
        rs_rl_tally_t t;
        rs_argv_t v;
        rs__call_argv(&k, op, "t", &v);
        int rc = rs__rl_call_int(m->h.c, m->h.script, m->h.nkeys, &v, atol(k.lease), &t);
        if (rc)
            return rc;
        if (t.zero > m->h.c->ep.nseeds - rs__rl_quorum(m->h.c)) {
            rs__lease_set_lost(m->h.c, hold->lease);
            return RS_ELOST;
        }
        hold->count += strcmp(op, "enter") == 0 ? 1 : -1;
        return 0;
    }
    redisReply *r;
    int rc = rs__call_run(&k, op, "t", &r);
    if (rc)
        return rc;
    long long n = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    if (n < 0)
        return rs__fail(m->h.c, RS_ESERVER, "unexpected reply from the rmutex script (%s)", op);
    if (n == 0) {
        rs__lease_set_lost(m->h.c, hold->lease);
        return RS_ELOST;
    }
    hold->count = (unsigned)n;
    return 0;
}

static int locked(rs_rmutex_t *m, int try_only, const struct timespec *abstime)
{
    uint64_t deadline = try_only ? 0 : RS_NO_DEADLINE;
    int rc = rs__handle_begin(m ? &m->h : NULL, "rmutex", abstime, &deadline);
    if (rc)
        return rc;
    rs_hold_t *hold = rs__handle_find(&m->h, rs__thread_no());
    if (hold) {
        rc = count_call(m, hold, "enter");
        if (rc == RS_ELOST)
            rs__fail(m->h.c, rc, "the hold on rmutex \"%.*s\" had been lost; unlock it first",
                     RS_HNAME(&m->h));
    } else {
        rc = rs__handle_take(&m->h, try_only, deadline);
    }
    rs__leave(m->h.c);
    return rc;
}

RS_API int rs_rmutex_lock(rs_rmutex_t *m)
{
    return locked(m, 0, NULL);
}

RS_API int rs_rmutex_trylock(rs_rmutex_t *m)
{
    return locked(m, 1, NULL);
}

RS_API int rs_rmutex_timedlock(rs_rmutex_t *m, const struct timespec *abstime)
{
    if (m && !abstime)
        return rs__fail(m->h.c, EINVAL, "deadline is NULL");
    return locked(m, 0, abstime);
}

RS_API int rs_rmutex_unlock(rs_rmutex_t *m)
{
    int rc = rs__handle_begin(m ? &m->h : NULL, "rmutex", NULL, NULL);
    if (rc)
        return rc;
    rs_hold_t *hold = rs__handle_find(&m->h, rs__thread_no());
    if (!hold) {
        rc = rs__fail(m->h.c, EPERM, "this thread does not hold rmutex \"%.*s\"", RS_HNAME(&m->h));
    } else if (hold->count > 1 && (rc = count_call(m, hold, "leave")) != RS_ELOST) {
        /* one re-entry fewer (or an error that left the count as it was) */
    } else {
        /* the last unlock, or the hold was lost: all re-entries end here */
        rs__handle_remove(&m->h, hold);
        rc = rs__release(&m->h, hold, "rel");
    }
    rs__leave(m->h.c);
    return rc;
}

RS_API uint64_t rs_rmutex_fence(const rs_rmutex_t *m)
{
    return m ? rs__handle_fence(&m->h) : 0;
}

RS_API long rs_rmutex_remaining(const rs_rmutex_t *m)
{
    return m ? rs__handle_remaining(&m->h) : 0;
}

RS_API int rs_rmutex_setlease(rs_rmutex_t *m, long lease_ms)
{
    return rs__handle_setlease(m ? &m->h : NULL, lease_ms);
}

RS_API int rs_rmutex_destroy(rs_rmutex_t *m)
{
    return rs__handle_free(m ? &m->h : NULL);
}
