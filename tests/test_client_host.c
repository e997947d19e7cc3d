/*
 * test_client_host.c - the client's promises of good behaviour inside a host program: it
 * never prints (it logs through the callback), SIGPIPE, close-on-exec. Suite `client`,
 * declared in test_client.c.
 */
#include "client_support.h"

/* ---------------------------------------------------------------------------------------
 * 11. The library never prints; it logs through the callback
 * ------------------------------------------------------------------------------------- */

Test(client, never_prints)
{
    ts_server_t s;
    start_server_pw(&s, "pw");
    char good[200], wrongpw[200], unreachable[200];
    snprintf(good, sizeof good, "redis://:pw@127.0.0.1:%d", s.port);
    snprintf(wrongpw, sizeof wrongpw, "redis://:nope@127.0.0.1:%d", s.port);
    snprintf(unreachable, sizeof unreachable, "redis://127.0.0.1:%d", free_port());

    char tmpl[] = "/tmp/rs-client-out.XXXXXX";
    int tfd = mkstemp(tmpl);
    cr_assert(tfd >= 0);
    unlink(tmpl);
    fflush(stdout);
    fflush(stderr);
    int saved1 = dup(1), saved2 = dup(2);
    cr_assert(saved1 >= 0 && saved2 >= 0);
    dup2(tfd, 1);
    dup2(tfd, 2);

    /* nothing below may assert: Criterion's own output would land in the file */
    int rc[16], k = 0;
    rs_client_t *c = NULL;
    rs_config_t cfg = cfg_for("http://x", 300, 0);
    rc[k++] = rs_client_open(&c, &cfg);            /* EINVAL */
    cfg = cfg_for(unreachable, 300, 0);
    rc[k++] = rs_client_open(&c, &cfg);            /* RS_ECONN */
    cfg = cfg_for(wrongpw, 300, 0);
    rc[k++] = rs_client_open(&c, &cfg);            /* RS_ESERVER */
    cfg = cfg_for(good, 300, 1000);
    cfg.min_replicas = -1;
    rc[k++] = rs_client_open(&c, &cfg);            /* EINVAL */
    cfg.min_replicas = 0;
    rc[k++] = rs_client_open(&c, &cfg);            /* 0 */
    rs_mutex_t *m = NULL, *bad = NULL;
    if (c) {
        rc[k++] = rs_mutex_init(&bad, c, "");        /* EINVAL */
        rc[k++] = rs_mutex_init(&m, c, "quiet");     /* 0 */
        rc[k++] = rs_mutex_unlock(m);                /* EPERM */
        rc[k++] = rs_mutex_lock(m);                  /* 0 */
        rc[k++] = rs_mutex_lock(m);                  /* EDEADLK */
        ts_server_kill(&s);
        rc[k++] = rs_mutex_unlock(m);                /* RS_ECONN or RS_ELOST */
        rc[k++] = rs_mutex_lock(m);                  /* RS_ECONN */
        tu_sleep_ms(300);
        rs_mutex_destroy(m);
        rc[k++] = rs_client_close(c);                /* 0 */
    }

    fflush(stdout);
    fflush(stderr);
    dup2(saved1, 1);
    dup2(saved2, 2);
    close(saved1);
    close(saved2);
    off_t size = lseek(tfd, 0, SEEK_END);
    char out[512] = "";
    if (size > 0) {
        ssize_t got = pread(tfd, out, sizeof out - 1, 0);
        out[got > 0 ? got : 0] = '\0';
    }
    close(tfd);

    cr_expect_eq(size, 0, "the library wrote %lld bytes to stdout/stderr: %s", (long long)size,
                 out);
    cr_assert_eq(k, 13, "open with the right password failed (%d: %d)", k, rc[4]);
    static const int want[] = {EINVAL, RS_ECONN, RS_ESERVER, EINVAL, 0, EINVAL, 0, EPERM, 0,
                               EDEADLK, -1, RS_ECONN, 0};
    for (int i = 0; i < k; i++) {
        if (want[i] == -1)
            cr_expect(rc[i] == RS_ECONN || rc[i] == RS_ELOST, "step %d: %d", i, rc[i]);
        else
            cr_expect_eq(rc[i], want[i], "step %d: %d, want %d", i, rc[i], want[i]);
    }
    ts_server_stop(&s);
}

