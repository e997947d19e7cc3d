/*
 * test_tls.h - what the TLS test files share (tests/test_tls*.c): descriptors counted, a
 * client opened with a time measurement, one TLS server with the test's certificates, the
 * check of a failing open. Header-only (static inline).
 */
#ifndef REDISYNC_TESTS_SUPPORT_TEST_TLS_H
#define REDISYNC_TESTS_SUPPORT_TEST_TLS_H

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <dirent.h>
#include <string.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "tls.h"

/* ------------------------------------------------------------------------------------- */
/* Helpers                                                                                */

static inline int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1; /* the directory's own */
}

typedef struct logbook {
    atomic_int warn;
    char last[256];
} logbook_t;

static inline void log_cb(int level, const char *msg, void *arg)
{
    logbook_t *b = arg;
    if (level == RS_LOG_WARN && strstr(msg, "tls_verify=0")) {
        snprintf(b->last, sizeof b->last, "%s", msg);
        atomic_fetch_add(&b->warn, 1);
    }
}

/* rs_client_open on url; *rc its result, *ms how long it took. */
static inline rs_client_t *open_url(const char *url, long lease_ms, long timeout_ms, tu_lost_t *lc,
                             logbook_t *lb, int *rc, long long *ms)
{
    rs_config_t cfg;
    tu_config(&cfg, url, lease_ms, timeout_ms, lc);
    if (lb) {
        cfg.log = log_cb;
        cfg.log_arg = lb;
    }
    rs_client_t *c = NULL;
    long long t0 = tu_mono_ms();
    *rc = rs_client_open(&c, &cfg);
    if (ms)
        *ms = tu_mono_ms() - t0;
    return c;
}

static inline rs_client_t *open_ok(const char *url, long lease_ms, tu_lost_t *lc)
{
    int rc;
    rs_client_t *c = open_url(url, lease_ms, 3000, lc, NULL, &rc, NULL);
    cr_assert_eq(rc, 0, "rs_client_open(%s): %d %s", url, rc, rs_client_lasterror(NULL));
    return c;
}

/* The test's certificates and one TLS server (auth_clients: mutual TLS). */
typedef struct env {
    tt_certs_t certs;
    ts_server_t s;
    int port;
    char url[1024]; /* rediss://127.0.0.1:PORT?tls_ca=CA */
} env_t;

static inline void env_start(env_t *e, const char *cert, int auth_clients)
{
    memset(e, 0, sizeof *e);
    cr_assert_eq(tt_certs_make(&e->certs), 0, "cannot make certificates with openssl");
    cr_assert_eq(tt_server_start(&e->s, &e->port, &e->certs,
                                 cert && !strcmp(cert, "expired")  ? e->certs.expired_cert
                                 : cert && !strcmp(cert, "future") ? e->certs.future_cert
                                                                   : NULL,
                                 auth_clients),
                 0, "cannot start a TLS redis-server");
    snprintf(e->url, sizeof e->url, "rediss://%s127.0.0.1:%d?tls_ca=%s", ts_acl_userinfo(),
             e->port, e->certs.ca);
}

static inline void env_stop(env_t *e)
{
    ts_server_stop(&e->s);
    tt_certs_free(&e->certs);
}

/* Expects rs_client_open(url) to fail with code within bound_ms, its message containing
 * want (and want2, if given), and no descriptor left behind. */
static inline void expect_open_fails(const char *url, long timeout_ms, int code, const char *want,
                              const char *want2, long bound_ms)
{
    int before = count_fds();
    int rc;
    long long ms;
    rs_client_t *c = open_url(url, 0, timeout_ms, NULL, NULL, &rc, &ms);
    const char *msg = rs_client_lasterror(NULL);
    cr_log_info("open %s: %d in %lld ms: %s", url, rc, ms, msg);
    cr_expect_null(c);
    cr_expect_eq(rc, code, "rs_client_open(%s): %d, wanted %d (%s)", url, rc, code, msg);
    cr_expect(strstr(msg, want) || (want2 && strstr(msg, want2)),
              "message \"%s\" lacks \"%s\"%s%s", msg, want, want2 ? " or " : "",
              want2 ? want2 : "");
    cr_expect_leq(ms, bound_ms, "took %lld ms (bound %ld)", ms, bound_ms);
    cr_expect_eq(count_fds(), before, "descriptors before %d, after %d", before, count_fds());
    if (c)
        rs_client_close(c);
}

static inline rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}


#endif
