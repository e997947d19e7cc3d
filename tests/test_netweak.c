/*
 * test_netweak.c - Criterion tests of what a slow, lossy or cut link exposed (issue 13):
 *
 *   1. a renewal answered after lease/3 (but before the hold's deadline) is not reported
 *      lost and does not cost the watchdog its connection; the watchdog's connection is
 *      opened when the first hold is granted, not at the first renewal;
 *   2. a holder whose Redis stops answering gets on_lost no later than its local deadline
 *      (grant + lease), not some time after another client could take the lock;
 *   3. a blocking lock on a free mutex succeeds when the subscriber cannot subscribe;
 *   4. rs_client_close returns within timeout_ms + one lease while Redis does not answer,
 *      cancels a lock waiting without a deadline, and leaves no thread or socket;
 *   5. a lock waiting without a deadline while Redis is unreachable says so at
 *      RS_LOG_DEBUG, once per outage (series of reconnect attempts), not per retry;
 *   and every TCP connection of the library has keepalive and TCP_USER_TIMEOUT set.
 *
 * A stalled link is a SIGSTOPped redis-server (the kernel still accepts connections and
 * buffers requests; nothing is answered until SIGCONT). Timing bounds are generous on the
 * side that does not matter; the side each fix is about is asserted with a small slack.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "test_async.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"

TestSuite(netweak, .timeout = 60);

static rs_mutex_t *new_mutex(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}

/* ------------------------------------------------------------------------------------- */
/* 3. A free mutex while the subscriber cannot subscribe                                  */

/* A client of s as user nosub (made here), which may run scripts and PUBLISH but not
 * SUBSCRIBE: its subscriber is refused for as long as the test runs. */
static rs_client_t *open_nosub(ts_server_t *s)
{
    char buf[256];
    cr_assert_str_eq(ts_cmd_str(s, buf, sizeof buf, "ACL SETUSER nosub on >pw ~* &* +@all "
                                "-subscribe -psubscribe -ssubscribe"), "OK");
    rs_config_t cfg;
    rs_config_init(&cfg);
    char url[160];
    snprintf(url, sizeof url, "redis://nosub:pw@127.0.0.1:%d", s->port);
    cfg.url = url;
    cfg.lease_ms = 2000;
    cfg.timeout_ms = 500;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    cr_assert_eq(rc, 0, "open as nosub: %d %s", rc, rs_client_lasterror(NULL));
    return c;
}

