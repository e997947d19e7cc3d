/*
 * stress.h - what the stress programs in tests/stress/ share (header only: every .c file in
 * this directory is a program with its own main()).
 *
 * The stress programs are plain multi-threaded programs, not Criterion tests: Criterion
 * 2.4.1 crashes under ThreadSanitizer. They run under TSan (make check-tsan) and, scaled
 * down, under valgrind (make check-valgrind). Each one starts its own redis-server
 * (tests/support/redis_server.c) and exits 0 when every check passed, 1 on a wrong result,
 * 2 when its setup failed. Helper threads never exit the process: they record failures with
 * FAILF and main() reports them after joining.
 *
 * Environment knobs:
 *   STRESS_SCALE     percent of the default iteration counts (default 100; check-valgrind
 *                    uses 25)
 *   STRESS_LEASE_MS  lease of every hold (default 300, so the watchdog renews concurrently;
 *                    check-valgrind uses 500: valgrind runs one thread at a time)
 *   STRESS_VERBOSE   1: print progress and warnings, 2: every log line
 *   STRESS_PAUSES    N > 0: the programs that call st_chaos_start pause their redis-server
 *                    (SIGSTOP) N times for 1.5 leases while they run, so holds are lost and
 *                    the RS_ELOST paths of the workers run (not in CI: losses weaken the
 *                    exclusion checks to warnings)
 *   STRESS_TLS       1: the server also listens for TLS (tests/support/tls.c makes the
 *                    certificates with openssl) and every client of st_open goes to
 *                    rediss://127.0.0.1:TLSPORT?tls_ca=..., so the library's OpenSSL path
 *                    runs under the sanitizers too. The plain port stays for the program's
 *                    own admin commands (ts_cmd_*, ts_info_ll, the I7 check of st_finish).
 *   STRESS_CLUSTER   1: a Cluster of three masters (tests/support/cluster.h) instead of the
 *                    one server, every client of st_open on redis-cluster:// (its keys spread
 *                    over the masters by slot), the I7 check of st_finish on every master.
 *                    Only the programs that start with st_start_server_cluster offer it
 *                    (stress_async: the event-loop API's per-master pipelines); the others
 *                    exit 2 when it is set, so a Makefile line cannot test the one server
 *                    while it says Cluster.
 *
 * Distributed exclusion is invisible to ThreadSanitizer, so the programs never rely on it to
 * order their own memory: shared counters are atomics (relaxed, read then written, so a
 * broken exclusion shows as a lost increment), and an "inside" flag taken with
 * atomic_exchange catches two threads in one critical section.
 */
#ifndef RS_STRESS_H
#define RS_STRESS_H

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "redis_server.h"
#include "redisync.h"
#include "tls.h"

static atomic_int st_failures;
static atomic_int st_lost;     /* on_lost calls */
static atomic_long st_logs;    /* log callback calls */
static const char *st_prog = "stress";

#define FAILF(...) st_fail(__FILE__, __LINE__, __VA_ARGS__)

static inline void st_fail(const char *file, int line, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s:%d: FAILED: %s\n", st_prog, file, line, buf);
    atomic_fetch_add(&st_failures, 1);
}

/* Checks that a call returned `want`; on a mismatch records the library's message too. */
#define EXPECT_RC(call, want)                                                                   \
    do {                                                                                        \
        int rc_ = (call);                                                                       \
        if (rc_ != (want))                                                                      \
            FAILF("%s returned %d (%s: %s), expected %d", #call, rc_, rs_strerror(rc_),         \
                  rs_client_lasterror(NULL), (int)(want));                                      \
    } while (0)

static inline int st_env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

/* n scaled by STRESS_SCALE percent, at least 1. */
static inline int st_scaled(int n)
{
    long v = (long)n * st_env_int("STRESS_SCALE", 100) / 100;
    return v < 1 ? 1 : (int)v;
}

static inline long st_lease_ms(void)
{
    return st_env_int("STRESS_LEASE_MS", 300);
}

static inline int st_verbose(void)
{
    return st_env_int("STRESS_VERBOSE", 0);
}

