/*
 * test_redlock.h - what the Redlock tests share (test_redlock.c, test_async_redlock.c): NM
 * plain redis-servers on free ports as a test's masters, their redlock:// URL, and clients
 * of it.
 */
#ifndef RS_TEST_REDLOCK_H
#define RS_TEST_REDLOCK_H

#include <string.h>

#include <criterion/criterion.h>

#include "redis_server.h"
#include "redisync.h"

#define NM 3

typedef struct masters {
    ts_server_t s[NM];
    char url[256];
} masters_t;

static inline void masters_up(masters_t *m)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < NM; i++)
        cr_assert_eq(ts_server_start(&m->s[i], NULL), 0, "cannot start redis-server %d", i);
    ts_redlock_url(m->url, sizeof m->url, m->s, NM);
}

static inline void masters_down(masters_t *m)
{
    for (int i = 0; i < NM; i++)
        ts_server_stop(&m->s[i]);
}

static inline rs_config_t rl_config(const char *url, const char *prefix, long lease_ms,
                                    long timeout_ms)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = lease_ms;
    cfg.timeout_ms = timeout_ms;
    return cfg;
}

/* A client of url (prefix NULL: the default one); fails the test when it cannot open. */
static inline rs_client_t *rl_open(const char *url, const char *prefix, long lease_ms,
                                   long timeout_ms)
{
    rs_config_t cfg = rl_config(url, prefix, lease_ms, timeout_ms);
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "open %s: %s", url, rs_client_lasterror(NULL));
    return c;
}

#endif
