/*
 * worker.c - one worker process of the fault suite: "redisync-faults --worker KEY=VALUE...".
 *
 * A worker opens one library client on the data server and works through critical sections
 * on one primitive until the driver sets "stop" on the checker, recording every section on
 * the checker. A section (mutex, rmutex, write side of the rwlock):
 *
 *   lock (timed: a waiter that does not get through in LOCK_BOUND_MS is a liveness failure;
 *   under Redlock one that was not overtaken while the name moved on is not: check_waits)
 *   t_acq; the fencing token; (rmutex: lock again, the token must not change)
 *   enter on the checker: marks the slot inside and takes a pending fault command
 *     "kill": record the event, raise(SIGKILL)   (kill -9 of a holder)
 *   fenced read of the counter under the token
 *     "stop": record the event, raise(SIGSTOP)   (the driver sends SIGCONT past the lease)
 *     "net:ID": hold on until the driver heals the network cut it made (net.c, --net)
 *   a short hold; fenced write counter+1 under the token (compare-and-set on the checker)
 *   t_rel; unlock (rmutex: as many times as locked; after RS_ELOST one more must be EPERM)
 *   record "SLOT GEN NAME FENCE T_ACQ T_REL RC RD WR PERMITS MODE ONLOST T_REQ T_LOST T_END"
 *   and leave (T_REQ: the lock call; T_LOST: the first on_lost of the section, 0 if none;
 *   T_END: when the unlock returned)
 *
 * Readers of the rwlock and semaphore holders do no fenced ops (their tokens are not exposed
 * or not exclusive); their exclusion is checked from the recorded intervals. The latch
 * worker runs rounds instead (see latch_loop). At "stop" the worker closes its client,
 * counts its sockets still connected to the data server (I7: none may be left), writes
 * exit:SLOT:GEN and exits 0. Any exit other than 0 or the driver's SIGKILL is a crash.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "worker.h"

atomic_long g_onlost;
_Atomic int64_t g_lost_t;
atomic_long g_onlost_name[MAX_NAMES];
static int g_liblog;
static int g_slot;

static void on_lost(const char *kind, const char *name, void *arg)
{
    (void)kind, (void)arg;
    int64_t zero = 0;
    atomic_compare_exchange_strong(&g_lost_t, &zero, now_us());
    int ni;
    if (name && sscanf(name, "n%d", &ni) == 1 && ni >= 0 && ni < MAX_NAMES)
        atomic_fetch_add(&g_onlost_name[ni], 1);
    atomic_fetch_add(&g_onlost, 1);
}

static void lib_log(int level, const char *msg, void *arg)
{
    (void)arg;
    if (g_liblog && level >= (g_liblog > 1 ? RS_LOG_DEBUG : RS_LOG_WARN))
        fprintf(stderr, "[w%d %lld] %s\n", g_slot, (long long)(now_us() / 1000), msg);
}

void count_err(worker_t *w, const char *what, int rc)
{
    redisReply *r = ck_cmd(w->ck, "HINCRBY err %s:%s 1", what,
                           rc == RS_ECONN ? "RS_ECONN" : rc == RS_ELOST ? "RS_ELOST"
                           : rc == ETIMEDOUT ? "ETIMEDOUT" : rc == ECANCELED ? "ECANCELED"
                           : rc == RS_ESERVER ? "RS_ESERVER" : rc == EPERM ? "EPERM"
                           : rc == EDEADLK ? "EDEADLK" : rc == ENOENT ? "ENOENT"
                           : rc == -EDEADLK ? "EDEADLK-orphan" : "other");
    freeReplyObject(r);
}

/* A contract breach seen by the worker itself: recorded, counted as an API violation. */
void api_bad(worker_t *w, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    w->api_bad++;
    redisReply *r = ck_cmd(w->ck, "RPUSH api %s", buf);
    freeReplyObject(r);
}

