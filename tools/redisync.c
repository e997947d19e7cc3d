/*
 * redisync.c - the redisync command: redisync's primitives for shell scripts, in the manner
 * of flock(1). See docs/redisync.1 for the user's side; this comment is the implementer's.
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
 * Exit statuses: see the EXIT_* constants below and docs/redisync.1.
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

#include "redisync.h"

extern char **environ;

/* ----- exit statuses (documented in docs/redisync.1, EXIT STATUS) ----------------------- */
#define EXIT_CONFLICT    1   /* -w ran out, latch/info found nothing (or CODE from -E) */
#define EXIT_USAGE       2   /* bad command line, malformed URL or name */
#define EXIT_UNAVAILABLE 69  /* EX_UNAVAILABLE: Redis could not be reached (or refused us) */
#define EXIT_SOFTWARE    70  /* EX_SOFTWARE: any other error */
#define EXIT_LOST        75  /* EX_TEMPFAIL: the hold was lost before it was released */
#define EXIT_NOEXEC      126 /* COMMAND found but could not be executed */
#define EXIT_NOTFOUND    127 /* COMMAND not found */

static const char *progname = "redisync";

/* ----- messages ---------------------------------------------------------------------------- */
static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void msg(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one write per line: messages of concurrent runs sharing a stderr do not interleave */
    fprintf(stderr, "%s: %s\n", progname, line);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\nTry '%s --help' for more information.\n", progname, line,
            progname);
    return EXIT_USAGE;
}

static void print_help(FILE *f)
{
    fprintf(f,
"Usage:\n"
"  %1$s [-u URL] lock   [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] rdlock [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] wrlock [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] sem -n PERMITS [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] latch NAME (--arm N | --down | --wait [-w SECONDS] [-E CODE] | --count)\n"
"  %1$s [-u URL] info [-k KIND] NAME\n"
"  %1$s [-u URL] list [PATTERN]\n"
"  %1$s [-u URL] release --force -k KIND NAME\n"
"\n"
"Runs COMMAND while holding a distributed mutex, read or write lock, or semaphore permit\n"
"kept in Redis, and manages countdown latches; in the manner of flock(1).\n"
"\n"
"Options:\n"
"  -u, --url URL          Redis to use (default: $REDISYNC_URL, else redis://127.0.0.1:6379)\n"
"      --prefix PREFIX    key namespace shared with the programs that use the primitive (default rs)\n"
"  -w, --wait SECONDS     give up after SECONDS (fractions allowed; 0: fail at once);\n"
"                         without -w, wait as long as it takes\n"
"  -l, --lease SECONDS    lease of the hold, renewed every third of it (default 30)\n"
"  -E, --conflict-exit-code CODE  exit status when -w runs out (default 1)\n"
"      --kill-on-lost     send SIGTERM to COMMAND as soon as the hold is lost\n"
"  -n, --permits N        sem: size of the semaphore when it is created\n"
"  -k, --kind KIND        mutex, rmutex, rwlock, sem or latch\n"
"  -v, --verbose          show the library's log on stderr\n"
"  -h, --help             show this help and exit\n"
"      --version          show the version and exit\n"
"\n"
"COMMAND runs with REDISYNC_NAME (the name) and REDISYNC_FENCE (fencing token; 0 for a read\n"
"hold) in its environment. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on\n"
"to it; the hold is released once it has exited.\n"
"\n"
"Exit status: COMMAND's (128+N if signal N killed it); 1 (or CODE) when -w ran out; 2 usage\n"
"error; 69 Redis unreachable; 70 internal error; 75 the hold was lost; 126 COMMAND not\n"
"executable; 127 COMMAND not found; 128+N interrupted by signal N while waiting.\n"
"See redisync(1).\n",
            progname);
}

/* ----- argument parsing helpers -------------------------------------------------------- */

/* SECONDS: a non-negative decimal number, fractions allowed. 0 ok, -1 bad. */
static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < 0 || v > 31536000.0 * 100)
        return -1;
    *out = v;
    return 0;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (*end || errno || v > max)
        return -1;
    *out = v;
    return 0;
}

