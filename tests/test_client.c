/*
 * test_client.c - the client: configuration, URLs, credentials, errors and their messages,
 * lifetime (close, fork), input checking on the mutex entry points, and the promises of
 * good behaviour inside a host program (never prints, SIGPIPE, close-on-exec).
 *
 * Every test that talks to Redis starts its own server (tests run in parallel processes).
 * Time bounds are generous (a shared, noisy machine): "within timeout_ms + 2 s".
 */
#include "client_support.h"

TestSuite(client, .timeout = 60);

/* ---------------------------------------------------------------------------------------
 * 1. Configuration defaults, open's argument checks, $REDISYNC_URL and the default URL
 * ------------------------------------------------------------------------------------- */

Test(client, config_init_zeroes_everything)
{
    rs_config_t cfg, zero;
    memset(&cfg, 0xA5, sizeof cfg);
    memset(&zero, 0, sizeof zero);
    rs_config_init(&cfg);
    cr_assert_null(cfg.url);
    cr_assert_null(cfg.prefix);
    cr_assert_eq(cfg.lease_ms, 0);
    cr_assert_eq(cfg.timeout_ms, 0);
    cr_assert_eq(cfg.min_replicas, 0);
    cr_assert_eq(cfg.replica_timeout_ms, 0);
    cr_assert_eq(cfg.max_waiters, 0);
    cr_assert_null((void *)(uintptr_t)cfg.on_lost);
    cr_assert_null(cfg.on_lost_arg);
    cr_assert_null((void *)(uintptr_t)cfg.log);
    cr_assert_null(cfg.log_arg);
    cr_assert_eq(cfg.confirm_wakeups, 0);
    for (size_t i = 0; i < sizeof cfg.reserved / sizeof cfg.reserved[0]; i++)
        cr_assert_null(cfg.reserved[i], "reserved[%zu] not zeroed", i);
    cr_assert_eq(memcmp(&cfg, &zero, sizeof cfg), 0, "some byte of rs_config_t is not zero");
    rs_config_init(NULL); /* must not crash */
}

Test(client, open_null_out_is_einval)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = "redis://127.0.0.1:1";
    cr_assert_eq(rs_client_open(NULL, &cfg), EINVAL);
    cr_assert_neq(rs_client_lasterror(NULL)[0], '\0', "no message for a NULL out");
    cr_assert_eq(rs_client_open(NULL, NULL), EINVAL);
}

Test(client, open_uses_env_url)
{
    ts_server_t s;
    tu_start_server(&s);
    char url[200];
    snprintf(url, sizeof url, "%s/4", s.url);
    cr_assert_eq(setenv("REDISYNC_URL", url, 1), 0);

    /* cfg NULL: all defaults, URL from the environment (db 4 shows it was used) */
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, NULL);
    cr_assert_eq(rc, 0, "open(NULL cfg) = %d: %s", rc, rs_client_lasterror(NULL));
    rs_mutex_t *m = mutex_ok(c, "envlock");
    cr_assert_eq(rs_mutex_lock(m), 0);
    cr_expect_eq(raw_exists(&s, 4, "rs:{envlock}:mutex", 18), 1, "key not in db 4");
    cr_expect_eq(raw_exists(&s, 0, "rs:{envlock}:mutex", 18), 0, "key in db 0");
    cr_assert_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    cr_assert_eq(rs_client_close(c), 0);

    /* cfg given with url NULL: the environment too */
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.timeout_ms = 1000;
    c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));
    cr_assert_eq(rs_client_close(c), 0);

    /* the environment is really read: a bad one fails */
    cr_assert_eq(setenv("REDISYNC_URL", "http://example.invalid", 1), 0);
    c = (rs_client_t *)&cfg; /* anything non-NULL */
    cr_assert_eq(rs_client_open(&c, NULL), EINVAL);
    cr_assert_null(c);
    cr_expect(strstr(rs_client_lasterror(NULL), "scheme") != NULL, "message: %s",
              rs_client_lasterror(NULL));

    /* an explicit cfg.url wins over the environment */
    cfg.url = s.url;
    c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));
    cr_assert_eq(rs_client_close(c), 0);

    unsetenv("REDISYNC_URL");
    ts_server_stop(&s);
}

