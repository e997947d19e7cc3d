/* bench_raw.c - redisync-bench's raw-call replica: a) the raw round trip, f) the floor, e)
 * the call alone, the primitives' table (b raw, c library), and the check of b against the
 * library's traffic (MONITOR). */

#include "bench.h"



int op_raw_rtt(raw_t *r)
{
    const char *argv[3] = {"EVALSHA", r->one_sha, "0"};
    size_t lens[3] = {7, 40, 1};
    redisReply *rep = redisCommandArgv(r->c, 3, argv, lens);
    int ok = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    if (rep)
        freeReplyObject(rep);
    if (!ok)
        fail("EVALSHA return 1: %s", rep ? "odd reply" : r->c->errstr);
    return ok ? 0 : -1;
}

/* ----- f) the floor: the least a fenced lease lock can send ----------------------------- */
/* What the uncontended target c / (2 a) leaves room for, measured in the same run: the
 * simplest lock with the guarantees a redisync hold must give (a lease, an owner-checked
 * release, a fencing token) as two scripts: SET NX PX and INCR of a counter to take it, GET,
 * compare and DEL to release it. Without the token this is redis-py's Lock. None of the rest
 * of a redisync hold: no FIFO queue to respect, no token floor from the server clock, no
 * release tombstone, no re-entry count. bench/README.md, "The floor". */
const char FLOOR_LUA[] =
    "if ARGV[1] == 'acq' then\n"
    "  if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then return 0 end\n"
    "  return redis.call('INCR', KEYS[2])\n"
    "end\n"
    "if redis.call('GET', KEYS[1]) == ARGV[2] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

int op_floor(raw_t *r)
{
    static const char *const ops[2] = {"acq", "rel"};
    for (int i = 0; i < 2; i++) {
        const char *argv[8] = {"EVALSHA", r->floor_sha, "2", PREFIX ":{bench:floor}:lock",
                               PREFIX ":{bench:floor}:fence", ops[i], r->token, LEASE};
        size_t lens[8];
        for (int j = 0; j < 8; j++)
            lens[j] = strlen(argv[j]);
        redisReply *rep = redisCommandArgv(r->c, 8, argv, lens);
        int ok = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer >= 1;
        if (rep)
            freeReplyObject(rep);
        if (!ok) {
            fail("floor script %s: %s", ops[i], rep ? "not granted / released" : r->c->errstr);
            return -1;
        }
    }
    return 0;
}

/* ----- e) the call alone: a primitive's arguments to a script that does nothing ---------- */
/* Replies as a grant and a release do ({1, fence, lease}, then 1), touches no key. Sent with
 * exactly b's arguments, it prices what Redis and hiredis charge for the call itself
 * (parsing 12 to 17 arguments, KEYS and ARGV for Lua, the reply), which no script can
 * remove: e / (2 a) is the floor under b / (2 a) for that call. bench/README.md. */
const char NULL_LUA[] =
    "if ARGV[1] == 'acq' then return {1, '1790000000000000', tonumber(ARGV[4])} end\n"
    "return 1\n";

/* ----- the primitives: b (raw) and c (library) of each ------------------------------- */
/* One row per primitive: its script, its keys and its own arguments, as the library builds
 * them (keys.c: PREFIX:{NAME}:KIND and PREFIX:{NAME}:KIND:SUFFIX; the suffixes and ARGV[9..]
 * are each primitive's, primitives/NAME/NAME.c), and the library call c times. Written here
 * by hand on purpose: main() checks them against the library's real traffic (MONITOR). */

int lib_mutex(prim_t *p)
{
    int rc = rs_mutex_lock(p->h);
    if (rc == 0)
        rc = rs_mutex_unlock(p->h);
    return rc;
}

int lib_rmutex(prim_t *p)
{
    int rc = rs_rmutex_lock(p->h);
    if (rc == 0)
        rc = rs_rmutex_unlock(p->h);
    return rc;
}

int lib_rwlock_rd(prim_t *p)
{
    int rc = rs_rwlock_rdlock(p->h);
    if (rc == 0)
        rc = rs_rwlock_unlock(p->h);
    return rc;
}

int lib_rwlock_wr(prim_t *p)
{
    int rc = rs_rwlock_wrlock(p->h);
    if (rc == 0)
        rc = rs_rwlock_unlock(p->h);
    return rc;
}

int lib_sem(prim_t *p)
{
    int rc = rs_sem_wait(p->h);
    if (rc == 0)
        rc = rs_sem_post(p->h);
    return rc;
}

/* The mutex first: the d figure and the context lines are about it. rmutex runs the mutex's
 * script under its own kind; the rwlock's mode and the semaphore's permits wanted and initial
 * size (1, as rs_sem_init(..., 1) below) are ARGV[9..]. */
