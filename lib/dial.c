/*
 * dial.c - opening one socket to one Redis server or sentinel, and nothing more.
 *
 * rs__dial connects (TCP or unix) within a deadline, marks the socket close-on-exec (the
 * CLI's COMMAND must not inherit Redis sockets), sets the TCP options every connection of
 * the library carries (tcp_options) and, on a client with TLS, runs the handshake within
 * the same deadline. It knows nothing of topology, AUTH or pools: conn.c dials the node
 * topology.c names and then logs in; topology.c dials sentinels. Layered on transport.c
 * only, so both callers sit above it and neither calls the other for a socket.
 */
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/socket.h>

#include "internal.h"

/* TCP_NODELAY (one command = one segment), and keepalive plus TCP_USER_TIMEOUT so
 * that a black-holed peer (packets dropped, no RST) is found out by the kernel: the
 * subscriber's read, which has no timeout, and the watchdog's, which waits up to a hold's
 * deadline, then fail instead of blocking for ever (Linux's default would take hours).
 * Probes start after max(timeout_ms, 1 s) idle, one a second; data or probes left
 * unacknowledged for that idle time + 3 s drop the connection. A stalled but live server
 * (SIGSTOP, DEBUG SLEEP) is not affected: its kernel still acknowledges. Best effort: a
 * kernel without one of the options keeps its default. */
static void tcp_options(const rs_client_t *c, int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    long idle_s = c->timeout_ms / 1000;
    if (idle_s < 1)
        idle_s = 1;
    if (idle_s > 60)
        idle_s = 60;
    int idle = (int)idle_s, intvl = 1, cnt = 3;
    unsigned user_timeout = (unsigned)idle_s * 1000u + 3000u;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

int rs__dial(rs_client_t *c, const rs_node_t *node, uint64_t end_ns, redisContext **out,
             char *why, size_t whylen)
{
    *out = NULL;
    uint64_t now = rs__now_ns();
    long ms = now < end_ns ? (long)((end_ns - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS) : 1;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisContext *ctx = node ? redisConnectWithTimeout(node->host, node->port, tv)
                             : redisConnectUnixWithTimeout(c->ep.path, tv);
    if (!ctx) {
        snprintf(why, whylen, "out of memory");
        return ENOMEM;
    }
    if (ctx->err) {
        snprintf(why, whylen, "%s", ctx->errstr);
        rs__ctx_free(ctx);
        return -1;
    }
    fcntl(ctx->fd, F_SETFD, fcntl(ctx->fd, F_GETFD) | FD_CLOEXEC);
    if (node)
        tcp_options(c, ctx->fd);
    if (node && c->tls) {
        /* a TLS failure is final (a retry would meet the same certificate), never a fall
         * back to plain text */
        const char *name = c->ep.tls_servername[0] ? c->ep.tls_servername : node->host;
        int trc = rs__tp_tls_start(c->tls, ctx, name, node->port, end_ns, why, whylen);
        if (trc != 0) {
            rs__ctx_free(ctx);
            return trc;
        }
    }
    *out = ctx;
    return 0;
}
