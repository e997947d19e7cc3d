/*
 * inspect.c - rs_inspect, rs_list and rs_force_release: what operators and the command-line
 * tool see of the primitives in Redis.
 *
 * This is the one place that lists every primitive kind (the table below). Each kind's
 * script answers "info" with one reply shape shared by all kinds, and "force" with the
 * number of holds it dropped, so the calls here need nothing else of a primitive: they run
 * the op through a temporary handle (which builds the keys exactly as the primitive does).
 * rs_list walks the keyspace with SCAN (under Cluster on every master in turn) and
 * recognises a primitive by its main key, PREFIX:{NAME}:KIND. Under Redlock, "info" and the
 * listing show one master's view (the next master in turn that answers), and "force" runs on
 * every master.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

extern const rs_kind_t rs_kind_mutex, rs_kind_rmutex, rs_kind_rwlock, rs_kind_sem, rs_kind_latch,
    rs_kind_once, rs_kind_barrier, rs_kind_cond;

static const rs_kind_t *const kinds[] = {&rs_kind_mutex, &rs_kind_rmutex, &rs_kind_rwlock,
                                         &rs_kind_sem, &rs_kind_latch, &rs_kind_once,
                                         &rs_kind_barrier, &rs_kind_cond};

static const rs_kind_t *kind_find(rs_client_t *c, const char *kind)
{
    if (!kind) {
        rs__fail(c, EINVAL, "kind is NULL");
        return NULL;
    }
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i]->name, kind) == 0)
            return kinds[i];
    rs__fail(c, EINVAL, "unknown kind \"%.32s\" (mutex, rmutex, rwlock, sem, latch, once, barrier or cond)", kind);
    return NULL;
}

/* Runs op on (kind, name) through a temporary handle. */
static int run_op(rs_client_t *c, const char *kind, const char *name, const char *op,
                  redisReply **out)
{
    const rs_kind_t *k = kind_find(c, kind);
    if (!k)
        return EINVAL;
    rs_handle_t h;
    int rc = rs__handle_init(&h, c, k->name, k->script, name, k->suffixes, k->nkeys);
    if (rc)
        return rc;
    rc = rs__enter(c);
    if (rc == 0) {
        rs_call_t call;
        rs__call_init(&call, &h, NULL);
        if (c->ep.mode == RS_MODE_REDLOCK && strcmp(op, "force") == 0) {
            /* on every master; the holds dropped are counted on the master that dropped most */
            rs_rl_tally_t t;
            rs_argv_t v;
            rs__call_argv(&call, op, "t", &v);
            *out = NULL;
            rc = rs__rl_call_int(c, h.script, h.nkeys, &v, c->lease_ms, &t);
            if (rc == 0)
                rs__log(c, RS_LOG_WARN, "force release of %s \"%s\": %lld hold(s) dropped on "
                        "%d of %d redlock masters", kind, name, t.max, t.pos, c->ep.nseeds);
        } else {
            rc = rs__call_run(&call, op, "t", out);
        }
        rs__leave(c);
    }
    rs__handle_destroy(&h);
    return rc;
}

RS_API int rs_inspect(rs_client_t *c, const char *kind, const char *name, rs_info_t *out)
{
    if (!out)
        return rs__fail(c, EINVAL, "info pointer is NULL");
    memset(out, 0, sizeof *out);
    redisReply *r;
    int rc = run_op(c, kind, name, "info", &r);
    if (rc)
        return rc;
    rc = rs__decode_info(kind, r, out);
    freeReplyObject(r);
    if (rc)
        return rs__fail(c, rc, "unexpected reply to info from the %s script", kind);
    return 0;
}

RS_API int rs_force_release(rs_client_t *c, const char *kind, const char *name)
{
    if (kind && strcmp(kind, "barrier") == 0) /* (its script has no "force") */
        return rs__fail(c, EINVAL, "a barrier has no holds to release (a party that gives up "
                        "withdraws its arrival itself)");
    redisReply *r;
    int rc = run_op(c, kind, name, "force", &r);
    if (rc == 0 && r) {
        rs__log(c, RS_LOG_WARN, "force release of %s \"%s\": %lld hold(s) dropped", kind, name,
                r->type == REDIS_REPLY_INTEGER ? r->integer : 0);
        freeReplyObject(r);
    }
    return rc;
}