Test(netweak, free_mutex_locks_without_subscriber)
{
    /* a user that may run scripts and PUBLISH but not SUBSCRIBE: the subscriber is refused
     * for as long as the test runs, which a lossy link only does now and then */
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_nosub(&s);
    rs_mutex_t *m = new_mutex(c, "free");

    int rc = rs_mutex_lock(m);
    cr_expect_eq(rc, 0, "lock of a free mutex without SUBSCRIBE: %d %s", rc,
                 rs_client_lasterror(c));
    if (rc == 0)
        cr_expect_eq(rs_mutex_unlock(m), 0);
    /* a second time, after the first try started the subscriber (which keeps failing) */
    struct timespec dl = tu_abs_in(3000);
    rc = rs_mutex_timedlock(m, &dl);
    cr_expect_eq(rc, 0, "timedlock of a free mutex without SUBSCRIBE: %d %s", rc,
                 rs_client_lasterror(c));
    if (rc == 0)
        cr_expect_eq(rs_mutex_unlock(m), 0);

    /* a mutex that is busy still needs the subscription: the caller is told, not hung */
    rs_client_t *c2 = tu_open_client(&s, 2000, 500, NULL);
    rs_mutex_t *m2 = new_mutex(c2, "free");
    cr_assert_eq(rs_mutex_lock(m2), 0);
    dl = tu_abs_in(3000);
    long long t0 = tu_mono_ms();
    rc = rs_mutex_timedlock(m, &dl);
    cr_expect(rc == RS_ESERVER || rc == RS_ECONN, "timedlock of a busy mutex without "
              "SUBSCRIBE: %d %s", rc, rs_client_lasterror(c));
    cr_expect_lt(tu_mono_ms() - t0, 2500, "the refusal took the whole deadline");
    cr_expect_eq(rs_mutex_unlock(m2), 0);

    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 1. Slow renewals                                                                       */

/* CLIENT LIST on k: whether a client other than k has last run cmd (e.g. "ping"), and the
 * highest client id seen. */
static int client_list(redisContext *k, const char *cmd, long long *max_id)
{
    redisReply *r = redisCommand(k, "CLIENT LIST");
    cr_assert(r && r->type == REDIS_REPLY_STRING, "CLIENT LIST failed");
    char want[64];
    snprintf(want, sizeof want, " cmd=%s ", cmd);
    int found = 0;
    *max_id = 0;
    for (char *line = r->str; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        long long id = strncmp(line, "id=", 3) == 0 ? atoll(line + 3) : 0;
        if (id > *max_id)
            *max_id = id;
        if (strstr(line, want))
            found = 1;
        line = nl ? nl + 1 : NULL;
    }
    freeReplyObject(r);
    return found;
}

Test(netweak, watchdog_connects_at_grant)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    rs_client_t *c = tu_open_client(&s, 3000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "dial");
    cr_assert_eq(rs_mutex_lock(m), 0);
    long long t0 = tu_mono_ms(), id;
    /* the pool's connection last ran the lock's EVALSHA; a connection whose last command is
     * the handshake's (PING, or AUTH under make test-acl) or the holder record's PEXPIRE
     * (lib/record.c: written right after the dial) is the watchdog's, opened before its
     * first renewal (lease/3 = 1000 ms) */
    int seen = 0;
    while (!seen && tu_mono_ms() - t0 < 800) {
        seen = client_list(k, "ping", &id) || client_list(k, "auth", &id) ||
               client_list(k, "pexpire", &id);
        if (!seen)
            tu_sleep_ms(10);
    }
    cr_expect(seen, "no watchdog connection within 800 ms of the grant (lease/3 is 1000 ms)");
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    redisFree(k);
    ts_server_stop(&s);
}

