/*
 * transport.c - the bytes on the wire of every connection: a plain socket or a TLS session.
 *
 * hiredis 0.14 stays the protocol layer (its reply reader and command formatter: the
 * context's reader and obuf), but it never reads or writes a socket of the library: every
 * send goes through rs__tp_send and every read through rs__tp_fill, which feeds the context's
 * reader. Nothing above conn.c needs to know which kind a connection is.
 *
 * - Plain: send(MSG_NOSIGNAL) and read() on the blocking socket, whose SO_RCVTIMEO and
 *   SO_SNDTIMEO (redisSetTimeout) bound each call, exactly as before this layer existed.
 * - TLS (OpenSSL 3): rs__tp_tls_start runs the handshake on a connected context (the socket
 *   non-blocking, poll() until the caller's deadline) and hangs an rs_tp_t on the context
 *   (ctx->reader->privdata, which hiredis' default reply functions never read). The socket
 *   stays non-blocking: blocking calls are poll() + SSL_read/SSL_write bounded by the
 *   timeout set with rs__tp_set_timeout. One mutex per connection serialises the SSL calls,
 *   so one thread may send (the notifier's SUBSCRIBE of a latch) while another waits for
 *   replies on the same connection, as they may on a plain socket; nobody holds it while
 *   waiting for data. The SSL object reads and writes through a BIO of our own whose write
 *   is send(MSG_NOSIGNAL): no SIGPIPE, no signal mask.
 * - rs_tls_t is one per client: the SSL_CTX (TLS 1.2 or newer, verification on unless
 *   tls_verify=0, CA, client certificate and key read once), the BIO method and the last
 *   session of each server, offered once on a reconnect (resumption). No OpenSSL global state
 *   is touched (OpenSSL 3 needs no initialisation).
 * - A context with a TLS session must be freed with rs__ctx_free (the session is dropped
 *   without a close_notify: nothing is written, so a fork child may free the parent's).
 *
 * Error text goes into ctx->errstr (and the caller's buffer for the handshake): one line
 * saying what went wrong ("certificate verify failed: ...", "server speaks plain RESP, not
 * TLS"). This file calls nothing above util.c.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "internal.h"

#define RS_TP_READ_CHUNK 16384
#define RS_TLS_SESSIONS 64

struct rs_tls {
    SSL_CTX *ctx;
    BIO_METHOD *bio;
    int verify;
    int has_cert;
    pthread_mutex_t mu; /* sessions */
    struct {
        char key[272];  /* "host:port" */
        SSL_SESSION *s;
    } sess[RS_TLS_SESSIONS];
    int nsess;
};

typedef struct rs_tp {
    SSL *ssl;
    rs_tls_t *tls;
    int fd;
    long timeout_ms;    /* 0: none */
    int eof;            /* the peer closed (read returned 0) */
    int first;          /* the first byte the peer sent, -1 before any */
    int fatal;          /* a TLS protocol error (not the network): never worth a retry */
    int cert_asked;     /* the server asked for a client certificate and got none */
    int reused;         /* the handshake resumed a session */
    pthread_mutex_t mu; /* the SSL calls */
    char key[272];
} rs_tp_t;

static rs_tp_t *tp_of(const redisContext *ctx)
{
    return ctx->reader ? ctx->reader->privdata : NULL;
}

/* ----- the socket BIO ---------------------------------------------------------------- */

static int bio_write(BIO *b, const char *buf, int len)
{
    rs_tp_t *tp = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n;
    do
        n = send(tp->fd, buf, (size_t)len, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_write(b);
    return (int)n;
}

static int bio_read(BIO *b, char *buf, int len)
{
    rs_tp_t *tp = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t n;
    do
        n = recv(tp->fd, buf, (size_t)len, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        BIO_set_retry_read(b);
    if (n == 0)
        tp->eof = 1;
    if (n > 0 && tp->first < 0)
        tp->first = (unsigned char)buf[0];
    return (int)n;
}

static int bio_puts(BIO *b, const char *s)
{
    return bio_write(b, s, (int)strlen(s));
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)num, (void)ptr;
    rs_tp_t *tp = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        return 1;
    case BIO_CTRL_EOF:
        return tp && tp->eof;
    default:
        return 0;
    }
}

