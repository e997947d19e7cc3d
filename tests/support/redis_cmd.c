/*
 * redis_cmd.c - the tests' own plain connections to a test server: one command, one INFO
 * field. The default user, never the ACL-restricted one.
 */
#include "redis_server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

redisContext *ts_connect(const ts_server_t *s)
{
    if (s->port <= 0)
        return NULL;
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout(TS_HOST, s->port, tv);
    if (!c)
        return NULL;
    if (c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    return c;
}

static redisReply *vcmd(const ts_server_t *s, const char *fmt, va_list ap)
{
    redisContext *c = ts_connect(s);
    if (!c)
        return NULL;
    redisReply *r = redisvCommand(c, fmt, ap);
    redisFree(c);
    return r;
}

static int parse_ll(const char *p, long long *out)
{
    if (!p || !*p)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p || *end)
        return -1;
    *out = v;
    return 0;
}

long long ts_cmd_int(const ts_server_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    long long v = -1;
    if (r) {
        if (r->type == REDIS_REPLY_INTEGER)
            v = r->integer;
        else if ((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
                 parse_ll(r->str, &v) != 0)
            v = -1;
        freeReplyObject(r);
    }
    return v;
}

char *ts_cmd_str(const ts_server_t *s, char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = vcmd(s, fmt, ap);
    va_end(ap);
    char *ret = NULL;
    if (r && len > 0) {
        if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
            r->type == REDIS_REPLY_ERROR) {
            snprintf(buf, len, "%s", r->str);
            ret = buf;
        } else if (r->type == REDIS_REPLY_INTEGER) {
            snprintf(buf, len, "%lld", r->integer);
            ret = buf;
        }
    }
    if (r)
        freeReplyObject(r);
    return ret;
}

long long ts_info_ll(const ts_server_t *s, const char *section, const char *key,
                     const char *subfield)
{
    if (!key || !*key)
        return -1;
    redisContext *c = ts_connect(s);
    if (!c)
        return -1;
    redisReply *r = section ? redisCommand(c, "INFO %s", section) : redisCommand(c, "INFO");
    redisFree(c);
    if (!r)
        return -1;
    long long v = -1;
    size_t klen = strlen(key);
    if (r->type == REDIS_REPLY_STRING) {
        const char *line = r->str;
        while (line && *line) {
            const char *eol = strchr(line, '\n');
            size_t llen = eol ? (size_t)(eol - line) : strlen(line);
            if (llen > 0 && line[llen - 1] == '\r')
                llen--;
            if (llen > klen && strncmp(line, key, klen) == 0 && line[klen] == ':') {
                char val[1024];
                size_t vlen = llen - klen - 1;
                if (vlen >= sizeof val)
                    vlen = sizeof val - 1;
                memcpy(val, line + klen + 1, vlen);
                val[vlen] = '\0';
                const char *num = NULL;
                if (!subfield) {
                    num = val;
                } else {
                    size_t slen = strlen(subfield);
                    char *save = NULL;
                    for (char *tok = strtok_r(val, ",", &save); tok;
                         tok = strtok_r(NULL, ",", &save))
                        if (strncmp(tok, subfield, slen) == 0 && tok[slen] == '=') {
                            num = tok + slen + 1;
                            break;
                        }
                }
                if (num) {
                    char *end;
                    errno = 0;
                    long long x = strtoll(num, &end, 10);
                    if (!errno && end != num)
                        v = x;
                }
                break;
            }
            line = eol ? eol + 1 : NULL;
        }
    }
    freeReplyObject(r);
    return v;
}
