/*
 * test_tls.c - Criterion tests of TLS (rediss://, tls=1 and the tls_ options): the primitives
 * over a redis-server's TLS port, mutual TLS, and every failure the library promises to name
 * (its code, its one line in rs_client_lasterror, its time bound, and no descriptor left
 * behind).
 *
 * Certificates are made at test time by tests/support/tls.c with the openssl command; each
 * server also keeps a plain port, used only by the test's own raw connections (ts_cmd_int),
 * while the library is pointed at the TLS port. Timing bounds are generous: the suite runs
 * as -j6 beside other builds on a 2-core machine.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "cluster.h"
#include "sentinel.h"
#include "tls.h"
#include "test_tls.h"

TestSuite(tls, .timeout = 60);

/* ------------------------------------------------------------------------------------- */
/* The primitives over TLS                                                                */

Test(tls, mutex_lock_unlock)
{
    env_t e;
    env_start(&e, NULL, 0);
    rs_client_t *c = open_ok(e.url, 0, NULL), *c2 = open_ok(e.url, 0, NULL);
    rs_mutex_t *m = new_mutex(c, "m"), *m2 = new_mutex(c2, "m");
    cr_assert_eq(rs_mutex_lock(m), 0, "lock: %s", rs_client_lasterror(c));
    cr_expect_gt(rs_mutex_fence(m), 0);
    cr_expect_eq(rs_mutex_trylock(m2), EBUSY);
    /* the same server, seen through its plain port */
    cr_expect_eq(ts_cmd_int(&e.s, "EXISTS rs:{m}:mutex"), 1);
    cr_expect_eq(rs_mutex_unlock(m), 0, "unlock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_trylock(m2), 0);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    env_stop(&e);
}

typedef struct waiter_arg {
    rs_mutex_t *m;
    atomic_int done;
    int rc;
    long long at;
} waiter_arg_t;

static void *waiter_main(void *arg)
{
    waiter_arg_t *w = arg;
    w->rc = rs_mutex_lock(w->m);
    w->at = tu_mono_ms();
    if (w->rc == 0)
        rs_mutex_unlock(w->m);
    atomic_store(&w->done, 1);
    return NULL;
}

/* A waiter of another client gets the lock from the release through the subscriber (its
 * wake-up travels over its own TLS subscriber connection), long before the lease ends. */
Test(tls, contended_handoff_through_the_subscriber)
{
    env_t e;
    env_start(&e, NULL, 0);
    rs_client_t *a = open_ok(e.url, 20000, NULL), *b = open_ok(e.url, 20000, NULL);
    rs_mutex_t *ma = new_mutex(a, "h"), *mb = new_mutex(b, "h");
    cr_assert_eq(rs_mutex_lock(ma), 0);
    waiter_arg_t w = {.m = mb};
    pthread_t th;
    tu_thread_start(&th, waiter_main, &w);
    cr_assert(tu_wait_zcard(&e.s, "mutex", "h", 1, 10000), "the waiter never queued");
    tu_sleep_ms(100);
    long long t0 = tu_mono_ms();
    cr_assert_eq(rs_mutex_unlock(ma), 0);
    cr_assert(tu_thread_join(th, &w.done, 15000), "the waiter never returned");
    cr_expect_eq(w.rc, 0, "waiter's lock: %d", w.rc);
    cr_expect_lt(w.at - t0, 5000, "handoff took %lld ms (lease 20 s: the wake-up was lost?)",
                 w.at - t0);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(a);
    rs_client_close(b);
    env_stop(&e);
}

/* The watchdog renews a 300 ms lease over its own TLS connection for 1.5 s. */
Test(tls, watchdog_renews)
{
    env_t e;
    env_start(&e, NULL, 0);
    tu_lost_t lc = {0};
    rs_client_t *c = open_ok(e.url, 300, &lc), *c2 = open_ok(e.url, 300, NULL);
    rs_mutex_t *m = new_mutex(c, "r"), *m2 = new_mutex(c2, "r");
    cr_assert_eq(rs_mutex_lock(m), 0);
    long long end = tu_mono_ms() + 1500;
    while (tu_mono_ms() < end) {
        cr_expect_eq(rs_mutex_trylock(m2), EBUSY);
        tu_sleep_ms(100);
    }
    cr_expect_gt(ts_cmd_int(&e.s, "PTTL rs:{r}:mutex"), 0, "the lock key is alive");
    cr_expect_eq(rs_mutex_unlock(m), 0, "unlock after 5 leases: %s", rs_client_lasterror(c));
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    env_stop(&e);
}

/* A hold whose key is deleted is reported lost by the watchdog; unlock says RS_ELOST. */
Test(tls, loss_is_reported)
{
    env_t e;
    env_start(&e, NULL, 0);
    tu_lost_t lc = {0};
    rs_client_t *c = open_ok(e.url, 300, &lc);
    rs_mutex_t *m = new_mutex(c, "l");
    cr_assert_eq(rs_mutex_lock(m), 0);
    cr_assert_eq(ts_cmd_int(&e.s, "DEL rs:{l}:mutex"), 1);
    cr_expect(tu_wait_atomic(&lc.n, 1, 5000), "on_lost never called");
    cr_expect_eq(rs_mutex_unlock(m), RS_ELOST);
    rs_mutex_destroy(m);
    rs_client_close(c);
    env_stop(&e);
}

typedef struct latch_arg {
    rs_latch_t *l;
    atomic_int done;
    int rc;
} latch_arg_t;

static void *latch_main(void *arg)
{
    latch_arg_t *a = arg;
    a->rc = rs_latch_wait(a->l);
    atomic_store(&a->done, 1);
    return NULL;
}

Test(tls, semaphore_rwlock_latch)
{
    env_t e;
    env_start(&e, NULL, 0);
    rs_client_t *c = open_ok(e.url, 0, NULL), *c2 = open_ok(e.url, 0, NULL);

    rs_sem_t *s;
    cr_assert_eq(rs_sem_init(&s, c, "s", 2), 0);
    cr_expect_eq(rs_sem_wait(s), 0);
    cr_expect_eq(rs_sem_wait(s), 0);
    cr_expect_eq(rs_sem_trywait(s), EAGAIN);
    cr_expect_eq(rs_sem_post(s), 0);
    cr_expect_eq(rs_sem_post(s), 0);
    rs_sem_destroy(s);

    rs_rwlock_t *rw, *rw2;
    cr_assert_eq(rs_rwlock_init(&rw, c, "rw"), 0);
    cr_assert_eq(rs_rwlock_init(&rw2, c2, "rw"), 0);
    cr_expect_eq(rs_rwlock_rdlock(rw), 0);
    cr_expect_eq(rs_rwlock_tryrdlock(rw2), 0);
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);
    cr_expect_eq(rs_rwlock_trywrlock(rw2), EBUSY);
    cr_expect_eq(rs_rwlock_unlock(rw), 0);
    cr_expect_eq(rs_rwlock_wrlock(rw2), 0);
    cr_expect_eq(rs_rwlock_tryrdlock(rw), EBUSY);
    cr_expect_eq(rs_rwlock_unlock(rw2), 0);
    rs_rwlock_destroy(rw);
    rs_rwlock_destroy(rw2);

    /* a latch opened by another client wakes the waiter through its subscriber */
    rs_latch_t *l, *l2;
    cr_assert_eq(rs_latch_init(&l, c, "lt", 1), 0);
    cr_assert_eq(rs_latch_init(&l2, c2, "lt", 1), 0);
    latch_arg_t a = {.l = l};
    pthread_t th;
    tu_thread_start(&th, latch_main, &a);
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&a.done), 0, "the latch opened early");
    cr_expect_eq(rs_latch_count_down(l2), 0);
    cr_assert(tu_thread_join(th, &a.done, 10000), "the latch waiter never woke");
    cr_expect_eq(a.rc, 0);
    rs_latch_destroy(l);
    rs_latch_destroy(l2);

    rs_client_close(c);
    rs_client_close(c2);
    env_stop(&e);
}

