/*
 * test_clock.c - Criterion tests of clock faults (issue 13): wall clocks that jump by minutes,
 * on clients and on redis-servers, moved by the project's own LD_PRELOAD shim
 * (tests/clockshim/clockshim.c; tests/support/clockshim.h: a shared offset that the test
 * changes while the other process runs).
 *
 *   shim     the shim moves a program's wall clock and not its monotonic clock (else every
 *            test below would pass without testing anything)
 *   client   the redisync command waiting in `lock -w 4` while its CLOCK_REALTIME jumps 10
 *            minutes forward or back: it gives up 4 s after it began, as the deadline was
 *            converted once on entry (api.md, "Deadlines"; redisync(3)). Following the wall
 *            clock it would give up at once (forward) or wait 10 minutes (back).
 *   server   a redis-server whose clock jumps (measured on redis-server 7.0.15: key expiry
 *            follows the wall clock in both directions; PEXPIRE stores now + ms on the wall
 *            clock and a key expires when the wall clock passes that):
 *            - back 10 minutes: fencing tokens keep rising (the counter only rises; the
 *              server-clock floor does not pull it back); holds granted after the jump, and
 *              holds whose owner is alive and renewing, expire a lease after their last
 *              renewal as always; a hold whose owner died *before* the jump outlives its
 *              lease by the jump (a documented limit: liveness, not safety);
 *            - forward 10 minutes: every lease in Redis expires at once, so another client
 *              takes the lock while its holder still works: its token is larger, the fenced
 *              store refuses the old holder's writes, and the old holder is told (on_lost
 *              at its next renewal, unlock RS_ELOST): the lock never lies.
 *   redlock  one Redlock master's clock jumps forward: that master's vote expires early
 *            (its key gone while the others keep theirs). With the holder's quorum exactly
 *            two of three (the third master was stopped while it locked), a second client
 *            then wins a quorum of its own: Redlock itself breaks mutual exclusion
 *            (Kleppmann's scenario); fencing refuses the first holder's writes and its
 *            unlock says RS_ELOST. docs/deployments.md, "Clock jumps".
 *
 * Times are asserted only where a wall-clock jump of 10 minutes would move them by minutes.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "clockshim.h"
#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"

static void fini(void)
{
    tu_kill_kids();
}

TestSuite(clock, .timeout = 60, .fini = fini);

#define SHIM RS_TEST_BUILDDIR "/tests/rs-clockshim.so"
#define CLI RS_TEST_BUILDDIR "/redisync"
#define JUMP_MS (10LL * 60 * 1000) /* 10 minutes */

static void clock_new(ts_clock_t *k)
{
    cr_assert_eq(ts_clock_create(k, SHIM), 0, "cannot set up the clock shim %s", SHIM);
}

static long long server_time_s(const ts_server_t *s)
{
    redisContext *c = ts_connect(s);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "TIME");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "TIME failed");
    long long t = atoll(r->element[0]->str);
    freeReplyObject(r);
    redisFree(c);
    return t;
}

static long long real_time_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec;
}

/* A redis-server under k; asserts that its TIME follows k (a jump of off_ms now shows). */
static void server_under(ts_server_t *s, ts_clock_t *k)
{
    cr_assert_eq(ts_clock_server_start(s, k, NULL), 0, "cannot start redis-server under the shim");
    ts_clock_set_ms(k, -JUMP_MS);
    long long d = real_time_s() - server_time_s(s);
    ts_clock_set_ms(k, 0);
    cr_assert(d >= JUMP_MS / 1000 - 5 && d <= JUMP_MS / 1000 + 5,
              "the shim does not move the server's clock (TIME %lld s behind, want %lld)", d,
              JUMP_MS / 1000);
}

static rs_mutex_t *mutex_of(rs_client_t *c, const char *name)
{
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, name);
    cr_assert_eq(rc, 0, "rs_mutex_init(%s): %d %s", name, rc, rs_client_lasterror(c));
    return m;
}

/* The fenced store of testing.md on a redis-server no clock fault touches: a write with
 * token f is accepted only if f is at least the highest token seen for that name. */
static const char FENCED_WRITE[] =
    "local hi = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local f = tonumber(ARGV[1]) "
    "if f < hi then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1]) return 1";

