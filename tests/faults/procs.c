/*
 * procs.c - the fault driver's worker processes: each slot runs "redisync-faults --worker"
 * (worker.c); spawn starts one, reap notices exits and stops and replaces killed workers,
 * pick_slot chooses a live one for a fault (driver.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

long long slot_count(run_t *R, int i)
{
    long long v = ck_int(R->ck, "GET n:%d", i);
    return v < 0 ? 0 : v;
}

pid_t spawn(run_t *R, int i)
{
    const scenario_t *sc = R->sc;
    slot_t *s = &R->slot[i];
    char a[24][640];
    int k = 0;
    snprintf(a[k++], sizeof a[0], "prim=%d", (int)sc->prim);
    snprintf(a[k++], sizeof a[0], "slot=%d", i);
    snprintf(a[k++], sizeof a[0], "gen=%d", s->gen);
    snprintf(a[k++], sizeof a[0], "seed=%llu",
             (unsigned long long)(R->seed * 1000003u + (uint64_t)R->index * 7919u + (uint64_t)i * 131u + (uint64_t)s->gen));
    snprintf(a[k++], sizeof a[0], "url=%s", R->url);
    snprintf(a[k++], sizeof a[0], "port=%d", R->data.port);
    snprintf(a[k++], sizeof a[0], "ports=%s", R->ports);
    snprintf(a[k++], sizeof a[0], "minrep=%d", sc->min_replicas);
    snprintf(a[k++], sizeof a[0], "ck=%d", R->ck_srv->port);
    snprintf(a[k++], sizeof a[0], "prefix=fx");
    snprintf(a[k++], sizeof a[0], "lease=%ld", sc->lease_ms);
    snprintf(a[k++], sizeof a[0], "timeout=%ld", sc->timeout_ms);
    snprintf(a[k++], sizeof a[0], "names=%d", sc->names);
    snprintf(a[k++], sizeof a[0], "semsize=%d", sc->sem_size);
    snprintf(a[k++], sizeof a[0], "latchk=%d", sc->latch_count);
    snprintf(a[k++], sizeof a[0], "round=%ld", sc->round_ms);
    snprintf(a[k++], sizeof a[0], "t0=%lld", (long long)R->t0);
    int round0 = 1;
    if (sc->prim == P_LATCH && s->gen > 0)
        round0 = (int)((now_us() - R->t0) / (sc->round_ms * 1000)) + 1;
    snprintf(a[k++], sizeof a[0], "round0=%d", round0);
    snprintf(a[k++], sizeof a[0], "sab=%d", g_sabotage);
    int pending = g_async_pending ? g_async_pending : R->sc->pending ? R->sc->pending : 300;
    snprintf(a[k++], sizeof a[0], "async=%d", SLOT_ASYNC(R, i) ? pending : 0);
    char *argv[28];
    argv[0] = "redisync-faults";
    argv[1] = "--worker";
    for (int j = 0; j < k; j++)
        argv[2 + j] = a[j];
    argv[2 + k] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p == 0) {
        /* no inherited descriptor: the worker counts its own sockets to the data server */
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        if (g_net && net_child(i) != 0)
            _exit(126);
        execv(g_exe, argv);
        _exit(127);
    }
    if (p < 0) {
        perror("faults: fork");
        exit(2);
    }
    s->pid = p;
    s->stopped = 0;
    s->cmd = 0;
    s->kill_sent = 0;
    R->res->processes++;
    return p;
}

/* Reaps exits and stops of the workers; replaces killed workers while respawning is on. */
void reap(run_t *R)
{
    int64_t now = now_us();
    for (int i = 0; i < R->sc->procs; i++) {
        slot_t *s = &R->slot[i];
        if (s->pid <= 0)
            continue;
        int st;
        pid_t p = waitpid(s->pid, &st, WNOHANG | WUNTRACED);
        if (p != s->pid)
            continue;
        if (WIFSTOPPED(st)) {
            if (s->stopped == 0) { /* the worker stopped itself inside its section */
                s->stopped = 2;
                s->stop_t = now;
                s->cont_at = now + rnd_range(&R->rng, R->sc->lease_ms * 3 / 2, R->sc->lease_ms * 3) * 1000;
                s->cmd = 0;
                if (g_verbose)
                    printf("    %+8.3f s  stop-holder w%d stopped itself inside its section, for %lld ms\n",
                           (double)(now - R->t0) / 1e6, i, (long long)(s->cont_at - now) / 1000);
            }
            continue;
        }
        int expected = (s->kill_sent || s->cmd == 'k') && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (g_verbose && expected && !s->kill_sent)
            printf("    %+8.3f s  kill9-holder w%d killed itself inside its section\n",
                   (double)(now - R->t0) / 1e6, i);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && R->phase == 1) {
            s->done = 1;
            s->pid = 0;
            continue;
        }
        if (!expected) {
            char how[64];
            if (WIFSIGNALED(st))
                snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(st));
            else
                snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(st));
            viol(R->res, V_API, "worker w%d (pid %d, generation %d) %s", i, (int)s->pid, s->gen, how);
            s->crashes++;
        }
        s->pid = 0;
        redisReply *r = ck_cmd(R->ck, "DEL in:%d cmd:%d", i, i);
        freeReplyObject(r);
        if (R->phase == 0 && s->crashes <= 3) {
            s->gen++;
            spawn(R, i);
        } else {
            s->done = 1;
        }
    }
    for (int i = 0; i < R->sc->procs; i++) {
        slot_t *s = &R->slot[i];
        if (s->pid > 0 && s->stopped && s->cont_at <= now) {
            kill(s->pid, SIGCONT);
            flt_note(R, s->stopped == 2 ? F_STOP_HOLDER : F_STOP_ANY, 'W', i, s->stop_t, now);
            s->stopped = 0;
        }
    }
    if (R->pending && now >= R->pending_until) {
        redisReply *r = NULL;
        struct timeval tv = {2, 0};
        redisSetTimeout(R->pending, tv);
        if (redisGetReply(R->pending, (void **)&r) == REDIS_OK && r)
            freeReplyObject(r);
        redisFree(R->pending);
        R->pending = NULL;
    }
}

int nstopped(run_t *R)
{
    int n = 0;
    for (int i = 0; i < R->sc->procs; i++)
        n += R->slot[i].stopped != 0 || R->slot[i].cmd == 's';
    return n;
}

/* A random live slot that satisfies the filter, or -1. */
int pick_slot(run_t *R, int need_outside, int min_slot)
{
    int cand[MAX_PROCS], n = 0;
    for (int i = min_slot; i < R->sc->procs; i++) {
        slot_t *s = &R->slot[i];
        if (s->pid <= 0 || s->stopped || s->cmd || s->kill_sent)
            continue;
        if (need_outside && ck_int(R->ck, "EXISTS in:%d", i) == 1)
            continue;
        cand[n++] = i;
    }
    return n ? cand[rnd_range(&R->rng, 0, n - 1)] : -1;
}

