/*
 * url.c - parses the client URL into an rs_endpoint_t.
 *
 *   redis://[[user]:password@]host[:port][/db]     host may be [v6-literal]
 *   unix:///path/to/socket[?db=N]
 *   redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[?db=N]
 *                                                  (sentinel port 26379 by default)
 *   redis-cluster://[[user]:password@]host[:port][,host[:port]...]   (database 0 only)
 *   redlock://[[user]:password@]host[:port],host[:port],host[:port][,...][/][?db=N]
 *                                                  (3 to RS_SEEDS_MAX distinct masters)
 *
 * User and password may be percent-encoded. Messages name the faulty part but never repeat
 * the password. In redis-sentinel URLs the credentials are for the data nodes (the master);
 * the sentinels are asked without them. In redlock URLs credentials and db apply to every
 * master. Redlock needs at least three masters: with one or two, a quorum (N/2+1) is every
 * master, so losing one stops all work and the mode buys nothing over redis:// (see
 * docs/deployments.md); the same master listed twice would count twice towards a quorum.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = tolower(ch);
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

/* Copies s[0..n) into dst (size cap) decoding %XX. -1 on bad escape, NUL byte or overflow. */
static int pct_decode(const char *s, size_t n, char *dst, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            ch = hi * 16 + lo;
            if (ch == 0)
                return -1;
            i += 2;
        }
        if (o + 1 >= cap)
            return -1;
        dst[o++] = (char)ch;
    }
    dst[o] = '\0';
    return 0;
}

