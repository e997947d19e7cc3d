/*
 * test_cli_barrier.c - redisync barrier -n PARTIES NAME (issue 14), run as a program against a
 * real redis-server: runs return when PARTIES of them have arrived, the one that completed
 * the generation printing "serial"; -w, --nonblock and a signal withdraw the arrival.
 *
 *   generations          3 generations of 4 runs: nobody returns while 3 wait; all exit 0,
 *                        exactly one prints "serial" per generation
 *   timeout_withdraws    -w, --nonblock and -E: exit 1 (or CODE), the arrival withdrawn (a
 *                        later lone run does not trip with it)
 *   signal_withdraws     SIGTERM while waiting: 143, the arrival withdrawn
 *   info_list_usage      info and list show the barrier; another party count, a missing
 *                        -n, a COMMAND: exit 2; release --force -k barrier refused
 */
#include <criterion/criterion.h>

#include "test_cli.h"

TestSuite(cli_barrier, .timeout = 90);

/* the arrivals of the current generation: PREFIX:{NAME}:barrier:in */
static long long arrived(const char *name)
{
    char key[128];
    snprintf(key, sizeof key, "rs:{%s}:barrier:in", name);
    return ts_cmd_int(&T.srv, "SCARD %s", key);
}

static int wait_arrived(const char *name, long long n)
{
    char key[128];
    snprintf(key, sizeof key, "rs:{%s}:barrier:in", name);
    return wait_cmd_int(n, 20000, "SCARD %s", key);
}

Test(cli_barrier, generations, .init = setup, .fini = teardown)
{
    start_server();
    for (int gen = 0; gen < 3; gen++) {
        pid_t p[4];
        char tag[4][16];
        for (int i = 0; i < 3; i++) {
            snprintf(tag[i], sizeof tag[i], "g%dp%d", gen, i);
            p[i] = spawn(tag[i], "barrier", "-n", "4", "phase", NULL);
        }
        cr_assert(wait_arrived("phase", 3), "generation %d: 3 arrivals not seen (stderr: %s)",
                  gen, err_of(tag[0]));
        /* three of four arrived: none may have returned */
        for (int i = 0; i < 3; i++)
            cr_assert(running(p[i]), "generation %d: party %d returned before the 4th came "
                      "(stderr: %s)", gen, i, err_of(tag[i]));
        snprintf(tag[3], sizeof tag[3], "g%dp3", gen);
        p[3] = spawn(tag[3], "-v", "barrier", "-n", "4", "phase", NULL);
        int serial = 0;
        for (int i = 0; i < 4; i++) {
            cr_expect_eq(reap(p[i], 20000), 0, "generation %d party %d: %s", gen, i,
                         err_of(tag[i]));
            const char *out = out_of(tag[i]);
            cr_expect(!*out || !strcmp(out, "serial\n"), "stdout: '%s'", out);
            serial += !strcmp(out, "serial\n");
        }
        cr_expect_eq(serial, 1, "generation %d: %d serial runs", gen, serial);
        /* the last to arrive completed the generation; -v says how long it waited */
        cr_expect_str_eq(out_of(tag[3]), "serial\n");
        cr_expect(strstr(err_of(tag[3]), "tripped after") != NULL, "stderr: %s",
                  err_of(tag[3]));
        cr_expect_eq(arrived("phase"), 0);
    }
}

Test(cli_barrier, timeout_withdraws, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("t1", "barrier", "-n", "2", "-w", "0.3", "tb", NULL), 1, "stderr: %s",
                 err_of("t1"));
    cr_expect(strstr(err_of("t1"), "timed out") != NULL, "stderr: %s", err_of("t1"));
    cr_expect_eq(arrived("tb"), 0, "the timed-out arrival was left counted");
    /* had t1's arrival stayed, this lone run would trip the generation with it */
    cr_expect_eq(run("t2", "barrier", "-n", "2", "-E", "7", "-w", "0.3", "tb", NULL), 7,
                 "stderr: %s", err_of("t2"));
    cr_expect_eq(run("t3", "barrier", "-n", "2", "--nonblock", "tb", NULL), 1, "stderr: %s",
                 err_of("t3"));
    cr_expect_str_eq(out_of("t3"), "");
    cr_expect_eq(arrived("tb"), 0);
    /* --nonblock passes when it completes the generation */
    pid_t w = spawn("w", "barrier", "-n", "2", "tb", NULL);
    cr_assert(wait_arrived("tb", 1), "stderr: %s", err_of("w"));
    cr_expect_eq(run("nb", "barrier", "-n", "2", "--nonblock", "tb", NULL), 0, "stderr: %s",
                 err_of("nb"));
    cr_expect_str_eq(out_of("nb"), "serial\n");
    cr_expect_eq(reap(w, 20000), 0, "stderr: %s", err_of("w"));
    cr_expect_str_eq(out_of("w"), "");
}

Test(cli_barrier, signal_withdraws, .init = setup, .fini = teardown)
{
    start_server();
    pid_t w = spawn("w", "barrier", "-n", "2", "sb", NULL);
    cr_assert(wait_arrived("sb", 1), "stderr: %s", err_of("w"));
    kill(w, SIGTERM);
    cr_expect_eq(reap(w, 20000), 128 + SIGTERM, "stderr: %s", err_of("w"));
    cr_expect(strstr(err_of("w"), "withdrawn") != NULL, "stderr: %s", err_of("w"));
    cr_expect_eq(arrived("sb"), 0, "the interrupted arrival was left counted");
    cr_expect_eq(run("t", "barrier", "-n", "2", "-w", "0.3", "sb", NULL), 1, "stderr: %s",
                 err_of("t"));
}

Test(cli_barrier, info_list_usage, .init = setup, .fini = teardown)
{
    start_server();
    pid_t w = spawn("w", "barrier", "-n", "3", "ib", NULL);
    cr_assert(wait_arrived("ib", 1), "stderr: %s", err_of("w"));
    cr_expect_eq(run("i", "info", "ib", NULL), 0, "stderr: %s", err_of("i"));
    const char *info = out_of("i");
    cr_expect(strstr(info, "kind:      barrier\n") != NULL, "info: %s", info);
    cr_expect(strstr(info, "parties:   3\n") != NULL, "info: %s", info);
    cr_expect(strstr(info, "arrived:   1 ") != NULL, "info: %s", info);
    cr_expect_eq(run("ik", "info", "-k", "barrier", "ib", NULL), 0, "stderr: %s",
                 err_of("ik"));
    cr_expect_eq(run("l", "list", NULL), 0);
    cr_expect(strstr(out_of("l"), "barrier ib\n") != NULL, "list: %s", out_of("l"));
    /* another party count: refused, nothing arrives */
    cr_expect_eq(run("m", "barrier", "-n", "4", "ib", NULL), 2);
    cr_expect(strstr(err_of("m"), "3 parties") != NULL, "stderr: %s", err_of("m"));
    cr_expect_eq(arrived("ib"), 1);
    cr_expect_eq(run("u1", "barrier", "ib", NULL), 2);
    cr_expect_eq(run("u2", "barrier", "-n", "0", "ib", NULL), 2);
    cr_expect_eq(run("u3", "barrier", "-n", "3", "ib", "--", "true", NULL), 2);
    cr_expect_eq(run("u4", "barrier", "-n", "3", NULL), 2);
    cr_expect_eq(run("u5", "release", "--force", "-k", "barrier", "ib", NULL), 2);
    kill(w, SIGINT);
    cr_expect_eq(reap(w, 20000), 128 + SIGINT, "stderr: %s", err_of("w"));
}