/* With REDISYNC_URL unset (or empty) the default is redis://127.0.0.1:6379. Whether
 * something listens there is not ours to decide: check the outcome is consistent. */
static void check_default_url(const char *label)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.timeout_ms = 300;
    int listening = something_listens(6379);
    rs_client_t *c = (rs_client_t *)&cfg;
    long long t0 = tu_mono_ms();
    int rc = rs_client_open(&c, &cfg);
    long long took = tu_mono_ms() - t0;
    const char *msg = rs_client_lasterror(NULL);
    if (listening) {
        cr_expect(rc == 0 || rc == RS_ESERVER, "[%s] 6379 listens, open = %d: %s", label, rc, msg);
    } else {
        cr_expect_eq(rc, RS_ECONN, "[%s] nothing on 6379, open = %d: %s", label, rc, msg);
        cr_expect(strstr(msg, "127.0.0.1:6379") != NULL, "[%s] message: %s", label, msg);
        cr_expect_lt(took, 300 + 2000, "[%s] took %lld ms", label, took);
    }
    if (rc == 0) {
        cr_assert_not_null(c);
        rs_client_close(c);
    } else {
        cr_expect_null(c, "[%s] *out not NULL after a failed open", label);
    }
}

Test(client, open_default_url)
{
    unsetenv("REDISYNC_URL");
    check_default_url("unset");
    cr_assert_eq(setenv("REDISYNC_URL", "", 1), 0);
    check_default_url("empty");
    unsetenv("REDISYNC_URL");
}

/* ---------------------------------------------------------------------------------------
 * 2. URLs
 * ------------------------------------------------------------------------------------- */

struct bad_url {
    const char *url;
    const char *want; /* a distinctive part of the message */
};

static const struct bad_url bad_urls[] = {
    {"http://x", "unknown scheme"},
    {"ftp://127.0.0.1:1", "unknown scheme"},
    {"127.0.0.1:6379", "no scheme"},
    {"redis:/127.0.0.1:1", "no scheme"},
    {"", "empty"},
    {"redis://h:0", "port"},
    {"redis://h:65536", "port"},
    {"redis://h:99999999999", "port"},
    {"redis://h:abc", "port"},
    {"redis://h:", "port"},
    {"redis://h:-1", "port"},
    {"redis://h:1/0x", "database"},
    {"redis://h:1/0/extra", "database"},
    {"redis://h:1/-1", "database"},
    {"redis://h:1#frag", "unexpected"},
    {"redis://[::1", "unterminated"},
    {"redis://[::1]x:1", "after ]"},
    {"redis://[]:1", "IPv6"},
    {"redis://", "host is missing"},
    {"redis://:1", "host is missing"},
    {"redis://ho st:1", "invalid character"},
    {"unix://relative.sock", "absolute path"},
    {"unix://", "absolute path"},
    {"unix:///tmp/x.sock?foo=1", "unknown query option"},
    {"unix:///tmp/x.sock?db=x", "db must be a number"},
    {"redis://h:1?foo=1", "unknown query option"},
    {"redis://user@h:1", "credentials"},
    {"redis-sentinel://h:1", "master's name"},
    {"redis-sentinel:///m", "no sentinel address"},
    {"redis-sentinel://h:1,/m", "empty sentinel address"},
    {"redis-sentinel://h:x/m", "port"},
    {"redis-sentinel://h:1/", "name is empty"},
    {"redis-sentinel://h:1/m?x=1", "unknown query option"},
    {"redis-cluster://", "at least one node"},
    {"redis-cluster://h:1/0", "database"},
    {"redis-cluster://h:1,,h:2", "host is missing"},
    {"redis-cluster://h:1,", "empty cluster node address"},
    {"redis-cluster://h:1?db=1", "database"},
    {"redlock://a:1,b:1", "at least 3 masters"},
};

