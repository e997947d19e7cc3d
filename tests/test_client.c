/*
 * test_client.c - the client: configuration, URLs, credentials, errors and their messages,
 * lifetime (close, fork), input checking on the mutex entry points, and the promises of
 * good behaviour inside a host program (never prints, SIGPIPE, close-on-exec).
 *
 * Every test that talks to Redis starts its own server (tests run in parallel processes).
 * Time bounds are generous (a shared, noisy machine): "within timeout_ms + 2 s".
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"

TestSuite(client, .timeout = 60);

/* ---------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------- */

#define SECRET "s3cr3tPW"

/* A 127.0.0.1 port nothing listens on: bind :0, read the port, close. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* 1 if something accepts TCP connections on 127.0.0.1:port. */
static int something_listens(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

static int raw_ok(const ts_server_t *s, const char *fmt, ...);

/* The helper waits for PING to answer PONG, which a server started with --requirepass never
 * does: start it open, then set the password. */
static void start_server_pw(ts_server_t *s, const char *pw)
{
    tu_start_server(s);
    cr_assert_eq(raw_ok(s, "CONFIG SET requirepass %s", pw), 0, "CONFIG SET requirepass");
}

static rs_config_t cfg_for(const char *url, long timeout_ms, long lease_ms)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.timeout_ms = timeout_ms;
    cfg.lease_ms = lease_ms;
    return cfg;
}

static rs_client_t *open_ok(const char *url, long timeout_ms, long lease_ms)
{
    rs_config_t cfg = cfg_for(url, timeout_ms, lease_ms);
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    cr_assert_eq(rc, 0, "rs_client_open(%s) = %d (%s): %s", url, rc, rs_strerror(rc),
                 rs_client_lasterror(NULL));
    cr_assert_not_null(c);
    return c;
}

static rs_mutex_t *mutex_ok(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init = %d: %s", rc, rs_client_lasterror(c));
    cr_assert_not_null(m);
    return m;
}

/* EXISTS key in database db, by a raw connection. -1 on error. */
static long long raw_exists(const ts_server_t *s, int db, const char *key, size_t klen)
{
    redisContext *rc = ts_connect(s);
    if (!rc)
        return -1;
    long long v = -1;
    redisReply *r = redisCommand(rc, "SELECT %d", db);
    if (r && r->type == REDIS_REPLY_STATUS) {
        freeReplyObject(r);
        r = redisCommand(rc, "EXISTS %b", key, klen);
        if (r && r->type == REDIS_REPLY_INTEGER)
            v = r->integer;
    }
    if (r)
        freeReplyObject(r);
    redisFree(rc);
    return v;
}

/* One command on a raw connection; 0 if the reply is not an error. */
static int raw_ok(const ts_server_t *s, const char *fmt, ...)
{
    redisContext *rc = ts_connect(s);
    if (!rc)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    int ok = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (r)
        freeReplyObject(r);
    redisFree(rc);
    return ok;
}

/* The holder record of a client, rs:{PUBLICID}:client (lib/record.c): no primitive's key. */
static int holder_record(const char *k, size_t len)
{
    return len == 4 + 16 + 8 && memcmp(k, "rs:{", 4) == 0 && memcmp(k + 20, "}:client", 8) == 0;
}

/* All keys of db 0 but skip and the clients' holder records (binary-safe copies). */
#define MAXKEYS 32
typedef struct keylist {
    int n;
    char *k[MAXKEYS];
    size_t len[MAXKEYS];
} keylist_t;

static int list_keys(const ts_server_t *s, const char *skip, keylist_t *out)
{
    memset(out, 0, sizeof *out);
    redisContext *rc = ts_connect(s);
    if (!rc)
        return -1;
    redisReply *r = redisCommand(rc, "KEYS *");
    int ret = -1;
    if (r && r->type == REDIS_REPLY_ARRAY) {
        ret = 0;
        for (size_t i = 0; i < r->elements && out->n < MAXKEYS; i++) {
            redisReply *e = r->element[i];
            if ((skip && e->len == strlen(skip) && memcmp(e->str, skip, e->len) == 0) ||
                holder_record(e->str, e->len))
                continue;
            out->k[out->n] = malloc(e->len + 1);
            memcpy(out->k[out->n], e->str, e->len);
            out->k[out->n][e->len] = '\0';
            out->len[out->n] = e->len;
            out->n++;
        }
    }
    if (r)
        freeReplyObject(r);
    redisFree(rc);
    return ret;
}

static void keylist_free(keylist_t *kl)
{
    for (int i = 0; i < kl->n; i++)
        free(kl->k[i]);
    kl->n = 0;
}

static int keylist_has(const keylist_t *kl, const char *key, size_t klen)
{
    for (int i = 0; i < kl->n; i++)
        if (kl->len[i] == klen && memcmp(kl->k[i], key, klen) == 0)
            return 1;
    return 0;
}

/* Redis Cluster's key -> slot: CRC16-CCITT (XMODEM) of the hash tag, or of the whole key. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

/* Slot of key; *tagged says whether a non-empty hash tag decided it. */
static unsigned key_slot(const char *key, size_t len, int *tagged)
{
    *tagged = 0;
    const char *lb = memchr(key, '{', len);
    if (lb) {
        size_t from = (size_t)(lb - key) + 1;
        const char *rb = memchr(key + from, '}', len - from);
        if (rb && rb > key + from) {
            *tagged = 1;
            return crc16(key + from, (size_t)(rb - key - from)) & 16383;
        }
    }
    return crc16(key, len) & 16383;
}