static long long fenced_write(const ts_server_t *store, const char *name, uint64_t fence)
{
    return ts_cmd_int(store, "EVAL %s 1 fenced:%s %llu", FENCED_WRITE, name,
                      (unsigned long long)fence);
}

/* ------------------------------------------------------------------------------------- */
/* the shim itself                                                                         */

typedef struct date_kid {
    const ts_clock_t *k;
    int fd;
} date_kid_t;

static int run_date(void *arg)
{
    date_kid_t *d = arg;
    if (ts_clock_env(d->k) != 0 || dup2(d->fd, 1) < 0)
        return 126;
    execlp("date", "date", "+%s", (char *)NULL);
    return 127;
}

Test(clock, shim_moves_the_wall_clock_only)
{
    ts_clock_t k;
    clock_new(&k);
    ts_clock_set_ms(&k, 86400LL * 1000); /* a day ahead */
    int p[2];
    cr_assert_eq(pipe(p), 0);
    date_kid_t d = {&k, p[1]};
    pid_t pid = tu_spawn(run_date, &d);
    close(p[1]);
    tu_assert_exit0(pid, tu_reap(pid, 10000), "date under the shim");
    char buf[64] = "";
    ssize_t n = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    cr_assert_gt(n, 0);
    long long ahead = atoll(buf) - real_time_s();
    cr_expect(ahead >= 86400 - 5 && ahead <= 86400 + 5, "date(1) under a +1 day shim is %lld s "
              "ahead", ahead);

    /* and a redis-server's TIME moves both ways, at once, while it runs; its monotonic
     * clock does not (a DEBUG SLEEP of 0.3 s across a jump still takes 0.3 s) */
    ts_clock_set_ms(&k, 0);
    ts_server_t s;
    server_under(&s, &k);
    ts_clock_set_ms(&k, JUMP_MS);
    long long fwd = server_time_s(&s) - real_time_s();
    cr_expect(fwd >= JUMP_MS / 1000 - 5 && fwd <= JUMP_MS / 1000 + 5, "TIME %lld s ahead", fwd);
    ts_server_stop(&s);
    ts_clock_destroy(&k);
}

/* ------------------------------------------------------------------------------------- */
/* (a) a client's wall clock jumps while it waits with a deadline                          */

typedef struct cli_kid {
    const ts_clock_t *k;
    const char *url, *name;
} cli_kid_t;

static int run_cli_lock(void *arg)
{
    cli_kid_t *a = arg;
    if (ts_clock_env(a->k) != 0)
        return 126;
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0)
        dup2(fd, 2); /* (its "could not take ... within 4 s" message) */
    execl(CLI, CLI, "-u", a->url, "lock", "-w", "4", "-E", "42", a->name, "--", "true",
          (char *)NULL);
    return 127;
}

/* The command waits for a held mutex with -w 4 (an absolute CLOCK_REALTIME deadline 4 s
 * ahead, converted once on entry); once it is queued, its wall clock jumps by jump_ms. */
static void timed_wait_across_jump(long long jump_ms)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 5000, 2000, NULL);
    char name[48];
    ts_unique_prefix(name, sizeof name);
    rs_mutex_t *m = mutex_of(c, name);
    cr_assert_eq(rs_mutex_lock(m), 0);

    ts_clock_t k;
    clock_new(&k);
    cli_kid_t a = {&k, s.url, name};
    long long t0 = tu_mono_ms();
    pid_t pid = tu_spawn(run_cli_lock, &a);
    cr_assert(tu_wait_zcard(&s, "mutex", name, 1, 3000), "the command did not queue for %s",
              name);
    long long queued = tu_mono_ms() - t0;
    tu_sleep_ms(300);
    ts_clock_set_ms(&k, jump_ms);
    int st = tu_reap(pid, 20000);
    long long took = tu_mono_ms() - t0;
    cr_assert_neq(st, -1, "the command was still waiting %lld ms after it began, with -w 4 "
                  "(its wall clock jumped %+lld s while it waited: the deadline followed it)",
                  took, jump_ms / 1000);
    cr_assert(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 42,
              "the command ended with status 0x%x, want exit 42 (-w ran out)", st);
    /* it began before t0 + queued, and a wait may overrun its deadline by a round trip */
    cr_expect_geq(took, 4000 - 50, "the command gave up %lld ms after it began, before its "
                  "4 s (its wall clock jumped %+lld s while it waited)", took, jump_ms / 1000);
    cr_expect_leq(took, queued + 4000 + 3000, "the command gave up only %lld ms after it "
                  "began (queued at %lld ms), with -w 4", took, queued);
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_clock_destroy(&k);
    ts_server_stop(&s);
}

