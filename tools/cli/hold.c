/*
 * hold.c - the redisync command's holding subcommands (lock, rdlock, wrlock, sem): take the
 * hold, run COMMAND, release it. See docs/redisync.1 for the user's side; this comment is
 * the implementer's (the other subcommands: ops.c; the command line: main.c).
 *
 *   redisync [-u URL] lock   [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND...
 *   redisync [-u URL] rdlock|wrlock [same options] NAME -- COMMAND...
 *   redisync [-u URL] sem    -n PERMITS [same options] NAME -- COMMAND...
 *   redisync [-u URL] latch  NAME (--arm N | --down | --wait [-w SECONDS] [-E CODE] | --count)
 *   redisync [-u URL] info   [-k KIND] NAME
 *   redisync [-u URL] list   [PATTERN]
 *   redisync [-u URL] release --force -k KIND NAME
 *
 * Only the public API (include/redisync.h) is used; the Makefile compiles this file with
 * -Iinclude alone so that nothing else can creep in.
 *
 * Threads and signals (the holding subcommands). Before anything else main() blocks the
 * signals we handle (INT, TERM, HUP, QUIT, USR1, USR2) so that every thread, the library's
 * included, inherits the mask; one helper thread reads them from a signalfd, together with
 * the read end of a self-pipe that the on_lost callback writes one byte to (the callback runs
 * on a library thread, must not block and must not call the library). A hold belongs to the
 * thread that took it, so main() takes it, runs COMMAND, waits for it and releases it. The
 * helper acts according to the phase, under st.mu:
 *
 *   P_INIT, P_WAITING  (opening the client, waiting for the hold): INT/TERM/HUP/QUIT mean
 *                      "give up": it records the signal and, while waiting, closes the
 *                      client, which ends the blocked call with ECANCELED and releases
 *                      whatever was granted meanwhile; main() then exits 128+signal.
 *   P_RUNNING          forwards every handled signal to COMMAND (except one the terminal
 *                      sent: si_code SI_KERNEL, which COMMAND, in the same foreground process
 *                      group, has received already). A lost hold is reported on stderr and,
 *                      with --kill-on-lost, COMMAND gets SIGTERM at once.
 *   P_DONE             COMMAND has exited and main() is releasing: signals are ignored.
 *
 * Exit statuses: see the EXIT_* constants in cli.h and docs/redisync.1.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;


typedef struct hold {
    hkind_t kind;
    const char *name;
    rs_mutex_t *m;
    rs_rwlock_t *rw;
    rs_sem_t *s;
} hold_t;

static const char *hold_desc(hkind_t k)
{
    switch (k) {
    case H_MUTEX:
        return "the mutex";
    case H_READ:
        return "a read lock of the rwlock";
    case H_WRITE:
        return "the write lock of the rwlock";
    case H_SEM:
        return "a permit of the semaphore";
    case H_ONCE: /* once.c */
        break;
    }
    return "?";
}

static int hold_init(hold_t *h, rs_client_t *c, unsigned long permits)
{
    switch (h->kind) {
    case H_MUTEX:
        return rs_mutex_init(&h->m, c, h->name);
    case H_READ:
    case H_WRITE:
        return rs_rwlock_init(&h->rw, c, h->name);
    case H_SEM:
        return rs_sem_init(&h->s, c, h->name, (unsigned)permits);    case H_ONCE: /* once.c */
        break;
    }
    return EINVAL;
}

/* mode 0: wait forever, 1: try once, 2: until abstime. */
static int hold_acquire(hold_t *h, int mode, const struct timespec *abstime)
{
    switch (h->kind) {
    case H_MUTEX:
        return mode == 0 ? rs_mutex_lock(h->m)
             : mode == 1 ? rs_mutex_trylock(h->m)
                         : rs_mutex_timedlock(h->m, abstime);
    case H_READ:
        return mode == 0 ? rs_rwlock_rdlock(h->rw)
             : mode == 1 ? rs_rwlock_tryrdlock(h->rw)
                         : rs_rwlock_timedrdlock(h->rw, abstime);
    case H_WRITE:
        return mode == 0 ? rs_rwlock_wrlock(h->rw)
             : mode == 1 ? rs_rwlock_trywrlock(h->rw)
                         : rs_rwlock_timedwrlock(h->rw, abstime);
    case H_SEM:
        return mode == 0 ? rs_sem_wait(h->s)
             : mode == 1 ? rs_sem_trywait(h->s)
                         : rs_sem_timedwait(h->s, abstime);    case H_ONCE: /* once.c */
        break;
    }
    return EINVAL;
}

