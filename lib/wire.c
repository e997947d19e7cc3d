/*
 * wire.c - commands and replies on one hiredis context, and nothing more.
 *
 * hiredis only formats and parses: commands are appended to the context's buffer and sent
 * by rs__ctx_flush, replies are read by rs__ctx_read (blocking, bounded by the socket
 * timeout) or rs__ctx_read_until (poll() until a deadline), both through transport.c (a
 * plain socket with send(MSG_NOSIGNAL), or a TLS session whose writes never raise SIGPIPE
 * either). No signal mask is touched, so the plain good path costs no system call beyond
 * the send and the read. Layered on transport.c only: conn.c (connect, pool), topology.c
 * (sentinels), cluster.c, notify.c, the watchdog and Redlock's rounds all talk through it.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <string.h>

#include <hiredis/sds.h>

#include "internal.h"

int rs__ctx_flush(redisContext *ctx)
{
    if (ctx->err)
        return RS_ECONN;
    size_t len = sdslen(ctx->obuf);
    if (len == 0)
        return 0;
    char why[sizeof ctx->errstr];
    if (rs__tp_send(ctx, ctx->obuf, len, why, sizeof why)) {
        /* marks the context failed, as hiredis' own write would: it is never reused */
        ctx->err = REDIS_ERR_IO;
        memcpy(ctx->errstr, why, sizeof ctx->errstr);
        return RS_ECONN;
    }
    sdsclear(ctx->obuf);
    return 0;
}

int rs__ctx_command(redisContext *ctx, int argc, const char **argv, const size_t *lens,
                    redisReply **out)
{
    *out = NULL;
    if (rs__ctx_append(ctx, argc, argv, lens)) /* out of memory: as hiredis' NULL reply was */
        return RS_ECONN;
    return rs__ctx_read(ctx, out);
}

int rs__ctx_append(redisContext *ctx, int argc, const char **argv, const size_t *lens)
{
    return redisAppendCommandArgv(ctx, argc, argv, lens) == REDIS_OK ? 0 : ENOMEM;
}

int rs__ctx_read(redisContext *ctx, redisReply **out)
{
    void *r = NULL;
    *out = NULL;
    if (rs__ctx_flush(ctx))
        return RS_ECONN;
    /* hiredis only parses: the bytes come through the transport */
    for (;;) {
        if (redisGetReplyFromReader(ctx, &r) != REDIS_OK)
            return RS_ECONN;
        if (r)
            break;
        if (rs__tp_fill(ctx, 0) < 0)
            return RS_ECONN;
    }
    *out = r;
    return 0;
}

int rs__ctx_timeout_until(redisContext *ctx, uint64_t end_ns)
{
    uint64_t now = rs__now_ns();
    if (now >= end_ns)
        return RS_ECONN;
    uint64_t ms = (end_ns - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS;
    rs__tp_set_timeout(ctx, ms > LONG_MAX / 2 ? LONG_MAX / 2 : (long)ms);
    return 0;
}

int rs__ctx_read_until(redisContext *ctx, uint64_t end_ns, redisReply **out)
{
    *out = NULL;
    if (sdslen(ctx->obuf) > 0 && (rs__ctx_timeout_until(ctx, end_ns) || rs__ctx_flush(ctx)))
        return ctx->err ? RS_ECONN : ETIMEDOUT;
    for (;;) {
        void *r = NULL;
        if (ctx->err || redisGetReplyFromReader(ctx, &r) != REDIS_OK)
            return RS_ECONN;
        if (r) {
            *out = r;
            return 0;
        }
        uint64_t now = rs__now_ns();
        if (now >= end_ns)
            return ETIMEDOUT;
        uint64_t ms = (end_ns - now + RS_NS_PER_MS - 1) / RS_NS_PER_MS;
        struct pollfd p = {ctx->fd, POLLIN, 0};
        /* bytes already inside a TLS session: poll() on the socket cannot see them */
        int pr = rs__tp_pending(ctx) ? 1 : poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms);
        if (pr < 0 && errno != EINTR)
            return RS_ECONN;
        /* readable (or hung up): one read that does not block; EOF marks ctx failed */
        if (pr > 0 && rs__tp_fill(ctx, 1) < 0)
            return RS_ECONN;
    }
}
