/*
 * mutex.c - rs_mutex_t, the error-checking distributed mutex (the C side of mutex.lua).
 *
 * lock = timedlock without a deadline = rs__acquire (lib/handle.c), which queues in Redis,
 * sleeps until the release hands the mutex over, and registers the hold with the watchdog.
 * unlock = rs__release: the owner-checked release hands the mutex straight to the next live
 * waiter and wakes that waiter alone. What each thread holds is recorded in the handle, so
 * EDEADLK (locking twice), EPERM (never held) and RS_ELOST (held, then lost) are told apart
 * without asking Redis.
 */
#include "internal.h"
#include "mutex_internal.h"
#include "scripts.h"

struct rs_mutex {
    rs_handle_t h;
};

static const char *const mutex_keys[] = {NULL, "fence", "q", "qi"};
const rs_kind_t rs_kind_mutex = {"mutex", &rs_script_mutex, mutex_keys, 4};

RS_API int rs_mutex_init(rs_mutex_t **out, rs_client_t *c, const char *name)
{
    return rs__handle_new(out, sizeof **out, c, rs_kind_mutex.name, rs_kind_mutex.script, name,
                          rs_kind_mutex.suffixes, rs_kind_mutex.nkeys);
}

/* lock, trylock and timedlock: one path, as in musl (deadline: the monotonic one, when
 * abstime is NULL) */
static int locked_until(rs_mutex_t *m, int try_only, const struct timespec *abstime,
                        uint64_t deadline)
{
    int rc = rs__handle_begin(m ? &m->h : NULL, "mutex", abstime, &deadline);
    if (rc)
        return rc;
    if (rs__handle_find(&m->h, rs__thread_no())) {
        rc = rs__fail(m->h.c, try_only ? EBUSY : EDEADLK,
                      "this thread already holds mutex \"%.*s\"", RS_HNAME(&m->h));
    } else {
        rc = rs__handle_take(&m->h, try_only, deadline);
    }
    rs__leave(m->h.c);
    return rc;
}

static int locked(rs_mutex_t *m, int try_only, const struct timespec *abstime)
{
    return locked_until(m, try_only, abstime, try_only ? 0 : RS_NO_DEADLINE);
}

int rs__mutex_lock_until(rs_mutex_t *m, uint64_t deadline)
{
    return locked_until(m, 0, NULL, deadline);
}

RS_API int rs_mutex_lock(rs_mutex_t *m)
{
    return locked(m, 0, NULL);
}

RS_API int rs_mutex_trylock(rs_mutex_t *m)
{
    return locked(m, 1, NULL);
}

RS_API int rs_mutex_timedlock(rs_mutex_t *m, const struct timespec *abstime)
{
    if (m && !abstime)
        return rs__fail(m->h.c, EINVAL, "deadline is NULL");
    return locked(m, 0, abstime);
}

RS_API int rs_mutex_unlock(rs_mutex_t *m)
{
    int rc = rs__handle_begin(m ? &m->h : NULL, "mutex", NULL, NULL);
    if (rc)
        return rc;
    rs_hold_t *hold = rs__handle_find(&m->h, rs__thread_no());
    if (!hold) {
        rc = rs__fail(m->h.c, EPERM, "this thread does not hold mutex \"%.*s\"", RS_HNAME(&m->h));
    } else {
        rs__handle_remove(&m->h, hold);
        rc = rs__release(&m->h, hold, "rel");
    }
    rs__leave(m->h.c);
    return rc;
}

RS_API int rs_mutex_acquire(rs_mutex_t *m, const struct timespec *abstime, rs_hold_t **out)
{
    if (out)
        *out = NULL;
    if (!out)
        return rs__fail(m ? m->h.c : NULL, EINVAL, "hold pointer is NULL");
    int rc = rs__handle_begin(m ? &m->h : NULL, "mutex", NULL, NULL);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init_object(&k, &m->h);
    rc = rs__acquire_object(&k, abstime, out);
    rs__leave(m->h.c);
    return rc;
}

RS_API int rs_mutex_acquire_async(rs_mutex_t *m, const struct timespec *abstime,
                                  rs_done_fn *done, void *arg, rs_request_t **req)
{
    if (req)
        *req = NULL;
    int rc = rs__handle_begin(m ? &m->h : NULL, "mutex", NULL, NULL);
    if (rc)
        return rc;
    rs_call_t k;
    rs__call_init_object(&k, &m->h);
    rc = rs__async_acquire(&k, abstime, NULL, done, arg, req);
    rs__leave(m->h.c);
    return rc;
}

RS_API uint64_t rs_mutex_fence(const rs_mutex_t *m)
{
    return m ? rs__handle_fence(&m->h) : 0;
}

RS_API long rs_mutex_remaining(const rs_mutex_t *m)
{
    return m ? rs__handle_remaining(&m->h) : 0;
}

RS_API int rs_mutex_setlease(rs_mutex_t *m, long lease_ms)
{
    return rs__handle_setlease(m ? &m->h : NULL, lease_ms);
}

RS_API int rs_mutex_destroy(rs_mutex_t *m)
{
    return rs__handle_free(m ? &m->h : NULL);
}
