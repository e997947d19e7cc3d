/*
 * bench.c - what the distributed primitives cost uncontended, against what Redis itself
 * costs, and what a mutex handoff costs.
 *
 *   make bench
 *
 * Starts its own throwaway redis-server and measures, in the same run and on the same
 * server (see bench/README.md for what each figure means):
 *
 *   a) raw round trip      EVALSHA of "return 1" on a plain hiredis connection
 *   b) raw scripts         for each primitive (mutex, rmutex, rwlock read, rwlock write,
 *                          semaphore): the two EVALSHAs its uncontended lock + unlock send
 *                          (acq with mode "q", then rel), built by hand, on a plain hiredis
 *                          connection
 *   c) library             that primitive's lock + unlock (one client, handle, thread)
 *   d) handoff             mutex: holder's unlock called -> blocked waiter's lock returns
 *
 * a, b and c are timed per iteration, in interleaved rounds (a, then b and c of each
 * primitive, a, ...) so that slow drift of the machine hits them alike; the figures are
 * medians (p99 shown too). Before timing, each primitive's b is checked against what the
 * library really sends (MONITOR). Exit status: 0 whatever the figures (it is a benchmark), 1
 * on errors.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "internal.h"    /* rs_script_t, for the embedded scripts */
#include "redis_server.h"
#include "redisync.h"
#include "scripts.h"     /* rs_script_mutex, rs_script_rwlock, rs_script_semaphore */

/* ----- settings ------------------------------------------------------------------------ */
#define OPS 20000          /* timed iterations of the mutex's b and c (and 10000 of a) */
#define WARMUP 2000        /* untimed iterations of each before that */
#define OPS_OTHER 8000     /* timed iterations of the other primitives' b and c (4000 of a
                              with each) */
#define WARMUP_OTHER 400
#define ROUNDS 10          /* each primitive's turn comes in this many rounds of ops/ROUNDS */
#define CHUNK 100          /* b and c alternate in chunks of this many iterations */
#define HANDOFFS 500       /* timed handoffs */
#define HANDOFF_WARMUP 20
#define HOLD_US 2000       /* the holder keeps the lock this long before unlocking */

#define TARGET_CB 1.10     /* c / b */
#define TARGET_C2A 1.20    /* c / (2 a) */
#define TARGET_DA 3.0      /* d / a */

/* What mutex.c sends: prefix "rs", client lease 30000 ms, max_waiters 100000. */
#define PREFIX "rs"
#define LEASE "30000"
#define MAXW "100000"

static int g_errors;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_errors++;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ----- samples ------------------------------------------------------------------------- */
typedef struct samples {
    uint64_t *v;
    size_t n, cap;
} samples_t;

static void add(samples_t *s, uint64_t ns)
{
    if (s->n < s->cap)
        s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Quantile q (0..1) in microseconds; sorts the samples. */
static double quantile_us(samples_t *s, double q)
{
    if (!s->n)
        return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_u64);
    size_t i = (size_t)(q * (double)(s->n - 1) + 0.5);
    return (double)s->v[i] / 1e3;
}

static int samples_init(samples_t *s, size_t cap)
{
    s->v = malloc(cap * sizeof *s->v);
    s->n = 0;
    s->cap = cap;
    return s->v ? 0 : -1;
}