Test(clock, timed_wait_keeps_its_deadline_across_a_forward_jump)
{
    timed_wait_across_jump(JUMP_MS);
}

Test(clock, timed_wait_keeps_its_deadline_across_a_backward_jump)
{
    timed_wait_across_jump(-JUMP_MS);
}

/* ------------------------------------------------------------------------------------- */
/* (b) a redis-server's clock jumps                                                        */

static uint64_t lock_fence_unlock(rs_mutex_t *m)
{
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f = rs_mutex_fence(m);
    cr_assert_eq(rs_mutex_unlock(m), 0);
    return f;
}

typedef struct holder_kid {
    const ts_server_t *s;
    const char *name;
    int fd; /* writes "H" once it holds */
} holder_kid_t;

/* A client that takes the mutex (lease 1 s), says so, and dies without letting go. */
static int hold_and_wait(void *arg)
{
    holder_kid_t *h = arg;
    rs_client_t *c = tu_open_client_ex(h->s, 1000, 2000, NULL);
    rs_mutex_t *m = NULL;
    if (!c || rs_mutex_init(&m, c, h->name) != 0 || rs_mutex_lock(m) != 0)
        return 1;
    if (write(h->fd, "H", 1) != 1)
        return 2;
    pause(); /* killed by the test */
    return 0;
}

static pid_t dead_holder(const ts_server_t *s, const char *name)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    holder_kid_t h = {s, name, p[1]};
    pid_t pid = tu_spawn(hold_and_wait, &h);
    close(p[1]);
    char b;
    cr_assert(tu_read_full(p[0], &b, 1, 10000), "the holder child did not take %s", name);
    close(p[0]);
    kill(pid, SIGKILL);
    tu_reap(pid, 5000);
    return pid;
}

Test(clock, server_clock_back_tokens_rise_and_leases_expire)
{
    ts_clock_t k;
    clock_new(&k);
    ts_server_t s;
    server_under(&s, &k);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    char name[48];
    ts_unique_prefix(name, sizeof name);
    rs_mutex_t *m = mutex_of(c, name);

    uint64_t f1 = lock_fence_unlock(m);
    ts_clock_set_ms(&k, -JUMP_MS);
    uint64_t f2 = lock_fence_unlock(m);
    cr_expect_gt(f2, f1, "token %llu after the server clock went back 10 min, %llu before",
                 (unsigned long long)f2, (unsigned long long)f1);

    /* a hold that lives across the jump back while its owner renews (lease 1 s: renewals
     * every ~330 ms) ends normally, and its owner keeps it */
    ts_clock_set_ms(&k, 0);
    cr_assert_eq(rs_mutex_lock(m), 0);
    uint64_t f3 = rs_mutex_fence(m);
    cr_expect_gt(f3, f2);
    ts_clock_set_ms(&k, -JUMP_MS);
    tu_sleep_ms(2500);
    cr_expect_eq(rs_mutex_unlock(m), 0, "a hold renewed across a server clock jump back: "
                 "unlock %s", rs_client_lasterror(c));

    /* a holder that dies after the jump: its lease (1 s) expires as always, counted from its
     * last renewal on the server's new clock, and the lock goes on */
    dead_holder(&s, name);
    long long t0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(10000);
    int rc = rs_mutex_timedlock(m, &dl);
    long long waited = tu_mono_ms() - t0;
    cr_assert_eq(rc, 0, "the dead holder's lease (1 s, granted after the jump) did not expire "
                 "within 10 s: %d %s", rc, rs_client_lasterror(c));
    cr_expect_leq(waited, 1000 + 3000, "the lock was free only %lld ms after its holder died "
                  "(lease 1 s)", waited);
    uint64_t f4 = rs_mutex_fence(m);
    cr_expect_gt(f4, f3, "token %llu after the jump back, %llu before",
                 (unsigned long long)f4, (unsigned long long)f3);
    cr_expect_eq(rs_mutex_unlock(m), 0);

    /* the clock comes forward again: tokens still rise */
    ts_clock_set_ms(&k, 0);
    cr_expect_gt(lock_fence_unlock(m), f4);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
    ts_clock_destroy(&k);
}

