/*
 * url.c - parses the client URL into an rs_endpoint_t.
 *
 *   redis://[[user]:password@]host[:port][/db]     host may be [v6-literal]
 *   rediss://...                                   redis:// over TLS (= redis://...?tls=1)
 *   unix:///path/to/socket[?db=N]
 *   redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER[?db=N]
 *                                                  (sentinel port 26379 by default)
 *   redis-cluster://[[user]:password@]host[:port][,host[:port]...]   (database 0 only)
 *   redlock://[[user]:password@]host[:port],host[:port],host[:port][,...][/][?db=N]
 *                                                  (3 to RS_SEEDS_MAX distinct masters)
 *
 * Query options, '&'-separated: db=N (not Cluster), and on every TCP scheme the TLS options
 * tls=0|1, tls_ca=PATH, tls_cert=PATH, tls_key=PATH, tls_servername=NAME, tls_verify=0|1
 * (values percent-encoded). unix:// with tls=1, tls=0 with rediss://, a tls_ option without
 * TLS, a certificate without its key and an unknown tls_ option are EINVAL.
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

/* A file path or a name given as a query option's value (percent-decoded, not empty). */
static int option_text(rs_client_t *c, const char *key, const char *v, size_t n, char *dst,
                       size_t cap)
{
    if (n == 0)
        return rs__fail(c, EINVAL, "bad URL: %s needs a value", key);
    if (pct_decode(v, n, dst, cap) != 0)
        return rs__fail(c, EINVAL, "bad URL: malformed or too long %s (at most %zu bytes)", key,
                        cap - 1);
    return 0;
}

/* "0" or "1" */
static int option_flag(rs_client_t *c, const char *key, const char *v, size_t n, int *out)
{
    if (n != 1 || (v[0] != '0' && v[0] != '1'))
        return rs__fail(c, EINVAL, "bad URL: %s must be 0 or 1", key);
    *out = v[0] - '0';
    return 0;
}

/* One "key=value" of the query (n bytes at q). */
static int parse_option(rs_client_t *c, const char *q, size_t n, rs_endpoint_t *ep, int allow_db)
{
    const char *eq = memchr(q, '=', n);
    size_t klen = eq ? (size_t)(eq - q) : n;
    const char *v = eq ? eq + 1 : q + n;
    size_t vlen = eq ? n - klen - 1 : 0;
#define KEY(s) (klen == sizeof s - 1 && memcmp(q, s, klen) == 0)
    if (KEY("db") && allow_db) {
        long db;
        if (parse_uint(v, vlen, 0, 1000000, &db) != 0)
            return rs__fail(c, EINVAL, "bad URL: db must be a number from 0 to 1000000");
        ep->db = (int)db;
        return 0;
    }
    if (KEY("tls")) {
        int on = 0;
        int rc = option_flag(c, "tls", v, vlen, &on);
        if (rc)
            return rc;
        if (!on && ep->tls)
            return rs__fail(c, EINVAL, "bad URL: tls=0 contradicts rediss:// (which is TLS)");
        ep->tls = on;
        return 0;
    }
    if (KEY("tls_verify"))
        return option_flag(c, "tls_verify", v, vlen, &ep->tls_verify);
    if (KEY("tls_ca"))
        return option_text(c, "tls_ca", v, vlen, ep->tls_ca, sizeof ep->tls_ca);
    if (KEY("tls_cert"))
        return option_text(c, "tls_cert", v, vlen, ep->tls_cert, sizeof ep->tls_cert);
    if (KEY("tls_key"))
        return option_text(c, "tls_key", v, vlen, ep->tls_key, sizeof ep->tls_key);
    if (KEY("tls_servername"))
        return option_text(c, "tls_servername", v, vlen, ep->tls_servername,
                           sizeof ep->tls_servername);
#undef KEY
    /* the key is echoed only when it looks like one (never a piece of a password) */
    int plain = klen > 0 && klen <= 32;
    for (size_t i = 0; i < klen && plain; i++)
        plain = isalnum((unsigned char)q[i]) || q[i] == '_';
    if (klen >= 4 && memcmp(q, "tls_", 4) == 0)
        return rs__fail(c, EINVAL, "bad URL: unknown TLS option \"%.*s\" (known: tls, tls_ca, "
                        "tls_cert, tls_key, tls_servername, tls_verify)",
                        plain ? (int)klen : 4, q);
    if (klen == 2 && memcmp(q, "db", 2) == 0)
        return rs__fail(c, EINVAL, "bad URL: Cluster has no database but 0 (no db= option)");
    if (!plain)
        return rs__fail(c, EINVAL, "bad URL: unknown query option");
    return rs__fail(c, EINVAL, "bad URL: unknown query option \"%.*s\"", (int)klen, q);
}

