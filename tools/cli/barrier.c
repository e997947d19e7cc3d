/*
 * barrier.c - the redisync command's barrier subcommand (rs_barrier_t, issue 14): returns
 * when PARTIES runs (on any machines) have arrived at the barrier NAME, for phased batch
 * work in shell scripts. The run that completes a generation (trips it) is the serial one:
 * it prints "serial" on stdout, the others print nothing; all exit 0. -w runs out: the
 * arrival is withdrawn (the generation then needs another party) and the status is 1 (or
 * -E CODE), as lock's -w. SIGINT, SIGTERM, SIGHUP and SIGQUIT while waiting withdraw the
 * arrival too (the client is closed, which ends the wait) and exit 128+signal; a party that
 * was counted in a generation that tripped meanwhile passes as usual instead.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static const int barrier_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define NBSIG (sizeof barrier_signals / sizeof barrier_signals[0])

static struct {
    pthread_mutex_t mu;
    rs_client_t *client; /* while waiting: the signal thread closes it to end the wait */
    int done;            /* the wait is over: signals are ignored */
    int sig;             /* the signal that closed the client, 0 if none */
    sigset_t set;
} bs = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *barrier_signal_thread(void *arg)
{
    (void)arg;
    for (;;) {
        int s;
        if (sigwait(&bs.set, &s) != 0)
            continue;
        pthread_mutex_lock(&bs.mu);
        rs_client_t *c = !bs.done && !bs.sig ? bs.client : NULL;
        if (c)
            bs.sig = s;
        pthread_mutex_unlock(&bs.mu);
        if (c) {
            /* the wait ends with ECANCELED after withdrawing the arrival (barrier.c) */
            rs_client_close(c);
            return NULL;
        }
    }
}

int run_barrier(const opts_t *o, const char *name, unsigned long parties)
{
    /* the signals are blocked before the library starts its threads, which inherit it */
    sigemptyset(&bs.set);
    for (size_t i = 0; i < NBSIG; i++)
        sigaddset(&bs.set, barrier_signals[i]);
    int rc = pthread_sigmask(SIG_BLOCK, &bs.set, NULL);
    if (rc) {
        msg("pthread_sigmask: %s", strerror(rc));
        return EXIT_SOFTWARE;
    }
    rs_client_t *c = NULL;
    if ((rc = open_client(o, &c)) != 0)
        return rc;
    rs_barrier_t *b = NULL;
    int status;
    if ((rc = rs_barrier_init(&b, c, name, (unsigned)parties)) != 0) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    bs.client = c;
    pthread_t t;
    if ((rc = pthread_create(&t, NULL, barrier_signal_thread, NULL)) != 0) {
        msg("pthread_create: %s", strerror(rc));
        rs_barrier_destroy(b);
        rs_client_close(c);
        return EXIT_SOFTWARE;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (o->have_wait) {
        struct timespec abstime = deadline_after(o->wait_s);
        rc = rs_barrier_timedwait(b, &abstime);
    } else {
        rc = rs_barrier_wait(b);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    pthread_mutex_lock(&bs.mu);
    bs.done = 1;
    int sig = bs.sig;
    pthread_mutex_unlock(&bs.mu);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (rc == 0 || rc == RS_BARRIER_SERIAL) {
        if (rc == RS_BARRIER_SERIAL)
            printf("serial\n");
        if (o->verbose)
            msg("barrier \"%s\" tripped after %.3f s of waiting%s", name, waited,
                rc == RS_BARRIER_SERIAL ? " (this run completed the generation)" : "");
        status = 0;
    } else if (sig) {
        msg("interrupted by signal %d while waiting at barrier \"%s\": arrival withdrawn", sig,
            name);
        status = 128 + sig;
    } else if (rc == ETIMEDOUT) {
        msg("timed out after %g s waiting at barrier \"%s\": arrival withdrawn", o->wait_s,
            name);
        status = o->conflict_code;
    } else {
        status = call_failed(c, rc, name);
    }
    if (sig) {
        pthread_join(t, NULL); /* it closed the client */
        rs_barrier_destroy(b);
    } else {
        rs_barrier_destroy(b);
        rs_client_close(c);
    }
    if (fflush(stdout) != 0 && status == 0) {
        msg("writing output: %s", strerror(errno));
        status = EXIT_SOFTWARE;
    }
    return status;
}