Test(netweak, slow_renewal_is_not_lost)
{
    ts_server_t s;
    tu_start_server(&s);
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    tu_lost_t lc = {0};
    /* lease 1500: renewals are sent about 500 and 1000 ms after the grant; once the first
     * is confirmed, the local deadline is ~500 + 1483 ms */
    rs_client_t *c = tu_open_client(&s, 1500, 2000, &lc);
    rs_mutex_t *m = new_mutex(c, "slow");
    cr_assert_eq(rs_mutex_lock(m), 0);
    long long t0 = tu_mono_ms(), max_before, max_after;
    while (tu_mono_ms() - t0 < 700)
        tu_sleep_ms(5);
    client_list(k, "ping", &max_before); /* the watchdog's connection is open by now */
    while (tu_mono_ms() - t0 < 800)
        tu_sleep_ms(5);
    /* the renewal sent at ~1000 ms is answered at ~1650 ms: later than lease/3 after its
     * send, well before the deadline */
    ts_server_pause(&s);
    while (tu_mono_ms() - t0 < 1650)
        tu_sleep_ms(5);
    ts_server_resume(&s);
    long long resumed = tu_mono_ms() - t0;
    tu_sleep_ms(300);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost for a renewal answered late (resumed at "
                 "%lld ms of a 1500 ms lease)", resumed);
    cr_expect_gt(rs_mutex_remaining(m), 0, "the hold is not confirmed");
    client_list(k, "ping", &max_after);
    cr_expect_eq(max_after, max_before, "a connection was opened during or after the stall "
                 "(ids up to %lld, now %lld): the watchdog dropped its own", max_before,
                 max_after);
    int rc = rs_mutex_unlock(m);
    cr_expect_eq(rc, 0, "unlock: %d %s", rc, rs_client_lasterror(c));
    rs_mutex_destroy(m);
    rs_client_close(c);
    cr_expect_eq(atomic_load(&lc.n), 0, "on_lost was called");
    redisFree(k);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* 2. on_lost at the local deadline                                                       */

static atomic_llong lost_at;

static void note_lost(const char *kind, const char *name, void *arg)
{
    (void)kind, (void)name, (void)arg;
    long long zero = 0;
    atomic_compare_exchange_strong(&lost_at, &zero, tu_mono_ms());
}

Test(netweak, on_lost_by_the_deadline)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s.url;
    cfg.lease_ms = 1500;
    cfg.timeout_ms = 2000;
    cfg.on_lost = note_lost;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    rs_mutex_t *m = new_mutex(c, "dl");
    redisContext *k = ts_connect(&s);
    cr_assert_not_null(k);
    atomic_store(&lost_at, 0);
    long long t0 = tu_mono_ms(), id;
    cr_assert_eq(rs_mutex_lock(m), 0);
    /* the watchdog's connection is up (its renewal will wait on a read, not a connect) */
    while (!client_list(k, "ping", &id) && tu_mono_ms() - t0 < 400)
        tu_sleep_ms(5);
    redisFree(k);
    /* then Redis stops answering: the renewal at ~500 ms is never confirmed, so the local
     * deadline is the grant's send time + lease - drift <= t0 + 1500 ms */
    ts_server_pause(&s);
    while (!atomic_load(&lost_at) && tu_mono_ms() - t0 < 6000)
        tu_sleep_ms(2);
    long long at = atomic_load(&lost_at);
    ts_server_resume(&s);
    cr_assert_neq(at, 0, "no on_lost within 6 s of a 1500 ms lease");
    /* early side generous (a renewal round may be cut short by a noisy machine); late side
     * tight: by lease end + 50 ms another client may already hold the lock */
    cr_expect_leq(at - t0, 1500 + 50, "on_lost came %lld ms after the grant (lease 1500 ms)",
                  at - t0);
    cr_expect_geq(at - t0, 750, "on_lost came %lld ms after the grant, too early", at - t0);
    cr_expect_eq(rs_mutex_unlock(m), RS_ELOST);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* Keepalive and TCP_USER_TIMEOUT on every library connection                             */

Test(netweak, connections_have_keepalive)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 3000, 2000, NULL);
    rs_client_t *c2 = tu_open_client(&s, 3000, 2000, NULL);
    rs_mutex_t *m = new_mutex(c, "ka"), *m2 = new_mutex(c2, "ka");
    cr_assert_eq(rs_mutex_lock(m2), 0);
    /* c: its pool, its watchdog (a queue entry) and its subscriber (a wait) */
    struct timespec dl = tu_abs_in(600);
    cr_assert_eq(rs_mutex_timedlock(m, &dl), ETIMEDOUT);
    cr_assert_eq(rs_mutex_unlock(m2), 0);

    /* every socket of this process connected to the server is the library's */
    int n = 0, bad = 0;
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int fd = atoi(e->d_name);
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        if (fd < 3 || fd == dirfd(d) || getpeername(fd, (struct sockaddr *)&peer, &pl) != 0 ||
            peer.sin_family != AF_INET || ntohs(peer.sin_port) != s.port)
            continue;
        int ka = 0;
        unsigned ut = 0;
        socklen_t l1 = sizeof ka, l2 = sizeof ut;
        getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &ka, &l1);
        getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, &l2);
        n++;
        if (!ka || ut == 0) {
            bad++;
            cr_log_error("fd %d: SO_KEEPALIVE %d, TCP_USER_TIMEOUT %u", fd, ka, ut);
        }
    }
    closedir(d);
    cr_expect_geq(n, 4, "found %d library connections (pools, watchdogs, subscriber)", n);
    cr_expect_eq(bad, 0, "%d of %d library connections without keepalive or user timeout",
                 bad, n);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* rs_client_close while Redis does not answer                                           */