static inline void st_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static inline long long st_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* CLOCK_REALTIME now + ms: a deadline for the timed calls. */
static inline struct timespec st_abs_in(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + (long long)ms * 1000000LL;
    ts.tv_sec = (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

/* A small per-thread pseudo-random generator (rand() is not thread-safe). */
static inline unsigned st_rand(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (*seed >> 16) & 0x7fff;
}

static inline void st_on_lost(const char *kind, const char *name, void *arg)
{
    (void)arg;
    atomic_fetch_add(&st_lost, 1);
    if (st_verbose())
        fprintf(stderr, "%s: on_lost(%s, %s)\n", st_prog, kind, name);
}

static inline void st_log(int level, const char *msg, void *arg)
{
    (void)arg;
    atomic_fetch_add(&st_logs, 1);
    if (st_verbose() > 1 || (st_verbose() && level >= RS_LOG_WARN))
        fprintf(stderr, "%s: log %d: %s\n", st_prog, level, msg);
}

/* STRESS_TLS: the certificates and the URL every st_open client uses (see the top). */
static int st_tls_on;
static tt_certs_t st_certs;
static char st_tls_url[600];

/* STRESS_CLUSTER: the three masters and the URL every st_open client uses (see the top). */
#define ST_CLUSTER_NODES 3
static int st_cluster_on;
static ts_server_t st_nodes[ST_CLUSTER_NODES];
static char st_cluster_url[200];

/* Starts the program's redis-server (with a TLS port too under STRESS_TLS=1); exits 2 when
 * it cannot, or when STRESS_CLUSTER is set (this program does not offer it). */
static inline void st_start_server(ts_server_t *srv, const char *prog)
{
    st_prog = prog;
    if (st_env_int("STRESS_CLUSTER", 0) && !st_cluster_on) {
        fprintf(stderr, "%s: STRESS_CLUSTER is not offered by this program\n", prog);
        exit(2);
    }
    if (st_env_int("STRESS_TLS", 0)) {
        int tport;
        if (tt_certs_make(&st_certs) != 0) {
            fprintf(stderr, "%s: cannot make the TLS certificates\n", prog);
            exit(2);
        }
        if (tt_server_start(srv, &tport, &st_certs, NULL, 0) != 0) {
            tt_certs_free(&st_certs);
            fprintf(stderr, "%s: cannot start a TLS redis-server\n", prog);
            exit(2);
        }
        snprintf(st_tls_url, sizeof st_tls_url, "rediss://127.0.0.1:%d?tls_ca=%s", tport,
                 st_certs.ca);
        st_tls_on = 1;
        fprintf(stderr, "%s: over TLS (%s)\n", prog, st_tls_url);
        return;
    }
    if (ts_server_start(srv, NULL) != 0) {
        fprintf(stderr, "%s: cannot start redis-server\n", prog);
        exit(2);
    }
}

/* n servers for a redlock:// client (exits 2 when one cannot start): their URL into url,
 * a fresh key prefix into prefix. */
static inline void st_start_redlock(ts_server_t *srv, int n, char *url, size_t ulen,
                                    char *prefix, size_t plen, const char *prog)
{
    st_prog = prog;
    for (int i = 0; i < n; i++)
        if (ts_server_start(&srv[i], NULL) != 0) {
            fprintf(stderr, "%s: cannot start redis-server %d\n", prog, i);
            exit(2);
        }
    ts_redlock_url(url, ulen, srv, n);
    ts_unique_prefix(prefix, plen);
}

/* st_start_server, or under STRESS_CLUSTER=1 a Cluster of three masters (srv stays unused:
 * st_url and st_finish then take the masters); exits 2 when it cannot start them. */
static inline void st_start_server_cluster(ts_server_t *srv, const char *prog)
{
    st_prog = prog;
    if (!st_env_int("STRESS_CLUSTER", 0)) {
        st_start_server(srv, prog);
        return;
    }
    if (st_env_int("STRESS_TLS", 0)) {
        fprintf(stderr, "%s: STRESS_CLUSTER with STRESS_TLS is not offered\n", prog);
        exit(2);
    }
    memset(srv, 0, sizeof *srv);
    if (ts_cluster_start(st_nodes, ST_CLUSTER_NODES) != 0) {
        fprintf(stderr, "%s: cannot start a Cluster of %d masters\n", prog, ST_CLUSTER_NODES);
        exit(2);
    }
    int n = snprintf(st_cluster_url, sizeof st_cluster_url, "redis-cluster://");
    for (int i = 0; i < ST_CLUSTER_NODES; i++)
        n += snprintf(st_cluster_url + n, sizeof st_cluster_url - (size_t)n, "%s127.0.0.1:%d",
                      i ? "," : "", st_nodes[i].port);
    st_cluster_on = 1;
    fprintf(stderr, "%s: on a Cluster of %d masters (%s)\n", prog, ST_CLUSTER_NODES,
            st_cluster_url);
}

/* The URL the library's clients use: the server's, its TLS port's under STRESS_TLS, or the
 * masters' under STRESS_CLUSTER. */
static inline const char *st_url(const ts_server_t *srv)
{
    return st_cluster_on ? st_cluster_url : st_tls_on ? st_tls_url : srv->url;
}

/* A client of url with a unique prefix (shared by every client of one program when prefix
 * is given), the stress lease, on_lost and log counters. Exits 2 when it cannot open. */
static inline rs_client_t *st_open_url(const char *url, const char *prefix)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = prefix;
    cfg.lease_ms = st_lease_ms();
    cfg.timeout_ms = 10000; /* sanitizers and valgrind are slow; Redis is local */
    cfg.on_lost = st_on_lost;
    cfg.log = st_log;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc != 0) {
        fprintf(stderr, "%s: rs_client_open(%s): %d %s\n", st_prog, url, rc,
                rs_client_lasterror(NULL));
        exit(2);
    }
    return c;
}