static struct timespec deadline_after(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(seconds);
    long long ns = ts.tv_nsec + (long long)llround((seconds - whole) * 1e9);
    ts.tv_sec += (time_t)whole + (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

static const char *kinds[] = {"mutex", "rmutex", "rwlock", "sem", "latch"};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static int known_kind(const char *k)
{
    for (size_t i = 0; i < NKINDS; i++)
        if (strcmp(k, kinds[i]) == 0)
            return 1;
    return 0;
}

/* ----- the client ---------------------------------------------------------------------- */

typedef struct opts {
    const char *url;
    const char *prefix;
    int verbose;
    /* holding subcommands */
    int have_wait;
    double wait_s;
    int have_lease;
    double lease_s;
    int conflict_code;
    int kill_on_lost;
    int have_permits;
    unsigned long permits;
    /* others */
    const char *kind;
    int force;
} opts_t;

static void log_cb(int level, const char *text, void *arg)
{
    (void)arg;
    static const char *names[] = {"debug", "info", "warning", "error"};
    const char *l = level >= 0 && level <= 3 ? names[level] : "log";
    fprintf(stderr, "%s: [%s] %s\n", progname, l, text);
}

/* Status for a failed rs_client_open, after printing why. */
static int open_failed(int rc, const opts_t *o)
{
    const char *why = rs_client_lasterror(NULL);
    if (!why || !*why)
        why = rs_strerror(rc);
    if (rc == EINVAL) {
        msg("%s", why);
        return EXIT_USAGE;
    }
    if (rc == ENOMEM) {
        msg("%s", why);
        return EXIT_SOFTWARE;
    }
    (void)o;
    msg("cannot use Redis: %s", why);
    return EXIT_UNAVAILABLE;
}

/* Status for a failed library call (other than the expected busy/timeout), after printing. */
static int call_failed(rs_client_t *c, int rc, const char *what)
{
    const char *why = rs_client_lasterror(c);
    if (!why || !*why)
        why = rs_strerror(rc);
    msg("%s: %s", what, why);
    if (rc == RS_ECONN)
        return EXIT_UNAVAILABLE;
    if (rc == EINVAL)
        return EXIT_USAGE;
    return EXIT_SOFTWARE;
}

static void config_from(rs_config_t *cfg, const opts_t *o)
{
    rs_config_init(cfg);
    cfg->url = o->url;
    cfg->prefix = o->prefix;
    if (o->have_lease)
        cfg->lease_ms = (long)llround(o->lease_s * 1000.0);
    if (o->verbose) {
        cfg->log = log_cb;
        cfg->log_arg = NULL;
    }
}

/* ========================================================================================
 * The holding subcommands: lock, rdlock, wrlock, sem
 * ====================================================================================== */

typedef enum { H_MUTEX, H_READ, H_WRITE, H_SEM } hkind_t;

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
        return rs_sem_init(&h->s, c, h->name, (unsigned)permits);
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
                         : rs_sem_timedwait(h->s, abstime);
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
        return rs_sem_post(h->s);
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
        return rs_sem_fence(h->s);
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
    atomic_int lost;      /* the on_lost callback was called */
    atomic_int lost_said; /* the loss has been reported on stderr */
    const char *desc;     /* e.g. "mutex" */
    const char *name;
    int sigfd;
    int lostpipe[2];
} st = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .sigfd = -1,
        .lostpipe = {-1, -1}};

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
        if (poll(pf, 2, -1) < 0) {
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
                say_lost("while COMMAND ran");
                if (st.kill_on_lost && st.child > 0 && !st.killed) {
                    st.killed = 1;
                    msg("sending SIGTERM to COMMAND (pid %ld) (--kill-on-lost)", (long)st.child);
                    kill(st.child, SIGTERM);
                }
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
            if (st.phase == P_RUNNING) {
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
static char **command_env(const char *name, uint64_t fence)
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

static void command_env_free(char **env)
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

static int run_holding(hkind_t kind, const opts_t *o, const char *name, char **command)
{
    hold_t h = {.kind = kind, .name = name};
    st.desc = hold_desc(kind);
    st.name = name;
    st.kill_on_lost = o->kill_on_lost;
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
    rc = sig ? ECANCELED : hold_acquire(&h, mode, &abstime);

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

    /* held: run COMMAND */
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
            if (o->kill_on_lost) {
                st.killed = 1;
                msg("sending SIGTERM to COMMAND (pid %ld) (--kill-on-lost)", (long)pid);
                kill(pid, SIGTERM);
            }
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

/* ========================================================================================
 * latch
 * ====================================================================================== */

static int run_latch(const opts_t *o, const char *name, int action, unsigned long arm_n)
{
    rs_config_t cfg;
    config_from(&cfg, o);
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc)
        return open_failed(rc, o);
    rs_latch_t *l = NULL;
    rc = rs_latch_init(&l, c, name, 0);
    int status = 0;
    if (rc) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    switch (action) {
    case 'a':
        rc = rs_latch_rearm(l, (unsigned)arm_n);
        if (rc)
            status = call_failed(c, rc, name);
        break;
    case 'd':
        rc = rs_latch_count_down(l);
        if (rc == ENOENT) {
            msg("latch \"%s\" is not armed", name);
            status = EXIT_CONFLICT;
        } else if (rc) {
            status = call_failed(c, rc, name);
        }
        break;
    case 'c': {
        unsigned n = 0;
        rc = rs_latch_getcount(l, &n);
        if (rc == ENOENT) {
            msg("latch \"%s\" is not armed", name);
            status = EXIT_CONFLICT;
        } else if (rc) {
            status = call_failed(c, rc, name);
        } else {
            printf("%u\n", n);
        }
        break;
    }
    case 'W':
        if (!o->have_wait) {
            rc = rs_latch_wait(l);
        } else {
            struct timespec abstime = deadline_after(o->wait_s);
            rc = rs_latch_timedwait(l, &abstime);
        }
        if (rc == ETIMEDOUT) {
            msg("timed out after %g s waiting for latch \"%s\" to open", o->wait_s, name);
            status = o->conflict_code;
        } else if (rc) {
            status = call_failed(c, rc, name);
        }
        break;
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0) {
        msg("writing output: %s", strerror(errno));
        status = EXIT_SOFTWARE;
    }
    return status;
}

/* ========================================================================================
 * info, list, release --force
 * ====================================================================================== */

static void print_seconds(FILE *f, long ms)
{
    fprintf(f, "%ld.%03ld s", ms / 1000, ms % 1000);
}

static void print_info(const rs_info_t *in, const char *name)
{
    printf("kind:      %s\n", in->kind);
    printf("name:      %s\n", name);
    int is_latch = strcmp(in->kind, "latch") == 0;
    if (!is_latch) {
        printf("holders:   %u\n", in->nholders);
        unsigned shown = in->nholders < RS_INFO_HOLDERS ? in->nholders : RS_INFO_HOLDERS;
        for (unsigned i = 0; i < shown; i++)
            printf("holder:    %.*s\n", (int)sizeof in->holders[i], in->holders[i]);
        if (in->nholders > shown)
            printf("holder:    (%u more)\n", in->nholders - shown);
        printf("remaining: ");
        if (in->remaining_ms >= 0)
            print_seconds(stdout, in->remaining_ms);
        else
            printf("-");
        printf("\n");
        printf("fence:     %" PRIu64 "\n", in->fence);
        printf("waiters:   %u\n", in->waiters);
    }
    if (strcmp(in->kind, "rwlock") == 0 && in->nholders > 0)
        printf("mode:      %s\n", in->writer ? "write" : "read");
    if (strcmp(in->kind, "sem") == 0) {
        printf("size:      %ld\n", in->size);
        printf("free:      %ld\n", in->free);
    }
    if (strcmp(in->kind, "rmutex") == 0 && in->count >= 0)
        printf("count:     %ld\n", in->count);
    if (is_latch) {
        if (in->count >= 0)
            printf("count:     %ld\n", in->count);
        else
            printf("count:     not armed\n");
        printf("waiters:   %u\n", in->waiters);
    }
}

static int run_info(const opts_t *o, const char *name)
{
    rs_config_t cfg;
    config_from(&cfg, o);
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc)
        return open_failed(rc, o);
    int found = 0, status = 0;
    for (size_t i = 0; i < NKINDS; i++) {
        if (o->kind && strcmp(o->kind, kinds[i]) != 0)
            continue;
        rs_info_t in;
        memset(&in, 0, sizeof in);
        rc = rs_inspect(c, kinds[i], name, &in);
        if (rc == EINVAL && !o->kind)
            continue; /* a kind this library cannot inspect (the name was checked) */
        if (rc) {
            status = call_failed(c, rc, name);
            break;
        }
        if (!in.exists)
            continue;
        if (!in.kind[0])
            snprintf(in.kind, sizeof in.kind, "%s", kinds[i]);
        if (found++)
            printf("\n");
        print_info(&in, name);
    }
    if (!status && !found) {
        if (o->kind)
            msg("there is no %s \"%s\"", o->kind, name);
        else
            msg("there is nothing named \"%s\"", name);
        status = EXIT_CONFLICT;
    }
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_SOFTWARE;
    return status;
}

static int list_each(const char *kind, const char *name, void *arg)
{
    (void)arg;
    printf("%s %s\n", kind, name);
    return 0;
}

static int run_list(const opts_t *o, const char *pattern)
{
    rs_config_t cfg;
    config_from(&cfg, o);
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc)
        return open_failed(rc, o);
    int status = 0;
    rc = rs_list(c, pattern, list_each, NULL);
    if (rc)
        status = call_failed(c, rc, "list");
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_SOFTWARE;
    return status;
}

