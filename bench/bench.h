/*
 * bench.h - what the files of redisync-bench (bench.c, bench_raw.c, bench_util.c) share: the run's constants, the
 * sample, commandstats, raw-connection and primitive types, and the functions one file
 * calls in another. bench.c has the overview (bench/README.md the figures).
 */
#ifndef RS_BENCH_H
#define RS_BENCH_H

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

/* ----- samples ------------------------------------------------------------------------- */
typedef struct samples {
    uint64_t *v;
    size_t n, cap;
} samples_t;

/* INFO commandstats as name -> calls and usec. */
#define MAXCMDS 64
typedef struct cmdstats {
    int n;
    char name[MAXCMDS][48];
    long long calls[MAXCMDS];
    long long usec[MAXCMDS];
} cmdstats_t;

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

#define RAW_ARGC_MAX 24
#define ARG_TOKEN(p) (3 + (p)->nkeys + 1) /* argv index of ARGV[2] */
#define ARG_ACQID(p) (3 + (p)->nkeys + 2)

typedef struct cmdline {
    int argc;
    char arg[RAW_ARGC_MAX][160];
} cmdline_t;

#define NPRIMS g_nprims

extern int g_errors;
extern prim_t g_prims[];
extern const int g_nprims;
extern const char FLOOR_LUA[];
extern const size_t FLOOR_LUA_LEN;
extern const char NULL_LUA[];
extern const size_t NULL_LUA_LEN;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t now_ns(void);
void add(samples_t *s, uint64_t ns);
int cmp_u64(const void *a, const void *b);
double quantile_us(samples_t *s, double q);
int samples_init(samples_t *s, size_t cap);
redisContext *raw_connect(const ts_server_t *srv);
int script_load(redisContext *c, const void *body, size_t len, char *sha);
const char *info_field(const char *info, const char *field, char *out, size_t len);
int read_cmdstats(redisContext *c, cmdstats_t *st);
long long stat_of(const cmdstats_t *st, const char *name, int usec);
int script_calls(const rs_script_t *s, const char *name);
int op_raw_rtt(raw_t *r);
int op_floor(raw_t *r);
int lib_mutex(prim_t *p);
int lib_rmutex(prim_t *p);
int lib_rwlock_rd(prim_t *p);
int lib_rwlock_wr(prim_t *p);
int lib_sem(prim_t *p);
int op_lib(prim_t *p);
int raw_argv(const raw_t *r, const prim_t *p, const char *sha, const char *op,
             const char *acqid, const char **argv, size_t *lens);
int op_raw(raw_t *r, const prim_t *p, const char *sha);
int parse_monitor(const char *line, cmdline_t *out);
int id_shaped(const char *s, size_t nhex, int secret);
int check_b_matches_library(const ts_server_t *srv, raw_t *r, prim_t *p);

#endif
