/*
 * util.c - the redisync command's messages (one write per line, "redisync: ..."), its --help,
 * the parsing of SECONDS and counts, and the client made from the options (tools/cli/cli.h).
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

/* ----- messages ---------------------------------------------------------------------------- */
void msg(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one write per line: messages of concurrent runs sharing a stderr do not interleave */
    fprintf(stderr, "%s: %s\n", PROGNAME, line);
}

int usage_error(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\nTry '%s --help' for more information.\n", PROGNAME, line,
            PROGNAME);
    return EXIT_USAGE;
}

void print_help(FILE *f)
{
    fprintf(f,
"Usage:\n"
"  %1$s [-u URL] lock   [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] rdlock [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] wrlock [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] sem -n PERMITS [-w SECONDS] [-l SECONDS] [-E CODE] [--kill-on-lost] NAME -- COMMAND [ARG...]\n"
"  %1$s [-u URL] lock|rdlock|wrlock|sem [OPTIONS] NAME -c 'CMDLINE'   (runs sh -c CMDLINE)\n"
"  %1$s [-u URL] lock|rdlock|wrlock|sem [OPTIONS] NAME   (prints the fencing token, holds\n"
"                                                       until SIGINT or SIGTERM)\n"
"  %1$s [-u URL] once [-w SECONDS] [-l SECONDS] [-E CODE] NAME -- COMMAND [ARG...]\n"
"                 (COMMAND on one machine until it exits 0; the others wait, then exit 0)\n"
"  %1$s [-u URL] barrier -n PARTIES [-w SECONDS] [--nonblock] [-E CODE] NAME\n"
"                 (returns when PARTIES runs have arrived; the one that completed the\n"
"                 generation prints \"serial\")\n"
"  %1$s [-u URL] latch NAME (--arm N | --down | --wait [-w SECONDS] [-E CODE] | --count)\n"
"  %1$s [-u URL] info [-k KIND] NAME\n"
"  %1$s [-u URL] list [PATTERN]\n"
"  %1$s [-u URL] release --force -k KIND NAME\n"
"                 (the kinds that hold: mutex, rmutex, rwlock, sem, once)\n"
"\n"
"Runs COMMAND while holding a distributed mutex, read or write lock, or semaphore permit\n"
"kept in Redis, runs a command once fleet-wide, and manages countdown latches and barriers;\n"
"in the manner of flock(1).\n"
"\n"
"Options:\n"
"  -u, --url URL          Redis to use (default: $REDISYNC_URL, else redis://127.0.0.1:6379)\n"
"      --prefix PREFIX    key namespace shared with the programs that use the primitive (default rs)\n"
"      --label TEXT       shown by 'redisync info' next to this run's holds (with host, pid,\n"
"                         program and how long it has held)\n"
"  -w, --wait SECONDS     give up after SECONDS (fractions allowed; 0: fail at once);\n"
"                         without -w, wait as long as it takes\n"
"  -n, --nonblock         the same as -w 0 (lock, rdlock, wrlock, once; on sem and\n"
"                         barrier --nonblock only)\n"
"  -c, --command CMDLINE  run CMDLINE with sh -c instead of -- COMMAND\n"
"  -l, --lease SECONDS    lease of the hold, renewed every third of it (default 30)\n"
"  -E, --conflict-exit-code CODE  exit status when -w runs out (default 1)\n"
"      --kill-on-lost     send SIGTERM to COMMAND as soon as the hold is lost, SIGKILL\n"
"                         --kill-after SECONDS later (default 10) if it still runs\n"
"  -n, --permits N        sem: size of the semaphore when it is created\n"
"  -n, --parties N        barrier: how many runs each generation waits for\n"
"  -k, --kind KIND        mutex, rmutex, rwlock, sem, latch, once, barrier or cond\n"
"  -v, --verbose          say how long the wait took and what runs; show the library's log\n"
"  -h, --help             show this help and exit\n"
"  -V, --version          show the version and exit\n"
"\n"
"flock's -s and -x are rdlock and wrlock here; -o, --unlock, -F and the descriptor form have\n"
"no counterpart (the hold lives in Redis, not on a file descriptor) and are refused.\n"
"\n"
"COMMAND runs with REDISYNC_NAME (the name) and REDISYNC_FENCE (fencing token; 0 for a read\n"
"hold) in its environment. SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on\n"
"to it; the hold is released once it has exited.\n"
"\n"
"Exit status: COMMAND's (128+N if signal N killed it); 0 for latch, info, list, release and\n"
"a barrier that tripped; 1 (or CODE) when -w ran out; 2 usage\n"
"error; 69 Redis unreachable; 70 internal error; 75 the hold was lost; 126 COMMAND not\n"
"executable; 127 COMMAND not found; 128+N interrupted by signal N while waiting.\n"
"See redisync(1).\n",
            PROGNAME);
}

/* ----- argument parsing helpers -------------------------------------------------------- */

/* SECONDS: a non-negative decimal number, fractions allowed. 0 ok, -1 bad. */
int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < 0 || v > 31536000.0 * 100)
        return -1;
    *out = v;
    return 0;
}

int parse_uint(const char *s, unsigned long max, unsigned long *out)
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

struct timespec deadline_after(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double whole = floor(seconds);
    long long ns = ts.tv_nsec + (long long)llround((seconds - whole) * 1e9);
    ts.tv_sec += (time_t)whole + (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

const char *const kinds[] = {"mutex", "rmutex", "rwlock", "sem", "latch", "once",
                                  "barrier", "cond"};

int known_kind(const char *k)
{
    for (size_t i = 0; i < NKINDS; i++)
        if (strcmp(k, kinds[i]) == 0)
            return 1;
    return 0;
}

/* ----- the client ---------------------------------------------------------------------- */



void log_cb(int level, const char *text, void *arg)
{
    (void)arg;
    static const char *names[] = {"debug", "info", "warning", "error"};
    const char *l = level >= 0 && level <= 3 ? names[level] : "log";
    fprintf(stderr, "%s: [%s] %s\n", PROGNAME, l, text);
}

/* Status for a failed rs_client_open, after printing why. */
int open_failed(int rc, const opts_t *o)
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
int call_failed(rs_client_t *c, int rc, const char *what)
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

void config_from(rs_config_t *cfg, const opts_t *o)
{
    rs_config_init(cfg);
    cfg->url = o->url;
    cfg->prefix = o->prefix;
    cfg->label = o->label;
    if (o->have_lease)
        cfg->lease_ms = (long)llround(o->lease_s * 1000.0);
    if (o->verbose) {
        cfg->log = log_cb;
        cfg->log_arg = NULL;
    }
}

int open_client(const opts_t *o, rs_client_t **out)
{
    rs_config_t cfg;
    config_from(&cfg, o);
    int rc = rs_client_open(out, &cfg);
    return rc ? open_failed(rc, o) : 0;
}