static int run_release(const opts_t *o, const char *name)
{
    rs_config_t cfg;
    config_from(&cfg, o);
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc)
        return open_failed(rc, o);
    int status = 0;
    rs_info_t in;
    memset(&in, 0, sizeof in);
    rc = rs_inspect(c, o->kind, name, &in);
    if (rc) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    rc = rs_force_release(c, o->kind, name);
    if (rc) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    if (!in.exists || in.nholders == 0) {
        printf("%s %s: nothing was held\n", o->kind, name);
    } else {
        unsigned shown = in.nholders < RS_INFO_HOLDERS ? in.nholders : RS_INFO_HOLDERS;
        printf("%s %s: released %u hold%s", o->kind, name, in.nholders,
               in.nholders == 1 ? "" : "s");
        if (strcmp(o->kind, "rwlock") == 0)
            printf(" (%s)", in.writer ? "write" : "read");
        if (in.fence)
            printf(", fence %" PRIu64, in.fence);
        if (in.remaining_ms >= 0) {
            printf(", ");
            print_seconds(stdout, in.remaining_ms);
            printf(" of lease left");
        }
        printf("\n");
        for (unsigned i = 0; i < shown; i++)
            printf("  holder %.*s\n", (int)sizeof in.holders[i], in.holders[i]);
        if (in.nholders > shown)
            printf("  (%u more)\n", in.nholders - shown);
        if (in.waiters)
            printf("  %u waiter%s woken\n", in.waiters, in.waiters == 1 ? "" : "s");
    }
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_SOFTWARE;
    return status;
}