/* Every key in kl hashes to one slot, through a non-empty tag. */
static void expect_one_slot(const keylist_t *kl, const char *label)
{
    cr_assert_gt(kl->n, 0, "[%s] no keys", label);
    int tagged;
    unsigned slot0 = key_slot(kl->k[0], kl->len[0], &tagged);
    for (int i = 0; i < kl->n; i++) {
        unsigned sl = key_slot(kl->k[i], kl->len[i], &tagged);
        cr_expect(tagged, "[%s] key #%d (%zu bytes) has no non-empty hash tag", label, i,
                  kl->len[i]);
        cr_expect_eq(sl, slot0, "[%s] key #%d is in slot %u, key #0 in slot %u", label, i, sl,
                     slot0);
    }
}

/* "PREFIX:{ESCNAME}:mutex" as keys.c documents it: a name starting with '}' or '\' gets a
 * '\' in front. */
static size_t mutex_key(const char *prefix, const char *name, size_t nlen, char *out, size_t cap)
{
    int esc = nlen > 0 && (name[0] == '}' || name[0] == '\\');
    size_t n = 0, pl = strlen(prefix);
    cr_assert_lt(pl + nlen + 16, cap);
    memcpy(out + n, prefix, pl), n += pl;
    out[n++] = ':';
    out[n++] = '{';
    if (esc)
        out[n++] = '\\';
    memcpy(out + n, name, nlen), n += nlen;
    memcpy(out + n, "}:mutex", 7), n += 7;
    out[n] = '\0';
    return n;
}

struct lock_job {
    rs_mutex_t *m;
    int rc;
    int unlock_rc;
    int unlock_after; /* 1: unlock right after a successful lock */
    long long done_ms;
};

static void *lock_thread(void *p)
{
    struct lock_job *j = p;
    j->rc = rs_mutex_lock(j->m);
    j->done_ms = tu_mono_ms();
    if (j->rc == 0 && j->unlock_after)
        j->unlock_rc = rs_mutex_unlock(j->m);
    return NULL;
}

/* Polls until count_fn reaches want or ms pass; returns the last count. */
static int wait_keys(const ts_server_t *s, int want, long ms)
{
    long long end = tu_mono_ms() + ms;
    int n = -1;
    for (;;) {
        keylist_t kl;
        if (list_keys(s, "canary", &kl) == 0) {
            n = kl.n;
            keylist_free(&kl);
        }
        if (n >= want || tu_mono_ms() >= end)
            return n;
        tu_sleep_ms(10);
    }
}

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

/* ---------------------------------------------------------------------------------------
 * 6. rs_strerror and rs_version
 * ------------------------------------------------------------------------------------- */

Test(client, strerror_and_version)
{
    static const int codes[] = {0,         RS_ELOST, RS_ECONN, RS_ESERVER, RS_EREPL,
                                RS_EFORK,  RS_EQUEUE, EINVAL,  EBUSY,      ETIMEDOUT,
                                EPERM,     EDEADLK,  ENOMEM,   EAGAIN,     ENOENT,
                                ECANCELED};
    size_t n = sizeof codes / sizeof codes[0];
    cr_assert_eq(RS_ELOST, 1001);
    cr_assert_eq(RS_ECONN, 1002);
    cr_assert_eq(RS_ESERVER, 1003);
    cr_assert_eq(RS_EREPL, 1004);
    cr_assert_eq(RS_EFORK, 1005);
    cr_assert_eq(RS_EQUEUE, 1006);
    for (size_t i = 0; i < n; i++) {
        const char *a = rs_strerror(codes[i]);
        cr_assert_not_null(a, "rs_strerror(%d) is NULL", codes[i]);
        cr_expect_neq(a[0], '\0', "rs_strerror(%d) is empty", codes[i]);
        for (size_t j = 0; j < i; j++)
            cr_expect_str_neq(a, rs_strerror(codes[j]), "rs_strerror(%d) == rs_strerror(%d)",
                              codes[i], codes[j]);
    }
    static const int unknown[] = {99999, -1, 1000, 1007, 4096};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *u = rs_strerror(unknown[i]);
        cr_assert_not_null(u, "rs_strerror(%d) is NULL", unknown[i]);
        cr_expect_neq(u[0], '\0', "rs_strerror(%d) is empty", unknown[i]);
        cr_expect_str_neq(u, rs_strerror(0), "rs_strerror(%d) says success", unknown[i]);
    }

    const char *v = rs_version();
    cr_assert_not_null(v);
    cr_expect_str_eq(v, RS_VERSION_STRING);
    char major[16];
    snprintf(major, sizeof major, "%d.", RS_VERSION_MAJOR);
    cr_expect_eq(strncmp(v, major, strlen(major)), 0, "version %s does not start with %s", v,
                 major);
    char full[48];
    snprintf(full, sizeof full, "%d.%d.%d", RS_VERSION_MAJOR, RS_VERSION_MINOR, RS_VERSION_PATCH);
    cr_expect_str_eq(v, full);
}

/* ---------------------------------------------------------------------------------------
 * 7. rs_client_lasterror is per thread
 * ------------------------------------------------------------------------------------- */

struct le_ctx {
    rs_client_t *c;
    pthread_barrier_t b1, b2;
    int rc_a, rc_b;
    char msg_a[600], msg_b[600];
    const char *fresh; /* what a thread that made no call sees */
    int fresh_null;
};

