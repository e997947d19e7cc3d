/* Test support: throwaway redis-server processes on free 127.0.0.1 ports.
 * See redis_server.h for the contract (port reservation, retries, cleanup). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "redis_server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TS_PORT_MIN                /* overridable only to stress the retry paths */
#define TS_PORT_MIN 20000
#endif
#ifndef TS_PORT_MAX
#define TS_PORT_MAX 55535          /* cluster bus is port + 10000 */
#endif
#define TS_START_ATTEMPTS 20
#define TS_READY_MS 5000           /* per start attempt */
#define TS_RESTART_MS 10000        /* whole restart */
#define TS_MAX_EXTRA 31
#define TS_MAX_SERVERS 64
#define TS_DIR_PREFIX "ts-redis."

/* ------------------------------------------------------------------------------------------ */
/* Registry of servers of this process (for atexit cleanup and the port reservations).         */

typedef struct ts_reg {
    int used;
    pid_t owner;       /* process that started it; only that process cleans it up at exit */
    pid_t pid;         /* redis-server pid, 0 when not running */
    int resv[2];       /* reservation sockets: port and (cluster) bus port, -1 if none */
    char dir[256];
} ts_reg_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ts_reg_t g_reg[TS_MAX_SERVERS];
static pid_t g_atexit_pid;     /* atexit registered (inherited by fork: the handler checks owner) */
static pid_t g_swept_pid;      /* stale dirs swept by this process */
static pid_t g_rng_pid;
static uint64_t g_rng;
static atomic_uint g_prefix_counter;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *dir)
{
    if (!dir[0])
        return;
    for (int i = 0; i < 20; i++) {
        nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
        struct stat st;
        if (lstat(dir, &st) == -1 && errno == ENOENT)
            return;
        sleep_ms(10);  /* a dying fork child of redis may still be creating a file */
    }
}

static void close_resv(ts_reg_t *r)
{
    for (int i = 0; i < 2; i++) {
        if (r->resv[i] >= 0)
            close(r->resv[i]);
        r->resv[i] = -1;
    }
}

/* SIGKILL the process group (redis and its fork children) and reap the leader. */
static void kill_and_reap(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) == -1 && errno == EINTR) {
    }
}

static void atexit_cleanup(void)
{
    int locked = pthread_mutex_trylock(&g_lock) == 0;
    pid_t me = getpid();
    for (int i = 0; i < TS_MAX_SERVERS; i++) {
        ts_reg_t *r = &g_reg[i];
        if (!r->used || r->owner != me)
            continue;
        kill_and_reap(r->pid);
        rm_rf(r->dir);
        close_resv(r);
        r->used = 0;
    }
    if (locked)
        pthread_mutex_unlock(&g_lock);
}

/* Removes TMPDIR/ts-redis.<pid>.* dirs whose creating process no longer exists (leaked by a
 * test process that was killed). Called with g_lock held. */
static void sweep_stale_dirs(const char *base)
{
    DIR *d = opendir(base);
    if (!d)
        return;
    struct dirent *e;
    size_t plen = strlen(TS_DIR_PREFIX);
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, TS_DIR_PREFIX, plen) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (pid <= 0 || *end != '.' || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", base, e->d_name) >= (int)sizeof path)
            continue;
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid())
            rm_rf(path);
    }
    closedir(d);
}

static const char *tmp_base(void)
{
    const char *t = getenv("TMPDIR");
    return (t && t[0] == '/' && strlen(t) < 160) ? t : "/tmp";
}

/* ------------------------------------------------------------------------------------------ */
/* Ports                                                                                       */

static uint64_t rng_next(void)   /* splitmix64; call with g_lock held */
{
    if (g_rng_pid != getpid()) {          /* reseed after fork */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        g_rng_pid = getpid();
        g_rng ^= ((uint64_t)g_rng_pid << 32) ^ (uint64_t)ts.tv_nsec ^
                 ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)&ts;
    }
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Candidate range: TS_PORT_MIN..TS_PORT_MAX minus the kernel's ephemeral range when that leaves
 * a reasonable number of ports (on Debian: 20000..32767). */
