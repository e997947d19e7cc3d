/*
 * test_cli.h - running the redisync command in tests (tests/test_cli*.c): each test's
 * redis-server and temporary directory, runs of the command with their stdout and stderr in
 * DIR/TAG.out and DIR/TAG.err, reaping with a time bound, and small file helpers.
 * Header-only (static): each test file has its own copy of the state T.
 */
#ifndef REDISYNC_TESTS_SUPPORT_TEST_CLI_H
#define REDISYNC_TESTS_SUPPORT_TEST_CLI_H

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_server.h"
#include "test_assert.h"

#ifndef RS_TEST_BUILDDIR
#define RS_TEST_BUILDDIR "build"
#endif

/* ---------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------- */

static inline const char *cli_path(void)
{
    const char *p = getenv("REDISYNC_CLI");
    return p && *p ? p : RS_TEST_BUILDDIR "/redisync";
}

/* One test's world: its server, its directory, the runs it started. */
#define MAX_RUNS 32
static struct {
    ts_server_t srv;
    int have_srv;
    char dir[128];
    pid_t runs[MAX_RUNS];
} T;

static inline void forget(pid_t pid)
{
    for (int i = 0; i < MAX_RUNS; i++)
        if (T.runs[i] == pid)
            T.runs[i] = 0;
}

static inline int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static inline void setup(void)
{
    memset(&T, 0, sizeof T);
    cr_assert_eq(access(cli_path(), X_OK), 0, "%s is not there (make test builds it): %s",
                 cli_path(), strerror(errno));
    snprintf(T.dir, sizeof T.dir, "/tmp/rs-cli.XXXXXX");
    cr_assert_not_null(mkdtemp(T.dir), "mkdtemp: %s", strerror(errno));
}

static inline void start_server(void)
{
    tu_start_server(&T.srv);
    T.have_srv = 1;
}

/* Ends what a failed test left running: SIGTERM first (redisync passes it to COMMAND and
 * releases), SIGKILL after 5 s. Then the server and the directory. */
static inline void teardown(void)
{
    for (int i = 0; i < MAX_RUNS; i++)
        if (T.runs[i] > 0)
            kill(T.runs[i], SIGTERM);
    long long end = tu_mono_ms() + 5000;
    for (int i = 0; i < MAX_RUNS; i++) {
        if (T.runs[i] <= 0)
            continue;
        int st;
        while (waitpid(T.runs[i], &st, WNOHANG) == 0) {
            if (tu_mono_ms() >= end) {
                kill(T.runs[i], SIGKILL);
                waitpid(T.runs[i], &st, 0);
                break;
            }
            tu_sleep_ms(10);
        }
        T.runs[i] = 0;
    }
    if (T.have_srv)
        ts_server_stop(&T.srv);
    if (T.dir[0])
        nftw(T.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void path_of(char *buf, size_t len, const char *file)
{
    snprintf(buf, len, "%s/%s", T.dir, file);
}

/* Starts `redisync [-u URL] ARGS...` (NULL-terminated) with stdout in DIR/TAG.out and
 * stderr in DIR/TAG.err. with_url: put -u SERVERURL first. env: NULL-terminated
 * "NAME=VALUE" (or "NAME" to unset) applied in the child. */
static inline pid_t spawn_arr(const char *tag, int with_url, const char *const *env,
                       const char *const *args)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = cli_path();
    if (with_url) {
        argv[n++] = "-u";
        argv[n++] = T.srv.url;
    }
    for (; args && *args && n < 63; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    char out[256], err[256];
    snprintf(out, sizeof out, "%s/%s.out", T.dir, tag);
    snprintf(err, sizeof err, "%s/%s.err", T.dir, tag);

    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
            signal(sigs[i], SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in < 0 || o < 0 || e < 0)
            _exit(99);
        dup2(in, 0);
        dup2(o, 1);
        dup2(e, 2);
        for (const char *const *p = env; p && *p; p++) {
            const char *eq = strchr(*p, '=');
            if (eq) {
                char k[128];
                snprintf(k, sizeof k, "%.*s", (int)(eq - *p), *p);
                setenv(k, eq + 1, 1);
            } else {
                unsetenv(*p);
            }
        }
        if (chdir(T.dir) != 0)
            _exit(98);
        execv(argv[0], (char *const *)argv);
        _exit(97);
    }
    for (int i = 0; i < MAX_RUNS; i++)
        if (T.runs[i] == 0) {
            T.runs[i] = pid;
            break;
        }
    return pid;
}

static inline pid_t spawn_v(const char *tag, int with_url, const char *const *env, va_list ap)
{
    const char *args[64];
    int n = 0;
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 60)
        args[n++] = a;
    args[n] = NULL;
    return spawn_arr(tag, with_url, env, args);
}