static void *le_thread_a(void *p)
{
    struct le_ctx *x = p;
    rs_mutex_t *m = NULL;
    x->rc_a = rs_mutex_init(&m, x->c, "");
    pthread_barrier_wait(&x->b1); /* B fails now */
    pthread_barrier_wait(&x->b2);
    snprintf(x->msg_a, sizeof x->msg_a, "%s", rs_client_lasterror(x->c));
    return NULL;
}

static void *le_thread_b(void *p)
{
    struct le_ctx *x = p;
    pthread_barrier_wait(&x->b1); /* A has failed */
    char name[RS_NAME_MAX + 2];
    memset(name, 'n', RS_NAME_MAX + 1);
    name[RS_NAME_MAX + 1] = '\0';
    rs_mutex_t *m = NULL;
    x->rc_b = rs_mutex_init(&m, x->c, name);
    pthread_barrier_wait(&x->b2);
    snprintf(x->msg_b, sizeof x->msg_b, "%s", rs_client_lasterror(NULL));
    return NULL;
}

static void *le_thread_fresh(void *p)
{
    struct le_ctx *x = p;
    const char *e = rs_client_lasterror(NULL);
    x->fresh_null = e == NULL;
    x->fresh = e && e[0] == '\0' ? "" : "not empty";
    return NULL;
}

Test(client, lasterror_is_per_thread)
{
    ts_server_t s;
    tu_start_server(&s);
    struct le_ctx x;
    memset(&x, 0, sizeof x);
    x.c = open_ok(s.url, 2000, 0);
    pthread_barrier_init(&x.b1, NULL, 2);
    pthread_barrier_init(&x.b2, NULL, 2);
    /* the main thread's own message, set before and checked after */
    rs_mutex_t *m = NULL;
    cr_assert_eq(rs_mutex_init(&m, x.c, NULL), EINVAL);
    char mine[600];
    snprintf(mine, sizeof mine, "%s", rs_client_lasterror(NULL));

    pthread_t a, b, f;
    pthread_create(&a, NULL, le_thread_a, &x);
    pthread_create(&b, NULL, le_thread_b, &x);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_create(&f, NULL, le_thread_fresh, &x);
    pthread_join(f, NULL);

    cr_expect_eq(x.rc_a, EINVAL);
    cr_expect_eq(x.rc_b, EINVAL);
    cr_expect(strstr(x.msg_a, "empty") != NULL, "thread A sees \"%s\"", x.msg_a);
    cr_expect(strstr(x.msg_b, "longer") != NULL || strstr(x.msg_b, "512") != NULL,
              "thread B sees \"%s\"", x.msg_b);
    cr_expect_str_neq(x.msg_a, x.msg_b);
    cr_expect_str_eq(rs_client_lasterror(NULL), mine, "the main thread's message changed");
    cr_expect_str_eq(rs_client_lasterror(x.c), rs_client_lasterror(NULL));
    cr_expect(strstr(mine, "NULL") != NULL, "main thread sees \"%s\"", mine);
    cr_expect(!x.fresh_null, "lasterror is NULL in a fresh thread");
    cr_expect_str_eq(x.fresh, "", "a fresh thread's lasterror is not \"\"");

    pthread_barrier_destroy(&x.b1);
    pthread_barrier_destroy(&x.b2);
    cr_assert_eq(rs_client_close(x.c), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 8. Bad input on the mutex functions; names of any bytes
 * ------------------------------------------------------------------------------------- */

Test(client, mutex_bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_ok(s.url, 2000, 0);
    rs_mutex_t *m = (rs_mutex_t *)&s;

    cr_expect_eq(rs_mutex_init(NULL, c, "x"), EINVAL);
    cr_expect_eq(rs_mutex_init(&m, NULL, "x"), EINVAL);
    cr_expect_null(m);
    m = (rs_mutex_t *)&s;
    cr_expect_eq(rs_mutex_init(&m, c, NULL), EINVAL);
    cr_expect_null(m);
    m = (rs_mutex_t *)&s;
    cr_expect_eq(rs_mutex_init(&m, c, ""), EINVAL);
    cr_expect_null(m);

    char name[RS_NAME_MAX + 2];
    memset(name, 'z', RS_NAME_MAX + 1);
    name[RS_NAME_MAX + 1] = '\0';
    m = (rs_mutex_t *)&s;
    cr_expect_eq(rs_mutex_init(&m, c, name), EINVAL, "a %d-byte name", RS_NAME_MAX + 1);
    cr_expect_null(m);
    name[RS_NAME_MAX] = '\0';
    m = NULL;
    cr_assert_eq(rs_mutex_init(&m, c, name), 0, "a %d-byte name: %s", RS_NAME_MAX,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0, "%s", rs_client_lasterror(c));

    struct timespec ts = tu_abs_in(1000);
    cr_expect_eq(rs_mutex_lock(NULL), EINVAL);
    cr_expect_eq(rs_mutex_unlock(NULL), EINVAL);
    cr_expect_eq(rs_mutex_trylock(NULL), EINVAL);
    cr_expect_eq(rs_mutex_timedlock(NULL, &ts), EINVAL);
    cr_expect_eq(rs_mutex_timedlock(m, NULL), EINVAL);
    struct timespec bad = ts;
    bad.tv_nsec = -1;
    cr_expect_eq(rs_mutex_timedlock(m, &bad), EINVAL);
    bad.tv_nsec = 1000000000L;
    cr_expect_eq(rs_mutex_timedlock(m, &bad), EINVAL);
    cr_expect(strstr(rs_client_lasterror(c), "tv_nsec") != NULL, "message: %s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_fence(m), 0, "a fence without a hold");
    cr_expect_eq(rs_mutex_fence(NULL), 0);
    cr_expect_eq(rs_mutex_remaining(NULL), 0);
    cr_expect_eq(rs_mutex_destroy(NULL), 0);
    cr_expect_eq(rs_client_close(NULL), 0);
    cr_expect_str_eq(rs_client_id(NULL), "");

    cr_expect_eq(rs_mutex_setlease(NULL, 0), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, -1), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, 10), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, 29), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, 0), 0);
    cr_expect_eq(rs_mutex_setlease(m, 30), 0);
    cr_expect_eq(rs_mutex_setlease(m, 500), 0);
    cr_expect_eq(rs_mutex_setlease(m, 5000), 0);
    /* the handle's lease is used (the client's is 30 s) */
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    long left = rs_mutex_remaining(m);
    cr_expect(left > 0 && left <= 5000, "remaining %ld with a 5000 ms lease", left);
    cr_expect_gt(rs_mutex_fence(m), 0);
    cr_expect_eq(rs_mutex_destroy(m), EBUSY, "destroy while held");
    cr_expect_eq(rs_mutex_unlock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_expect_eq(rs_mutex_destroy(m), 0);

    cr_assert_eq(rs_client_close(c), 0);
    ts_server_stop(&s);
}