static void expect_bad_url(const char *url, const char *want)
{
    rs_config_t cfg = cfg_for(url, 300, 0);
    rs_client_t *c = (rs_client_t *)&cfg;
    int rc = rs_client_open(&c, &cfg);
    const char *msg = rs_client_lasterror(NULL);
    cr_expect_eq(rc, EINVAL, "open(\"%s\") = %d (%s), want EINVAL", url, rc, msg);
    cr_expect_null(c, "open(\"%s\"): *out not NULL after failure", url);
    if (want)
        cr_expect(strstr(msg, want) != NULL, "open(\"%s\"): message \"%s\" lacks \"%s\"", url,
                  msg, want);
    if (rc == 0 && c && c != (rs_client_t *)&cfg)
        rs_client_close(c);
}

Test(client, url_malformed_is_einval_with_message)
{
    for (size_t i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++)
        expect_bad_url(bad_urls[i].url, bad_urls[i].want);

    /* a unix socket path longer than sun_path */
    char longpath[400] = "unix:///";
    memset(longpath + 8, 'p', 300);
    longpath[308] = '\0';
    expect_bad_url(longpath, "longer than");

    /* the unknown scheme is named */
    expect_bad_url("http://x", "http");
}

Test(client, url_messages_never_contain_the_password)
{
    static const char *const urls[] = {
        "redis://:" SECRET "@h:abc",
        "redis://u:" SECRET "@h:0",
        "redis://u:" SECRET "@h:1/0x",
        "redis://u:" SECRET "@h:1/0/extra",
        "redis://u:" SECRET "@[::1",
        "redis://u:" SECRET "@[::1]junk",
        "redis://u:" SECRET "@h:1?x=1",
        "redis://u:" SECRET "@h:1/0?db=zz",
        "redis://u:" SECRET "%zz@h:1",
        "redis://u:" SECRET "%0@h:1",
        "redis://u:" SECRET "%00@h:1",
        "redis://" SECRET "@h:1",
        "http://u:" SECRET "@h:1",
        "redis://u:" SECRET "@ho st:1",
        "redis://u:" SECRET "@h:1#x",
        "redis://u:" SECRET "@:1",
        "redis://u:" SECRET "@x@h:abc",
        "unix://:" SECRET "@/tmp/x.sock",
        "redis-sentinel://u:" SECRET "@h:1",
        "redis-sentinel://u:" SECRET "@h:0/m",
        "redis-sentinel://u:" SECRET "@h:1,/m",
        "redis-cluster://u:" SECRET "@h:0",
        "redis-cluster://u:" SECRET "@h:1/3",
        "redlock://u:" SECRET "@a:1,b:x,c:1",
        "redlock://u:" SECRET "@a:1,b:1",
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        expect_bad_url(urls[i], NULL);
        const char *msg = rs_client_lasterror(NULL);
        cr_expect_neq(msg[0], '\0', "open(\"%s\"): empty message", urls[i]);
        cr_expect(strstr(msg, SECRET) == NULL && strstr(msg, "s3cr3t") == NULL,
                  "open(\"%s\"): message repeats the password: %s", urls[i], msg);
    }
    /* a password longer than the library keeps */
    char url[600];
    char pw[400];
    memset(pw, 'x', sizeof pw - 1);
    pw[sizeof pw - 1] = '\0';
    memcpy(pw + 100, SECRET, strlen(SECRET));
    snprintf(url, sizeof url, "redis://u:%s@h:1", pw);
    expect_bad_url(url, "password");
    cr_expect(strstr(rs_client_lasterror(NULL), SECRET) == NULL, "message repeats the password");
}