void live_bad(worker_t *w, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    redisReply *r = ck_cmd(w->ck, "RPUSH live %s", buf);
    freeReplyObject(r);
}

long long stop_value(worker_t *w)
{
    long long v = ck_int(w->ck, "GET stop");
    return v > 0 ? v : 0;
}

/* ---- sockets still connected to the data server (I7) ---------------------------------- */
static int has_inode(const unsigned long *v, int n, unsigned long x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

static int sockets_to(int port)
{
    unsigned long inodes[512];
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 512) {
        char path[300], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len <= 0)
            continue;
        link[len] = '\0';
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            inodes[n++] = ino;
    }
    closedir(d);
    int count = 0;
    const char *files[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
    for (int f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "r");
        if (!fp)
            continue;
        char line[512];
        if (!fgets(line, sizeof line, fp)) {
            fclose(fp);
            continue;
        }
        while (fgets(line, sizeof line, fp)) {
            char local[64], remote[64];
            unsigned st;
            unsigned long ino;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %63s %63s %x %*s %*s %*s %*s %*s %lu", local, remote, &st,
                       &ino) != 4)
                continue;
            char *colon = strrchr(remote, ':');
            if (!colon)
                continue;
            int rport = (int)strtol(colon + 1, NULL, 16);
            if (rport == port && has_inode(inodes, n, ino))
                count++;
        }
        fclose(fp);
    }
    return count;
}

/* ---- checker calls --------------------------------------------------------------------- */
/* Marks the slot inside; returns the pending fault command (0 none, 'k' kill, 's' stop,
 * 'n' net:ID, the ID in *net_id). */
int ck_enter(worker_t *w, const char *name, int64_t t, long *net_id)
{
    redisReply *r = ck_cmd(w->ck, "EVALSHA %s 2 in:%d cmd:%d %s:%lld", w->sha_enter, w->slot,
                           w->slot, name, (long long)t);
    int cmd = 0;
    if (r->type == REDIS_REPLY_STRING)
        cmd = strcmp(r->str, "kill") == 0 ? 'k' : strcmp(r->str, "stop") == 0 ? 's'
              : sscanf(r->str, "net:%ld", net_id) == 1 ? 'n' : 0;
    freeReplyObject(r);
    return cmd;
}

/* "net:ID" (tests/faults/net.c): tell the driver this holder is ready to be cut, and go on
 * holding (as a holder that does not know it is cut keeps working) until it heals. */
static void net_hold(worker_t *w, long id)
{
    freeReplyObject(ck_cmd(w->ck, "SET ready:%d %ld", w->slot, id));
    for (int64_t until = now_us() + 60000000; now_us() < until; sleep_us(20000))
        if (ck_int(w->ck, "EXISTS go:%ld", id) == 1)
            break;
    freeReplyObject(ck_cmd(w->ck, "DEL go:%ld", id));
}

void ck_event(worker_t *w, char kind, const char *name, uint64_t fence)
{
    char buf[160];
    snprintf(buf, sizeof buf, "%c %d %lld %s %llu", kind, w->slot, (long long)now_us(), name,
             (unsigned long long)fence);
    redisReply *r = ck_cmd(w->ck, "RPUSH ev %s", buf);
    freeReplyObject(r);
}

/* Fenced read: 1 accepted (value in *v), 0 refused. */
int ck_fread(worker_t *w, const char *name, uint64_t fence, long long *v)
{
    redisReply *r = ck_cmd(w->ck, "EVALSHA %s 2 hi:%s ctr:%s %llu", w->sha_fread, name, name,
                           (unsigned long long)fence);
    int ok = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1) {
        ok = 1;
        *v = r->element[1]->integer;
    }
    freeReplyObject(r);
    return ok;
}