static void port_range(int *lo, int *hi)
{
    *lo = TS_PORT_MIN;
    *hi = TS_PORT_MAX;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    int elo, ehi;
    if (f) {
        if (fscanf(f, "%d %d", &elo, &ehi) == 2) {
            if (elo - 1 - TS_PORT_MIN >= 2000) {
                *hi = elo - 1 < TS_PORT_MAX ? elo - 1 : TS_PORT_MAX;
            } else if (TS_PORT_MAX - (ehi + 1) >= 2000) {
                *lo = ehi + 1 > TS_PORT_MIN ? ehi + 1 : TS_PORT_MIN;
            }
        }
        fclose(f);
    }
}

/* Binds 127.0.0.1:port without SO_REUSEADDR (fails if anything holds the port, TIME_WAIT and
 * other reservations included), then sets SO_REUSEADDR so that redis-server (which binds with
 * SO_REUSEADDR) can listen on it while we keep it bound and not listening. fd or -1. */
static int reserve_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int wants_cluster(char *const *args, int nargs)
{
    int on = 0;
    for (int i = 0; i + 1 < nargs; i++)
        if (strcmp(args[i], "--cluster-enabled") == 0)
            on = strcmp(args[i + 1], "yes") == 0;
    return on;
}

/* Picks and reserves a port (and its bus port if cluster). Called with g_lock held. */
static int pick_port(ts_reg_t *r, int cluster)
{
    int lo, hi;
    port_range(&lo, &hi);
    for (int i = 0; i < 1000; i++) {
        int port = lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
        int fd = reserve_port(port);
        if (fd < 0)
            continue;
        int bus = -1;
        if (cluster && (bus = reserve_port(port + 10000)) < 0) {
            close(fd);
            continue;
        }
        r->resv[0] = fd;
        r->resv[1] = bus;
        return port;
    }
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Spawning                                                                                    */

static int find_redis_server(char *out, size_t len)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t n = colon ? (size_t)(colon - path) : strlen(path);
        if (n > 0 && snprintf(out, len, "%.*s/redis-server", (int)n, path) < (int)len &&
            access(out, X_OK) == 0)
            return 0;
        path += n + (colon ? 1 : 0);
    }
    return -1;
}

/* Forks and execs redis-server for s (port and dir set). Returns the pid or -1. Everything the
 * child needs is prepared before fork: the child only makes async-signal-safe calls. */
static pid_t spawn(const ts_server_t *s)
{
    char exe[PATH_MAX];
    int have_exe = find_redis_server(exe, sizeof exe) == 0;
    char port[16], logpath[300];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(logpath, sizeof logpath, "%s/redis.log", s->dir);

    const char *argv[64];
    int n = 0;
    argv[n++] = "redis-server";
    argv[n++] = "--port"; argv[n++] = port;
    argv[n++] = "--bind"; argv[n++] = TS_HOST;
    argv[n++] = "--save"; argv[n++] = "";
    argv[n++] = "--appendonly"; argv[n++] = "no";
    argv[n++] = "--dir"; argv[n++] = s->dir;
    argv[n++] = "--daemonize"; argv[n++] = "no";
    char aclpath[300];
    if (ts_acl_mode() && ts_acl_write_file(s, aclpath, sizeof aclpath) == 0) {
        argv[n++] = "--aclfile";
        argv[n++] = aclpath;
    }
    argv[n++] = "--protected-mode"; argv[n++] = "no";
    argv[n++] = "--logfile"; argv[n++] = logpath;
    argv[n++] = "--enable-debug-command"; argv[n++] = "local";
    for (int i = 0; i < s->nargs; i++)
        argv[n++] = s->args[i];
    argv[n] = NULL;

    long maxfd = sysconf(_SC_OPEN_MAX);
    if (maxfd < 0 || maxfd > 1L << 20)
        maxfd = 1L << 20;
    pid_t parent = getpid();

    pid_t pid = fork();
    if (pid != 0)
        return pid < 0 ? -1 : pid;

    /* child */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(126);   /* the forking thread may already be gone */
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0 && in != 0)
        dup2(in, 0);
    int out = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out < 0)
        out = open("/dev/null", O_WRONLY);
    if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
    }
    int closed = -1;