/* The query after '?': options separated by '&' (db=N where allowed, the tls options). */
static int parse_query(rs_client_t *c, const char *q, rs_endpoint_t *ep, int allow_db)
{
    for (;;) {
        size_t n = strcspn(q, "&");
        if (n == 0)
            return rs__fail(c, EINVAL, "bad URL: empty query option");
        int rc = parse_option(c, q, n, ep, allow_db);
        if (rc)
            return rc;
        if (q[n] == '\0')
            return 0;
        q += n + 1;
    }
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
        return parse_query(c, q + 1, ep, 1);
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
        return parse_query(c, end + 1, ep, 1);
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
    if (*end == '?')
        return parse_query(c, end + 1, ep, 0);
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
        return parse_query(c, end + 1, ep, 1);
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
        return parse_query(c, end + 1, ep, 1);
    if (*end != '\0')
        return rs__fail(c, EINVAL, "bad URL: unexpected \"%s\" at the end (redlock:// takes "
                        "only ?db=N after the masters)", end);
    return 0;
}

/* What the query's TLS options must agree on, whatever the scheme. */
static int check_tls(rs_client_t *c, rs_endpoint_t *ep)
{
    int any = ep->tls_ca[0] || ep->tls_cert[0] || ep->tls_key[0] || ep->tls_servername[0] ||
              !ep->tls_verify;
    if (ep->tls && ep->unix_socket)
        return rs__fail(c, EINVAL, "bad URL: unix:// does not take tls=1 (TLS is for TCP "
                                   "connections)");
    if (any && !ep->tls)
        return rs__fail(c, EINVAL, "bad URL: tls_ options need rediss:// or tls=1");
    if (!ep->tls_cert[0] != !ep->tls_key[0])
        return rs__fail(c, EINVAL, "bad URL: %s (a client certificate needs its key, and a "
                        "key its certificate)", ep->tls_cert[0] ? "tls_cert without tls_key"
                                                                : "tls_key without tls_cert");
    return 0;
}

static int parse_scheme(rs_client_t *c, const char *url, rs_endpoint_t *ep);

/* Where the query of url begins: the first '?' followed by an option the parser knows (db=,
 * tls=, tls_...), so that a '/', '@' or '?' inside an option's value (a file path) is never
 * taken for part of the address; NULL if none. (A password containing "?tls" or "?db=" must
 * be percent-encoded.) */
static const char *query_start(const char *url)
{
    for (const char *p = strchr(url, '?'); p; p = strchr(p + 1, '?'))
        if (strncmp(p + 1, "db=", 3) == 0 || strncmp(p + 1, "tls=", 4) == 0 ||
            strncmp(p + 1, "tls_", 4) == 0)
            return p;
    return NULL;
}

int rs__url_parse(rs_client_t *c, const char *url, rs_endpoint_t *ep)
{
    memset(ep, 0, sizeof *ep);
    ep->tls_verify = 1;
    int rc;
    const char *q = url ? query_start(url) : NULL;
    if (q) {
        /* the address part alone, then the query */
        char *head = strndup(url, (size_t)(q - url));
        if (!head)
            return rs__fail(c, ENOMEM, "out of memory");
        rc = parse_scheme(c, head, ep);
        free(head);
        if (rc == 0)
            rc = parse_query(c, q + 1, ep, ep->mode != RS_MODE_CLUSTER);
    } else {
        rc = parse_scheme(c, url, ep);
    }
    if (rc == 0)
        rc = check_tls(c, ep);
    if (rc) {
        int keep = errno;
        memset(ep, 0, sizeof *ep); /* no password left behind */
        errno = keep;
    }
    return rc;
}

static int parse_scheme(rs_client_t *c, const char *url, rs_endpoint_t *ep)
{
    if (!url || !*url)
        return rs__fail(c, EINVAL, "bad URL: empty");
    const char *sep = strstr(url, "://");
    if (!sep)
        return rs__fail(c, EINVAL, "bad URL: no scheme (expected redis://, rediss:// or unix://)");
    size_t slen = (size_t)(sep - url);
    const char *rest = sep + 3;
    if (slen == 5 && strncmp(url, "redis", 5) == 0)
        return parse_tcp(c, rest, ep);
    if (slen == 6 && strncmp(url, "rediss", 6) == 0) {
        ep->tls = 1;
        return parse_tcp(c, rest, ep);
    }
    if (slen == 4 && strncmp(url, "unix", 4) == 0)
        return parse_unix(c, rest, ep);
    if (slen == 14 && strncmp(url, "redis-sentinel", 14) == 0)
        return parse_sentinel(c, rest, ep);
    if (slen == 13 && strncmp(url, "redis-cluster", 13) == 0)
        return parse_cluster(c, rest, ep);
    if (slen == 7 && strncmp(url, "redlock", 7) == 0)
        return parse_redlock(c, rest, ep);
    return rs__fail(c, EINVAL, "bad URL: unknown scheme \"%.*s\" (expected redis://, rediss:// or unix://)",
                    (int)(slen > 32 ? 32 : slen), url);
}