struct odd_name {
    const char *label;
    char name[RS_NAME_MAX + 1];
    size_t len;
};

static void odd_names(struct odd_name *out, int *n)
{
    static const char *const plain[][2] = {
        {"quotes", "it's \"quoted\" 'x'"},
        {"lua-injection", "x') redis.call('FLUSHALL') --"},
        {"lua-long-string", "x]] redis.call('FLUSHALL') --[["},
        {"spaces", "with spaces and\ttabs\nand a newline"},
        {"braces", "{a}}b"},
        {"leading-close-brace", "}x"},
        {"escaped-close-brace", "\\}x"},
        {"leading-backslash", "\\x"},
        {"lone-close-brace", "}"},
        {"lone-open-brace", "{"},
        {"empty-tag", "{}"},
        {"format", "%s%n%x%p"},
        {"key-like", "rs:{x}:mutex"},
    };
    int k = 0;
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++, k++) {
        out[k].label = plain[i][0];
        out[k].len = strlen(plain[i][1]);
        memcpy(out[k].name, plain[i][1], out[k].len + 1);
    }
    out[k].label = "bytes-1-255";
    for (int b = 1; b <= 255; b++)
        out[k].name[b - 1] = (char)b;
    out[k].name[255] = '\0';
    out[k].len = 255;
    k++;
    out[k].label = "bytes-255-1";
    for (int b = 255; b >= 1; b--)
        out[k].name[255 - b] = (char)b;
    out[k].name[255] = '\0';
    out[k].len = 255;
    k++;
    out[k].label = "512-close-braces";
    memset(out[k].name, '}', RS_NAME_MAX);
    out[k].name[RS_NAME_MAX] = '\0';
    out[k].len = RS_NAME_MAX;
    k++;
    *n = k;
}

Test(client, mutex_names_of_any_bytes)
{
    ts_server_t s;
    tu_start_server(&s);
    cr_assert_eq(raw_ok(&s, "SET canary 1"), 0);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    static struct odd_name names[24];
    int n;
    odd_names(names, &n);
    char key[RS_NAME_MAX + 64];
    for (int i = 0; i < n; i++) {
        const struct odd_name *on = &names[i];
        rs_mutex_t *ma = mutex_ok(a, on->name), *mb = mutex_ok(b, on->name);
        cr_assert_eq(rs_mutex_lock(ma), 0, "[%s] lock: %s", on->label, rs_client_lasterror(a));
        cr_expect_eq(rs_mutex_trylock(mb), EBUSY, "[%s] another client got it too", on->label);

        keylist_t kl;
        cr_assert_eq(list_keys(&s, "canary", &kl), 0);
        size_t klen = mutex_key("rs", on->name, on->len, key, sizeof key);
        cr_expect(keylist_has(&kl, key, klen), "[%s] no key %s", on->label, key);
        cr_expect_eq(kl.n, 2, "[%s] %d keys, want 2 (lock and fence)", on->label, kl.n);
        expect_one_slot(&kl, on->label);
        keylist_free(&kl);

        cr_expect_eq(rs_mutex_unlock(ma), 0, "[%s] unlock: %s", on->label, rs_client_lasterror(a));
        cr_expect_eq(rs_mutex_trylock(mb), 0, "[%s] trylock after unlock: %s", on->label,
                     rs_client_lasterror(b));
        cr_expect_eq(rs_mutex_unlock(mb), 0, "[%s] second unlock", on->label);
        cr_expect_eq(ts_cmd_int(&s, "EXISTS canary"), 1, "[%s] the canary key is gone", on->label);
        rs_mutex_destroy(ma);
        rs_mutex_destroy(mb);
        cr_assert_eq(raw_ok(&s, "FLUSHDB"), 0);
        cr_assert_eq(raw_ok(&s, "SET canary 1"), 0);
    }

    /* "}x" and "\}x" are two mutexes: both held at once, by different clients */
    rs_mutex_t *m1 = mutex_ok(a, "}x"), *m2 = mutex_ok(b, "\\}x"), *m1b = mutex_ok(b, "}x");
    cr_expect_eq(rs_mutex_lock(m1), 0);
    cr_expect_eq(rs_mutex_trylock(m2), 0, "\\}x is busy while }x is held: %s",
                 rs_client_lasterror(b));
    cr_expect_eq(rs_mutex_trylock(m1b), EBUSY);
    cr_expect_eq(raw_exists(&s, 0, "rs:{\\}x}:mutex", 14), 1);
    cr_expect_eq(raw_exists(&s, 0, "rs:{\\\\}x}:mutex", 15), 1);
    cr_expect_eq(rs_mutex_unlock(m1), 0);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(m1);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(m1b);

    cr_assert_eq(rs_client_close(a), 0);
    cr_assert_eq(rs_client_close(b), 0);
    ts_server_stop(&s);
}