Test(client, url_valid_forms_connect)
{
    ts_server_t s;
    tu_start_server(&s);
    char url[300];

    rs_client_t *c = open_ok(s.url, 2000, 0);
    cr_assert_eq(rs_client_close(c), 0);

    snprintf(url, sizeof url, "%s/", s.url); /* empty db: 0 */
    c = open_ok(url, 2000, 0);
    cr_assert_eq(rs_client_close(c), 0);

    /* db 3: the keys of a lock land there */
    snprintf(url, sizeof url, "%s/3", s.url);
    c = open_ok(url, 2000, 0);
    rs_mutex_t *m = mutex_ok(c, "dbthree");
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(raw_exists(&s, 3, "rs:{dbthree}:mutex", 18), 1, "lock key not in db 3");
    cr_expect_eq(raw_exists(&s, 0, "rs:{dbthree}:mutex", 18), 0, "lock key in db 0");
    cr_assert_eq(rs_mutex_unlock(m), 0);
    cr_assert_eq(rs_mutex_destroy(m), 0);
    cr_assert_eq(rs_client_close(c), 0);

    /* db in the query string */
    snprintf(url, sizeof url, "%s?db=5", s.url);
    c = open_ok(url, 2000, 0);
    m = mutex_ok(c, "dbfive");
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(raw_exists(&s, 5, "rs:{dbfive}:mutex", 17), 1, "lock key not in db 5");
    cr_assert_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    cr_assert_eq(rs_client_close(c), 0);

    /* a db the server does not have: refused by SELECT at open */
    snprintf(url, sizeof url, "%s/999", s.url);
    rs_config_t cfg = cfg_for(url, 1000, 0);
    c = (rs_client_t *)&cfg;
    int rc = rs_client_open(&c, &cfg);
    cr_expect_eq(rc, RS_ESERVER, "db 999: open = %d: %s", rc, rs_client_lasterror(NULL));
    cr_expect_null(c);

    /* an IPv6 literal parses (nothing of ours listens on ::1: ECONN, not EINVAL) */
    snprintf(url, sizeof url, "redis://[::1]:%d", free_port());
    cfg = cfg_for(url, 300, 0);
    c = NULL;
    rc = rs_client_open(&c, &cfg);
    cr_expect_eq(rc, RS_ECONN, "[::1]: open = %d: %s", rc, rs_client_lasterror(NULL));
    cr_expect(strstr(rs_client_lasterror(NULL), "::1") != NULL, "message: %s",
              rs_client_lasterror(NULL));

    ts_server_stop(&s);
}

Test(client, url_unix_socket)
{
    char dir[] = "/tmp/rs-client-unix.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char sock[200], url[300];
    snprintf(sock, sizeof sock, "%s/redis.sock", dir);
    ts_server_t s;
    int started = ts_server_start(&s, "--unixsocket", sock, "--unixsocketperm", "700", NULL);
    if (started != 0) {
        rmdir(dir);
        cr_assert_fail("cannot start redis-server with a unix socket");
    }

    snprintf(url, sizeof url, "unix://%s", sock);
    rs_client_t *c = open_ok(url, 2000, 0);
    rs_mutex_t *m = mutex_ok(c, "unixlock");
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(raw_exists(&s, 0, "rs:{unixlock}:mutex", 19), 1);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);

    snprintf(url, sizeof url, "unix://%s?db=2", sock);
    c = open_ok(url, 2000, 0);
    m = mutex_ok(c, "unixtwo");
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(raw_exists(&s, 2, "rs:{unixtwo}:mutex", 18), 1, "lock key not in db 2");
    cr_expect_eq(raw_exists(&s, 0, "rs:{unixtwo}:mutex", 18), 0, "lock key in db 0");
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);

    /* a socket path nobody serves: ECONN naming the path */
    snprintf(url, sizeof url, "unix://%s/none.sock", dir);
    rs_config_t cfg = cfg_for(url, 300, 0);
    c = (rs_client_t *)&cfg;
    long long t0 = tu_mono_ms();
    int rc = rs_client_open(&c, &cfg);
    long long took = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "open = %d: %s", rc, rs_client_lasterror(NULL));
    cr_expect_null(c);
    cr_expect(strstr(rs_client_lasterror(NULL), "none.sock") != NULL, "message: %s",
              rs_client_lasterror(NULL));
    cr_expect_lt(took, 300 + 2000, "took %lld ms", took);

    ts_server_stop(&s);
    unlink(sock);
    rmdir(dir);
}

