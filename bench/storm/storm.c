/*
 * storm.c - many processes waiting on one primitive: handoff latency, Redis commands per
 * acquisition and fairness, for redisync's blocking primitives, a raw FIFO lock that shows the
 * floor (bench/storm/impls.c), and (with --peers) redis-py's Lock, node redlock and node
 * redis-semaphore, all on the same redis-server.
 *
 *   build/redisync-storm [--peers DIR] [--procs "2 8 32 128"] [--seconds 3]
 *                        [--monitor-seconds 1] [--work-us 50] [--out DIR] [--only a,b]
 *
 * `make bench` runs it for the redisync primitives, `make bench-peers` with --peers
 * bench/peers; bench/README.md says what each column means and how it is measured.
 *
 * One row = one implementation x N worker processes, each with its own client, looping
 *   t0 = now; lock; t1 = now; spin WORK_US; t2 = now; unlock; t3 = now
 * on one primitive. Workers are forked (redisync) or exec'd (peers) and driven through a
 * line protocol on their stdin/stdout, so every implementation runs the same storm:
 *
 *   worker -> driver   "ready" once connected and warmed up (one lock/unlock)
 *                      "done N FAILS" after a phase; its records are in its file then
 *                      "error TEXT" (the row fails)
 *   driver -> worker   "go START END WORK_US" (CLOCK_MONOTONIC ns): wait until START, loop
 *                      while now < END, write one line "t0 t1 t2 t3" per acquisition to the
 *                      file (rewritten each phase), answer "done"
 *                      "quit"
 *
 * Each row has two phases with the same workers: a timed one (no MONITOR: throughput,
 * handoff latency, fairness) and a counted one under MONITOR (commands per acquisition),
 * because MONITOR makes Redis format every command, the scripts' own included, and slows
 * the storm. The unit of latency is the raw round trip (EVALSHA of "return 1" on a plain
 * connection): 2000 are measured by the driver just before each row, with the workers
 * connected and idle, and the unit is the median of all of them.
 *
 * Exit status: 0 whatever the figures (it is a benchmark), 1 when something failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "redis_server.h"
#include "redisync.h"
#include "storm.h"

#define MAX_PROCS 512
#define RTT_OPS 2000
#define RTT_WARMUP 200
#define READY_TIMEOUT_S 180 /* 128 node processes on 2 CPUs take a while to start */
#define DONE_GRACE_S 60     /* after END: waiters still queued finish their turn */

#define TARGET_HANDOFF 3.0  /* median handoff latency, raw round trips */
#define TARGET_CMDS 2.5     /* commands per acquisition at 8 and 32 processes */
#define TARGET_FAIR 0.5     /* min / max acquisitions per process */