/* ----- plain hiredis ------------------------------------------------------------------- */
static redisContext *raw_connect(const ts_server_t *srv)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv->port, tv);
    if (!c || c->err) {
        fail("connect to 127.0.0.1:%d: %s", srv->port, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    redisSetTimeout(c, tv);
    return c;
}

/* SCRIPT LOAD body; writes the SHA into sha[41]. */
static int script_load(redisContext *c, const void *body, size_t len, char *sha)
{
    const char *argv[3] = {"SCRIPT", "LOAD", body};
    size_t lens[3] = {6, 4, len};
    redisReply *r = redisCommandArgv(c, 3, argv, lens);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(sha, r->str, 41);
    else
        fail("SCRIPT LOAD: %s",
             r ? (r->type == REDIS_REPLY_ERROR ? r->str : "odd reply") : c->errstr);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* The value of "field:value" in an INFO reply (copied into out), or NULL. */
static const char *info_field(const char *info, const char *field, char *out, size_t len)
{
    size_t fl = strlen(field);
    for (const char *p = info; p && *p;) {
        if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
            const char *v = p + fl + 1;
            size_t n = strcspn(v, "\r\n");
            if (n >= len)
                n = len - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return out;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return NULL;
}

/* INFO commandstats as name -> calls and usec. */
#define MAXCMDS 64
typedef struct cmdstats {
    int n;
    char name[MAXCMDS][48];
    long long calls[MAXCMDS];
    long long usec[MAXCMDS];
} cmdstats_t;

static int read_cmdstats(redisContext *c, cmdstats_t *st)
{
    memset(st, 0, sizeof *st);
    redisReply *r = redisCommand(c, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        fail("INFO commandstats: %s", r ? "odd reply" : c->errstr);
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (const char *p = r->str; p && *p && st->n < MAXCMDS;) {
        if (strncmp(p, "cmdstat_", 8) == 0) {
            const char *colon = strchr(p, ':');
            const char *calls = colon ? strstr(colon, "calls=") : NULL;
            const char *usec = colon ? strstr(colon, "usec=") : NULL;
            if (colon && calls && usec && (size_t)(colon - p - 8) < sizeof st->name[0]) {
                memcpy(st->name[st->n], p + 8, (size_t)(colon - p - 8));
                st->name[st->n][colon - p - 8] = '\0';
                st->calls[st->n] = atoll(calls + 6);
                st->usec[st->n] = atoll(usec + 5);
                st->n++;
            }
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    freeReplyObject(r);
    return 0;
}

static long long stat_of(const cmdstats_t *st, const char *name, int usec)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->name[i], name) == 0)
            return usec ? st->usec[i] : st->calls[i];
    return 0;
}

/* Whether script s calls Redis command `name` (lowercase): redis.call('NAME' or
 * redis.pcall('NAME' appears in its body. */
static int script_calls(const rs_script_t *s, const char *name)
{
    static const char *const forms[] = {"redis.call('", "redis.pcall('"};
    const char *body = (const char *)s->body, *end = body + s->len;
    size_t nl = strlen(name);
    for (int f = 0; f < 2; f++) {
        size_t fl = strlen(forms[f]);
        for (const char *p = body; p + fl + nl < end; p++) {
            if (memcmp(p, forms[f], fl) != 0)
                continue;
            const char *q = p + fl;
            size_t i = 0;
            while (i < nl && (q[i] | 0x20) == name[i])
                i++;
            if (i == nl && q[nl] == '\'')
                return 1;
        }
    }
    return 0;
}

/* ----- a) raw round trip ---------------------------------------------------------------- */
typedef struct raw {
    redisContext *c;
    char one_sha[41];   /* "return 1" */
    char floor_sha[41]; /* FLOOR_LUA */
    char null_sha[41];  /* NULL_LUA */
    char token[64];
    char idpfx[24];
    unsigned long long acq_no;
} raw_t;

static int op_raw_rtt(raw_t *r)
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
static const char FLOOR_LUA[] =
    "if ARGV[1] == 'acq' then\n"
    "  if not redis.call('SET', KEYS[1], ARGV[2], 'NX', 'PX', ARGV[3]) then return 0 end\n"
    "  return redis.call('INCR', KEYS[2])\n"
    "end\n"
    "if redis.call('GET', KEYS[1]) == ARGV[2] then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

static int op_floor(raw_t *r)
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
static const char NULL_LUA[] =
    "if ARGV[1] == 'acq' then return {1, '1790000000000000', tonumber(ARGV[4])} end\n"
    "return 1\n";

/* ----- the primitives: b (raw) and c (library) of each ------------------------------- */
/* One row per primitive: its script, its keys and its own arguments, as the library builds
 * them (keys.c: PREFIX:{NAME}:KIND and PREFIX:{NAME}:KIND:SUFFIX; the suffixes and ARGV[9..]
 * are each primitive's, primitives/NAME/NAME.c), and the library call c times. Written here
 * by hand on purpose: main() checks them against the library's real traffic (MONITOR). */
#define NAME "bench:lib" /* one name; the kind tells the primitives' keys apart */
#define KEYS_MAX 6
#define EXTRA_MAX 2

typedef struct prim prim_t;
struct prim {
    const char *label;         /* row name */
    const char *lib_desc;      /* what c calls */
    const rs_script_t *script; /* the embedded script the library runs */
    const char *kind;
    const char *suffixes[KEYS_MAX]; /* keys 2.. (NULL-terminated) */
    const char *extra[EXTRA_MAX + 1]; /* ARGV[9..] (NULL-terminated) */
    int ops, warmup;
    int (*lib)(prim_t *p);
    /* filled in by main() */
    void *h;                   /* the library's handle */
    char sha[41];
    int nkeys;
    char nkeys_str[4];
    char key[KEYS_MAX][64];
    size_t klen[KEYS_MAX];
    samples_t sa, sb, sc, se; /* sa: a, measured between this primitive's b and c */
    long long evalsha_usec, evalsha_calls; /* server time of b's EVALSHAs */
    double a50, b50, b99, c50, c99, e50;
};

static int lib_mutex(prim_t *p)
{
    int rc = rs_mutex_lock(p->h);
    if (rc == 0)
        rc = rs_mutex_unlock(p->h);
    return rc;
}

static int lib_rmutex(prim_t *p)
{
    int rc = rs_rmutex_lock(p->h);
    if (rc == 0)
        rc = rs_rmutex_unlock(p->h);
    return rc;
}

static int lib_rwlock_rd(prim_t *p)
{
    int rc = rs_rwlock_rdlock(p->h);
    if (rc == 0)
        rc = rs_rwlock_unlock(p->h);
    return rc;
}

static int lib_rwlock_wr(prim_t *p)
{
    int rc = rs_rwlock_wrlock(p->h);
    if (rc == 0)
        rc = rs_rwlock_unlock(p->h);
    return rc;
}

static int lib_sem(prim_t *p)
{
    int rc = rs_sem_wait(p->h);
    if (rc == 0)
        rc = rs_sem_post(p->h);
    return rc;
}

/* The mutex first: the d figure and the context lines are about it. rmutex runs the mutex's
 * script under its own kind; the rwlock's mode and the semaphore's permits wanted and initial
 * size (1, as rs_sem_init(..., 1) below) are ARGV[9..]. */
static prim_t g_prims[] = {
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
#define NPRIMS (int)(sizeof g_prims / sizeof g_prims[0])

static int op_lib(prim_t *p)
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
#define RAW_ARGC_MAX 24
#define ARG_TOKEN(p) (3 + (p)->nkeys + 1) /* argv index of ARGV[2] */
#define ARG_ACQID(p) (3 + (p)->nkeys + 2)

static int raw_argv(const raw_t *r, const prim_t *p, const char *sha, const char *op,
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
static int op_raw(raw_t *r, const prim_t *p, const char *sha)
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
typedef struct cmdline {
    int argc;
    char arg[RAW_ARGC_MAX][160];
} cmdline_t;

static int parse_monitor(const char *line, cmdline_t *out)
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
static int id_shaped(const char *s, size_t nhex, int secret)
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
static int check_b_matches_library(const ts_server_t *srv, raw_t *r, prim_t *p)
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

/* ----- d) handoff ping-pong ------------------------------------------------------------ */
enum { ST_FREE, ST_HELD, ST_ABOUT_TO_LOCK, ST_STOP };

typedef struct pingpong {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
    int rounds;               /* handoffs to run in this session */
    rs_mutex_t *holder, *waiter; /* handles on two different clients, one name */
    redisContext *probe;      /* holder's plain connection, to see the waiter queued */
    const char *qkey;
    _Atomic uint64_t t0;      /* just before the holder calls unlock */
    samples_t handoff, unlock_call;
    long late_queue;          /* rounds where the waiter was not queued after HOLD_US */
    long long probes;         /* ZCARDs sent on probe */
    int err;
} pingpong_t;

static void set_state(pingpong_t *p, int s)
{
    pthread_mutex_lock(&p->mu);
    if (p->state != ST_STOP) /* a stop sticks */
        p->state = s;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Waits for state s (or STOP); returns the state found. */
static int wait_state(pingpong_t *p, int s)
{
    pthread_mutex_lock(&p->mu);
    while (p->state != s && p->state != ST_STOP)
        pthread_cond_wait(&p->cv, &p->mu);
    int got = p->state;
    pthread_mutex_unlock(&p->mu);
    return got;
}

static long long queue_len(pingpong_t *p)
{
    redisReply *r = redisCommand(p->probe, "ZCARD %s", p->qkey);
    p->probes++;
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

static void *waiter_main(void *arg)
{
    pingpong_t *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        if (wait_state(p, ST_HELD) == ST_STOP)
            break;
        set_state(p, ST_ABOUT_TO_LOCK);
        int rc = rs_mutex_lock(p->waiter);
        uint64_t t1 = now_ns();
        if (rc) {
            fail("waiter rs_mutex_lock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
        add(&p->handoff, t1 - atomic_load(&p->t0));
        rc = rs_mutex_unlock(p->waiter);
        if (rc) {
            fail("waiter rs_mutex_unlock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
        set_state(p, ST_FREE);
    }
    return NULL;
}

/* Runs p->rounds handoffs: the calling thread holds, a new thread waits. */
static int run_pingpong(pingpong_t *p)
{
    p->state = ST_FREE;
    pthread_t w;
    if (pthread_create(&w, NULL, waiter_main, p) != 0) {
        fail("pthread_create");
        return -1;
    }
    for (int i = 0; i < p->rounds; i++) {
        if (wait_state(p, ST_FREE) == ST_STOP)
            break;
        int rc = rs_mutex_lock(p->holder); /* uncontended: the waiter has unlocked */
        if (rc) {
            fail("holder rs_mutex_lock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
        set_state(p, ST_HELD);
        if (wait_state(p, ST_ABOUT_TO_LOCK) == ST_STOP)
            break;
        usleep(HOLD_US);
        /* the waiter must be blocked in Redis's queue before the clock starts */
        int late = 0;
        for (int k = 0; k < 1000 && queue_len(p) != 1; k++, late = 1)
            usleep(100);
        p->late_queue += late;
        atomic_store(&p->t0, now_ns());
        rc = rs_mutex_unlock(p->holder);
        uint64_t t2 = now_ns();
        add(&p->unlock_call, t2 - atomic_load(&p->t0));
        if (rc) {
            fail("holder rs_mutex_unlock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
    }
    pthread_join(w, NULL);
    return p->err ? -1 : 0;
}

/* ----- main ---------------------------------------------------------------------------- */
static rs_client_t *open_client(const ts_server_t *srv)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = srv->url;
    rs_client_t *c;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        fail("rs_client_open: %s (%s)", rs_strerror(rc), rs_client_lasterror(NULL));
        return NULL;
    }
    return c;
}

/* The 1-minute load average, or -1: other work on the machine moves every figure. */
static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static const char *verdict(double v, double target)
{
    return v <= target ? "PASS" : "MISS";
}

/* Key i of p as keys.c builds it for the name NAME and the client prefix PREFIX. */
static void prim_keys(prim_t *p)
{
    p->nkeys = 1;
    snprintf(p->key[0], sizeof p->key[0], "%s:{%s}:%s", PREFIX, NAME, p->kind);
    for (int i = 0; p->suffixes[i]; i++, p->nkeys++)
        snprintf(p->key[p->nkeys], sizeof p->key[0], "%s:%s", p->key[0], p->suffixes[i]);
    for (int i = 0; i < p->nkeys; i++)
        p->klen[i] = strlen(p->key[i]);
    snprintf(p->nkeys_str, sizeof p->nkeys_str, "%d", p->nkeys);
}

static int prim_handle(prim_t *p, rs_client_t *c)
{
    if (p->lib == lib_mutex)
        return rs_mutex_init((rs_mutex_t **)&p->h, c, NAME);
    if (p->lib == lib_rmutex)
        return rs_rmutex_init((rs_rmutex_t **)&p->h, c, NAME);
    if (p->lib == lib_rwlock_rd || p->lib == lib_rwlock_wr) {
        /* one handle for both rows (they never run at the same time) */
        for (prim_t *q = g_prims; q < p; q++)
            if (q->lib == lib_rwlock_rd || q->lib == lib_rwlock_wr) {
                p->h = q->h;
                return 0;
            }
        return rs_rwlock_init((rs_rwlock_t **)&p->h, c, NAME);
    }
    return rs_sem_init((rs_sem_t **)&p->h, c, NAME, 1);
}

static void prim_destroy(prim_t *p)
{
    if (!p->h)
        return;
    if (p->lib == lib_mutex)
        rs_mutex_destroy(p->h);
    else if (p->lib == lib_rmutex)
        rs_rmutex_destroy(p->h);
    else if (p->lib == lib_rwlock_rd || p->lib == lib_rwlock_wr) {
        for (prim_t *q = p + 1; q < g_prims + NPRIMS; q++)
            if (q->h == p->h)
                q->h = NULL; /* shared: destroyed once */
        rs_rwlock_destroy(p->h);
    } else
        rs_sem_destroy(p->h);
    p->h = NULL;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    ts_server_t srv;
    if (ts_server_start(&srv, NULL) != 0) {
        fprintf(stderr, "bench: cannot start redis-server\n");
        return 1;
    }
    uint64_t start = now_ns();
    int status = 1;
    raw_t raw;
    memset(&raw, 0, sizeof raw);
    rs_client_t *c1 = NULL, *c2 = NULL;
    rs_mutex_t *mh = NULL, *mw = NULL;
    redisContext *probe = NULL;
    samples_t sa = {0}, sa_idle = {0};
    samples_t sf = {0}, sfa = {0}; /* f, and the a measured next to it */
    pingpong_t pp;
    memset(&pp, 0, sizeof pp);
    pthread_mutex_init(&pp.mu, NULL);
    pthread_cond_init(&pp.cv, NULL);
    prim_t *const mutex = &g_prims[0];

    /* --- setup --- */
    raw.c = raw_connect(&srv);
    probe = raw_connect(&srv);
    if (!raw.c || !probe)
        goto out;
    char version[64] = "?";
    redisReply *r = redisCommand(raw.c, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING)
        info_field(r->str, "redis_version", version, sizeof version);
    if (r)
        freeReplyObject(r);
    if (script_load(raw.c, FLOOR_LUA, sizeof FLOOR_LUA - 1, raw.floor_sha))
        goto out;
    if (script_load(raw.c, "return 1", 8, raw.one_sha) ||
        script_load(raw.c, NULL_LUA, sizeof NULL_LUA - 1, raw.null_sha))
        goto out;
    /* keys, token and acquisition ids shaped exactly like the library's (keys.c, hold.c) */
    /* b runs on c's primitive (never at the same time), so the keys are the library's own */
    for (int i = 0; i < NPRIMS; i++) {
        prim_t *p = &g_prims[i];
        if (script_load(raw.c, p->script->body, p->script->len, p->sha))
            goto out;
        if (strcmp(p->sha, p->script->sha) != 0) {
            fail("SHA of %s: Redis says %s, the build says %s", p->script->name, p->sha,
                 p->script->sha);
            goto out;
        }
        prim_keys(p);
    }
    snprintf(raw.token, sizeof raw.token, "%s:%x", "0123456789abcdef0123456789abcdef", 1);
    snprintf(raw.idpfx, sizeof raw.idpfx, "%s", "0123456789abcdef");

    c1 = open_client(&srv);
    c2 = open_client(&srv);
    if (!c1 || !c2)
        goto out;
    for (int i = 0; i < NPRIMS; i++)
        if (prim_handle(&g_prims[i], c1)) {
            fail("%s handle: %s", g_prims[i].label, rs_client_lasterror(c1));
            goto out;
        }
    if (rs_mutex_init(&mh, c1, "bench:handoff") || rs_mutex_init(&mw, c2, "bench:handoff")) {
        fail("rs_mutex_init: %s", rs_client_lasterror(c1));
        goto out;
    }
    int sa_ops = 0;
    for (int i = 0; i < NPRIMS; i++) {
        prim_t *p = &g_prims[i];
        if (samples_init(&p->sa, (size_t)p->ops / 2) || samples_init(&p->sb, (size_t)p->ops) ||
            samples_init(&p->sc, (size_t)p->ops) || samples_init(&p->se, (size_t)p->ops)) {
            fail("out of memory");
            goto out;
        }
        sa_ops += p->ops / 2;
    }
    if (samples_init(&sa, (size_t)sa_ops) || samples_init(&sa_idle, HANDOFFS) ||
        samples_init(&sf, OPS_OTHER) || samples_init(&sfa, OPS_OTHER / 2) ||
        samples_init(&pp.handoff, HANDOFFS + HANDOFF_WARMUP) ||
        samples_init(&pp.unlock_call, HANDOFFS + HANDOFF_WARMUP)) {
        fail("out of memory");
        goto out;
    }

    printf("redisync %s bench: redis-server %s at %s, %ld CPUs online, load average %.2f\n",
           rs_version(), version, srv.url, sysconf(_SC_NPROCESSORS_ONLN), loadavg());
    printf("b, c, e: %d timed iterations each for the mutex (after %d warm-up), %d for the "
           "other primitives (after %d);\n%d rounds, each running for every primitive a chunk "
           "of a (half as many) then b, c and e\nin turn in chunks of %d; d: %d handoffs after "
           "%d warm-up\n\n", OPS, WARMUP, OPS_OTHER, WARMUP_OTHER, ROUNDS, CHUNK, HANDOFFS,
           HANDOFF_WARMUP);

    /* --- a, b, c --- */
    for (int i = 0; i < WARMUP; i++)
        if (op_raw_rtt(&raw))
            goto out;
    for (int k = 0; k < NPRIMS; k++)
        for (int i = 0; i < g_prims[k].warmup; i++)
            if (op_raw(&raw, &g_prims[k], g_prims[k].sha) ||
                op_raw(&raw, &g_prims[k], raw.null_sha) || op_lib(&g_prims[k]))
                goto out;
    int nchecked = 0;
    for (int k = 0; k < NPRIMS; k++)
        nchecked += check_b_matches_library(&srv, &raw, &g_prims[k]) == 0;
    if (nchecked == NPRIMS)
        printf("b checked: for each primitive, its two EVALSHAs match, argument for argument, "
               "what the library sent (MONITOR)\n\n");
    else
        printf("WARNING: %d of %d b rows do not send what the library sends (see above): fix "
               "bench.c\n\n", NPRIMS - nchecked, NPRIMS);
    cmdstats_t st0, st1, st2, st3;
    long long one_usec = 0, one_calls = 0; /* server time of a's EVALSHAs ("return 1") */
    /* Per round and primitive: a chunk of a, then b and c in alternating chunks of CHUNK.
     * Each operation runs back to back with itself (as a caller's loop would), and any change
     * of the machine's regime (bench/README.md) falls on b and c alike. */
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < NPRIMS; k++) {
            prim_t *p = &g_prims[k];
            int per_round = p->ops / ROUNDS;
            if (read_cmdstats(raw.c, &st0))
                goto out;
            for (int i = 0; i < per_round / 2; i++) {
                uint64_t t = now_ns();
                if (op_raw_rtt(&raw))
                    goto out;
                uint64_t dt = now_ns() - t;
                add(&sa, dt);
                add(&p->sa, dt);
            }
            if (read_cmdstats(raw.c, &st1))
                goto out;
            one_usec += stat_of(&st1, "evalsha", 1) - stat_of(&st0, "evalsha", 1);
            one_calls += stat_of(&st1, "evalsha", 0) - stat_of(&st0, "evalsha", 0);
            for (int done = 0; done < per_round; done += CHUNK) {
                int n = per_round - done < CHUNK ? per_round - done : CHUNK;
                if (read_cmdstats(raw.c, &st0))
                    goto out;
                for (int i = 0; i < n; i++) {
                    uint64_t t = now_ns();
                    if (op_raw(&raw, p, p->sha))
                        goto out;
                    add(&p->sb, now_ns() - t);
                }
                if (read_cmdstats(raw.c, &st1))
                    goto out;
                p->evalsha_usec += stat_of(&st1, "evalsha", 1) - stat_of(&st0, "evalsha", 1);
                p->evalsha_calls += stat_of(&st1, "evalsha", 0) - stat_of(&st0, "evalsha", 0);
                for (int i = 0; i < n; i++) {
                    uint64_t t = now_ns();
                    if (op_lib(p))
                        goto out;
                    add(&p->sc, now_ns() - t);
                }
                for (int i = 0; i < n; i++) {
                    uint64_t t = now_ns();
                    if (op_raw(&raw, p, raw.null_sha))
                        goto out;
                    add(&p->se, now_ns() - t);
                }
            }
        }
        /* f, with its own chunk of a before it, as a primitive's b */
        for (int i = 0; i < OPS_OTHER / ROUNDS / 2; i++) {
            uint64_t t = now_ns();
            if (op_raw_rtt(&raw))
                goto out;
            add(&sfa, now_ns() - t);
        }
        for (int i = 0; i < OPS_OTHER / ROUNDS; i++) {
            uint64_t t = now_ns();
            if (op_floor(&raw))
                goto out;
            add(&sf, now_ns() - t);
        }
    }

    /* --- a after HOLD_US of idleness, as the holder's unlock in d runs --- */
    for (int i = 0; i < HANDOFFS; i++) {
        usleep(HOLD_US);
        uint64_t t = now_ns();
        if (op_raw_rtt(&raw))
            goto out;
        add(&sa_idle, now_ns() - t);
    }

    /* --- d --- */
    pp.holder = mh;
    pp.waiter = mw;
    pp.probe = probe;
    pp.qkey = PREFIX ":{bench:handoff}:mutex:q";
    pp.rounds = HANDOFF_WARMUP;
    if (run_pingpong(&pp))
        goto out;
    pp.handoff.n = pp.unlock_call.n = 0;
    pp.late_queue = 0;
    pp.probes = 0;
    if (read_cmdstats(raw.c, &st2))
        goto out;
    pp.rounds = HANDOFFS;
    if (run_pingpong(&pp))
        goto out;
    if (read_cmdstats(raw.c, &st3))
        goto out;

    /* --- figures --- */
    double a50 = quantile_us(&sa, 0.5), a99 = quantile_us(&sa, 0.99);
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        p->a50 = quantile_us(&p->sa, 0.5);
        p->b50 = quantile_us(&p->sb, 0.5), p->b99 = quantile_us(&p->sb, 0.99);
        p->c50 = quantile_us(&p->sc, 0.5), p->c99 = quantile_us(&p->sc, 0.99);
        p->e50 = quantile_us(&p->se, 0.5);
    }
    double d50 = quantile_us(&pp.handoff, 0.5), d99 = quantile_us(&pp.handoff, 0.99);
    double u50 = quantile_us(&pp.unlock_call, 0.5);
    double ai50 = quantile_us(&sa_idle, 0.5);
    long acquisitions = 2L * HANDOFFS;
    long long evalsha = stat_of(&st3, "evalsha", 0) - stat_of(&st2, "evalsha", 0);

    printf("%-62s %9s %9s\n", "figure (per iteration)", "median", "p99");
    printf("%-62s %6.1f us %6.1f us\n", "a) raw round trip: EVALSHA \"return 1\"", a50, a99);
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        char what[96];
        snprintf(what, sizeof what, "b) raw %s scripts: EVALSHA acq \"q\" + EVALSHA rel",
             p->label);
        printf("%-62s %6.1f us %6.1f us\n", what, p->b50, p->b99);
        snprintf(what, sizeof what, "c) %s", p->lib_desc);
        printf("%-62s %6.1f us %6.1f us\n", what, p->c50, p->c99);
        snprintf(what, sizeof what, "e) %s's two calls to a script that does nothing",
                 p->label);
        printf("%-62s %6.1f us %6.1f us\n", what, p->e50, quantile_us(&p->se, 0.99));
    }
    printf("%-62s %6.1f us %6.1f us\n", "d) handoff: holder calls unlock -> waiter's lock returns",
           d50, d99);

    printf("\nuncontended lock+unlock per primitive (medians; a is each row's own: the round "
           "trips measured\nbetween that primitive's b and c iterations)\n");
    printf("%-10s %8s %8s %8s %7s %6s %9s %6s %9s %12s\n", "primitive", "a", "b", "c", "c / b",
           "<=1.10", "c / (2 a)", "<=1.20", "b / (2 a)", "script/call");
    int pass_cb = 0, pass_c2a = 0;
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        double cb = p->c50 / p->b50, c2a = p->c50 / (2 * p->a50);
        double script_us = p->evalsha_calls ? (double)p->evalsha_usec / (double)p->evalsha_calls
                                            : 0;
        pass_cb += cb <= TARGET_CB;
        pass_c2a += c2a <= TARGET_C2A;
        printf("%-10s %5.1f us %5.1f us %5.1f us %7.3f %6s %9.3f %6s %9.3f %9.1f us\n", p->label,
               p->a50, p->b50, p->c50, cb, verdict(cb, TARGET_CB), c2a, verdict(c2a, TARGET_C2A),
               p->b50 / (2 * p->a50), script_us);
    }
    double f50 = quantile_us(&sf, 0.5), fa50 = quantile_us(&sfa, 0.5);
    printf("%-10s %5.1f us %5.1f us %8s %7s %6s %9s %6s %9.3f\n", "floor (f)", fa50, f50, "-",
           "-", "", "-", "", f50 / (2 * fa50));
    printf("c / b <= 1.10: %d of %d PASS; c / (2 a) <= 1.20: %d of %d PASS\n", pass_cb, NPRIMS,
           pass_c2a, NPRIMS);
    printf("(f: the floor, the least a fenced lease lock sends: EVALSHA of SET NX PX + INCR, "
           "then of GET + DEL;\n no queue, no tombstone; its f / (2 a) is in the b / (2 a) "
           "column)\n");
    printf("(script/call: the server time of one EVALSHA of b, INFO commandstats usec / calls; "
           "b / (2 a) is what\n the scripts alone cost in round trips, the floor under c / (2 a))"
           "\n");
    /* how much of the 0.2 round trips the call itself takes, before any script work */
    printf("\nthe call alone (e: b's two EVALSHAs, same arguments, to a script that does "
           "nothing)\n");
    printf("%-10s %8s %9s %16s %16s\n", "primitive", "e", "e / (2 a)", "(c - b + e)/(2 a)",
           "(b - e)/(2 a)");
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        printf("%-10s %5.1f us %9.3f %16.3f %16.3f\n", p->label, p->e50, p->e50 / (2 * p->a50),
               (p->c50 - p->b50 + p->e50) / (2 * p->a50), (p->b50 - p->e50) / (2 * p->a50));
    }
    printf("((c - b + e) / (2 a): c / (2 a) if the scripts did no work at all, the least this "
           "call shape and\n the library allow; (b - e) / (2 a): the scripts' own work, in round "
           "trips)\n");
    /* how fast the server runs scripts today: the verdicts above move with it
     * (docs/performance.md, "Where the time goes") */
    printf("server time of a's EVALSHA \"return 1\": %.2f us per call (how fast the server "
           "runs scripts:\n the c / (2 a) verdicts move with it; docs/performance.md)\n",
           one_calls ? (double)one_usec / (double)one_calls : 0.0);

    printf("\n%-40s %8s %9s  %s\n", "ratio (of medians)", "value", "target", "result");
    printf("%-40s %8.2f %9s  %s\n", "d / a      handoff in round trips", d50 / a50, "<= 3",
           verdict(d50 / a50, TARGET_DA));
    printf("\ncontext:\n");
    printf("  raw round trip after %d us idle (as the holder's unlock in d runs): %.1f us; "
           "d / that = %.2f\n", HOLD_US, ai50, d50 / ai50);
    long long d_usec = stat_of(&st3, "evalsha", 1) - stat_of(&st2, "evalsha", 1);
    printf("  the holder's rs_mutex_unlock call itself took %.1f us (median) during d; mutex.lua "
           "ran %.1f us per call there\n", u50, evalsha ? (double)d_usec / (double)evalsha : 0.0);
    if (pp.late_queue)
        printf("  in %ld of %d handoffs the waiter was not queued yet after %d us; the clock "
               "started only once it was\n", pp.late_queue, HANDOFFS, HOLD_US);
    /* Redis 7 counts the scripts' own redis.call()s in commandstats too: whatever else shows
     * up in the window is a command of a name mutex.lua uses, or one sent outside the scripts */
    long long inner = 0, outside = 0;
    char outside_names[256] = "";
    for (int i = 0; i < st3.n; i++) {
        const char *name = st3.name[i];
        long long d = st3.calls[i] - stat_of(&st2, name, 0);
        if (strcmp(name, "zcard") == 0)
            d -= pp.probes;
        if (d <= 0 || strcmp(name, "evalsha") == 0 || strcmp(name, "info") == 0)
            continue;
        if (script_calls(mutex->script, name)) {
            inner += d;
        } else {
            outside += d;
            size_t u = strlen(outside_names);
            snprintf(outside_names + u, sizeof outside_names - u, " %s:%lld", name, d);
        }
    }
    printf("  commands per acquisition in the contended ping-pong: %.2f (%lld EVALSHA / %ld "
           "acquisitions, holder's and waiter's)\n", (double)evalsha / (double)acquisitions,
           evalsha, acquisitions);
    printf("    EVALSHA calls only (INFO commandstats delta over the window, watchdog renewals "
           "included);\n"
           "    left out: the redis.call()s inside the scripts, which Redis 7 also counts (%.2f "
           "per\n"
           "    acquisition), and the bench's own ZCARD probes and INFO. Other commands sent: "
           "%s\n",
           (double)inner / (double)acquisitions, outside ? outside_names : "none");
    if (outside)
        printf("    (%.2f per acquisition)\n", (double)outside / (double)acquisitions);
    printf("\nbench took %.1f s; load average now %.2f (figures from a busy machine are not "
           "comparable)\n", (double)(now_ns() - start) / 1e9, loadavg());
    status = g_errors ? 1 : 0;

out:
    for (int k = 0; k < NPRIMS; k++) {
        prim_destroy(&g_prims[k]);
        free(g_prims[k].sa.v);
        free(g_prims[k].sb.v);
        free(g_prims[k].sc.v);
        free(g_prims[k].se.v);
    }
    rs_mutex_destroy(mh);
    rs_mutex_destroy(mw);
    rs_client_close(c1);
    rs_client_close(c2);
    if (raw.c)
        redisFree(raw.c);
    if (probe)
        redisFree(probe);
    free(sa.v);
    free(sa_idle.v);
    free(sf.v);
    free(sfa.v);
    free(pp.handoff.v);
    free(pp.unlock_call.v);
    ts_server_stop(&srv);
    return status;
}
