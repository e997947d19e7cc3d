/*
 * script.c - runs the primitives' Lua scripts.
 *
 * Scripts are compiled into the library (build/gen/scripts.c, SHA1 computed at build time)
 * and run with EVALSHA. NOSCRIPT (after a restart, a failover or SCRIPT FLUSH) makes us
 * SCRIPT LOAD the body on that connection and run the call again, transparently.
 *
 * rs__eval is the retry policy of every caller-thread command: a broken connection is
 * replaced and the call re-sent, and transient server states (LOADING after a restart, BUSY,
 * TRYAGAIN, MASTERDOWN, NOREPLICAS) are waited out, all within timeout_ms; past it, RS_ECONN.
 * Under Sentinel, READONLY, MASTERDOWN or NOREPLICAS means the master moved: the pool is invalidated
 * (rs__topo_changed) and the call re-sent to the current master. Under Cluster a call goes
 * to the master of its first key's slot (slotmap.c); MOVED fixes the map and re-sends it
 * there, ASK re-sends it once to the importing node behind ASKING, TRYAGAIN (keys of a slot
 * half migrated) and CLUSTERDOWN are waited out like LOADING. A call may
 * thus reach Redis twice; every mutating script recognises its call id, so that is harmless.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

int rs__is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

int rs__is_transient(const redisReply *r)
{
    /* NOREPLICAS: a master with min-replicas-to-write that has lost its replicas (cut off
     * from them, or a promoted replica whose old master has not rejoined) refuses a
     * script at its first write, so nothing was written; under Sentinel it is also taken
     * as a sign that the master moved (rs__is_topology_error) */
    static const char *const codes[] = {"LOADING", "BUSY ", "TRYAGAIN", "MASTERDOWN",
                                        "CLUSTERDOWN", "NOREPLICAS"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strncmp(r->str, codes[i], strlen(codes[i])) == 0)
            return 1;
    return 0;
}

int rs__reply_error(rs_client_t *c, const redisReply *r)
{
    /* the scripts' own error codes: "RSxxx message" */
    if (strncmp(r->str, "RSQUEUE", 7) == 0)
        return rs__fail(c, RS_EQUEUE, "the waiter queue is full (max_waiters %u)", c->max_waiters);
    if (strncmp(r->str, "RSNOENT", 7) == 0)
        return rs__fail(c, ENOENT, "%s", r->str[7] ? r->str + 8 : "no such primitive");
    if (strncmp(r->str, "RSINVAL", 7) == 0)
        return rs__fail(c, EINVAL, "%s", r->str[7] ? r->str + 8 : "invalid argument");
    return rs__fail(c, RS_ESERVER, "Redis error: %s", r->str);
}

void rs__evalsha_argv(const rs_script_t *s, int nkeys, const rs_argv_t *args, rs_argv_t *out)
{
    rs__argv_init(out);
    rs__argv_ref(out, "EVALSHA", 7);
    rs__argv_ref(out, s->sha, 40);
    rs__argv_fmt(out, "%d", nkeys);
    for (int i = 0; i < args->n; i++)
        rs__argv_ref(out, args->v[i], args->len[i]);
}

int rs__script_load(rs_client_t *c, redisContext *ctx, const rs_script_t *s)
{
    const char *argv[3] = {"SCRIPT", "LOAD", (const char *)s->body};
    size_t lens[3] = {6, 4, s->len};
    redisReply *r;
    if (rs__ctx_command(ctx, 3, argv, lens, &r) != 0)
        return RS_ECONN;
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR)
        rc = rs__is_transient(r) ? RS_ECONN : rs__fail(c, RS_ESERVER, "SCRIPT LOAD %s: %s", s->name, r->str);
    freeReplyObject(r);
    return rc;
}

/* The write that goes before a WAIT (rs__sync_append). */
typedef struct rs_sync_cmd {
    int n;
    const char *v[5];
    size_t len[5];
    char arg[256];
} rs_sync_cmd_t;

static void sync_cmd(rs_client_t *c, const char *key, size_t klen, rs_sync_cmd_t *out)
{
    if (c->ep.mode == RS_MODE_CLUSTER && key) {
        /* the key's hash tag, PREFIX:{NAME}, and ":sync": the same slot */
        size_t tl;
        const char *tag = rs__hash_tag(key, klen, &tl);
        size_t pl = tag ? (size_t)(tag + tl + 1 - key) : klen;
        snprintf(out->arg, sizeof out->arg, "%.*s:sync", (int)(pl < 200 ? pl : 200), key);
        out->n = 5;
        out->v[0] = "SET", out->len[0] = 3;
        out->v[2] = "", out->len[2] = 0;
        out->v[3] = "PX", out->len[3] = 2;
        out->v[4] = "1000", out->len[4] = 4;
    } else {
        snprintf(out->arg, sizeof out->arg, "%s:sync", c->channel);
        out->n = 3;
        out->v[0] = "PUBLISH", out->len[0] = 7;
        out->v[2] = "", out->len[2] = 0;
    }
    out->v[1] = out->arg;
    out->len[1] = strlen(out->arg);
}