static int bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static int bio_destroy(BIO *b)
{
    BIO_set_data(b, NULL);
    return 1;
}

/* ----- the client's TLS context ------------------------------------------------------ */

/* The reason of the newest OpenSSL error on this thread's queue, or dflt. */
static const char *ssl_reason(const char *dflt)
{
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0)
        last = e;
    const char *r = last ? ERR_reason_error_string(last) : NULL;
    return r ? r : dflt;
}

static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0; /* an encrypted key fails to load instead of prompting on a terminal */
}

/* The callback of a new session (a TLS 1.3 ticket arrives after the handshake): a copy is
 * kept as the server's last session (0: the connection keeps s to itself). A copy, and taken
 * out by the connection that resumes it (session_get), so that no SSL_SESSION is ever shared
 * by two connections: one connection's next ticket copies its session's certificate stack
 * while another's frees it (check-tsan's TLS pass reported it when the store kept s itself,
 * which the connection that made it still used), and TLS 1.3 wants tickets used once (RFC
 * 8446, C.4). */
static int new_session(SSL *ssl, SSL_SESSION *s0)
{
    rs_tp_t *tp = SSL_get_app_data(ssl);
    if (!tp || !tp->key[0] || !SSL_SESSION_is_resumable(s0))
        return 0;
    SSL_SESSION *s = SSL_SESSION_dup(s0);
    if (!s)
        return 0;
    rs_tls_t *t = tp->tls;
    pthread_mutex_lock(&t->mu);
    int i = 0;
    while (i < t->nsess && strcmp(t->sess[i].key, tp->key) != 0)
        i++;
    if (i == t->nsess) {
        if (t->nsess < RS_TLS_SESSIONS)
            t->nsess++;
        else
            i = (int)(rs__now_ns() % RS_TLS_SESSIONS); /* full: replace one */
        snprintf(t->sess[i].key, sizeof t->sess[i].key, "%s", tp->key);
    }
    SSL_SESSION *old = t->sess[i].s;
    t->sess[i].s = s;
    pthread_mutex_unlock(&t->mu);
    if (old)
        SSL_SESSION_free(old);
    return 0;
}

/* The server's last session, taken out of the store: the caller owns it (see new_session). */
static SSL_SESSION *session_get(rs_tls_t *t, const char *key)
{
    SSL_SESSION *s = NULL;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->nsess; i++)
        if (strcmp(t->sess[i].key, key) == 0) {
            s = t->sess[i].s;
            t->sess[i].s = NULL;
            break;
        }
    pthread_mutex_unlock(&t->mu);
    return s;
}

/* "tls_ca /x: cannot read: No such file or directory" when path cannot be opened. */
static int check_readable(const char *what, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s %s: cannot read: %s", what, path, strerror(errno));
        return -1;
    }
    fclose(f);
    return 0;
}

/* Called when the server asks for a client certificate and none is configured (OpenSSL
 * calls it only then): noted, so that the failure that follows can say why; none is sent. */
static int cert_asked(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
    (void)x509;
    (void)pkey;
    rs_tp_t *tp = SSL_get_app_data(ssl);
    if (tp)
        tp->cert_asked = 1;
    return 0;
}

