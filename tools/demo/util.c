/*
 * util.c - the demo's helpers: printing, time, child processes, the client, plain keys, the gauge.
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("   ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Waits until *flag >= want; -1 after timeout_ms. */
int wait_flag(atomic_int *flag, int want, long timeout_ms)
{
    double end = now_ms() + (double)timeout_ms;
    while (atomic_load(flag) < want) {
        if (now_ms() > end)
            return -1;
        tu_sleep_ms(1);
    }
    return 0;
}

/* Forks a child that runs fn(d, arg) and _exits with its result. -1 on failure. The child
 * dies with the demo (SIGKILL when the parent goes), so nothing outlives a failed run. */
pid_t spawn(demo_t *d, int (*fn)(demo_t *, int), int arg)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        _exit(fn(d, arg));
    }
    if (pid < 0)
        say("fork failed: %s", strerror(errno));
    return pid;
}

/* Waits up to timeout_ms for the children, then SIGKILLs and reaps the rest. Returns how
 * many did not exit with status 0 (killed ones included). */
int reap_within(const pid_t *pids, int n, long timeout_ms)
{
    int bad = 0, late = 0;
    double end = now_ms() + (double)timeout_ms;
    for (int i = 0; i < n; i++) {
        int st = 0, ok = 0;
        if (pids[i] <= 0) {
            bad++;
            continue;
        }
        for (;;) {
            pid_t r = waitpid(pids[i], &st, WNOHANG);
            if (r == pids[i]) {
                ok = 1;
                break;
            }
            if (r < 0 && errno != EINTR)
                break;
            if (now_ms() > end) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], &st, 0);
                late++;
                break;
            }
            tu_sleep_ms(2);
        }
        if (!ok || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            bad++;
    }
    if (late)
        say("%d process(es) still running after %.0f s were killed", late, timeout_ms / 1e3);
    return bad;
}

/* Waits for the children (at most REAP_MS); returns how many did not exit with status 0. */
int reap(const pid_t *pids, int n)
{
    return reap_within(pids, n, REAP_MS);
}

/* Kills and reaps the children of a part that gave up. */
void kill_all(const pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++)
        if (pids[i] > 0)
            waitpid(pids[i], NULL, 0);
}

/* Opens a client on the demo server (in the calling process). NULL after printing why. */
rs_client_t *open_client(demo_t *d, long lease_ms)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = d->srv.url;
    cfg.lease_ms = lease_ms;
    rs_client_t *c;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        say("rs_client_open: %s (%s)", rs_strerror(rc), rs_client_lasterror(NULL));
        return NULL;
    }
    return c;
}

/* ----- helpers for the counter race ---------------------------------------------------- */

/* GET key as an integer (nil: 0). -1 on error. */
long long get_ll(redisContext *rc, const char *key)
{
    redisReply *r = redisCommand(rc, "GET %s", key);
    if (!r)
        return -1;
    long long v = -1;
    if (r->type == REDIS_REPLY_NIL)
        v = 0;
    else if (r->type == REDIS_REPLY_STRING)
        v = strtoll(r->str, NULL, 10);
    freeReplyObject(r);
    return v;
}

int set_ll(redisContext *rc, const char *key, long long v)
{
    redisReply *r = redisCommand(rc, "SET %s %lld", key, v);
    int ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* One read-modify-write increment: GET, a short pause, SET. */
int increment(redisContext *rc, const char *key)
{
    long long v = get_ll(rc, key);
    if (v < 0)
        return -1;
    usleep(RACE_GAP_US);
    return set_ll(rc, key, v + 1);
}

void key_of(const demo_t *d, char *buf, size_t len, const char *what)
{
    snprintf(buf, len, "%s:%s", d->prefix, what);
}

/* ----- a concurrency gauge in Redis ----------------------------------------------------- */

/* Adds delta to the counter KEYS[1], raises KEYS[2] (its maximum) if need be and returns the
 * counter with the value of another counter KEYS[3], all in one step: a process enters with
 * +1 right after it acquired and leaves with -1 right before it releases, so two processes
 * that were inside at the same time always see each other (at entry or at exit). */
static const char GAUGE_LUA[] =
    "local n = redis.call('INCRBY', KEYS[1], ARGV[1]) "
    "if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end "
    "return {n, tonumber(redis.call('GET', KEYS[3]) or '0')}";

/* gauge(rc, "readers", "writers", +1, &other): 0 with *other = the other counter; -1 on error. */
int gauge(redisContext *rc, const demo_t *d, const char *mine, const char *other,
          int delta, long long *other_now)
{
    char k1[96], k2[104], k3[96];
    key_of(d, k1, sizeof k1, mine);
    snprintf(k2, sizeof k2, "%s:max", k1);
    key_of(d, k3, sizeof k3, other);
    redisReply *r = redisCommand(rc, "EVAL %s 3 %s %s %s %d", GAUGE_LUA, k1, k2, k3, delta);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
             r->element[1]->type == REDIS_REPLY_INTEGER;
    if (ok)
        *other_now = r->element[1]->integer;
    else
        say("gauge: %s", r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* GET of a plain key of this run as an integer (nil: 0), from the parent. -1 on error. */
long long get_key(const demo_t *d, const char *what)
{
    char key[96];
    key_of(d, key, sizeof key, what);
    redisContext *rc = ts_connect(&d->srv);
    if (!rc)
        return -1;
    long long v = get_ll(rc, key);
    redisFree(rc);
    return v;
}
