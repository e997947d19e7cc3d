/*
 * test_cli_once.c - redisync once NAME -- COMMAND (issue 14), run as a program against a real
 * redis-server: COMMAND runs on one machine at a time until it exits 0; the others wait and
 * exit 0 without running it; a failure is COMMAND's status and the next run runs it again.
 *
 *   concurrent_runs_once   four runs at once: COMMAND ran once, never two at a time, all 0
 *   failure_then_success   a failing COMMAND's status; the next run runs it; later runs do not
 *   usage                  no COMMAND, --kill-on-lost: exit 2; -c CMDLINE works; -w 0 waits not
 */
#include <criterion/criterion.h>

#include "test_cli.h"

TestSuite(cli_once, .timeout = 60);

Test(cli_once, concurrent_runs_once, .init = setup, .fini = teardown)
{
    start_server();
    /* COMMAND notes its start and end; an overlap would show as two starts in a row */
    const char *script = "echo start >> log; sleep 0.3; echo end >> log";
    pid_t p[4];
    for (int i = 0; i < 4; i++) {
        char tag[8];
        snprintf(tag, sizeof tag, "r%d", i);
        p[i] = spawn(tag, "once", "migrate", "--", "sh", "-c", script, NULL);
    }
    for (int i = 0; i < 4; i++)
        cr_expect_eq(reap(p[i], 20000), 0, "run %d", i);
    cr_expect_str_eq(slurp("log"), "start\nend\n", "COMMAND ran more than once");
}

Test(cli_once, failure_then_success, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("f", "once", "job", "--", "sh", "-c", "echo f >> log; exit 3", NULL), 3);
    cr_expect_eq(run("s", "once", "job", "--", "sh", "-c", "echo s >> log", NULL), 0,
                 "stderr: %s", err_of("s"));
    cr_expect_eq(run("l", "once", "job", "--", "sh", "-c", "echo l >> log", NULL), 0);
    cr_expect_str_eq(slurp("log"), "f\ns\n", "runs after the success ran COMMAND");
    cr_expect_eq(run("v", "-v", "once", "job", "--", "true", NULL), 0);
    cr_expect(strstr(err_of("v"), "succeeded already") != NULL, "stderr: %s", err_of("v"));
}

Test(cli_once, usage, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("u1", "once", "job", NULL), 2);
    cr_expect_eq(run("u2", "once", "--kill-on-lost", "job", "--", "true", NULL), 2);
    cr_expect_eq(run("c", "once", "cj", "-c", "echo c >> log", NULL), 0, "stderr: %s",
                 err_of("c"));
    cr_expect_str_eq(slurp("log"), "c\n");
    /* -w 0 while another runs: 1 at once, COMMAND not run */
    pid_t h = spawn("h", "once", "busy", "--", "sh", "-c", "touch ready; sleep 2", NULL);
    cr_assert(wait_file("ready", 20000), "stderr: %s", err_of("h"));
    cr_expect_eq(run("n", "once", "-n", "busy", "--", "touch", "ran", NULL), 1, "stderr: %s",
                 err_of("n"));
    cr_expect(!file_exists("ran"));
    cr_expect_eq(reap(h, 20000), 0);
}
