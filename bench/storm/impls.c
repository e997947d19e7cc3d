/*
 * impls.c - what the contention benchmark runs: redisync's blocking primitives and the peers.
 *
 * A new redisync primitive is one storm_c_ops_t (four small adapters) and one row of
 * storm_impls[]. The read-write lock and the semaphore were written while this benchmark
 * was: the build defines STORM_HAVE_RWLOCK / STORM_HAVE_SEM when build/libredisync.a defines
 * rs_rwlock_wrlock / rs_sem_wait (mk/bench.mk asks nm), so the benchmark builds and runs
 * whichever of them the library has.
 *
 * Every primitive is driven as an exclusive lock, so that "the next holder" is well defined
 * and a handoff can be timed: the rwlock by writers only, the semaphore with one permit.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "storm.h"

/* ----- mutex ---------------------------------------------------------------------------- */
static int mutex_init(void **h, rs_client_t *c, const char *url, const char *name)
{
    (void)url;
    return rs_mutex_init((rs_mutex_t **)h, c, name);
}
static int mutex_lock(void *h)
{
    return rs_mutex_lock(h);
}
static int mutex_unlock(void *h)
{
    return rs_mutex_unlock(h);
}
static int mutex_destroy(void *h)
{
    return rs_mutex_destroy(h);
}
static const storm_c_ops_t mutex_ops = {mutex_init, mutex_lock, mutex_unlock, mutex_destroy, NULL};

/* ----- recursive mutex, one level deep ----------------------------------------------------- */
static int rmutex_init(void **h, rs_client_t *c, const char *url, const char *name)
{
    (void)url;
    return rs_rmutex_init((rs_rmutex_t **)h, c, name);
}
static int rmutex_lock(void *h)
{
    return rs_rmutex_lock(h);
}
static int rmutex_unlock(void *h)
{
    return rs_rmutex_unlock(h);
}
static int rmutex_destroy(void *h)
{
    return rs_rmutex_destroy(h);
}
static const storm_c_ops_t rmutex_ops = {rmutex_init, rmutex_lock, rmutex_unlock, rmutex_destroy,
                                         NULL};

/* ----- read-write lock, writers only ------------------------------------------------------ */
#ifdef STORM_HAVE_RWLOCK
static int rwlock_init(void **h, rs_client_t *c, const char *url, const char *name)
{
    (void)url;
    return rs_rwlock_init((rs_rwlock_t **)h, c, name);
}
static int rwlock_lock(void *h)
{
    return rs_rwlock_wrlock(h);
}
static int rwlock_unlock(void *h)
{
    return rs_rwlock_unlock(h);
}
static int rwlock_destroy(void *h)
{
    return rs_rwlock_destroy(h);
}
static const storm_c_ops_t rwlock_ops = {rwlock_init, rwlock_lock, rwlock_unlock, rwlock_destroy,
                                         NULL};
/* readers and writers: the odd-numbered workers read */
static int rwlock_rdlock(void *h)
{
    return rs_rwlock_rdlock(h);
}
static const storm_c_ops_t rwlock_rw_ops = {rwlock_init, rwlock_lock, rwlock_unlock,
                                            rwlock_destroy, rwlock_rdlock};
#endif

/* ----- semaphore of one permit ---------------------------------------------------------- */
#ifdef STORM_HAVE_SEM
static int sem_init(void **h, rs_client_t *c, const char *url, const char *name)
{
    (void)url;
    return rs_sem_init((rs_sem_t **)h, c, name, 1);
}
static int sem_lock(void *h)
{
    return rs_sem_wait(h);
}
static int sem_unlock(void *h)
{
    return rs_sem_post(h);
}
static int sem_destroy(void *h)
{
    return rs_sem_destroy(h);
}
static const storm_c_ops_t sem_ops = {sem_init, sem_lock, sem_unlock, sem_destroy, NULL};
#endif


/* ----- the raw FIFO lock: the floor ------------------------------------------------------
 * What a handoff through Redis costs on this machine with nothing of redisync: a FIFO lock
 * in two tiny scripts, no lease, no fencing, no crash safety, no library threads. acq takes
 * the lock if free, else queues the caller's id; rel hands the lock to the first queued id
 * and PUBLISHes to that waiter's channel, which the waiter reads on its own subscriber
 * connection, blocked in read() in the calling thread itself (no thread hop). Two commands
 * per acquisition, like redisync's mutex; a server-side script of 2-4 commands instead of
 * mutex.lua's 10-20. */
static const char RAW_ACQ[] =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end "
    "redis.call('RPUSH', KEYS[2], ARGV[1]) return 0";
static const char RAW_REL[] =
    "local n = redis.call('LPOP', KEYS[2]) "
    "if n then redis.call('SET', KEYS[1], n) redis.call('PUBLISH', 'storm:raw:' .. n, 'go') "
    "else redis.call('DEL', KEYS[1]) end return 1";

typedef struct raw {
    redisContext *cmd, *sub;
    char acq_sha[41], rel_sha[41];
    char key[128], queue[136], me[32];
} raw_t;

static redisContext *raw_conn(const char *url)
{
    int port = 0;
    if (sscanf(url, "redis://127.0.0.1:%d", &port) != 1)
        return NULL;
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisEnableKeepAlive(c);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
}

