/*
 * latch.c - the rs_latch_t part: a coordinator waits for a batch of workers.
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

/* ----- part: the countdown latch --------------------------------------------------------- */

static int child_latch_coordinator(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_latch_t *l = NULL;
    int e = c ? rs_latch_init(&l, c, LATCH_NAME, LATCH_WORKERS) : -1;
    if (e == 0) {
        atomic_store(&sh->latch_armed, 1);
        sh->latch_t_wait = now_ms();
        struct timespec dl = tu_abs_in(WAIT_MS);
        e = rs_latch_timedwait(l, &dl);
        sh->latch_t_open = now_ms();
        if (e)
            say("coordinator: rs_latch_timedwait: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
    } else if (c) {
        say("coordinator: rs_latch_init: %s (%s)", rs_strerror(e), rs_client_lasterror(c));
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    return e != 0;
}

static int child_latch_worker(demo_t *d, int i)
{
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_latch_t *l = NULL;
    int e = c ? rs_latch_init(&l, c, LATCH_NAME, 0) : -1; /* 0: attach only */
    if (e == 0 && wait_flag(&sh->latch_armed, 1, WAIT_MS) != 0)
        e = -1;
    if (e == 0) {
        tu_sleep_ms(LATCH_WORK_MS + i * LATCH_STEP_MS); /* the piece of work */
        sh->latch_t_down[i] = now_ms();
        if ((e = rs_latch_count_down(l)) != 0)
            say("worker: rs_latch_count_down: %s", rs_strerror(e));
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    return e != 0;
}

/* Comes after the opening and calls init with a count again: the latch must stay open. */
static int child_latch_late(demo_t *d, int unused)
{
    (void)unused;
    struct shared *sh = d->sh;
    rs_client_t *c = open_client(d, 0);
    rs_latch_t *l = NULL;
    sh->latch_late_count = -1;
    sh->latch_late_rc = -1;
    int e = c ? rs_latch_init(&l, c, LATCH_NAME, LATCH_WORKERS) : -1;
    unsigned n = 0;
    if (e == 0 && (e = rs_latch_getcount(l, &n)) == 0) {
        sh->latch_late_count = (long)n;
        struct timespec dl = tu_abs_in(2000);
        double t0 = now_ms();
        sh->latch_late_rc = rs_latch_timedwait(l, &dl);
        sh->latch_late_ms = now_ms() - t0;
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    return e != 0;
}

int part_latch(demo_t *d)
{
    struct shared *sh = d->sh;
    pid_t p[1 + LATCH_WORKERS];
    p[0] = spawn(d, child_latch_coordinator, 0);
    for (int i = 0; i < LATCH_WORKERS; i++)
        p[1 + i] = spawn(d, child_latch_worker, i);
    int bad = reap(p, 1 + LATCH_WORKERS);
    double last = 0;
    for (int i = 0; i < LATCH_WORKERS; i++)
        if (sh->latch_t_down[i] > last)
            last = sh->latch_t_down[i];
    double delay = sh->latch_t_open - last;
    say("coordinator %d armed \"%s\" with %d and waits; %d workers work %d..%d ms, then count "
        "down", (int)p[0], LATCH_NAME, LATCH_WORKERS, LATCH_WORKERS, LATCH_WORK_MS,
        LATCH_WORK_MS + (LATCH_WORKERS - 1) * LATCH_STEP_MS);
    int fail = bad != 0;
    if (bad) {
        say("%d of %d processes reported an error", bad, 1 + LATCH_WORKERS);
    } else {
        fail = delay < 0 || delay > 1000;
        say("the latch opened %.1f ms %s the last count-down (the coordinator waited %.0f ms)%s",
            delay < 0 ? -delay : delay, delay < 0 ? "BEFORE" : "after",
            sh->latch_t_open - sh->latch_t_wait, !fail ? "" : "  <-- expected right after it");
    }
    pid_t late = spawn(d, child_latch_late, 0);
    bad = reap(&late, 1);
    int late_ok = !bad && sh->latch_late_count == 0 && sh->latch_late_rc == 0 &&
                  sh->latch_late_ms < 1000;
    if (late_ok)
        say("a late rs_latch_init(%d) by process %d leaves it open: count 0, its wait returns "
            "in %.1f ms", LATCH_WORKERS, (int)late, sh->latch_late_ms);
    else
        say("a late rs_latch_init(%d): count %ld, wait %s after %.0f ms  <-- it should stay "
            "open", LATCH_WORKERS, sh->latch_late_count,
            sh->latch_late_rc < 0 ? "not run" : rs_strerror(sh->latch_late_rc), sh->latch_late_ms);
    return fail || !late_ok;
}