/* ========================================================================================
 * Command line
 * ====================================================================================== */

enum {
    OPT_VERSION = 1000,
    OPT_KILL_ON_LOST,
    OPT_PREFIX,
    OPT_ARM,
    OPT_DOWN,
    OPT_WAITLATCH,
    OPT_COUNT,
    OPT_FORCE,
};

static const struct option global_long[] = {
    {"url", required_argument, NULL, 'u'},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static const struct option hold_long[] = {
    {"url", required_argument, NULL, 'u'},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"wait", required_argument, NULL, 'w'},
    {"timeout", required_argument, NULL, 'w'},
    {"lease", required_argument, NULL, 'l'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"kill-on-lost", no_argument, NULL, OPT_KILL_ON_LOST},
    {"permits", required_argument, NULL, 'n'},
    {NULL, 0, NULL, 0},
};

static const struct option other_long[] = {
    {"url", required_argument, NULL, 'u'},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"wait", no_argument, NULL, OPT_WAITLATCH}, /* latch --wait; -w SECONDS is the timeout */
    {"timeout", required_argument, NULL, 'w'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"arm", required_argument, NULL, OPT_ARM},
    {"down", no_argument, NULL, OPT_DOWN},
    {"count", no_argument, NULL, OPT_COUNT},
    {"kind", required_argument, NULL, 'k'},
    {"force", no_argument, NULL, OPT_FORCE},
    {NULL, 0, NULL, 0},
};