int rs__tls_new(const rs_endpoint_t *ep, rs_tls_t **out, char *err, size_t errlen)
{
    *out = NULL;
    rs_tls_t *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return ENOMEM;
    }
    pthread_mutex_init(&t->mu, NULL);
    t->verify = ep->tls_verify;
    t->has_cert = ep->tls_cert[0] != '\0';
    ERR_clear_error();
    int rc = RS_ECONN;
    t->ctx = SSL_CTX_new(TLS_client_method());
    t->bio = BIO_meth_new(BIO_TYPE_SOURCE_SINK, "redisync socket");
    if (!t->ctx || !t->bio) {
        snprintf(err, errlen, "cannot set up TLS: %s", ssl_reason("out of memory"));
        goto fail;
    }
    BIO_meth_set_write(t->bio, bio_write);
    BIO_meth_set_read(t->bio, bio_read);
    BIO_meth_set_puts(t->bio, bio_puts);
    BIO_meth_set_ctrl(t->bio, bio_ctrl);
    BIO_meth_set_create(t->bio, bio_create);
    BIO_meth_set_destroy(t->bio, bio_destroy);

    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_default_passwd_cb(t->ctx, no_passphrase);
    SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(t->ctx, new_session);
    SSL_CTX_set_verify(t->ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (!t->has_cert)
        SSL_CTX_set_client_cert_cb(t->ctx, cert_asked);
    if (ep->tls_ca[0]) {
        if (check_readable("tls_ca", ep->tls_ca, err, errlen))
            goto fail;
        if (SSL_CTX_load_verify_locations(t->ctx, ep->tls_ca, NULL) != 1) {
            snprintf(err, errlen, "tls_ca %s: no CA certificate could be read from it: %s",
                     ep->tls_ca, ssl_reason("not PEM"));
            goto fail;
        }
    } else if (t->verify && SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
        snprintf(err, errlen, "cannot load the system's trust store: %s", ssl_reason("?"));
        goto fail;
    }
    if (t->has_cert) {
        if (check_readable("tls_cert", ep->tls_cert, err, errlen) ||
            check_readable("tls_key", ep->tls_key, err, errlen))
            goto fail;
        if (SSL_CTX_use_certificate_chain_file(t->ctx, ep->tls_cert) != 1) {
            snprintf(err, errlen, "tls_cert %s: no certificate could be read from it: %s",
                     ep->tls_cert, ssl_reason("not PEM"));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(t->ctx, ep->tls_key, SSL_FILETYPE_PEM) != 1) {
            if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
                ERR_clear_error();
                snprintf(err, errlen, "tls_key %s does not match the certificate in tls_cert "
                         "%s", ep->tls_key, ep->tls_cert);
                goto fail;
            }
            snprintf(err, errlen, "tls_key %s: no private key could be read from it (an "
                     "encrypted key is not supported): %s", ep->tls_key, ssl_reason("not PEM"));
            goto fail;
        }
        if (SSL_CTX_check_private_key(t->ctx) != 1) {
            ERR_clear_error();
            snprintf(err, errlen, "tls_key %s does not match the certificate in tls_cert %s",
                     ep->tls_key, ep->tls_cert);
            goto fail;
        }
    }
    *out = t;
    return 0;
fail:
    ERR_clear_error();
    rs__tls_free(t);
    return rc;
}

void rs__tls_forget_sessions(rs_tls_t *t)
{
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->nsess; i++)
        if (t->sess[i].s)
            SSL_SESSION_free(t->sess[i].s);
    t->nsess = 0;
    memset(t->sess, 0, sizeof t->sess);
    pthread_mutex_unlock(&t->mu);
}

void rs__tls_free(rs_tls_t *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->nsess; i++)
        if (t->sess[i].s)
            SSL_SESSION_free(t->sess[i].s);
    SSL_CTX_free(t->ctx);
    BIO_meth_free(t->bio);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* ----- one connection ---------------------------------------------------------------- */

static void ctx_error(redisContext *ctx, int type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ctx_error(redisContext *ctx, int type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->errstr, sizeof ctx->errstr, fmt, ap);
    va_end(ap);
    ctx->err = type;
}

/* Waits until fd is ready for events or deadline (RS_NO_DEADLINE: none). 1 ready, 0 timed
 * out. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
    for (;;) {
        int ms = -1;
        if (deadline != RS_NO_DEADLINE) {
            uint64_t now = rs__now_ns();
            if (now >= deadline)
                return 0;
            uint64_t left = (deadline - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS;
            ms = left > 1000000 ? 1000000 : (int)left;
        }
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return 1; /* let the next I/O call report it */
    }
}