static inline pid_t spawn(const char *tag, ...)
{
    va_list ap;
    va_start(ap, tag);
    pid_t pid = spawn_v(tag, 1, NULL, ap);
    va_end(ap);
    return pid;
}

/* Waits up to timeout_ms for pid: its status as a shell shows it (exit code, 128+signal),
 * or -1 if it did not end in time (it is left running for teardown). */
static inline int reap(pid_t pid, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            forget(pid);
            return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -2;
        }
        if (w < 0 && errno != EINTR)
            return -3;
        if (tu_mono_ms() >= end)
            return -1;
        tu_sleep_ms(10);
    }
}

/* 1 if pid is still running (not reaped, not a zombie we could reap). */
static inline int running(pid_t pid)
{
    int st;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == 0)
        return 1;
    if (w == pid) {
        forget(pid);
        /* put the status back for a later reap: not possible; tests only call this on
         * processes they expect to be running, and then assert */
    }
    return 0;
}

/* spawn + reap within 20 s. */
static inline int run(const char *tag, ...)
{
    va_list ap;
    va_start(ap, tag);
    pid_t pid = spawn_v(tag, 1, NULL, ap);
    va_end(ap);
    return reap(pid, 20000);
}

static inline int run_env(const char *tag, const char *const *env, int with_url, ...)
{
    va_list ap;
    va_start(ap, with_url);
    pid_t pid = spawn_v(tag, with_url, env, ap);
    va_end(ap);
    return reap(pid, 20000);
}

/* Contents of DIR/file (static buffer, "" if absent). */
static inline char *slurp(const char *file)
{
    static char buf[8][65536];
    static int next;
    char *b = buf[next++ % 8];
    char p[256];
    path_of(p, sizeof p, file);
    b[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f)
        return b;
    size_t n = fread(b, 1, sizeof buf[0] - 1, f);
    b[n] = '\0';
    fclose(f);
    return b;
}

static inline char *out_of(const char *tag)
{
    char f[128];
    snprintf(f, sizeof f, "%s.out", tag);
    return slurp(f);
}

static inline char *err_of(const char *tag)
{
    char f[128];
    snprintf(f, sizeof f, "%s.err", tag);
    return slurp(f);
}

static inline int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static inline int file_exists(const char *file)
{
    char p[256];
    path_of(p, sizeof p, file);
    return access(p, F_OK) == 0;
}

/* Polls until DIR/file exists; 1 if it did within timeout_ms. */
static inline int wait_file(const char *file, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    while (!file_exists(file)) {
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(10);
    }
    return 1;
}

/* Polls until `cmd` (an integer reply) equals want; 1 if it did within timeout_ms. */
static inline int wait_cmd_int(long long want, long timeout_ms, const char *fmt, const char *arg)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        if (ts_cmd_int(&T.srv, fmt, arg) == want)
            return 1;
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(20);
    }
}

/* A holder: `redisync lock NAME -- sh -c 'touch READY; exec sleep 30'` (or another
 * subcommand), started and waited for until it holds. */
static inline pid_t start_holder(const char *tag, const char *sub, const char *name, const char *ready)
{
    char script[256];
    snprintf(script, sizeof script, "touch %s; exec sleep 30", ready);
    pid_t pid = spawn(tag, sub, name, "--", "sh", "-c", script, NULL);
    cr_assert(wait_file(ready, 20000), "%s never got %s (stderr: %s)", tag, name, err_of(tag));
    return pid;
}

#endif