/* Handles an option common to every subcommand; 1 if it was one, -1 on error (printed). */
static int common_opt(int ch, opts_t *o)
{
    switch (ch) {
    case 'u':
        o->url = optarg;
        return 1;
    case OPT_PREFIX:
        o->prefix = optarg;
        return 1;
    case 'v':
        o->verbose = 1;
        return 1;
    case 'h':
        print_help(stdout);
        exit(fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE);
    }
    return 0;
}

/* getopt_long returned '?' or ':' (opterr is 0: the messages are ours). */
static int bad_option(const char *sub, char **argv, int ch)
{
    const char *sep = sub ? ": " : "";
    sub = sub ? sub : "";
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (ch == ':')
        return usage_error("%s%soption '%s' requires an argument", sub, sep, arg);
    if (optopt && optopt < 256)
        return usage_error("%s%sinvalid option -- '%c'", sub, sep, optopt);
    return usage_error("%s%sunrecognized option '%s'", sub, sep, arg);
}

static int check_name(const char *name)
{
    if (!*name)
        return usage_error("NAME must not be empty");
    if (strlen(name) > RS_NAME_MAX)
        return usage_error("NAME is longer than %d bytes", RS_NAME_MAX);
    return 0;
}

static int main_holding(const char *sub, int argc, char **argv, opts_t *o)
{
    hkind_t kind = strcmp(sub, "lock") == 0     ? H_MUTEX
                 : strcmp(sub, "rdlock") == 0   ? H_READ
                 : strcmp(sub, "wrlock") == 0   ? H_WRITE
                                                : H_SEM;
    int ch;
    optind = 0; /* glibc: full re-initialisation; argv[0] is the subcommand */
    while ((ch = getopt_long(argc, argv, "+:u:vhw:l:E:n:", hold_long, NULL)) != -1) {
        int r = common_opt(ch, o);
        if (r)
            continue;
        unsigned long v;
        switch (ch) {
        case 'w':
            if (parse_seconds(optarg, &o->wait_s) != 0)
                return usage_error("-w: not a number of seconds: '%s'", optarg);
            o->have_wait = 1;
            break;
        case 'l':
            if (parse_seconds(optarg, &o->lease_s) != 0 || o->lease_s < 0.03 ||
                o->lease_s > 86400)
                return usage_error("-l: the lease must be 0.03 to 86400 seconds: '%s'", optarg);
            o->have_lease = 1;
            break;
        case 'E':
            if (parse_uint(optarg, 255, &v) != 0)
                return usage_error("-E: not an exit status (0-255): '%s'", optarg);
            o->conflict_code = (int)v;
            break;
        case OPT_KILL_ON_LOST:
            o->kill_on_lost = 1;
            break;
        case 'n':
            if (kind != H_SEM)
                return usage_error("%s: -n is only for sem", sub);
            if (parse_uint(optarg, UINT_MAX, &v) != 0 || v == 0)
                return usage_error("-n: not a number of permits (1 or more): '%s'", optarg);
            o->permits = v;
            o->have_permits = 1;
            break;
        default:
            return bad_option(sub, argv, ch);
        }
    }
    if (kind == H_SEM && !o->have_permits)
        return usage_error("sem: -n PERMITS is required");
    if (optind >= argc)
        return usage_error("%s: NAME is missing", sub);
    const char *name = argv[optind++];
    if (check_name(name))
        return EXIT_USAGE;
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc)
        return usage_error("%s: COMMAND is missing (%s NAME -- COMMAND [ARG...])", sub, sub);
    return run_holding(kind, o, name, argv + optind);
}