static int g_errors;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("storm: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    g_errors++;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000ull), (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* q-quantile of v[0..n) (sorted in place), or 0 */
static uint64_t quantile(uint64_t *v, size_t n, double q)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

/* ===== the worker side (forked, redisync) ============================================== */

typedef struct rec {
    uint64_t t0, t1, t2, t3;
    int w;
} rec_t;

/* Reads one line from fd into buf (without the newline). 0, or -1 at EOF/error. */
static int read_line(int fd, char *buf, size_t len)
{
    size_t n = 0;
    for (;;) {
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        if (ch == '\n')
            break;
        if (n + 1 < len)
            buf[n++] = ch;
    }
    buf[n] = '\0';
    return 0;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t w = write(1, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        off += (int)w;
    }
}

/* A forked redisync worker: stdin/stdout are the protocol pipes. Returns the exit status. */
static int c_worker(const storm_impl_t *im, const char *url, const char *name, const char *file)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *c = NULL;
    void *h = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        say("error rs_client_open: %s (%s)", rs_strerror(rc), rs_client_lasterror(NULL));
        return 1;
    }
    if ((rc = im->c->init(&h, c, url, name)) != 0) {
        say("error init: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        rs_client_close(c);
        return 1;
    }
    /* warm-up: starts the subscriber, loads the script on this client's connections */
    if ((rc = im->c->lock(h)) != 0 || (rc = im->c->unlock(h)) != 0) {
        say("error warm-up lock/unlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        rs_client_close(c);
        return 1;
    }
    say("ready");

    size_t cap = 4096, n = 0;
    rec_t *r = malloc(cap * sizeof *r);
    char line[256];
    int status = 0;
    while (r && read_line(0, line, sizeof line) == 0) {
        unsigned long long start, end;
        unsigned work_us;
        if (strcmp(line, "quit") == 0)
            break;
        if (sscanf(line, "go %llu %llu %u", &start, &end, &work_us) != 3) {
            say("error bad command \"%s\"", line);
            status = 1;
            break;
        }
        n = 0;
        sleep_until(start);
        int err = 0;
        while (now_ns() < end) {
            rec_t x;
            x.t0 = now_ns();
            if ((rc = im->c->lock(h)) != 0) {
                say("error lock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
                err = 1;
                break;
            }
            x.t1 = now_ns();
            while (now_ns() - x.t1 < (uint64_t)work_us * 1000u) {
            }
            x.t2 = now_ns();
            if ((rc = im->c->unlock(h)) != 0) {
                say("error unlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
                err = 1;
                break;
            }
            x.t3 = now_ns();
            if (n == cap) {
                rec_t *nr = realloc(r, 2 * cap * sizeof *r);
                if (!nr) {
                    say("error out of memory");
                    err = 1;
                    break;
                }
                r = nr;
                cap *= 2;
            }
            r[n++] = x;
        }
        if (err) {
            status = 1;
            break;
        }
        FILE *f = fopen(file, "w");
        if (!f) {
            say("error %s: %s", file, strerror(errno));
            status = 1;
            break;
        }
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%llu %llu %llu %llu\n", (unsigned long long)r[i].t0,
                    (unsigned long long)r[i].t1, (unsigned long long)r[i].t2,
                    (unsigned long long)r[i].t3);
        if (fclose(f) != 0) {
            say("error %s: %s", file, strerror(errno));
            status = 1;
            break;
        }
        say("done %zu 0", n);
    }
    free(r);
    im->c->destroy(h);
    rs_client_close(c);
    return status;
}

/* ===== the driver ======================================================================= */

typedef struct worker {
    pid_t pid;
    int to;           /* its stdin */
    int from;         /* its stdout */
    char buf[1024];
    size_t blen;
    char line[1024];  /* last complete line */
    int have_line;
    int eof;
    char file[PATH_MAX];
    long fails;       /* failed acquisitions (peers giving up), per phase */
} worker_t;

typedef struct opts {
    const char *peers_dir;   /* NULL: redisync only */
    int procs[16], nprocs;
    double seconds, monitor_seconds;
    unsigned work_us;
    const char *out_dir;
    const char *only;        /* comma-separated impl keys, or NULL */
} opts_t;

typedef struct row {
    const storm_impl_t *im;
    int procs;
    int ok;
    char why[256];
    double rtt_us, rtt99_us, rtt_load_us; /* measured just before the row; during it */
    /* timed phase */
    double seconds;
    long acq;            /* lock returns inside [START, END) */
    double acq_per_s;
    long min_w, max_w;
    size_t handoffs;     /* acquisitions that were a handoff to a blocked waiter */
    double ho50_us, ho99_us;
    double unlock50_us;  /* the holder's unlock call, t3 - t2 */
    double wait50_ms, wait99_ms; /* lock call to lock return, t1 - t0 */
    double script_us;    /* server time per EVALSHA of the workers (INFO commandstats) */
    long violations;     /* two holders at once */
    long fails;
    /* counted phase */
    long mon_acq, mon_cmds, mon_inner, mon_fails;
    char mon_names[256];
} row_t;

/* ----- plain hiredis ------------------------------------------------------------------- */
static redisContext *raw_connect(const ts_server_t *srv)
{
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", srv->port, tv);
    if (!c || c->err) {
        fail("connect to 127.0.0.1:%d: %s", srv->port, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    redisSetTimeout(c, tv);
    return c;
}

/* "127.0.0.1:PORT" of our end of c, as MONITOR names the client */
static void local_addr(redisContext *c, char *out, size_t len)
{
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    out[0] = '\0';
    if (getsockname(c->fd, (struct sockaddr *)&a, &al) == 0) {
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
        snprintf(out, len, "%s:%u", ip, ntohs(a.sin_port));
    }
}

static char g_one_sha[41];

/* calls and usec of EVALSHA so far (INFO commandstats), or -1 */
static int evalsha_stats(redisContext *c, long long *calls, long long *usec)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    int ok = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "cmdstat_evalsha:");
        ok = p && sscanf(p, "cmdstat_evalsha:calls=%lld,usec=%lld", calls, usec) == 2;
        if (!p) {
            *calls = *usec = 0;
            ok = 1;
        }
    }
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int rtt_once(redisContext *c)
{
    redisReply *r = redisCommand(c, "EVALSHA %s 0", g_one_sha);
    int ok = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (!ok)
        fail("EVALSHA return 1: %s", r ? (r->type == REDIS_REPLY_ERROR ? r->str : "odd reply")
                                       : c->errstr);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Median and p99 of RTT_OPS round trips, in us. */
static int rtt_sample(redisContext *c, double *p50, double *p99, uint64_t *keep)
{
    static uint64_t v[RTT_OPS];
    for (int i = 0; i < RTT_WARMUP; i++)
        if (rtt_once(c))
            return -1;
    for (int i = 0; i < RTT_OPS; i++) {
        uint64_t t = now_ns();
        if (rtt_once(c))
            return -1;
        v[i] = now_ns() - t;
    }
    memcpy(keep, v, sizeof v);
    *p50 = (double)quantile(v, RTT_OPS, 0.5) / 1e3;
    *p99 = (double)quantile(v, RTT_OPS, 0.99) / 1e3;
    return 0;
}

/* The raw round trip just before a row: median and p99 of RTT_OPS calls, and the samples
 * themselves (for the run's unit, the median of every row's samples). */
static uint64_t *g_rtt_all;
static size_t g_rtt_n;
static double g_unit_us; /* the run's raw round trip: the unit of every latency ratio */

static int rtt_measure(redisContext *c, double *p50, double *p99)
{
    uint64_t *nv = realloc(g_rtt_all, (g_rtt_n + RTT_OPS) * sizeof *nv);
    if (!nv)
        return -1;
    g_rtt_all = nv;
    if (rtt_sample(c, p50, p99, g_rtt_all + g_rtt_n))
        return -1;
    g_rtt_n += RTT_OPS;
    return 0;
}

/* ----- MONITOR ------------------------------------------------------------------------- */
#define MON_NAMES 12
typedef struct monitor {
    redisContext *c;
    char marker[64];       /* the driver's marker connection, "127.0.0.1:PORT" */
    pthread_t th;
    int started, ended, err;
    long counted, inner;
    int nn;
    char name[MON_NAMES][24];
    long cnt[MON_NAMES];
} monitor_t;

/* One MONITOR line: 1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "..." ...
 * Lines of commands run by scripts read [0 lua]. */
static void monitor_line(monitor_t *m, const char *s)
{
    const char *lb = strchr(s, '['), *rb = lb ? strchr(lb, ']') : NULL;
    if (!lb || !rb)
        return;
    const char *sp = memchr(lb, ' ', (size_t)(rb - lb));
    const char *addr = sp ? sp + 1 : lb + 1;
    size_t alen = (size_t)(rb - addr);
    int from_marker = alen == strlen(m->marker) && memcmp(addr, m->marker, alen) == 0;
    if (!m->started) {
        if (from_marker && strstr(rb, "\"rs-storm-start\""))
            m->started = 1;
        return;
    }
    if (from_marker) {
        if (strstr(rb, "\"rs-storm-end\""))
            m->ended = 1;
        return;
    }
    if (alen == 3 && memcmp(addr, "lua", 3) == 0) {
        m->inner++;
        return;
    }
    m->counted++;
    /* tally by command name */
    const char *q = strchr(rb, '"');
    if (!q)
        return;
    q++;
    size_t nl = strcspn(q, "\"");
    char nm[24];
    if (nl >= sizeof nm)
        nl = sizeof nm - 1;
    for (size_t i = 0; i < nl; i++)
        nm[i] = (char)(q[i] >= 'a' && q[i] <= 'z' ? q[i] - 32 : q[i]);
    nm[nl] = '\0';
    for (int i = 0; i < m->nn; i++)
        if (strcmp(m->name[i], nm) == 0) {
            m->cnt[i]++;
            return;
        }
    if (m->nn < MON_NAMES - 1) {
        snprintf(m->name[m->nn], sizeof m->name[0], "%s", nm);
        m->cnt[m->nn++] = 1;
        return;
    }
    if (m->nn == MON_NAMES - 1)
        snprintf(m->name[m->nn++], sizeof m->name[0], "(other)");
    m->cnt[MON_NAMES - 1]++;
}

static void *monitor_main(void *arg)
{
    monitor_t *m = arg;
    while (!m->ended) {
        void *v = NULL;
        if (redisGetReply(m->c, &v) != REDIS_OK || !v) {
            m->err = 1;
            break;
        }
        redisReply *r = v;
        if (r->type == REDIS_REPLY_STATUS)
            monitor_line(m, r->str);
        freeReplyObject(r);
    }
    return NULL;
}

static int marker(redisContext *c, const char *word)
{
    redisReply *r = redisCommand(c, "ECHO %s", word);
    int ok = r && r->type == REDIS_REPLY_STRING;
    if (r)
        freeReplyObject(r);
    if (!ok)
        fail("ECHO %s: %s", word, c->errstr);
    return ok ? 0 : -1;
}

/* ----- workers ------------------------------------------------------------------------- */
static char *subst(const char *arg, const char *peers)
{
    const char *p = strstr(arg, "@PEERS@");
    char *out;
    if (!p)
        return strdup(arg);
    if (asprintf(&out, "%.*s%s%s", (int)(p - arg), arg, peers ? peers : ".", p + 7) < 0)
        return NULL;
    return out;
}

static int spawn(worker_t *w, const storm_impl_t *im, const opts_t *o, const ts_server_t *srv,
                 const char *name, const char *dir, int idx)
{
    int to[2], from[2];
    snprintf(w->file, sizeof w->file, "%s/w%d.rec", dir, idx);
    if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC)) {
        fail("pipe: %s", strerror(errno));
        return -1;
    }
    /* exec's argv, built before fork */
    char *argv[STORM_ARGV_MAX + 8] = {NULL};
    char port[16];
    snprintf(port, sizeof port, "%d", srv->port);
    int n = 0;
    if (!im->c) {
        for (int i = 0; i < STORM_ARGV_MAX && im->argv[i]; i++)
            argv[n++] = subst(im->argv[i], o->peers_dir);
        argv[n++] = "--port";
        argv[n++] = port;
        argv[n++] = "--key";
        argv[n++] = (char *)name;
        argv[n++] = "--out";
        argv[n++] = w->file;
        argv[n] = NULL;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fail("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_DFL);
        dup2(to[0], 0);
        dup2(from[1], 1);
        /* nothing else of the driver's: other workers' pipes would keep their EOF away */
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        if (im->c)
            _exit(c_worker(im, srv->url, name, w->file));
        execvp(argv[0], argv);
        say("error cannot run %s: %s", argv[0], strerror(errno));
        _exit(127);
    }
    for (int i = 0; i < STORM_ARGV_MAX && !im->c && im->argv[i]; i++)
        free(argv[i]);
    close(to[0]);
    close(from[1]);
    w->pid = pid;
    w->to = to[1];
    w->from = from[0];
    w->blen = 0;
    w->have_line = 0;
    w->eof = 0;
    return 0;
}

static void send_all(worker_t *ws, int n, const char *line)
{
    size_t len = strlen(line);
    for (int i = 0; i < n; i++)
        if (write(ws[i].to, line, len) != (ssize_t)len)
            ws[i].eof = 1;
}

/* Waits until every worker has sent a line starting with `want`. Lines "error ..." and
 * workers that exit fail the wait. 0, or -1 with why set. */
static int wait_all(worker_t *ws, int n, const char *want, uint64_t deadline, char *why,
                    size_t whylen)
{
    for (int i = 0; i < n; i++)
        ws[i].have_line = 0;
    int pending = n;
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    int *idx = calloc((size_t)n, sizeof *idx);
    if (!pf || !idx) {
        free(pf);
        free(idx);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    int rc = 0;
    while (pending > 0) {
        int np = 0;
        for (int i = 0; i < n; i++)
            if (!ws[i].have_line) {
                pf[np].fd = ws[i].from;
                pf[np].events = POLLIN;
                idx[np++] = i;
            }
        uint64_t now = now_ns();
        if (now >= deadline) {
            snprintf(why, whylen, "%d of %d workers did not answer \"%s\" in time", pending, n,
                     want);
            rc = -1;
            break;
        }
        int left_ms = (int)((deadline - now) / 1000000u) + 1;
        int pr = poll(pf, (nfds_t)np, left_ms > 1000 ? 1000 : left_ms);
        if (pr < 0 && errno != EINTR) {
            snprintf(why, whylen, "poll: %s", strerror(errno));
            rc = -1;
            break;
        }
        for (int k = 0; k < np && pr > 0; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            worker_t *w = &ws[idx[k]];
            ssize_t r = read(w->from, w->buf + w->blen, sizeof w->buf - 1 - w->blen);
            if (r <= 0) {
                snprintf(why, whylen, "worker %d (pid %d) exited before \"%s\"", idx[k],
                         (int)w->pid, want);
                w->eof = 1;
                rc = -1;
                goto out;
            }
            w->blen += (size_t)r;
            w->buf[w->blen] = '\0';
            char *nl;
            while (!w->have_line && (nl = strchr(w->buf, '\n')) != NULL) {
                *nl = '\0';
                snprintf(w->line, sizeof w->line, "%s", w->buf);
                size_t used = (size_t)(nl + 1 - w->buf);
                memmove(w->buf, nl + 1, w->blen - used + 1);
                w->blen -= used;
                if (strncmp(w->line, "error", 5) == 0) {
                    snprintf(why, whylen, "worker %d: %.200s", idx[k], w->line);
                    rc = -1;
                    goto out;
                }
                if (strncmp(w->line, want, strlen(want)) == 0) {
                    w->have_line = 1;
                    pending--;
                }
                /* anything else: ignored (a peer's stray output) */
            }
            if (w->blen == sizeof w->buf - 1)
                w->blen = 0; /* a line too long to be ours */
        }
    }
out:
    free(pf);
    free(idx);
    return rc;
}

static void stop_workers(worker_t *ws, int n)
{
    send_all(ws, n, "quit\n");
    for (int i = 0; i < n; i++) {
        close(ws[i].to);
        ws[i].to = -1;
    }
    uint64_t deadline = now_ns() + 10ull * 1000000000ull;
    for (int i = 0; i < n; i++) {
        if (ws[i].pid <= 0)
            continue;
        int st;
        while (waitpid(ws[i].pid, &st, WNOHANG) == 0) {
            if (now_ns() > deadline) {
                kill(ws[i].pid, SIGKILL);
                waitpid(ws[i].pid, &st, 0);
                break;
            }
            usleep(10000);
        }
        close(ws[i].from);
        ws[i].pid = 0;
    }
}

/* Reads every worker's records of the phase just done. */
static rec_t *load_records(worker_t *ws, int n, size_t *count, char *why, size_t whylen)
{
    size_t cap = 1024, k = 0;
    rec_t *r = malloc(cap * sizeof *r);
    for (int i = 0; r && i < n; i++) {
        unsigned long long dn = 0;
        long fails = 0;
        sscanf(ws[i].line, "done %llu %ld", &dn, &fails);
        ws[i].fails = fails;
        FILE *f = fopen(ws[i].file, "r");
        if (!f) {
            if (dn == 0)
                continue;
            snprintf(why, whylen, "%s: %s", ws[i].file, strerror(errno));
            free(r);
            return NULL;
        }
        unsigned long long a, b, c, d;
        size_t got = 0;
        while (fscanf(f, "%llu %llu %llu %llu", &a, &b, &c, &d) == 4) {
            if (k == cap) {
                rec_t *nr = realloc(r, 2 * cap * sizeof *r);
                if (!nr) {
                    free(r);
                    fclose(f);
                    snprintf(why, whylen, "out of memory");
                    return NULL;
                }
                r = nr;
                cap *= 2;
            }
            r[k++] = (rec_t){a, b, c, d, i};
            got++;
        }
        fclose(f);
        if (got != dn) {
            snprintf(why, whylen, "worker %d said %llu acquisitions, its file has %zu", i, dn, got);
            free(r);
            return NULL;
        }
    }
    if (!r)
        snprintf(why, whylen, "out of memory");
    *count = k;
    return r;
}

static int cmp_rec_t1(const void *a, const void *b)
{
    const rec_t *x = a, *y = b;
    return x->t1 < y->t1 ? -1 : x->t1 > y->t1;
}

/* Throughput, fairness, handoffs and exclusion from the timed phase's records. */
static void analyse(row_t *row, rec_t *r, size_t n, int procs, uint64_t start, uint64_t end)
{
    qsort(r, n, sizeof *r, cmp_rec_t1);
    long *per = calloc((size_t)procs, sizeof *per);
    uint64_t *ho = malloc((n ? n : 1) * sizeof *ho);
    uint64_t *un = malloc((n ? n : 1) * sizeof *un);
    uint64_t *wt = malloc((n ? n : 1) * sizeof *wt);
    size_t nho = 0, nun = 0, nwt = 0;
    row->acq = 0;
    row->violations = 0;
    for (size_t i = 0; i < n; i++) {
        int in = r[i].t1 >= start && r[i].t1 < end;
        if (in) {
            row->acq++;
            if (un)
                un[nun++] = r[i].t3 - r[i].t2;
            if (wt)
                wt[nwt++] = r[i].t1 - r[i].t0;
            if (per)
                per[r[i].w]++;
        }
        if (i == 0)
            continue;
        const rec_t *p = &r[i - 1];
        /* the lock can only be granted after the previous holder started to unlock */
        if (r[i].t1 < p->t2)
            row->violations++;
        /* a handoff: another process was already waiting when the holder began to unlock */
        if (in && ho && r[i].w != p->w && r[i].t0 < p->t2 && r[i].t1 >= p->t2)
            ho[nho++] = r[i].t1 - p->t2;
    }
    row->seconds = (double)(end - start) / 1e9;
    row->acq_per_s = (double)row->acq / row->seconds;
    row->min_w = row->max_w = per ? per[0] : 0;
    for (int i = 1; per && i < procs; i++) {
        if (per[i] < row->min_w)
            row->min_w = per[i];
        if (per[i] > row->max_w)
            row->max_w = per[i];
    }
    row->handoffs = nho;
    row->ho50_us = (double)quantile(ho, nho, 0.5) / 1e3;
    row->ho99_us = (double)quantile(ho, nho, 0.99) / 1e3;
    row->unlock50_us = (double)quantile(un, nun, 0.5) / 1e3;
    row->wait50_ms = (double)quantile(wt, nwt, 0.5) / 1e6;
    row->wait99_ms = (double)quantile(wt, nwt, 0.99) / 1e6;
    free(per);
    free(ho);
    free(un);
    free(wt);
}

static int mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static void rmrecs(const char *dir, int n)
{
    char p[PATH_MAX];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/w%d.rec", dir, i);
        unlink(p);
    }
    rmdir(dir);
}

static void run_row(row_t *row, const opts_t *o, const ts_server_t *srv, redisContext *rtt,
                    redisContext *mark)
{
    const storm_impl_t *im = row->im;
    int n = row->procs;
    char name[96], dir[] = "/tmp/rs-storm.XXXXXX";
    snprintf(name, sizeof name, "storm:%s:%d", im->key, n);
    row->ok = 0;
    if (!mkdtemp(dir)) {
        snprintf(row->why, sizeof row->why, "mkdtemp: %s", strerror(errno));
        return;
    }
    worker_t *ws = calloc((size_t)n, sizeof *ws);
    rec_t *recs = NULL;
    int spawned = 0;
    monitor_t mon;
    memset(&mon, 0, sizeof mon);
    int mon_started = 0;
    if (!ws) {
        snprintf(row->why, sizeof row->why, "out of memory");
        goto out;
    }
    fprintf(stderr, "storm: %-22s %4d processes: starting ... ", im->name, n);
    uint64_t t_spawn = now_ns();
    for (; spawned < n; spawned++)
        if (spawn(&ws[spawned], im, o, srv, name, dir, spawned)) {
            snprintf(row->why, sizeof row->why, "cannot start the workers");
            goto out;
        }
    if (wait_all(ws, n, "ready", now_ns() + READY_TIMEOUT_S * 1000000000ull, row->why,
                 sizeof row->why))
        goto out;
    fprintf(stderr, "ready in %.1f s, timed %.1f s ... ", (double)(now_ns() - t_spawn) / 1e9,
            o->seconds);

    if (rtt_measure(rtt, &row->rtt_us, &row->rtt99_us)) {
        snprintf(row->why, sizeof row->why, "raw round trip failed");
        goto out;
    }

    /* --- timed phase, no MONITOR --- */
    char go[128];
    uint64_t start = now_ns() + 50000000ull; /* 50 ms for every worker to read "go" */
    uint64_t end = start + (uint64_t)(o->seconds * 1e9);
    snprintf(go, sizeof go, "go %llu %llu %u\n", (unsigned long long)start,
             (unsigned long long)end, o->work_us);
    long long es_calls0 = 0, es_usec0 = 0, es_calls1 = 0, es_usec1 = 0;
    evalsha_stats(rtt, &es_calls0, &es_usec0);
    send_all(ws, n, go);
    /* the round trip while the storm runs, one probe every 5 ms (context only) */
    static uint64_t load_v[4096];
    size_t nload = 0;
    sleep_until(start);
    while (now_ns() + 5000000ull < end && nload < 4096) {
        usleep(5000);
        uint64_t t = now_ns();
        if (rtt_once(rtt))
            break;
        load_v[nload++] = now_ns() - t;
    }
    row->rtt_load_us = (double)quantile(load_v, nload, 0.5) / 1e3;
    if (wait_all(ws, n, "done", end + DONE_GRACE_S * 1000000000ull, row->why, sizeof row->why))
        goto out;
    /* the probes' own "return 1" calls are left out (about 1 us each) */
    if (evalsha_stats(rtt, &es_calls1, &es_usec1) == 0 && es_calls1 - es_calls0 > (long long)nload)
        row->script_us = (double)(es_usec1 - es_usec0) / (double)(es_calls1 - es_calls0 - (long long)nload);
    size_t nrec;
    recs = load_records(ws, n, &nrec, row->why, sizeof row->why);
    if (!recs)
        goto out;
    row->fails = 0;
    for (int i = 0; i < n; i++)
        row->fails += ws[i].fails;
    analyse(row, recs, nrec, n, start, end);
    free(recs);
    recs = NULL;
    fprintf(stderr, "counted %.1f s ... ", o->monitor_seconds);

    /* --- counted phase, under MONITOR --- */
    mon.c = NULL;
    {
        struct timeval tv = {5, 0};
        mon.c = redisConnectWithTimeout("127.0.0.1", srv->port, tv);
        if (!mon.c || mon.c->err) {
            snprintf(row->why, sizeof row->why, "MONITOR connection failed");
            goto out;
        }
        redisSetTimeout(mon.c, (struct timeval){DONE_GRACE_S + 30, 0});
    }
    local_addr(mark, mon.marker, sizeof mon.marker);
    redisReply *mr = redisCommand(mon.c, "MONITOR");
    int mok = mr && mr->type == REDIS_REPLY_STATUS;
    if (mr)
        freeReplyObject(mr);
    if (!mok || pthread_create(&mon.th, NULL, monitor_main, &mon) != 0) {
        snprintf(row->why, sizeof row->why, "MONITOR failed");
        goto out;
    }
    mon_started = 1;
    if (marker(mark, "rs-storm-start")) {
        snprintf(row->why, sizeof row->why, "marker failed");
        goto out;
    }
    start = now_ns() + 50000000ull;
    end = start + (uint64_t)(o->monitor_seconds * 1e9);
    snprintf(go, sizeof go, "go %llu %llu %u\n", (unsigned long long)start,
             (unsigned long long)end, o->work_us);
    send_all(ws, n, go);
    if (wait_all(ws, n, "done", end + DONE_GRACE_S * 1000000000ull, row->why, sizeof row->why))
        goto out;
    if (marker(mark, "rs-storm-end")) {
        snprintf(row->why, sizeof row->why, "marker failed");
        goto out;
    }
    pthread_join(mon.th, NULL);
    mon_started = 0;
    if (mon.err || !mon.ended) {
        snprintf(row->why, sizeof row->why, "MONITOR stream ended early");
        goto out;
    }
    recs = load_records(ws, n, &nrec, row->why, sizeof row->why);
    if (!recs)
        goto out;
    row->mon_acq = (long)nrec;
    row->mon_fails = 0;
    for (int i = 0; i < n; i++)
        row->mon_fails += ws[i].fails;
    row->mon_cmds = mon.counted;
    row->mon_inner = mon.inner;
    row->mon_names[0] = '\0';
    for (int i = 0; i < mon.nn; i++) {
        size_t u = strlen(row->mon_names);
        snprintf(row->mon_names + u, sizeof row->mon_names - u, "%s%s %.2f", i ? ", " : "",
                 mon.name[i], row->mon_acq ? (double)mon.cnt[i] / (double)row->mon_acq : 0.0);
    }
    row->ok = 1;
    fprintf(stderr, "ok\n");

out:
    if (!row->ok)
        fprintf(stderr, "FAILED: %s\n", row->why);
    if (mon_started) {
        /* unblock the reader: closing its socket under it makes redisGetReply fail */
        shutdown(mon.c->fd, SHUT_RDWR);
        pthread_join(mon.th, NULL);
    }
    if (mon.c)
        redisFree(mon.c);
    free(recs);
    if (ws)
        stop_workers(ws, spawned);
    free(ws);
    rmrecs(dir, n);
}

/* ----- output -------------------------------------------------------------------------- */
static double fairness(const row_t *r)
{
    return r->max_w ? (double)r->min_w / (double)r->max_w : 0;
}

static double cmds_per_acq(const row_t *r)
{
    return r->mon_acq ? (double)r->mon_cmds / (double)r->mon_acq : 0;
}

static void print_header(void)
{
    printf("%-22s %5s %7s %8s %8s %6s %8s %7s %13s %5s\n", "", "", "", "handoff", "handoff",
           "to a", "lock", "cmds /", "acq / proc", "");
    printf("%-22s %5s %7s %8s %8s %6s %8s %7s %13s %5s\n", "implementation", "procs", "acq/s",
           "p50 RTT", "p99 RTT", "waiter", "wait p99", "acq", "min/max", "fair");
}

static void print_row(const row_t *r)
{
    if (!r->ok) {
        printf("%-22s %5d  FAILED: %s\n", r->im->name, r->procs, r->why);
        return;
    }
    char mm[32], h50[16] = "-", h99[16] = "-", wait[16];
    snprintf(mm, sizeof mm, "%ld/%ld", r->min_w, r->max_w);
    if (r->handoffs) {
        snprintf(h50, sizeof h50, "%.2f", r->ho50_us / g_unit_us);
        snprintf(h99, sizeof h99, "%.1f", r->ho99_us / g_unit_us);
    }
    snprintf(wait, sizeof wait, r->wait99_ms < 10 ? "%.2fms" : "%.0fms", r->wait99_ms);
    printf("%-22s %5d %7.0f %8s %8s %5.0f%% %8s %7.2f %13s %5.2f\n", r->im->name, r->procs,
           r->acq_per_s, h50, h99, r->acq ? 100.0 * (double)r->handoffs / (double)r->acq : 0.0,
           wait, cmds_per_acq(r), mm, fairness(r));
}

static void print_details(const row_t *rows, int nrows)
{
    printf("\ndetails (per row: timed phase, then the counted phase under MONITOR)\n");
    for (int i = 0; i < nrows; i++) {
        const row_t *r = &rows[i];
        if (!r->ok)
            continue;
        printf("  %s, %d procs: %ld acquisitions in %.1f s, %zu of them handoffs to a waiter: "
               "p50 %.0f us, p99 %.0f us; lock call p50 %.2f ms, p99 %.2f ms\n    raw RTT just "
               "before the row p50 %.1f us, p99 %.1f us (handoff p50 / that: %.2f); RTT probed "
               "during the storm %.1f us\n    holder's unlock call p50 %.0f us; server time per "
               "EVALSHA %.1f us",
               r->im->name, r->procs, r->acq, r->seconds, r->handoffs, r->ho50_us, r->ho99_us,
               r->wait50_ms, r->wait99_ms, r->rtt_us, r->rtt99_us, r->ho50_us / r->rtt_us,
               r->rtt_load_us, r->unlock50_us, r->script_us);
        if (r->violations)
            printf("; EXCLUSION VIOLATED %ld times", r->violations);
        if (r->fails)
            printf("; %ld lock calls gave up", r->fails);
        printf("\n    counted: %ld acquisitions, %ld client commands (%s), %ld run by scripts "
               "(%.1f per acquisition, not counted)",
               r->mon_acq, r->mon_cmds, r->mon_names[0] ? r->mon_names : "none", r->mon_inner,
               r->mon_acq ? (double)r->mon_inner / (double)r->mon_acq : 0.0);
        if (r->mon_fails)
            printf("; %ld lock calls gave up", r->mon_fails);
        printf("\n");
    }
}

/* the raw floor's row with the same number of processes, or NULL */
static const row_t *floor_row(const row_t *rows, int nrows, int procs)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i].im->group == STORM_BASELINE && rows[i].procs == procs && rows[i].ok &&
            rows[i].handoffs)
            return &rows[i];
    return NULL;
}