/* st_open_url on srv's URL (st_url). */
static inline rs_client_t *st_open(const ts_server_t *srv, const char *prefix)
{
    return st_open_url(st_url(srv), prefix);
}

static inline void st_join_all(pthread_t *t, int n)
{
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static inline void st_spawn(pthread_t *t, void *(*fn)(void *), void *arg)
{
    if (pthread_create(t, NULL, fn, arg) != 0) {
        fprintf(stderr, "%s: pthread_create failed\n", st_prog);
        exit(2);
    }
}

/* STRESS_PAUSES: a thread that pauses the server now and then (see the top). */
static pthread_t st_chaos_thread;
static atomic_int st_chaos_stop_flag;
static int st_chaos_on;

static inline void *st_chaos_main(void *arg)
{
    ts_server_t *srv = arg;
    int n = st_env_int("STRESS_PAUSES", 0);
    for (int i = 0; i < n && !atomic_load(&st_chaos_stop_flag); i++) {
        st_sleep_ms(400);
        if (atomic_load(&st_chaos_stop_flag))
            break;
        ts_server_pause(srv);
        st_sleep_ms(st_lease_ms() * 3 / 2);
        ts_server_resume(srv);
        if (st_verbose())
            fprintf(stderr, "%s: server paused for %ld ms\n", st_prog, st_lease_ms() * 3 / 2);
    }
    return NULL;
}

static inline void st_chaos_start(ts_server_t *srv)
{
    if (st_env_int("STRESS_PAUSES", 0) > 0 &&
        pthread_create(&st_chaos_thread, NULL, st_chaos_main, srv) == 0)
        st_chaos_on = 1;
}

static inline void st_chaos_stop(void)
{
    atomic_store(&st_chaos_stop_flag, 1);
    if (st_chaos_on)
        pthread_join(st_chaos_thread, NULL);
    st_chaos_on = 0;
}

/* I7 on srv: no library connection outlived the clients (the server counts one client, the
 * connection asking). */
static inline void st_check_closed(ts_server_t *srv, const char *which)
{
    long long n = -1;
    for (long long until = st_mono_ms() + 3000; st_mono_ms() < until; st_sleep_ms(20))
        if ((n = ts_info_ll(srv, "clients", "connected_clients", NULL)) == 1)
            break;
    if (n != 1) {
        char list[2048];
        FAILF("%s: %lld connection(s) still open after every client was closed:\n%s", which,
              n - 1, ts_cmd_str(srv, list, sizeof list, "CLIENT LIST") ? list : "?");
    }
}

/* st_check_closed on each of n masters ("master I" in its message). */
static inline void st_check_masters(ts_server_t *srv, int n)
{
    for (int i = 0; i < n; i++) {
        char which[32];
        snprintf(which, sizeof which, "master %d", i);
        st_check_closed(&srv[i], which);
    }
}

/* st_start_redlock's counterpart: every master checked for connections left open by the
 * library, then stopped. */
static inline void st_stop_redlock(ts_server_t *srv, int n)
{
    st_check_masters(srv, n);
    for (int i = 0; i < n; i++)
        ts_server_stop(&srv[i]);
}

/* The summary line (ok or FAILED, the time since started_ms, the counters); the exit status:
 * 1 when a check failed, else 0. */
static inline int st_summary(long long started_ms)
{
    int f = atomic_load(&st_failures);
    fprintf(stderr, "%s: %s%s in %.1f s (%d failure(s), %d on_lost, %ld log lines)\n", st_prog,
            f ? "FAILED" : "ok", st_cluster_on ? " on the Cluster" : "",
            (double)(st_mono_ms() - started_ms) / 1000.0, f, atomic_load(&st_lost),
            atomic_load(&st_logs));
    return f ? 1 : 0;
}

/* The end of main(): I7 on the server (on every master under STRESS_CLUSTER), stops it,
 * prints a summary, returns the exit status. Call it once every client is closed. */
static inline int st_finish(ts_server_t *srv, long long started_ms)
{
    if (st_cluster_on) {
        st_check_masters(st_nodes, ST_CLUSTER_NODES);
        ts_cluster_stop(st_nodes, ST_CLUSTER_NODES);
    } else {
        st_check_closed(srv, "the server");
        ts_server_stop(srv);
    }
    if (st_tls_on)
        tt_certs_free(&st_certs);
    return st_summary(started_ms);
}

#endif
