/*
 * test_cli_flock.c - the habits flock(1), etcdctl lock and consul lock users bring to the
 * redisync command (issue 14, "The command"), run as a program against a real redis-server.
 *
 *   nonblock                 -n/--nonblock is -w 0 on lock, rdlock, wrlock; --nonblock on sem
 *                            (where -n is the count)
 *   dash_c_runs_sh           NAME -c 'CMDLINE' runs CMDLINE with sh -c (also -c before NAME)
 *   verbose_and_version      --verbose says how long the wait took and what runs; -V
 *   flock_options_refused    -s, -x, -o, --unlock, -F and the descriptor form: exit 2, why
 *   hold_without_command     NAME alone prints the fencing token, holds until SIGTERM, then
 *                            releases (status 0); a lost hold ends it with 75
 *   kill_on_lost_escalates   --kill-on-lost: SIGTERM, then SIGKILL after --kill-after
 *   sem_size_mismatch        sem -n with another size than the semaphore's says so
 */
#include <criterion/criterion.h>

#include "test_cli.h"

TestSuite(cli_flock, .timeout = 60);

Test(cli_flock, nonblock, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = start_holder("holder", "lock", "nb", "ready");
    cr_expect_eq(run("n", "lock", "-n", "nb", "--", "touch", "ran", NULL), 1, "stderr: %s",
                 err_of("n"));
    cr_expect_eq(run("nb", "lock", "--nonblock", "nb", "--", "touch", "ran", NULL), 1);
    cr_expect(strstr(err_of("n"), "at once") != NULL, "stderr: %s", err_of("n"));
    cr_expect_eq(run("free", "lock", "-n", "other", "--", "true", NULL), 0, "stderr: %s",
                 err_of("free"));
    pid_t w = start_holder("writer", "wrlock", "rw", "wready");
    cr_expect_eq(run("rd", "rdlock", "-n", "rw", "--", "touch", "ran", NULL), 1);
    cr_expect_eq(run("semnb", "sem", "-n", "1", "--nonblock", "s1", "--", "true", NULL), 0,
                 "stderr: %s", err_of("semnb"));
    cr_expect(!file_exists("ran"));
    kill(h, SIGTERM);
    kill(w, SIGTERM);
    cr_expect_eq(reap(h, 20000), 143);
    cr_expect_eq(reap(w, 20000), 143);
}

Test(cli_flock, dash_c_runs_sh, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("c", "lock", "name", "-c", "echo $REDISYNC_NAME > out1; exit 3", NULL), 3,
                 "stderr: %s", err_of("c"));
    cr_expect_str_eq(slurp("out1"), "name\n");
    cr_expect_eq(run("c2", "lock", "-c", "echo two > out2", "name", NULL), 0, "stderr: %s",
                 err_of("c2"));
    cr_expect_str_eq(slurp("out2"), "two\n");
    cr_expect_eq(run("c3", "lock", "name", "-c", NULL), 2);
    cr_expect_eq(run("c4", "lock", "name", "-c", "true", "extra", NULL), 2);
    cr_expect_eq(run("c5", "lock", "-c", "true", "name", "--", "true", NULL), 2);
}

Test(cli_flock, verbose_and_version, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("v", "lock", "--verbose", "name", "--", "true", NULL), 0);
    const char *e = err_of("v");
    cr_expect(strstr(e, "took") != NULL && strstr(e, "seconds") != NULL, "stderr: %s", e);
    cr_expect(strstr(e, "executing true") != NULL, "stderr: %s", e);
    cr_expect_eq(run("V", "-V", NULL), 0);
    cr_expect(strstr(out_of("V"), "redisync") != NULL, "stdout: %s", out_of("V"));
    cr_expect_eq(run("V2", "lock", "-V", NULL), 0);
    cr_expect(strstr(out_of("V2"), "redisync") != NULL);
}

