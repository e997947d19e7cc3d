/*
 * storm_run.c - one row of the storm: start the workers, run the timed phase and the counted
 * phase under MONITOR, and reduce the workers' records to the row's figures.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "storm_driver.h"

/* ----- workers ------------------------------------------------------------------------- */
static char *subst(const char *arg, const char *peers)
{
    const char *p = strstr(arg, "@PEERS@");
    char *out;
    if (!p)
        return strdup(arg);
    if (asprintf(&out, "%.*s%s%s", (int)(p - arg), arg, peers ? peers : ".", p + 7) < 0)
        return NULL;
    return out;
}

static int spawn(worker_t *w, const storm_impl_t *im, const opts_t *o, const ts_server_t *srv,
                 const char *name, const char *dir, int idx)
{
    int to[2], from[2];
    snprintf(w->file, sizeof w->file, "%s/w%d.rec", dir, idx);
    if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC)) {
        fail("pipe: %s", strerror(errno));
        return -1;
    }
    /* exec's argv, built before fork */
    char *argv[STORM_ARGV_MAX + 8] = {NULL};
    char port[16];
    snprintf(port, sizeof port, "%d", srv->port);
    int n = 0;
    if (!im->c) {
        for (int i = 0; i < STORM_ARGV_MAX && im->argv[i]; i++)
            argv[n++] = subst(im->argv[i], o->peers_dir);
        argv[n++] = "--port";
        argv[n++] = port;
        argv[n++] = "--key";
        argv[n++] = (char *)name;
        argv[n++] = "--out";
        argv[n++] = w->file;
        argv[n] = NULL;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fail("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        signal(SIGPIPE, SIG_DFL);
        dup2(to[0], 0);
        dup2(from[1], 1);
        /* nothing else of the driver's: other workers' pipes would keep their EOF away */
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
        if (im->c)
            _exit(c_worker(im, srv->url, name, w->file, idx));
        execvp(argv[0], argv);
        say("error cannot run %s: %s", argv[0], strerror(errno));
        _exit(127);
    }
    for (int i = 0; i < STORM_ARGV_MAX && !im->c && im->argv[i]; i++)
        free(argv[i]);
    close(to[0]);
    close(from[1]);
    w->pid = pid;
    w->to = to[1];
    w->from = from[0];
    w->blen = 0;
    w->have_line = 0;
    w->eof = 0;
    return 0;
}

static void send_all(worker_t *ws, int n, const char *line)
{
    size_t len = strlen(line);
    for (int i = 0; i < n; i++)
        if (write(ws[i].to, line, len) != (ssize_t)len)
            ws[i].eof = 1;
}

/* Waits until every worker has sent a line starting with `want`. Lines "error ..." and
 * workers that exit fail the wait. 0, or -1 with why set. */
