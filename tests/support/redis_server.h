/* Test support: throwaway redis-server processes on free 127.0.0.1 ports.
 *
 * Used by the Criterion tests, the fault runs, the benchmark and the demo. Every server gets
 * its own port (never a fixed one, always 127.0.0.1) and its own temporary working directory,
 * and is killed by pid when done. Build with -std=c11 -D_GNU_SOURCE, link with -lhiredis.
 *
 * Port choice and races. A port is picked at random in 20000..55535 (cluster bus = port+10000),
 * skipping the kernel's ephemeral range (ip_local_port_range) when possible so that outgoing
 * connections do not collide with it. The helper then *reserves* the port: it binds a socket to
 * 127.0.0.1:P without SO_REUSEADDR (fails if anything else holds P, including TIME_WAIT and
 * other helpers' reservations), then sets SO_REUSEADDR on it and keeps it bound, never
 * listening, until ts_server_stop(). redis-server (which binds with SO_REUSEADDR) can still
 * listen on P, while other processes running this helper cannot pick P, including during the
 * window between ts_server_kill() and ts_server_restart(). With "--cluster-enabled yes" the
 * bus port P+10000 is reserved the same way. If redis-server exits during start-up (port lost
 * to a race), start retries on another port (20 attempts); restart retries the same port for up
 * to 10 s. Success means PING answered PONG (LOADING is waited out, up to 5 s per attempt by
 * default) *and* INFO's process_id is the pid we forked, so a different server answering on
 * that port is never mistaken for ours.
 *
 * Cleanup. Servers are recorded in a small per-process table; an atexit handler SIGKILLs the
 * ones started by this process (not by a parent it was forked from) and removes their dirs.
 * Criterion's test workers exit normally after each test, failed or not, so atexit runs.
 * A test process that is killed (kill -9, Criterion's timeout, a crash) does not run atexit:
 * for that, the child sets prctl(PR_SET_PDEATHSIG, SIGKILL) before exec, so the server dies
 * with the *thread* that forked it. Start servers from the main thread (or a thread that
 * outlives them): a server started from a short-lived thread dies when that thread exits.
 * The temp dir of a killed test process leaks; the next process that starts a server removes
 * dirs named ts-redis.<pid>.* whose <pid> no longer exists.
 *
 * Processes. The child closes every inherited fd >= 3 (hiredis sockets of the test), resets
 * signal dispositions and mask, sends stdin to /dev/null and stdout/stderr to DIR/redis.log,
 * makes itself a process-group leader (so kill/stop also kill redis' own fork children,
 * e.g. a BGSAVE or AOF rewrite) and execs redis-server found on PATH (/usr/bin on Debian).
 *
 * Not thread-safe against concurrent use of the *same* ts_server_t; different servers may be
 * used from different threads. Do not copy a started ts_server_t by value (args are owned).
 */
#ifndef REDISYNC_TESTS_SUPPORT_REDIS_SERVER_H
#define REDISYNC_TESTS_SUPPORT_REDIS_SERVER_H

#include <stddef.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>

/* The address every test server binds and is reached on. */
#define TS_HOST "127.0.0.1"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_server {
    pid_t pid;           /* 0 when not running */
    int port;
    char dir[256];       /* its own temp working dir (mkdtemp), removed by ts_server_stop */
    char url[128];       /* "redis://127.0.0.1:PORT" */
    char *args[32];      /* extra arguments it was started with (copied), for restart */
    int nargs;
} ts_server_t;

/* Starts redis-server on a free 127.0.0.1 port with
 *   --port P --bind 127.0.0.1 --save "" --appendonly no --dir DIR --daemonize no
 *   --protected-mode no --logfile DIR/redis.log --enable-debug-command local
 * followed by the extra args (later ones override, e.g. "--appendonly", "yes"). At most 31
 * extra args. Waits until PING answers PONG. Returns 0, or -1 with *s zeroed (and a short
 * diagnostic, including the tail of the server log, on stderr). *s need not be initialised.
 * ts_server_start takes const char * args terminated by NULL (write NULL, not 0). */
int ts_server_start(ts_server_t *s, ...);
int ts_server_startv(ts_server_t *s, const char *const *args);