int ck_fwrite(worker_t *w, const char *name, uint64_t fence, long long expect)
{
    redisReply *r = ck_cmd(w->ck, "EVALSHA %s 4 hi:%s ctr:%s acc:%s bad:%s %llu %lld %lld",
                           w->sha_fwrite, name, name, name, name, (unsigned long long)fence,
                           expect, expect + 1);
    int ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return ok;
}

/* Records the section, leaves, counts progress; returns the stop flag. */
static long long ck_leave(worker_t *w, const char *rec)
{
    redisAppendCommand(w->ck, "DEL in:%d", w->slot);
    redisAppendCommand(w->ck, "RPUSH sec %s", rec);
    redisAppendCommand(w->ck, "INCR n:%d", w->slot);
    redisAppendCommand(w->ck, "GET stop");
    long long stop = 0;
    for (int i = 0; i < 4; i++) {
        redisReply *r;
        if (redisGetReply(w->ck, (void **)&r) != REDIS_OK) {
            fprintf(stderr, "faults[w%d]: checker connection failed\n", w->slot);
            exit(3);
        }
        if (i == 3 && r->type == REDIS_REPLY_STRING)
            stop = strtoll(r->str, NULL, 10);
        freeReplyObject(r);
    }
    return stop;
}

/* ---- EDEADLK from an orphan ------------------------------------------------------------
 * docs/design.md ("known limits"): a thread whose earlier hold was cleared locally after
 * RS_ECONN while Redis still has it gets EDEADLK from Redis (same owner token, another
 * acquisition id) until that lease runs out. The same happens after a lock that failed with
 * RS_ECONN although its acquisition did run (the reply was lost in a stall). That is
 * accepted as the documented limit only when it is exactly that: this thread holds nothing
 * locally, a lock or unlock of it on this name failed with RS_ECONN within ORPHAN_WINDOW_US
 * (the longest stall, 1.4 s, plus two leases), and Redis shows a holder of this client.
 * Anything else is an API violation. */
#define ORPHAN_WINDOW_US 5000000

static uint64_t prim_fence(worker_t *w, int ni);

/* 1: the documented limit; 0: an API violation (recorded here). */
static int orphan(worker_t *w, int ni, const char *name)
{
    int64_t now = now_us();
    rs_info_t info;
    memset(&info, 0, sizeof info);
    int irc = rs_inspect(w->c, prim_names[w->prim], name, &info);
    const char *id = rs_client_id(w->c);
    size_t idlen = strlen(id);
    int ours = 0;
    for (unsigned i = 0; irc == 0 && i < info.nholders && i < RS_INFO_HOLDERS; i++)
        if (strncmp(info.holders[i], id, idlen) == 0 && info.holders[i][idlen] == ':')
            ours = 1;
    char diag[600];
    snprintf(diag, sizeof diag, "local fence %llu; previous lock %lld ms ago rc %d fence %llu; "
             "previous unlock %lld ms ago rc %d; last RS_ECONN %lld ms ago; Redis: inspect rc %d, "
             "%u holder(s) %s%s, %ld ms left, fence %llu; this client %s",
             (unsigned long long)prim_fence(w, ni),
             w->last_lock_t[ni] ? (long long)(now - w->last_lock_t[ni]) / 1000 : -1LL,
             w->last_lock_rc[ni], (unsigned long long)w->last_lock_fence[ni],
             w->last_unlock_t[ni] ? (long long)(now - w->last_unlock_t[ni]) / 1000 : -1LL,
             w->last_unlock_rc[ni],
             w->last_econn[ni] ? (long long)(now - w->last_econn[ni]) / 1000 : -1LL, irc,
             info.nholders, info.nholders ? info.holders[0] : "", ours ? " (ours)" : "",
             info.remaining_ms, (unsigned long long)info.fence, id);
    if (g_liblog)
        fprintf(stderr, "[w%d] EDEADLK on %s: %s\n", w->slot, name, diag);
    int recent = w->last_econn[ni] != 0 && now - w->last_econn[ni] <= ORPHAN_WINDOW_US;
    if (prim_fence(w, ni) == 0 && recent && (irc != 0 || ours || info.nholders == 0))
        return 1; /* (nobody: the orphan's lease ran out between the two calls) */
    api_bad(w, "w%d: lock %s returned EDEADLK though this thread holds nothing and no call "
            "of it failed with RS_ECONN in the last %d s: %s", w->slot, name,
            ORPHAN_WINDOW_US / 1000000, diag);
    return 0;
}

