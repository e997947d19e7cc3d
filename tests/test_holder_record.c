/*
 * test_holder_record.c - the client's holder record (lib/record.c, issue 14): who holds, as
 * people read it, through rs_inspect_holder.
 *
 *   written_renewed_and_lapses  a labelled client's hold: its record (host, pid, program,
 *                               label; held_ms from the token) appears, outlives several
 *                               record TTLs while held (the watchdog's rounds renew it),
 *                               holds no secret, and lapses after the release
 *   bad_input                   a label too long or with a control character: EINVAL at
 *                               open; rs_inspect_holder with NULL, a holder index past the
 *                               holders: EINVAL
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"

TestSuite(holder_record, .timeout = 60);

static ts_server_t srv;

static void fini(void)
{
    ts_server_stop(&srv);
}

/* rs_inspect + rs_inspect_holder of the mutex's first holder; 1 if its record was found */
static int holder_of(rs_client_t *c, const char *name, rs_info_t *in, rs_holder_info_t *h)
{
    int rc = rs_inspect(c, "mutex", name, in);
    cr_assert_eq(rc, 0, "rs_inspect: %s", rs_client_lasterror(c));
    if (in->nholders == 0)
        return 0;
    rc = rs_inspect_holder(c, in, 0, h);
    cr_assert_eq(rc, 0, "rs_inspect_holder: %s", rs_client_lasterror(c));
    return h->found;
}

Test(holder_record, written_renewed_and_lapses, .fini = fini)
{
    tu_start_server(&srv);
    rs_config_t cfg;
    tu_config(&cfg, srv.url, 300, 0, NULL); /* record TTL: 600 ms */
    cfg.label = "nightly report";
    rs_client_t *holder;
    cr_assert_eq(rs_client_open(&holder, &cfg), 0, "%s", rs_client_lasterror(NULL));
    rs_client_t *op = tu_open_client_ex(&srv, 0, 0, NULL);
    cr_assert_not_null(op);
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, holder, "rec"), 0);
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(holder));

    /* written by the watchdog as the hold is registered */
    rs_info_t in;
    rs_holder_info_t h;
    long long end = tu_mono_ms() + 10000;
    while (!holder_of(op, "rec", &in, &h) && tu_mono_ms() < end)
        tu_sleep_ms(20);
    cr_assert(h.found, "no holder record 10 s after the grant");
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cr_expect(strncmp(h.host, host, sizeof h.host - 1) == 0, "host %s, not %s", h.host, host);
    cr_expect_eq(h.pid, (long)getpid());
    cr_expect_str_eq(h.program, program_invocation_short_name);
    cr_expect_str_eq(h.label, "nightly report");
    cr_expect_str_eq(h.id, in.holders[0]);
    cr_expect(strncmp(h.id, rs_client_id(holder), strlen(rs_client_id(holder))) == 0,
              "id %s of another client than %s", h.id, rs_client_id(holder));
    cr_expect(h.held_ms >= 0 && h.held_ms < 10000, "held_ms %ld", h.held_ms);
    long first = h.held_ms;

    /* 2 s = more than three TTLs of the record: still there, renewed by the PEXPIRE in the
     * watchdog's rounds, not written again (the label changed here would be set back) */
    char key[128];
    snprintf(key, sizeof key, "rs:{%s}:client", rs_client_id(holder));
    cr_assert_eq(ts_cmd_int(&srv, "HSET %s label mark", key), 0);
    tu_sleep_ms(2000);
    cr_assert(holder_of(op, "rec", &in, &h), "the record lapsed while the client held");
    cr_expect(h.held_ms >= first + 1500, "held_ms %ld after 2 s (was %ld)", h.held_ms, first);
    cr_expect_str_eq(h.label, "mark", "the record was written again instead of renewed");

    /* the record: these four fields, nothing secret; its TTL at most twice the lease */
    cr_expect_eq(ts_cmd_int(&srv, "HLEN %s", key), 4);
    long long ttl = ts_cmd_int(&srv, "PTTL %s", key);
    cr_expect(ttl > 0 && ttl <= 600, "PTTL %lld", ttl);

    /* released: nothing renews it; it lapses within its TTL */
    cr_assert_eq(rs_mutex_unlock(m), 0);
    end = tu_mono_ms() + 5000;
    while (ts_cmd_int(&srv, "EXISTS %s", key) == 1 && tu_mono_ms() < end)
        tu_sleep_ms(50);
    cr_expect_eq(ts_cmd_int(&srv, "EXISTS %s", key), 0, "the record outlived the holds");

    rs_mutex_destroy(m);
    rs_client_close(holder);
    rs_client_close(op);
}

Test(holder_record, bad_input, .fini = fini)
{
    tu_start_server(&srv);
    rs_config_t cfg;
    tu_config(&cfg, srv.url, 0, 0, NULL);
    rs_client_t *c = NULL;
    char longlabel[RS_LABEL_MAX + 2];
    memset(longlabel, 'x', sizeof longlabel - 1);
    longlabel[sizeof longlabel - 1] = '\0';
    cfg.label = longlabel;
    cr_expect_eq(rs_client_open(&c, &cfg), EINVAL);
    cr_expect(strstr(rs_client_lasterror(NULL), "label") != NULL, "%s",
              rs_client_lasterror(NULL));
    cfg.label = "two\nlines";
    cr_expect_eq(rs_client_open(&c, &cfg), EINVAL);
    cr_expect(strstr(rs_client_lasterror(NULL), "control") != NULL, "%s",
              rs_client_lasterror(NULL));
    longlabel[RS_LABEL_MAX] = '\0'; /* exactly RS_LABEL_MAX: fine */
    cfg.label = longlabel;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));

    rs_info_t in;
    rs_holder_info_t h;
    memset(&in, 0, sizeof in);
    cr_expect_eq(rs_inspect_holder(c, NULL, 0, &h), EINVAL);
    cr_expect_eq(rs_inspect_holder(c, &in, 0, NULL), EINVAL);
    cr_expect_eq(rs_inspect_holder(NULL, &in, 0, &h), EINVAL);
    cr_expect_eq(rs_inspect_holder(c, &in, 0, &h), EINVAL, "no holders");
    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, "bad"), 0);
    cr_assert_eq(rs_mutex_lock(m), 0);
    cr_assert_eq(rs_inspect(c, "mutex", "bad", &in), 0);
    cr_expect_eq(rs_inspect_holder(c, &in, 1, &h), EINVAL, "holder 1 of 1");
    cr_expect(strstr(rs_client_lasterror(c), "holder 1") != NULL, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_inspect_holder(c, &in, 0, &h), 0);
    rs_mutex_unlock(m);
    rs_mutex_destroy(m);
    rs_client_close(c);
}