/* The documented limit, measured: Redis keeps key expiry on its wall clock, so a hold whose
 * owner died before the server's clock went back by D stays in Redis for D more. Safe (the
 * lock is held longer, by nobody), but the lock is stuck that long: step clocks with
 * slewing NTP (chrony, ntpd -x), never back by much. */
Test(clock, server_clock_back_keeps_a_dead_holders_lease_by_the_jump)
{
    ts_clock_t k;
    clock_new(&k);
    ts_server_t s;
    server_under(&s, &k);
    rs_client_t *c = tu_open_client(&s, 1000, 2000, NULL);
    char name[48], key[96];
    ts_unique_prefix(name, sizeof name);
    snprintf(key, sizeof key, "rs:{%s}:mutex", name);
    rs_mutex_t *m = mutex_of(c, name);

    dead_holder(&s, name); /* granted, then its owner killed, before the jump */
    ts_clock_set_ms(&k, -JUMP_MS);
    long long pttl = ts_cmd_int(&s, "PTTL %s", key);
    cr_expect_gt(pttl, JUMP_MS - 5000, "PTTL %lld ms of a 1 s lease after a 10 min jump back",
                 pttl);
    tu_sleep_ms(2000); /* two leases */
    cr_expect_eq(rs_mutex_trylock(m), EBUSY, "the dead holder's lease expired although the "
                 "server's clock went back 10 min (Redis behaves differently from 7.0.15: "
                 "update docs/deployments.md)");
    ts_clock_set_ms(&k, 0); /* the clock comes back: the lease is long past */
    cr_expect_eq(rs_mutex_trylock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_client_close(c);
    ts_server_stop(&s);
    ts_clock_destroy(&k);
}

Test(clock, server_clock_forward_ends_leases_and_fencing_refuses_the_old_holder)
{
    ts_clock_t k;
    clock_new(&k);
    ts_server_t s, store;
    server_under(&s, &k);
    tu_start_server(&store);
    tu_lost_t la = {0};
    rs_client_t *a = tu_open_client(&s, 3000, 2000, &la);
    rs_client_t *b = tu_open_client(&s, 3000, 2000, NULL);
    char name[48];
    ts_unique_prefix(name, sizeof name);
    rs_mutex_t *ma = mutex_of(a, name), *mb = mutex_of(b, name);

    cr_assert_eq(rs_mutex_lock(ma), 0);
    uint64_t fa = rs_mutex_fence(ma);
    cr_assert_eq(fenced_write(&store, name, fa), 1);
    /* the grant makes a's watchdog write its holder record in a round that renews every
     * lease: let that round pass before the jump, or it may renew a's lease on the jumped
     * clock (a correct renewal, which would keep b out) */
    char rec[96];
    snprintf(rec, sizeof rec, "rs:{%s}:client", rs_client_id(a));
    long long end = tu_mono_ms() + 10000;
    while (ts_cmd_int(&s, "EXISTS %s", rec) != 1 && tu_mono_ms() < end)
        tu_sleep_ms(5);
    cr_assert_eq(ts_cmd_int(&s, "EXISTS %s", rec), 1, "a's first watchdog round did not come");
    ts_clock_set_ms(&k, JUMP_MS);
    /* the server's clock says 10 minutes passed: a's 3 s lease is over in Redis */
    int rc = rs_mutex_trylock(mb);
    cr_assert_eq(rc, 0, "b could not take the mutex after the server clock jumped 10 min "
                 "forward (%d %s): Redis expired keys on another clock?", rc,
                 rs_client_lasterror(b));
    uint64_t fb = rs_mutex_fence(mb);
    cr_expect_gt(fb, fa);
    cr_expect_eq(fenced_write(&store, name, fb), 1, "b's write refused");
    cr_expect_eq(fenced_write(&store, name, fa), 0, "the fenced store accepted a's write "
                 "(token %llu) after b's (token %llu)", (unsigned long long)fa,
                 (unsigned long long)fb);
    /* a is told: on_lost at its next renewal (within a lease), and its unlock says so */
    cr_expect(tu_wait_atomic(&la.n, 1, 5000), "a's on_lost did not come");
    cr_expect_eq(rs_mutex_unlock(ma), RS_ELOST, "a's unlock after it lost the mutex");
    cr_expect_eq(rs_mutex_unlock(mb), 0);
    ts_clock_set_ms(&k, 0); /* and back: tokens go on rising */
    cr_assert_eq(rs_mutex_lock(ma), 0);
    cr_expect_gt(rs_mutex_fence(ma), fb);
    cr_expect_eq(rs_mutex_unlock(ma), 0);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(a);
    rs_client_close(b);
    ts_server_stop(&s);
    ts_server_stop(&store);
    ts_clock_destroy(&k);
}

/* ------------------------------------------------------------------------------------- */
/* (c) a Redlock master's clock jumps forward                                              */

Test(clock, redlock_master_clock_forward_breaks_exclusion_fencing_holds)
{
    ts_clock_t k;
    clock_new(&k);
    ts_server_t ms[3], store;
    cr_assert_eq(ts_server_start(&ms[0], NULL), 0);
    server_under(&ms[1], &k);
    cr_assert_eq(ts_server_start(&ms[2], NULL), 0);
    tu_start_server(&store);
    char url[256];
    ts_redlock_url(url, sizeof url, ms, 3);
    rs_config_t cfg;
    tu_lost_t la = {0};
    tu_config(&cfg, url, 30000, 1000, &la); /* renewals every 10 s: none in the test's window */
    rs_client_t *a = NULL, *b = NULL;
    cr_assert_eq(rs_client_open(&a, &cfg), 0, "%s", rs_client_lasterror(NULL));
    tu_config(&cfg, url, 30000, 1000, NULL);
    cr_assert_eq(rs_client_open(&b, &cfg), 0, "%s", rs_client_lasterror(NULL));
    char name[48], key[96];
    ts_unique_prefix(name, sizeof name);
    snprintf(key, sizeof key, "rs:{%s}:mutex", name);
    rs_mutex_t *ma = mutex_of(a, name), *mb = mutex_of(b, name);

    /* a locks while master 2 is unreachable (stopped): its quorum is masters 0 and 1 */
    ts_server_pause(&ms[2]);
    int rc = rs_mutex_trylock(ma);
    ts_server_resume(&ms[2]);
    cr_assert_eq(rc, 0, "a could not lock with two of three masters: %d %s", rc,
                 rs_client_lasterror(a));
    uint64_t fa = rs_mutex_fence(ma);
    cr_assert_eq(fenced_write(&store, name, fa), 1);
    cr_assert_eq(ts_cmd_int(&ms[2], "EXISTS %s", key), 0, "master 2 granted a's lock");

    /* master 1's clock jumps forward: its vote for a expires at once, master 0's does not */
    ts_clock_set_ms(&k, JUMP_MS);
    cr_expect_eq(ts_cmd_int(&ms[1], "EXISTS %s", key), 0, "master 1 kept a's lock across a "
                 "10 min forward jump");
    cr_expect_gt(ts_cmd_int(&ms[0], "PTTL %s", key), 20000);

    /* b wins masters 1 and 2, a quorum: both now believe they hold the mutex */
    rc = rs_mutex_trylock(mb);
    cr_assert_eq(rc, 0, "b did not get a quorum after master 1's clock jump (%d %s): the "
                 "scenario this test shows did not happen", rc, rs_client_lasterror(b));
    uint64_t fb = rs_mutex_fence(mb);
    cr_expect_gt(fb, fa, "b's token %llu, a's %llu", (unsigned long long)fb,
                 (unsigned long long)fa);
    /* fencing: b writes; a, still believing it holds, is refused */
    cr_expect_eq(fenced_write(&store, name, fb), 1, "b's write refused");
    cr_expect_eq(fenced_write(&store, name, fa), 0, "the fenced store accepted the stale "
                 "holder's write (token %llu after %llu)", (unsigned long long)fa,
                 (unsigned long long)fb);
    /* and the lock does not lie to a: it holds one master of three, and its unlock says so */
    rc = rs_mutex_unlock(ma);
    cr_expect_eq(rc, RS_ELOST, "a's unlock: %d %s", rc, rs_client_lasterror(a));
    cr_expect_eq(rs_mutex_unlock(mb), 0, "b's unlock: %s", rs_client_lasterror(b));
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(a);
    rs_client_close(b);
    for (int i = 0; i < 3; i++)
        ts_server_stop(&ms[i]);
    ts_server_stop(&store);
    ts_clock_destroy(&k);
}