/* ---- the primitives -------------------------------------------------------------------- */
static int prim_lock(worker_t *w, int ni, char mode, unsigned permits, const struct timespec *dl)
{
    switch (w->prim) {
    case P_MUTEX:
        return rs_mutex_timedlock(w->h[ni], dl);
    case P_RMUTEX:
        return rs_rmutex_timedlock(w->h[ni], dl);
    case P_RWLOCK:
        return mode == 'w' ? rs_rwlock_timedwrlock(w->h[ni], dl) : rs_rwlock_timedrdlock(w->h[ni], dl);
    case P_SEM:
        return rs_sem_timedwait_n(w->h[ni], permits, dl);
    default:
        return EINVAL;
    }
}

static uint64_t prim_fence(worker_t *w, int ni)
{
    switch (w->prim) {
    case P_MUTEX:
        return rs_mutex_fence(w->h[ni]);
    case P_RMUTEX:
        return rs_rmutex_fence(w->h[ni]);
    case P_RWLOCK:
        return rs_rwlock_fence(w->h[ni]);
    case P_SEM:
        return rs_sem_fence(w->h[ni]);
    default:
        return 0;
    }
}

/* Unlocks everything the section took; returns the section's verdict: 0 (every unlock said
 * 0), RS_ELOST (one said the hold was lost), or the first other code. */
static int prim_unlock(worker_t *w, int ni, int depth, unsigned permits, const char *name)
{
    int rc = 0, u;
    switch (w->prim) {
    case P_MUTEX:
        rc = rs_mutex_unlock(w->h[ni]);
        if (rc == RS_ELOST && (u = rs_mutex_unlock(w->h[ni])) != EPERM)
            api_bad(w, "w%d %s: mutex unlock after RS_ELOST returned %d, not EPERM", w->slot, name, u);
        return rc;
    case P_RMUTEX: {
        int lost = 0, first = 0, calls = 0;
        for (int i = 0; i < depth && !lost; i++, calls++) {
            u = rs_rmutex_unlock(w->h[ni]);
            if (u == RS_ELOST)
                lost = 1;
            else if (u && !first)
                first = u;
        }
        /* a failed "leave" (RS_ECONN) keeps the count: unlock until the hold is gone */
        while (!lost && rs_rmutex_fence(w->h[ni]) != 0 && calls++ < depth + 4) {
            u = rs_rmutex_unlock(w->h[ni]);
            if (u == RS_ELOST)
                lost = 1;
            else if (u && !first)
                first = u;
        }
        if (lost) {
            if ((u = rs_rmutex_unlock(w->h[ni])) != EPERM)
                api_bad(w, "w%d %s: rmutex unlock after RS_ELOST returned %d, not EPERM "
                        "(RS_ELOST must clear every re-entry)", w->slot, name, u);
            return RS_ELOST;
        }
        if (rs_rmutex_fence(w->h[ni]) != 0)
            api_bad(w, "w%d %s: rmutex still held after %d unlocks", w->slot, name, calls);
        return first;
    }
    case P_RWLOCK:
        rc = rs_rwlock_unlock(w->h[ni]);
        if (rc == RS_ELOST && (u = rs_rwlock_unlock(w->h[ni])) != EPERM)
            api_bad(w, "w%d %s: rwlock unlock after RS_ELOST returned %d, not EPERM", w->slot, name, u);
        return rc;
    case P_SEM:
        rc = rs_sem_post_n(w->h[ni], permits);
        if (rc == RS_ELOST && (u = rs_sem_post(w->h[ni])) != EPERM)
            api_bad(w, "w%d %s: sem post after RS_ELOST returned %d, not EPERM", w->slot, name, u);
        return rc;
    default:
        return EINVAL;
    }
}