prim_t g_prims[] = {
    {.label = "mutex", .lib_desc = "rs_mutex_lock + rs_mutex_unlock",
     .script = &rs_script_mutex, .kind = "mutex", .suffixes = {"fence", "q", "qi"},
     .ops = OPS, .warmup = WARMUP, .lib = lib_mutex},
    {.label = "rmutex", .lib_desc = "rs_rmutex_lock + rs_rmutex_unlock",
     .script = &rs_script_mutex, .kind = "rmutex", .suffixes = {"fence", "q", "qi"},
     .ops = OPS_OTHER, .warmup = WARMUP_OTHER, .lib = lib_rmutex},
    {.label = "rwlock rd", .lib_desc = "rs_rwlock_rdlock + rs_rwlock_unlock",
     .script = &rs_script_rwlock, .kind = "rwlock", .suffixes = {"fence", "q", "qi", "rd", "ri"},
     .extra = {"r"}, .ops = OPS_OTHER, .warmup = WARMUP_OTHER, .lib = lib_rwlock_rd},
    {.label = "rwlock wr", .lib_desc = "rs_rwlock_wrlock + rs_rwlock_unlock",
     .script = &rs_script_rwlock, .kind = "rwlock", .suffixes = {"fence", "q", "qi", "rd", "ri"},
     .extra = {"w"}, .ops = OPS_OTHER, .warmup = WARMUP_OTHER, .lib = lib_rwlock_wr},
    {.label = "sem", .lib_desc = "rs_sem_wait + rs_sem_post", .script = &rs_script_semaphore,
     .kind = "sem", .suffixes = {"holders", "hi", "fence", "q", "qi"}, .extra = {"1", "1"},
     .ops = OPS_OTHER, .warmup = WARMUP_OTHER, .lib = lib_sem},
};
const int g_nprims = (int)(sizeof g_prims / sizeof g_prims[0]);

int op_lib(prim_t *p)
{
    int rc = p->lib(p);
    if (rc)
        fail("%s: %s", p->lib_desc, rs_strerror(rc));
    return rc ? -1 : 0;
}

/* What an uncontended lock + unlock of p sends (lib/handle.c, rs__call_argv; each script
 * documents the layout):
 *   EVALSHA sha NKEYS keys...  acq token acqid lease chanprefix "q" maxwaiters qlease extra...
 *   EVALSHA sha NKEYS keys...  rel token acqid lease chanprefix "q" maxwaiters qlease extra...
 * (the release runs with the arguments the hold's lease keeps, which were built with "q").
 * main() checks this against the library's real traffic (MONITOR) before timing. */

int raw_argv(const raw_t *r, const prim_t *p, const char *sha, const char *op,
                    const char *acqid, const char **argv, size_t *lens)
{
    int n = 0;
    argv[n] = "EVALSHA", lens[n++] = 7;
    argv[n] = sha, lens[n++] = 40;
    argv[n] = p->nkeys_str, lens[n++] = strlen(p->nkeys_str);
    for (int i = 0; i < p->nkeys; i++)
        argv[n] = p->key[i], lens[n++] = p->klen[i];
    argv[n] = op, lens[n++] = strlen(op);
    argv[n] = r->token, lens[n++] = strlen(r->token);
    argv[n] = acqid, lens[n++] = strlen(acqid);
    argv[n] = LEASE, lens[n++] = strlen(LEASE);
    argv[n] = PREFIX ":client:", lens[n++] = strlen(PREFIX ":client:");
    /* acq: "t", try without queueing: a client whose subscriber is not up (it never waited)
     * tries once before it subscribes (lib/wait.c), so that is what an uncontended lock
     * sends; the release keeps the mode its hold was made with ("q") */
    argv[n] = strcmp(op, "acq") == 0 ? "t" : "q", lens[n++] = 1;
    argv[n] = MAXW, lens[n++] = strlen(MAXW);
    argv[n] = LEASE, lens[n++] = strlen(LEASE);
    for (int i = 0; p->extra[i]; i++)
        argv[n] = p->extra[i], lens[n++] = strlen(p->extra[i]);
    return n;
}

/* b: acq (granted, the primitive being free) then rel, with a fresh acquisition id, sent to
 * the primitive's script (sha = p->sha) or, for e, to NULL_LUA (sha = r->null_sha). */
int op_raw(raw_t *r, const prim_t *p, const char *sha)
{
    char acqid[48];
    snprintf(acqid, sizeof acqid, "%s:%llx.%016llx", r->idpfx, r->acq_no,
             r->acq_no * 0x9e3779b97f4a7c15ULL);
    r->acq_no++;
    const char *argv[RAW_ARGC_MAX];
    size_t lens[RAW_ARGC_MAX];
    int n = raw_argv(r, p, sha, "acq", acqid, argv, lens);
    redisReply *rep = redisCommandArgv(r->c, n, argv, lens);
    int ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 &&
             rep->element[0]->type == REDIS_REPLY_INTEGER && rep->element[0]->integer == 1;
    if (!ok) {
        fail("raw %s acq: %s", p->label, !rep ? r->c->errstr
                                         : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                          : "not granted");
        if (rep)
            freeReplyObject(rep);
        return -1;
    }
    freeReplyObject(rep);

    n = raw_argv(r, p, sha, "rel", acqid, argv, lens);
    rep = redisCommandArgv(r->c, n, argv, lens);
    ok = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
    if (!ok)
        fail("raw %s rel: %s", p->label, !rep ? r->c->errstr
                                          : rep->type == REDIS_REPLY_ERROR ? rep->str
                                                                           : "not released");
    if (rep)
        freeReplyObject(rep);
    return ok ? 0 : -1;
}

