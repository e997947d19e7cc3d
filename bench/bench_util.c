/* bench_util.c - redisync-bench's helpers: errors, clock, samples and quantiles, the plain
 * hiredis connection, SCRIPT LOAD, INFO fields and commandstats. */

#include "bench.h"

int g_errors;

void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_errors++;
}

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}


void add(samples_t *s, uint64_t ns)
{
    if (s->n < s->cap)
        s->v[s->n++] = ns;
}

int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Quantile q (0..1) in microseconds; sorts the samples. */
double quantile_us(samples_t *s, double q)
{
    if (!s->n)
        return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_u64);
    size_t i = (size_t)(q * (double)(s->n - 1) + 0.5);
    return (double)s->v[i] / 1e3;
}

int samples_init(samples_t *s, size_t cap)
{
    s->v = malloc(cap * sizeof *s->v);
    s->n = 0;
    s->cap = cap;
    return s->v ? 0 : -1;
}

/* ----- plain hiredis ------------------------------------------------------------------- */
redisContext *raw_connect(const ts_server_t *srv)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv->port, tv);
    if (!c || c->err) {
        fail("connect to 127.0.0.1:%d: %s", srv->port, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    redisSetTimeout(c, tv);
    return c;
}

/* SCRIPT LOAD body; writes the SHA into sha[41]. */
int script_load(redisContext *c, const void *body, size_t len, char *sha)
{
    const char *argv[3] = {"SCRIPT", "LOAD", body};
    size_t lens[3] = {6, 4, len};
    redisReply *r = redisCommandArgv(c, 3, argv, lens);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(sha, r->str, 41);
    else
        fail("SCRIPT LOAD: %s",
             r ? (r->type == REDIS_REPLY_ERROR ? r->str : "odd reply") : c->errstr);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* The value of "field:value" in an INFO reply (copied into out), or NULL. */
const char *info_field(const char *info, const char *field, char *out, size_t len)
{
    size_t fl = strlen(field);
    for (const char *p = info; p && *p;) {
        if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
            const char *v = p + fl + 1;
            size_t n = strcspn(v, "\r\n");
            if (n >= len)
                n = len - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return out;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NULL;
}


int read_cmdstats(redisContext *c, cmdstats_t *st)
{
    memset(st, 0, sizeof *st);
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        fail("INFO commandstats: %s", r ? "odd reply" : c->errstr);
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (const char *p = r->str; p && *p && st->n < MAXCMDS;) {
        if (strncmp(p, "cmdstat_", 8) == 0) {
            const char *colon = strchr(p, ':');
            const char *calls = colon ? strstr(colon, "calls=") : NULL;
            const char *usec = colon ? strstr(colon, "usec=") : NULL;
            if (colon && calls && usec && (size_t)(colon - p - 8) < sizeof st->name[0]) {
                memcpy(st->name[st->n], p + 8, (size_t)(colon - p - 8));
                st->name[st->n][colon - p - 8] = '\0';
                st->calls[st->n] = atoll(calls + 6);
                st->usec[st->n] = atoll(usec + 5);
                st->n++;
            }
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    freeReplyObject(r);
    return 0;
}

long long stat_of(const cmdstats_t *st, const char *name, int usec)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->name[i], name) == 0)
            return usec ? st->usec[i] : st->calls[i];
    return 0;
}

/* Whether script s calls Redis command `name` (lowercase): redis.call('NAME' or
 * redis.pcall('NAME' appears in its body. */
int script_calls(const rs_script_t *s, const char *name)
{
    static const char *const forms[] = {"redis.call('", "redis.pcall('"};
    const char *body = (const char *)s->body, *end = body + s->len;
    size_t nl = strlen(name);
    for (int f = 0; f < 2; f++) {
        size_t fl = strlen(forms[f]);
        for (const char *p = body; p + fl + nl < end; p++) {
            if (memcmp(p, forms[f], fl) != 0)
                continue;
            const char *q = p + fl;
            size_t i = 0;
            while (i < nl && (q[i] | 0x20) == name[i])
                i++;
            if (i == nl && q[nl] == '\'')
                return 1;
        }
    }
    return 0;
}
