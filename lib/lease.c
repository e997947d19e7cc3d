/*
 * lease.c - the lease object: what the watchdog renews and releases for one hold or one
 * waiter's queue entry.
 *
 * An rs_lease_t owns a copy of the call that made it (script, keys, arguments, fence), so
 * renewals and releases can be sent long after the caller's buffers are gone; ops are put
 * in front of the arguments per call (rs__lease_argv). Its live state (deadline, lost,
 * reported) is the watchdog's and is read under wd.mu (watchdog.c); this file knows nothing
 * of the thread.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint64_t rs__drift_ns(long lease_ms)
{
    /* clock drift allowance as in Redlock: 1% of the lease plus 2 ms */
    return (uint64_t)lease_ms * RS_NS_PER_MS / 100 + 2 * RS_NS_PER_MS;
}

rs_lease_t *rs__lease_new(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                          const char *renew_op, const char *release_op, long lease_ms,
                          const char *kind, const char *name, size_t namelen)
{
    rs_lease_t *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    /* one block: the pointers, the lengths, the bytes (each NUL-terminated), the name */
    size_t n = (size_t)args->n + 1, total = n * (sizeof(char *) + sizeof(size_t));
    for (int i = 0; i < args->n; i++)
        total += args->len[i] + 1;
    total += namelen + 1;
    l->store = malloc(total);
    if (!l->store) {
        free(l);
        return NULL;
    }
    l->args.v = (const char **)(void *)l->store;
    l->args.len = (size_t *)(void *)(l->store + n * sizeof(char *));
    char *p = l->store + n * (sizeof(char *) + sizeof(size_t));
    l->args.v[0] = ""; /* the op, filled in per call */
    l->args.len[0] = 0;
    l->args.n = 1;
    for (int i = 0; i < args->n; i++) {
        memcpy(p, args->v[i], args->len[i]);
        p[args->len[i]] = '\0';
        l->args.v[l->args.n] = p;
        l->args.len[l->args.n++] = args->len[i];
        p += args->len[i] + 1;
    }
    l->name = p;
    memcpy(l->name, name, namelen);
    l->name[namelen] = '\0';
    l->c = c;
    l->script = s;
    l->nkeys = nkeys;
    l->renew_op = renew_op;
    l->release_op = release_op;
    l->lease_ms = lease_ms;
    l->kind = kind;
    atomic_init(&l->refs, 1);
    return l;
}

void rs__lease_unref(rs_lease_t *l)
{
    if (l && atomic_fetch_sub(&l->refs, 1) == 1) {
        free(l->store); /* the name too */
        free(l);
    }
}

/* The lease's call with op put in front of its arguments; keys come first in Redis's
 * order, so the op is moved after them. */
void rs__lease_argv(const rs_lease_t *l, const char *op, rs_argv_t *out)
{
    rs__argv_init(out);
    for (int i = 1; i <= l->nkeys; i++)
        rs__argv_ref(out, l->args.v[i], l->args.len[i]);
    rs__argv_str(out, op);
    for (int i = l->nkeys + 1; i < l->args.n; i++)
        rs__argv_ref(out, l->args.v[i], l->args.len[i]);
    if (l->fence[0]) {
        rs__argv_ref(out, "", 0);
        rs__argv_str(out, l->fence);
    }
}

int rs__lease_call(rs_client_t *c, rs_lease_t *l, const char *op, redisReply **out)
{
    if (c->ep.mode == RS_MODE_REDLOCK) {
        rs_rl_tally_t t;
        *out = NULL;
        return rs__rl_lease_int(c, l, op, &t);
    }
    rs_argv_t a;
    rs__lease_argv(l, op, &a);
    return rs__eval(c, l->script, l->nkeys, &a, out);
}
