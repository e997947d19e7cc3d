/*
 * inspect.c - the rs_inspect part: who holds a mutex, and who waits.
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

/* ----- part: inspection ------------------------------------------------------------------ */

/* The holder: locks with a 5 s lease, says who it is, unlocks when told. */
static int child_insp_holder(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, INSP_LEASE_MS);
    rs_mutex_t *m = NULL;
    struct timespec dl = tu_abs_in(WAIT_MS);
    if (!c || rs_mutex_init(&m, c, INSP_NAME) != 0 || rs_mutex_timedlock(m, &dl) != 0)
        return 1;
    snprintf(sh->insp_h_id, sizeof sh->insp_h_id, "%s", rs_client_id(c));
    sh->insp_h_fence = rs_mutex_fence(m);
    atomic_store(&sh->insp_held, 1);
    int err = wait_flag(&sh->insp_release, 1, WAIT_MS) != 0;
    err |= rs_mutex_unlock(m) != 0;
    rs_mutex_destroy(m);
    rs_client_close(c);
    return err;
}

/* The waiter: queues, and once it has the mutex holds it until told. */
static int child_insp_waiter(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_mutex_t *m = NULL;
    if (!c || rs_mutex_init(&m, c, INSP_NAME) != 0)
        return 1;
    snprintf(sh->insp_w_id, sizeof sh->insp_w_id, "%s", rs_client_id(c));
    struct timespec dl = tu_abs_in(WAIT_MS);
    int err = rs_mutex_timedlock(m, &dl) != 0;
    if (!err) {
        sh->insp_w_fence = rs_mutex_fence(m);
        atomic_store(&sh->insp_got, 1);
        err |= wait_flag(&sh->insp_release2, 1, WAIT_MS) != 0;
        err |= rs_mutex_unlock(m) != 0;
    }
    rs_mutex_destroy(m);
    rs_client_close(c);
    return err;
}

/* "ABCD...:N" held by the client id? */
static int held_by(const char *holder, const char *id)
{
    size_t n = strlen(id);
    return n > 0 && strncmp(holder, id, n) == 0 && holder[n] == ':';
}

static void insp_show(const rs_info_t *in, int holder_pid)
{
    say("  %s held by %s (process %d), lease left %ld ms, fence %" PRIu64 ", %u waiter(s)",
        in->kind, in->nholders ? in->holders[0] : "nobody", holder_pid, in->remaining_ms,
        in->fence, in->waiters);
}

int part_inspect(demo_t *d)
{
    struct shared *sh = d->sh;
    pid_t p[2] = {-1, -1};
    rs_client_t *c = open_client(d, 0);
    int fail = 1;
    if (!c)
        return 1;
    p[0] = spawn(d, child_insp_holder, 0);
    if (wait_flag(&sh->insp_held, 1, WAIT_MS) != 0) {
        say("process %d could not take \"%s\"", (int)p[0], INSP_NAME);
        goto out;
    }
    p[1] = spawn(d, child_insp_waiter, 0);
    rs_info_t in = {0};
    double end = now_ms() + WAIT_MS;
    int rc;
    while ((rc = rs_inspect(c, "mutex", INSP_NAME, &in)) == 0 && !in.waiters && now_ms() < end)
        tu_sleep_ms(5);
    if (rc) {
        say("rs_inspect: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        goto out;
    }
    say("process %d holds \"%s\" (lease %d ms), process %d waits; rs_inspect says:", (int)p[0],
        INSP_NAME, INSP_LEASE_MS, (int)p[1]);
    insp_show(&in, (int)p[0]);
    int ok1 = in.exists && in.nholders == 1 && held_by(in.holders[0], sh->insp_h_id) &&
              in.remaining_ms > 0 && in.remaining_ms <= INSP_LEASE_MS &&
              in.fence == sh->insp_h_fence && in.waiters == 1;
    if (!ok1)
        say("  <-- expected holder %s:*, 0 < lease left <= %d, fence %" PRIu64 ", 1 waiter",
            sh->insp_h_id, INSP_LEASE_MS, sh->insp_h_fence);
    atomic_store(&sh->insp_release, 1);
    if (wait_flag(&sh->insp_got, 1, WAIT_MS) != 0) {
        say("the waiter never got the mutex");
        goto out;
    }
    if ((rc = rs_inspect(c, "mutex", INSP_NAME, &in)) != 0) {
        say("rs_inspect: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        goto out;
    }
    say("after process %d unlocks:", (int)p[0]);
    insp_show(&in, (int)p[1]);
    int ok2 = in.nholders == 1 && held_by(in.holders[0], sh->insp_w_id) &&
              in.fence == sh->insp_w_fence && in.fence > sh->insp_h_fence && in.waiters == 0;
    if (!ok2)
        say("  <-- expected holder %s:*, fence %" PRIu64 " (above the first), 0 waiters",
            sh->insp_w_id, sh->insp_w_fence);
    atomic_store(&sh->insp_release2, 1);
    int bad = reap(p, 2);
    p[0] = p[1] = -1;
    if (bad)
        say("%d of 2 processes reported an error", bad);
    fail = !ok1 || !ok2 || bad;
out:
    atomic_store(&sh->insp_release, 1);
    atomic_store(&sh->insp_release2, 1);
    kill_all(p, 2);
    rs_client_close(c);
    return fail;
}
