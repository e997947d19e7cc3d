/*
 * test_examples.c - runs every program of examples/ (built as RS_TEST_BUILDDIR/examples/NAME
 * by `make test`) against its own throwaway redis-server, with the URL as argv[1], and
 * expects exit status 0 within 40 s. The output of a failed example is shown.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "test_assert.h"

#ifndef RS_TEST_BUILDDIR
#define RS_TEST_BUILDDIR "build"
#endif

TestSuite(examples, .timeout = 60);

static ts_server_t srv;
static pid_t child;
static char outpath[64];

static void fini(void)
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        child = 0;
    }
    ts_server_stop(&srv);
    if (outpath[0])
        unlink(outpath);
}

static void run_example(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/examples/%s", RS_TEST_BUILDDIR, name);
    cr_assert_eq(access(path, X_OK), 0, "%s is not there (make test builds it): %s", path,
                 strerror(errno));
    tu_start_server(&srv);

    snprintf(outpath, sizeof outpath, "/tmp/rs-example.XXXXXX");
    int fd = mkstemp(outpath);
    cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));

    fflush(NULL);
    child = fork();
    cr_assert_geq(child, 0, "fork: %s", strerror(errno));
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(path, path, srv.url, (char *)NULL);
        _exit(127);
    }
    close(fd);

    int st = 0;
    long long end = tu_mono_ms() + 40000;
    pid_t w;
    while ((w = waitpid(child, &st, WNOHANG)) == 0 && tu_mono_ms() < end)
        usleep(20000);
    int finished = w == child;
    if (finished)
        child = 0;

    static char out[16384];
    out[0] = '\0';
    FILE *f = fopen(outpath, "r");
    if (f) {
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    cr_assert(finished, "%s did not finish within 40 s; its output:\n%s", name, out);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "%s failed (status 0x%x); its output:\n%s", name, st, out);
    cr_expect(strstr(out, ": ok") != NULL, "%s printed no verdict:\n%s", name, out);
}

Test(examples, mutex, .fini = fini)
{
    run_example("mutex");
}

Test(examples, cache_rebuild, .fini = fini)
{
    run_example("cache_rebuild");
}

Test(examples, semaphore, .fini = fini)
{
    run_example("semaphore");
}

Test(examples, latch, .fini = fini)
{
    run_example("latch");
}

Test(examples, migrate_once, .fini = fini)
{
    run_example("migrate_once");
}

Test(examples, work_queue, .fini = fini)
{
    run_example("work_queue");
}

Test(examples, epoll_server, .fini = fini)
{
    run_example("epoll_server");
}

Test(examples, uv_lock, .fini = fini)
{
    run_example("uv_lock");
}