static void print_targets(const row_t *rows, int nrows, const opts_t *o, double fast_us)
{
    printf("\ntargets (redisync rows): handoff p50 <= %.0f RTT; commands/acquisition <= %.1f at "
           "8 and 32 procs, flat;\nfairness (min/max acquisitions per process) >= %.1f in the "
           "%.0f s storm. 1 RTT = %.1f us here; the fastest row's RTT was %.1f us,\nand the "
           "handoff against it is shown too, with the handoff as a multiple of the raw floor's "
           "in the same run\n", TARGET_HANDOFF, TARGET_CMDS, TARGET_FAIR, o->seconds, g_unit_us,
           fast_us);
    for (int i = 0; i < nrows; i++) {
        const row_t *r = &rows[i];
        if (r->im->group != STORM_REDISYNC || !r->ok)
            continue;
        double h = r->handoffs ? r->ho50_us / g_unit_us : 0;
        double c = cmds_per_acq(r);
        int cmd_row = r->procs == 8 || r->procs == 32;
        const row_t *f = floor_row(rows, nrows, r->procs);
        char vs[96] = "";
        if (r->handoffs)
            snprintf(vs, sizeof vs, " (%5.1f fast RTT; %4.1fx floor)", r->ho50_us / fast_us,
                     f ? r->ho50_us / f->ho50_us : 0.0 / 0.0);
        printf("  %-20s %4d procs: handoff %5.2f %s%s   cmds/acq %4.2f %s   fair %4.2f %s%s\n",
               r->im->name, r->procs, h,
               !r->handoffs ? "n/a " : h <= TARGET_HANDOFF ? "PASS" : "MISS", vs, c,
               !cmd_row ? "    " : c <= TARGET_CMDS ? "PASS" : "MISS", fairness(r),
               fairness(r) >= TARGET_FAIR ? "PASS" : "MISS",
               r->violations ? "   EXCLUSION VIOLATED" : "");
    }
}