/* If key is the main key of a known kind, PREFIX:{NAME}:KIND, report it. */
static int one_key(rs_client_t *c, const char *key, size_t len, const char *pattern,
                   int (*each)(const char *, const char *, void *), void *arg)
{
    size_t pl = c->prefix_len;
    if (len < pl + 4 || memcmp(key, c->prefix, pl) != 0 || key[pl] != ':' || key[pl + 1] != '{')
        return 0;
    const char *colon = memrchr(key, ':', len);
    if (!colon || colon == key || colon[-1] != '}')
        return 0;
    const char *kind = colon + 1;
    size_t kl = len - (size_t)(kind - key);
    const rs_kind_t *k = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strlen(kinds[i]->name) == kl && memcmp(kinds[i]->name, kind, kl) == 0)
            k = kinds[i];
    const char *nm = key + pl + 2;
    size_t nl = (size_t)(colon - 1 - nm);
    if (!k || nl == 0 || nl > RS_NAME_MAX + 1)
        return 0;
    if (nm[0] == '\\') /* the escape of names starting with '}' or '\' (keys.c) */
        nm++, nl--;
    char name[RS_NAME_MAX + 2];
    memcpy(name, nm, nl);
    name[nl] = '\0';
    if (strlen(name) != nl || (pattern && fnmatch(pattern, name, 0) != 0))
        return 0;
    return each(k->name, name, arg);
}

RS_API int rs_list(rs_client_t *c, const char *pattern,
                   int (*each)(const char *kind, const char *name, void *arg), void *arg)
{
    if (!each)
        return rs__fail(c, EINVAL, "callback is NULL");
    int rc = rs__enter(c);
    if (rc)
        return rc;
    char match[160];
    snprintf(match, sizeof match, "%s:{*", c->prefix);
    uint64_t deadline = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    /* under Cluster every master is scanned in turn; elsewhere the one server */
    int nodes[RS_NODES_MAX] = {-1}, nnodes = 1;
    if (c->ep.mode == RS_MODE_CLUSTER)
        nnodes = rs__cluster_masters(c, nodes, RS_NODES_MAX);
    for (int ni = 0; ni < nnodes && rc == 0; ni++) {
        char cursor[32] = "0";
        do {
            rs_conn_t *k;
            if ((rc = rs__conn_get_node(c, nodes[ni], deadline, &k)) != 0)
                break;
            const char *argv[6] = {"SCAN", cursor, "MATCH", match, "COUNT", "1000"};
            size_t lens[6] = {4, strlen(cursor), 5, strlen(match), 5, 4};
            redisReply *r;
            if (rs__ctx_command(k->ctx, 6, argv, lens, &r) != 0) {
                rs__conn_put(c, k, 1);
                rc = rs__fail(c, RS_ECONN, "connection lost during SCAN");
                break;
            }
            rs__conn_put(c, k, 0);
            if (r->type == REDIS_REPLY_ERROR) {
                rc = rs__reply_error(c, r);
            } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                       r->element[0]->type != REDIS_REPLY_STRING ||
                       r->element[1]->type != REDIS_REPLY_ARRAY) {
                rc = rs__fail(c, RS_ESERVER, "unexpected reply to SCAN");
            } else {
                snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
                const redisReply *keys = r->element[1];
                for (size_t i = 0; i < keys->elements && rc == 0; i++)
                    if (keys->element[i]->type == REDIS_REPLY_STRING)
                        rc = one_key(c, keys->element[i]->str, keys->element[i]->len, pattern, each, arg);
            }
            freeReplyObject(r);
        } while (rc == 0 && strcmp(cursor, "0") != 0);
    }
    rs__leave(c);
    return rc;
}

/* The value of field f in an HGETALL reply r, or NULL. */
static const redisReply *hfield(const redisReply *r, const char *f)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, f) == 0 &&
            r->element[i + 1]->type == REDIS_REPLY_STRING)
            return r->element[i + 1];
    return NULL;
}