static int hold_release(hold_t *h)
{
    switch (h->kind) {
    case H_MUTEX:
        return rs_mutex_unlock(h->m);
    case H_READ:
    case H_WRITE:
        return rs_rwlock_unlock(h->rw);
    case H_SEM:
        return rs_sem_post(h->s);    case H_ONCE: /* once.c */
        break;
    }
    return EINVAL;
}

static uint64_t hold_fence(const hold_t *h)
{
    switch (h->kind) {
    case H_MUTEX:
        return rs_mutex_fence(h->m);
    case H_READ:
        return 0;
    case H_WRITE:
        return rs_rwlock_fence(h->rw);
    case H_SEM:
        return rs_sem_fence(h->s);    case H_ONCE: /* once.c */
        break;
    }
    return 0;
}

static void hold_destroy(hold_t *h)
{
    rs_mutex_destroy(h->m);
    rs_rwlock_destroy(h->rw);
    rs_sem_destroy(h->s);
    h->m = NULL;
    h->rw = NULL;
    h->s = NULL;
}

/* ----- state shared by main() and the signal thread ------------------------------------ */

enum { P_INIT, P_WAITING, P_RUNNING, P_DONE };

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int phase;
    rs_client_t *client;  /* set in P_WAITING, for the signal thread's close */
    pid_t child;          /* P_RUNNING */
    int interrupted;      /* signal that made us give up while waiting, 0 if none */
    int closing, closed;  /* the signal thread is closing / has closed the client */
    int kill_on_lost;
    int killed;           /* --kill-on-lost has sent its SIGTERM */
    long long kill_at_ms; /* ... and sends SIGKILL then (monotonic ms), 0: none due */
    long kill_after_ms;   /* --kill-after */
    int hold_only;        /* no COMMAND: hold until SIGINT/SIGTERM */
    int stop_sig;         /* ... the signal that ended it */
    atomic_int lost;      /* the on_lost callback was called */
    atomic_int lost_said; /* the loss has been reported on stderr */
    const char *desc;     /* e.g. "mutex" */
    const char *name;
    int sigfd;
    int lostpipe[2];
} st = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .sigfd = -1,
        .lostpipe = {-1, -1}};

static long long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* --kill-on-lost: SIGTERM now, SIGKILL after --kill-after if COMMAND is still there.
 * st.mu held. */
static void kill_command_locked(pid_t pid)
{
    st.killed = 1;
    msg("sending SIGTERM to COMMAND (pid %ld) (--kill-on-lost), SIGKILL in %g s if it is "
        "still running", (long)pid, st.kill_after_ms / 1000.0);
    kill(pid, SIGTERM);
    st.kill_at_ms = mono_ms() + st.kill_after_ms;
}

static const int handled_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NHANDLED (sizeof handled_signals / sizeof handled_signals[0])

/* Library thread: no blocking, no library calls. */
static void on_lost_cb(const char *kind, const char *name, void *arg)
{
    (void)kind;
    (void)name;
    (void)arg;
    atomic_store(&st.lost, 1);
    int saved = errno;
    ssize_t w = write(st.lostpipe[1], "L", 1); /* non-blocking; a full pipe is as good */
    (void)w;
    errno = saved;
}

static void say_lost(const char *when)
{
    if (atomic_exchange(&st.lost_said, 1))
        return;
    msg("lost %s \"%s\" %s (its lease was not renewed in time, or it was taken away); "
        "mutual exclusion may have been broken",
        st.desc, st.name, when);
}