static int raw_load(redisContext *c, const char *body, char *sha)
{
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", body);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
    if (ok)
        memcpy(sha, r->str, 41);
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int raw_destroy(void *h)
{
    raw_t *x = h;
    if (!x)
        return 0;
    if (x->cmd)
        redisFree(x->cmd);
    if (x->sub)
        redisFree(x->sub);
    free(x);
    return 0;
}

static int raw_init(void **h, rs_client_t *c, const char *url, const char *name)
{
    (void)c;
    raw_t *x = calloc(1, sizeof *x);
    *h = x;
    if (!x)
        return ENOMEM;
    snprintf(x->key, sizeof x->key, "%s", name);
    snprintf(x->queue, sizeof x->queue, "%s:q", name);
    snprintf(x->me, sizeof x->me, "%ld", (long)getpid());
    x->cmd = raw_conn(url);
    x->sub = raw_conn(url);
    if (!x->cmd || !x->sub || raw_load(x->cmd, RAW_ACQ, x->acq_sha) ||
        raw_load(x->cmd, RAW_REL, x->rel_sha))
        goto fail;
    redisReply *r = redisCommand(x->sub, "SUBSCRIBE storm:raw:%s", x->me);
    int ok = r && r->type == REDIS_REPLY_ARRAY; /* the confirmation */
    if (r)
        freeReplyObject(r);
    if (!ok)
        goto fail;
    struct timeval none = {0, 0};
    redisSetTimeout(x->sub, none);
    return 0;
fail:
    raw_destroy(x);
    *h = NULL;
    return RS_ECONN;
}

static int raw_lock(void *h)
{
    raw_t *x = h;
    redisReply *r = redisCommand(x->cmd, "EVALSHA %s 2 %s %s %s", x->acq_sha, x->key, x->queue,
                                 x->me);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        if (r)
            freeReplyObject(r);
        return RS_ECONN;
    }
    int granted = r->integer == 1;
    freeReplyObject(r);
    if (granted)
        return 0;
    void *v = NULL; /* the handoff: a message on our channel */
    if (redisGetReply(x->sub, &v) != REDIS_OK || !v)
        return RS_ECONN;
    freeReplyObject(v);
    return 0;
}

static int raw_unlock(void *h)
{
    raw_t *x = h;
    redisReply *r = redisCommand(x->cmd, "EVALSHA %s 2 %s %s", x->rel_sha, x->key, x->queue);
    int ok = r && r->type == REDIS_REPLY_INTEGER;
    if (r)
        freeReplyObject(r);
    return ok ? 0 : RS_ECONN;
}
static const storm_c_ops_t raw_ops = {raw_init, raw_lock, raw_unlock, raw_destroy, NULL};

#define RS_SETTINGS "default client config: lease 30000 ms; FIFO queue in Redis, woken by one " \
                    "PUBLISH, no polling"

const storm_impl_t storm_impls[] = {
    {"redisync mutex", "mutex", STORM_REDISYNC, &mutex_ops, {NULL}, RS_SETTINGS, 0, 0},
    {"redisync rmutex", "rmutex", STORM_REDISYNC, &rmutex_ops, {NULL},
     RS_SETTINGS "; recursive mutex, one level", 0, 0},
#ifdef STORM_HAVE_RWLOCK
    {"redisync rwlock (wr)", "rwlock", STORM_REDISYNC, &rwlock_ops, {NULL},
     RS_SETTINGS "; writers only", 0, 0},
    /* ARGV[9] of rwlock.lua is the mode, "r" or "w" */
    {"redisync rwlock (r+w)", "rwlockrd", STORM_REDISYNC, &rwlock_rw_ops, {NULL},
     RS_SETTINGS "; odd-numbered processes read, the others write", 1, 9},
#endif
#ifdef STORM_HAVE_SEM
    {"redisync sem (1)", "sem", STORM_REDISYNC, &sem_ops, {NULL}, RS_SETTINGS "; 1 permit", 0, 0},
#endif
    {"raw FIFO (floor)", "raw", STORM_BASELINE, &raw_ops, {NULL},
     "the floor, not a usable lock: 2 tiny scripts (SET NX or RPUSH; LPOP + SET + PUBLISH), "
     "no lease, waiter blocked in read() on its own subscriber connection", 0, 0},
    /* the peers (bench/peers/): their documented defaults, see bench/peers/README.md */
    {"redis-py Lock", "redispy", STORM_PEER, NULL,
     {"/usr/bin/python3", "@PEERS@/redispy_worker.py", NULL},
     "redis-py (Debian python3-redis) Lock defaults: sleep=0.1 s between SET NX attempts, "
     "timeout=None (no lease), blocking_timeout=None", 0, 0},
    {"node redlock", "redlock", STORM_PEER, NULL,
     {"node", "@PEERS@/worker.js", "redlock", NULL},
     "redlock 4.2.0 defaults: retryCount=10, retryDelay=200 ms, retryJitter=100 ms, "
     "driftFactor=0.01; ttl 30000 ms (it has no default); ioredis 5", 0, 0},
    {"node redis-semaphore", "redissem", STORM_PEER, NULL,
     {"node", "@PEERS@/worker.js", "redis-semaphore", NULL},
     "redis-semaphore Mutex defaults: retryInterval=10 ms, acquireTimeout=10000 ms, "
     "lockTimeout=10000 ms, refreshInterval=8000 ms; ioredis 5", 0, 0},
};
const int storm_nimpls = (int)(sizeof storm_impls / sizeof storm_impls[0]);