static int wait_all(worker_t *ws, int n, const char *want, uint64_t deadline, char *why,
                    size_t whylen)
{
    for (int i = 0; i < n; i++)
        ws[i].have_line = 0;
    int pending = n;
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    int *idx = calloc((size_t)n, sizeof *idx);
    if (!pf || !idx) {
        free(pf);
        free(idx);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    int rc = 0;
    while (pending > 0) {
        int np = 0;
        for (int i = 0; i < n; i++)
            if (!ws[i].have_line) {
                pf[np].fd = ws[i].from;
                pf[np].events = POLLIN;
                idx[np++] = i;
            }
        uint64_t now = now_ns();
        if (now >= deadline) {
            snprintf(why, whylen, "%d of %d workers did not answer \"%s\" in time", pending, n,
                     want);
            rc = -1;
            break;
        }
        int left_ms = (int)((deadline - now) / 1000000u) + 1;
        int pr = poll(pf, (nfds_t)np, left_ms > 1000 ? 1000 : left_ms);
        if (pr < 0 && errno != EINTR) {
            snprintf(why, whylen, "poll: %s", strerror(errno));
            rc = -1;
            break;
        }
        for (int k = 0; k < np && pr > 0; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            worker_t *w = &ws[idx[k]];
            ssize_t r = read(w->from, w->buf + w->blen, sizeof w->buf - 1 - w->blen);
            if (r <= 0) {
                snprintf(why, whylen, "worker %d (pid %d) exited before \"%s\"", idx[k],
                         (int)w->pid, want);
                w->eof = 1;
                rc = -1;
                goto out;
            }
            w->blen += (size_t)r;
            w->buf[w->blen] = '\0';
            char *nl;
            while (!w->have_line && (nl = strchr(w->buf, '\n')) != NULL) {
                *nl = '\0';
                snprintf(w->line, sizeof w->line, "%s", w->buf);
                size_t used = (size_t)(nl + 1 - w->buf);
                memmove(w->buf, nl + 1, w->blen - used + 1);
                w->blen -= used;
                if (strncmp(w->line, "error", 5) == 0) {
                    snprintf(why, whylen, "worker %d: %.200s", idx[k], w->line);
                    rc = -1;
                    goto out;
                }
                if (strncmp(w->line, want, strlen(want)) == 0) {
                    w->have_line = 1;
                    pending--;
                }
                /* anything else: ignored (a peer's stray output) */
            }
            if (w->blen == sizeof w->buf - 1)
                w->blen = 0; /* a line too long to be ours */
        }
    }
out:
    free(pf);
    free(idx);
    return rc;
}

static void stop_workers(worker_t *ws, int n)
{
    send_all(ws, n, "quit\n");
    for (int i = 0; i < n; i++) {
        close(ws[i].to);
        ws[i].to = -1;
    }
    uint64_t deadline = now_ns() + 10ull * 1000000000ull;
    for (int i = 0; i < n; i++) {
        if (ws[i].pid <= 0)
            continue;
        int st;
        while (waitpid(ws[i].pid, &st, WNOHANG) == 0) {
            if (now_ns() > deadline) {
                kill(ws[i].pid, SIGKILL);
                waitpid(ws[i].pid, &st, 0);
                break;
            }
            usleep(10000);
        }
        close(ws[i].from);
        ws[i].pid = 0;
    }
}

/* Reads every worker's records of the phase just done. */
static rec_t *load_records(worker_t *ws, int n, size_t *count, char *why, size_t whylen)
{
    size_t cap = 1024, k = 0;
    rec_t *r = malloc(cap * sizeof *r);
    for (int i = 0; r && i < n; i++) {
        unsigned long long dn = 0;
        long fails = 0;
        sscanf(ws[i].line, "done %llu %ld", &dn, &fails);
        ws[i].fails = fails;
        FILE *f = fopen(ws[i].file, "r");
        if (!f) {
            if (dn == 0)
                continue;
            snprintf(why, whylen, "%s: %s", ws[i].file, strerror(errno));
            free(r);
            return NULL;
        }
        unsigned long long a, b, c, d;
        size_t got = 0;
        while (fscanf(f, "%llu %llu %llu %llu", &a, &b, &c, &d) == 4) {
            if (k == cap) {
                rec_t *nr = realloc(r, 2 * cap * sizeof *r);
                if (!nr) {
                    free(r);
                    fclose(f);
                    snprintf(why, whylen, "out of memory");
                    return NULL;
                }
                r = nr;
                cap *= 2;
            }
            r[k++] = (rec_t){a, b, c, d, i};
            got++;
        }
        fclose(f);
        if (got != dn) {
            snprintf(why, whylen, "worker %d said %llu acquisitions, its file has %zu", i, dn, got);
            free(r);
            return NULL;
        }
    }
    if (!r)
        snprintf(why, whylen, "out of memory");
    *count = k;
    return r;
}

static int cmp_rec_t1(const void *a, const void *b)
{
    const rec_t *x = a, *y = b;
    return x->t1 < y->t1 ? -1 : x->t1 > y->t1;
}

/* Throughput, fairness, handoffs and exclusion from the timed phase's records. */
static void analyse(row_t *row, rec_t *r, size_t n, int procs, uint64_t start, uint64_t end)
{
    int readers = row->im->readers;       /* odd-numbered workers read: they may overlap */
    uint64_t held_until = 0, written_until = 0; /* the latest t2 of any hold, of a write hold */
    qsort(r, n, sizeof *r, cmp_rec_t1);
    long *per = calloc((size_t)procs, sizeof *per);
    uint64_t *ho = malloc((n ? n : 1) * sizeof *ho);
    uint64_t *un = malloc((n ? n : 1) * sizeof *un);
    uint64_t *wt = malloc((n ? n : 1) * sizeof *wt);
    size_t nho = 0, nun = 0, nwt = 0;
    row->acq = 0;
    row->violations = 0;
    for (size_t i = 0; i < n; i++) {
        int in = r[i].t1 >= start && r[i].t1 < end;
        if (in) {
            row->acq++;
            if (un)
                un[nun++] = r[i].t3 - r[i].t2;
            if (wt)
                wt[nwt++] = r[i].t1 - r[i].t0;
            if (per)
                per[r[i].w]++;
        }
        if (readers) {
            /* a writer alone; a reader with readers only */
            int reader = r[i].w % 2;
            if (r[i].t1 < (reader ? written_until : held_until))
                row->violations++;
            held_until = r[i].t2 > held_until ? r[i].t2 : held_until;
            if (!reader)
                written_until = r[i].t2 > written_until ? r[i].t2 : written_until;
        }
        if (i == 0)
            continue;
        const rec_t *p = &r[i - 1];
        /* the lock can only be granted after the previous holder started to unlock */
        if (!readers && r[i].t1 < p->t2)
            row->violations++;
        /* a handoff: another process was already waiting when the holder began to unlock */
        if (in && ho && r[i].w != p->w && r[i].t0 < p->t2 && r[i].t1 >= p->t2)
            ho[nho++] = r[i].t1 - p->t2;
    }
    row->seconds = (double)(end - start) / 1e9;
    row->acq_per_s = (double)row->acq / row->seconds;
    row->min_w = row->max_w = per ? per[0] : 0;
    for (int i = 1; per && i < procs; i++) {
        if (per[i] < row->min_w)
            row->min_w = per[i];
        if (per[i] > row->max_w)
            row->max_w = per[i];
    }
    row->handoffs = nho;
    row->ho50_us = (double)quantile(ho, nho, 0.5) / 1e3;
    row->ho99_us = (double)quantile(ho, nho, 0.99) / 1e3;
    row->unlock50_us = (double)quantile(un, nun, 0.5) / 1e3;
    row->wait50_ms = (double)quantile(wt, nwt, 0.5) / 1e6;
    row->wait99_ms = (double)quantile(wt, nwt, 0.99) / 1e6;
    free(per);
    free(ho);
    free(un);
    free(wt);
}

int mkdirs(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static void rmrecs(const char *dir, int n)
{
    char p[PATH_MAX];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/w%d.rec", dir, i);
        unlink(p);
    }
    rmdir(dir);
}

void run_row(row_t *row, const opts_t *o, const ts_server_t *srv, redisContext *rtt,
                    redisContext *mark)
{
    const storm_impl_t *im = row->im;
    int n = row->procs;
    char name[96], dir[] = "/tmp/rs-storm.XXXXXX";
    snprintf(name, sizeof name, "storm:%s:%d", im->key, n);
    row->ok = 0;
    if (!mkdtemp(dir)) {
        snprintf(row->why, sizeof row->why, "mkdtemp: %s", strerror(errno));
        return;
    }
    worker_t *ws = calloc((size_t)n, sizeof *ws);
    rec_t *recs = NULL;
    int spawned = 0;
    monitor_t mon;
    memset(&mon, 0, sizeof mon);
    int mon_started = 0;
    if (!ws) {
        snprintf(row->why, sizeof row->why, "out of memory");
        goto out;
    }
    fprintf(stderr, "storm: %-22s %4d processes: starting ... ", im->name, n);
    uint64_t t_spawn = now_ns();
    for (; spawned < n; spawned++)
        if (spawn(&ws[spawned], im, o, srv, name, dir, spawned)) {
            snprintf(row->why, sizeof row->why, "cannot start the workers");
            goto out;
        }
    if (wait_all(ws, n, "ready", now_ns() + READY_TIMEOUT_S * 1000000000ull, row->why,
                 sizeof row->why))
        goto out;
    fprintf(stderr, "ready in %.1f s, timed %.1f s ... ", (double)(now_ns() - t_spawn) / 1e9,
            o->seconds);

    if (rtt_measure(rtt, &row->rtt_us, &row->rtt99_us)) {
        snprintf(row->why, sizeof row->why, "raw round trip failed");
        goto out;
    }

    /* --- timed phase, no MONITOR --- */
    char go[128];
    uint64_t start = now_ns() + 50000000ull; /* 50 ms for every worker to read "go" */
    uint64_t end = start + (uint64_t)(o->seconds * 1e9);
    snprintf(go, sizeof go, "go %llu %llu %u\n", (unsigned long long)start,
             (unsigned long long)end, o->work_us);
    long long es_calls0 = 0, es_usec0 = 0, es_calls1 = 0, es_usec1 = 0;
    evalsha_stats(rtt, &es_calls0, &es_usec0);
    send_all(ws, n, go);
    /* the round trip while the storm runs, one probe every 5 ms (context only) */
    static uint64_t load_v[4096];
    size_t nload = 0;
    sleep_until(start);
    while (now_ns() + 5000000ull < end && nload < 4096) {
        usleep(5000);
        uint64_t t = now_ns();
        if (rtt_once(rtt))
            break;
        load_v[nload++] = now_ns() - t;
    }
    row->rtt_load_us = (double)quantile(load_v, nload, 0.5) / 1e3;
    if (wait_all(ws, n, "done", end + DONE_GRACE_S * 1000000000ull, row->why, sizeof row->why))
        goto out;
    /* the probes' own "return 1" calls are left out (about 1 us each) */
    if (evalsha_stats(rtt, &es_calls1, &es_usec1) == 0 && es_calls1 - es_calls0 > (long long)nload)
        row->script_us = (double)(es_usec1 - es_usec0) / (double)(es_calls1 - es_calls0 - (long long)nload);
    size_t nrec;
    recs = load_records(ws, n, &nrec, row->why, sizeof row->why);
    if (!recs)
        goto out;
    if (nrec)
        row->server_us = row->script_us * (double)(es_calls1 - es_calls0 - (long long)nload) /
                         (double)nrec;
    row->fails = 0;
    for (int i = 0; i < n; i++)
        row->fails += ws[i].fails;
    analyse(row, recs, nrec, n, start, end);
    free(recs);
    recs = NULL;
    fprintf(stderr, "counted %.1f s ... ", o->monitor_seconds);

    /* --- counted phase, under MONITOR --- */
    mon.c = NULL;
    {
        struct timeval tv = {5, 0};
        mon.c = redisConnectWithTimeout("127.0.0.1", srv->port, tv);
        if (!mon.c || mon.c->err) {
            snprintf(row->why, sizeof row->why, "MONITOR connection failed");
            goto out;
        }
        redisSetTimeout(mon.c, (struct timeval){DONE_GRACE_S + 30, 0});
    }
    local_addr(mark, mon.marker, sizeof mon.marker);
    mon.role_argv = im->readers ? im->role_argv : 0;
    redisReply *mr = redisCommand(mon.c, "MONITOR");
    int mok = mr && mr->type == REDIS_REPLY_STATUS;
    if (mr)
        freeReplyObject(mr);
    if (!mok || pthread_create(&mon.th, NULL, monitor_main, &mon) != 0) {
        snprintf(row->why, sizeof row->why, "MONITOR failed");
        goto out;
    }
    mon_started = 1;
    if (marker(mark, "rs-storm-start")) {
        snprintf(row->why, sizeof row->why, "marker failed");
        goto out;
    }
    start = now_ns() + 50000000ull;
    end = start + (uint64_t)(o->monitor_seconds * 1e9);
    snprintf(go, sizeof go, "go %llu %llu %u\n", (unsigned long long)start,
             (unsigned long long)end, o->work_us);
    send_all(ws, n, go);
    if (wait_all(ws, n, "done", end + DONE_GRACE_S * 1000000000ull, row->why, sizeof row->why))
        goto out;
    if (marker(mark, "rs-storm-end")) {
        snprintf(row->why, sizeof row->why, "marker failed");
        goto out;
    }
    pthread_join(mon.th, NULL);
    mon_started = 0;
    if (mon.err || !mon.ended) {
        snprintf(row->why, sizeof row->why, "MONITOR stream ended early");
        goto out;
    }
    recs = load_records(ws, n, &nrec, row->why, sizeof row->why);
    if (!recs)
        goto out;
    row->mon_acq = (long)nrec;
    row->mon_fails = 0;
    for (int i = 0; i < n; i++)
        row->mon_fails += ws[i].fails;
    row->mon_cmds = mon.counted;
    row->mon_inner = mon.inner;
    row->mon_acq_by[0] = row->mon_acq_by[1] = 0;
    for (size_t i = 0; i < nrec; i++)
        row->mon_acq_by[im->readers ? recs[i].w % 2 : 0]++;
    row->mon_inner_by[0] = mon.inner_by[0];
    row->mon_inner_by[1] = mon.inner_by[1];
    row->mon_names[0] = '\0';
    for (int i = 0; i < mon.nn; i++) {
        size_t u = strlen(row->mon_names);
        snprintf(row->mon_names + u, sizeof row->mon_names - u, "%s%s %.2f", i ? ", " : "",
                 mon.name[i], row->mon_acq ? (double)mon.cnt[i] / (double)row->mon_acq : 0.0);
    }
    row->ok = 1;
    fprintf(stderr, "ok\n");

out:
    if (!row->ok)
        fprintf(stderr, "FAILED: %s\n", row->why);
    if (mon_started) {
        /* unblock the reader: closing its socket under it makes redisGetReply fail */
        shutdown(mon.c->fd, SHUT_RDWR);
        pthread_join(mon.th, NULL);
    }
    if (mon.c)
        redisFree(mon.c);
    free(recs);
    if (ws)
        stop_workers(ws, spawned);
    free(ws);
    rmrecs(dir, n);
}
