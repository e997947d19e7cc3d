/*
 * mutex.c - the rs_mutex_t parts: a counter race without and with a lock, trylock, a crashed holder.
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

/* ----- part: the race without a lock --------------------------------------------------- */

static int child_unlocked(demo_t *d, int id)
{
    (void)id;
    char key[96];
    key_of(d, key, sizeof key, "counter:unlocked");
    redisContext *rc = ts_connect(&d->srv);
    if (!rc)
        return 1;
    int err = 0;
    for (int i = 0; i < NINCR && !err; i++)
        err = increment(rc, key) != 0;
    redisFree(rc);
    return err;
}

int part_without_lock(demo_t *d)
{
    say("%d processes each do %d x (GET counter; sleep %d us; SET counter+1), no lock:",
        NPROC, NINCR, RACE_GAP_US);
    pid_t pids[NPROC];
    double t0 = now_ms();
    for (int i = 0; i < NPROC; i++)
        pids[i] = spawn(d, child_unlocked, i);
    int bad = reap(pids, NPROC);
    double t1 = now_ms();
    char key[96];
    key_of(d, key, sizeof key, "counter:unlocked");
    long long got = ts_cmd_int(&d->srv, "GET %s", key);
    long long want = (long long)NPROC * NINCR;
    if (bad || got < 0) {
        say("a child failed (%d of %d)", bad, NPROC);
        return 1;
    }
    say("without a lock:   counter = %lld of %lld expected: %lld updates lost  (%.0f ms)",
        got, want, want - got, t1 - t0);
    return 0; /* losing updates is what this part shows, not a failure */
}

/* ----- part: the same race with rs_mutex_t --------------------------------------------- */

/* Child exit codes of the locked run. */
#define CHILD_OK 0
#define CHILD_ERR 1
#define CHILD_FENCE 2 /* a fencing token did not rise */

static int child_locked(demo_t *d, int id)
{
    (void)id;
    char key[96], fkey[96], firstkey[96];
    key_of(d, key, sizeof key, "counter:locked");
    key_of(d, fkey, sizeof fkey, "fence:last");
    key_of(d, firstkey, sizeof firstkey, "fence:first");
    rs_client_t *c = open_client(d, 0);
    redisContext *rc = ts_connect(&d->srv);
    rs_mutex_t *m = NULL;
    int status = CHILD_ERR;
    if (!c || !rc)
        goto out;
    int err = rs_mutex_init(&m, c, "demo:counter");
    if (err) {
        say("rs_mutex_init: %s", rs_strerror(err));
        goto out;
    }
    status = CHILD_OK;
    for (int i = 0; i < NINCR && status == CHILD_OK; i++) {
        err = rs_mutex_lock(m);
        if (err) {
            say("rs_mutex_lock: %s (%s)", rs_strerror(err), rs_client_lasterror(c));
            status = CHILD_ERR;
            break;
        }
        /* inside the critical section: the token must be above every earlier holder's */
        uint64_t fence = rs_mutex_fence(m);
        long long last = get_ll(rc, fkey);
        if (last < 0 || fence <= (uint64_t)last)
            status = CHILD_FENCE;
        char fs[32];
        snprintf(fs, sizeof fs, "%" PRIu64, fence);
        redisReply *r = redisCommand(rc, "SET %s %s", fkey, fs);
        if (r)
            freeReplyObject(r);
        r = redisCommand(rc, "SET %s %s NX", firstkey, fs);
        if (r)
            freeReplyObject(r);
        if (increment(rc, key) != 0)
            status = CHILD_ERR;
        err = rs_mutex_unlock(m);
        if (err) {
            say("rs_mutex_unlock: %s (%s)", rs_strerror(err), rs_client_lasterror(c));
            status = CHILD_ERR;
        }
    }
out:
    if (rc)
        redisFree(rc);
    rs_mutex_destroy(m);
    rs_client_close(c);
    return status;
}

int part_with_mutex(demo_t *d)
{
    say("the same %d x %d increments, each one inside rs_mutex_lock/rs_mutex_unlock:",
        NPROC, NINCR);
    pid_t pids[NPROC];
    double t0 = now_ms();
    for (int i = 0; i < NPROC; i++)
        pids[i] = spawn(d, child_locked, i);
    int fence_bad = 0, err = 0;
    for (int i = 0; i < NPROC; i++) {
        int st;
        if (pids[i] <= 0 || waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st))
            err++;
        else if (WEXITSTATUS(st) == CHILD_FENCE)
            fence_bad++;
        else if (WEXITSTATUS(st) != CHILD_OK)
            err++;
    }
    double t1 = now_ms();
    char key[96], fkey[96], firstkey[96], first[32] = "?", last[32] = "?";
    key_of(d, key, sizeof key, "counter:locked");
    key_of(d, fkey, sizeof fkey, "fence:last");
    key_of(d, firstkey, sizeof firstkey, "fence:first");
    long long got = ts_cmd_int(&d->srv, "GET %s", key);
    long long want = (long long)NPROC * NINCR;
    ts_cmd_str(&d->srv, first, sizeof first, "GET %s", firstkey);
    ts_cmd_str(&d->srv, last, sizeof last, "GET %s", fkey);
    int ok = got == want;
    if (ok)
        say("with rs_mutex_t:  counter = %lld of %lld: no update lost  (%.0f ms, %.0f us per "
            "locked increment)", got, want, t1 - t0, (t1 - t0) * 1e3 / (double)want);
    else
        say("with rs_mutex_t:  counter = %lld of %lld: %lld UPDATES LOST", got, want, want - got);
    if (fence_bad)
        say("fencing tokens:   first %s, last %s: a token did NOT rise above the previous "
            "holder's", first, last);
    else
        say("fencing tokens:   first %s, last %s: they rose with every one of the %lld holds",
            first, last, want);
    if (err)
        say("%d of %d processes reported an error", err, NPROC);
    return ok && !fence_bad && !err ? 0 : 1;
}

