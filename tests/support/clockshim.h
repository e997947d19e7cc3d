/* Test support: a wall clock that a test moves in other processes (the LD_PRELOAD shim
 * tests/clockshim/clockshim.c, built as BUILDDIR/tests/rs-clockshim.so by mk/clock.mk).
 *
 * ts_clock_create makes a small file that holds the offset (nanoseconds, int64_t) and maps
 * it shared; a process started with LD_PRELOAD=rs-clockshim.so RS_CLOCKSHIM=FILE (ts_clock_env
 * in a forked child before exec, or ts_clock_server_start for a redis-server) reads its
 * CLOCK_REALTIME, gettimeofday and time shifted by the offset, and ts_clock_set_ms changes
 * it at once in every such process: a jump forward or back, by minutes if need be. The
 * monotonic clocks are never shifted. Not thread-safe against concurrent use of one
 * ts_clock_t. */
#ifndef REDISYNC_TESTS_SUPPORT_CLOCKSHIM_H
#define REDISYNC_TESTS_SUPPORT_CLOCKSHIM_H

#include <stdint.h>

#include "redis_server.h"

typedef struct ts_clock {
    char path[128];          /* the offset file (/tmp/ts-clock.PID.XXXXXX) */
    char shim[512];          /* the shim's path */
    volatile int64_t *off;   /* its mapping */
} ts_clock_t;

/* Creates the offset file (offset 0) for the shim at shim_path. 0, or -1 with *k zeroed (the
 * shim missing is an error: a test must not run unshifted). */
int ts_clock_create(ts_clock_t *k, const char *shim_path);
/* Sets the offset of every process under k to off_ms (negative: behind the real clock). */
void ts_clock_set_ms(ts_clock_t *k, long long off_ms);
/* In a forked child, before exec: LD_PRELOAD and RS_CLOCKSHIM for k (and ASan's link-order
 * check off, for a sanitized program). 0 or -1. */
int ts_clock_env(const ts_clock_t *k);
/* ts_server_startv with the server's clock under k. */
int ts_clock_server_start(ts_server_t *s, const ts_clock_t *k, const char *const *args);
/* Unmaps and removes the file; safe on a zeroed or destroyed k. */
void ts_clock_destroy(ts_clock_t *k);

#endif
