/*
 * test_cli.c - the redisync command (tools/cli/), run as a program against a real
 * redis-server: exit statuses, exclusion between runs, -w/-E, semaphores, latches, signals,
 * the environment of COMMAND, lost holds, usage errors, unreachable Redis, info/list/release.
 *
 * Every test starts its own redis-server and a temporary directory; the runs of the command
 * write their stdout/stderr there (TAG.out, TAG.err) and the shell snippets they run leave
 * their traces there too. The binary is $REDISYNC_CLI, else RS_TEST_BUILDDIR/redisync (the
 * Makefile passes the build directory; `make test` builds the command first).
 *
 * Timing bounds are generous (a noisy 2-core machine running the suite in parallel):
 * waits are "within 10-20 s", never "within 100 ms"; sleeps inside COMMAND only create
 * windows in which an overlap would show.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "test_assert.h"
#include "test_cli.h"
#include "tls.h"

TestSuite(cli, .timeout = 60);


/* ---------------------------------------------------------------------------------------
 * Exit statuses and the environment of COMMAND
 * ------------------------------------------------------------------------------------- */

Test(cli, exit_status_passed_through, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("t0", "lock", "st", "--", "true", NULL), 0);
    cr_expect_eq(run("t42", "lock", "st", "--", "sh", "-c", "exit 42", NULL), 42);
    cr_expect_eq(run("t1", "lock", "st", "--", "false", NULL), 1);
    /* killed by a signal: 128 + signal, as shells report it */
    cr_expect_eq(run("tkill", "lock", "st", "--", "sh", "-c", "kill -KILL $$", NULL), 137);
    /* the -- may be left out, as with flock */
    cr_expect_eq(run("nodash", "lock", "st", "sh", "-c", "exit 5", NULL), 5);
    /* the same passes through every holding subcommand */
    cr_expect_eq(run("rd", "rdlock", "st", "--", "sh", "-c", "exit 11", NULL), 11);
    cr_expect_eq(run("wr", "wrlock", "st", "--", "sh", "-c", "exit 12", NULL), 12);
    cr_expect_eq(run("sem", "sem", "-n", "3", "st", "--", "sh", "-c", "exit 13", NULL), 13);

    /* not found: 127; found but not executable: 126; one message naming it */
    cr_expect_eq(run("nf", "lock", "st", "--", "no-such-command-rs", NULL), 127);
    cr_expect(strstr(err_of("nf"), "no-such-command-rs") != NULL, "stderr: %s", err_of("nf"));
    char p[256];
    path_of(p, sizeof p, "not-executable");
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("#!/bin/sh\nexit 0\n", f);
    fclose(f);
    chmod(p, 0644);
    cr_expect_eq(run("nx", "lock", "st", "--", p, NULL), 126);
    cr_expect(strstr(err_of("nx"), "not-executable") != NULL, "stderr: %s", err_of("nx"));
    /* after all that nothing is held */
    cr_expect_eq(run("free", "lock", "-w", "0", "st", "--", "true", NULL), 0, "stderr: %s",
                 err_of("free"));
}

