/*
 * mutex_internal.h - what other primitives use of the mutex (not public).
 */
#ifndef RS_MUTEX_INTERNAL_H
#define RS_MUTEX_INTERNAL_H

#include <stdint.h>

#include "redisync.h"

/* rs_mutex_timedlock with the monotonic deadline already converted (RS_NO_DEADLINE: none),
 * for a caller that converted its abstime once on entry (the multilock, for every part). */
int rs__mutex_lock_until(rs_mutex_t *m, uint64_t deadline);

#endif