#ifdef SYS_close_range
    closed = (int)syscall(SYS_close_range, 3U, ~0U, 0U);
#endif
    if (closed != 0)
        for (long fd = 3; fd < maxfd; fd++)
            close((int)fd);
    if (have_exe)
        execv(exe, (char *const *)argv);
    execvp("redis-server", (char *const *)argv);
    _exit(127);
}

/* Returns 1 if the server on s->port answers PING with PONG and INFO reports process_id == pid;
 * 0 if not (yet). */
static int server_is_ours(int port, pid_t pid)
{
    struct timeval tv = { 0, 250000 };
    redisContext *c = redisConnectWithTimeout(TS_HOST, port, tv);
    if (!c)
        return 0;
    int ok = 0;
    if (!c->err) {
        struct timeval io = { 1, 0 };
        redisSetTimeout(c, io);
        redisReply *r = redisCommand(c, "PING");
        int pong = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
        if (r)
            freeReplyObject(r);
        if (pong && (r = redisCommand(c, "INFO server")) != NULL) {
            if (r->type == REDIS_REPLY_STRING) {
                const char *p = strstr(r->str, "\nprocess_id:");
                ok = p && strtol(p + 12, NULL, 10) == (long)pid;
            }
            freeReplyObject(r);
        }
    }
    redisFree(c);
    return ok;
}

enum { READY_OK = 0, READY_EXITED = -1, READY_TIMEOUT = -2 };

/* Waits until our pid serves PONG on the port, the child exits, or the deadline passes. On
 * anything but READY_OK the child has been killed and reaped; *status gets its wait status
 * (or -1). */
static int wait_ready(const ts_server_t *s, long long deadline, int *status)
{
    *status = -1;
    for (;;) {
        int st;
        pid_t w = waitpid(s->pid, &st, WNOHANG);
        if (w == s->pid) {
            *status = st;
            return READY_EXITED;
        }
        if (server_is_ours(s->port, s->pid))
            return READY_OK;
        if (now_ms() >= deadline) {
            kill_and_reap(s->pid);
            return READY_TIMEOUT;
        }
        sleep_ms(10);
    }
}

