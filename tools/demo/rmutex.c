/*
 * rmutex.c - the rs_rmutex_t part: nested helpers lock the same recursive mutex.
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

/* ----- part: the recursive mutex -------------------------------------------------------- */

/* The holder's side: transfer() locks and calls debit(), which locks and calls audit(),
 * which locks with trylock (the holder always gets it). After each lock and unlock the hold
 * count is read back with rs_inspect. */
typedef struct rm_holder {
    demo_t *d;
    rs_client_t *c;
    rs_rmutex_t *m;
    int err;
} rm_holder_t;

static void rm_note(rm_holder_t *x, int step, int level)
{
    rs_info_t info;
    int rc = rs_inspect(x->c, "rmutex", RM_NAME, &info);
    if (rc) {
        say("rs_inspect: %s", rs_strerror(rc));
        x->err = 1;
        return;
    }
    x->d->sh->rm_count[step] = info.count;
    if (level >= 0) {
        x->d->sh->rm_fence[level] = rs_rmutex_fence(x->m);
        x->d->sh->rm_info_fence = info.fence;
    }
}

static int rm_fail(rm_holder_t *x, const char *what, int rc)
{
    say("%s: %s (%s)", what, rs_strerror(rc), rs_client_lasterror(x->c));
    x->err = 1;
    return rc;
}

static void rm_audit(rm_holder_t *x)
{
    int rc = rs_rmutex_trylock(x->m);
    if (rc) {
        rm_fail(x, "audit: rs_rmutex_trylock", rc);
        return;
    }
    rm_note(x, 2, 2);
    atomic_store(&x->d->sh->rm_held, 1);
    /* hold on until the other process is queued, as rs_inspect shows */
    double end = now_ms() + 5000;
    rs_info_t info = {0};
    while (now_ms() < end && (rs_inspect(x->c, "rmutex", RM_NAME, &info) != 0 || !info.waiters))
        tu_sleep_ms(5);
    if (!info.waiters) {
        say("the other process never queued for \"%s\"", RM_NAME);
        x->err = 1;
    }
    tu_sleep_ms(RM_PAUSE_MS);
    if ((rc = rs_rmutex_unlock(x->m)) != 0)
        rm_fail(x, "audit: rs_rmutex_unlock", rc);
    rm_note(x, 3, -1);
}

static void rm_debit(rm_holder_t *x)
{
    int rc = rs_rmutex_lock(x->m);
    if (rc) {
        rm_fail(x, "debit: rs_rmutex_lock", rc);
        return;
    }
    rm_note(x, 1, 1);
    rm_audit(x);
    tu_sleep_ms(RM_PAUSE_MS);
    if ((rc = rs_rmutex_unlock(x->m)) != 0)
        rm_fail(x, "debit: rs_rmutex_unlock", rc);
    rm_note(x, 4, -1);
}

static void rm_transfer(rm_holder_t *x)
{
    int rc = rs_rmutex_lock(x->m);
    if (rc) {
        rm_fail(x, "transfer: rs_rmutex_lock", rc);
        return;
    }
    rm_note(x, 0, 0);
    rm_debit(x);
    tu_sleep_ms(RM_PAUSE_MS);
    x->d->sh->rm_t_release = now_ms();
    atomic_store(&x->d->sh->rm_released, 1);
    if ((rc = rs_rmutex_unlock(x->m)) != 0)
        rm_fail(x, "transfer: rs_rmutex_unlock", rc);
}

static int child_rm_holder(demo_t *d, int unused)
{
    (void)unused;
    rm_holder_t x = {d, open_client(d, 0), NULL, 0};
    if (!x.c)
        return 1;
    int rc = rs_rmutex_init(&x.m, x.c, RM_NAME);
    if (rc == 0) {
        rm_transfer(&x);
        d->sh->rm_extra_unlock = rs_rmutex_unlock(x.m); /* one too many */
    } else {
        rm_fail(&x, "rs_rmutex_init", rc);
    }
    rs_rmutex_destroy(x.m);
    rs_client_close(x.c);
    return x.err;
}

static int child_rm_waiter(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_rmutex_t *m = NULL;
    int rc = c ? rs_rmutex_init(&m, c, RM_NAME) : -1;
    if (rc == 0 && wait_flag(&sh->rm_held, 1, 5000) != 0)
        rc = -1;
    if (rc == 0) {
        sh->rm_t_wait = now_ms();
        struct timespec dl = tu_abs_in(WAIT_MS);
        rc = rs_rmutex_timedlock(m, &dl);
        sh->rm_t_got = now_ms();
        if (rc == 0) {
            sh->rm_got_early = !atomic_load(&sh->rm_released);
            sh->rm_w_fence = rs_rmutex_fence(m);
            rc = rs_rmutex_unlock(m);
        } else {
            say("waiter: rs_rmutex_timedlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        }
    }
    rs_rmutex_destroy(m);
    rs_client_close(c);
    return rc != 0;
}

int part_rmutex(demo_t *d)
{
    struct shared *sh = d->sh;
    pid_t p[2];
    p[0] = spawn(d, child_rm_holder, 0);
    p[1] = spawn(d, child_rm_waiter, 0);
    int bad = reap(p, 2);
    const long want[5] = {1, 2, 3, 2, 1};
    int counts_ok = 1;
    for (int i = 0; i < 5; i++)
        counts_ok &= sh->rm_count[i] == want[i];
    uint64_t f = sh->rm_fence[0];
    int fence_ok = f && sh->rm_fence[1] == f && sh->rm_fence[2] == f && sh->rm_info_fence == f;
    double wait = sh->rm_t_got - sh->rm_t_wait, after = sh->rm_t_got - sh->rm_t_release;

    say("process %d: transfer() locks \"%s\", calls debit() which locks, calls audit() "
        "which trylocks:", (int)p[0], RM_NAME);
    say("  hold count (rs_inspect \"rmutex\" info.count): %ld, %ld, %ld; after the inner "
        "unlocks %ld, %ld%s", sh->rm_count[0], sh->rm_count[1], sh->rm_count[2],
        sh->rm_count[3], sh->rm_count[4], counts_ok ? "" : "  <-- expected 1, 2, 3, 2, 1");
    say("  fencing token at the three levels: %" PRIu64 ", %" PRIu64 ", %" PRIu64 "%s",
        sh->rm_fence[0], sh->rm_fence[1], sh->rm_fence[2],
        fence_ok ? " (the same)" : "  <-- NOT the same (or not rs_inspect's)");
    if (sh->rm_got_early || !sh->rm_w_fence)
        say("process %d: %s", (int)p[1],
            sh->rm_w_fence ? "got the lock BEFORE the outermost unlock" : "never got the lock");
    else
        say("process %d waited %.0f ms and got it %.1f ms after the outermost unlock (fence "
            "%" PRIu64 ")", (int)p[1], wait, after, sh->rm_w_fence);
    int extra_ok = sh->rm_extra_unlock == EPERM;
    say("an unlock beyond the count: %s%s",
        sh->rm_extra_unlock == EPERM ? "EPERM" : rs_strerror(sh->rm_extra_unlock),
        extra_ok ? "" : "  <-- expected EPERM");
    if (bad)
        say("%d of 2 processes reported an error", bad);
    return bad || !counts_ok || !fence_ok || sh->rm_got_early || sh->rm_w_fence <= f ||
                   !extra_ok || after < 0
               ? 1
               : 0;
}