/* One critical section; returns the checker's stop flag. */
static long long section(worker_t *w)
{
    int ni = (int)rnd_range(&w->rng, 0, w->names - 1);
    char name[16];
    snprintf(name, sizeof name, "n%d", ni);
    char mode = 'x';
    unsigned permits = 1;
    if (w->prim == P_RWLOCK)
        mode = rnd_range(&w->rng, 0, 99) < 35 ? 'w' : 'r';
    if (w->prim == P_SEM)
        permits = rnd_range(&w->rng, 0, 99) < 20 ? 2 : 1;
    int exclusive = w->prim == P_MUTEX || w->prim == P_RMUTEX || mode == 'w';

    long onl0 = atomic_load(&g_onlost);
    atomic_store(&g_lost_t, 0);
    struct timespec dl = abs_in_ms(LOCK_BOUND_MS);
    int64_t t_req = now_us();
    int fake = w->sabotage && rnd_range(&w->rng, 0, 99) < 5;
    int rc = fake ? 0 : prim_lock(w, ni, mode, permits, &dl);
    if (rc == RS_ECONN)
        w->last_econn[ni] = now_us();
    if (rc == EDEADLK) {
        /* (last_lock_* still describe the previous lock: orphan() reports them) */
        /* the documented limit is counted apart; anything else was recorded by orphan() */
        count_err(w, "lock", orphan(w, ni, name) ? -EDEADLK : EDEADLK);
        sleep_us(rnd_range(&w->rng, 10, 50) * 1000);
        return stop_value(w);
    }
    if (rc != 0) {
        w->last_lock_rc[ni] = rc, w->last_lock_t[ni] = now_us();
        count_err(w, "lock", rc);
        if (rc == ETIMEDOUT) {
            /* judged by check.c (check_waits), which knows the scenario: under Redlock
             * against the other sections of the name (a handoff may take up to a lease
             * when a release is late on a master), elsewhere a liveness failure */
            char rec[96];
            snprintf(rec, sizeof rec, "%d %d %s %lld %lld", w->slot, w->gen, name,
                     (long long)t_req, (long long)now_us());
            redisReply *x = ck_cmd(w->ck, "RPUSH lwait %s", rec);
            freeReplyObject(x);
        } else if (rc != RS_ECONN && !(rc == RS_EREPL && w->min_replicas > 0))
            api_bad(w, "w%d: lock %s returned %d (%s: %s)", w->slot, name, rc, rs_strerror(rc),
                    rs_client_lasterror(w->c));
        sleep_us(rnd_range(&w->rng, 10, 50) * 1000);
        return stop_value(w);
    }
    int64_t t_acq = now_us();
    w->last_lock_rc[ni] = 0, w->last_lock_t[ni] = t_acq;
    uint64_t fence = fake ? (w->last_fence ? w->last_fence : 1) : prim_fence(w, ni);
    if (!fake && fence)
        w->last_fence = fence;
    w->last_lock_fence[ni] = fence;
    if (exclusive && fence == 0)
        api_bad(w, "w%d %s: a granted exclusive hold has fencing token 0", w->slot, name);

    int depth = 1;
    if (w->prim == P_RMUTEX && !fake) {
        int r2 = rnd_range(&w->rng, 0, 1) ? rs_rmutex_trylock(w->h[ni]) : rs_rmutex_timedlock(w->h[ni], &dl);
        if (r2 == 0) {
            depth = 2;
            if (rs_rmutex_fence(w->h[ni]) != fence)
                api_bad(w, "w%d %s: rmutex re-entry changed the token %llu -> %llu", w->slot, name,
                        (unsigned long long)fence, (unsigned long long)rs_rmutex_fence(w->h[ni]));
        } else {
            count_err(w, "reenter", r2);
            if (r2 != RS_ECONN && r2 != RS_ELOST)
                api_bad(w, "w%d %s: rmutex re-entry returned %d", w->slot, name, r2);
        }
    }

    long net_id = 0;
    int cmd = ck_enter(w, name, t_acq, &net_id);
    if (cmd == 'k') {
        ck_event(w, 'K', name, fence);
        raise(SIGKILL);
    }
    int rd = -1, wr = -1;
    long long v = 0;
    if (exclusive)
        rd = ck_fread(w, name, fence, &v);
    if (cmd == 's') {
        ck_event(w, 'S', name, fence);
        raise(SIGSTOP);
    }
    if (cmd == 'n')
        net_hold(w, net_id);
    sleep_us(rnd_range(&w->rng, 2, 25) * 1000);
    if (exclusive)
        wr = rd == 1 ? ck_fwrite(w, name, fence, v) : 0;
    int64_t t_rel = now_us();
    rc = fake ? 0 : prim_unlock(w, ni, depth, permits, name);
    int64_t t_end = now_us(); /* the release round is over (check_lost.c) */
    w->last_unlock_rc[ni] = rc, w->last_unlock_t[ni] = now_us();
    if (rc == RS_ECONN)
        w->last_econn[ni] = now_us();
    if (rc == RS_ELOST)
        w->elost++;
    else if (rc != 0) {
        count_err(w, "unlock", rc);
        if (rc != RS_ECONN)
            api_bad(w, "w%d: unlock %s returned %d (%s: %s)", w->slot, name, rc, rs_strerror(rc),
                    rs_client_lasterror(w->c));
    }
    char rec[256];
    snprintf(rec, sizeof rec, "%d %d %s %llu %lld %lld %d %d %d %u %c %ld %lld %lld %lld",
             w->slot, w->gen, name, (unsigned long long)fence, (long long)t_acq,
             (long long)t_rel, rc, rd, wr, permits, mode, atomic_load(&g_onlost) - onl0,
             (long long)t_req, (long long)atomic_load(&g_lost_t), (long long)t_end);
    long long stop = ck_leave(w, rec);
    sleep_us(rnd_range(&w->rng, 0, 15) * 1000);
    return stop;
}

