/*
 * fanout.c - what a wake-up of many costs (`make bench`, issue 14's targets): the condition
 * variable's broadcast to N waiters and a barrier generation of P parties, counted on the
 * servers (INFO commandstats deltas) and by a PSUBSCRIBE listener, not estimated.
 *
 * broadcast  N = 1, 10, 100 waiter threads over min(N, 4) clients. The condition lives on
 *            server A, the mutex the waiters re-acquire on server B (allowed: no script
 *            touches both), so that A's counters hold the broadcast alone. Per round: every
 *            waiter locks the mutex and waits; once all N are queued and the mutex is free,
 *            one rs_cond_broadcast from a client of its own, and each waiter returns holding
 *            the mutex and unlocks it. Reported per broadcast:
 *              script               Redis calls the broadcast's EVALSHA made (A: all
 *                                   commands but EVALSHA, INFO, PING: 4 + one PUBLISH per
 *                                   client) and its server time (commandstats usec), the
 *                                   O(N) part (ZRANGE and HGETALL of N entries); target O(N)
 *              messages             PUBLISHes seen by a PSUBSCRIBE on the client channels,
 *                                   target one per waiting client (min(N, 4)), not per waiter
 *              commands / waiter    the waiters' own commands for the wake-up: EVALSHA on A
 *                                   and B, less the broadcast and the N unlocks, per waiter;
 *                                   target <= 2
 *              time                 broadcast called -> the last waiter holds the mutex (the
 *                                   N re-acquisitions go through the mutex one at a time)
 * barrier    P = 2, 8, 32 party threads over min(P, 4) clients, GENS generations in a row.
 *            Per generation: script calls (EVALSHA, target P), messages (PUBLISH calls on
 *            the barrier's channel, each heard once by every client: target one per client),
 *            SUBSCRIBE/UNSUBSCRIBE commands, and the time per generation.
 * A warm-up round/generation before each measurement lets the clients' subscribers, scripts
 * and holder records settle. The watchdog's renewals (one round per lease/3, 10 s by default)
 * could fall into a window and add a call: the counts are then upper bounds.
 * Usage: redisync-bench-fanout [ROUNDS [GENS]]   (defaults 5 and 50)
 */
#include <hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"

#define MAXCLIENTS 4

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* ---- INFO commandstats ------------------------------------------------------------- */

typedef struct stats {
    long long scripts; /* EVALSHA + EVAL */
    long long script_us; /* their server time */
    long long publish;
    long long subs;    /* SUBSCRIBE + UNSUBSCRIBE */
    long long other;   /* every other command but INFO and PING */
} stats_t;

static int snap(redisContext *ctx, stats_t *st)
{
    memset(st, 0, sizeof *st);
    redisReply *r = redisCommand(ctx, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return -1;
    }
    for (const char *l = strstr(r->str, "cmdstat_"); l; l = strstr(l + 1, "\ncmdstat_")) {
        if (*l == '\n')
            l++;
        char name[64];
        long long calls, usec = 0;
        if (sscanf(l, "cmdstat_%63[^:]:calls=%lld,usec=%lld", name, &calls, &usec) < 2)
            continue;
        if (!strcmp(name, "evalsha") || !strcmp(name, "eval"))
            st->scripts += calls, st->script_us += usec;
        else if (!strcmp(name, "publish"))
            st->publish += calls;
        else if (!strcmp(name, "subscribe") || !strcmp(name, "unsubscribe"))
            st->subs += calls;
        else if (strcmp(name, "info") && strcmp(name, "ping"))
            st->other += calls;
    }
    freeReplyObject(r);
    return 0;
}

static stats_t delta(const stats_t *a, const stats_t *b)
{
    stats_t d = {b->scripts - a->scripts, b->script_us - a->script_us,
                 b->publish - a->publish, b->subs - a->subs, b->other - a->other};
    return d;
}

/* ---- the PSUBSCRIBE counter --------------------------------------------------------- */

/* A connection subscribed to pattern; count_messages() reads what arrived since the last
 * call (a PING's answer marks the end: everything published before it was delivered). */
static redisContext *listener(const ts_server_t *s, const char *pattern)
{
    redisContext *c = ts_connect(s);
    if (!c)
        return NULL;
    redisReply *r = redisCommand(c, "PSUBSCRIBE %s", pattern);
    freeReplyObject(r);
    return r ? c : NULL;
}