/* With a waiter queued, all four keys of a name (lock, fence, queue, queue info) exist: they
 * must share one slot. */
Test(client, mutex_keys_share_one_slot_with_waiters)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    static struct odd_name names[24];
    int n;
    odd_names(names, &n);
    static const char *const pick[] = {"leading-close-brace", "braces", "lone-close-brace",
                                       "bytes-1-255", "512-close-braces", "lua-injection"};
    for (size_t p = 0; p < sizeof pick / sizeof pick[0]; p++) {
        const struct odd_name *on = NULL;
        for (int i = 0; i < n; i++)
            if (strcmp(names[i].label, pick[p]) == 0)
                on = &names[i];
        cr_assert_not_null(on);
        rs_mutex_t *ma = mutex_ok(a, on->name), *mb = mutex_ok(b, on->name);
        cr_assert_eq(rs_mutex_lock(ma), 0, "[%s] %s", on->label, rs_client_lasterror(a));
        struct lock_job j = {mb, -1, -1, 1, 0};
        pthread_t t;
        pthread_create(&t, NULL, lock_thread, &j);
        int nk = wait_keys(&s, 4, 5000);
        keylist_t kl;
        cr_assert_eq(list_keys(&s, NULL, &kl), 0);
        cr_expect_eq(nk, 4, "[%s] %d keys with a waiter, want 4", on->label, nk);
        expect_one_slot(&kl, on->label);
        keylist_free(&kl);
        cr_expect_eq(rs_mutex_unlock(ma), 0);
        pthread_join(t, NULL);
        cr_expect_eq(j.rc, 0, "[%s] waiter's lock = %d", on->label, j.rc);
        cr_expect_eq(j.unlock_rc, 0, "[%s] waiter's unlock = %d", on->label, j.unlock_rc);
        rs_mutex_destroy(ma);
        rs_mutex_destroy(mb);
        cr_assert_eq(raw_ok(&s, "FLUSHDB"), 0);
    }
    cr_assert_eq(rs_client_close(a), 0);
    cr_assert_eq(rs_client_close(b), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 9. fork
 * ------------------------------------------------------------------------------------- */

Test(client, fork_child_gets_efork)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_ok(s.url, 2000, 0);
    rs_mutex_t *m = mutex_ok(c, "forked"), *other = mutex_ok(c, "other");
    cr_assert_eq(rs_mutex_lock(m), 0); /* the parent holds "forked" across the fork */
    cr_assert_eq(rs_mutex_lock(other), 0);
    cr_assert_eq(rs_mutex_unlock(other), 0);

    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        struct timespec ts = tu_abs_in(200);
        rs_mutex_t *m2 = (rs_mutex_t *)&ts;
        if (rs_mutex_lock(other) != RS_EFORK)
            bad |= 1;
        if (rs_mutex_init(&m2, c, "child") != RS_EFORK || m2 != NULL)
            bad |= 2;
        if (rs_mutex_unlock(m) != RS_EFORK)
            bad |= 4;
        if (rs_mutex_trylock(other) != RS_EFORK)
            bad |= 8;
        if (rs_mutex_timedlock(other, &ts) != RS_EFORK)
            bad |= 16;
        if (strstr(rs_client_lasterror(c), "fork") == NULL)
            bad |= 32;
        if (rs_client_close(c) != 0)
            bad |= 64;
        _exit(bad);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    cr_assert(WIFEXITED(st), "child did not exit normally (status %#x)", st);
    int bad = WEXITSTATUS(st);
    cr_expect_eq(bad & 1, 0, "child: lock != RS_EFORK");
    cr_expect_eq(bad & 2, 0, "child: init != RS_EFORK or handle not NULL");
    cr_expect_eq(bad & 4, 0, "child: unlock of the parent's hold != RS_EFORK");
    cr_expect_eq(bad & 8, 0, "child: trylock != RS_EFORK");
    cr_expect_eq(bad & 16, 0, "child: timedlock != RS_EFORK");
    cr_expect_eq(bad & 32, 0, "child: lasterror does not mention fork");
    cr_expect_eq(bad & 64, 0, "child: rs_client_close != 0");

    /* the child's close released nothing of the parent's: the hold is still there */
    rs_client_t *c2 = open_ok(s.url, 2000, 0);
    rs_mutex_t *m2 = mutex_ok(c2, "forked");
    cr_expect_eq(rs_mutex_trylock(m2), EBUSY, "the parent's hold was released by the child");
    /* and the parent's client still works */
    cr_expect_eq(rs_mutex_unlock(m), 0, "parent unlock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_lock(other), 0, "parent lock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(other), 0);
    cr_expect_eq(rs_mutex_lock(m), 0, "parent lock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m2);
    rs_client_close(c2);
    rs_mutex_destroy(m);
    rs_mutex_destroy(other);
    cr_assert_eq(rs_client_close(c), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 10. Close
 * ------------------------------------------------------------------------------------- */

Test(client, close_cancels_blocked_calls)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    rs_mutex_t *ma = mutex_ok(a, "x"), *mb = mutex_ok(b, "x"), *idle = mutex_ok(b, "idle");
    cr_assert_eq(rs_mutex_lock(ma), 0);

    struct lock_job j = {mb, -1, -1, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, lock_thread, &j);
    cr_assert(tu_wait_zcard(&s, "mutex", "x", 1, 5000), "the waiter never queued");
    tu_sleep_ms(50); /* let it settle into its sleep */

    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_client_close(b), 0);
    long long closed = tu_mono_ms();
    pthread_join(t, NULL);
    cr_expect_eq(j.rc, ECANCELED, "blocked lock returned %d (%s)", j.rc, rs_strerror(j.rc));
    cr_expect_lt(j.done_ms - t0, 2000 + 2000, "the blocked lock took %lld ms to return",
                 j.done_ms - t0);
    cr_expect_lt(closed - t0, 2000 + 2000, "close took %lld ms", closed - t0);

    /* handles of the closed client: calls return ECANCELED, destroy works */
    struct timespec ts = tu_abs_in(100);
    cr_expect_eq(rs_mutex_lock(idle), ECANCELED);
    cr_expect_eq(rs_mutex_trylock(idle), ECANCELED);
    cr_expect_eq(rs_mutex_timedlock(idle, &ts), ECANCELED);
    cr_expect_eq(rs_mutex_unlock(idle), ECANCELED);
    cr_expect_eq(rs_mutex_destroy(idle), 0);
    cr_expect_eq(rs_mutex_destroy(mb), 0);

    /* the closed client left the queue: when A unlocks, nobody dead gets the mutex */
    cr_expect(tu_wait_zcard(&s, "mutex", "x", 0, 3000), "the closed client is still queued");
    cr_expect_eq(rs_mutex_unlock(ma), 0);
    rs_client_t *c = open_ok(s.url, 2000, 0);
    rs_mutex_t *mc = mutex_ok(c, "x");
    cr_expect_eq(rs_mutex_trylock(mc), 0, "after A's unlock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(mc), 0);
    rs_mutex_destroy(mc);
    rs_mutex_destroy(ma);
    rs_client_close(c);
    cr_assert_eq(rs_client_close(a), 0);
    ts_server_stop(&s);
}

struct hold_job {
    rs_mutex_t *m;
    int rc;
};

static void *hold_thread(void *p)
{
    struct hold_job *j = p;
    j->rc = rs_mutex_lock(j->m); /* and the thread ends holding it */
    return NULL;
}

Test(client, close_releases_holds)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    rs_mutex_t *ax = mutex_ok(a, "x"), *ay = mutex_ok(a, "y");
    cr_assert_eq(rs_mutex_lock(ax), 0);
    struct hold_job hj = {ay, -1};
    pthread_t t;
    pthread_create(&t, NULL, hold_thread, &hj);
    pthread_join(t, NULL);
    cr_assert_eq(hj.rc, 0, "%s", rs_client_lasterror(a));

    rs_mutex_t *bx = mutex_ok(b, "x"), *by = mutex_ok(b, "y");
    cr_assert_eq(rs_mutex_trylock(bx), EBUSY);
    cr_assert_eq(rs_mutex_trylock(by), EBUSY);

    cr_expect_eq(rs_client_close(a), 0);
    /* the lease is 30 s: only close can have freed them */
    cr_expect_eq(rs_mutex_trylock(bx), 0, "x still held after its owner's close: %s",
                 rs_client_lasterror(b));
    cr_expect_eq(rs_mutex_trylock(by), 0, "y still held after its owner's close: %s",
                 rs_client_lasterror(b));
    cr_expect_eq(rs_mutex_destroy(ax), 0, "destroy of a holding handle after close");
    cr_expect_eq(rs_mutex_destroy(ay), 0);
    cr_expect_eq(rs_mutex_unlock(bx), 0);
    cr_expect_eq(rs_mutex_unlock(by), 0);
    rs_mutex_destroy(bx);
    rs_mutex_destroy(by);
    cr_assert_eq(rs_client_close(b), 0);
    ts_server_stop(&s);
}

Test(client, client_id)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    const char *ia = rs_client_id(a), *ib = rs_client_id(b);
    cr_assert_not_null(ia);
    cr_expect_eq(strlen(ia), 16, "id \"%s\"", ia);
    cr_expect_eq(strspn(ia, "0123456789abcdefABCDEF"), 16, "id \"%s\" is not hex", ia);
    cr_expect_str_neq(ia, ib, "two clients share an id");
    rs_client_close(a);
    rs_client_close(b);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 11. The library never prints; it logs through the callback
 * ------------------------------------------------------------------------------------- */

Test(client, never_prints)
{
    ts_server_t s;
    start_server_pw(&s, "pw");
    char good[200], wrongpw[200], unreachable[200];
    snprintf(good, sizeof good, "redis://:pw@127.0.0.1:%d", s.port);
    snprintf(wrongpw, sizeof wrongpw, "redis://:nope@127.0.0.1:%d", s.port);
    snprintf(unreachable, sizeof unreachable, "redis://127.0.0.1:%d", free_port());

    char tmpl[] = "/tmp/rs-client-out.XXXXXX";
    int tfd = mkstemp(tmpl);
    cr_assert(tfd >= 0);
    unlink(tmpl);
    fflush(stdout);
    fflush(stderr);
    int saved1 = dup(1), saved2 = dup(2);
    cr_assert(saved1 >= 0 && saved2 >= 0);
    dup2(tfd, 1);
    dup2(tfd, 2);

    /* nothing below may assert: Criterion's own output would land in the file */
    int rc[16], k = 0;
    rs_client_t *c = NULL;
    rs_config_t cfg = cfg_for("http://x", 300, 0);
    rc[k++] = rs_client_open(&c, &cfg);            /* EINVAL */
    cfg = cfg_for(unreachable, 300, 0);
    rc[k++] = rs_client_open(&c, &cfg);            /* RS_ECONN */
    cfg = cfg_for(wrongpw, 300, 0);
    rc[k++] = rs_client_open(&c, &cfg);            /* RS_ESERVER */
    cfg = cfg_for(good, 300, 1000);
    cfg.min_replicas = -1;
    rc[k++] = rs_client_open(&c, &cfg);            /* EINVAL */
    cfg.min_replicas = 0;
    rc[k++] = rs_client_open(&c, &cfg);            /* 0 */
    rs_mutex_t *m = NULL, *bad = NULL;
    if (c) {
        rc[k++] = rs_mutex_init(&bad, c, "");        /* EINVAL */
        rc[k++] = rs_mutex_init(&m, c, "quiet");     /* 0 */
        rc[k++] = rs_mutex_unlock(m);                /* EPERM */
        rc[k++] = rs_mutex_lock(m);                  /* 0 */
        rc[k++] = rs_mutex_lock(m);                  /* EDEADLK */
        ts_server_kill(&s);
        rc[k++] = rs_mutex_unlock(m);                /* RS_ECONN or RS_ELOST */
        rc[k++] = rs_mutex_lock(m);                  /* RS_ECONN */
        tu_sleep_ms(300);
        rs_mutex_destroy(m);
        rc[k++] = rs_client_close(c);                /* 0 */
    }

    fflush(stdout);
    fflush(stderr);
    dup2(saved1, 1);
    dup2(saved2, 2);
    close(saved1);
    close(saved2);
    off_t size = lseek(tfd, 0, SEEK_END);
    char out[512] = "";
    if (size > 0) {
        ssize_t got = pread(tfd, out, sizeof out - 1, 0);
        out[got > 0 ? got : 0] = '\0';
    }
    close(tfd);

    cr_expect_eq(size, 0, "the library wrote %lld bytes to stdout/stderr: %s", (long long)size,
                 out);
    cr_assert_eq(k, 13, "open with the right password failed (%d: %d)", k, rc[4]);
    static const int want[] = {EINVAL, RS_ECONN, RS_ESERVER, EINVAL, 0, EINVAL, 0, EPERM, 0,
                               EDEADLK, -1, RS_ECONN, 0};
    for (int i = 0; i < k; i++) {
        if (want[i] == -1)
            cr_expect(rc[i] == RS_ECONN || rc[i] == RS_ELOST, "step %d: %d", i, rc[i]);
        else
            cr_expect_eq(rc[i], want[i], "step %d: %d, want %d", i, rc[i], want[i]);
    }
    ts_server_stop(&s);
}

struct log_sink {
    pthread_mutex_t mu;
    int count, bad_level, bad_arg, has_secret, empty;
    char last[512];
    void *self;
};

static void log_cb(int level, const char *msg, void *arg)
{
    struct log_sink *ls = arg;
    pthread_mutex_lock(&ls->mu);
    if (ls->self != ls)
        ls->bad_arg++;
    if (level < RS_LOG_DEBUG || level > RS_LOG_ERROR)
        ls->bad_level++;
    if (!msg || !msg[0])
        ls->empty++;
    else {
        if (strstr(msg, SECRET))
            ls->has_secret++;
        snprintf(ls->last, sizeof ls->last, "%s", msg);
    }
    ls->count++;
    pthread_mutex_unlock(&ls->mu);
}

Test(client, log_callback_receives_messages)
{
    ts_server_t s;
    start_server_pw(&s, SECRET);
    static struct log_sink ls;
    memset(&ls, 0, sizeof ls);
    pthread_mutex_init(&ls.mu, NULL);
    ls.self = &ls;
    char url[200];
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", SECRET, s.port);
    rs_config_t cfg = cfg_for(url, 300, 1000);
    cfg.log = log_cb;
    cfg.log_arg = &ls;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));

    rs_mutex_t *m = NULL;
    cr_expect_eq(rs_mutex_init(&m, c, ""), EINVAL);
    cr_assert_eq(rs_mutex_init(&m, c, "logged"), 0);
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_assert_eq(rs_mutex_lock(m), 0);
    ts_server_kill(&s);
    int rc = rs_mutex_unlock(m);
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "unlock with the server gone = %d", rc);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);

    pthread_mutex_lock(&ls.mu);
    cr_expect_gt(ls.count, 0, "no log message for any of the failures");
    cr_expect_eq(ls.bad_arg, 0, "log_arg not passed through");
    cr_expect_eq(ls.bad_level, 0, "log level outside RS_LOG_DEBUG..RS_LOG_ERROR");
    cr_expect_eq(ls.empty, 0, "empty log message");
    cr_expect_eq(ls.has_secret, 0, "a log message contains the password");
    pthread_mutex_unlock(&ls.mu);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 12. SIGPIPE and close-on-exec
 * ------------------------------------------------------------------------------------- */

