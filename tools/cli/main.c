/*
 * main.c - the redisync command line: global options, then a subcommand with its own
 * options, handed to hold.c (lock, rdlock, wrlock, sem) or ops.c (latch, info, list,
 * release). docs/redisync.1 is the user's side.
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

/* ========================================================================================
 * Command line
 * ====================================================================================== */

enum {
    OPT_VERSION = 1000,
    OPT_KILL_ON_LOST,
    OPT_KILL_AFTER,
    OPT_NONBLOCK,
    OPT_UNLOCK,
    OPT_PREFIX,
    OPT_ARM,
    OPT_DOWN,
    OPT_WAITLATCH,
    OPT_COUNT,
    OPT_FORCE,
    OPT_LABEL,
};

/* the long options every subcommand takes (common_opt) */
#define COMMON_LONG                                                                          \
    {"url", required_argument, NULL, 'u'}, {"prefix", required_argument, NULL, OPT_PREFIX}, \
        {"label", required_argument, NULL, OPT_LABEL}, {"verbose", no_argument, NULL, 'v'},  \
        {"help", no_argument, NULL, 'h'}

static const struct option global_long[] = {
    COMMON_LONG,
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static const struct option hold_long[] = {
    COMMON_LONG,
    {"wait", required_argument, NULL, 'w'},
    {"timeout", required_argument, NULL, 'w'},
    {"lease", required_argument, NULL, 'l'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"kill-on-lost", no_argument, NULL, OPT_KILL_ON_LOST},
    {"kill-after", required_argument, NULL, OPT_KILL_AFTER},
    {"permits", required_argument, NULL, 'n'},
    {"nonblock", no_argument, NULL, OPT_NONBLOCK},
    {"nb", no_argument, NULL, OPT_NONBLOCK},
    {"command", required_argument, NULL, 'c'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"shared", no_argument, NULL, 's'},
    {"exclusive", no_argument, NULL, 'x'},
    {"close", no_argument, NULL, 'o'},
    {"unlock", no_argument, NULL, OPT_UNLOCK},
    {"no-fork", no_argument, NULL, 'F'},
    {NULL, 0, NULL, 0},
};

static const struct option other_long[] = {
    COMMON_LONG,
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

static const struct option barrier_long[] = {
    COMMON_LONG,
    {"version", no_argument, NULL, OPT_VERSION},
    {"wait", required_argument, NULL, 'w'},
    {"timeout", required_argument, NULL, 'w'},
    {"conflict-exit-code", required_argument, NULL, 'E'},
    {"parties", required_argument, NULL, 'n'},
    {"nonblock", no_argument, NULL, OPT_NONBLOCK},
    {"nb", no_argument, NULL, OPT_NONBLOCK},
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
    case OPT_LABEL:
        o->label = optarg;
        return 1;
    case 'v':
        o->verbose = 1;
        return 1;
    case 'h':
        print_help(stdout);
        exit(fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE);
    case 'V':
    case OPT_VERSION:
        printf("redisync %s (libredisync %s)\n", RS_VERSION_STRING, rs_version());
        exit(fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE);
    }
    return 0;
}

/* -w SECONDS, --nonblock and -E CODE, the same wherever they are options: 1 if ch is one
 * of them (*rc then 0, or the usage error's status), else 0. */
static int wait_opt(int ch, opts_t *o, int *rc)
{
    unsigned long v;
    *rc = 0;
    switch (ch) {
    case 'w':
        if (parse_seconds(optarg, &o->wait_s) != 0)
            *rc = usage_error("-w: not a number of seconds: '%s'", optarg);
        else
            o->have_wait = 1;
        return 1;
    case OPT_NONBLOCK:
        o->wait_s = 0;
        o->have_wait = 1;
        return 1;
    case 'E':
        if (parse_uint(optarg, 255, &v) != 0)
            *rc = usage_error("-E: not an exit status (0-255): '%s'", optarg);
        else
            o->conflict_code = (int)v;
        return 1;
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

/* flock(1)'s options that have no counterpart here, refused with the reason */
static int flock_refused(const char *sub, int ch)
{
    switch (ch) {
    case 's':
        return usage_error("%s: -s/--shared is flock's shared lock: use 'redisync rdlock NAME "
                           "-- COMMAND' (readers share, a writer excludes them)", sub);
    case 'x':
    case 'e':
        return usage_error("%s: -%c/--exclusive is flock's exclusive lock: 'lock' is exclusive "
                           "already; for a read-write lock's exclusive side use 'redisync "
                           "wrlock'", sub, ch);
    case 'o':
        return usage_error("%s: -o/--close has no counterpart: the hold is no open file that "
                           "COMMAND could inherit; it lives in Redis and is renewed by this "
                           "process while COMMAND runs", sub);
    case OPT_UNLOCK:
        return usage_error("%s: --unlock has no counterpart: a hold is released when COMMAND "
                           "exits, or, held without a COMMAND, on SIGINT or SIGTERM (and -u "
                           "is the URL here)", sub);
    case 'F':
        return usage_error("%s: -F/--no-fork has no counterpart: this process must stay to "
                           "renew the hold while COMMAND runs", sub);
    }
    return 0;
}

static int all_digits(const char *s)
{
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static int main_holding(const char *sub, int argc, char **argv, opts_t *o)
{
    hkind_t kind = strcmp(sub, "lock") == 0     ? H_MUTEX
                 : strcmp(sub, "rdlock") == 0   ? H_READ
                 : strcmp(sub, "wrlock") == 0   ? H_WRITE
                 : strcmp(sub, "once") == 0     ? H_ONCE
                                                : H_SEM;
    /* -n is flock's --nonblock, except on sem, where it is the count (--nonblock there) */
    const char *shorts = kind == H_SEM ? "+:u:vhVw:l:E:n:c:sxeoF" : "+:u:vhVw:l:E:nc:sxeoF";
    int ch;
    optind = 0; /* glibc: full re-initialisation; argv[0] is the subcommand */
    while ((ch = getopt_long(argc, argv, shorts, hold_long, NULL)) != -1) {
        int r = common_opt(ch, o);
        if (r)
            continue;
        if ((r = flock_refused(sub, ch)) != 0)
            return r;
        if (wait_opt(ch, o, &r)) {
            if (r)
                return r;
            continue;
        }
        unsigned long v;
        switch (ch) {
        case 'l':
            if (parse_seconds(optarg, &o->lease_s) != 0 || o->lease_s < 0.03 ||
                o->lease_s > 86400)
                return usage_error("-l: the lease must be 0.03 to 86400 seconds: '%s'", optarg);
            o->have_lease = 1;
            break;
        case OPT_KILL_ON_LOST:
            o->kill_on_lost = 1;
            break;
        case OPT_KILL_AFTER:
            if (parse_seconds(optarg, &o->kill_after_s) != 0)
                return usage_error("--kill-after: not a number of seconds: '%s'", optarg);
            break;
        case 'c':
            o->cmdline = optarg;
            break;
        case 'n':
            if (kind != H_SEM) { /* flock's -n */
                o->wait_s = 0;
                o->have_wait = 1;
                break;
            }
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
    /* flock's forms: NAME -c CMDLINE, NAME -- COMMAND, NAME COMMAND */
    if (optind < argc && (!strcmp(argv[optind], "-c") || !strcmp(argv[optind], "--command"))) {
        if (optind + 1 >= argc)
            return usage_error("%s: %s needs a command line", sub, argv[optind]);
        if (optind + 2 < argc)
            return usage_error("%s: -c takes one command line (quote it): unexpected '%s'", sub,
                               argv[optind + 2]);
        o->cmdline = argv[optind + 1];
        optind = argc;
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0) {
        optind++;
        if (optind >= argc)
            return usage_error("%s: COMMAND is missing after -- (%s NAME -- COMMAND [ARG...])",
                               sub, sub);
    }
    if (o->cmdline && optind < argc)
        return usage_error("%s: give -c CMDLINE or COMMAND, not both", sub);
    char **command = optind < argc ? argv + optind : NULL;
    static char sh[] = "sh", dash_c[] = "-c";
    static char *argv_sh[4];
    if (o->cmdline) {
        argv_sh[0] = sh;
        argv_sh[1] = dash_c;
        argv_sh[2] = (char *)o->cmdline;
        argv_sh[3] = NULL;
        command = argv_sh;
    }
    if (kind == H_ONCE) {
        if (!command)
            return usage_error("once: COMMAND is missing (once NAME -- COMMAND [ARG...])");
        if (o->kill_on_lost)
            return usage_error("once: --kill-on-lost is for the holding subcommands");
        return run_once(o, name, command);
    }
    if (o->cmdline)
        return run_holding(kind, o, name, argv_sh);
    if (optind >= argc && all_digits(name))
        return usage_error("%s: '%s' looks like flock's file-descriptor form (flock [options] "
                           "FD), which has no counterpart: the hold is in Redis, not on a "
                           "descriptor. Use '%s NAME -- COMMAND', or '%s NAME' alone to hold "
                           "it until SIGINT or SIGTERM (with a name that is not all digits)",
                           sub, name, sub, sub);
    /* no COMMAND: hold until SIGINT/SIGTERM (as etcdctl lock NAME does) */
    return run_holding(kind, o, name, optind < argc ? argv + optind : NULL);
}

/* barrier -n PARTIES [-w SECONDS] [--nonblock] [-E CODE] NAME */
static int main_barrier(int argc, char **argv, opts_t *o)
{
    unsigned long parties = 0;
    int ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+:u:vhVw:E:n:", barrier_long, NULL)) != -1) {
        int r = common_opt(ch, o);
        if (r)
            continue;
        if (wait_opt(ch, o, &r)) {
            if (r)
                return r;
            continue;
        }
        unsigned long v;
        switch (ch) {
        case 'n':
            if (parse_uint(optarg, INT_MAX, &v) != 0 || v == 0)
                return usage_error("-n: not a number of parties (1 or more): '%s'", optarg);
            parties = v;
            break;
        default:
            return bad_option("barrier", argv, ch);
        }
    }
    if (!parties)
        return usage_error("barrier: -n PARTIES is required");
    if (optind >= argc)
        return usage_error("barrier: NAME is missing");
    if (optind + 1 < argc)
        return usage_error("barrier: unexpected argument '%s' (barrier runs no COMMAND)",
                           argv[optind + 1]);
    const char *name = argv[optind];
    if (check_name(name))
        return EXIT_USAGE;
    return run_barrier(o, name, parties);
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
    while ((ch = getopt_long(argc, argv, ":u:vhVw:E:k:", other_long, NULL)) != -1) {
        int r = common_opt(ch, o);
        if (r)
            continue;
        unsigned long v;
        int new_action = 0;
        switch (ch) {
        case 'w':
        case 'E':
            if (!is_latch)
                return usage_error("%s: -%c is not an option here", sub, ch);
            wait_opt(ch, o, &r);
            if (r)
                return r;
            break;
        case 'k':
            if (is_latch || is_list)
                return usage_error("%s: -k is not an option here", sub);
            if (!known_kind(optarg))
                return usage_error("-k: unknown kind '%s' (mutex, rmutex, rwlock, sem, latch, once, "
                                   "barrier, cond)",
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
    if (strcmp(o->kind, "barrier") == 0)
        return usage_error("release: a barrier has no holds (a party that gave up withdraws "
                           "its arrival itself)");
    if (strcmp(o->kind, "cond") == 0)
        return usage_error("release: a condition variable has no holds (its waiters hold "
                           "nothing while they wait: the mutex they re-acquire is released "
                           "with -k mutex; a waiter that died leaves the queue when its "
                           "entry's lease runs out)");
    return run_release(o, name);
}

int main(int argc, char **argv)
{
    opts_t o;
    memset(&o, 0, sizeof o);
    o.conflict_code = EXIT_CONFLICT;

    int ch;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+:u:vhV", global_long, NULL)) != -1) {
        if (common_opt(ch, &o))
            continue;
        return bad_option(NULL, argv, ch);
    }
    if (optind >= argc)
        return usage_error("a subcommand is missing (lock, rdlock, wrlock, sem, latch, info, "
                           "list, release, once, barrier)");
    const char *sub = argv[optind];
    int sargc = argc - optind;
    char **sargv = argv + optind;
    if (!strcmp(sub, "lock") || !strcmp(sub, "rdlock") || !strcmp(sub, "wrlock") ||
        !strcmp(sub, "sem") || !strcmp(sub, "once"))
        return main_holding(sub, sargc, sargv, &o);
    if (!strcmp(sub, "barrier"))
        return main_barrier(sargc, sargv, &o);
    if (!strcmp(sub, "latch") || !strcmp(sub, "info") || !strcmp(sub, "list") ||
        !strcmp(sub, "release"))
        return main_other(sub, sargc, sargv, &o);
    if (!strcmp(sub, "help")) {
        print_help(stdout);
        return fflush(stdout) == 0 ? 0 : EXIT_SOFTWARE;
    }
    return usage_error("unknown subcommand '%s'", sub);
}