static long long count_messages(redisContext *c)
{
    long long n = 0;
    if (redisAppendCommand(c, "PING") != REDIS_OK)
        return -1;
    for (;;) {
        redisReply *r;
        if (redisGetReply(c, (void **)&r) != REDIS_OK)
            return -1;
        int pong = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                   r->element[0]->type == REDIS_REPLY_STRING &&
                   !strcmp(r->element[0]->str, "pong");
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
            !strcmp(r->element[0]->str, "pmessage"))
            n++;
        freeReplyObject(r);
        if (pong)
            return n;
    }
}

static long long cmd_int(redisContext *c, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(c, fmt, arg);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

static int await_int(redisContext *c, long long want, const char *fmt, const char *arg)
{
    for (int i = 0; i < 400000; i++) {
        if (cmd_int(c, fmt, arg) == want)
            return 0;
        usleep(50);
    }
    fprintf(stderr, "bench-fanout: timed out waiting for %s %s == %lld\n", fmt, arg, want);
    return -1;
}

/* ---- threads ------------------------------------------------------------------------- */

typedef struct crew {
    pthread_mutex_t mu;
    pthread_cond_t cv_go, cv_back;
    int go;   /* round every thread may start (-1: exit) */
    int back; /* threads done with the current round */
    atomic_int errors;
} crew_t;

static void crew_init(crew_t *k)
{
    memset(k, 0, sizeof *k);
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv_go, NULL);
    pthread_cond_init(&k->cv_back, NULL);
}

static int crew_await_go(crew_t *k, int r)
{
    pthread_mutex_lock(&k->mu);
    while (k->go != -1 && k->go < r)
        pthread_cond_wait(&k->cv_go, &k->mu);
    int stop = k->go == -1;
    pthread_mutex_unlock(&k->mu);
    return stop;
}

static void crew_done(crew_t *k)
{
    pthread_mutex_lock(&k->mu);
    k->back++;
    pthread_cond_signal(&k->cv_back);
    pthread_mutex_unlock(&k->mu);
}

static void crew_start(crew_t *k, int r)
{
    pthread_mutex_lock(&k->mu);
    k->go = r;
    k->back = 0;
    pthread_cond_broadcast(&k->cv_go);
    pthread_mutex_unlock(&k->mu);
}

static void crew_wait_back(crew_t *k, int n)
{
    pthread_mutex_lock(&k->mu);
    while (k->back < n)
        pthread_cond_wait(&k->cv_back, &k->mu);
    pthread_mutex_unlock(&k->mu);
}

typedef struct cwaiter {
    crew_t *crew;
    rs_cond_t *cv;
    rs_mutex_t *m;
    long long t1; /* when its wait returned */
} cwaiter_t;

static void *cond_waiter(void *arg)
{
    cwaiter_t *w = arg;
    for (int r = 1; !crew_await_go(w->crew, r); r++) {
        int rc = rs_mutex_lock(w->m);
        if (rc == 0)
            rc = rs_cond_wait(w->cv, w->m);
        w->t1 = now_ns();
        if (rc != 0 || rs_mutex_unlock(w->m) != 0)
            atomic_fetch_add(&w->crew->errors, 1);
        crew_done(w->crew);
    }
    return NULL;
}

typedef struct party {
    crew_t *crew;
    rs_barrier_t *b;
    int gens;
    atomic_int *serials;
} party_t;

static void *barrier_party(void *arg)
{
    party_t *p = arg;
    for (int r = 1; !crew_await_go(p->crew, r); r++) {
        for (int g = 0; g < p->gens; g++) {
            int rc = rs_barrier_wait(p->b);
            if (rc == RS_BARRIER_SERIAL)
                atomic_fetch_add(p->serials, 1);
            else if (rc != 0)
                atomic_fetch_add(&p->crew->errors, 1);
        }
        crew_done(p->crew);
    }
    return NULL;
}

static void crew_stop(crew_t *k, pthread_t *th, int n)
{
    pthread_mutex_lock(&k->mu);
    k->go = -1;
    pthread_cond_broadcast(&k->cv_go);
    pthread_mutex_unlock(&k->mu);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

static int open_clients(rs_client_t **c, int n, const char *url)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    for (int i = 0; i < n; i++)
        if (rs_client_open(&c[i], &cfg) != 0) {
            fprintf(stderr, "bench-fanout: open: %s\n", rs_client_lasterror(NULL));
            return -1;
        }
    return 0;
}

static void close_clients(rs_client_t **c, int n)
{
    for (int i = 0; i < n; i++)
        rs_client_close(c[i]);
}

