/*
 * holdobj.c - holds as objects: a hold that belongs to the program, not to the thread that
 * took it (issue 16; api.md, "Holds as objects").
 *
 * A primitive's acquire call (rs_mutex_acquire, rs_rwlock_acquire_read/write,
 * rs_sem_acquire) takes its hold through rs__acquire_object (handle.c) under an owner of its
 * own: a number from the threads' sequence that no thread ever gets (hold.c), so its owner
 * token is the hold's alone. The hold is the same record as a thread's (rs_hold_t, with the
 * same lease that the watchdog renews and rs_client_close releases) but it is not in the
 * handle's per-thread list: the handle only counts it (nobj), so that it is not destroyed
 * under it. Any thread may then read it or release it here; the scripts cannot tell it from
 * a thread's hold, so a hold object and a thread-bound hold on one name exclude each other
 * and queue in one line.
 */
#include <stdlib.h>

#include "internal.h"

static int bad(const rs_hold_t *hold)
{
    return rs__fail(NULL, EINVAL, hold ? "not a hold object (a thread's hold is released "
                                         "with its primitive's unlock)"
                                       : "hold is NULL");
}

RS_API int rs_hold_release(rs_hold_t *hold)
{
    if (!hold || !hold->obj)
        return bad(hold);
    rs_handle_t *h = hold->obj;
    rs_client_t *c = h->c;
    int rc = rs__enter(c);
    if (rc == 0) {
        rc = rs__release(h, hold, "rel"); /* frees hold; RS_ELOST if it had been lost */
        rs__leave(c);
    } else {
        /* closed: rs_client_close released it in Redis (a lost one stays lost); a fork
         * child: the parent's hold, not touched. Either way only the memory goes. */
        int lost = rc == ECANCELED && rs__lease_is_lost(c, hold->lease);
        if (rc == ECANCELED)
            rs__watch_del(c, hold->lease);
        rs__hold_discard(hold);
        rc = rc == RS_EFORK ? RS_EFORK
             : lost         ? rs__fail(c, RS_ELOST, "the hold on %s \"%.*s\" had been lost",
                                       h->kind, RS_HNAME(h))
                            : 0;
    }
    atomic_fetch_sub(&h->nobj, 1);
    return rc;
}

RS_API uint64_t rs_hold_fence(const rs_hold_t *hold)
{
    return hold && hold->obj ? hold->fence : 0;
}

RS_API long rs_hold_remaining(const rs_hold_t *hold)
{
    if (!hold || !hold->obj || rs__forked(hold->obj->c))
        return 0;
    return rs__lease_remaining_ms(hold->obj->c, hold->lease);
}

RS_API int rs_hold_lost(const rs_hold_t *hold)
{
    if (!hold || !hold->obj)
        return 0;
    return rs__lease_is_lost(hold->obj->c, hold->lease) != 0;
}
