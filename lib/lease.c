/*
 * lease.c - the lease object: what the watchdog renews and releases for one hold or one
 * waiter's queue entry.
 *
 * An rs_lease_t owns a copy of the call that made it (script, keys, arguments, fence), so
 * renewals and releases can be sent long after the caller's buffers are gone; ops are put
 * in front of the arguments per call (rs__lease_argv); one allocation. A built lease (a
 * queue entry of lib/async.c) has no copy and no allocation of its own: it is the first
 * member of its request's block, whose fields (the acquisition id, the owner, the extras,
 * the main key; not the handle, which it may outlive) its builder rebuilds the call from,
 * and its last reference frees that block. Its live state (deadline, lost, reported) is the
 * watchdog's and is read under wd.mu (watchdog.c); this file knows nothing of the thread.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint64_t rs__drift_ns(long lease_ms)
{
    /* clock drift allowance as in Redlock: 1% of the lease plus 2 ms */
    return (uint64_t)lease_ms * RS_NS_PER_MS / 100 + 2 * RS_NS_PER_MS;
}

/* One block: the struct, then (8-byte aligned) the pointers, lengths and bytes of the copied
 * arguments (each NUL-terminated), then the name. */
static rs_lease_t *lease_alloc(size_t body, size_t namelen)
{
    size_t head = (sizeof(rs_lease_t) + 7) & ~(size_t)7;
    body = (body + 7) & ~(size_t)7;
    rs_lease_t *l = calloc(1, head + body + namelen + 1);
    if (l) {
        l->src = (char *)l + head;
        l->name = (char *)l + head + body;
    }
    return l;
}

static void lease_fill(rs_lease_t *l, rs_client_t *c, const rs_script_t *s, int nkeys,
                       const char *renew_op, const char *release_op, long lease_ms,
                       const char *kind, const char *name, size_t namelen)
{
    memcpy(l->name, name, namelen);
    l->name[namelen] = '\0';
    l->c = c;
    l->script = s;
    l->nkeys = (short)nkeys;
    l->renew_op = renew_op;
    l->release_op = release_op;
    l->lease_ms = lease_ms;
    l->kind = kind;
    atomic_init(&l->refs, 1);
}

rs_lease_t *rs__lease_new(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                          const char *renew_op, const char *release_op, long lease_ms,
                          const char *kind, const char *name, size_t namelen)
{
    size_t n = (size_t)args->n + 1, total = n * (sizeof(char *) + sizeof(size_t));
    for (int i = 0; i < args->n; i++)
        total += args->len[i] + 1;
    rs_lease_t *l = lease_alloc(total, namelen);
    if (!l)
        return NULL;
    const char **v = (const char **)l->src;
    size_t *len = (size_t *)(void *)(v + n);
    char *p = (char *)(len + n);
    v[0] = ""; /* the op, filled in per call */
    len[0] = 0;
    for (int i = 0; i < args->n; i++) {
        memcpy(p, args->v[i], args->len[i]);
        p[args->len[i]] = '\0';
        v[i + 1] = p;
        len[i + 1] = args->len[i];
        p += args->len[i] + 1;
    }
    l->nargs = (short)n;
    lease_fill(l, c, s, nkeys, renew_op, release_op, lease_ms, kind, name, namelen);
    return l;
}

void rs__lease_init_built(rs_lease_t *l, rs_client_t *c, const rs_script_t *s, int nkeys,
                          rs_lease_build_fn *build, const char *renew_op,
                          const char *release_op, long lease_ms, const char *kind,
                          char *name)
{
    l->c = c;
    l->script = s;
    l->build = build;
    l->src = NULL; /* build finds its data around l */
    l->nkeys = (short)nkeys;
    l->renew_op = renew_op;
    l->release_op = release_op;
    l->lease_ms = lease_ms;
    l->kind = kind;
    l->name = name;
    atomic_init(&l->refs, 1);
}

void rs__lease_unref(rs_lease_t *l)
{
    if (l && atomic_fetch_sub(&l->refs, 1) == 1)
        free(l); /* its arguments and name too: one block (or the block it starts) */
}

/* The lease's call with op put in front of its arguments; keys come first in Redis's
 * order, so the op is moved after them. */
void rs__lease_argv(const rs_lease_t *l, const char *op, rs_lease_scratch_t *s, rs_argv_t *out)
{
    if (l->build) {
        l->build(l, op, s, out);
    } else {
        rs__argv_init(out);
        size_t len;
        for (int i = 1; i <= l->nkeys; i++) {
            const char *a = rs__lease_arg(l, i, &len);
            rs__argv_ref(out, a, len);
        }
        rs__argv_str(out, op);
        for (int i = l->nkeys + 1; i < l->nargs; i++) {
            const char *a = rs__lease_arg(l, i, &len);
            rs__argv_ref(out, a, len);
        }
    }
    if (l->fence) {
        rs__argv_ref(out, "", 0);
        rs__argv_fmt(out, "%llu", (unsigned long long)l->fence);
    }
}

const char *rs__lease_key(const rs_lease_t *l, rs_lease_scratch_t *s, size_t *len)
{
    if (!l->build) {
        *len = 0;
        return l->nargs > 1 ? rs__lease_arg(l, 1, len) : "";
    }
    rs_argv_t a;
    l->build(l, "", s, &a);
    *len = a.n > 0 ? a.len[0] : 0;
    return a.n > 0 ? a.v[0] : "";
}