static int main_other(const char *sub, int argc, char **argv, opts_t *o)
{
    int is_latch = strcmp(sub, "latch") == 0;
    int is_info = strcmp(sub, "info") == 0;
    int is_list = strcmp(sub, "list") == 0;
    int action = 0;
    unsigned long arm_n = 0;
    int ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, ":u:vhw:E:k:", other_long, NULL)) != -1) {
        int r = common_opt(ch, o);
        if (r)
            continue;
        unsigned long v;
        int new_action = 0;
        switch (ch) {
        case 'w':
            if (!is_latch)
                return usage_error("%s: -w is not an option here", sub);
            if (parse_seconds(optarg, &o->wait_s) != 0)
                return usage_error("-w: not a number of seconds: '%s'", optarg);
            o->have_wait = 1;
            break;
        case 'E':
            if (!is_latch)
                return usage_error("%s: -E is not an option here", sub);
            if (parse_uint(optarg, 255, &v) != 0)
                return usage_error("-E: not an exit status (0-255): '%s'", optarg);
            o->conflict_code = (int)v;
            break;
        case 'k':
            if (is_latch || is_list)
                return usage_error("%s: -k is not an option here", sub);
            if (!known_kind(optarg))
                return usage_error("-k: unknown kind '%s' (mutex, rmutex, rwlock, sem, latch)",
                                   optarg);
            o->kind = optarg;
            break;
        case OPT_FORCE:
            if (strcmp(sub, "release") != 0)
                return usage_error("%s: --force is not an option here", sub);
            o->force = 1;
            break;
        case OPT_ARM:
            if (parse_uint(optarg, UINT_MAX, &v) != 0 || v == 0)
                return usage_error("--arm: not a count (1 or more): '%s'", optarg);
            arm_n = v;
            new_action = 'a';
            break;
        case OPT_DOWN:
            new_action = 'd';
            break;
        case OPT_WAITLATCH:
            new_action = 'W';
            break;
        case OPT_COUNT:
            new_action = 'c';
            break;
        default:
            return bad_option(sub, argv, ch);
        }
        if (new_action) {
            if (!is_latch)
                return usage_error("%s: that option is for latch", sub);
            if (action && action != new_action)
                return usage_error("latch: give one of --arm, --down, --wait, --count");
            action = new_action;
        }
    }
    int nargs = argc - optind;
    if (is_list) {
        if (nargs > 1)
            return usage_error("list: at most one PATTERN");
        return run_list(o, nargs ? argv[optind] : NULL);
    }
    if (nargs < 1)
        return usage_error("%s: NAME is missing", sub);
    if (nargs > 1)
        return usage_error("%s: unexpected argument '%s'", sub, argv[optind + 1]);
    const char *name = argv[optind];
    if (check_name(name))
        return EXIT_USAGE;
    if (is_latch) {
        if (!action)
            return usage_error("latch: give one of --arm N, --down, --wait, --count");
        if (o->have_wait && action != 'W')
            return usage_error("latch: -w goes with --wait");
        return run_latch(o, name, action, arm_n);
    }
    if (is_info)
        return run_info(o, name);
    /* release */
    if (!o->force)
        return usage_error("release: --force is required (it breaks the holders' exclusion)");
    if (!o->kind)
        return usage_error("release: -k KIND is required");
    if (strcmp(o->kind, "latch") == 0)
        return usage_error("release: a latch has no holds (use latch NAME --arm N or --down)");
    return run_release(o, name);
}

int main(int argc, char **argv)
{
    opts_t o;
    memset(&o, 0, sizeof o);
    o.conflict_code = EXIT_CONFLICT;

    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+:u:vh", global_long, NULL)) != -1) {
        if (common_opt(ch, &o))
            continue;
        if (ch == OPT_VERSION) {
            printf("redisync %s (libredisync %s)\n", RS_VERSION_STRING, rs_version());
            return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
        }
        return bad_option(NULL, argv, ch);
    }
    if (optind >= argc)
        return usage_error("a subcommand is missing (lock, rdlock, wrlock, sem, latch, info, "
                           "list, release)");
    const char *sub = argv[optind];
    int sargc = argc - optind;
    char **sargv = argv + optind;
    if (!strcmp(sub, "lock") || !strcmp(sub, "rdlock") || !strcmp(sub, "wrlock") ||
        !strcmp(sub, "sem"))
        return main_holding(sub, sargc, sargv, &o);
    if (!strcmp(sub, "latch") || !strcmp(sub, "info") || !strcmp(sub, "list") ||
        !strcmp(sub, "release"))
        return main_other(sub, sargc, sargv, &o);
    if (!strcmp(sub, "help")) {
        print_help(stdout);
        return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
    }
    return usage_error("unknown subcommand '%s'", sub);
}
