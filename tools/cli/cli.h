/*
 * cli.h - what the files of the redisync command share (tools/cli/): exit statuses, the
 * options, messages, argument parsing, the client, and each subcommand family's entry.
 *
 *   main.c     the command line: global and per-subcommand options, dispatch
 *   util.c     messages, --help, parsing of seconds and counts, the client from the options
 *   hold.c     the holding subcommands (lock, rdlock, wrlock, sem): signals, COMMAND
 *   once.c     once NAME -- COMMAND
 *   barrier.c  barrier -n PARTIES NAME
 *   ops.c      latch, info, list, release --force
 *
 * Only the public API (include/redisync.h) is used; the Makefile compiles these files with
 * -Iinclude alone so that nothing else can creep in.
 */
#ifndef REDISYNC_TOOLS_CLI_H
#define REDISYNC_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "redisync.h"

/* ----- exit statuses (documented in docs/redisync.1, EXIT STATUS) ----------------------- */
#define EXIT_CONFLICT    1   /* -w ran out, latch/info found nothing (or CODE from -E) */
#define EXIT_USAGE       2   /* bad command line, malformed URL or name */
#define EXIT_UNAVAILABLE 69  /* EX_UNAVAILABLE: Redis could not be reached (or refused us) */
#define EXIT_SOFTWARE    70  /* EX_SOFTWARE: any other error */
#define EXIT_LOST        75  /* EX_TEMPFAIL: the hold was lost before it was released */
#define EXIT_NOEXEC      126 /* COMMAND found but could not be executed */
#define EXIT_NOTFOUND    127 /* COMMAND not found */

#define PROGNAME "redisync"

typedef struct opts {
    const char *url;
    const char *prefix;
    const char *label;      /* --label: shown by info next to this run's holds */
    int verbose;
    /* holding subcommands */
    int have_wait;
    double wait_s;
    int have_lease;
    double lease_s;
    int conflict_code;
    int kill_on_lost;
    double kill_after_s;    /* --kill-on-lost: SIGKILL this long after the SIGTERM */
    const char *cmdline;    /* -c CMDLINE: run with sh -c */
    int have_permits;
    unsigned long permits;
    /* others */
    const char *kind;
    int force;
} opts_t;

/* util.c */
void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* prints the line and the --help hint; returns EXIT_USAGE */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void print_help(FILE *f);
/* SECONDS: a non-negative decimal number, fractions allowed. 0 ok, -1 bad. */
int parse_seconds(const char *s, double *out);
int parse_uint(const char *s, unsigned long max, unsigned long *out);
struct timespec deadline_after(double seconds);
/* the kinds -k takes, in the order info and list show them */
#define NKINDS 8
extern const char *const kinds[NKINDS];
int known_kind(const char *k);
void log_cb(int level, const char *text, void *arg);
/* Status for a failed rs_client_open, after printing why. */
int open_failed(int rc, const opts_t *o);
/* Status for a failed library call (other than the expected busy/timeout), after printing. */
int call_failed(rs_client_t *c, int rc, const char *what);
void config_from(rs_config_t *cfg, const opts_t *o);
/* A client from the options: 0, or the exit status after printing why. */
int open_client(const opts_t *o, rs_client_t **out);

/* hold.c: lock, rdlock, wrlock, sem */
typedef enum { H_MUTEX, H_READ, H_WRITE, H_SEM, H_ONCE } hkind_t;
int run_holding(hkind_t kind, const opts_t *o, const char *name, char **command);
/* COMMAND's environment: ours with REDISYNC_NAME and REDISYNC_FENCE set (NULL: no memory) */
char **command_env(const char *name, uint64_t fence);
void command_env_free(char **env);

/* once.c: COMMAND on one machine until it succeeds */
int run_once(const opts_t *o, const char *name, char **command);

/* barrier.c: wait for PARTIES runs; "serial" printed by the one that trips a generation */
int run_barrier(const opts_t *o, const char *name, unsigned long parties);

/* ops.c */
int run_latch(const opts_t *o, const char *name, int action, unsigned long arm_n);
int run_info(const opts_t *o, const char *name);
int run_list(const opts_t *o, const char *pattern);
int run_release(const opts_t *o, const char *name);

#endif