Test(cli, command_environment, .init = setup, .fini = teardown)
{
    start_server();
    const char *show = "echo \"$REDISYNC_NAME $REDISYNC_FENCE\"";
    /* a stale value in our environment is replaced */
    const char *env[] = {"REDISYNC_FENCE=999", "REDISYNC_NAME=stale", NULL};
    cr_assert_eq(run_env("m1", env, 1, "lock", "env-name", "--", "sh", "-c", show, NULL), 0);
    cr_assert_eq(run_env("m2", env, 1, "lock", "env-name", "--", "sh", "-c", show, NULL), 0);
    char n1[64] = "", n2[64] = "";
    uint64_t f1 = 0, f2 = 0;
    cr_assert_eq(sscanf(out_of("m1"), "%63s %" SCNu64, n1, &f1), 2, "out: %s", out_of("m1"));
    cr_assert_eq(sscanf(out_of("m2"), "%63s %" SCNu64, n2, &f2), 2, "out: %s", out_of("m2"));
    cr_expect_str_eq(n1, "env-name");
    cr_expect_gt(f1, 0);
    cr_expect_neq(f1, 999);
    cr_expect_gt(f2, f1, "fencing tokens rise: %" PRIu64 " then %" PRIu64, f1, f2);

    /* read holds: 0; write holds and permits: a token */
    cr_assert_eq(run("rd", "rdlock", "rw", "--", "sh", "-c", show, NULL), 0);
    cr_expect_str_eq(out_of("rd"), "rw 0\n");
    cr_assert_eq(run("wr", "wrlock", "rw", "--", "sh", "-c", show, NULL), 0);
    uint64_t fw = 0;
    cr_expect_eq(sscanf(out_of("wr"), "rw %" SCNu64, &fw), 1, "out: %s", out_of("wr"));
    cr_expect_gt(fw, 0);
    cr_assert_eq(run("sem", "sem", "-n", "2", "pool", "--", "sh", "-c", show, NULL), 0);
    uint64_t fs = 0;
    cr_expect_eq(sscanf(out_of("sem"), "pool %" SCNu64, &fs), 1, "out: %s", out_of("sem"));
    cr_expect_gt(fs, 0);

    /* the URL may come from $REDISYNC_URL */
    char url[160];
    snprintf(url, sizeof url, "REDISYNC_URL=%s", T.srv.url);
    const char *env2[] = {url, NULL};
    cr_expect_eq(run_env("envurl", env2, 0, "lock", "env-name", "--", "sh", "-c", show, NULL),
                 0, "stderr: %s", err_of("envurl"));
    cr_expect(strncmp(out_of("envurl"), "env-name ", 9) == 0, "out: %s", out_of("envurl"));
}

/* ---------------------------------------------------------------------------------------
 * Exclusion and waiting
 * ------------------------------------------------------------------------------------- */