static void sigpipe_default(void)
{
    signal(SIGPIPE, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* Lock, kill the server (the pooled connection is now dead), unlock. With SIGPIPE at its
 * default disposition a write to the dead socket would kill the process. */
static void sigpipe_case(ts_server_t *s, const char *url)
{
    sigpipe_default();
    rs_client_t *c = open_ok(url, 300, 5000);
    rs_mutex_t *m = mutex_ok(c, "pipe"), *m2 = mutex_ok(c, "pipe2");
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_assert_eq(rs_mutex_lock(m2), 0, "%s", rs_client_lasterror(c));
    ts_server_kill(s);

    long long t0 = tu_mono_ms();
    int rc = rs_mutex_unlock(m);
    long long took = tu_mono_ms() - t0;
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "unlock with the server gone = %d (%s)", rc,
              rs_client_lasterror(c));
    cr_expect_lt(took, 300 + 2000, "unlock took %lld ms", took);
    cr_expect_eq(rs_mutex_unlock(m), EPERM, "the failed unlock left a hold behind");
    t0 = tu_mono_ms();
    rc = rs_mutex_unlock(m2);
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "second unlock = %d", rc);
    rc = rs_mutex_lock(m);
    took = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "lock with the server gone = %d (%s)", rc, rs_client_lasterror(c));
    cr_expect_lt(took, 2 * 300 + 2000, "unlock + lock took %lld ms", took);

    sigset_t pend;
    sigpending(&pend);
    cr_expect(!sigismember(&pend, SIGPIPE), "a SIGPIPE is left pending");

    /* the client recovers once the server is back */
    cr_assert_eq(ts_server_restart(s), 0);
    rc = rs_mutex_lock(m);
    if (rc == RS_ECONN) /* a restart on a loaded machine: one more try */
        rc = rs_mutex_lock(m);
    cr_expect_eq(rc, 0, "lock after the restart = %d (%s)", rc, rs_client_lasterror(c));
    if (rc == 0)
        cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    cr_expect_eq(rs_client_close(c), 0);
}

