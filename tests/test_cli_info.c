/*
 * test_cli_info.c - redisync info shows who holds, as people read it (issue 14): the
 * holder's host, process id, program, --label and how long it has held, next to the
 * acquisition's public id, never its secret.
 *
 *   holder_record   a labelled `redisync lock` holds; `info` shows its host, pid (the
 *                   holding redisync's), program, label and "held for"; the acquisition id
 *                   Redis stores has a secret after its '.', which info does not show
 *   bad_label       --label with a control character or too long: exit 2
 */
#include <criterion/criterion.h>

#include "test_cli.h"

TestSuite(cli_info, .timeout = 60);

Test(cli_info, holder_record, .init = setup, .fini = teardown)
{
    start_server();
    pid_t h = spawn("h", "--label", "nightly report", "lock", "-l", "2", "recd", "--", "sh",
                    "-c", "touch ready; exec sleep 30", NULL);
    cr_assert(wait_file("ready", 20000), "stderr: %s", err_of("h"));
    /* the record is written by the holder's watchdog right after the grant */
    const char *o = "";
    long long end = tu_mono_ms() + 10000;
    do {
        cr_assert_eq(run("i", "info", "recd", NULL), 0, "stderr: %s", err_of("i"));
        o = out_of("i");
        if (strstr(o, "           host "))
            break;
        tu_sleep_ms(50);
    } while (tu_mono_ms() < end);
    char host[256] = "", want[512];
    gethostname(host, sizeof host - 1);
    host[63] = '\0'; /* rs_holder_info_t.host */
    snprintf(want, sizeof want, "           host %s, pid %d, program redisync, label "
             "\"nightly report\", held for ", host, (int)h);
    cr_expect(strstr(o, want) != NULL, "want '%s' in:\n%s", want, o);
    /* the secret: what follows '.' in the acquisition id Redis holds */
    char acq[128];
    cr_assert_not_null(ts_cmd_str(&T.srv, acq, sizeof acq, "HGET rs:{recd}:mutex a"),
                       "no acquisition id in the mutex hash");
    const char *dot = strchr(acq, '.');
    cr_assert_not_null(dot, "acquisition id %s without a secret part", acq);
    cr_expect(strlen(dot + 1) >= 8);
    cr_expect(strstr(o, dot + 1) == NULL, "the secret %s is shown:\n%s", dot + 1, o);
    char pub[64];
    snprintf(pub, sizeof pub, "holder:    %.*s\n", (int)(dot - acq), acq);
    cr_expect(strstr(o, pub) != NULL, "want '%s' in:\n%s", pub, o);
    kill(h, SIGTERM);
    cr_expect_eq(reap(h, 20000), 128 + SIGTERM);
}

Test(cli_info, bad_label, .init = setup, .fini = teardown)
{
    start_server();
    cr_expect_eq(run("c", "--label", "a\tb", "lock", "x", "--", "true", NULL), 2);
    cr_expect(strstr(err_of("c"), "label") != NULL, "stderr: %s", err_of("c"));
    char longl[80];
    memset(longl, 'l', 70);
    longl[70] = '\0';
    cr_expect_eq(run("l", "lock", "--label", longl, "x", "--", "true", NULL), 2);
    cr_expect(strstr(err_of("l"), "label") != NULL, "stderr: %s", err_of("l"));
    cr_expect_eq(run("ok", "lock", "--label", "fine", "x", "--", "true", NULL), 0,
                 "stderr: %s", err_of("ok"));
}