static int count_entries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Sockets of this process connected to port (the library's: the test opens none there). */
static int sockets_to(int port)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int fd = atoi(e->d_name);
        struct sockaddr_in peer;
        socklen_t pl = sizeof peer;
        if (fd >= 3 && fd != dirfd(d) && getpeername(fd, (struct sockaddr *)&peer, &pl) == 0 &&
            peer.sin_family == AF_INET && ntohs(peer.sin_port) == port)
            n++;
    }
    closedir(d);
    return n;
}

struct blocked_lock {
    rs_mutex_t *m;
    int rc;
    atomic_int done;
};

static void *lock_without_deadline(void *arg)
{
    struct blocked_lock *b = arg;
    b->rc = rs_mutex_lock(b->m);
    atomic_store(&b->done, 1);
    return NULL;
}

/* Issue 13: rs_client_close returns within timeout_ms plus one lease of a round even when
 * Redis has stopped answering (a stalled link: the kernel still accepts, nothing comes
 * back), cancels a lock that waits without a deadline, and leaves no thread and no socket.
 * The client holds a mutex (close releases it: one call into the silence), its watchdog
 * renews it and a queue entry, and its subscriber is connected. */
Test(netweak, close_while_redis_stalls)
{
    ts_server_t s;
    tu_start_server(&s);
    int threads0 = count_entries("/proc/self/task");
    const long lease_ms = 1000, timeout_ms = 1000;
    rs_client_t *c = tu_open_client(&s, lease_ms, timeout_ms, NULL);
    rs_client_t *c2 = tu_open_client(&s, lease_ms, timeout_ms, NULL);
    rs_mutex_t *mine = new_mutex(c, "cs-mine"), *theirs = new_mutex(c2, "cs-theirs");
    rs_mutex_t *waits = new_mutex(c, "cs-theirs");
    cr_assert_eq(rs_mutex_lock(mine), 0);
    cr_assert_eq(rs_mutex_lock(theirs), 0);
    struct blocked_lock b = {waits, -1, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, lock_without_deadline, &b), 0);
    tu_sleep_ms(300); /* queued, asleep, its entry renewed by the watchdog */
    cr_assert_eq(atomic_load(&b.done), 0, "the lock returned %d while the mutex was held",
                 b.rc);

    ts_server_pause(&s);
    long long t0 = tu_mono_ms();
    rs_client_close(c);
    long long took = tu_mono_ms() - t0;
    int joined = tu_thread_join(th, &b.done, 2000);
    ts_server_resume(&s);
    cr_log_info("rs_client_close with Redis stalled: %lld ms (timeout %ld ms, lease %ld ms)",
                took, timeout_ms, lease_ms);
    cr_expect(joined, "the blocked lock did not return after rs_client_close");
    if (joined)
        cr_expect_eq(b.rc, ECANCELED, "a lock cancelled by close returned %d", b.rc);
    cr_expect_leq(took, timeout_ms + lease_ms + 500, "rs_client_close took %lld ms with Redis "
                  "stalled (timeout %ld ms, lease %ld ms)", took, timeout_ms, lease_ms);
    rs_mutex_unlock(theirs); /* 0 or RS_ELOST: its lease may have run out in the stall */
    cr_expect_eq(rs_mutex_destroy(theirs), 0);
    rs_client_close(c2);
    /* handles of a closed client may only be destroyed (redisync.h) */
    cr_expect_eq(rs_mutex_destroy(mine), 0);
    cr_expect_eq(rs_mutex_destroy(waits), 0);
    cr_expect_eq(count_entries("/proc/self/task"), threads0, "threads left after close");
    cr_expect_eq(sockets_to(s.port), 0, "sockets to Redis left after close");
    ts_server_stop(&s);
}

/* 5. A waiter that goes on waiting while Redis is unreachable says so, once per outage.  */

static atomic_int waiting_said;