/* Reserves one more free 127.0.0.1 port the way servers' ports are reserved (bound, not
 * listening, SO_REUSEADDR) and keeps it until this process exits: for a second listener of
 * a server, e.g. "--tls-port P". bus: P+10000 too (a cluster node with tls-cluster yes has
 * its bus there). The port, or -1. */
int ts_reserve_port(int bus);

/* SIGKILL (whole process group) + waitpid; keeps port, dir, args and the port reservation. */
void ts_server_kill(ts_server_t *s);

/* Starts again on the same port and dir with the same args (kills it first if running).
 * Retries for up to 10 s; waits until PING returns PONG (LOADING is waited out). 0 or -1. */
int ts_server_restart(ts_server_t *s);

/* SIGKILL + waitpid if running, remove dir recursively, free args, release the port.
 * Safe to call twice, and on a struct whose start failed. */
void ts_server_stop(ts_server_t *s);

/* SIGSTOP the server (returns once the kernel reports it stopped, up to 1 s) / SIGCONT it. */
void ts_server_pause(ts_server_t *s);
void ts_server_resume(ts_server_t *s);

/* Plain hiredis connection to the server with a 2 s connect timeout and a 2 s socket (command)
 * timeout; NULL on failure. For commands that block longer (DEBUG SLEEP 5, BLPOP ...), call
 * redisSetTimeout(c, tv) with a larger tv, or {0, 0} for none. Free with redisFree. */
redisContext *ts_connect(const ts_server_t *s);

/* Runs one command (redisCommand printf-style format) on a fresh connection and returns its
 * integer reply. A string or status reply that is a whole decimal integer (e.g. GET of "5") is
 * converted too. -1 on error, nil, other reply types, or connection failure (so -1 is
 * ambiguous for commands that can legitimately return -1, such as TTL/PTTL). */
long long ts_cmd_int(const ts_server_t *s, const char *fmt, ...);

/* Same, copying a string/status/error reply (or the decimal form of an integer) into buf.
 * Returns buf, or NULL on nil, other types, or connection failure. */
char *ts_cmd_str(const ts_server_t *s, char *buf, size_t len, const char *fmt, ...);

/* Reads one field of an INFO section:
 *   ts_info_ll(s, "server", "process_id", NULL)            for "key:value" lines
 *   ts_info_ll(s, "commandstats", "cmdstat_evalsha", "calls") for "key:a=1,b=2" lines
 *   ts_info_ll(s, "keyspace", "db0", "keys")
 * Decimal values are truncated (usec_per_call=1.5 gives 1). -1 if absent or on error. */
long long ts_info_ll(const ts_server_t *s, const char *section, const char *key,
                     const char *subfield);

/* Writes a key prefix unique to this process and call, e.g. "t12345x3", into buf and returns
 * buf (truncated to len - 1 characters if needed). */
const char *ts_unique_prefix(char *buf, size_t len);

/* Writes the redlock:// URL of the n started servers s[0..n-1] into url (with the ACL user's
 * userinfo under RS_TEST_ACL) and returns url. */
char *ts_redlock_url(char *url, size_t len, const ts_server_t *s, int n);

/* Writes the redis-cluster:// URL whose seed is the started node (with the deployment
 * user's userinfo under RS_TEST_ACL: ts_deploy_userinfo) into url and returns url. */
char *ts_cluster_url(char *url, size_t len, const ts_server_t *node);

/* "USER:PASSWORD@" for the userinfo of redis-sentinel:// and redis-cluster:// URLs under
 * RS_TEST_ACL (make test-acl: a user with exactly the deployment rights of
 * docs/security.md), else "". */
const char *ts_deploy_userinfo(void);
/* The same for URLs that need only the single-server rights (redlock://): the user that
 * ts_server_t.url logs in as. */
const char *ts_acl_userinfo(void);

/* Support internals (redis_acl.c, used by redis_server.c): whether RS_TEST_ACL is set, and
 * the aclfile for s written to s->dir (path receives its name; 0 or -1). */
int ts_acl_mode(void);
int ts_acl_write_file(const ts_server_t *s, char *path, size_t len);

#ifdef __cplusplus
}
#endif

#endif