/* ---- the latch ------------------------------------------------------------------------- */
/* Rounds: round r uses latch "Lr" armed with latch_count; it starts at t0 + r * round_ms.
 * Slots below latch_count are the count-down processes: slot d counts down once per round
 * at about +100 + 110 d ms (they are never killed, only stopped, so every round opens);
 * every slot then waits for the opening. Records: "D R SLOT T0 T1 RC" (T0 before the call),
 * "W R SLOT T0 T1 RC" (T1 when the wait returned). The driver's stop value is the last
 * round. */
static void latch_loop(worker_t *w)
{
    for (int r = w->start_round;; r++) {
        long long stop = stop_value(w);
        if (stop > 0 && r > stop)
            break;
        char name[24];
        snprintf(name, sizeof name, "L%d", r);
        rs_latch_t *l = NULL;
        int rc;
        for (int tries = 0; (rc = rs_latch_init(&l, w->c, name, (unsigned)w->latch_count)) != 0; tries++) {
            count_err(w, "latch_init", rc);
            if (rc != RS_ECONN || tries > 20) {
                api_bad(w, "w%d: rs_latch_init %s returned %d (%s)", w->slot, name, rc,
                        rs_client_lasterror(w->c));
                exit(5);
            }
            sleep_us(50000);
        }
        int64_t t_round = w->t0 + (int64_t)r * w->round_ms * 1000;
        char rec[160];
        if (w->slot < w->latch_count) {
            sleep_us(t_round + (100 + 110 * w->slot + rnd_range(&w->rng, 0, 50)) * 1000 - now_us());
            int64_t a = now_us();
            rc = rs_latch_count_down(l);
            int64_t b = now_us();
            snprintf(rec, sizeof rec, "D %d %d %lld %lld %d", r, w->slot, (long long)a, (long long)b, rc);
            redisReply *x = ck_cmd(w->ck, "RPUSH lat %s", rec);
            freeReplyObject(x);
            if (rc != 0)
                count_err(w, "count_down", rc);
        } else {
            sleep_us(t_round - now_us());
        }
        struct timespec dl = abs_in_ms(LATCH_BOUND_MS);
        int64_t a = now_us();
        rc = w->sabotage && rnd_range(&w->rng, 0, 99) < 10 ? 0 : rs_latch_timedwait(l, &dl);
        int64_t b = now_us();
        snprintf(rec, sizeof rec, "W %d %d %lld %lld %d", r, w->slot, (long long)a, (long long)b, rc);
        redisReply *x = ck_cmd(w->ck, "RPUSH lat %s", rec);
        freeReplyObject(x);
        if (rc != 0) {
            count_err(w, "latch_wait", rc);
            if (rc == ETIMEDOUT)
                live_bad(w, "w%d gen %d: latch %s did not open within %d ms", w->slot, w->gen,
                         name, LATCH_BOUND_MS);
        }
        rs_latch_destroy(l);
        x = ck_cmd(w->ck, "INCR n:%d", w->slot);
        freeReplyObject(x);
    }
}