Test(client, url_percent_encoded_password)
{
    ts_server_t s;
    start_server_pw(&s, "p@ss:w/rd%?#");
    char url[300];
    snprintf(url, sizeof url, "redis://:p%%40ss%%3Aw%%2Frd%%25%%3F%%23@127.0.0.1:%d", s.port);
    rs_client_t *c = open_ok(url, 2000, 0);
    rs_mutex_t *m = mutex_ok(c, "pct");
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);

    /* the same with the default user named, and lower-case hex */
    snprintf(url, sizeof url, "redis://default:p%%40ss%%3aw%%2frd%%25%%3f%%23@127.0.0.1:%d/1",
             s.port);
    c = open_ok(url, 2000, 0);
    cr_expect_eq(rs_client_close(c), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 3. AUTH and ACL users
 * ------------------------------------------------------------------------------------- */

Test(client, auth_requirepass)
{
    ts_server_t s;
    start_server_pw(&s, "pw");
    char url[300];

    /* wrong password: RS_ESERVER, and the message does not repeat what we sent */
    snprintf(url, sizeof url, "redis://:wrongPW4711@127.0.0.1:%d", s.port);
    rs_config_t cfg = cfg_for(url, 1000, 0);
    rs_client_t *c = (rs_client_t *)&cfg;
    int rc = rs_client_open(&c, &cfg);
    cr_expect_eq(rc, RS_ESERVER, "wrong password: open = %d: %s", rc, rs_client_lasterror(NULL));
    cr_expect_null(c);
    cr_expect_neq(rs_client_lasterror(NULL)[0], '\0');
    cr_expect(strstr(rs_client_lasterror(NULL), "wrongPW4711") == NULL,
              "message repeats the password: %s", rs_client_lasterror(NULL));

    /* right password */
    snprintf(url, sizeof url, "redis://:pw@127.0.0.1:%d", s.port);
    c = open_ok(url, 2000, 0);
    rs_mutex_t *m = mutex_ok(c, "authed");
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);
    ts_server_stop(&s);
}

/* The header: open "connects once to check the address and credentials"; errors include
 * RS_ESERVER "e.g. bad password". A missing password on a server that requires one is a
 * credential error, and must be reported by open rather than by the first lock. */
Test(client, auth_missing_password_fails_at_open)
{
    ts_server_t s;
    start_server_pw(&s, "pw");
    char url[64]; /* no credentials (s.url names the ACL user under make test-acl) */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", s.port);
    rs_config_t cfg = cfg_for(url, 1000, 0);
    rs_client_t *c = (rs_client_t *)&cfg;
    int rc = rs_client_open(&c, &cfg);
    cr_expect_eq(rc, RS_ESERVER, "open without a password on a protected server = %d (%s): %s",
                 rc, rs_strerror(rc), rs_client_lasterror(NULL));
    if (rc == 0) {
        /* at least the first real call must say NOAUTH */
        rs_mutex_t *m = mutex_ok(c, "noauth");
        int lrc = rs_mutex_lock(m);
        cr_expect_eq(lrc, RS_ESERVER, "lock = %d: %s", lrc, rs_client_lasterror(c));
        cr_expect(strstr(rs_client_lasterror(c), "NOAUTH") != NULL, "message: %s",
                  rs_client_lasterror(c));
        rs_mutex_destroy(m);
        rs_client_close(c);
    } else {
        cr_expect_null(c);
        cr_expect(strstr(rs_client_lasterror(NULL), "NOAUTH") != NULL ||
                      strstr(rs_client_lasterror(NULL), "uthentication") != NULL,
                  "message: %s", rs_client_lasterror(NULL));
    }
    ts_server_stop(&s);
}