struct log_sink {
    pthread_mutex_t mu;
    int count, bad_level, bad_arg, has_secret, empty;
    char last[512];
    void *self;
};

static void log_cb(int level, const char *msg, void *arg)
{
    struct log_sink *ls = arg;
    pthread_mutex_lock(&ls->mu);
    if (ls->self != ls)
        ls->bad_arg++;
    if (level < RS_LOG_DEBUG || level > RS_LOG_ERROR)
        ls->bad_level++;
    if (!msg || !msg[0])
        ls->empty++;
    else {
        if (strstr(msg, SECRET))
            ls->has_secret++;
        snprintf(ls->last, sizeof ls->last, "%s", msg);
    }
    ls->count++;
    pthread_mutex_unlock(&ls->mu);
}

Test(client, log_callback_receives_messages)
{
    ts_server_t s;
    start_server_pw(&s, SECRET);
    static struct log_sink ls;
    memset(&ls, 0, sizeof ls);
    pthread_mutex_init(&ls.mu, NULL);
    ls.self = &ls;
    char url[200];
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", SECRET, s.port);
    rs_config_t cfg = cfg_for(url, 300, 1000);
    cfg.log = log_cb;
    cfg.log_arg = &ls;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "%s", rs_client_lasterror(NULL));

    rs_mutex_t *m = NULL;
    cr_expect_eq(rs_mutex_init(&m, c, ""), EINVAL);
    cr_assert_eq(rs_mutex_init(&m, c, "logged"), 0);
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_assert_eq(rs_mutex_lock(m), 0);
    ts_server_kill(&s);
    int rc = rs_mutex_unlock(m);
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "unlock with the server gone = %d", rc);
    rs_mutex_destroy(m);
    cr_expect_eq(rs_client_close(c), 0);

    pthread_mutex_lock(&ls.mu);
    cr_expect_gt(ls.count, 0, "no log message for any of the failures");
    cr_expect_eq(ls.bad_arg, 0, "log_arg not passed through");
    cr_expect_eq(ls.bad_level, 0, "log level outside RS_LOG_DEBUG..RS_LOG_ERROR");
    cr_expect_eq(ls.empty, 0, "empty log message");
    cr_expect_eq(ls.has_secret, 0, "a log message contains the password");
    pthread_mutex_unlock(&ls.mu);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 12. SIGPIPE and close-on-exec
 * ------------------------------------------------------------------------------------- */

static void sigpipe_default(void)
{
    signal(SIGPIPE, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

/* Lock, kill the server (the pooled connection is now dead), unlock. With SIGPIPE at its
 * default disposition a write to the dead socket would kill the process. */
static void sigpipe_case(ts_server_t *s, const char *url)
{
    sigpipe_default();
    rs_client_t *c = open_ok(url, 300, 5000);
    rs_mutex_t *m = mutex_ok(c, "pipe"), *m2 = mutex_ok(c, "pipe2");
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_assert_eq(rs_mutex_lock(m2), 0, "%s", rs_client_lasterror(c));
    ts_server_kill(s);

    long long t0 = tu_mono_ms();
    int rc = rs_mutex_unlock(m);
    long long took = tu_mono_ms() - t0;
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "unlock with the server gone = %d (%s)", rc,
              rs_client_lasterror(c));
    cr_expect_lt(took, 300 + 2000, "unlock took %lld ms", took);
    cr_expect_eq(rs_mutex_unlock(m), EPERM, "the failed unlock left a hold behind");
    t0 = tu_mono_ms();
    rc = rs_mutex_unlock(m2);
    cr_expect(rc == RS_ECONN || rc == RS_ELOST, "second unlock = %d", rc);
    rc = rs_mutex_lock(m);
    took = tu_mono_ms() - t0;
    cr_expect_eq(rc, RS_ECONN, "lock with the server gone = %d (%s)", rc, rs_client_lasterror(c));
    cr_expect_lt(took, 2 * 300 + 2000, "unlock + lock took %lld ms", took);

    sigset_t pend;
    sigpending(&pend);
    cr_expect(!sigismember(&pend, SIGPIPE), "a SIGPIPE is left pending");

    /* the client recovers once the server is back */
    cr_assert_eq(ts_server_restart(s), 0);
    rc = rs_mutex_lock(m);
    if (rc == RS_ECONN) /* a restart on a loaded machine: one more try */
        rc = rs_mutex_lock(m);
    cr_expect_eq(rc, 0, "lock after the restart = %d (%s)", rc, rs_client_lasterror(c));
    if (rc == 0)
        cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m);
    rs_mutex_destroy(m2);
    cr_expect_eq(rs_client_close(c), 0);
}

