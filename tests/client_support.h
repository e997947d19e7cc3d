/*
 * client_support.h - helpers shared by the client tests (test_client.c, test_client_api.c,
 * test_client_host.c), moved unchanged from test_client.c. Not every file uses every
 * helper, hence the pragma around them.
 */
#ifndef CLIENT_SUPPORT_H
#define CLIENT_SUPPORT_H

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

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

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

#pragma GCC diagnostic pop

#endif