Test(client, auth_acl_user)
{
    ts_server_t s;
    tu_start_server(&s);
    cr_assert_eq(raw_ok(&s, "ACL SETUSER alice on >alicepw ~* &* +@all"), 0);
    /* bob may do anything but run scripts */
    cr_assert_eq(raw_ok(&s, "ACL SETUSER bob on >bobpw ~* &* +@all -evalsha -eval"), 0);
    char url[300];

    snprintf(url, sizeof url, "redis://alice:alicepw@127.0.0.1:%d", s.port);
    rs_client_t *c = open_ok(url, 2000, 0);
    rs_mutex_t *m = mutex_ok(c, "acl");
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);

    static const char *const bad[] = {"alice:wrongALICEpw", "nobody:alicepw", "alice:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(url, sizeof url, "redis://%s@127.0.0.1:%d", bad[i], s.port);
        rs_config_t cfg = cfg_for(url, 1000, 0);
        c = (rs_client_t *)&cfg;
        int rc = rs_client_open(&c, &cfg);
        cr_expect_eq(rc, RS_ESERVER, "%s: open = %d: %s", bad[i], rc, rs_client_lasterror(NULL));
        cr_expect_null(c);
        cr_expect(strstr(rs_client_lasterror(NULL), "wrongALICEpw") == NULL,
                  "message repeats the password: %s", rs_client_lasterror(NULL));
    }

    /* a user without the right to run scripts: the lock reports the server's NOPERM */
    snprintf(url, sizeof url, "redis://bob:bobpw@127.0.0.1:%d", s.port);
    c = open_ok(url, 1000, 0);
    m = mutex_ok(c, "acl");
    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, RS_ESERVER, "lock without EVALSHA rights = %d: %s", rc,
                 rs_client_lasterror(c));
    cr_expect(strstr(rs_client_lasterror(c), "NOPERM") != NULL ||
                  strstr(rs_client_lasterror(c), "permission") != NULL,
              "message: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 4. Bad configuration
 * ------------------------------------------------------------------------------------- */

static void expect_bad_cfg(const rs_config_t *cfg, const char *want, const char *what)
{
    rs_client_t *c = (rs_client_t *)cfg;
    int rc = rs_client_open(&c, cfg);
    const char *msg = rs_client_lasterror(NULL);
    cr_expect_eq(rc, EINVAL, "%s: open = %d (%s)", what, rc, msg);
    cr_expect_null(c, "%s: *out not NULL after failure", what);
    if (want)
        cr_expect(strstr(msg, want) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, want);
    if (rc == 0 && c && c != (const rs_client_t *)cfg)
        rs_client_close(c);
}

Test(client, bad_config_is_einval)
{
    /* a live server, so that an unchecked setting would let open succeed */
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t base = cfg_for(s.url, 1000, 0), cfg;

    static const long bad_leases[] = {-1, 1, 10, 29, 86400001L};
    for (size_t i = 0; i < sizeof bad_leases / sizeof bad_leases[0]; i++) {
        cfg = base;
        cfg.lease_ms = bad_leases[i];
        char what[64];
        snprintf(what, sizeof what, "lease_ms %ld", bad_leases[i]);
        expect_bad_cfg(&cfg, "lease_ms", what);
    }
    cfg = base;
    cfg.timeout_ms = -1;
    expect_bad_cfg(&cfg, "timeout_ms", "timeout_ms -1");
    cfg = base;
    cfg.replica_timeout_ms = -5;
    expect_bad_cfg(&cfg, NULL, "replica_timeout_ms -5");
    cfg = base;
    cfg.min_replicas = 1001;
    expect_bad_cfg(&cfg, "min_replicas", "min_replicas 1001");
    cfg = base;
    cfg.min_replicas = -1;
    expect_bad_cfg(&cfg, NULL, "min_replicas -1");
    cfg = base;
    cfg.prefix = "";
    expect_bad_cfg(&cfg, "prefix", "prefix \"\"");
    static const char *const braces[] = {"a{b", "a}b", "{", "}", "{rs}"};
    for (size_t i = 0; i < sizeof braces / sizeof braces[0]; i++) {
        cfg = base;
        cfg.prefix = braces[i];
        char what[64];
        snprintf(what, sizeof what, "prefix \"%s\"", braces[i]);
        expect_bad_cfg(&cfg, "braces", what);
    }

    /* the edges that are fine */
    cfg = base;
    cfg.lease_ms = 30;
    rs_client_t *c = NULL;
    cr_expect_eq(rs_client_open(&c, &cfg), 0, "lease_ms 30: %s", rs_client_lasterror(NULL));
    rs_client_close(c);

    /* a valid prefix is used for the keys */
    cfg = base;
    cfg.prefix = "tapp:v1";
    c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));
    rs_mutex_t *m = mutex_ok(c, "pfx");
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(raw_exists(&s, 0, "tapp:v1:{pfx}:mutex", 19), 1, "no key tapp:v1:{pfx}:mutex");
    cr_expect_eq(raw_exists(&s, 0, "rs:{pfx}:mutex", 14), 0, "default prefix used");
    cr_assert_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* timeout_ms has no documented upper bound: a huge one must either be refused (EINVAL) or
 * work. It must not turn into a deadline in the past (RS_ECONN from a live server). */