Test(client, sigpipe_tcp_server_killed)
{
    ts_server_t s;
    tu_start_server(&s);
    sigpipe_case(&s, s.url);
    ts_server_stop(&s);
}

/* On a unix socket a write to a peer that is gone fails with EPIPE at once: this is the
 * case that raises SIGPIPE for sure. */
Test(client, sigpipe_unix_server_killed)
{
    char dir[] = "/tmp/rs-client-pipe.XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char sock[200], url[300];
    snprintf(sock, sizeof sock, "%s/redis.sock", dir);
    ts_server_t s;
    int started = ts_server_start(&s, "--unixsocket", sock, "--unixsocketperm", "700", NULL);
    if (started != 0) {
        rmdir(dir);
        cr_assert_fail("cannot start redis-server with a unix socket");
    }
    snprintf(url, sizeof url, "unix://%s", sock);
    sigpipe_case(&s, url);
    ts_server_stop(&s);
    unlink(sock);
    rmdir(dir);
}

/* Socket inodes of TCP connections from this process to 127.0.0.1:port. */
static int tcp_inodes_to(int port, unsigned long *out, int max)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    if (!fgets(line, sizeof line, f)) {
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f) && n < max) {
        unsigned rport, lport;
        unsigned long inode;
        if (sscanf(line, " %*d: %*x:%x %*x:%x %*x %*x:%*x %*x:%*x %*x %*u %*u %lu", &lport,
                   &rport, &inode) == 3 &&
            (int)rport == port && inode != 0)
            out[n++] = inode;
    }
    fclose(f);
    return n;
}

Test(client, sockets_are_close_on_exec)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 600), *b = open_ok(s.url, 2000, 600);
    rs_mutex_t *ma = mutex_ok(a, "cloexec"), *mb = mutex_ok(b, "cloexec");
    cr_assert_eq(rs_mutex_lock(ma), 0);
    /* a wait starts b's notifier; a's watchdog renews after 200 ms */
    struct timespec ts = tu_abs_in(400);
    int rc = rs_mutex_timedlock(mb, &ts);
    /* 0 only if a starved watchdog let a's 600 ms lease run out: not this test's concern */
    cr_expect(rc == ETIMEDOUT || rc == 0, "timedlock = %d: %s", rc, rs_client_lasterror(b));
    tu_sleep_ms(100);

    unsigned long inodes[64];
    int ni = tcp_inodes_to(s.port, inodes, 64);
    cr_assert_geq(ni, 0, "cannot read /proc/net/tcp");
    int checked = 0, bad = 0, badfd = -1;
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        char path[64], target[128];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        unsigned long inode;
        if (sscanf(target, "socket:[%lu]", &inode) != 1)
            continue;
        for (int i = 0; i < ni; i++) {
            if (inodes[i] != inode)
                continue;
            checked++;
            int fl = fcntl(fd, F_GETFD);
            if (fl < 0 || !(fl & FD_CLOEXEC))
                bad++, badfd = fd;
        }
    }
    closedir(d);
    cr_expect_geq(checked, 3, "only %d library sockets found (pool, watchdog, notifier)", checked);
    cr_expect_eq(bad, 0, "%d of %d library sockets lack FD_CLOEXEC (e.g. fd %d)", bad, checked,
                 badfd);

    rs_mutex_unlock(ma);
    if (rc == 0)
        rs_mutex_unlock(mb);
    rs_mutex_destroy(ma);
    rs_mutex_destroy(mb);
    rs_client_close(a);
    rs_client_close(b);
    ts_server_stop(&s);
}
