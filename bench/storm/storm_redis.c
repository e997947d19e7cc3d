/*
 * storm_redis.c - the driver's own connections: plain hiredis, the raw round trip that is
 * the unit of latency, INFO commandstats, and the MONITOR reader of the counted phase.
 */

#include <arpa/inet.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "storm_driver.h"

/* ----- plain hiredis ------------------------------------------------------------------- */
redisContext *raw_connect(const ts_server_t *srv)
{
    struct timeval tv = {5, 0};
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

/* "127.0.0.1:PORT" of our end of c, as MONITOR names the client */
void local_addr(redisContext *c, char *out, size_t len)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    out[0] = '\0';
    if (getsockname(c->fd, (struct sockaddr *)&a, &al) == 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
        snprintf(out, len, "%s:%u", ip, ntohs(a.sin_port));
    }
}

char g_one_sha[41];

/* calls and usec of EVALSHA so far (INFO commandstats), or -1 */
int evalsha_stats(redisContext *c, long long *calls, long long *usec)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    int ok = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "cmdstat_evalsha:");
        ok = p && sscanf(p, "cmdstat_evalsha:calls=%lld,usec=%lld", calls, usec) == 2;
        if (!p) {
            *calls = *usec = 0;
            ok = 1;
        }
    }
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

int rtt_once(redisContext *c)
{
    redisReply *r = redisCommand(c, "EVALSHA %s 0", g_one_sha);
    int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (!ok)
        fail("EVALSHA return 1: %s", r ? (r->type == REDIS_REPLY_ERROR ? r->str : "odd reply")
                                       : c->errstr);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Median and p99 of RTT_OPS round trips, in us. */
static int rtt_sample(redisContext *c, double *p50, double *p99, uint64_t *keep)
{
    static uint64_t v[RTT_OPS];
    for (int i = 0; i < RTT_WARMUP; i++)
        if (rtt_once(c))
            return -1;
    for (int i = 0; i < RTT_OPS; i++) {
        uint64_t t = now_ns();
        if (rtt_once(c))
            return -1;
        v[i] = now_ns() - t;
    }
    memcpy(keep, v, sizeof v);
    *p50 = (double)quantile(v, RTT_OPS, 0.5) / 1e3;
    *p99 = (double)quantile(v, RTT_OPS, 0.99) / 1e3;
    return 0;
}

/* The raw round trip just before a row: median and p99 of RTT_OPS calls, and the samples
 * themselves (for the run's unit, the median of every row's samples). */
uint64_t *g_rtt_all;
size_t g_rtt_n;
double g_unit_us; /* the run's raw round trip: the unit of every latency ratio */

int rtt_measure(redisContext *c, double *p50, double *p99)
{
    uint64_t *nv = realloc(g_rtt_all, (g_rtt_n + RTT_OPS) * sizeof *nv);
    if (!nv)
        return -1;
    g_rtt_all = nv;
    if (rtt_sample(c, p50, p99, g_rtt_all + g_rtt_n))
        return -1;
    g_rtt_n += RTT_OPS;
    return 0;
}

/* ----- MONITOR ------------------------------------------------------------------------- */
/* The role of an EVALSHA whose ARGV[role_argv] says it: 1 when that argument is "r" (a
 * reader's), else 0. s: the line after its "]": "EVALSHA" "SHA" "NUMKEYS" keys... argv... */
static int evalsha_role(const char *s, int role_argv)
{
    long numkeys = -1;
    for (long i = 0;; i++) {
        const char *q = strchr(s, '"');
        if (!q)
            return 0;
        const char *e = q + 1;
        while (*e && *e != '"')
            e += e[0] == '\\' && e[1] ? 2 : 1;
        if (!*e)
            return 0;
        if (i == 0 && (e - q - 1 != 7 || strncasecmp(q + 1, "evalsha", 7) != 0))
            return 0;
        if (i == 2)
            numkeys = strtol(q + 1, NULL, 10);
        if (numkeys >= 0 && i == 2 + numkeys + role_argv)
            return e - q - 1 == 1 && q[1] == 'r';
        s = e + 1;
    }
}

/* One MONITOR line: 1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "..." ...
 * Lines of commands run by scripts read [0 lua]. */
static void monitor_line(monitor_t *m, const char *s)
{
    const char *lb = strchr(s, '['), *rb = lb ? strchr(lb, ']') : NULL;
    if (!lb || !rb)
        return;
    const char *sp = memchr(lb, ' ', (size_t)(rb - lb));
    const char *addr = sp ? sp + 1 : lb + 1;
    size_t alen = (size_t)(rb - addr);
    int from_marker = alen == strlen(m->marker) && memcmp(addr, m->marker, alen) == 0;
    if (!m->started) {
        if (from_marker && strstr(rb, "\"rs-storm-start\""))
            m->started = 1;
        return;
    }
    if (from_marker) {
        if (strstr(rb, "\"rs-storm-end\""))
            m->ended = 1;
        return;
    }
    if (alen == 3 && memcmp(addr, "lua", 3) == 0) {
        m->inner++;
        m->inner_by[m->role]++;
        return;
    }
    m->counted++;
    if (m->role_argv)
        m->role = evalsha_role(rb + 1, m->role_argv);
    /* tally by command name */
    const char *q = strchr(rb, '"');
    if (!q)
        return;
    q++;
    size_t nl = strcspn(q, "\"");
    char nm[24];
    if (nl >= sizeof nm)
        nl = sizeof nm - 1;
    for (size_t i = 0; i < nl; i++)
        nm[i] = (char)(q[i] >= 'a' && q[i] <= 'z' ? q[i] - 32 : q[i]);
    nm[nl] = '\0';
    for (int i = 0; i < m->nn; i++)
        if (strcmp(m->name[i], nm) == 0) {
            m->cnt[i]++;
            return;
        }
    if (m->nn < MON_NAMES - 1) {
        snprintf(m->name[m->nn], sizeof m->name[0], "%s", nm);
        m->cnt[m->nn++] = 1;
        return;
    }
    if (m->nn == MON_NAMES - 1)
        snprintf(m->name[m->nn++], sizeof m->name[0], "(other)");
    m->cnt[MON_NAMES - 1]++;
}

void *monitor_main(void *arg)
{
    monitor_t *m = arg;
    while (!m->ended) {
        void *v = NULL;
        if (redisGetReply(m->c, &v) != REDIS_OK || !v) {
            m->err = 1;
            break;
        }
        redisReply *r = v;
        if (r->type == REDIS_REPLY_STATUS)
            monitor_line(m, r->str);
        freeReplyObject(r);
    }
    return NULL;
}

int marker(redisContext *c, const char *word)
{
    redisReply *r = redisCommand(c, "ECHO %s", word);
    int ok = r && r->type == REDIS_REPLY_STRING;
    if (r)
        freeReplyObject(r);
    if (!ok)
        fail("ECHO %s: %s", word, c->errstr);
    return ok ? 0 : -1;
}