/* ----- part: trylock while another process holds --------------------------------------- */

/* Child: trylock must return `expect`; on success it unlocks again. */
static int child_trylock(demo_t *d, int expect)
{
    rs_client_t *c = open_client(d, 0);
    if (!c)
        return 1;
    rs_mutex_t *m = NULL;
    int rc = rs_mutex_init(&m, c, "demo:try");
    if (rc == 0) {
        rc = rs_mutex_trylock(m);
        say("  process %d: rs_mutex_trylock = %s%s", (int)getpid(), rc ? "" : "0, ",
            rc == EBUSY ? "EBUSY (held by another process)" : rs_strerror(rc));
        if (rc == 0)
            rs_mutex_unlock(m);
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return rc == expect ? 0 : 1;
}

int part_trylock(demo_t *d)
{
    rs_client_t *c = open_client(d, 0);
    if (!c)
        return 1;
    rs_mutex_t *m = NULL;
    int fail = 0;
    int rc = rs_mutex_init(&m, c, "demo:try");
    if (rc == 0)
        rc = rs_mutex_lock(m);
    if (rc) {
        say("locking demo:try: %s", rs_strerror(rc));
        fail = 1;
    } else {
        say("process %d holds \"demo:try\" (fence %" PRIu64 "); another process tries:",
            (int)getpid(), rs_mutex_fence(m));
        pid_t p = spawn(d, child_trylock, EBUSY);
        fail |= reap(&p, 1) != 0;
        rc = rs_mutex_unlock(m);
        fail |= rc != 0;
        say("process %d unlocked it; a new process tries:", (int)getpid());
        p = spawn(d, child_trylock, 0);
        fail |= reap(&p, 1) != 0;
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return fail;
}

/* ----- part: a holder killed with kill -9 ---------------------------------------------- */

/* Child: takes the lock with a short lease, writes its fence to the pipe, then hangs. */
static int child_crash(demo_t *d, int wfd)
{
    rs_client_t *c = open_client(d, CRASH_LEASE_MS);
    rs_mutex_t *m = NULL;
    uint64_t fence = 0;
    if (c && rs_mutex_init(&m, c, "demo:crash") == 0 && rs_mutex_lock(m) == 0)
        fence = rs_mutex_fence(m);
    if (write(wfd, &fence, sizeof fence) != (ssize_t)sizeof fence || !fence)
        return 1;
    for (;;)
        pause(); /* until kill -9: no unlock, no close */
}

int part_crash(demo_t *d)
{
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    pid_t p = spawn(d, child_crash, pfd[1]);
    close(pfd[1]);
    uint64_t dead_fence = 0;
    ssize_t n = p > 0 ? read(pfd[0], &dead_fence, sizeof dead_fence) : -1;
    close(pfd[0]);
    if (n != (ssize_t)sizeof dead_fence || !dead_fence) {
        say("the holder process could not take \"demo:crash\"");
        if (p > 0) {
            kill(p, SIGKILL);
            waitpid(p, NULL, 0);
        }
        return 1;
    }
    say("process %d holds \"demo:crash\" with a %d ms lease (fence %" PRIu64 "); kill -9 it",
        (int)p, CRASH_LEASE_MS, dead_fence);
    rs_client_t *c = open_client(d, 0);
    double t0 = now_ms();
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    rs_mutex_t *m = NULL;
    int rc = c ? rs_mutex_init(&m, c, "demo:crash") : 1;
    if (rc == 0) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 5; /* the lease is 1 s: 5 s means something is wrong */
        rc = rs_mutex_timedlock(m, &dl);
    }
    double t1 = now_ms();
    int fail = 1;
    if (rc == 0) {
        uint64_t f = rs_mutex_fence(m);
        say("process %d got it %.0f ms after the kill (the dead holder's lease ran out), "
            "fence %" PRIu64 " > %" PRIu64 "%s",
            (int)getpid(), t1 - t0, f, dead_fence, f > dead_fence ? "" : "  <-- NOT larger!");
        fail = f <= dead_fence || t1 - t0 > CRASH_LEASE_MS + 500;
        if (t1 - t0 > CRASH_LEASE_MS + 500)
            say("that took longer than the lease (%d ms) + 500 ms", CRASH_LEASE_MS);
        fail |= rs_mutex_unlock(m) != 0;
    } else if (c) {
        say("rs_mutex_timedlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return fail;
}