static void *signal_thread(void *arg)
{
    (void)arg;
    struct pollfd pf[2] = {{.fd = st.sigfd, .events = POLLIN},
                           {.fd = st.lostpipe[0], .events = POLLIN}};
    for (;;) {
        pthread_mutex_lock(&st.mu);
        long long due = st.kill_at_ms;
        if (due && st.phase == P_RUNNING && st.child > 0 && mono_ms() >= due) {
            msg("sending SIGKILL to COMMAND (pid %ld): still running %g s after SIGTERM",
                (long)st.child, st.kill_after_ms / 1000.0);
            kill(st.child, SIGKILL);
            st.kill_at_ms = due = 0;
        }
        pthread_mutex_unlock(&st.mu);
        long long left = due ? due - mono_ms() : -1;
        if (poll(pf, 2, due ? (int)(left > 0 ? left : 0) : -1) < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (pf[1].revents & POLLIN) {
            char buf[64];
            while (read(st.lostpipe[0], buf, sizeof buf) > 0) {
            }
            pthread_mutex_lock(&st.mu);
            if (st.phase == P_RUNNING) {
                say_lost(st.hold_only ? "while it was held" : "while COMMAND ran");
                if (st.kill_on_lost && st.child > 0 && !st.killed)
                    kill_command_locked(st.child);
                pthread_cond_broadcast(&st.cv); /* a hold without COMMAND ends here */
            }
            /* other phases: main() looks at st.lost itself */
            pthread_mutex_unlock(&st.mu);
        }
        if (pf[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            ssize_t n = read(st.sigfd, &si, sizeof si);
            if (n != (ssize_t)sizeof si)
                continue;
            int sig = (int)si.ssi_signo;
            rs_client_t *to_close = NULL;
            pthread_mutex_lock(&st.mu);
            if (st.phase == P_RUNNING && st.hold_only) {
                if (sig != SIGUSR1 && sig != SIGUSR2 && !st.stop_sig) {
                    st.stop_sig = sig; /* release and exit */
                    pthread_cond_broadcast(&st.cv);
                }
            } else if (st.phase == P_RUNNING) {
                if (si.ssi_code != SI_KERNEL && st.child > 0)
                    kill(st.child, sig);
            } else if (st.phase == P_INIT || st.phase == P_WAITING) {
                if (sig != SIGUSR1 && sig != SIGUSR2 && !st.interrupted) {
                    st.interrupted = sig;
                    if (st.phase == P_WAITING && st.client && !st.closing) {
                        st.closing = 1;
                        to_close = st.client;
                    }
                }
            }
            pthread_mutex_unlock(&st.mu);
            if (to_close) {
                /* ends the blocked call with ECANCELED; releases what it was granted */
                rs_client_close(to_close);
                pthread_mutex_lock(&st.mu);
                st.closed = 1;
                pthread_cond_broadcast(&st.cv);
                pthread_mutex_unlock(&st.mu);
            }
        }
    }
    return NULL;
}

/* Blocks the handled signals in this (the only) thread and starts the signal thread.
 * 0, or -1 after a message. */
static int signals_setup(void)
{
    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < NHANDLED; i++)
        sigaddset(&set, handled_signals[i]);
    if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) {
        msg("pthread_sigmask: %s", strerror(errno));
        return -1;
    }
    st.sigfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (st.sigfd < 0) {
        msg("signalfd: %s", strerror(errno));
        return -1;
    }
    if (pipe2(st.lostpipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        msg("pipe: %s", strerror(errno));
        return -1;
    }
    pthread_t t;
    int rc = pthread_create(&t, NULL, signal_thread, NULL);
    if (rc) {
        msg("pthread_create: %s", strerror(rc));
        return -1;
    }
    pthread_detach(t);
    return 0;
}

/* If a signal interrupted the start-up or the wait: makes sure the client is closed (by the
 * signal thread or here) and returns 128+signal; else 0. Takes the lock. */
static int check_interrupted(rs_client_t **c)
{
    pthread_mutex_lock(&st.mu);
    int sig = st.interrupted;
    if (!sig) {
        pthread_mutex_unlock(&st.mu);
        return 0;
    }
    if (st.closing) {
        while (!st.closed)
            pthread_cond_wait(&st.cv, &st.mu);
        *c = NULL; /* closed already */
    }
    st.phase = P_DONE;
    pthread_mutex_unlock(&st.mu);
    return 128 + sig;
}

/* The environment of COMMAND: ours without REDISYNC_NAME/REDISYNC_FENCE, plus both. */
char **command_env(const char *name, uint64_t fence)
{
    size_t n = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    char **env = calloc(n + 3, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (char **e = environ; e && *e; e++)
        if (strncmp(*e, "REDISYNC_NAME=", 14) != 0 && strncmp(*e, "REDISYNC_FENCE=", 15) != 0)
            env[k++] = *e;
    size_t len = strlen(name) + sizeof "REDISYNC_NAME=";
    char *ne = malloc(len);
    char *fe = malloc(64);
    if (!ne || !fe) {
        free(ne);
        free(fe);
        free(env);
        return NULL;
    }
    snprintf(ne, len, "REDISYNC_NAME=%s", name);
    snprintf(fe, 64, "REDISYNC_FENCE=%" PRIu64, fence);
    env[k++] = ne;
    env[k++] = fe;
    env[k] = NULL;
    return env;
}

void command_env_free(char **env)
{
    if (!env)
        return;
    size_t k = 0;
    while (env[k])
        k++;
    if (k >= 2) {
        free(env[k - 1]);
        free(env[k - 2]);
    }
    free(env);
}

/* Forks and execs COMMAND with env; st.mu must be held (the child pid is published under
 * it). Returns the pid, or -1 with *exec_status set (126/127/70) after a message. */
static pid_t start_command(char **argv, char **env, int *exec_status)
{
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) != 0) {
        msg("pipe: %s", strerror(errno));
        *exec_status = EXIT_SOFTWARE;
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        msg("fork: %s", strerror(errno));
        close(ep[0]);
        close(ep[1]);
        *exec_status = EXIT_SOFTWARE;
        return -1;
    }
    if (pid == 0) {
        /* only async-signal-safe calls from here on */
        close(ep[0]);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvpe(argv[0], argv, env);
        int err = errno;
        ssize_t w = write(ep[1], &err, sizeof err);
        (void)w;
        _exit(err == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC);
    }
    close(ep[1]);
    int err = 0;
    ssize_t r;
    do {
        r = read(ep[0], &err, sizeof err);
    } while (r < 0 && errno == EINTR);
    close(ep[0]);
    if (r == (ssize_t)sizeof err) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        msg("%s: %s", argv[0], strerror(err));
        *exec_status = err == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
        return -1;
    }
    return pid;
}