static uint64_t io_deadline(const rs_tp_t *tp)
{
    return tp->timeout_ms > 0 ? rs__now_ns() + (uint64_t)tp->timeout_ms * RS_NS_PER_MS
                              : RS_NO_DEADLINE;
}

static int is_ip(const char *host)
{
    unsigned char buf[16];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The words for a failed handshake or TLS read (OpenSSL's error queue is consumed). */
static void tls_failure(rs_tp_t *tp, int sslerr, const char *name, char *out, size_t outlen)
{
    long v = SSL_get_verify_result(tp->ssl);
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0)
        last = e;
    int reason = last ? ERR_GET_REASON(last) : 0;
    if (tp->first >= 0 && strchr("+-:$*", tp->first)) {
        snprintf(out, outlen, "server speaks plain RESP, not TLS (a plain port: use redis:// "
                              "without tls=1, or the server's TLS port)");
    } else if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK) {
        if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
            snprintf(out, outlen, "certificate verify failed: %s (the server's certificate "
                     "does not name \"%s\"; tls_servername sets the name to check)",
                     X509_verify_cert_error_string(v), name);
        else
            snprintf(out, outlen, "certificate verify failed: %s",
                     X509_verify_cert_error_string(v));
    } else if (last && (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
                        ((reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE ||
                          reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE) && !tp->tls->has_cert))) {
        snprintf(out, outlen, "the server requires a client certificate (tls_cert and tls_key"
                 "%s): %s", tp->tls->has_cert ? " were refused" : " are not set",
                 ERR_reason_error_string(last));
    } else if (tp->cert_asked) {
        /* TLS 1.3 refuses a missing certificate after the handshake: the server's alert is
         * often lost, as it closes with our first command unread (a reset), so say what we
         * know: it asked, we had none */
        snprintf(out, outlen, "the server requires a client certificate (tls_cert and tls_key "
                 "are not set): it asked for one, then closed the connection");
    } else if (last) {
        const char *r = ERR_reason_error_string(last);
        snprintf(out, outlen, "TLS failed: %s", r ? r : "unknown OpenSSL error");
    } else if (sslerr == SSL_ERROR_ZERO_RETURN || tp->eof) {
        snprintf(out, outlen, "the server closed the connection%s", SSL_is_init_finished(
                 tp->ssl) ? "" : " during the TLS handshake (is it a TLS port?)");
        tp->fatal = !SSL_is_init_finished(tp->ssl);
        return;
    } else {
        snprintf(out, outlen, "%s", strerror(errno ? errno : ECONNRESET));
        return; /* the network, not TLS: may be retried */
    }
    tp->fatal = 1;
}

int rs__tp_tls_start(rs_tls_t *t, redisContext *ctx, const char *name, int port,
                     uint64_t deadline_ns, char *err, size_t errlen)
{
    rs_tp_t *tp = calloc(1, sizeof *tp);
    if (!tp) {
        snprintf(err, errlen, "out of memory");
        return ENOMEM;
    }
    tp->tls = t;
    tp->fd = ctx->fd;
    tp->first = -1;
    pthread_mutex_init(&tp->mu, NULL);
    /* sessions are kept per address (several nodes may share one tls_servername) */
    snprintf(tp->key, sizeof tp->key, "%s:%d", ctx->tcp.host ? ctx->tcp.host : name, port);
    ERR_clear_error();
    BIO *bio = BIO_new(t->bio);
    tp->ssl = SSL_new(t->ctx);
    if (!bio || !tp->ssl) {
        BIO_free(bio);
        snprintf(err, errlen, "cannot set up TLS: %s", ssl_reason("out of memory"));
        goto fail;
    }
    BIO_set_data(bio, tp);
    SSL_set_bio(tp->ssl, bio, bio);
    SSL_set_app_data(tp->ssl, tp);
    SSL_set_connect_state(tp->ssl);
    if (!is_ip(name))
        SSL_set_tlsext_host_name(tp->ssl, name); /* SNI is for names only (RFC 6066) */
    if (t->verify) {
        SSL_set_hostflags(tp->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        int ok = is_ip(name) ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(tp->ssl), name)
                             : SSL_set1_host(tp->ssl, name);
        if (ok != 1) {
            snprintf(err, errlen, "cannot check the certificate against \"%s\": %s", name,
                     ssl_reason("bad name"));
            goto fail;
        }
    }
    SSL_SESSION *s = session_get(t, tp->key);
    if (s) {
        SSL_set_session(tp->ssl, s);
        SSL_SESSION_free(s);
    }
    int fl = fcntl(tp->fd, F_GETFL);
    if (fl < 0 || fcntl(tp->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        snprintf(err, errlen, "fcntl: %s", strerror(errno));
        goto fail;
    }
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int rc = SSL_connect(tp->ssl);
        if (rc == 1)
            break;
        int e = SSL_get_error(tp->ssl, rc);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            if (wait_fd(tp->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline_ns))
                continue;
            if (tp->first < 0)
                snprintf(err, errlen, "TLS handshake timed out: no answer to the ClientHello "
                         "(a plain Redis port gives none: is this the server's TLS port?)");
            else
                snprintf(err, errlen, "TLS handshake timed out");
            tp->fatal = 1;
            goto fail;
        }
        tls_failure(tp, e, name, err, errlen);
        goto fail;
    }
    tp->reused = SSL_session_reused(tp->ssl);
    ctx->reader->privdata = tp;
    return 0;
