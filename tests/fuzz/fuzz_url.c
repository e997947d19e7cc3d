/*
 * fuzz_url.c - libFuzzer target: URL and configuration parsing (make fuzz).
 *
 * Input: a URL (bytes up to the first NUL are the string), or, when the first byte is 0x01,
 * a configuration: 0x01, then lease_ms, timeout_ms, replica_timeout_ms and min_replicas as
 * four little-endian int32, then the prefix up to a '\n', then the URL.
 *
 * 1. rs__url_parse(NULL, url, &ep) directly (rs_client_open would connect for a valid URL).
 *    On success the endpoint must be sane: NUL-terminated fields, a non-empty host and a port
 *    in 1..65535 or an absolute socket path, db in 0..1000000. On failure: EINVAL only.
 * 2. The promise that messages never repeat the password: the input is also parsed behind
 *    "redis://user:CANARY@" and "redis://:CANARY@", as the part after "redis://" followed by
 *    ":CANARY@localhost", and as the scheme of "://u:CANARY@localhost"; no failure message
 *    may contain the canary. (A unix:// URL has no password: its junk may be echoed.)
 *    The TLS options (rediss://, tls=, tls_ca=, ...) must be consistent: see check_endpoint.
 * 3. When the URL is invalid, rs_client_open with the fuzzed configuration: it checks the
 *    configuration and allocates the client before it parses the URL, so it must fail with
 *    EINVAL, leave *out NULL and free everything (LeakSanitizer) without connecting anywhere.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define CANARY "Zq9xW7pKcanary"

static void fail(const char *what, const char *url)
{
    fprintf(stderr, "fuzz_url: %s\n  url: \"%s\"\n  message: \"%s\"\n", what, url,
            rs_client_lasterror(NULL));
    abort();
}

static int terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

static void check_endpoint(const rs_endpoint_t *ep, const char *url)
{
    if (!terminated(ep->host, sizeof ep->host) || !terminated(ep->path, sizeof ep->path) ||
        !terminated(ep->user, sizeof ep->user) || !terminated(ep->pass, sizeof ep->pass))
        fail("an endpoint field is not NUL-terminated", url);
    if (ep->mode != RS_MODE_SINGLE) {
        /* sentinel and cluster URLs name their servers as seed nodes */
        if (ep->nseeds < 1 || ep->nseeds > RS_SEEDS_MAX)
            fail("a sentinel or cluster URL without seed nodes accepted", url);
        for (int i = 0; i < ep->nseeds; i++) {
            if (!terminated(ep->seeds[i].host, sizeof ep->seeds[i].host) || !ep->seeds[i].host[0])
                fail("empty seed host accepted", url);
            if (ep->seeds[i].port < 1 || ep->seeds[i].port > 65535)
                fail("seed port out of range accepted", url);
        }
        if (ep->mode == RS_MODE_REDLOCK && ep->nseeds < 3)
            fail("a redlock URL with fewer than 3 masters accepted", url);
        if (ep->mode == RS_MODE_SENTINEL &&
            (!terminated(ep->master, sizeof ep->master) || !ep->master[0]))
            fail("sentinel URL without a master name accepted", url);
    } else if (ep->unix_socket) {
        if (ep->path[0] != '/')
            fail("unix socket path is not absolute", url);
    } else {
        if (!ep->host[0])
            fail("empty host accepted", url);
        if (ep->port < 1 || ep->port > 65535)
            fail("port out of range accepted", url);
    }
    if (ep->db < 0 || ep->db > 1000000)
        fail("db out of range accepted", url);
    if (!ep->has_pass && (ep->pass[0] || ep->user[0]))
        fail("credentials without has_pass", url);
    /* TLS options: terminated, never on a unix socket, never without tls, a certificate
     * only with its key */
    if (!terminated(ep->tls_ca, sizeof ep->tls_ca) ||
        !terminated(ep->tls_cert, sizeof ep->tls_cert) ||
        !terminated(ep->tls_key, sizeof ep->tls_key) ||
        !terminated(ep->tls_servername, sizeof ep->tls_servername))
        fail("a TLS field is not NUL-terminated", url);
    if (ep->tls != 0 && ep->tls != 1)
        fail("tls is neither 0 nor 1", url);
    if (ep->tls && ep->unix_socket)
        fail("unix:// with tls accepted", url);
    if (!ep->tls && (ep->tls_ca[0] || ep->tls_cert[0] || ep->tls_key[0] ||
                     ep->tls_servername[0] || !ep->tls_verify))
        fail("a tls_ option accepted without tls", url);
    if (!ep->tls_cert[0] != !ep->tls_key[0])
        fail("a client certificate without its key (or a key without it) accepted", url);
    if (strncmp(url, "rediss://", 9) == 0 && !ep->tls)
        fail("rediss:// without tls", url);
}

static int parse(const char *url, rs_endpoint_t *ep)
{
    int rc = rs__url_parse(NULL, url, ep);
    if (rc != 0 && rc != EINVAL)
        fail("error other than EINVAL", url);
    if (rc == 0)
        check_endpoint(ep, url);
    return rc;
}

/* Parses prefix + input + suffix; a failure's message must not contain the canary. */
static void canary(const char *prefix, const char *input, const char *suffix)
{
    size_t n = strlen(prefix) + strlen(input) + strlen(suffix) + 1;
    char *url = malloc(n);
    if (!url)
        return;
    snprintf(url, n, "%s%s%s", prefix, input, suffix);
    rs_endpoint_t ep;
    if (parse(url, &ep) != 0 && strstr(rs_client_lasterror(NULL), CANARY))
        fail("the password is repeated in the message", url);
    free(url);
}

static int32_t le32(const uint8_t *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    rs_config_t cfg;
    rs_config_init(&cfg);
    int with_cfg = size >= 17 && data[0] == 0x01;
    char *prefix = NULL;
    if (with_cfg) {
        cfg.lease_ms = le32(data + 1);
        cfg.timeout_ms = le32(data + 5);
        cfg.replica_timeout_ms = le32(data + 9);
        cfg.min_replicas = le32(data + 13);
        data += 17, size -= 17;
        const uint8_t *nl = memchr(data, '\n', size);
        if (nl) {
            size_t pl = (size_t)(nl - data);
            prefix = malloc(pl + 1);
            if (!prefix)
                return 0;
            memcpy(prefix, data, pl);
            prefix[pl] = '\0';
            data = nl + 1;
            size -= pl + 1;
        }
    }
    char *url = malloc(size + 1);
    if (!url) {
        free(prefix);
        return 0;
    }
    memcpy(url, data, size);
    url[size] = '\0';

    rs_endpoint_t ep;
    int rc = parse(url, &ep);

    if (!strstr(url, CANARY)) {
        canary("redis://user:" CANARY "@", url, "");
        canary("redis://:" CANARY "@", url, "");
        canary("redis://", url, ":" CANARY "@localhost");
        if (!strstr(url, "://")) /* the input as the scheme (echoed by the message) */
            canary(url, "://u:" CANARY "@localhost", "");
    }

    if (rc != 0) {
        cfg.url = url;
        cfg.prefix = prefix;
        rs_client_t *c = (rs_client_t *)&c;
        rc = rs_client_open(&c, &cfg);
        if (rc != EINVAL)
            fail("rs_client_open with a bad URL did not say EINVAL", url);
        if (c != NULL)
            fail("a failed rs_client_open left *out set", url);
    }
    free(url);
    free(prefix);
    return 0;
}