/* Parses an unsigned decimal number in s[0..n) into *out within [lo, hi]. */
static int parse_uint(const char *s, size_t n, long lo, long hi, long *out)
{
    if (n == 0 || n > 9)
        return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_db_query(rs_client_t *c, const char *q, rs_endpoint_t *ep)
{
    /* only "db=N" is understood for now */
    if (strncmp(q, "db=", 3) != 0)
        return rs__fail(c, EINVAL, "bad URL: unknown query option in \"?%s\"", q);
    long db;
    if (parse_uint(q + 3, strlen(q + 3), 0, 1000000, &db) != 0)
        return rs__fail(c, EINVAL, "bad URL: db must be a number, got \"%s\"", q + 3);
    ep->db = (int)db;
    return 0;
}

static int parse_unix(rs_client_t *c, const char *rest, rs_endpoint_t *ep)
{
    /* rest follows "unix://": an absolute path, optionally "?db=N" */
    if (rest[0] != '/')
        return rs__fail(c, EINVAL, "bad URL: unix:// needs an absolute path (unix:///path)");
    const char *q = strchr(rest, '?');
    size_t plen = q ? (size_t)(q - rest) : strlen(rest);
    if (plen >= sizeof ep->path)
        return rs__fail(c, EINVAL, "bad URL: unix socket path longer than %zu bytes",
                        sizeof ep->path - 1);
    memcpy(ep->path, rest, plen);
    ep->path[plen] = '\0';
    ep->unix_socket = 1;
    if (q)
        return parse_db_query(c, q + 1, ep);
    return 0;
}

/* Credentials "[user]:password" in s[0..n) into ep. */
static int parse_creds(rs_client_t *c, const char *s, size_t n, rs_endpoint_t *ep)
{
    const char *colon = memchr(s, ':', n);
    if (!colon)
        return rs__fail(c, EINVAL,
                        "bad URL: credentials must be written user:password@ or :password@");
    if (pct_decode(s, (size_t)(colon - s), ep->user, sizeof ep->user) != 0)
        return rs__fail(c, EINVAL, "bad URL: malformed or too long user name");
    if (pct_decode(colon + 1, (size_t)(s + n - colon - 1), ep->pass, sizeof ep->pass) != 0)
        return rs__fail(c, EINVAL, "bad URL: malformed or too long password");
    ep->has_pass = 1;
    return 0;
}

/* "host[:port]" or "[v6]:port" in p[0..end) into host (cap bytes) and *port (defport when
 * absent). */
static int parse_hostport(rs_client_t *c, const char *hostpart, const char *end, char *host,
                          size_t cap, int *port, int defport)
{
    const char *hend, *portp = NULL;
    if (hostpart[0] == '[') {
        const char *rb = memchr(hostpart, ']', (size_t)(end - hostpart));
        if (!rb)
            return rs__fail(c, EINVAL, "bad URL: unterminated [ in host");
        if ((size_t)(rb - hostpart - 1) >= cap || rb == hostpart + 1)
            return rs__fail(c, EINVAL, "bad URL: bad IPv6 host");
        memcpy(host, hostpart + 1, (size_t)(rb - hostpart - 1));
        host[rb - hostpart - 1] = '\0';
        hend = rb + 1;
        if (hend < end && *hend == ':')
            portp = hend + 1;
        else if (hend != end)
            return rs__fail(c, EINVAL, "bad URL: junk after ] in host");
    } else {
        const char *colon = memchr(hostpart, ':', (size_t)(end - hostpart));
        hend = colon ? colon : end;
        if (hend == hostpart)
            return rs__fail(c, EINVAL, "bad URL: host is missing");
        if ((size_t)(hend - hostpart) >= cap)
            return rs__fail(c, EINVAL, "bad URL: host name too long");
        for (const char *p = hostpart; p < hend; p++)
            if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' && *p != '_')
                return rs__fail(c, EINVAL, "bad URL: invalid character '%c' in host", *p);
        memcpy(host, hostpart, (size_t)(hend - hostpart));
        host[hend - hostpart] = '\0';
        if (colon)
            portp = colon + 1;
    }
    *port = defport;
    if (portp) {
        long v;
        if (parse_uint(portp, (size_t)(end - portp), 1, 65535, &v) != 0)
            /* the text is not echoed: in "redis://user:secret" (the @host forgotten) the
             * "port" is a password */
            return rs__fail(c, EINVAL, "bad URL: port must be a number from 1 to 65535");
        *port = (int)v;
    }
    return 0;
}

/* "[[user]:password@]HOSTS...": the credentials into ep, *hosts at what follows the last
 * '@' before lim (a password may contain '@'; lim NULL: the end of rest). */
static int parse_userinfo(rs_client_t *c, const char *rest, const char *lim, rs_endpoint_t *ep,
                          const char **hosts)
{
    const char *at = NULL;
    if (!lim)
        lim = rest + strlen(rest);
    for (const char *p = rest; p < lim; p++)
        if (*p == '@')
            at = p;
    *hosts = rest;
    if (!at)
        return 0;
    *hosts = at + 1;
    return parse_creds(c, rest, (size_t)(at - rest), ep);
}

static int parse_tcp(rs_client_t *c, const char *rest, rs_endpoint_t *ep)
{
    /* [[user]:password@]host[:port][/db] */
    const char *hostpart;
    int rc = parse_userinfo(c, rest, NULL, ep, &hostpart);
    if (rc)
        return rc;
    const char *end = hostpart + strcspn(hostpart, "/?#");
    rc = parse_hostport(c, hostpart, end, ep->host, sizeof ep->host, &ep->port, 6379);
    if (rc)
        return rc;
    if (*end == '/') {
        const char *dbs = end + 1;
        size_t n = strcspn(dbs, "?#");
        if (n > 0) {
            long db;
            if (parse_uint(dbs, n, 0, 1000000, &db) != 0)
                return rs__fail(c, EINVAL, "bad URL: database must be a number, got \"%.*s\"",
                                (int)n, dbs);
            ep->db = (int)db;
        }
        end = dbs + n;
    }
    if (*end == '?')
        return parse_db_query(c, end + 1, ep);
    if (*end != '\0')
        return rs__fail(c, EINVAL, "bad URL: unexpected \"%s\" at the end", end);
    return 0;
}

/* "host[:port],host[:port]..." in hosts[0..end) into ep->seeds. */
static int parse_seeds(rs_client_t *c, const char *hosts, const char *end, rs_endpoint_t *ep,
                       const char *what, int defport)
{
    while (hosts < end) {
        const char *comma = memchr(hosts, ',', (size_t)(end - hosts));
        const char *e = comma ? comma : end;
        if (ep->nseeds == RS_SEEDS_MAX)
            return rs__fail(c, EINVAL, "bad URL: more than %d %s addresses", RS_SEEDS_MAX, what);
        rs_node_t *n = &ep->seeds[ep->nseeds];
        int rc = parse_hostport(c, hosts, e, n->host, sizeof n->host, &n->port, defport);
        if (rc)
            return rc;
        ep->nseeds++;
        hosts = comma ? comma + 1 : end;
        if (comma && hosts == end)
            return rs__fail(c, EINVAL, "bad URL: empty %s address after ','", what);
    }
    return 0;
}

/* "[[user]:password@]host[:port],...": credentials and seeds into ep, *endp after the list;
 * none: the complaint when the list is empty. */
static int parse_node_list(rs_client_t *c, const char *rest, rs_endpoint_t *ep, const char *what,
                           int port, const char *none, const char **endp)
{
    const char *hosts;
    int rc = parse_userinfo(c, rest, NULL, ep, &hosts);
    if (rc)
        return rc;
    const char *end = hosts + strcspn(hosts, "/?#");
    if (hosts == end)
        return rs__fail(c, EINVAL, "bad URL: %s", none);
    *endp = end;
    return parse_seeds(c, hosts, end, ep, what, port);
}

static int parse_cluster(rs_client_t *c, const char *rest, rs_endpoint_t *ep)
{
    /* [[user]:password@]host:port[,host:port...][/] : Cluster has only database 0 */
    ep->mode = RS_MODE_CLUSTER;
    const char *end;
    int rc = parse_node_list(c, rest, ep, "cluster node", 6379,
                             "redis-cluster:// needs at least one node address", &end);
    if (rc)
        return rc;
    if (*end == '/')
        end++;
    if (*end != '\0')
        return rs__fail(c, EINVAL, "bad URL: unexpected \"%s\" at the end (Cluster has no "
                        "database but 0)", end);
    return 0;
}

static int parse_sentinel(rs_client_t *c, const char *rest, rs_endpoint_t *ep)
{
    /* [[user]:password@]host:port[,host:port...]/MASTER[?db=N]; the master's name is what
     * follows the last '/', the credentials end at the last '@' before it */
    ep->mode = RS_MODE_SENTINEL;
    const char *slash = strrchr(rest, '/');
    if (!slash)
        return rs__fail(c, EINVAL, "bad URL: redis-sentinel:// needs the master's name "
                                   "(redis-sentinel://host:port/MASTER)");
    const char *hosts;
    int rc = parse_userinfo(c, rest, slash, ep, &hosts);
    if (rc)
        return rc;
    if (hosts == slash)
        return rs__fail(c, EINVAL, "bad URL: no sentinel address before the master's name");
    rc = parse_seeds(c, hosts, slash, ep, "sentinel", 26379);
    if (rc)
        return rc;
    const char *name = slash + 1;
    size_t n = strcspn(name, "?#");
    if (n == 0)
        return rs__fail(c, EINVAL, "bad URL: the master's name is empty");
    if (pct_decode(name, n, ep->master, sizeof ep->master) != 0)
        return rs__fail(c, EINVAL, "bad URL: malformed or too long master name");
    const char *end = name + n;
    if (*end == '?')
        return parse_db_query(c, end + 1, ep);
    if (*end != '\0')
        return rs__fail(c, EINVAL, "bad URL: unexpected \"%s\" at the end", end);
    return 0;
}

static int parse_redlock(rs_client_t *c, const char *rest, rs_endpoint_t *ep)
{
    /* [[user]:password@]host[:port],host[:port],host[:port][,...][/][?db=N] */
    ep->mode = RS_MODE_REDLOCK;
    const char *end;
    int rc = parse_node_list(c, rest, ep, "redlock master", 6379,
                             "redlock:// needs the addresses of its masters "
                             "(redlock://host:port,host:port,host:port)", &end);
    if (rc)
        return rc;
    if (ep->nseeds < 3)
        return rs__fail(c, EINVAL, "bad URL: redlock:// needs at least 3 masters, got %d (with "
                        "fewer, one master down stops every lock: use redis:// instead)",
                        ep->nseeds);
    for (int i = 0; i < ep->nseeds; i++)
        for (int j = 0; j < i; j++)
            if (ep->seeds[i].port == ep->seeds[j].port &&
                strcasecmp(ep->seeds[i].host, ep->seeds[j].host) == 0)
                return rs__fail(c, EINVAL, "bad URL: redlock master %s:%d is listed twice (it "
                                "would count twice towards the quorum)", ep->seeds[i].host,
                                ep->seeds[i].port);
    if (*end == '/')
        end++;
    if (*end == '?')
        return parse_db_query(c, end + 1, ep);
    if (*end != '\0')
        return rs__fail(c, EINVAL, "bad URL: unexpected \"%s\" at the end (redlock:// takes "
                        "only ?db=N after the masters)", end);
    return 0;
}

int rs__url_parse(rs_client_t *c, const char *url, rs_endpoint_t *ep)
{
    memset(ep, 0, sizeof *ep);
    if (!url || !*url)
        return rs__fail(c, EINVAL, "bad URL: empty");
    const char *sep = strstr(url, "://");
    if (!sep)
        return rs__fail(c, EINVAL, "bad URL: no scheme (expected redis:// or unix://)");
    size_t slen = (size_t)(sep - url);
    const char *rest = sep + 3;
    if (slen == 5 && strncmp(url, "redis", 5) == 0)
        return parse_tcp(c, rest, ep);
    if (slen == 4 && strncmp(url, "unix", 4) == 0)
        return parse_unix(c, rest, ep);
    if (slen == 14 && strncmp(url, "redis-sentinel", 14) == 0)
        return parse_sentinel(c, rest, ep);
    if (slen == 13 && strncmp(url, "redis-cluster", 13) == 0)
        return parse_cluster(c, rest, ep);
    if (slen == 7 && strncmp(url, "redlock", 7) == 0)
        return parse_redlock(c, rest, ep);
    return rs__fail(c, EINVAL, "bad URL: unknown scheme \"%.*s\" (expected redis:// or unix://)",
                    (int)(slen > 32 ? 32 : slen), url);
}