/* ---- broadcast ----------------------------------------------------------------------- */

static int bench_broadcast(const ts_server_t *a, const ts_server_t *b, int n, int rounds)
{
    int k = n < MAXCLIENTS ? n : MAXCLIENTS;
    rs_client_t *ca[MAXCLIENTS], *cb[MAXCLIENTS], *sig;
    char name[32], ckey[64], mkey[64], qkey[64];
    snprintf(name, sizeof name, "fb%d", n);
    snprintf(ckey, sizeof ckey, "rs:{%s}:cond", name);
    snprintf(mkey, sizeof mkey, "rs:{%s}:mutex", name);
    snprintf(qkey, sizeof qkey, "rs:{%s}:mutex:q", name);
    if (open_clients(ca, k, a->url) || open_clients(cb, k, b->url) ||
        open_clients(&sig, 1, a->url))
        return -1;
    rs_cond_t *scv;
    cwaiter_t *w = calloc((size_t)n, sizeof *w);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    crew_t crew;
    crew_init(&crew);
    if (!w || !th || rs_cond_init(&scv, sig, name))
        return -1;
    for (int i = 0; i < n; i++) {
        w[i].crew = &crew;
        if (rs_cond_init(&w[i].cv, ca[i % k], name) || rs_mutex_init(&w[i].m, cb[i % k], name))
            return -1;
        pthread_create(&th[i], NULL, cond_waiter, &w[i]);
    }
    redisContext *ra = ts_connect(a), *rb = ts_connect(b), *ls = listener(a, "rs:client:*");
    if (!ra || !rb || !ls)
        return -1;
    stats_t sum_a = {0}, sum_b = {0};
    long long msgs = 0, t_all = 0, fail = 0;
    for (int r = 0; r <= rounds && !fail; r++) { /* round 0: warm-up */
        crew_start(&crew, r + 1);
        fail |= await_int(ra, n, "ZCARD %s", ckey);
        fail |= await_int(rb, 0, "EXISTS %s", qkey);
        fail |= await_int(rb, 0, "HEXISTS %s o", mkey);
        count_messages(ls);
        stats_t a0, a1, b0, b1;
        snap(ra, &a0);
        snap(rb, &b0);
        long long t0 = now_ns();
        fail |= rs_cond_broadcast(scv) != 0;
        crew_wait_back(&crew, n);
        long long last = 0;
        for (int i = 0; i < n; i++)
            if (w[i].t1 > last)
                last = w[i].t1;
        snap(ra, &a1);
        snap(rb, &b1);
        long long m = count_messages(ls);
        if (r == 0)
            continue;
        stats_t da = delta(&a0, &a1), db = delta(&b0, &b1);
        sum_a.scripts += da.scripts, sum_a.other += da.other, sum_a.publish += da.publish;
        sum_a.script_us += da.script_us;
        sum_b.scripts += db.scripts, sum_b.other += db.other;
        msgs += m;
        t_all += last - t0;
    }
    crew_stop(&crew, th, n);
    if (fail || atomic_load(&crew.errors)) {
        fprintf(stderr, "bench-fanout: broadcast N=%d failed (%d waiter errors)\n", n,
                atomic_load(&crew.errors));
        return -1;
    }
    double inner = (double)(sum_a.other + sum_a.publish) / rounds;
    double pubs = (double)msgs / rounds;
    /* the waiters' commands: A's EVALSHA less the broadcast, B's less the unlocks */
    double per = ((double)(sum_a.scripts - rounds) + (double)(sum_b.scripts - (long long)n * rounds)) /
                 ((double)n * rounds);
    printf("broadcast N=%-3d clients=%d  script: %4.1f Redis calls, %5.1f us on the server "
           "(target O(N))  messages %4.1f (target one per client, %d: %s)  commands/waiter "
           "%4.2f (target <= 2: %s)  all hold the mutex after %6.2f ms\n",
           n, k, inner, (double)sum_a.script_us / rounds, pubs, k, pubs <= k ? "PASS" : "MISS",
           per, per <= 2.0 ? "PASS" : "MISS", (double)t_all / rounds / 1e6);
    for (int i = 0; i < n; i++) {
        rs_cond_destroy(w[i].cv);
        rs_mutex_destroy(w[i].m);
    }
    rs_cond_destroy(scv);
    close_clients(ca, k);
    close_clients(cb, k);
    close_clients(&sig, 1);
    redisFree(ra);
    redisFree(rb);
    redisFree(ls);
    free(w);
    free(th);
    return 0;
}