static int cmp_row_procs(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    if (x->procs != y->procs)
        return x->procs - y->procs;
    return (int)(x->im - y->im);
}

static int cmp_row_impl(const void *a, const void *b)
{
    const row_t *x = a, *y = b;
    if (x->im != y->im)
        return x->im < y->im ? -1 : 1;
    return x->procs - y->procs;
}

/* gnuplot data (one block per implementation) and script; runs gnuplot if it is there. */
static void write_chart(const row_t *rows, int nrows, const opts_t *o, const char *base,
                        const char *title)
{
    char dat[PATH_MAX], gp[PATH_MAX], png[PATH_MAX];
    snprintf(dat, sizeof dat, "%s/%s.dat", o->out_dir, base);
    snprintf(gp, sizeof gp, "%s/%s.gp", o->out_dir, base);
    snprintf(png, sizeof png, "%s/%s.png", o->out_dir, base);
    FILE *f = fopen(dat, "w");
    if (!f) {
        fail("%s: %s", dat, strerror(errno));
        return;
    }
    fprintf(f, "# procs acq_per_s handoff_p50_rtt handoff_p99_rtt cmds_per_acq fairness "
               "rtt_us\n");
    int nblocks = 0;
    const storm_impl_t *blocks[32];
    int any_peer = 0;
    for (int k = 0; k < storm_nimpls && nblocks < 32; k++) {
        const storm_impl_t *im = &storm_impls[k];
        int any = 0;
        for (int i = 0; i < nrows; i++)
            if (rows[i].im == im && rows[i].ok)
                any = 1;
        if (!any)
            continue;
        any_peer |= im->group == STORM_PEER;
        fprintf(f, "# %s\n", im->name);
        for (int i = 0; i < nrows; i++) {
            const row_t *r = &rows[i];
            if (r->im != im || !r->ok)
                continue;
            fprintf(f, "%d %.1f %.3f %.3f %.3f %.3f %.2f\n", r->procs, r->acq_per_s,
                    r->handoffs ? r->ho50_us / g_unit_us : 0.0 / 0.0,
                    r->handoffs ? r->ho99_us / g_unit_us : 0.0 / 0.0, cmds_per_acq(r),
                    fairness(r), r->rtt_us);
        }
        fprintf(f, "\n\n");
        blocks[nblocks++] = im;
    }
    fclose(f);
    if (!nblocks)
        return;

    f = fopen(gp, "w");
    if (!f) {
        fail("%s: %s", gp, strerror(errno));
        return;
    }
    /* the peers' chart: p50 only, and a third panel for fairness, their weak point */
    int panels = any_peer ? 3 : 2;
    fprintf(f, "# written by build/redisync-storm; run: gnuplot %s\n", gp);
    fprintf(f, "set terminal pngcairo size %d,720 font 'DejaVu Sans,11'\n", panels * 620);
    fprintf(f, "set output '%s'\n", png);
    fprintf(f, "set datafile missing 'nan'\n");
    fprintf(f, "set multiplot layout 1,%d title \"%s\\n"
               "N processes loop lock / %u us of work / unlock on one primitive, %g s per "
               "point; 2 vCPUs, shared: figures are noisy\"\n",
            panels, title, o->work_us, o->seconds);
    fprintf(f, "set logscale x 2\nset xtics (2, 4, 8, 16, 32, 64, 128, 256)\n");
    fprintf(f, "set xlabel 'processes (one holds, the others wait)'\nset grid\n");
    fprintf(f, "set key below vertical maxrows %d\n", any_peer ? 4 : 5);
    fprintf(f, "set offsets graph 0.05, graph 0.05, 0, 0\n");
    /* handoff latency */
    fprintf(f, "set title 'handoff: unlock called -> a blocked waiter returns'\n");
    fprintf(f, "set ylabel 'raw round trips (1 RTT = %.1f us in this run)'\n", g_unit_us);
    fprintf(f, "set logscale y 10\n");
    fprintf(f, "plot ");
    for (int b = 0; b < nblocks; b++) {
        fprintf(f, "'%s' index %d using 1:3 with linespoints lw 2 pt 7 lc %d title '%s%s', ",
                dat, b, b + 1, blocks[b]->name, any_peer ? "" : " p50");
        if (!any_peer)
            fprintf(f, "'%s' index %d using 1:4 with linespoints lw 1 dt 2 pt 6 lc %d "
                       "title '%s p99', ", dat, b, b + 1, blocks[b]->name);
    }
    fprintf(f, "%.1f with lines lw 2 lc rgb 'red' dt 3 title 'target: p50 <= %.0f'\n",
            TARGET_HANDOFF, TARGET_HANDOFF);
    /* commands per acquisition */
    fprintf(f, "set title \"client commands per acquisition (MONITOR; the scripts' own "
               "excluded)\"\n");
    fprintf(f, "set ylabel 'commands sent per acquisition'\n");
    if (any_peer)
        fprintf(f, "set yrange [1:*]\n");
    else
        fprintf(f, "unset logscale y\nset yrange [0:4]\n");
    fprintf(f, "plot ");
    for (int b = 0; b < nblocks; b++)
        fprintf(f, "'%s' index %d using 1:5 with linespoints lw 2 pt 7 lc %d title '%s', ", dat,
                b, b + 1, blocks[b]->name);
    fprintf(f, "%.1f with lines lw 2 lc rgb 'red' dt 3 title 'target <= %.1f', "
               "2 with lines lw 1 lc rgb 'gray' dt 2 title 'floor: 2 (lock + unlock)'\n",
            TARGET_CMDS, TARGET_CMDS);
    if (any_peer) {
        fprintf(f, "unset logscale y\nset yrange [0:1.05]\n");
        fprintf(f, "set title 'fairness: min / max acquisitions per process'\n");
        fprintf(f, "set ylabel 'least lucky / luckiest process'\n");
        fprintf(f, "plot ");
        for (int b = 0; b < nblocks; b++)
            fprintf(f, "'%s' index %d using 1:6 with linespoints lw 2 pt 7 lc %d title '%s', ",
                    dat, b, b + 1, blocks[b]->name);
        fprintf(f, "%.1f with lines lw 2 lc rgb 'red' dt 3 title 'target >= %.1f'\n",
                TARGET_FAIR, TARGET_FAIR);
    }
    fprintf(f, "unset multiplot\n");
    fclose(f);

    if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
        printf("\nchart: gnuplot is not installed (bench/deps.sh installs gnuplot-nox as root); "
               "data in %s, script in %s\n", dat, gp);
        return;
    }
    char cmd[PATH_MAX * 2];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
    if (system(cmd) != 0)
        fail("gnuplot %s failed", gp);
    else
        printf("\nchart: %s (data %s)\n", png, dat);
}