static void hcopy(char *dst, size_t len, const redisReply *v)
{
    snprintf(dst, len, "%.*s", v ? (int)v->len : 0, v ? v->str : "");
}

RS_API int rs_inspect_holder(rs_client_t *c, const rs_info_t *info, unsigned i,
                             rs_holder_info_t *out)
{
    if (!c)
        return rs__fail(NULL, EINVAL, "client is NULL");
    if (!out)
        return rs__fail(c, EINVAL, "holder info pointer is NULL");
    memset(out, 0, sizeof *out);
    out->held_ms = -1;
    if (!info)
        return rs__fail(c, EINVAL, "info is NULL");
    unsigned shown = info->nholders < RS_INFO_HOLDERS ? info->nholders : RS_INFO_HOLDERS;
    if (i >= shown || !info->holders[i][0])
        return rs__fail(c, EINVAL, "no holder %u in info (%u shown)", i, shown);
    snprintf(out->id, sizeof out->id, "%.*s", (int)sizeof out->id - 1, info->holders[i]);
    const char *colon = strchr(out->id, ':');
    size_t idlen = colon ? (size_t)(colon - out->id) : strlen(out->id);
    char key[RS_PREFIX_MAX + 64];
    int kl = rs__rec_key(c, out->id, idlen, key, sizeof key);
    if (kl < 0)
        return rs__fail(c, EINVAL, "holder id \"%s\" is too long", out->id);
    if (c && c->ep.mode == RS_MODE_REDLOCK)
        return 0; /* no record is kept there (lib/record.c) */
    int rc = rs__enter(c);
    if (rc)
        return rc;
    uint64_t deadline = rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS;
    int node = c->ep.mode == RS_MODE_CLUSTER ? rs__cluster_node_of(c, key, (size_t)kl) : -1;
    rs_conn_t *k;
    if ((rc = rs__conn_get_node(c, node, deadline, &k)) != 0) {
        rs__leave(c);
        return rc;
    }
    const char *hv[2] = {"HGETALL", key};
    size_t hl[2] = {7, (size_t)kl};
    const char *tv[1] = {"TIME"};
    size_t tl[1] = {4};
    redisReply *r = NULL, *t = NULL;
    if (rs__ctx_command(k->ctx, 2, hv, hl, &r) != 0 || rs__ctx_command(k->ctx, 1, tv, tl, &t) != 0) {
        if (r)
            freeReplyObject(r);
        rs__conn_put(c, k, 1);
        rs__leave(c);
        return rs__fail(c, RS_ECONN, "connection lost while reading the holder's record");
    }
    rs__conn_put(c, k, 0);
    rs__leave(c);
    if (r->type == REDIS_REPLY_ERROR || t->type == REDIS_REPLY_ERROR) {
        rc = rs__reply_error(c, r->type == REDIS_REPLY_ERROR ? r : t);
    } else if (r->type != REDIS_REPLY_ARRAY || t->type != REDIS_REPLY_ARRAY ||
               t->elements != 2 || t->element[0]->type != REDIS_REPLY_STRING ||
               t->element[1]->type != REDIS_REPLY_STRING) {
        rc = rs__fail(c, RS_ESERVER, "unexpected reply to HGETALL or TIME");
    } else {
        out->found = r->elements > 0;
        hcopy(out->host, sizeof out->host, hfield(r, "host"));
        hcopy(out->program, sizeof out->program, hfield(r, "program"));
        hcopy(out->label, sizeof out->label, hfield(r, "label"));
        const redisReply *p = hfield(r, "pid");
        out->pid = p ? strtol(p->str, NULL, 10) : 0;
        /* the fencing token of an exclusive hold is the server's clock in us at its grant
         * (core.lua, next_fence), unless grants came faster: then a little later */
        if (i == 0 && info->writer && info->fence > 0) {
            long long now_us = strtoll(t->element[0]->str, NULL, 10) * 1000000LL +
                               strtoll(t->element[1]->str, NULL, 10);
            long long held = (now_us - (long long)info->fence) / 1000;
            out->held_ms = held >= 0 && held < 100LL * 365 * 86400000LL ? (long)held : -1;
        }
    }
    freeReplyObject(r);
    freeReplyObject(t);
    return rc;
}