static void *lock_then_unlock(void *arg)
{
    struct blocked_lock *b = arg;
    b->rc = rs_mutex_lock(b->m);
    if (b->rc == 0 && rs_mutex_unlock(b->m) != 0)
        b->rc = -2;
    atomic_store(&b->done, 1);
    return NULL;
}

static void count_waiting(int level, const char *msg, void *arg)
{
    (void)arg;
    if (level == RS_LOG_DEBUG && strstr(msg, "go on waiting"))
        atomic_fetch_add(&waiting_said, 1);
}

Test(netweak, waiting_while_unreachable_is_logged)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_config_t cfg;
    tu_config(&cfg, s.url, 3000, 500, NULL);
    cfg.log = count_waiting;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));
    /* the holder's lease is long: the waiter's own retry (at the holder's lease) does not
     * come during the outage, only the subscriber's reconnect attempts do */
    rs_client_t *c2 = tu_open_client(&s, 20000, 500, NULL);
    for (int round = 0; round < 2; round++) {
        char name[16];
        snprintf(name, sizeof name, "unr%d", round);
        rs_mutex_t *held = new_mutex(c2, name), *m = new_mutex(c, name);
        cr_assert_eq(rs_mutex_lock(held), 0, "%s", rs_client_lasterror(c2));
        struct blocked_lock b = {m, -1, 0};
        pthread_t th;
        cr_assert_eq(pthread_create(&th, NULL, lock_then_unlock, &b), 0);
        tu_sleep_ms(300); /* queued and asleep */
        cr_assert_eq(atomic_load(&b.done), 0, "the lock returned %d while the mutex was held",
                     b.rc);
        int said = atomic_load(&waiting_said);
        ts_server_kill(&s); /* connections refused: the subscriber retries every <= 200 ms */
        tu_sleep_ms(1500);
        cr_expect_eq(atomic_load(&waiting_said) - said, 1, "round %d: said %d times during "
                     "one outage (once expected, not per retry)", round,
                     atomic_load(&waiting_said) - said);
        cr_assert_eq(ts_server_restart(&s), 0); /* without the data: the mutex is free */
        int joined = tu_thread_join(th, &b.done, 5000);
        cr_expect(joined, "the waiting lock did not return after Redis came back");
        if (joined)
            cr_expect(b.rc == 0 || b.rc == RS_ECONN, "the waiting lock returned %d", b.rc);
        rs_mutex_unlock(held); /* RS_ELOST: its hold vanished with the restart */
        rs_mutex_destroy(held);
        rs_mutex_destroy(m);
    }
    rs_client_close(c2);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* ------------------------------------------------------------------------------------- */
/* The event-loop API when the subscriber is refused                                      */

static void refused_done(int rc, rs_hold_t *hold, void *arg)
{
    int *got = arg;
    got[0]++;
    got[1] = rc;
    if (hold)
        rs_hold_release(hold);
}

Test(netweak, async_subscription_refused)
{
    /* a request that must wait needs the subscription; a server that refuses it (NOPERM)
     * is RS_ESERVER, as for the blocking calls, not a connection failure */
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_nosub(&s);
    rs_client_t *c2 = tu_open_client(&s, 2000, 500, NULL);
    rs_mutex_t *m = new_mutex(c, "busy"), *m2 = new_mutex(c2, "busy");
    cr_assert_eq(rs_mutex_lock(m2), 0);

    int got[2] = {0, -1};
    rs_request_t *req;
    struct timespec dl = tu_abs_in(5000);
    cr_assert_eq(rs_mutex_acquire_async(m, &dl, refused_done, got, &req), 0, "%s",
                 rs_client_lasterror(c));
    cr_assert(loop_until(c, &got[0], 1, 4000), "done did not run");
    cr_expect_eq(got[1], RS_ESERVER, "a refused subscription: %d (%s)", got[1],
                 rs_strerror(got[1]));
    cr_expect_eq(rs_mutex_unlock(m2), 0);

    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    rs_client_close(c);
    rs_client_close(c2);
    ts_server_stop(&s);
}