/* sem -n sizes a new semaphore only: say so when the one there has another size */
static void say_size(rs_client_t *c, const char *name, unsigned long permits)
{
    rs_info_t in;
    memset(&in, 0, sizeof in);
    if (rs_inspect(c, "sem", name, &in) == 0 && in.exists && in.size > 0 &&
        (unsigned long)in.size != permits)
        msg("semaphore \"%s\" has %ld permits, not %lu: -n sizes a new semaphore only, the "
            "existing size stands", name, in.size, permits);
}

/* No COMMAND (as etcdctl lock NAME): print the fencing token, hold until SIGINT, SIGTERM,
 * SIGHUP or SIGQUIT (then release: 0) or until the hold is lost (75). */
static int hold_until_signal(hold_t *h, rs_client_t *c, const char *name)
{
    printf("%" PRIu64 "\n", hold_fence(h));
    fflush(stdout);
    pthread_mutex_lock(&st.mu);
    st.phase = P_RUNNING;
    while (!st.stop_sig && !atomic_load(&st.lost))
        pthread_cond_wait(&st.cv, &st.mu);
    st.phase = P_DONE;
    pthread_mutex_unlock(&st.mu);
    int rc = hold_release(h), status = 0;
    if (rc == RS_ELOST || atomic_load(&st.lost)) {
        say_lost("while it was held");
        status = EXIT_LOST;
    } else if (rc) {
        status = call_failed(c, rc, "releasing");
    }
    (void)name;
    hold_destroy(h);
    rs_client_close(c);
    return status;
}

