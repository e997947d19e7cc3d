/*
 * record.c - the client's holder record (issue 14): the hash PREFIX:{PUBLICID}:client with
 * the host, process id, program and label (rs_config_t.label) of the client, so that
 * inspection (rs_inspect_holder, `redisync info`) says who holds, as people read it, next to
 * the acquisition's public id. It holds no secret.
 *
 * The watchdog thread writes it (HSET and PEXPIRE) in the pipeline of a renewal round, which
 * it runs at once when a hold is registered while no record is known to be alive (every
 * lease is renewed early in that round: no round trip of its own), and renews it by one
 * PEXPIRE appended to each renewal round. Its TTL is twice the client's lease, so it lapses
 * soon after the client stops holding (or dies); a PEXPIRE that finds it gone (a restart
 * without persistence, a failover) makes the next round write it whole (an early round for
 * it: at most once a lease).
 * Kept on a single server and under Sentinel only: under Cluster the record's slot is
 * another node than the leases' (a round of its own), under Redlock it would be one master's
 * word; there inspection shows the acquisition id alone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

int rs__rec_enabled(const rs_client_t *c)
{
    return c->ep.mode != RS_MODE_CLUSTER && c->ep.mode != RS_MODE_REDLOCK;
}

long rs__rec_ttl_ms(const rs_client_t *c)
{
    return 2 * c->lease_ms;
}

int rs__rec_key(const rs_client_t *c, const char *public_id, size_t idlen, char *out,
                size_t outlen)
{
    int n = snprintf(out, outlen, "%s:{%.*s}:client", c->prefix, (int)idlen, public_id);
    return n > 0 && (size_t)n < outlen ? n : -1;
}

int rs__rec_append(rs_client_t *c, redisContext *ctx, int full)
{
    char key[RS_PREFIX_MAX + 64], ttl[24];
    int kl = rs__rec_key(c, c->public_id, strlen(c->public_id), key, sizeof key);
    if (kl < 0)
        return -1;
    snprintf(ttl, sizeof ttl, "%ld", rs__rec_ttl_ms(c));
    int n = 0;
    if (full) {
        char host[256] = "", pid[24];
        if (gethostname(host, sizeof host - 1) != 0)
            snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = '\0';
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        const char *prog = program_invocation_short_name ? program_invocation_short_name : "";
        const char *v[10] = {"HSET", key, "host", host, "pid", pid, "program", prog, "label",
                             c->label ? c->label : ""};
        size_t l[10];
        for (int i = 0; i < 10; i++)
            l[i] = strlen(v[i]);
        if (rs__ctx_append(ctx, 10, v, l) != 0)
            return -1;
        n++;
    }
    const char *v[3] = {"PEXPIRE", key, ttl};
    size_t l[3] = {7, (size_t)kl, strlen(ttl)};
    if (rs__ctx_append(ctx, 3, v, l) != 0)
        return -1;
    return n + 1;
}

void rs__rec_answered(rs_client_t *c, const redisReply *r, uint64_t sent_ns)
{
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
        atomic_store(&c->wd.rec_until_ns,
                     sent_ns + (uint64_t)rs__rec_ttl_ms(c) * RS_NS_PER_MS / 2);
    else
        atomic_store(&c->wd.rec_until_ns, 0); /* gone, or refused: written again */
}