/* Fatal config errors are printed by redis-server to stderr, which goes to the log. */
static int log_has_config_error(const char *dir, long from)
{
    char path[300], buf[4096];
    snprintf(path, sizeof path, "%s/redis.log", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    fseek(f, from, SEEK_SET);
    int found = 0;
    while (!found && fgets(buf, sizeof buf, f))
        found = strstr(buf, "FATAL CONFIG FILE ERROR") != NULL;
    fclose(f);
    return found;
}

static long log_size(const char *dir)
{
    char path[300];
    snprintf(path, sizeof path, "%s/redis.log", dir);
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : 0;
}

static void print_log_tail(const char *dir)
{
    char path[300];
    snprintf(path, sizeof path, "%s/redis.log", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char lines[8][512];
    int n = 0;
    char buf[512];
    while (fgets(buf, sizeof buf, f)) {
        memcpy(lines[n % 8], buf, sizeof buf);
        n++;
    }
    fclose(f);
    for (int i = n > 8 ? n - 8 : 0; i < n; i++)
        fprintf(stderr, "  | %s", lines[i % 8]);
}

static ts_reg_t *reg_find(const char *dir)   /* g_lock held */
{
    if (!dir[0])
        return NULL;
    for (int i = 0; i < TS_MAX_SERVERS; i++)
        if (g_reg[i].used && strcmp(g_reg[i].dir, dir) == 0)
            return &g_reg[i];
    return NULL;
}

static void reg_set_pid(const ts_server_t *s)
{
    pthread_mutex_lock(&g_lock);
    ts_reg_t *r = reg_find(s->dir);
    if (r)
        r->pid = s->pid;
    pthread_mutex_unlock(&g_lock);
}

static void free_args(ts_server_t *s)
{
    for (int i = 0; i < s->nargs && i < 32; i++)
        free(s->args[i]);
    memset(s->args, 0, sizeof s->args);
    s->nargs = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* API                                                                                         */

int ts_server_startv(ts_server_t *s, const char *const *args)
{
    memset(s, 0, sizeof *s);
    int n = 0;
    while (args && args[n])
        n++;
    if (n > TS_MAX_EXTRA) {
        fprintf(stderr, "ts_server_start: too many extra args (%d > %d)\n", n, TS_MAX_EXTRA);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (!(s->args[i] = strdup(args[i]))) {
            free_args(s);
            return -1;
        }
        s->nargs = i + 1;
    }
    int cluster = wants_cluster(s->args, s->nargs);

    /* Slot in the registry, stale-dir sweep, atexit, temp dir. */
    pthread_mutex_lock(&g_lock);
    pid_t me = getpid();
    ts_reg_t *r = NULL;
    for (int i = 0; i < TS_MAX_SERVERS && !r; i++) {
        if (g_reg[i].used && g_reg[i].owner != me) {
            /* inherited from the process we were forked from: not ours to clean up */
            close_resv(&g_reg[i]);
            g_reg[i].used = 0;
        }
        if (!g_reg[i].used)
            r = &g_reg[i];
    }
    if (!r) {
        pthread_mutex_unlock(&g_lock);
        fprintf(stderr, "ts_server_start: more than %d servers in one process\n",
                TS_MAX_SERVERS);
        free_args(s);
        return -1;
    }
    memset(r, 0, sizeof *r);
    r->used = 1;
    r->owner = me;
    r->resv[0] = r->resv[1] = -1;
    if (g_atexit_pid == 0) {
        g_atexit_pid = me;
        atexit(atexit_cleanup);
    }
    const char *base = tmp_base();
    if (g_swept_pid != me) {
        g_swept_pid = me;
        sweep_stale_dirs(base);
    }
    snprintf(s->dir, sizeof s->dir, "%s/%s%ld.XXXXXX", base, TS_DIR_PREFIX, (long)me);
    if (!mkdtemp(s->dir)) {
        fprintf(stderr, "ts_server_start: mkdtemp %s: %s\n", s->dir, strerror(errno));
        r->used = 0;
        pthread_mutex_unlock(&g_lock);
        free_args(s);
        memset(s, 0, sizeof *s);
        return -1;
    }
    memcpy(r->dir, s->dir, sizeof r->dir);
    pthread_mutex_unlock(&g_lock);

    const char *why = "no free port";
    for (int attempt = 0; attempt < TS_START_ATTEMPTS; attempt++) {
        pthread_mutex_lock(&g_lock);
        s->port = pick_port(r, cluster);
        pthread_mutex_unlock(&g_lock);
        if (s->port < 0)
            break;
        snprintf(s->url, sizeof s->url, "redis://%s%s:%d", ts_acl_userinfo(), TS_HOST,
                 s->port);
        long logpos = log_size(s->dir);
        pid_t pid = spawn(s);
        if (pid < 0) {
            why = "fork failed";
            break;
        }
        s->pid = pid;
        reg_set_pid(s);
        int st;
        int rc = wait_ready(s, now_ms() + TS_READY_MS, &st);
        if (rc == READY_OK)
            return 0;
        s->pid = 0;
        reg_set_pid(s);
        pthread_mutex_lock(&g_lock);
        close_resv(r);
        pthread_mutex_unlock(&g_lock);
        why = rc == READY_TIMEOUT ? "no PONG in time" : "redis-server exited";
        if (rc == READY_EXITED && WIFEXITED(st) &&
            (WEXITSTATUS(st) == 127 || WEXITSTATUS(st) == 126)) {
            why = WEXITSTATUS(st) == 127 ? "cannot exec redis-server" : "parent gone";
            break;
        }
        if (rc == READY_EXITED && log_has_config_error(s->dir, logpos)) {
            why = "config error";
            break;
        }
    }
    fprintf(stderr, "ts_server_start: failed (%s); end of %s/redis.log:\n", why, s->dir);
    print_log_tail(s->dir);
    ts_server_stop(s);
    memset(s, 0, sizeof *s);
    return -1;
}

int ts_server_start(ts_server_t *s, ...)
{
    const char *args[TS_MAX_EXTRA + 2];
    int n = 0, too_many = 0;
    va_list ap;
    va_start(ap, s);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL) {
        if (n < TS_MAX_EXTRA + 1)
            args[n++] = a;
        else
            too_many = 1;
    }
    va_end(ap);
    args[n] = NULL;
    if (too_many) {
        memset(s, 0, sizeof *s);
        fprintf(stderr, "ts_server_start: too many extra args\n");
        return -1;
    }
    return ts_server_startv(s, args);
}

int ts_reserve_port(int bus)
{
    ts_reg_t r;
    memset(&r, 0, sizeof r);
    pthread_mutex_lock(&g_lock);
    int port = pick_port(&r, bus);
    pthread_mutex_unlock(&g_lock);
    /* the socket stays open (close-on-exec) until the process exits */
    return port;
}

void ts_server_kill(ts_server_t *s)
{
    if (s->pid <= 0)
        return;
    kill_and_reap(s->pid);
    s->pid = 0;
    reg_set_pid(s);
}

int ts_server_restart(ts_server_t *s)
{
    if (!s->dir[0] || s->port <= 0)
        return -1;
    ts_server_kill(s);
    long long deadline = now_ms() + TS_RESTART_MS;
    const char *why = "timeout";
    while (now_ms() < deadline) {
        long logpos = log_size(s->dir);
        pid_t pid = spawn(s);
        if (pid < 0) {
            why = "fork failed";
            sleep_ms(100);
            continue;
        }
        s->pid = pid;
        reg_set_pid(s);
        int st;
        int rc = wait_ready(s, deadline, &st);
        if (rc == READY_OK)
            return 0;
        s->pid = 0;
        reg_set_pid(s);
        why = rc == READY_TIMEOUT ? "no PONG in time" : "redis-server exited";
        if (rc == READY_EXITED && WIFEXITED(st) && WEXITSTATUS(st) == 127) {
            why = "cannot exec redis-server";
            break;
        }
        if (rc == READY_EXITED && log_has_config_error(s->dir, logpos)) {
            why = "config error";
            break;
        }
        sleep_ms(100);
    }
    fprintf(stderr, "ts_server_restart: port %d failed (%s); end of %s/redis.log:\n", s->port,
            why, s->dir);
    print_log_tail(s->dir);
    return -1;
}

void ts_server_stop(ts_server_t *s)
{
    if (s->pid > 0)
        kill_and_reap(s->pid);
    s->pid = 0;
    if (s->dir[0]) {
        rm_rf(s->dir);
        pthread_mutex_lock(&g_lock);
        ts_reg_t *r = reg_find(s->dir);
        if (r) {
            close_resv(r);
            r->used = 0;
        }
        pthread_mutex_unlock(&g_lock);
    }
    free_args(s);
    s->dir[0] = '\0';
    s->url[0] = '\0';
    s->port = 0;
}

static char proc_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

void ts_server_pause(ts_server_t *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGSTOP);
    long long deadline = now_ms() + 1000;
    for (;;) {
        char st = proc_state(s->pid);
        if (st == 'T' || st == 't' || st == 0 || now_ms() >= deadline)
            break;
        sleep_ms(1);
    }
}

void ts_server_resume(ts_server_t *s)
{
    if (s->pid > 0)
        kill(s->pid, SIGCONT);
}

const char *ts_unique_prefix(char *buf, size_t len)
{
    unsigned n = atomic_fetch_add(&g_prefix_counter, 1) + 1;
    if (len > 0)
        snprintf(buf, len, "t%ldx%u", (long)getpid(), n);
    return buf;
}

char *ts_cluster_url(char *url, size_t len, const ts_server_t *node)
{
    snprintf(url, len, "redis-cluster://%s%s:%d", ts_deploy_userinfo(), TS_HOST, node->port);
    return url;
}

char *ts_redlock_url(char *url, size_t len, const ts_server_t *s, int n)
{
    int w = snprintf(url, len, "redlock://%s", ts_acl_userinfo());
    for (int i = 0; i < n && w >= 0 && (size_t)w < len; i++)
        w += snprintf(url + w, len - (size_t)w, "%s%s:%d", i ? "," : "", TS_HOST, s[i].port);
    return url;
}
