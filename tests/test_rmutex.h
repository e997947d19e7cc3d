/*
 * test_rmutex.h - static helpers shared by the test_rmutex*.c files (moved from test_rmutex.c):
 * hold_count, has_owner and new_rmutex.
 */
#ifndef TEST_RMUTEX_H
#define TEST_RMUTEX_H

#include <criterion/criterion.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"

/* HGET rs:{name}:rmutex n as an integer; -1 when absent. */
static inline long long hold_count(const ts_server_t *s, const char *name)
{
    return ts_cmd_int(s, "HGET rs:{%s}:rmutex n", name);
}

/* Whether rs:{name}:rmutex has an owner field. */
static inline int has_owner(const ts_server_t *s, const char *name)
{
    return ts_cmd_int(s, "HEXISTS rs:{%s}:rmutex o", name) == 1;
}

static inline rs_rmutex_t *new_rmutex(rs_client_t *c, const char *name)
{
    rs_rmutex_t *m = NULL;
    int rc = rs_rmutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_rmutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    cr_assert_not_null(m);
    return m;
}

#endif