Test(client, huge_timeout_is_einval_or_works)
{
    ts_server_t s;
    tu_start_server(&s);
    static const long huge[] = {LONG_MAX, LONG_MAX / 1000, 100000000000000L};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        rs_config_t cfg = cfg_for(s.url, huge[i], 0);
        rs_client_t *c = NULL;
        int rc = rs_client_open(&c, &cfg);
        cr_expect(rc == 0 || rc == EINVAL, "timeout_ms %ld: open = %d (%s): %s", huge[i], rc,
                  rs_strerror(rc), rs_client_lasterror(NULL));
        if (rc == 0) {
            rs_mutex_t *m = mutex_ok(c, "huge");
            cr_expect_eq(rs_mutex_trylock(m), 0, "timeout_ms %ld: trylock: %s", huge[i],
                         rs_client_lasterror(c));
            cr_expect_eq(rs_mutex_unlock(m), 0, "timeout_ms %ld: unlock", huge[i]);
            rs_mutex_destroy(m);
            rs_client_close(c);
        }
    }
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 5. Unreachable
 * ------------------------------------------------------------------------------------- */

Test(client, unreachable_is_econn_within_timeout)
{
    int port = free_port();
    char url[100], hostport[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    snprintf(hostport, sizeof hostport, "127.0.0.1:%d", port);
    rs_config_t cfg = cfg_for(url, 300, 0);
    rs_client_t *c = (rs_client_t *)&cfg;
    long long t0 = tu_mono_ms();
    int rc = rs_client_open(&c, &cfg);
    long long took = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "open = %d: %s", rc, rs_client_lasterror(NULL));
    cr_expect_null(c);
    cr_expect_lt(took, 300 + 2000, "open took %lld ms with timeout_ms 300", took);
    cr_expect(strstr(rs_client_lasterror(NULL), hostport) != NULL, "message lacks %s: %s",
              hostport, rs_client_lasterror(NULL));
}

Test(client, stalled_server_is_econn_within_timeout)
{
    /* a server that accepts connections but never answers (SIGSTOP): the handshake's SELECT
     * must time out */
    ts_server_t s;
    tu_start_server(&s);
    char url[200];
    snprintf(url, sizeof url, "%s/1", s.url);
    ts_server_pause(&s);
    rs_config_t cfg = cfg_for(url, 300, 0);
    rs_client_t *c = (rs_client_t *)&cfg;
    long long t0 = tu_mono_ms();
    int rc = rs_client_open(&c, &cfg);
    long long took = tu_mono_ms() - t0;
    ts_server_resume(&s);
    cr_expect_eq(rc, RS_ECONN, "open = %d: %s", rc, rs_client_lasterror(NULL));
    cr_expect_null(c);
    cr_expect_lt(took, 300 + 2000, "open took %lld ms with timeout_ms 300", took);
    if (rc == 0)
        rs_client_close(c);
    ts_server_stop(&s);
}