/* A reconnect offers the server's last session and the server resumes it. */
Test(tls, session_resumed_on_reconnect)
{
    env_t e;
    env_start(&e, NULL, 0);
    rs_client_t *c = open_ok(e.url, 0, NULL);
    redisContext *ctx = NULL;
    int rc = rs__conn_connect(c, rs__now_ns() + 3000 * RS_NS_PER_MS, 3000, &ctx);
    cr_assert_eq(rc, 0, "connect: %s", rs_client_lasterror(c));
    char what[128];
    rs__tp_describe(ctx, what, sizeof what);
    cr_log_info("second connection: %s", what);
    cr_expect(rs__tp_is_tls(ctx));
    cr_expect(rs__tp_reused(ctx), "the second connection did a full handshake (%s)", what);
    rs__ctx_free(ctx);
    rs_client_close(c);
    env_stop(&e);
}

/* ------------------------------------------------------------------------------------- */
/* Mutual TLS                                                                             */

Test(tls, mutual_tls_with_a_client_certificate)
{
    env_t e;
    env_start(&e, NULL, 1);
    char url[2048];
    snprintf(url, sizeof url, "%s&tls_cert=%s&tls_key=%s", e.url, e.certs.client_cert,
             e.certs.client_key);
    rs_client_t *c = open_ok(url, 0, NULL);
    rs_mutex_t *m = new_mutex(c, "mt");
    cr_expect_eq(rs_mutex_lock(m), 0, "lock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    env_stop(&e);
}

Test(tls, mutual_tls_without_a_client_certificate)
{
    env_t e;
    env_start(&e, NULL, 1);
    expect_open_fails(e.url, 1000, RS_ECONN, "requires a client certificate", NULL, 2500);
    env_stop(&e);
}

/* ------------------------------------------------------------------------------------- */
/* Failures: code, message, time bound, nothing left behind                               */

Test(tls, wrong_ca)
{
    env_t e;
    env_start(&e, NULL, 0);
    char url[1024];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca=%s", e.port, e.certs.other_ca);
    /* the server sends its CA along (OpenSSL builds the chain), so OpenSSL names either */
    expect_open_fails(url, 1000, RS_ECONN,
                      "certificate verify failed: self-signed certificate in certificate chain",
                      "certificate verify failed: unable to get local issuer certificate", 2500);
    env_stop(&e);
}

Test(tls, expired_certificate)
{
    env_t e;
    env_start(&e, "expired", 0);
    expect_open_fails(e.url, 1000, RS_ECONN, "certificate verify failed: certificate has expired",
                      NULL, 2500);
    env_stop(&e);
}

Test(tls, not_yet_valid_certificate)
{
    env_t e;
    env_start(&e, "future", 0);
    expect_open_fails(e.url, 1000, RS_ECONN, "certificate verify failed: certificate is not yet "
                      "valid", NULL, 2500);
    env_stop(&e);
}

Test(tls, host_name_mismatch)
{
    env_t e;
    env_start(&e, NULL, 0);
    char url[1200];
    snprintf(url, sizeof url, "%s&tls_servername=db.example.com", e.url);
    expect_open_fails(url, 1000, RS_ECONN, "certificate verify failed: hostname mismatch",
                      "certificate verify failed: Hostname mismatch", 2500);
    /* the certificate's DNS name, checked and sent as SNI, is accepted */
    snprintf(url, sizeof url, "%s&tls_servername=localhost", e.url);
    rs_client_t *c = open_ok(url, 0, NULL);
    rs_client_close(c);
    env_stop(&e);
}

Test(tls, rediss_to_a_plain_server)
{
    env_t e;
    env_start(&e, NULL, 0);
    char url[1024];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca=%s", e.s.port, e.certs.ca);
    /* a plain Redis answers the ClientHello with a protocol error, or not at all (when no
     * newline is in it): either way a precise failure within timeout_ms, never plain text */
    expect_open_fails(url, 1000, RS_ECONN, "server speaks plain RESP, not TLS",
                      "no answer to the ClientHello", 2500);
    env_stop(&e);
}

Test(tls, redis_to_a_tls_port)
{
    env_t e;
    env_start(&e, NULL, 0);
    char url[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", e.port);
    /* the TLS port resets the connection at the first command (or answers with an alert) */
    expect_open_fails(url, 1000, RS_ECONN, "server speaks TLS, not plain RESP",
                      "a TLS-only port does: use rediss:// or tls=1", 2500);
    env_stop(&e);
}

/* A server that accepts TCP (the kernel does, from the backlog) and never answers. */
Test(tls, handshake_never_answered)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(lfd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    cr_assert_eq(listen(lfd, 16), 0);
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    char url[128];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d", ntohs(sa.sin_port));
    expect_open_fails(url, 800, RS_ECONN, "TLS handshake timed out", NULL, 2300);
    close(lfd);
}

Test(tls, unreadable_and_mismatched_files)
{
    tt_certs_t t;
    cr_assert_eq(tt_certs_make(&t), 0);
    char url[2048];
    snprintf(url, sizeof url, "rediss://127.0.0.1:1?tls_ca=%s/nope.pem", t.dir);
    expect_open_fails(url, 1000, RS_ECONN, "nope.pem: cannot read: No such file or directory",
                      NULL, 500);
    snprintf(url, sizeof url, "rediss://127.0.0.1:1?tls_ca=%s&tls_cert=%s&tls_key=%s", t.ca,
             t.client_cert, t.server_key);
    expect_open_fails(url, 1000, RS_ECONN, "does not match the certificate", NULL, 500);
    snprintf(url, sizeof url, "rediss://127.0.0.1:1?tls_ca=%s&tls_cert=%s&tls_key=%s/none",
             t.ca, t.client_cert, t.dir);
    expect_open_fails(url, 1000, RS_ECONN, "tls_key", "cannot read", 500);
    snprintf(url, sizeof url, "rediss://127.0.0.1:1?tls_ca=%s/openssl.log", t.dir);
    expect_open_fails(url, 1000, RS_ECONN, "no CA certificate could be read", NULL, 500);
    tt_certs_free(&t);
}

Test(tls, url_errors)
{
    expect_open_fails("rediss://127.0.0.1:1?tls_cafile=/x", 1000, EINVAL,
                      "unknown TLS option \"tls_cafile\"", NULL, 500);
    expect_open_fails("rediss://127.0.0.1:1?tls=0", 1000, EINVAL, "tls=0 contradicts rediss://",
                      NULL, 500);
    expect_open_fails("unix:///tmp/x.sock?tls=1", 1000, EINVAL, "unix:// does not take tls=1",
                      NULL, 500);
    expect_open_fails("redis://127.0.0.1:1?tls_ca=/x", 1000, EINVAL,
                      "tls_ options need rediss:// or tls=1", NULL, 500);
    expect_open_fails("rediss://127.0.0.1:1?tls_cert=/x", 1000, EINVAL,
                      "tls_cert without tls_key", NULL, 500);
    expect_open_fails("redis://127.0.0.1:1?tls=yes", 1000, EINVAL, "tls must be 0 or 1", NULL,
                      500);
    rs_endpoint_t ep;
    cr_expect_eq(rs__url_parse(NULL, "redis://h:7/2?tls=1&tls_verify=0&db=3", &ep), 0, "%s",
                 rs_client_lasterror(NULL));
    cr_expect(ep.tls && !ep.tls_verify && ep.db == 3 && ep.port == 7);
    cr_expect_eq(rs__url_parse(NULL, "redis-cluster://a:1,b:2?tls=1&tls_servername=n%2Ex", &ep),
                 0, "%s", rs_client_lasterror(NULL));
    cr_expect(ep.tls && !strcmp(ep.tls_servername, "n.x"));
    cr_expect_eq(rs__url_parse(NULL, "redis-cluster://a:1?db=1", &ep), EINVAL);
    cr_expect_eq(rs__url_parse(NULL, "redlock://a:1,b:1,c:1?tls=1&tls_ca=%2Fca.pem&db=2", &ep), 0,
                 "%s", rs_client_lasterror(NULL));
    cr_expect(ep.tls && !strcmp(ep.tls_ca, "/ca.pem") && ep.db == 2);
    /* a '/', '@' or '?' inside a file path is never taken for part of the address */
    cr_expect_eq(rs__url_parse(NULL, "redis-sentinel://u:p@h:1/m?tls=1&tls_ca=/a@b/c?.pem", &ep),
                 0, "%s", rs_client_lasterror(NULL));
    cr_expect(!strcmp(ep.master, "m") && !strcmp(ep.tls_ca, "/a@b/c?.pem") &&
              !strcmp(ep.pass, "p") && !strcmp(ep.seeds[0].host, "h"));
    cr_expect_eq(rs__url_parse(NULL, "rediss://:p@h/3?tls_cert=/x@y&tls_key=/k", &ep), 0, "%s",
                 rs_client_lasterror(NULL));
    cr_expect(!strcmp(ep.host, "h") && ep.db == 3 && !strcmp(ep.tls_cert, "/x@y"));
}

/* tls_verify=0 lets a server through that the CA would refuse, and says so once. */
Test(tls, verify_off_works_and_warns_once)
{
    env_t e;
    env_start(&e, NULL, 0);
    char url[1024];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca=%s&tls_verify=0", e.port,
             e.certs.other_ca);
    logbook_t lb = {0};
    int rc;
    rs_client_t *c = open_url(url, 0, 3000, NULL, &lb, &rc, NULL);
    cr_assert_eq(rc, 0, "open: %s", rs_client_lasterror(NULL));
    rs_mutex_t *m = new_mutex(c, "v");
    cr_expect_eq(rs_mutex_lock(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    cr_expect_eq(rs_mutex_lock(m), 0);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    cr_expect_eq(atomic_load(&lb.warn), 1, "WARN about tls_verify=0 logged %d times",
                 atomic_load(&lb.warn));
    env_stop(&e);
}

/* ------------------------------------------------------------------------------------- */
/* fork and SIGPIPE                                                                       */

typedef struct fork_arg {
    rs_client_t *c;
    redisContext *ctx;
} fork_arg_t;

static int fork_child(void *arg)
{
    fork_arg_t *f = arg;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, f->c, "f") != RS_EFORK)
        return 10;
    /* frees the parent's TLS sessions: nothing may be written into them */
    rs__ctx_free(f->ctx);
    rs_client_close(f->c);
    return 0;
}

/* A child that closes an inherited TLS client (and frees an inherited TLS connection) sends
 * no close_notify: the parent's sessions go on working. */
Test(tls, fork_child_never_writes_into_the_parents_sessions, .fini = tu_kill_kids)
{
    env_t e;
    env_start(&e, NULL, 0);
    rs_client_t *c = open_ok(e.url, 0, NULL);
    rs_mutex_t *m = new_mutex(c, "f");
    cr_assert_eq(rs_mutex_lock(m), 0); /* the watchdog's connection is open too */
    fork_arg_t f = {.c = c};
    cr_assert_eq(rs__conn_connect(c, rs__now_ns() + 3000 * RS_NS_PER_MS, 3000, &f.ctx), 0);
    pid_t pid = tu_spawn(fork_child, &f);
    tu_assert_exit0(pid, tu_reap(pid, 10000), "child");
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    redisReply *r = NULL;
    cr_expect_eq(rs__ctx_command(f.ctx, 1, argv, lens, &r), 0, "PING on the parent's TLS "
                 "connection after the child freed it: %s", f.ctx->errstr);
    cr_expect(r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG"));
    if (r)
        freeReplyObject(r);
    rs__ctx_free(f.ctx);
    cr_expect_eq(rs_mutex_unlock(m), 0, "unlock: %s", rs_client_lasterror(c));
    rs_mutex_destroy(m);
    rs_client_close(c);
    env_stop(&e);
}

/* Writes through TLS to a server that is gone never raise SIGPIPE (left at its default,
 * which would end this process). */
Test(tls, no_sigpipe_when_the_server_is_gone)
{
    signal(SIGPIPE, SIG_DFL);
    env_t e;
    env_start(&e, NULL, 0);
    rs_client_t *c = open_ok(e.url, 0, NULL);
    redisContext *ctx;
    cr_assert_eq(rs__conn_connect(c, rs__now_ns() + 3000 * RS_NS_PER_MS, 3000, &ctx), 0);
    ts_server_kill(&e.s);
    int failed = 0;
    for (int i = 0; i < 20 && !failed; i++) {
        static const char ping[] = "*1\r\n$4\r\nPING\r\n";
        failed = rs__tp_send(ctx, ping, sizeof ping - 1, NULL, 0) != 0;
        tu_sleep_ms(20);
    }
    cr_expect(failed, "20 sends to a dead server all succeeded");
    rs__ctx_free(ctx);
    rs_mutex_t *m = new_mutex(c, "p");
    cr_expect_eq(rs_mutex_trylock(m), RS_ECONN);
    rs_mutex_destroy(m);
    rs_client_close(c);
    env_stop(&e);
}

/* ------------------------------------------------------------------------------------- */
/* close, then fork: no OpenSSL lock inherited from a thread still exiting                */

static const char *g_fork_url;

static int reopen_child(void *arg)
{
    (void)arg;
    int rc;
    rs_client_t *c = open_url(g_fork_url, 0, 3000, NULL, NULL, &rc, NULL);
    if (rc)
        return 10;
    rs_mutex_t *m;
    if (rs_mutex_init(&m, c, "fc") != 0 || rs_mutex_lock(m) != 0 || rs_mutex_unlock(m) != 0)
        return 11;
    rs_mutex_destroy(m);
    rs_client_close(c);
    return 0;
}

/* rs_client_close joins every thread that used OpenSSL (watchdog, subscriber) before it
 * returns, so a child forked right after can use TLS at once (a prototype deadlocked here). */
Test(tls, fork_right_after_close, .fini = tu_kill_kids)
{
    env_t e;
    env_start(&e, NULL, 0);
    g_fork_url = e.url;
    for (int i = 0; i < 8; i++) {
        rs_client_t *c = open_ok(e.url, 300, NULL), *c2 = open_ok(e.url, 300, NULL);
        rs_mutex_t *m = new_mutex(c, "fc"), *m2 = new_mutex(c2, "fc");
        cr_assert_eq(rs_mutex_lock(m), 0); /* c's watchdog runs */
        struct timespec dl = tu_abs_in(150);
        cr_assert_eq(rs_mutex_timedlock(m2, &dl), ETIMEDOUT); /* c2's subscriber runs */
        cr_assert_eq(rs_mutex_unlock(m), 0);
        rs_mutex_destroy(m);
        rs_mutex_destroy(m2);
        rs_client_close(c);
        rs_client_close(c2);
        pid_t pid = tu_spawn(reopen_child, NULL);
        tu_assert_exit0(pid, tu_reap(pid, 15000), "child forked right after close");
    }
    env_stop(&e);
}