int rs__sync_append(rs_client_t *c, redisContext *ctx, const char *key, size_t klen, int asking,
                    long wait_ms)
{
    rs_sync_cmd_t sc;
    sync_cmd(c, key, klen, &sc);
    char n[16], t[24];
    snprintf(n, sizeof n, "%d", c->min_replicas);
    snprintf(t, sizeof t, "%ld", wait_ms > 0 ? wait_ms : 1);
    const char *kv[1] = {"ASKING"};
    size_t kl[1] = {6};
    const char *wv[3] = {"WAIT", n, t};
    size_t wl[3] = {4, strlen(n), strlen(t)};
    if ((asking && rs__ctx_append(ctx, 1, kv, kl) != 0) ||
        rs__ctx_append(ctx, sc.n, sc.v, sc.len) != 0 || rs__ctx_append(ctx, 3, wv, wl) != 0)
        return -1;
    return 0;
}

/* Sends EVALSHA on ctx, in one round trip with what goes with it: ASKING in front when
 * asking (a Cluster ASK redirection), and with confirm the write of rs__sync_cmd (ASKING
 * again in front of it when asking) and WAIT behind, WAIT's count going to *acked (-1 if
 * WAIT failed). 0 or RS_ECONN (the context is broken). */
static int run_on(rs_client_t *c, redisContext *ctx, rs_argv_t *av, int asking, int confirm,
                  redisReply **out, long long *acked)
{
    if (!confirm && !asking)
        return rs__ctx_command(ctx, av->n, av->v, av->len, out);
    const char *kv[1] = {"ASKING"};
    size_t kl[1] = {6};
    *out = NULL;
    int ask_sync = confirm && asking;
    if ((asking && rs__ctx_append(ctx, 1, kv, kl) != 0) ||
        rs__ctx_append(ctx, av->n, av->v, av->len) != 0 ||
        (confirm && rs__sync_append(c, ctx, av->n > 3 ? av->v[3] : NULL, av->n > 3 ? av->len[3] : 0,
                                    ask_sync, c->replica_timeout_ms) != 0))
        return RS_ECONN;
    int nr = 1 + asking + 2 * confirm + ask_sync;
    redisReply *r[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < nr; i++)
        if (rs__ctx_read(ctx, &r[i]) != 0) {
            for (int j = 0; j < i; j++)
                freeReplyObject(r[j]);
            return RS_ECONN;
        }
    if (confirm) {
        redisReply *w = r[nr - 1];
        if (w->type == REDIS_REPLY_INTEGER)
            *acked = w->integer;
        else if (w->type == REDIS_REPLY_ERROR)
            rs__log(c, RS_LOG_WARN, "WAIT: %s", w->str);
    }
    *out = r[asking];
    for (int i = 0; i < nr; i++)
        if (i != asking)
            freeReplyObject(r[i]);
    return 0;
}

int rs__eval(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
             redisReply **out)
{
    return rs__eval_confirm(c, s, nkeys, args, out, NULL, NULL);
}

static _Thread_local unsigned eval_sends;

unsigned rs__eval_sends(void)
{
    return eval_sends;
}

int rs__eval_confirm(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                     redisReply **out, long long *acked, uint64_t *sent_ns)
{
    return rs__eval_pre(c, s, nkeys, args, out, acked, sent_ns, NULL, 0);
}