/* ---- barrier --------------------------------------------------------------------------- */

static int bench_barrier(const ts_server_t *s, int p, int gens)
{
    int k = p < MAXCLIENTS ? p : MAXCLIENTS;
    rs_client_t *c[MAXCLIENTS];
    char name[32], chan[64];
    snprintf(name, sizeof name, "fbar%d", p);
    snprintf(chan, sizeof chan, "rs:{%s}:barrier", name);
    if (open_clients(c, k, s->url))
        return -1;
    party_t *pt = calloc((size_t)p, sizeof *pt);
    pthread_t *th = calloc((size_t)p, sizeof *th);
    crew_t crew;
    crew_init(&crew);
    atomic_int serials = 0;
    if (!pt || !th)
        return -1;
    for (int i = 0; i < p; i++) {
        pt[i].crew = &crew;
        pt[i].serials = &serials;
        if (rs_barrier_init(&pt[i].b, c[i % k], name, (unsigned)p)) {
            fprintf(stderr, "bench-fanout: barrier init: %s\n", rs_client_lasterror(c[i % k]));
            return -1;
        }
    }
    redisContext *rc = ts_connect(s), *ls = listener(s, chan);
    if (!rc || !ls)
        return -1;
    /* generation 1 warms up (one per thread), then gens measured ones */
    for (int i = 0; i < p; i++) {
        pt[i].gens = 1;
        pthread_create(&th[i], NULL, barrier_party, &pt[i]);
    }
    crew_start(&crew, 1);
    crew_wait_back(&crew, p);
    for (int i = 0; i < p; i++)
        pt[i].gens = gens;
    count_messages(ls);
    stats_t s0, s1;
    snap(rc, &s0);
    atomic_store(&serials, 0);
    long long t0 = now_ns();
    crew_start(&crew, 2);
    crew_wait_back(&crew, p);
    long long t1 = now_ns();
    snap(rc, &s1);
    long long heard = count_messages(ls);
    crew_stop(&crew, th, p);
    int serial = atomic_load(&serials);
    if (atomic_load(&crew.errors) || serial != gens) {
        fprintf(stderr, "bench-fanout: barrier P=%d: %d errors, %d serial callers for %d "
                "generations\n", p, atomic_load(&crew.errors), serial, gens);
        return -1;
    }
    stats_t d = delta(&s0, &s1);
    double calls = (double)d.scripts / gens, pubs = (double)d.publish / gens;
    double subs = (double)d.subs / gens;
    /* one PUBLISH reaches every subscribed client once: each client's handles keep one
     * subscription to the channel (the listener is one more subscriber) */
    printf("barrier P=%-3d clients=%d  script calls %6.2f (target %d: %s)  messages: PUBLISH "
           "%4.2f, heard %4.2f times by the listener, once by each client (target one per "
           "client: %s)  (UN)SUBSCRIBE %4.2f  time %6.2f ms/generation\n",
           p, k, calls, p, calls <= p ? "PASS" : "MISS", pubs, (double)heard / gens,
           pubs <= 1.0 ? "PASS" : "MISS", subs, (double)(t1 - t0) / gens / 1e6);
    for (int i = 0; i < p; i++)
        rs_barrier_destroy(pt[i].b);
    close_clients(c, k);
    redisFree(rc);
    redisFree(ls);
    free(pt);
    free(th);
    return 0;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    int gens = argc > 2 ? atoi(argv[2]) : 50;
    if (rounds < 1 || gens < 1) {
        fprintf(stderr, "usage: redisync-bench-fanout [ROUNDS [GENS]]\n");
        return 2;
    }
    ts_server_t a, b;
    if (ts_server_start(&a, NULL) != 0)
        return 1;
    if (ts_server_start(&b, NULL) != 0) {
        ts_server_stop(&a);
        return 1;
    }
    printf("bench-fanout: broadcast %d rounds after a warm-up (condition on one "
           "redis-server, the mutex on another); barrier %d generations after a warm-up\n",
           rounds, gens);
    int rc = 0;
    static const int ns[] = {1, 10, 100}, ps[] = {2, 8, 32};
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = bench_broadcast(&a, &b, ns[i], rounds);
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = bench_barrier(&a, ps[i], gens);
    ts_server_stop(&a);
    ts_server_stop(&b);
    return rc ? 1 : 0;
}