Test(cli, lock_runs_serialize, .init = setup, .fini = teardown)
{
    start_server();
    const char *script = "echo \"S $(date +%s%N)\" >> log; sleep 0.3; "
                         "echo \"E $(date +%s%N)\" >> log";
    enum { N = 3 };
    pid_t p[N];
    char tag[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(tag[i], sizeof tag[i], "r%d", i);
        p[i] = spawn(tag[i], "lock", "ser", "--", "sh", "-c", script, NULL);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(reap(p[i], 30000), 0, "run %d: stderr %s", i, err_of(tag[i]));

    /* S E S E S E, each start after the previous end */
    char *log = slurp("log");
    char kind[2 * N];
    long long ts[2 * N];
    int n = 0;
    for (char *line = strtok(log, "\n"); line && n < 2 * N; line = strtok(NULL, "\n"), n++)
        cr_assert_eq(sscanf(line, "%c %lld", &kind[n], &ts[n]), 2, "bad line: %s", line);
    cr_assert_eq(n, 2 * N, "expected %d lines", 2 * N);
    for (int i = 0; i < 2 * N; i++) {
        cr_expect_eq(kind[i], i % 2 == 0 ? 'S' : 'E', "line %d is %c: the runs overlapped", i,
                     kind[i]);
        if (i > 0)
            cr_expect_geq(ts[i], ts[i - 1], "line %d goes back in time", i);
    }
}

Test(cli, wait_runs_out, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = start_holder("holder", "lock", "busy", "ready");

    long long t0 = tu_mono_ms();
    cr_expect_eq(run("w03", "lock", "-w", "0.3", "busy", "--", "touch", "ran1", NULL), 1);
    long long took = tu_mono_ms() - t0;
    cr_expect_geq(took, 250, "-w 0.3 gave up after %lld ms", took);
    cr_expect_lt(took, 15000);
    const char *e = err_of("w03");
    cr_expect_eq(count_lines(e), 1, "one line expected: %s", e);
    cr_expect(strstr(e, "busy") && strstr(e, "timed out"), "stderr: %s", e);

    cr_expect_eq(run("E7", "lock", "-w", "0.2", "-E", "7", "busy", "--", "touch", "ran2", NULL),
                 7);
    cr_expect_eq(count_lines(err_of("E7")), 1, "stderr: %s", err_of("E7"));
    cr_expect_eq(run("w0", "lock", "-w", "0", "busy", "--", "touch", "ran3", NULL), 1);
    cr_expect_eq(count_lines(err_of("w0")), 1, "stderr: %s", err_of("w0"));
    cr_expect(strstr(err_of("w0"), "busy") != NULL, "stderr: %s", err_of("w0"));
    cr_expect_eq(run("w0E", "lock", "-w", "0", "-E", "0", "busy", "--", "touch", "ran4", NULL),
                 0);
    cr_expect(!file_exists("ran1") && !file_exists("ran2") && !file_exists("ran3") &&
                  !file_exists("ran4"),
              "COMMAND ran without the lock");

    /* the holder ends on SIGTERM (passed to sleep): 143, and the lock is free again */
    kill(h, SIGTERM);
    cr_expect_eq(reap(h, 20000), 143);
    cr_expect_eq(run("after", "lock", "-w", "5", "busy", "--", "touch", "ran5", NULL), 0,
                 "stderr: %s", err_of("after"));
    cr_expect(file_exists("ran5"));
}

Test(cli, sem_admits_two_at_a_time, .init = setup, .fini = teardown)
{
    start_server();
    const char *script = "echo + >> log; sleep 1; echo - >> log";
    enum { N = 4 };
    pid_t p[N];
    char tag[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(tag[i], sizeof tag[i], "s%d", i);
        p[i] = spawn(tag[i], "sem", "-n", "2", "pool", "--", "sh", "-c", script, NULL);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(reap(p[i], 40000), 0, "run %d: stderr %s", i, err_of(tag[i]));
    /* replay the log: '+' is written after taking a permit, '-' before giving it back, so
     * the count at any point is at most the number of permits taken then */
    const char *log = slurp("log");
    int cur = 0, max = 0, lines = 0;
    for (const char *c = log; *c; c++) {
        if (*c == '+')
            cur++, lines++;
        else if (*c == '-')
            cur--, lines++;
        if (cur > max)
            max = cur;
    }
    cr_expect_eq(lines, 2 * N, "log: %s", log);
    cr_expect_leq(max, 2, "%d runs held a permit at once", max);
    cr_expect_eq(max, 2, "the semaphore never admitted two at once (log: %s)", log);
}

Test(cli, rwlock_readers_share_writer_excludes, .init = setup, .fini = teardown)
{
    start_server();
    pid_t r = start_holder("reader", "rdlock", "rwx", "ready");
    cr_expect_eq(run("rd2", "rdlock", "-w", "0", "rwx", "--", "true", NULL), 0, "stderr: %s",
                 err_of("rd2"));
    cr_expect_eq(run("wr", "wrlock", "-w", "0", "rwx", "--", "touch", "wrote", NULL), 1);
    cr_expect(!file_exists("wrote"));
    kill(r, SIGTERM);
    cr_expect_eq(reap(r, 20000), 143);
    cr_expect_eq(run("wr2", "wrlock", "-w", "5", "rwx", "--", "true", NULL), 0, "stderr: %s",
                 err_of("wr2"));
}

/* ---------------------------------------------------------------------------------------
 * Latch
 * ------------------------------------------------------------------------------------- */

Test(cli, latch_opens_at_zero, .init = setup, .fini = teardown)
{
    start_server();
    /* never armed: count and down say so (1) */
    cr_expect_eq(run("c0", "latch", "gate", "--count", NULL), 1);
    cr_expect_eq(run("d0", "latch", "gate", "--down", NULL), 1);

    cr_assert_eq(run("arm", "latch", "gate", "--arm", "2", NULL), 0, "stderr: %s",
                 err_of("arm"));
    cr_expect_eq(run("c1", "latch", "gate", "--count", NULL), 0);
    cr_expect_str_eq(out_of("c1"), "2\n");

    pid_t w = spawn("wait", "latch", "gate", "--wait", NULL);
    tu_sleep_ms(300);
    cr_expect_eq(run("dn1", "latch", "--down", "gate", NULL), 0, "stderr: %s", err_of("dn1"));
    cr_expect_eq(run("c2", "latch", "gate", "--count", NULL), 0);
    cr_expect_str_eq(out_of("c2"), "1\n");
    tu_sleep_ms(300);
    cr_expect(running(w), "--wait returned before the count reached 0");
    cr_expect_eq(run("dn2", "latch", "gate", "--down", NULL), 0, "stderr: %s", err_of("dn2"));
    cr_expect_eq(reap(w, 20000), 0, "--wait did not return 0 (stderr: %s)", err_of("wait"));
    cr_expect_eq(run("c3", "latch", "gate", "--count", NULL), 0);
    cr_expect_str_eq(out_of("c3"), "0\n");
    /* open: a wait returns at once, a down is a no-op */
    cr_expect_eq(run("w2", "latch", "gate", "--wait", "-w", "0", NULL), 0);
    cr_expect_eq(run("dn3", "latch", "gate", "--down", NULL), 0);

    /* a closed latch: --wait -w runs out with 1 (or -E) and one line */
    cr_assert_eq(run("arm2", "latch", "gate2", "--arm", "1", NULL), 0);
    cr_expect_eq(run("wt", "latch", "gate2", "--wait", "-w", "0.3", NULL), 1);
    cr_expect_eq(count_lines(err_of("wt")), 1, "stderr: %s", err_of("wt"));
    cr_expect_eq(run("wtE", "latch", "gate2", "--wait", "-w", "0.2", "-E", "9", NULL), 9);
    /* --arm re-arms an opened latch */
    cr_expect_eq(run("dn4", "latch", "gate2", "--down", NULL), 0);
    cr_expect_eq(run("rearm", "latch", "gate2", "--arm", "3", NULL), 0);
    cr_expect_eq(run("c4", "latch", "gate2", "--count", NULL), 0);
    cr_expect_str_eq(out_of("c4"), "3\n");
}

/* ---------------------------------------------------------------------------------------
 * Signals
 * ------------------------------------------------------------------------------------- */

Test(cli, sigterm_is_forwarded_and_the_hold_released, .init = setup, .fini = teardown)
{
    start_server();
    const char *script = "trap 'echo TERM >> log; exit 3' TERM; touch ready; "
                         "while :; do sleep 0.05; done";
    pid_t h = spawn("holder", "lock", "sig", "--", "sh", "-c", script, NULL);
    cr_assert(wait_file("ready", 20000), "stderr: %s", err_of("holder"));
    cr_expect_eq(run("busy", "lock", "-w", "0", "sig", "--", "true", NULL), 1);
    kill(h, SIGTERM);
    cr_expect_eq(reap(h, 20000), 3, "COMMAND's own status after its TERM trap");
    cr_expect_str_eq(slurp("log"), "TERM\n");
    cr_expect_eq(run("free", "lock", "-w", "0", "sig", "--", "true", NULL), 0, "stderr: %s",
                 err_of("free"));

    /* SIGINT and SIGHUP too; a COMMAND killed by it gives 128 + signal */
    pid_t h2 = start_holder("holder2", "lock", "sig", "ready2");
    kill(h2, SIGINT);
    cr_expect_eq(reap(h2, 20000), 130);
}

Test(cli, sighup_and_sigint_forwarded, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = start_holder("h1", "wrlock", "sig", "ready1");
    kill(h, SIGHUP);
    cr_expect_eq(reap(h, 20000), 128 + SIGHUP);
    pid_t h2 = start_holder("h2", "lock", "sig", "ready2");
    kill(h2, SIGINT);
    cr_expect_eq(reap(h2, 20000), 130);
    cr_expect_eq(run("free", "wrlock", "-w", "0", "sig", "--", "true", NULL), 0);
    cr_expect_eq(run("free2", "lock", "-w", "0", "sig", "--", "true", NULL), 0);
}

Test(cli, signal_while_waiting_leaves_no_hold, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = start_holder("holder", "lock", "q", "ready");
    /* a waiter queues behind it; SIGTERM makes it leave: 143, COMMAND never runs */
    pid_t w = spawn("waiter", "lock", "q", "--", "touch", "ran", NULL);
    cr_assert(wait_cmd_int(1, 20000, "ZCARD rs:{%s}:mutex:q", "q"), "the waiter never queued");
    kill(w, SIGTERM);
    cr_expect_eq(reap(w, 20000), 143, "stderr: %s", err_of("waiter"));
    cr_expect(wait_cmd_int(0, 20000, "ZCARD rs:{%s}:mutex:q", "q"), "the queue entry stayed");
    /* the same with SIGINT: 130 */
    pid_t w2 = spawn("waiter2", "lock", "q", "--", "touch", "ran", NULL);
    cr_assert(wait_cmd_int(1, 20000, "ZCARD rs:{%s}:mutex:q", "q"), "the waiter never queued");
    kill(w2, SIGINT);
    cr_expect_eq(reap(w2, 20000), 130, "stderr: %s", err_of("waiter2"));
    cr_expect(!file_exists("ran"), "COMMAND ran after the waiter was interrupted");

    /* once the holder is gone the lock is free at once: nobody was left holding it */
    kill(h, SIGTERM);
    cr_expect_eq(reap(h, 20000), 143);
    cr_expect_eq(run("free", "lock", "-w", "0", "q", "--", "true", NULL), 0, "stderr: %s",
                 err_of("free"));
    cr_expect(!file_exists("ran"));
}

/* ---------------------------------------------------------------------------------------
 * A hold lost while COMMAND runs
 * ------------------------------------------------------------------------------------- */

Test(cli, lost_hold_kills_with_kill_on_lost, .init = setup, .fini = teardown)
{
    start_server();
    const char *script = "trap 'echo TERM >> log; exit 0' TERM; touch ready; "
                         "while :; do sleep 0.05; done";
    pid_t h = spawn("holder", "lock", "-l", "0.4", "--kill-on-lost", "lost", "--", "sh", "-c",
                    script, NULL);
    cr_assert(wait_file("ready", 20000), "stderr: %s", err_of("holder"));
    /* the lock disappears behind the holder's back: its next renewal finds it gone */
    cr_assert_eq(ts_cmd_int(&T.srv, "DEL rs:{%s}:mutex", "lost"), 1);
    cr_expect_eq(reap(h, 20000), 75, "the documented status of a lost hold");
    cr_expect_str_eq(slurp("log"), "TERM\n", "COMMAND was not signalled");
    cr_expect(strstr(err_of("holder"), "lost") != NULL, "stderr: %s", err_of("holder"));
}

Test(cli, lost_hold_reported_without_kill, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = spawn("holder", "lock", "-l", "0.4", "lost", "--", "sh", "-c",
                    "touch ready; sleep 1.5; echo done >> log; exit 0", NULL);
    cr_assert(wait_file("ready", 20000), "stderr: %s", err_of("holder"));
    cr_assert_eq(ts_cmd_int(&T.srv, "DEL rs:{%s}:mutex", "lost"), 1);
    cr_expect_eq(reap(h, 20000), 75);
    cr_expect_str_eq(slurp("log"), "done\n", "COMMAND should have run to its end");
    const char *e = err_of("holder");
    cr_expect(strstr(e, "lost") != NULL, "stderr: %s", e);
    cr_expect_eq(count_lines(e), 1, "reported once: %s", e);
}

Test(cli, watchdog_keeps_a_long_command_holding, .init = setup, .fini = teardown)
{
    start_server();
    /* COMMAND runs for several leases: the hold stays, nobody else gets in */
    pid_t h = spawn("holder", "lock", "-l", "0.3", "long", "--", "sh", "-c",
                    "touch ready; sleep 1.5", NULL);
    cr_assert(wait_file("ready", 20000));
    tu_sleep_ms(600);
    cr_expect_eq(run("busy", "lock", "-w", "0", "long", "--", "true", NULL), 1);
    cr_expect_eq(reap(h, 20000), 0, "stderr: %s", err_of("holder"));
    cr_expect_str_eq(err_of("holder"), "");
}

/* ---------------------------------------------------------------------------------------
 * Usage errors, bad URLs, unreachable Redis
 * ------------------------------------------------------------------------------------- */

Test(cli, usage_errors_exit_2, .init = setup, .fini = teardown)
{
    start_server();
    static const char *const cases[][10] = {
        {NULL},
        {"bogus", NULL},
        {"lock", NULL},
        {"lock", "name", "--", NULL},
        {"lock", "-q", "name", "--", "true", NULL},
        {"lock", "-w", "abc", "name", "--", "true", NULL},
        {"lock", "-w", "-1", "name", "--", "true", NULL},
        {"lock", "-E", "300", "name", "--", "true", NULL},
        {"lock", "-l", "0", "name", "--", "true", NULL},
        {"rdlock", "--kill-after", "x", "name", "--", "true", NULL},
        {"lock", "", "--", "true", NULL},
        {"sem", "name", "--", "true", NULL},
        {"sem", "-n", "0", "name", "--", "true", NULL},
        {"latch", "name", NULL},
        {"latch", "name", "--arm", "0", NULL},
        {"latch", "name", "--arm", "1", "--down", NULL},
        {"latch", "name", "--down", "-w", "1", NULL},
        {"latch", NULL},
        {"info", NULL},
        {"info", "-k", "bogus", "name", NULL},
        {"list", "a", "b", NULL},
        {"release", "-k", "mutex", "name", NULL},
        {"release", "--force", "name", NULL},
        {"--bogus", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const *a = cases[i];
        pid_t pid = spawn_arr("u", 1, NULL, a);
        int st = reap(pid, 20000);
        cr_expect_eq(st, 2, "case %zu (%s %s ...): status %d, stderr: %s", i,
                     a[0] ? a[0] : "(none)", a[0] && a[1] ? a[1] : "", st, err_of("u"));
        cr_expect(strstr(err_of("u"), "redisync") != NULL, "case %zu: stderr: %s", i,
                  err_of("u"));
    }
    cr_expect(!file_exists("ran"));
    /* --help: 0, on stdout */
    cr_expect_eq(run("help", "--help", NULL), 0);
    cr_expect(strstr(out_of("help"), "Usage") != NULL);
    cr_expect_eq(run("help2", "lock", "-h", NULL), 0);
    cr_expect_eq(run("version", "--version", NULL), 0);
    cr_expect(strstr(out_of("version"), "redisync") != NULL);
}

Test(cli, unreachable_and_malformed_urls, .init = setup, .fini = teardown)
{
    /* nothing listens on port 1 */
    long long t0 = tu_mono_ms();
    cr_expect_eq(run_env("down", NULL, 0, "-u", "redis://127.0.0.1:1", "lock", "x", "--",
                         "touch", "ran", NULL),
                 69);
    cr_expect_lt(tu_mono_ms() - t0, 20000);
    const char *e = err_of("down");
    cr_expect_eq(count_lines(e), 1, "one line: %s", e);
    cr_expect(strstr(e, "127.0.0.1:1") != NULL, "the message should say where: %s", e);
    cr_expect(!file_exists("ran"));

    /* from $REDISYNC_URL too, and for the other subcommands */
    const char *env[] = {"REDISYNC_URL=redis://127.0.0.1:1", NULL};
    cr_expect_eq(run_env("down2", env, 0, "latch", "x", "--count", NULL), 69);
    cr_expect_eq(count_lines(err_of("down2")), 1, "stderr: %s", err_of("down2"));

    /* malformed: a usage error (2), one line */
    cr_expect_eq(run_env("bad", NULL, 0, "-u", "nope://x", "lock", "x", "--", "touch", "ran",
                         NULL),
                 2);
    cr_expect_eq(count_lines(err_of("bad")), 1, "stderr: %s", err_of("bad"));
    cr_expect(strstr(err_of("bad"), "redisync:") != NULL, "stderr: %s", err_of("bad"));
    cr_expect_eq(run_env("bad2", NULL, 0, "-u", "redis://127.0.0.1:notaport", "sem", "-n", "1",
                         "x", "--", "touch", "ran", NULL),
                 2);
    cr_expect_eq(count_lines(err_of("bad2")), 1, "stderr: %s", err_of("bad2"));
    cr_expect(!file_exists("ran"));
}

/* ---------------------------------------------------------------------------------------
 * info, list, release --force
 * ------------------------------------------------------------------------------------- */

Test(cli, info_mutex_and_sem, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = start_holder("holder", "lock", "inf", "ready");
    pid_t s = spawn("semholder", "sem", "-n", "3", "pool", "--", "sh", "-c",
                    "touch ready2; exec sleep 30", NULL);
    cr_assert(wait_file("ready2", 20000), "stderr: %s", err_of("semholder"));

    cr_assert_eq(run("info", "info", "inf", NULL), 0, "stderr: %s", err_of("info"));
    const char *o = out_of("info");
    cr_expect(strstr(o, "kind:      mutex\n") != NULL, "out: %s", o);
    cr_expect(strstr(o, "holders:   1\n") != NULL, "out: %s", o);
    cr_expect(strstr(o, "holder:    ") != NULL, "out: %s", o);
    /* the holder's acquisition id without its secret (PUBLICID:N, never PUBLICID:N.SECRET:
     * the secret is what makes a grant message unforgeable) */
    const char *hl = strstr(o, "holder:    ");
    const char *eol = hl ? strchr(hl, '\n') : NULL;
    const char *dot = hl ? strchr(hl, '.') : NULL;
    cr_expect(hl && eol && (!dot || dot > eol), "the secret is shown: %s", o);
    cr_expect(strstr(o, "fence:     ") != NULL && !strstr(o, "fence:     0\n"), "out: %s", o);
    cr_expect(strstr(o, "waiters:   0\n") != NULL, "out: %s", o);
    cr_expect(strstr(o, "remaining: ") != NULL && !strstr(o, "remaining: -"), "out: %s", o);

    cr_assert_eq(run("infok", "info", "-k", "mutex", "inf", NULL), 0);
    cr_expect(strstr(out_of("infok"), "kind:      mutex\n") != NULL);
    cr_expect_eq(run("infosem", "info", "-k", "sem", "inf", NULL), 1, "no sem named inf");
    cr_expect_eq(run("none", "info", "nothing-here", NULL), 1);
    cr_expect_eq(count_lines(err_of("none")), 1);

    cr_assert_eq(run("isem", "info", "pool", NULL), 0, "stderr: %s", err_of("isem"));
    const char *so = out_of("isem");
    cr_expect(strstr(so, "kind:      sem\n") != NULL, "out: %s", so);
    cr_expect(strstr(so, "size:      3\n") != NULL, "out: %s", so);
    cr_expect(strstr(so, "free:      2\n") != NULL, "out: %s", so);

    cr_assert_eq(run("list", "list", NULL), 0, "stderr: %s", err_of("list"));
    const char *l = out_of("list");
    cr_expect(strstr(l, "mutex inf\n") != NULL, "list: %s", l);
    cr_expect(strstr(l, "sem pool\n") != NULL, "list: %s", l);
    cr_assert_eq(run("listp", "list", "in*", NULL), 0);
    cr_expect(strstr(out_of("listp"), "mutex inf\n") != NULL, "list: %s", out_of("listp"));
    cr_expect(strstr(out_of("listp"), "pool") == NULL, "list: %s", out_of("listp"));

    kill(h, SIGTERM);
    kill(s, SIGTERM);
    cr_expect_eq(reap(h, 20000), 143);
    cr_expect_eq(reap(s, 20000), 143);
}

Test(cli, info_rwlock, .init = setup, .fini = teardown)
{
    start_server();
    pid_t w = start_holder("writer", "wrlock", "rwi", "ready");
    cr_assert_eq(run("info", "info", "rwi", NULL), 0, "stderr: %s", err_of("info"));
    const char *o = out_of("info");
    cr_expect(strstr(o, "kind:      rwlock\n") != NULL, "out: %s", o);
    cr_expect(strstr(o, "mode:      write\n") != NULL, "out: %s", o);
    cr_assert_eq(run("list", "list", NULL), 0, "stderr: %s", err_of("list"));
    cr_expect(strstr(out_of("list"), "rwlock rwi\n") != NULL, "list: %s", out_of("list"));
    kill(w, SIGTERM);
    cr_expect_eq(reap(w, 20000), 143);
}

Test(cli, info_latch, .init = setup, .fini = teardown)
{
    start_server();
    cr_assert_eq(run("arm", "latch", "gate", "--arm", "4", NULL), 0);
    cr_assert_eq(run("il", "info", "-k", "latch", "gate", NULL), 0, "stderr: %s",
                 err_of("il"));
    cr_expect(strstr(out_of("il"), "count:     4\n") != NULL, "out: %s", out_of("il"));
    cr_assert_eq(run("list2", "list", "ga*", NULL), 0);
    cr_expect_str_eq(out_of("list2"), "latch gate\n");
}

Test(cli, release_force, .init = setup, .fini = teardown)
{
    start_server();
    const char *script = "trap 'exit 0' TERM; touch ready; while :; do sleep 0.05; done";
    pid_t h = spawn("holder", "lock", "-l", "1", "--kill-on-lost", "rel", "--", "sh", "-c",
                    script, NULL);
    cr_assert(wait_file("ready", 20000), "stderr: %s", err_of("holder"));
    cr_assert_eq(run("rel", "release", "--force", "-k", "mutex", "rel", NULL), 0, "stderr: %s",
                 err_of("rel"));
    const char *o = out_of("rel");
    cr_expect(strstr(o, "mutex rel: released 1 hold") != NULL, "out: %s", o);
    /* free at once for others; the holder learns at its next renewal */
    cr_expect_eq(run("free", "lock", "-w", "0", "rel", "--", "true", NULL), 0, "stderr: %s",
                 err_of("free"));
    cr_expect_eq(reap(h, 20000), 75);
    cr_expect(strstr(err_of("holder"), "lost") != NULL, "stderr: %s", err_of("holder"));
    /* nothing left */
    cr_assert_eq(run("rel2", "release", "--force", "-k", "mutex", "rel", NULL), 0);
    cr_expect(strstr(out_of("rel2"), "nothing was held") != NULL, "out: %s", out_of("rel2"));
}

/* rediss:// with the TLS options: the command runs over TLS; a certificate that does not
 * verify is 69 with one line saying so; an unknown tls_ option is a usage error (2). */
Test(cli, tls_urls, .init = setup, .fini = teardown)
{
    tt_certs_t t;
    cr_assert_eq(tt_certs_make(&t), 0);
    ts_server_t s;
    int port;
    cr_assert_eq(tt_server_start(&s, &port, &t, NULL, 0), 0);
    char url[1024];
    snprintf(url, sizeof url, "rediss://%s127.0.0.1:%d?tls_ca=%s", ts_acl_userinfo(), port, t.ca);
    cr_expect_eq(run_env("tls", NULL, 0, "-u", url, "lock", "x", "--", "touch", "ran", NULL), 0,
                 "stderr: %s", err_of("tls"));
    cr_expect(file_exists("ran"));
    /* -v (and info -v) say that the connection is encrypted, and with what */
    snprintf(url, sizeof url, "rediss://%s127.0.0.1:%d?tls_ca=%s", ts_acl_userinfo(), port, t.ca);
    run_env("tlsv", NULL, 0, "-u", url, "-v", "info", "-k", "mutex", "x", NULL);
    cr_expect(strstr(err_of("tlsv"), "over TLSv1."), "stderr: %s", err_of("tlsv"));

    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_ca=%s", port, t.other_ca);
    cr_expect_eq(run_env("tlsca", NULL, 0, "-u", url, "lock", "x", "--", "touch", "ran2", NULL),
                 69);
    const char *e = err_of("tlsca");
    cr_expect_eq(count_lines(e), 1, "one line: %s", e);
    cr_expect(strstr(e, "redisync:") && strstr(e, "certificate verify failed"), "stderr: %s", e);
    cr_expect(!file_exists("ran2"));

    cr_expect_eq(run_env("tlsopt", NULL, 0, "-u", "rediss://127.0.0.1:1?tls_nope=1", "lock", "x",
                         "--", "touch", "ran3", NULL),
                 2);
    cr_expect(strstr(err_of("tlsopt"), "unknown TLS option"), "stderr: %s", err_of("tlsopt"));
    ts_server_stop(&s);
    tt_certs_free(&t);
}