Test(client, sigpipe_tcp_server_killed)
{
    ts_server_t s;
    tu_start_server(&s);
    sigpipe_case(&s, s.url);
    ts_server_stop(&s);
}

/* On a unix socket a write to a peer that is gone fails with EPIPE at once: this is the
 * case that raises SIGPIPE for sure. */
Test(client, sigpipe_unix_server_killed)
{
    char dir[] = "/tmp/rs-client-pipe.XXXXXX";
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
    sigpipe_case(&s, url);
    ts_server_stop(&s);
    unlink(sock);
    rmdir(dir);
}

/* Socket inodes of TCP connections from this process to 127.0.0.1:port. */
static int tcp_inodes_to(int port, unsigned long *out, int max)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f) && n < max) {
        unsigned rport, lport;
        unsigned long inode;
        if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %*x:%*x %*x:%*x %*x %*u %*u %lu", &lport,
                   &rport, &inode) == 3 &&
            (int)rport == port && inode != 0)
            out[n++] = inode;
    }
    fclose(f);
    return n;
}

Test(client, sockets_are_close_on_exec)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 600), *b = open_ok(s.url, 2000, 600);
    rs_mutex_t *ma = mutex_ok(a, "cloexec"), *mb = mutex_ok(b, "cloexec");
    cr_assert_eq(rs_mutex_lock(ma), 0);
    /* a wait starts b's notifier; a's watchdog renews after 200 ms */
    struct timespec ts = tu_abs_in(400);
    int rc = rs_mutex_timedlock(mb, &ts);
    /* 0 only if a starved watchdog let a's 600 ms lease run out: not this test's concern */
    cr_expect(rc == ETIMEDOUT || rc == 0, "timedlock = %d: %s", rc, rs_client_lasterror(b));
    tu_sleep_ms(100);

    unsigned long inodes[64];
    int ni = tcp_inodes_to(s.port, inodes, 64);
    cr_assert_geq(ni, 0, "cannot read /proc/net/tcp");
    int checked = 0, bad = 0, badfd = -1;
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        char path[64], target[128];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        unsigned long inode;
        if (sscanf(target, "socket:[%lu]", &inode) != 1)
            continue;
        for (int i = 0; i < ni; i++) {
            if (inodes[i] != inode)
                continue;
            checked++;
            int fl = fcntl(fd, F_GETFD);
            if (fl < 0 || !(fl & FD_CLOEXEC))
                bad++, badfd = fd;
        }
    }
    closedir(d);
    cr_expect_geq(checked, 3, "only %d library sockets found (pool, watchdog, notifier)", checked);
    cr_expect_eq(bad, 0, "%d of %d library sockets lack FD_CLOEXEC (e.g. fd %d)", bad, checked,
                 badfd);

    rs_mutex_unlock(ma);
    if (rc == 0)
        rs_mutex_unlock(mb);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(a);
    rs_client_close(b);
    ts_server_stop(&s);
}