/* ----- checking b against the library's traffic ---------------------------------------- */
/* One MONITOR line, e.g. 1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" ... , split
 * into its (unescaped) arguments. Returns argc, or -1. */

int parse_monitor(const char *line, cmdline_t *out)
{
    const char *p = strstr(line, "] ");
    if (!p)
        return -1;
    p += 2;
    out->argc = 0;
    while (*p == '"') {
        if (out->argc == RAW_ARGC_MAX)
            return -1;
        char *w = out->arg[out->argc], *wend = w + sizeof out->arg[0] - 1;
        p++;
        while (*p && *p != '"' && w < wend) {
            if (*p == '\\' && p[1]) {
                p++;
                if (*p == 'x' && p[1] && p[2]) {
                    char hx[3] = {p[1], p[2], 0};
                    *w++ = (char)strtol(hx, NULL, 16);
                    p += 3;
                    continue;
                }
                *w++ = *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p == 't' ? '\t' : *p;
                p++;
            } else {
                *w++ = *p++;
            }
        }
        *w = '\0';
        if (*p != '"')
            return -1;
        p++;
        out->argc++;
        if (*p == ' ')
            p++;
    }
    return out->argc;
}

/* "HEX{nhex}:HEX+", and with secret "HEX{nhex}:HEX+.HEX{16}" (an acquisition id, lib/hold.c) */
int id_shaped(const char *s, size_t nhex, int secret)
{
    size_t i = strspn(s, "0123456789abcdef");
    if ((nhex && i != nhex) || !i || s[i] != ':')
        return 0;
    const char *t = s + i + 1;
    size_t j = strspn(t, "0123456789abcdef");
    if (!j)
        return 0;
    if (!secret)
        return t[j] == '\0';
    return t[j] == '.' && strspn(t + j + 1, "0123456789abcdef") == 16 && t[j + 17] == '\0';
}

/* Runs p's library lock + unlock once under MONITOR and compares the two EVALSHAs it sends
 * with b's, argument by argument (the owner token and the acquisition id only by shape: they
 * are per client and per acquisition). 0 when they match. */
int check_b_matches_library(const ts_server_t *srv, raw_t *r, prim_t *p)
{
    redisContext *mon = raw_connect(srv);
    if (!mon)
        return -1;
    redisReply *rep = redisCommand(mon, "MONITOR");
    int ok = rep && rep->type == REDIS_REPLY_STATUS;
    if (rep)
        freeReplyObject(rep);
    if (!ok || op_lib(p)) {
        redisFree(mon);
        fail("MONITOR check of %s: could not run it", p->label);
        return -1;
    }
    cmdline_t got[2];
    int ngot = 0;
    while (ngot < 2) {
        void *v = NULL;
        if (redisGetReply(mon, &v) != REDIS_OK || !v) {
            fail("MONITOR check of %s: saw %d of the 2 EVALSHAs (%s)", p->label, ngot,
                 mon->errstr);
            redisFree(mon);
            return -1;
        }
        rep = v;
        cmdline_t cl;
        if (rep->type == REDIS_REPLY_STATUS && parse_monitor(rep->str, &cl) > 0 &&
            strcasecmp(cl.arg[0], "EVALSHA") == 0)
            got[ngot++] = cl;
        freeReplyObject(rep);
    }
    redisFree(mon);

    static const char *const ops[2] = {"acq", "rel"};
    int mismatches = 0;
    for (int k = 0; k < 2; k++) {
        const char *argv[RAW_ARGC_MAX];
        size_t lens[RAW_ARGC_MAX];
        int n = raw_argv(r, p, p->sha, ops[k], "0123456789abcdef:1.0123456789abcdef", argv,
                         lens);
        if (got[k].argc != n) {
            fail("%s: b's %s sends %d arguments, the library's %d", p->label, ops[k], n,
                 got[k].argc);
            mismatches++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            const char *lib = got[k].arg[i];
            int same = i == ARG_TOKEN(p)   ? id_shaped(lib, 32, 0) && strlen(lib) <= lens[i] + 8
                       : i == ARG_ACQID(p) ? id_shaped(lib, 16, 1)
                                           : strlen(lib) == lens[i] &&
                                                 memcmp(lib, argv[i], lens[i]) == 0;
            if (!same) {
                fail("%s: b's %s argument %d is \"%.*s\", the library sends \"%s\"", p->label,
                     ops[k], i, (int)lens[i], argv[i], lib);
                mismatches++;
            }
        }
    }
    return mismatches ? -1 : 0;
}

const size_t FLOOR_LUA_LEN = sizeof FLOOR_LUA - 1;
const size_t NULL_LUA_LEN = sizeof NULL_LUA - 1;