int rs__eval_pre(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                 redisReply **out, long long *acked, uint64_t *sent_ns, rs_conn_t *pre,
                 uint64_t pre_sent)
{
    int confirm = acked && c->min_replicas > 0;
    long long ack_local;
    if (!acked)
        acked = &ack_local;
    *acked = -1;
    rs_argv_t av;
    rs__evalsha_argv(s, nkeys, args, &av);
    uint64_t deadline = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    uint64_t backoff_ms = 2;
    char why[160] = "";
    int cluster = c->ep.mode == RS_MODE_CLUSTER, ask_node = -1, hops = 0;
    *out = NULL;
    for (;;) {
        rs_conn_t *k;
        int node = -1, asking = ask_node >= 0;
        if (pre) {
            /* sent already (cond.c's re-acquisition, written when the wake-up arrived):
             * only its reply is read; anything but a plain answer goes on as below */
            redisReply *r = NULL;
            k = pre;
            pre = NULL;
            eval_sends++;
            if (rs__ctx_read(k->ctx, &r) == 0 && r->type != REDIS_REPLY_ERROR) {
                rs__conn_put(c, k, 0);
                *out = r;
                if (sent_ns)
                    *sent_ns = pre_sent;
                return 0;
            }
            /* broken, or an error reply (NOSCRIPT...): sent again the ordinary way */
            if (r)
                freeReplyObject(r);
            rs__conn_put(c, k, r == NULL);
            continue;
        }
        if (asking)
            node = ask_node;
        else if (cluster && nkeys > 0) {
            rs__cluster_refresh(c, 0, c->timeout_ms); /* only if a MOVED made it stale */
            node = rs__cluster_node_of(c, args->v[0], args->len[0]);
        }
        ask_node = -1; /* an ASK redirects one call only */
        /* under Cluster a node gets a short budget, then the map is asked again */
        uint64_t cdl = deadline, t0 = rs__now_ns();
        if (cluster && t0 < deadline && deadline - t0 > 500 * RS_NS_PER_MS)
            cdl = t0 + 500 * RS_NS_PER_MS;
        int rc = rs__conn_get_node(c, node, cdl, &k);
        if (rc == RS_ECONN && cluster && rs__now_ns() < deadline) {
            snprintf(why, sizeof why, "%.150s", rs_client_lasterror(c));
            rs__cluster_stale(c);
            rs__sleep_ns(backoff_ms * RS_NS_PER_MS);
            if (backoff_ms < 100)
                backoff_ms *= 2;
            continue;
        }
        if (rc != 0) {
            if (rc == RS_ECONN && why[0])
                return rs__fail(c, RS_ECONN, "Redis unreachable for %ld ms (%s)", c->timeout_ms, why);
            return rc;
        }
        redisReply *r;
        int moved_to, ask = 0;
        uint64_t sent = rs__now_ns();
        eval_sends++;
        if (run_on(c, k->ctx, &av, asking, confirm, &r, acked) != 0) {
            snprintf(why, sizeof why, "%s", k->ctx->errstr[0] ? k->ctx->errstr : "connection lost");
            rs__conn_put(c, k, 1);
            rs__topo_changed(c); /* under Sentinel, a failover kills the old master's clients */
            if (cluster)
                rs__cluster_stale(c); /* perhaps a failed master: ask for the map again */
        } else if (r->type != REDIS_REPLY_ERROR) {
            rs__conn_put(c, k, 0);
            *out = r;
            if (sent_ns)
                *sent_ns = sent;
            return 0;
        } else if (rs__is_noscript(r)) {
            freeReplyObject(r);
            rc = rs__script_load(c, k->ctx, s);
            rs__conn_put(c, k, rc == RS_ECONN);
            if (rc == RS_ESERVER)
                return rc;
            continue; /* run it again at once */
        } else if (cluster && (moved_to = rs__cluster_redirect(c, r->str, &ask)) >= 0 &&
                   hops < 16) {
            /* MOVED: the map is fixed for that slot, the call goes there; ASK: this call
             * only goes to the node that imports the slot, with ASKING */
            freeReplyObject(r);
            rs__conn_put(c, k, 0);
            /* only MOVED counts toward the bound (a map that keeps pointing elsewhere): an
             * ASK is one call elsewhere, and an ASK that meets TRYAGAIN there (a multi-key
             * call on a slot half-way through a migration, its keys on neither side yet)
             * waits with the back-off of the transient errors until timeout_ms */
            if (ask)
                ask_node = moved_to;
            else
                hops++;
            continue;
        } else if (rs__is_topology_error(c, r)) {
            /* the master moved (failover): reconnect through the sentinels and run it again */
            snprintf(why, sizeof why, "%.150s", r->str);
            freeReplyObject(r);
            rs__topo_changed(c);
            rs__conn_put(c, k, 1);
        } else if (rs__is_transient(r)) {
            snprintf(why, sizeof why, "%.150s", r->str);
            freeReplyObject(r);
            rs__conn_put(c, k, 0);
        } else {
            rc = rs__reply_error(c, r);
            freeReplyObject(r);
            rs__conn_put(c, k, 0);
            return rc;
        }
        uint64_t now = rs__now_ns();
        if (now >= deadline)
            return rs__fail(c, RS_ECONN, "Redis unreachable for %ld ms (%s)", c->timeout_ms, why);
        if (atomic_load(&c->closing))
            return rs__fail(c, ECANCELED, "the client is closing");
        uint64_t nap = backoff_ms * RS_NS_PER_MS;
        if (nap > deadline - now)
            nap = deadline - now;
        rs__sleep_ns(nap);
        if (backoff_ms < 100)
            backoff_ms *= 2;
    }
}
