/*
 * bench.c - what the distributed primitives cost uncontended, against what Redis itself
 * costs, and what a mutex handoff costs.
 *
 *   make bench
 *
 * Starts its own throwaway redis-server and measures, in the same run and on the same
 * server (see bench/README.md for what each figure means):
 *
 *   a) raw round trip      EVALSHA of "return 1" on a plain hiredis connection
 *   b) raw scripts         for each primitive (mutex, rmutex, rwlock read, rwlock write,
 *                          semaphore): the two EVALSHAs its uncontended lock + unlock send
 *                          (acq with mode "q", then rel), built by hand, on a plain hiredis
 *                          connection
 *   c) library             that primitive's lock + unlock (one client, handle, thread)
 *   d) handoff             mutex: holder's unlock called -> blocked waiter's lock returns
 *
 * a, b and c are timed per iteration, in interleaved rounds (a, then b and c of each
 * primitive, a, ...) so that slow drift of the machine hits them alike; the figures are
 * medians (p99 shown too). Before timing, each primitive's b is checked against what the
 * library really sends (MONITOR). Exit status: 0 whatever the figures (it is a benchmark), 1
 * on errors.
 */

#include "bench.h"

/* ----- d) handoff ping-pong ------------------------------------------------------------ */
enum { ST_FREE, ST_HELD, ST_ABOUT_TO_LOCK, ST_STOP };

typedef struct pingpong {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;
    int rounds;               /* handoffs to run in this session */
    rs_mutex_t *holder, *waiter; /* handles on two different clients, one name */
    redisContext *probe;      /* holder's plain connection, to see the waiter queued */
    const char *qkey;
    _Atomic uint64_t t0;      /* just before the holder calls unlock */
    samples_t handoff, unlock_call;
    long late_queue;          /* rounds where the waiter was not queued after HOLD_US */
    long long probes;         /* ZCARDs sent on probe */
    int err;
} pingpong_t;

static void set_state(pingpong_t *p, int s)
{
    pthread_mutex_lock(&p->mu);
    if (p->state != ST_STOP) /* a stop sticks */
        p->state = s;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Waits for state s (or STOP); returns the state found. */
static int wait_state(pingpong_t *p, int s)
{
    pthread_mutex_lock(&p->mu);
    while (p->state != s && p->state != ST_STOP)
        pthread_cond_wait(&p->cv, &p->mu);
    int got = p->state;
    pthread_mutex_unlock(&p->mu);
    return got;
}

static long long queue_len(pingpong_t *p)
{
    redisReply *r = redisCommand(p->probe, "ZCARD %s", p->qkey);
    p->probes++;
    long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r)
        freeReplyObject(r);
    return n;
}