/* ----- main ---------------------------------------------------------------------------- */
static int parse_procs(opts_t *o, const char *s)
{
    o->nprocs = 0;
    char *end;
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAX_PROCS || o->nprocs == 16)
            return -1;
        o->procs[o->nprocs++] = (int)v;
        s = end;
    }
    return o->nprocs ? 0 : -1;
}

static int selected(const opts_t *o, const storm_impl_t *im)
{
    if (im->group == STORM_PEER && !o->peers_dir)
        return 0;
    if (!o->only)
        return 1;
    size_t kl = strlen(im->key);
    for (const char *p = o->only; *p;) {
        size_t l = strcspn(p, ", ");
        if (l == kl && strncmp(p, im->key, l) == 0)
            return 1;
        p += l;
        while (*p == ',' || *p == ' ')
            p++;
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: redisync-storm [--peers DIR] [--procs \"2 8 32 128\"] [--seconds 3]\n"
            "                      [--monitor-seconds 1] [--work-us 50] [--out build/bench]\n"
            "                      [--only mutex,rwlock,sem,raw,redispy,redlock,redissem]\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    opts_t o = {0};
    parse_procs(&o, "2 8 32 128");
    o.seconds = 3;
    o.monitor_seconds = 1;
    o.work_us = 50;
    o.out_dir = "build/bench";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            usage();
            return 2;
        }
        if (strcmp(a, "--peers") == 0)
            o.peers_dir = v;
        else if (strcmp(a, "--procs") == 0) {
            if (parse_procs(&o, v)) {
                usage();
                return 2;
            }
        } else if (strcmp(a, "--seconds") == 0)
            o.seconds = atof(v);
        else if (strcmp(a, "--monitor-seconds") == 0)
            o.monitor_seconds = atof(v);
        else if (strcmp(a, "--work-us") == 0)
            o.work_us = (unsigned)atoi(v);
        else if (strcmp(a, "--out") == 0)
            o.out_dir = v;
        else if (strcmp(a, "--only") == 0)
            o.only = v;
        else {
            usage();
            return 2;
        }
        i++;
    }
    if (o.seconds <= 0 || o.monitor_seconds <= 0 || o.seconds > 600 || o.monitor_seconds > 600) {
        usage();
        return 2;
    }
    if (mkdirs(o.out_dir)) {
        fprintf(stderr, "storm: cannot create %s: %s\n", o.out_dir, strerror(errno));
        return 1;
    }

    /* the plan: all implementations at one N run back to back, so that a drift of the
     * machine's load hits them alike; the table is grouped afterwards */
    row_t *rows = calloc((size_t)(storm_nimpls * o.nprocs), sizeof *rows);
    int nrows = 0;
    if (!rows)
        return 1;
    for (int p = 0; p < o.nprocs; p++)
        for (int k = 0; k < storm_nimpls; k++)
            if (selected(&o, &storm_impls[k])) {
                rows[nrows].im = &storm_impls[k];
                rows[nrows].procs = o.procs[p];
                nrows++;
            }
    if (!nrows) {
        fprintf(stderr, "storm: nothing selected\n");
        return 2;
    }

    ts_server_t srv;
    if (ts_server_start(&srv, "--maxclients", "10000", NULL) != 0) {
        fprintf(stderr, "storm: cannot start redis-server\n");
        return 1;
    }
    uint64_t t_begin = now_ns();
    redisContext *rtt = raw_connect(&srv), *mark = raw_connect(&srv);
    char version[64] = "?";
    if (!rtt || !mark)
        goto out;
    redisReply *r = redisCommand(rtt, "SCRIPT LOAD %s", "return 1");
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        fail("SCRIPT LOAD: %s", r ? "odd reply" : rtt->errstr);
        if (r)
            freeReplyObject(r);
        goto out;
    }
    memcpy(g_one_sha, r->str, 41);
    freeReplyObject(r);
    r = redisCommand(rtt, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "redis_version:");
        if (p)
            sscanf(p + 14, "%63[^\r\n]", version);
    }
    if (r)
        freeReplyObject(r);

    double load0 = loadavg();
    printf("redisync %s contention storm%s: redis-server %s at %s, %ld CPUs online, load "
           "average %.2f\n", rs_version(), o.peers_dir ? " against the peers" : "", version,
           srv.url, sysconf(_SC_NPROCESSORS_ONLN), load0);
    printf("each row: N worker processes, one client each, loop lock / %u us busy work / unlock "
           "on one primitive;\n%g s timed, then %g s counted under MONITOR (bench/README.md "
           "explains every column)\n\n", o.work_us, o.seconds, o.monitor_seconds);

    for (int i = 0; i < nrows; i++)
        run_row(&rows[i], &o, &srv, rtt, mark);
    for (int i = 0; i < nrows; i++)
        if (!rows[i].ok)
            g_errors++;

    qsort(rows, (size_t)nrows, sizeof *rows, o.peers_dir ? cmp_row_procs : cmp_row_impl);
    if (!g_rtt_n) {
        fprintf(stderr, "storm: no row ran\n");
        goto out;
    }
    double lo = 1e18, hi = 0;
    {
        for (int i = 0; i < nrows; i++)
            if (rows[i].rtt_us > 0) {
                lo = rows[i].rtt_us < lo ? rows[i].rtt_us : lo;
                hi = rows[i].rtt_us > hi ? rows[i].rtt_us : hi;
            }
        g_unit_us = (double)quantile(g_rtt_all, g_rtt_n, 0.5) / 1e3;
        printf("unit of the handoff columns: the raw round trip (EVALSHA \"return 1\" on a plain "
               "connection) = %.1f us,\nthe median of %zu calls made in this run, %d before "
               "each row (the rows' medians ranged %.1f..%.1f us)\n\n",
               g_unit_us, g_rtt_n, RTT_OPS, lo, hi);
    }
    print_header();
    for (int i = 0; i < nrows; i++) {
        if (i && (o.peers_dir ? rows[i].procs != rows[i - 1].procs : rows[i].im != rows[i - 1].im))
            printf("\n");
        print_row(&rows[i]);
    }
    print_details(rows, nrows);
    printf("\nsettings:\n");
    for (int k = 0; k < storm_nimpls; k++)
        if (selected(&o, &storm_impls[k]))
            printf("  %-22s %s\n", storm_impls[k].name, storm_impls[k].settings);
    print_targets(rows, nrows, &o, lo);
    if (o.peers_dir)
        write_chart(rows, nrows, &o, "peers", "redisync and its peers on one redis-server");
    else
        write_chart(rows, nrows, &o, "contention", "redisync: many processes on one primitive");
    printf("\nstorm took %.0f s; the load average was %.2f at the start (figures taken while other "
           "work runs\nare not comparable; the storm itself raises it)\n",
           (double)(now_ns() - t_begin) / 1e9, load0);

out:
    if (rtt)
        redisFree(rtt);
    if (mark)
        redisFree(mark);
    ts_server_stop(&srv);
    free(rows);
    return g_errors ? 1 : 0;
}
