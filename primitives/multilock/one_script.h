/* one_script.h - the multilock's one-script path (one_script.c), used by multilock.c. */
#ifndef REDISYNC_MULTILOCK_ONE_SCRIPT_H
#define REDISYNC_MULTILOCK_ONE_SCRIPT_H

#include "internal.h"

/* Most parts one call takes: its KEYS and ARGV must fit an rs_argv_t (3 keys a part). */
#define RS_ML_ONE_SCRIPT_MAX ((RS_ARGV_MAX - 6) / 3)

/* Whether parts h[0..n) can be taken by one script: one client, a single server or
 * Sentinel's master (under Cluster each name is a slot of its own), 2..RS_ML_ONE_SCRIPT_MAX
 * parts. Fixed at init; min_replicas and leases are checked per call. */
int rs__ml_one_script_fits(rs_handle_t *const *h, size_t n);

/* Takes every part for the calling thread in one EVALSHA of multilock.lua, or none.
 * 0: all taken (ordinary holds, one per part, as rs_mutex_trylock leaves them); EBUSY: a
 * part is held or has waiters (nothing taken); -1: this call cannot decide (a part held by
 * this thread, leases that differ, min_replicas > 0): take the ordered path; else the
 * error of the call (RS_ECONN, ...). */
int rs__ml_one_script(rs_handle_t *const *h, size_t n);

#endif