int run_holding(hkind_t kind, const opts_t *o, const char *name, char **command)
{
    hold_t h = {.kind = kind, .name = name};
    st.desc = hold_desc(kind);
    st.name = name;
    st.kill_on_lost = o->kill_on_lost;
    st.kill_after_ms = o->kill_after_s > 0 ? (long)(o->kill_after_s * 1000) : 10000;
    st.hold_only = command == NULL;
    if (signals_setup() != 0)
        return EXIT_SOFTWARE;

    rs_config_t cfg;
    config_from(&cfg, o);
    cfg.on_lost = on_lost_cb;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    int status;
    if ((status = check_interrupted(&c)) != 0) {
        rs_client_close(c);
        return status;
    }
    if (rc)
        return open_failed(rc, o);

    rc = hold_init(&h, c, o->permits);
    if (rc) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    if (kind == H_SEM)
        say_size(c, name, o->permits);

    int mode = !o->have_wait ? 0 : o->wait_s == 0 ? 1 : 2;
    struct timespec abstime = {0, 0};
    if (mode == 2)
        abstime = deadline_after(o->wait_s);

    pthread_mutex_lock(&st.mu);
    int sig = st.interrupted;
    if (!sig) {
        st.phase = P_WAITING;
        st.client = c;
    }
    pthread_mutex_unlock(&st.mu);
    long long t0 = mono_ms();
    rc = sig ? ECANCELED : hold_acquire(&h, mode, &abstime);
    if (o->verbose && rc == 0)
        msg("getting %s \"%s\" took %.3f seconds", hold_desc(kind), name,
            (mono_ms() - t0) / 1000.0);

    if ((status = check_interrupted(&c)) != 0) {
        /* the client (closed by the signal thread, or now) releases whatever was granted */
        hold_destroy(&h);
        rs_client_close(c);
        return status;
    }
    if (rc == EBUSY || rc == EAGAIN || rc == ETIMEDOUT) {
        if (mode == 1)
            msg("could not take %s \"%s\" at once (-w 0)", hold_desc(kind), name);
        else
            msg("timed out after %g s waiting for %s \"%s\"", o->wait_s, hold_desc(kind),
                name);
        hold_destroy(&h);
        rs_client_close(c);
        return o->conflict_code;
    }
    if (rc) {
        status = call_failed(c, rc, name);
        hold_destroy(&h);
        rs_client_close(c);
        return status;
    }

    if (!command)
        return hold_until_signal(&h, c, name);

    /* held: run COMMAND */
    if (o->verbose)
        msg("executing %s", command[0]);
    char **env = command_env(name, hold_fence(&h));
    pid_t pid = -1;
    int exec_status = EXIT_SOFTWARE;
    pthread_mutex_lock(&st.mu);
    st.phase = P_RUNNING;
    if (!env) {
        msg("out of memory");
    } else if (atomic_load(&st.lost) && o->kill_on_lost) {
        say_lost("before COMMAND started");
        exec_status = EXIT_LOST;
    } else {
        pid = start_command(command, env, &exec_status);
        st.child = pid > 0 ? pid : 0;
        if (pid > 0 && atomic_load(&st.lost)) {
            /* lost between the grant and now: the signal thread did not see P_RUNNING */
            say_lost("while COMMAND ran");
            if (o->kill_on_lost)
                kill_command_locked(pid);
        }
    }
    pthread_mutex_unlock(&st.mu);
    command_env_free(env);

    if (pid > 0) {
        int ws = 0;
        while (waitpid(pid, &ws, 0) < 0) {
            if (errno != EINTR) {
                msg("waitpid: %s", strerror(errno));
                ws = EXIT_SOFTWARE << 8;
                break;
            }
        }
        status = WIFEXITED(ws)     ? WEXITSTATUS(ws)
               : WIFSIGNALED(ws)   ? 128 + WTERMSIG(ws)
                                   : EXIT_SOFTWARE;
    } else {
        status = exec_status;
    }
    pthread_mutex_lock(&st.mu);
    st.phase = P_DONE;
    st.child = 0;
    pthread_mutex_unlock(&st.mu);

    rc = hold_release(&h);
    if (rc == RS_ELOST || atomic_load(&st.lost)) {
        say_lost(pid > 0 ? "while COMMAND ran" : "before COMMAND started");
        status = EXIT_LOST;
    } else if (rc) {
        int s2 = call_failed(c, rc, "releasing");
        /* RS_ECONN: the hold expires with its lease; COMMAND's status still stands unless
         * it succeeded, then say that something went wrong */
        if (status == 0)
            status = s2;
    }
    hold_destroy(&h);
    rs_client_close(c);
    return status;
}