static void *waiter_main(void *arg)
{
    pingpong_t *p = arg;
    for (int i = 0; i < p->rounds; i++) {
        if (wait_state(p, ST_HELD) == ST_STOP)
            break;
        set_state(p, ST_ABOUT_TO_LOCK);
        int rc = rs_mutex_lock(p->waiter);
        uint64_t t1 = now_ns();
        if (rc) {
            fail("waiter rs_mutex_lock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
        add(&p->handoff, t1 - atomic_load(&p->t0));
        rc = rs_mutex_unlock(p->waiter);
        if (rc) {
            fail("waiter rs_mutex_unlock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
        set_state(p, ST_FREE);
    }
    return NULL;
}

/* Runs p->rounds handoffs: the calling thread holds, a new thread waits. */
static int run_pingpong(pingpong_t *p)
{
    p->state = ST_FREE;
    pthread_t w;
    if (pthread_create(&w, NULL, waiter_main, p) != 0) {
        fail("pthread_create");
        return -1;
    }
    for (int i = 0; i < p->rounds; i++) {
        if (wait_state(p, ST_FREE) == ST_STOP)
            break;
        int rc = rs_mutex_lock(p->holder); /* uncontended: the waiter has unlocked */
        if (rc) {
            fail("holder rs_mutex_lock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
        set_state(p, ST_HELD);
        if (wait_state(p, ST_ABOUT_TO_LOCK) == ST_STOP)
            break;
        usleep(HOLD_US);
        /* the waiter must be blocked in Redis's queue before the clock starts */
        int late = 0;
        for (int k = 0; k < 1000 && queue_len(p) != 1; k++, late = 1)
            usleep(100);
        p->late_queue += late;
        atomic_store(&p->t0, now_ns());
        rc = rs_mutex_unlock(p->holder);
        uint64_t t2 = now_ns();
        add(&p->unlock_call, t2 - atomic_load(&p->t0));
        if (rc) {
            fail("holder rs_mutex_unlock: %s", rs_strerror(rc));
            p->err = 1;
            set_state(p, ST_STOP);
            break;
        }
    }
    pthread_join(w, NULL);
    return p->err ? -1 : 0;
}

/* ----- main ---------------------------------------------------------------------------- */
static rs_client_t *open_client(const ts_server_t *srv)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = srv->url;
    rs_client_t *c;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        fail("rs_client_open: %s (%s)", rs_strerror(rc), rs_client_lasterror(NULL));
        return NULL;
    }
    return c;
}

/* The 1-minute load average, or -1: other work on the machine moves every figure. */
static double loadavg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static const char *verdict(double v, double target)
{
    return v <= target ? "PASS" : "MISS";
}

/* Key i of p as keys.c builds it for the name NAME and the client prefix PREFIX. */
static void prim_keys(prim_t *p)
{
    p->nkeys = 1;
    snprintf(p->key[0], sizeof p->key[0], "%s:{%s}:%s", PREFIX, NAME, p->kind);
    for (int i = 0; p->suffixes[i]; i++, p->nkeys++)
        snprintf(p->key[p->nkeys], sizeof p->key[0], "%s:%s", p->key[0], p->suffixes[i]);
    for (int i = 0; i < p->nkeys; i++)
        p->klen[i] = strlen(p->key[i]);
    snprintf(p->nkeys_str, sizeof p->nkeys_str, "%d", p->nkeys);
}

static int prim_handle(prim_t *p, rs_client_t *c)
{
    if (p->lib == lib_mutex)
        return rs_mutex_init((rs_mutex_t **)&p->h, c, NAME);
    if (p->lib == lib_rmutex)
        return rs_rmutex_init((rs_rmutex_t **)&p->h, c, NAME);
    if (p->lib == lib_rwlock_rd || p->lib == lib_rwlock_wr) {
        /* one handle for both rows (they never run at the same time) */
        for (prim_t *q = g_prims; q < p; q++)
            if (q->lib == lib_rwlock_rd || q->lib == lib_rwlock_wr) {
                p->h = q->h;
                return 0;
            }
        return rs_rwlock_init((rs_rwlock_t **)&p->h, c, NAME);
    }
    return rs_sem_init((rs_sem_t **)&p->h, c, NAME, 1);
}

static void prim_destroy(prim_t *p)
{
    if (!p->h)
        return;
    if (p->lib == lib_mutex)
        rs_mutex_destroy(p->h);
    else if (p->lib == lib_rmutex)
        rs_rmutex_destroy(p->h);
    else if (p->lib == lib_rwlock_rd || p->lib == lib_rwlock_wr) {
        for (prim_t *q = p + 1; q < g_prims + NPRIMS; q++)
            if (q->h == p->h)
                q->h = NULL; /* shared: destroyed once */
        rs_rwlock_destroy(p->h);
    } else
        rs_sem_destroy(p->h);
    p->h = NULL;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    ts_server_t srv;
    if (ts_server_start(&srv, NULL) != 0) {
        fprintf(stderr, "bench: cannot start redis-server\n");
        return 1;
    }
    uint64_t start = now_ns();
    int status = 1;
    raw_t raw;
    memset(&raw, 0, sizeof raw);
    rs_client_t *c1 = NULL, *c2 = NULL;
    rs_mutex_t *mh = NULL, *mw = NULL;
    redisContext *probe = NULL;
    samples_t sa = {0}, sa_idle = {0};
    samples_t sf = {0}, sfa = {0}; /* f, and the a measured next to it */
    pingpong_t pp;
    memset(&pp, 0, sizeof pp);
    pthread_mutex_init(&pp.mu, NULL);
    pthread_cond_init(&pp.cv, NULL);
    prim_t *const mutex = &g_prims[0];

    /* --- setup --- */
    raw.c = raw_connect(&srv);
    probe = raw_connect(&srv);
    if (!raw.c || !probe)
        goto out;
    char version[64] = "?";
    redisReply *r = redisCommand(raw.c, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING)
        info_field(r->str, "redis_version", version, sizeof version);
    if (r)
        freeReplyObject(r);
    if (script_load(raw.c, FLOOR_LUA, FLOOR_LUA_LEN, raw.floor_sha))
        goto out;
    if (script_load(raw.c, "return 1", 8, raw.one_sha) ||
        script_load(raw.c, NULL_LUA, NULL_LUA_LEN, raw.null_sha))
        goto out;
    /* keys, token and acquisition ids shaped exactly like the library's (keys.c, hold.c) */
    /* b runs on c's primitive (never at the same time), so the keys are the library's own */
    for (int i = 0; i < NPRIMS; i++) {
        prim_t *p = &g_prims[i];
        if (script_load(raw.c, p->script->body, p->script->len, p->sha))
            goto out;
        if (strcmp(p->sha, p->script->sha) != 0) {
            fail("SHA of %s: Redis says %s, the build says %s", p->script->name, p->sha,
                 p->script->sha);
            goto out;
        }
        prim_keys(p);
    }
    snprintf(raw.token, sizeof raw.token, "%s:%x", "0123456789abcdef0123456789abcdef", 1);
    snprintf(raw.idpfx, sizeof raw.idpfx, "%s", "0123456789abcdef");

    c1 = open_client(&srv);
    c2 = open_client(&srv);
    if (!c1 || !c2)
        goto out;
    for (int i = 0; i < NPRIMS; i++)
        if (prim_handle(&g_prims[i], c1)) {
            fail("%s handle: %s", g_prims[i].label, rs_client_lasterror(c1));
            goto out;
        }
    if (rs_mutex_init(&mh, c1, "bench:handoff") || rs_mutex_init(&mw, c2, "bench:handoff")) {
        fail("rs_mutex_init: %s", rs_client_lasterror(c1));
        goto out;
    }
    int sa_ops = 0;
    for (int i = 0; i < NPRIMS; i++) {
        prim_t *p = &g_prims[i];
        if (samples_init(&p->sa, (size_t)p->ops / 2) || samples_init(&p->sb, (size_t)p->ops) ||
            samples_init(&p->sc, (size_t)p->ops) || samples_init(&p->se, (size_t)p->ops)) {
            fail("out of memory");
            goto out;
        }
        sa_ops += p->ops / 2;
    }
    if (samples_init(&sa, (size_t)sa_ops) || samples_init(&sa_idle, HANDOFFS) ||
        samples_init(&sf, OPS_OTHER) || samples_init(&sfa, OPS_OTHER / 2) ||
        samples_init(&pp.handoff, HANDOFFS + HANDOFF_WARMUP) ||
        samples_init(&pp.unlock_call, HANDOFFS + HANDOFF_WARMUP)) {
        fail("out of memory");
        goto out;
    }

    printf("redisync %s bench: redis-server %s at %s, %ld CPUs online, load average %.2f\n",
           rs_version(), version, srv.url, sysconf(_SC_NPROCESSORS_ONLN), loadavg());
    printf("b, c, e: %d timed iterations each for the mutex (after %d warm-up), %d for the "
           "other primitives (after %d);\n%d rounds, each running for every primitive a chunk "
           "of a (half as many) then b, c and e\nin turn in chunks of %d; d: %d handoffs after "
           "%d warm-up\n\n", OPS, WARMUP, OPS_OTHER, WARMUP_OTHER, ROUNDS, CHUNK, HANDOFFS,
           HANDOFF_WARMUP);

    /* --- a, b, c --- */
    for (int i = 0; i < WARMUP; i++)
        if (op_raw_rtt(&raw))
            goto out;
    for (int k = 0; k < NPRIMS; k++)
        for (int i = 0; i < g_prims[k].warmup; i++)
            if (op_raw(&raw, &g_prims[k], g_prims[k].sha) ||
                op_raw(&raw, &g_prims[k], raw.null_sha) || op_lib(&g_prims[k]))
                goto out;
    int nchecked = 0;
    for (int k = 0; k < NPRIMS; k++)
        nchecked += check_b_matches_library(&srv, &raw, &g_prims[k]) == 0;
    if (nchecked == NPRIMS)
        printf("b checked: for each primitive, its two EVALSHAs match, argument for argument, "
               "what the library sent (MONITOR)\n\n");
    else
        printf("WARNING: %d of %d b rows do not send what the library sends (see above): fix "
               "bench.c\n\n", NPRIMS - nchecked, NPRIMS);
    cmdstats_t st0, st1, st2, st3;
    long long one_usec = 0, one_calls = 0; /* server time of a's EVALSHAs ("return 1") */
    /* Per round and primitive: a chunk of a, then b and c in alternating chunks of CHUNK.
     * Each operation runs back to back with itself (as a caller's loop would), and any change
     * of the machine's regime (bench/README.md) falls on b and c alike. */
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < NPRIMS; k++) {
            prim_t *p = &g_prims[k];
            int per_round = p->ops / ROUNDS;
            if (read_cmdstats(raw.c, &st0))
                goto out;
            for (int i = 0; i < per_round / 2; i++) {
                uint64_t t = now_ns();
                if (op_raw_rtt(&raw))
                    goto out;
                uint64_t dt = now_ns() - t;
                add(&sa, dt);
                add(&p->sa, dt);
            }
            if (read_cmdstats(raw.c, &st1))
                goto out;
            one_usec += stat_of(&st1, "evalsha", 1) - stat_of(&st0, "evalsha", 1);
            one_calls += stat_of(&st1, "evalsha", 0) - stat_of(&st0, "evalsha", 0);
            for (int done = 0; done < per_round; done += CHUNK) {
                int n = per_round - done < CHUNK ? per_round - done : CHUNK;
                if (read_cmdstats(raw.c, &st0))
                    goto out;
                for (int i = 0; i < n; i++) {
                    uint64_t t = now_ns();
                    if (op_raw(&raw, p, p->sha))
                        goto out;
                    add(&p->sb, now_ns() - t);
                }
                if (read_cmdstats(raw.c, &st1))
                    goto out;
                p->evalsha_usec += stat_of(&st1, "evalsha", 1) - stat_of(&st0, "evalsha", 1);
                p->evalsha_calls += stat_of(&st1, "evalsha", 0) - stat_of(&st0, "evalsha", 0);
                for (int i = 0; i < n; i++) {
                    uint64_t t = now_ns();
                    if (op_lib(p))
                        goto out;
                    add(&p->sc, now_ns() - t);
                }
                for (int i = 0; i < n; i++) {
                    uint64_t t = now_ns();
                    if (op_raw(&raw, p, raw.null_sha))
                        goto out;
                    add(&p->se, now_ns() - t);
                }
            }
        }
        /* f, with its own chunk of a before it, as a primitive's b */
        for (int i = 0; i < OPS_OTHER / ROUNDS / 2; i++) {
            uint64_t t = now_ns();
            if (op_raw_rtt(&raw))
                goto out;
            add(&sfa, now_ns() - t);
        }
        for (int i = 0; i < OPS_OTHER / ROUNDS; i++) {
            uint64_t t = now_ns();
            if (op_floor(&raw))
                goto out;
            add(&sf, now_ns() - t);
        }
    }

    /* --- a after HOLD_US of idleness, as the holder's unlock in d runs --- */
    for (int i = 0; i < HANDOFFS; i++) {
        usleep(HOLD_US);
        uint64_t t = now_ns();
        if (op_raw_rtt(&raw))
            goto out;
        add(&sa_idle, now_ns() - t);
    }

    /* --- d --- */
    pp.holder = mh;
    pp.waiter = mw;
    pp.probe = probe;
    pp.qkey = PREFIX ":{bench:handoff}:mutex:q";
    pp.rounds = HANDOFF_WARMUP;
    if (run_pingpong(&pp))
        goto out;
    pp.handoff.n = pp.unlock_call.n = 0;
    pp.late_queue = 0;
    pp.probes = 0;
    if (read_cmdstats(raw.c, &st2))
        goto out;
    pp.rounds = HANDOFFS;
    if (run_pingpong(&pp))
        goto out;
    if (read_cmdstats(raw.c, &st3))
        goto out;

    /* --- figures --- */
    double a50 = quantile_us(&sa, 0.5), a99 = quantile_us(&sa, 0.99);
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        p->a50 = quantile_us(&p->sa, 0.5);
        p->b50 = quantile_us(&p->sb, 0.5), p->b99 = quantile_us(&p->sb, 0.99);
        p->c50 = quantile_us(&p->sc, 0.5), p->c99 = quantile_us(&p->sc, 0.99);
        p->e50 = quantile_us(&p->se, 0.5);
    }
    double d50 = quantile_us(&pp.handoff, 0.5), d99 = quantile_us(&pp.handoff, 0.99);
    double u50 = quantile_us(&pp.unlock_call, 0.5);
    double ai50 = quantile_us(&sa_idle, 0.5);
    long acquisitions = 2L * HANDOFFS;
    long long evalsha = stat_of(&st3, "evalsha", 0) - stat_of(&st2, "evalsha", 0);

    printf("%-62s %9s %9s\n", "figure (per iteration)", "median", "p99");
    printf("%-62s %6.1f us %6.1f us\n", "a) raw round trip: EVALSHA \"return 1\"", a50, a99);
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        char what[96];
        snprintf(what, sizeof what, "b) raw %s scripts: EVALSHA acq \"q\" + EVALSHA rel",
             p->label);
        printf("%-62s %6.1f us %6.1f us\n", what, p->b50, p->b99);
        snprintf(what, sizeof what, "c) %s", p->lib_desc);
        printf("%-62s %6.1f us %6.1f us\n", what, p->c50, p->c99);
        snprintf(what, sizeof what, "e) %s's two calls to a script that does nothing",
                 p->label);
        printf("%-62s %6.1f us %6.1f us\n", what, p->e50, quantile_us(&p->se, 0.99));
    }
    printf("%-62s %6.1f us %6.1f us\n", "d) handoff: holder calls unlock -> waiter's lock returns",
           d50, d99);

    printf("\nuncontended lock+unlock per primitive (medians; a is each row's own: the round "
           "trips measured\nbetween that primitive's b and c iterations)\n");
    printf("%-10s %8s %8s %8s %7s %6s %9s %6s %9s %12s\n", "primitive", "a", "b", "c", "c / b",
           "<=1.10", "c / (2 a)", "<=1.20", "b / (2 a)", "script/call");
    int pass_cb = 0, pass_c2a = 0;
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        double cb = p->c50 / p->b50, c2a = p->c50 / (2 * p->a50);
        double script_us = p->evalsha_calls ? (double)p->evalsha_usec / (double)p->evalsha_calls
                                            : 0;
        pass_cb += cb <= TARGET_CB;
        pass_c2a += c2a <= TARGET_C2A;
        printf("%-10s %5.1f us %5.1f us %5.1f us %7.3f %6s %9.3f %6s %9.3f %9.1f us\n", p->label,
               p->a50, p->b50, p->c50, cb, verdict(cb, TARGET_CB), c2a, verdict(c2a, TARGET_C2A),
               p->b50 / (2 * p->a50), script_us);
    }
    double f50 = quantile_us(&sf, 0.5), fa50 = quantile_us(&sfa, 0.5);
    printf("%-10s %5.1f us %5.1f us %8s %7s %6s %9s %6s %9.3f\n", "floor (f)", fa50, f50, "-",
           "-", "", "-", "", f50 / (2 * fa50));
    printf("c / b <= 1.10: %d of %d PASS; c / (2 a) <= 1.20: %d of %d PASS\n", pass_cb, NPRIMS,
           pass_c2a, NPRIMS);
    printf("(f: the floor, the least a fenced lease lock sends: EVALSHA of SET NX PX + INCR, "
           "then of GET + DEL;\n no queue, no tombstone; its f / (2 a) is in the b / (2 a) "
           "column)\n");
    printf("(script/call: the server time of one EVALSHA of b, INFO commandstats usec / calls; "
           "b / (2 a) is what\n the scripts alone cost in round trips, the floor under c / (2 a))"
           "\n");
    /* how much of the 0.2 round trips the call itself takes, before any script work */
    printf("\nthe call alone (e: b's two EVALSHAs, same arguments, to a script that does "
           "nothing)\n");
    printf("%-10s %8s %9s %16s %16s\n", "primitive", "e", "e / (2 a)", "(c - b + e)/(2 a)",
           "(b - e)/(2 a)");
    for (int k = 0; k < NPRIMS; k++) {
        prim_t *p = &g_prims[k];
        printf("%-10s %5.1f us %9.3f %16.3f %16.3f\n", p->label, p->e50, p->e50 / (2 * p->a50),
               (p->c50 - p->b50 + p->e50) / (2 * p->a50), (p->b50 - p->e50) / (2 * p->a50));
    }
    printf("((c - b + e) / (2 a): c / (2 a) if the scripts did no work at all, the least this "
           "call shape and\n the library allow; (b - e) / (2 a): the scripts' own work, in round "
           "trips)\n");
    /* how fast the server runs scripts today: the verdicts above move with it
     * (docs/performance.md, "Where the time goes") */
    printf("server time of a's EVALSHA \"return 1\": %.2f us per call (how fast the server "
           "runs scripts:\n the c / (2 a) verdicts move with it; docs/performance.md)\n",
           one_calls ? (double)one_usec / (double)one_calls : 0.0);

    printf("\n%-40s %8s %9s  %s\n", "ratio (of medians)", "value", "target", "result");
    printf("%-40s %8.2f %9s  %s\n", "d / a      handoff in round trips", d50 / a50, "<= 3",
           verdict(d50 / a50, TARGET_DA));
    printf("\ncontext:\n");
    printf("  raw round trip after %d us idle (as the holder's unlock in d runs): %.1f us; "
           "d / that = %.2f\n", HOLD_US, ai50, d50 / ai50);
    long long d_usec = stat_of(&st3, "evalsha", 1) - stat_of(&st2, "evalsha", 1);
    printf("  the holder's rs_mutex_unlock call itself took %.1f us (median) during d; mutex.lua "
           "ran %.1f us per call there\n", u50, evalsha ? (double)d_usec / (double)evalsha : 0.0);
    if (pp.late_queue)
        printf("  in %ld of %d handoffs the waiter was not queued yet after %d us; the clock "
               "started only once it was\n", pp.late_queue, HANDOFFS, HOLD_US);
    /* Redis 7 counts the scripts' own redis.call()s in commandstats too: whatever else shows
     * up in the window is a command of a name mutex.lua uses, or one sent outside the scripts */
    long long inner = 0, outside = 0;
    char outside_names[256] = "";
    for (int i = 0; i < st3.n; i++) {
        const char *name = st3.name[i];
        long long d = st3.calls[i] - stat_of(&st2, name, 0);
        if (strcmp(name, "zcard") == 0)
            d -= pp.probes;
        if (d <= 0 || strcmp(name, "evalsha") == 0 || strcmp(name, "info") == 0)
            continue;
        if (script_calls(mutex->script, name)) {
            inner += d;
        } else {
            outside += d;
            size_t u = strlen(outside_names);
            snprintf(outside_names + u, sizeof outside_names - u, " %s:%lld", name, d);
        }
    }
    printf("  commands per acquisition in the contended ping-pong: %.2f (%lld EVALSHA / %ld "
           "acquisitions, holder's and waiter's)\n", (double)evalsha / (double)acquisitions,
           evalsha, acquisitions);
    printf("    EVALSHA calls only (INFO commandstats delta over the window, watchdog renewals "
           "included);\n"
           "    left out: the redis.call()s inside the scripts, which Redis 7 also counts (%.2f "
           "per\n"
           "    acquisition), and the bench's own ZCARD probes and INFO. Other commands sent: "
           "%s\n",
           (double)inner / (double)acquisitions, outside ? outside_names : "none");
    if (outside)
        printf("    (%.2f per acquisition)\n", (double)outside / (double)acquisitions);
    printf("\nbench took %.1f s; load average now %.2f (figures from a busy machine are not "
           "comparable)\n", (double)(now_ns() - start) / 1e9, loadavg());
    status = g_errors ? 1 : 0;

out:
    for (int k = 0; k < NPRIMS; k++) {
        prim_destroy(&g_prims[k]);
        free(g_prims[k].sa.v);
        free(g_prims[k].sb.v);
        free(g_prims[k].sc.v);
        free(g_prims[k].se.v);
    }
    rs_mutex_destroy(mh);
    rs_mutex_destroy(mw);
    rs_client_close(c1);
    rs_client_close(c2);
    if (raw.c)
        redisFree(raw.c);
    if (probe)
        redisFree(probe);
    free(sa.v);
    free(sa_idle.v);
    free(sf.v);
    free(sfa.v);
    free(pp.handoff.v);
    free(pp.unlock_call.v);
    ts_server_stop(&srv);
    return status;
}