Test(cli_flock, flock_options_refused, .init = setup, .fini = teardown)
{
    start_server();
    static const struct {
        const char *args[8];
        const char *says;
    } cases[] = {
        {{"lock", "-s", "name", "--", "true", NULL}, "rdlock"},
        {{"lock", "-x", "name", "--", "true", NULL}, "wrlock"},
        {{"lock", "-e", "name", "--", "true", NULL}, "exclusive already"},
        {{"lock", "-o", "name", "--", "true", NULL}, "no counterpart"},
        {{"lock", "--unlock", "name", NULL}, "no counterpart"},
        {{"lock", "-F", "name", "--", "true", NULL}, "renew"},
        {{"lock", "9", NULL}, "file-descriptor form"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pid_t pid = spawn_arr("r", 1, NULL, cases[i].args);
        cr_expect_eq(reap(pid, 20000), 2, "case %zu: stderr: %s", i, err_of("r"));
        cr_expect(strstr(err_of("r"), cases[i].says) != NULL, "case %zu: stderr: %s", i,
                  err_of("r"));
    }
}

Test(cli_flock, hold_without_command, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = spawn("hold", "lock", "step", NULL);
    long long until = tu_mono_ms() + 20000;
    while (!strchr(out_of("hold"), '\n') && tu_mono_ms() < until)
        tu_sleep_ms(10);
    unsigned long long f = strtoull(out_of("hold"), NULL, 10);
    cr_expect_gt(f, 0, "no fencing token on stdout: '%s' (stderr: %s)", out_of("hold"),
                 err_of("hold"));
    cr_expect_eq(run("busy", "lock", "-w", "0", "step", "--", "true", NULL), 1,
                 "not held while it waits for a signal");
    kill(h, SIGTERM);
    cr_expect_eq(reap(h, 20000), 0, "released on SIGTERM: stderr %s", err_of("hold"));
    cr_expect_eq(run("free", "lock", "-w", "0", "step", "--", "true", NULL), 0, "not released");
    /* lost while held: 75 at once, said on stderr */
    pid_t l = spawn("lost", "lock", "-l", "0.4", "gone", NULL);
    until = tu_mono_ms() + 20000;
    while (!strchr(out_of("lost"), '\n') && tu_mono_ms() < until)
        tu_sleep_ms(10);
    cr_assert_eq(ts_cmd_int(&T.srv, "DEL rs:{%s}:mutex", "gone"), 1);
    cr_expect_eq(reap(l, 20000), 75, "stderr: %s", err_of("lost"));
    cr_expect(strstr(err_of("lost"), "lost") != NULL, "stderr: %s", err_of("lost"));
}

Test(cli_flock, kill_on_lost_escalates, .init = setup, .fini = teardown)
{
    start_server();
    /* COMMAND ignores SIGTERM: SIGKILL follows after --kill-after */
    pid_t h = spawn("holder", "lock", "-l", "0.4", "--kill-on-lost", "--kill-after", "0.5",
                    "esc", "--", "sh", "-c", "trap '' TERM; touch ready; while :; do sleep 0.05; "
                    "done", NULL);
    cr_assert(wait_file("ready", 20000), "stderr: %s", err_of("holder"));
    cr_assert_eq(ts_cmd_int(&T.srv, "DEL rs:{%s}:mutex", "esc"), 1);
    cr_expect_eq(reap(h, 20000), 75, "stderr: %s", err_of("holder"));
    cr_expect(strstr(err_of("holder"), "SIGKILL") != NULL, "stderr: %s", err_of("holder"));
}

Test(cli_flock, sem_size_mismatch, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("a", "sem", "-n", "2", "slots", "--", "true", NULL), 0);
    cr_expect_str_eq(err_of("a"), "");
    cr_expect_eq(run("b", "sem", "-n", "5", "slots", "--", "true", NULL), 0);
    cr_expect(strstr(err_of("b"), "has 2 permits, not 5") != NULL, "stderr: %s", err_of("b"));
}
