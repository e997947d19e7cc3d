/*
 * sem.c - the rs_sem_t part: a slow API, fleet-wide at most 2 calls at once; a crashed holder.
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

/* ----- part: the semaphore --------------------------------------------------------------- */

static int child_sem_caller(demo_t *d, int id)
{
    (void)id;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    redisContext *rc = ts_connect(&d->srv);
    rs_sem_t *s = NULL;
    int err = !c || !rc;
    int e = err ? 0 : rs_sem_init(&s, c, SEM_NAME, SEM_PERMITS);
    if (e) {
        say("rs_sem_init: %s", rs_strerror(e));
        err = 1;
    }
    atomic_fetch_add(&sh->ready, 1);
    if (!err && wait_flag(&sh->go, 1, WAIT_MS) != 0)
        err = 1;
    for (int i = 0; i < SEM_CALLS && !err; i++) {
        struct timespec dl = tu_abs_in(WAIT_MS);
        if ((e = rs_sem_timedwait(s, &dl)) != 0) {
            say("rs_sem_timedwait: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
            err = 1;
            break;
        }
        long long unused;
        err |= gauge(rc, d, "api:inside", "api:none", 1, &unused) != 0;
        tu_sleep_ms(SEM_CALL_MS); /* the slow API */
        err |= gauge(rc, d, "api:inside", "api:none", -1, &unused) != 0;
        if ((e = rs_sem_post(s)) != 0) {
            say("rs_sem_post: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
            err = 1;
        }
    }
    if (rc)
        redisFree(rc);
    rs_sem_destroy(s);
    rs_client_close(c);
    return err;
}

/* Takes a permit with a short lease, says so, then hangs until kill -9. */
static int child_sem_crash(demo_t *d, int unused)
{
    (void)unused;
    rs_client_t *c = open_client(d, SEM_CRASH_LEASE_MS);
    rs_sem_t *s = NULL;
    struct timespec dl = tu_abs_in(WAIT_MS);
    if (!c || rs_sem_init(&s, c, SEM_CRASH_NAME, SEM_PERMITS) != 0 || rs_sem_timedwait(s, &dl) != 0)
        return 1;
    atomic_store(&d->sh->sem_k_held, 1);
    for (;;)
        pause();
}

/* Queues for a permit of the full semaphore; notes when it gets one. */
static int child_sem_waiter(demo_t *d, int unused)
{
    (void)unused;
    rs_client_t *c = open_client(d, 0);
    rs_sem_t *s = NULL;
    int e = c ? rs_sem_init(&s, c, SEM_CRASH_NAME, 0) : -1;
    if (e == 0) {
        struct timespec dl = tu_abs_in(WAIT_MS);
        e = rs_sem_timedwait(s, &dl);
        d->sh->sem_t_got = now_ms();
        if (e == 0)
            e = rs_sem_post(s);
        else
            say("waiter: rs_sem_timedwait: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
    }
    rs_sem_destroy(s);
    rs_client_close(c);
    return e != 0;
}

static int sem_crash(demo_t *d)
{
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_sem_t *s = NULL;
    pid_t p[2] = {-1, -1};
    int fail = 1, held = 0;
    struct timespec dl = tu_abs_in(WAIT_MS);
    if (!c || rs_sem_init(&s, c, SEM_CRASH_NAME, SEM_PERMITS) != 0 || rs_sem_timedwait(s, &dl) != 0) {
        say("the demo could not take a permit of \"%s\"", SEM_CRASH_NAME);
        goto out;
    }
    held = 1;
    p[0] = spawn(d, child_sem_crash, 0);
    if (p[0] < 0 || wait_flag(&sh->sem_k_held, 1, WAIT_MS) != 0) {
        say("process %d could not take the second permit", (int)p[0]);
        goto out;
    }
    p[1] = spawn(d, child_sem_waiter, 0);
    rs_info_t info = {0};
    double end = now_ms() + WAIT_MS;
    while (now_ms() < end && (rs_inspect(c, "sem", SEM_CRASH_NAME, &info) != 0 || !info.waiters))
        tu_sleep_ms(5);
    if (info.waiters != 1 || info.free != 0) {
        say("expected a full semaphore and one waiter, rs_inspect says %ld free, %u waiting",
            info.free, info.waiters);
        goto out;
    }
    say("\"%s\": the demo and process %d (lease %d ms) hold the 2 permits, process %d waits;",
        SEM_CRASH_NAME, (int)p[0], SEM_CRASH_LEASE_MS, (int)p[1]);
    double t_kill = now_ms();
    kill(p[0], SIGKILL);
    waitpid(p[0], NULL, 0);
    p[0] = -1;
    int bad = reap(&p[1], 1);
    p[1] = -1;
    double after = sh->sem_t_got - t_kill;
    if (bad) {
        say("kill -9 the holder: the waiter did not get its permit");
        goto out;
    }
    say("kill -9 the holder: the waiter got its permit %.0f ms later, when the lease ran out",
        after);
    fail = after > SEM_CRASH_LEASE_MS + 1000;
    if (fail)
        say("that took longer than the lease (%d ms) + 1000 ms", SEM_CRASH_LEASE_MS);
out:
    kill_all(p, 2);
    if (held && rs_sem_post(s) != 0)
        fail = 1;
    int v = -1;
    if (s && (rs_sem_getvalue(s, &v) != 0 || v != SEM_PERMITS)) {
        say("afterwards rs_sem_getvalue: %d of %d permits free  <-- expected all", v, SEM_PERMITS);
        fail = 1;
    } else if (s && !fail) {
        say("once the demo and the waiter posted, rs_sem_getvalue: %d of %d permits free", v,
            SEM_PERMITS);
    }
    rs_sem_destroy(s);
    rs_client_close(c);
    return fail;
}

int part_sem(demo_t *d)
{
    struct shared *sh = d->sh;
    int calls = SEM_PROCS * SEM_CALLS;
    say("%d processes x %d calls of a slow API (%d ms) through \"%s\" (%d permits):",
        SEM_PROCS, SEM_CALLS, SEM_CALL_MS, SEM_NAME, SEM_PERMITS);
    pid_t p[SEM_PROCS];
    for (int i = 0; i < SEM_PROCS; i++)
        p[i] = spawn(d, child_sem_caller, i);
    int fail = wait_flag(&sh->ready, SEM_PROCS, WAIT_MS) != 0;
    double t0 = now_ms();
    atomic_store(&sh->go, 1);
    int bad = reap(p, SEM_PROCS);
    double took = now_ms() - t0;
    long long mx = get_key(d, "api:inside:max");
    double least = (double)calls * SEM_CALL_MS / SEM_PERMITS;
    say("at most %lld calls at once (INCR/DECR gauge)%s; %d calls took %.2f s (at least "
        "%.2f s with %d at a time)", mx, mx == SEM_PERMITS ? "" : "  <-- expected exactly 2",
        calls, took / 1e3, least / 1e3, SEM_PERMITS);
    if (bad)
        say("%d of %d processes reported an error", bad, SEM_PROCS);
    fail |= bad || mx != SEM_PERMITS || took < least * 0.95;
    fail |= sem_crash(d);
    return fail;
}
