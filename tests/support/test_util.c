/* Test support: the suites' shared helpers (see test_util.h). No Criterion in here: this
 * file is also linked into the demo, the benchmark and the stress and fault programs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "test_util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- clocks and waits ----------------------------------------------------------------- */

long long tu_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long tu_waited_ms(const char *text)
{
    const char *p = text ? strstr(text, "deadline passed after ") : NULL;
    if (!p)
        return -1;
    p += strlen("deadline passed after ");
    char *end;
    long n = strtol(p, &end, 10);
    return end != p && n >= 0 && strncmp(end, " ms of waiting", 14) == 0 ? n : -1;
}

void tu_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

struct timespec tu_abs_in(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + (long long)ms * 1000000LL;
    ts.tv_sec = (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

int tu_wait_atomic(atomic_int *v, int want, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    while (atomic_load(v) < want) {
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(5);
    }
    return 1;
}

int tu_read_full(int fd, void *buf, size_t n, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    size_t got = 0;
    while (got < n) {
        long left = (long)(end - tu_mono_ms());
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, POLLIN, 0};
        int pr = poll(&p, 1, (int)left);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return 0;
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        got += (size_t)r;
    }
    return 1;
}

/* ---- Redis ------------------------------------------------------------------------------ */

long long tu_zcard_q(const ts_server_t *s, const char *kind, const char *name)
{
    return ts_cmd_int(s, "ZCARD rs:{%s}:%s:q", name, kind);
}

int tu_wait_zcard(const ts_server_t *s, const char *kind, const char *name, long long n,
                  long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        if (tu_zcard_q(s, kind, name) == n)
            return 1;
        if (tu_mono_ms() >= end)
            return 0;
        tu_sleep_ms(10);
    }
}

/* ---- clients ---------------------------------------------------------------------------- */

void tu_on_lost(const char *kind, const char *name, void *arg)
{
    tu_lost_t *lc = arg;
    snprintf(lc->kind, sizeof lc->kind, "%s", kind ? kind : "(null)");
    snprintf(lc->name, sizeof lc->name, "%s", name ? name : "(null)");
    atomic_fetch_add(&lc->n, 1);
    if (lc->fd > 0) {
        ssize_t w = write(lc->fd, "L", 1);
        (void)w;
    }
}

void tu_config(rs_config_t *cfg, const char *url, long lease_ms, long timeout_ms, tu_lost_t *lc)
{
    rs_config_init(cfg);
    cfg->url = url;
    cfg->lease_ms = lease_ms;
    cfg->timeout_ms = timeout_ms;
    if (lc) {
        cfg->on_lost = tu_on_lost;
        cfg->on_lost_arg = lc;
    }
}

rs_client_t *tu_open_client_ex(const ts_server_t *s, long lease_ms, long timeout_ms,
                               tu_lost_t *lc)
{
    rs_config_t cfg;
    tu_config(&cfg, s->url, lease_ms, timeout_ms, lc);
    rs_client_t *c = NULL;
    if (rs_client_open(&c, &cfg) != 0)
        return NULL;
    return c;
}

/* ---- threads ---------------------------------------------------------------------------- */

int tu_thread_join(pthread_t th, atomic_int *done, long timeout_ms)
{
    if (!tu_wait_atomic(done, 1, timeout_ms))
        return 0;
    pthread_join(th, NULL);
    return 1;
}

/* ---- forked workers' tally ------------------------------------------------------------- */

void tu_tally_note(tu_tally_t *t, int id, int phase, int rc, int slot, const char *what,
                   rs_client_t *c)
{
    if (rc == 0) {
        atomic_fetch_add(&t->ok[id][phase], 1);
        return;
    }
    atomic_fetch_add(&t->err[id][slot], 1);
    snprintf(t->lasterr[id], sizeof t->lasterr[id], "%s %d: %s", what, rc,
             rs_client_lasterror(c));
}

int tu_tally_all_ok(tu_tally_t *t, int n, int phase, int min)
{
    for (int i = 0; i < n; i++)
        if (atomic_load(&t->ok[i][phase]) < min)
            return 0;
    return 1;
}

/* ---- forked children -------------------------------------------------------------------- */

static pid_t g_kids[TU_MAX_KIDS];

void tu_kids_forget(pid_t pid)
{
    for (int i = 0; i < TU_MAX_KIDS; i++)
        if (g_kids[i] == pid)
            g_kids[i] = 0;
}

/* SIGCONT after SIGKILL: a child the test stopped (SIGSTOP) is surely woken to die. */
void tu_kill_kids(void)
{
    for (int i = 0; i < TU_MAX_KIDS; i++)
        if (g_kids[i] > 0) {
            kill(g_kids[i], SIGKILL);
            kill(g_kids[i], SIGCONT);
            int st;
            waitpid(g_kids[i], &st, 0);
            g_kids[i] = 0;
        }
}

pid_t tu_fork_kid(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    /* A library thread started just before (the first hold starts the watchdog, the first
     * wait the notifier) gets a moment to finish starting: under ASan a child forked while
     * a thread is being created can hang on ASan's thread registry lock, since gcc 12's
     * libasan has no fork handling. Harmless elsewhere. */
    tu_sleep_ms(30);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        _exit(fn(arg));
    }
    for (int i = 0; i < TU_MAX_KIDS; i++)
        if (g_kids[i] == 0) {
            g_kids[i] = pid;
            break;
        }
    return pid;
}

int tu_reap(pid_t pid, long timeout_ms)
{
    long long end = tu_mono_ms() + timeout_ms;
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            tu_kids_forget(pid);
            return st;
        }
        if (w < 0 && errno != EINTR) {
            tu_kids_forget(pid);
            return -2;
        }
        if (tu_mono_ms() >= end) {
            kill(pid, SIGKILL);
            kill(pid, SIGCONT);
            waitpid(pid, &st, 0);
            tu_kids_forget(pid);
            return -1;
        }
        tu_sleep_ms(5);
    }
}