fail: {
    int fatal = tp->fatal;
    if (tp->ssl)
        SSL_free(tp->ssl);
    ERR_clear_error();
    pthread_mutex_destroy(&tp->mu);
    free(tp);
    return fatal ? RS_ECONN : -1;
}
}

int rs__tp_is_tls(const redisContext *ctx)
{
    return tp_of(ctx) != NULL;
}

int rs__tp_fatal(const redisContext *ctx)
{
    rs_tp_t *tp = tp_of(ctx);
    return tp && tp->fatal;
}

int rs__tp_reused(const redisContext *ctx)
{
    rs_tp_t *tp = tp_of(ctx);
    return tp && tp->reused;
}

void rs__tp_describe(const redisContext *ctx, char *buf, size_t len)
{
    rs_tp_t *tp = tp_of(ctx);
    if (!tp)
        snprintf(buf, len, "plain");
    else
        snprintf(buf, len, "%s %s%s", SSL_get_version(tp->ssl), SSL_get_cipher_name(tp->ssl),
                 tp->reused ? " (resumed)" : "");
}

void rs__tp_set_timeout(redisContext *ctx, long ms)
{
    rs_tp_t *tp = tp_of(ctx);
    if (tp) {
        tp->timeout_ms = ms > 0 ? ms : 0;
        return;
    }
    struct timeval tv = {ms > 0 ? ms / 1000 : 0, ms > 0 ? (ms % 1000) * 1000 : 0};
    redisSetTimeout(ctx, tv);
}

static int plain_send(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return RS_ECONN;
        buf += n, len -= (size_t)n;
    }
    return 0;
}

int rs__tp_send(redisContext *ctx, const char *buf, size_t len, char *why, size_t whylen)
{
    rs_tp_t *tp = tp_of(ctx);
    if (!tp) {
        if (plain_send(ctx->fd, buf, len) == 0)
            return 0;
        if (why)
            snprintf(why, whylen, "%s", strerror(errno ? errno : EPIPE));
        return RS_ECONN;
    }
    uint64_t deadline = io_deadline(tp);
    int rc = 0;
    pthread_mutex_lock(&tp->mu);
    while (len > 0) {
        ERR_clear_error();
        errno = 0;
        int n = SSL_write(tp->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
        if (n > 0) {
            buf += n, len -= (size_t)n;
            continue;
        }
        int e = SSL_get_error(tp->ssl, n);
        if ((e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) &&
            wait_fd(tp->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline))
            continue;
        char w[sizeof ctx->errstr];
        if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ)
            snprintf(w, sizeof w, "%s", strerror(EAGAIN));
        else
            tls_failure(tp, e, "", w, sizeof w);
        if (why)
            snprintf(why, whylen, "%s", w);
        rc = RS_ECONN;
        break;
    }
    pthread_mutex_unlock(&tp->mu);
    return rc;
}

