/*
 * once.c - the redisync command's once subcommand (rs_once_t, issue 14): COMMAND runs on one
 * machine at a time until it exits 0 (a deploy's schema migration, run by whichever
 * instance starts first); the others wait for that and exit 0 without running it. COMMAND's
 * failure is its exit status, and the next waiter runs it. While COMMAND runs, redisync
 * ignores SIGINT and SIGQUIT as system(3) does (the terminal sends them to COMMAND too);
 * if redisync itself dies, its lease runs out and the next waiter runs COMMAND.
 */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "cli.h"

typedef struct once_run {
    const opts_t *o;
    const char *name;
    char **command;
    int ran, failed, status;
} once_run_t;

/* fn of rs_once_run: COMMAND's exit status (0 = success) */
static int run_command(void *arg, uint64_t fence)
{
    once_run_t *x = arg;
    x->ran = 1;
    char **env = command_env(x->name, fence);
    if (!env) {
        msg("out of memory");
        x->failed = 1;
        return x->status = EXIT_SOFTWARE;
    }
    if (x->o->verbose)
        msg("executing %s", x->command[0]);
    struct sigaction ign = {.sa_handler = SIG_IGN}, oint, oquit;
    sigaction(SIGINT, &ign, &oint);
    sigaction(SIGQUIT, &ign, &oquit);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGINT);
    sigaddset(&def, SIGQUIT);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int err = posix_spawnp(&pid, x->command[0], NULL, &at, x->command, env);
    posix_spawnattr_destroy(&at);
    command_env_free(env);
    int ws = 0;
    if (err) {
        msg("%s: %s", x->command[0], strerror(err));
        x->status = err == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
    } else {
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
        }
        x->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws)
                                                                        : EXIT_SOFTWARE;
    }
    sigaction(SIGINT, &oint, NULL);
    sigaction(SIGQUIT, &oquit, NULL);
    x->failed = x->status != 0;
    return x->status;
}

int run_once(const opts_t *o, const char *name, char **command)
{
    rs_client_t *c = NULL;
    int rc = open_client(o, &c);
    if (rc)
        return rc;
    rs_once_t *once = NULL;
    int status;
    if ((rc = rs_once_init(&once, c, name)) != 0) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    once_run_t x = {o, name, command, 0, 0, 0};
    if (o->have_wait) {
        struct timespec abstime = deadline_after(o->wait_s);
        rc = rs_once_timedrun(once, run_command, &x, &abstime);
    } else {
        rc = rs_once_run(once, run_command, &x);
    }
    if (x.failed)
        status = x.status; /* COMMAND failed here: the next waiter runs it */
    else if (rc == 0)
        status = 0; /* it ran here and succeeded, or it had succeeded elsewhere */
    else if (rc == ETIMEDOUT) {
        msg("timed out after %g s waiting for once \"%s\"", o->wait_s, name);
        status = o->conflict_code;
    } else if (rc == RS_ELOST) {
        msg("lost the run of once \"%s\" while COMMAND ran (its lease was not renewed in "
            "time): the next runner runs it again", name);
        status = EXIT_LOST;
    } else {
        status = call_failed(c, rc, name);
    }
    if (o->verbose && rc == 0 && !x.ran)
        msg("once \"%s\" had succeeded already: not run here", name);
    rs_once_destroy(once);
    rs_client_close(c);
    return status;
}