/* ---- main ------------------------------------------------------------------------------ */
static const char *arg(int argc, char **argv, const char *key)
{
    size_t n = strlen(key);
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], key, n) == 0 && argv[i][n] == '=')
            return argv[i] + n + 1;
    fprintf(stderr, "faults worker: missing %s=\n", key);
    exit(2);
}

int worker_main(int argc, char **argv)
{
    worker_t w;
    memset(&w, 0, sizeof w);
    /* the driver's death ends the worker (it also ends the redis-servers) */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        exit(2);
    w.prim = (prim_t)atoi(arg(argc, argv, "prim"));
    w.slot = atoi(arg(argc, argv, "slot"));
    w.gen = atoi(arg(argc, argv, "gen"));
    w.rng = strtoull(arg(argc, argv, "seed"), NULL, 10);
    w.url = arg(argc, argv, "url");
    w.data_port = atoi(arg(argc, argv, "port"));
    w.ports = arg(argc, argv, "ports");
    w.min_replicas = atoi(arg(argc, argv, "minrep"));
    w.ck_port = atoi(arg(argc, argv, "ck"));
    w.prefix = arg(argc, argv, "prefix");
    w.lease_ms = atol(arg(argc, argv, "lease"));
    w.timeout_ms = atol(arg(argc, argv, "timeout"));
    w.names = atoi(arg(argc, argv, "names"));
    w.sem_size = atoi(arg(argc, argv, "semsize"));
    w.latch_count = atoi(arg(argc, argv, "latchk"));
    w.round_ms = atol(arg(argc, argv, "round"));
    w.t0 = strtoll(arg(argc, argv, "t0"), NULL, 10);
    w.start_round = atoi(arg(argc, argv, "round0"));
    w.sabotage = atoi(arg(argc, argv, "sab"));
    w.async_pending = atoi(arg(argc, argv, "async"));
    g_slot = w.slot;
    const char *ll = getenv("FAULTS_LIBLOG");
    g_liblog = ll ? atoi(ll) : 0;
    if (w.names < 1 || w.names > MAX_NAMES)
        w.names = 1;

    w.ck = ck_connect(w.ck_port);
    ck_load(w.ck, CK_FREAD, w.sha_fread);
    ck_load(w.ck, CK_FWRITE, w.sha_fwrite);
    ck_load(w.ck, CK_ENTER, w.sha_enter);

    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = w.url;
    cfg.prefix = w.prefix;
    cfg.lease_ms = w.lease_ms;
    cfg.timeout_ms = w.timeout_ms;
    cfg.min_replicas = w.min_replicas;
    cfg.replica_timeout_ms = 1500;
    cfg.on_lost = on_lost;
    cfg.log = lib_log;
    int rc;
    int64_t give_up = now_us() + 30000000;
    while ((rc = rs_client_open(&w.c, &cfg)) != 0) {
        if (rc != RS_ECONN || now_us() > give_up) {
            fprintf(stderr, "faults[w%d]: rs_client_open: %d %s\n", w.slot, rc,
                    rs_client_lasterror(NULL));
            exit(4);
        }
        sleep_us(50000);
    }

    for (int i = 0; w.prim <= P_SEM && i < w.names; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        rc = EINVAL;
        for (int tries = 0; tries < 40; tries++) {
            switch (w.prim) {
            case P_MUTEX:
                rc = rs_mutex_init((rs_mutex_t **)&w.h[i], w.c, name);
                break;
            case P_RMUTEX:
                rc = rs_rmutex_init((rs_rmutex_t **)&w.h[i], w.c, name);
                break;
            case P_RWLOCK:
                rc = rs_rwlock_init((rs_rwlock_t **)&w.h[i], w.c, name);
                break;
            case P_SEM:
                rc = rs_sem_init((rs_sem_t **)&w.h[i], w.c, name, (unsigned)w.sem_size);
                break;
            default:
                break;
            }
            if (rc != RS_ECONN)
                break;
            sleep_us(50000);
        }
        if (rc != 0) {
            fprintf(stderr, "faults[w%d]: init %s: %d %s\n", w.slot, name, rc,
                    rs_client_lasterror(w.c));
            exit(4);
        }
    }

    if (w.prim == P_LATCH)
        latch_loop(&w);
    else if (w.prim == P_ONCE)
        once_loop(&w);
    else if (w.prim == P_BARRIER)
        barrier_loop(&w);
    else if (w.prim == P_COND)
        cond_loop(&w);
    else if (w.async_pending > 0)
        async_loop(&w);
    else
        while (section(&w) == 0) {
        }

    for (int i = 0; w.prim <= P_SEM && i < w.names; i++) {
        switch (w.prim) {
        case P_MUTEX:
            rc = rs_mutex_destroy(w.h[i]);
            break;
        case P_RMUTEX:
            rc = rs_rmutex_destroy(w.h[i]);
            break;
        case P_RWLOCK:
            rc = rs_rwlock_destroy(w.h[i]);
            break;
        case P_SEM:
            rc = rs_sem_destroy(w.h[i]);
            break;
        default:
            rc = 0;
            break;
        }
        if (rc != 0)
            api_bad(&w, "w%d: destroy of n%d returned %d after every unlock", w.slot, i, rc);
    }
    rc = rs_client_close(w.c);
    if (rc != 0)
        api_bad(&w, "w%d: rs_client_close returned %d", w.slot, rc);
    int socks = 0;
    for (const char *p = w.ports; *p;) {
        socks += sockets_to(atoi(p));
        p += strcspn(p, ",");
        p += *p == ',';
    }
    /* once: a failed fn's run lost meanwhile is told by on_lost only (run returns fn's
     * value), maybe after the run returned: up to one on_lost per failed run is its own */
    long onlost = atomic_load(&g_onlost);
    if (w.prim == P_ONCE && onlost > w.elost && onlost - w.elost <= w.fail_runs)
        w.elost = onlost;
    redisReply *r = ck_cmd(w.ck, "SET exit:%d:%d %ld:%ld:%d", w.slot, w.gen, w.elost, onlost,
                           socks);
    freeReplyObject(r);
    redisFree(w.ck);
    return 0;
}