int rs__tp_fill(redisContext *ctx, int nonblock)
{
    char buf[RS_TP_READ_CHUNK];
    rs_tp_t *tp = tp_of(ctx);
    if (ctx->err)
        return -1;
    if (!tp) {
        ssize_t n;
        do
            n = recv(ctx->fd, buf, sizeof buf, nonblock ? MSG_DONTWAIT : 0);
        while (n < 0 && errno == EINTR);
        if (n < 0 && nonblock && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n < 0) {
            ctx_error(ctx, REDIS_ERR_IO, "%s", strerror(errno));
            return -1;
        }
        if (n == 0) {
            ctx_error(ctx, REDIS_ERR_EOF, "Server closed the connection");
            return -1;
        }
        if (redisReaderFeed(ctx->reader, buf, (size_t)n) != REDIS_OK) {
            ctx_error(ctx, ctx->reader->err, "%s", ctx->reader->errstr);
            return -1;
        }
        return 1;
    }
    uint64_t deadline = nonblock ? 0 : io_deadline(tp);
    /* A blocking read usually comes right after a request, before the reply: SSL_read would
     * find the socket empty (a recv() that fails with EAGAIN) and poll() after it. Polling
     * first, when OpenSSL holds no bytes and wants no write, saves that recv() on every
     * round trip (make bench-tls, docs/performance.md). */
    if (!nonblock) {
        pthread_mutex_lock(&tp->mu);
        int ready = SSL_has_pending(tp->ssl) || SSL_want_write(tp->ssl);
        pthread_mutex_unlock(&tp->mu);
        if (!ready)
            wait_fd(tp->fd, POLLIN, deadline); /* timed out: SSL_read says EAGAIN below */
    }
    for (;;) {
        pthread_mutex_lock(&tp->mu);
        ERR_clear_error();
        errno = 0;
        int n = SSL_read(tp->ssl, buf, sizeof buf);
        int e = n > 0 ? SSL_ERROR_NONE : SSL_get_error(tp->ssl, n);
        char why[sizeof ctx->errstr];
        if (n <= 0 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
            tls_failure(tp, e, "", why, sizeof why);
        pthread_mutex_unlock(&tp->mu);
        if (n > 0) {
            if (redisReaderFeed(ctx->reader, buf, (size_t)n) != REDIS_OK) {
                ctx_error(ctx, ctx->reader->err, "%s", ctx->reader->errstr);
                return -1;
            }
            return 1;
        }
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            if (nonblock)
                return 0;
            if (wait_fd(tp->fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline))
                continue;
            ctx_error(ctx, REDIS_ERR_IO, "%s", strerror(EAGAIN));
            errno = EAGAIN;
            return -1;
        }
        ctx_error(ctx, tp->eof && !tp->fatal ? REDIS_ERR_EOF : REDIS_ERR_IO, "%s",
                  tp->eof && !tp->fatal ? "Server closed the connection" : why);
        return -1;
    }
}

int rs__tp_pending(const redisContext *ctx)
{
    rs_tp_t *tp = tp_of(ctx);
    if (!tp)
        return 0;
    pthread_mutex_lock(&tp->mu);
    int n = SSL_has_pending(tp->ssl);
    pthread_mutex_unlock(&tp->mu);
    return n;
}

void rs__ctx_free(redisContext *ctx)
{
    if (!ctx)
        return;
    rs_tp_t *tp = tp_of(ctx);
    if (tp) {
        /* no close_notify: nothing is written (a fork child may be freeing the parent's
         * connection), and the session stays resumable */
        SSL_set_quiet_shutdown(tp->ssl, 1);
        SSL_shutdown(tp->ssl);
        SSL_free(tp->ssl); /* and its BIO */
        ERR_clear_error();
        pthread_mutex_destroy(&tp->mu);
        free(tp);
        ctx->reader->privdata = NULL;
    }
    redisFree(ctx);
}
