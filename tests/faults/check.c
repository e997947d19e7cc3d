/*
 * check.c - the invariants of one finished scenario, computed from what the workers
 * recorded on the checker (worker.c) and what the driver did (restart windows).
 *
 * A section is *truthful* when every unlock of it returned 0. Recorded times bracket the
 * real hold from inside: the lock was granted before T_ACQ and released after T_REL, so two
 * recorded intervals that overlap prove that the holds overlapped (the checks never need a
 * margin, and every time is CLOCK_MONOTONIC, one clock for all processes of the machine).
 *
 *   I1  a truthful section had every fenced op accepted
 *   I2  per name, tokens of truthful exclusive sections rise in T_ACQ order; a token seen
 *       twice is counted apart (dup), and is a violation only between truthful sections
 *   I3  truthful exclusive sections of one name never overlap; semaphore: truthful permits
 *       at any instant <= size; rwlock: a truthful writer overlaps no truthful section
 *   I4  per name, counter = accepted writes and no accepted write found a value other than
 *       the one its section read (bad)
 *   I5  latch: a wait returned only after the last needed count-down had been called, i.e.
 *       at least COUNT count-down calls of its round started before the wait returned
 *   I10 cond: every produced item consumed exactly once, in FIFO order, or still in the
 *       buffer; never above its capacity; each consumption inside a section of its worker
 *       (see check_cond)
 *   I6  a section with a refused fenced op got RS_ELOST from its unlock; a hold that spanned
 *       a restart without persistence got RS_ELOST (or, if its unlock could not reach Redis,
 *       at least on_lost); a worker that exited cleanly saw as many on_lost calls as RS_ELOST
 *   I7  sockets to the data server left after rs_client_close (keys: main.c, scan_ttls)
 *   lost?  under Redlock (not --net), every hold reported lost (unlock RS_ELOST, or on_lost
 *       during the section) is explained by a fault of the driver's log ("flt"): a stop of
 *       its own process around it, or a server fault on any master begun after its grant
 *       round could have begun and before its unlock returned (check_lost.c)
 *   live, api: recorded by the workers themselves (lists "live" and "api"); under Redlock,
 *       a lock call that timed out is judged here against the name's sections (check_waits)
 * Sections whose unlock returned RS_ELOST (or RS_ECONN) are excused from I1 and I3: the
 * library told their holders that exclusion may have been broken. They are counted (and
 * under Redlock each RS_ELOST must be explained by a fault: "lost?" above).
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "redisync.h"

typedef struct sec {
    int slot, gen;
    char name[16];
    uint64_t fence;
    int64_t t_req, t_acq, t_rel;
    int rc, rd, wr;
    unsigned permits;
    char mode;
    long onlost;
} sec_t;

static int g_verbose;

void viol(result_t *r, int kind, const char *fmt, ...)
{
    long n = ++r->violations[kind];
    if (n <= 5 || g_verbose) {
        char buf[1400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        printf("    VIOLATION %s: %s\n", viol_names[kind], buf);
    } else if (n == 6) {
        printf("    (further %s violations not shown; --verbose shows all)\n", viol_names[kind]);
    }
}

static int exclusive(const scenario_t *sc, const sec_t *s)
{
    if (sc->prim == P_ONCE) /* a failing fn makes no fenced write: its loss is on_lost's */
        return s->mode == 'x';
    return sc->prim == P_MUTEX || sc->prim == P_RMUTEX || sc->prim == P_COND || (sc->prim == P_RWLOCK && s->mode == 'w');
}

static const char *rcname(int rc)
{
    static char buf[16];
    switch (rc) {
    case 0:
        return "0";
    case RS_ELOST:
        return "RS_ELOST";
    case RS_ECONN:
        return "RS_ECONN";
    default:
        snprintf(buf, sizeof buf, "%d", rc);
        return buf;
    }
}

static void desc(const sec_t *s, char *buf, size_t len, int64_t t0)
{
    snprintf(buf, len, "w%d/g%d %s%s token %llu [%+.3f, %+.3f] s unlock %s rd %d wr %d",
             s->slot, s->gen, s->name, s->mode == 'r' ? "(read)" : s->mode == 'w' ? "(write)" : "",
             (unsigned long long)s->fence, (double)(s->t_acq - t0) / 1e6,
             (double)(s->t_rel - t0) / 1e6, rcname(s->rc), s->rd, s->wr);
}

static int by_acq(const void *a, const void *b)
{
    const sec_t *x = *(const sec_t *const *)a, *y = *(const sec_t *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->t_acq < y->t_acq ? -1 : x->t_acq > y->t_acq;
}

static int by_fence(const void *a, const void *b)
{
    const sec_t *x = *(const sec_t *const *)a, *y = *(const sec_t *const *)b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->fence < y->fence ? -1 : x->fence > y->fence;
}

typedef struct pev {
    int64_t t;
    int delta;
} pev_t;

static int by_time(const void *a, const void *b)
{
    const pev_t *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->delta - y->delta; /* releases first at equal times */
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static redisReply *lrange(redisContext *ck, const char *key)
{
    redisReply *r = ck_cmd(ck, "LRANGE %s 0 -1", key);
    if (r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "faults: LRANGE %s: unexpected reply\n", key);
        exit(3);
    }
    return r;
}

static void check_latch(redisContext *ck, const scenario_t *sc, result_t *r)
{
    redisReply *lat = lrange(ck, "lat");
    size_t n = lat->elements;
    typedef struct {
        char kind;
        int round, slot, rc;
        int64_t a, b;
    } lrec_t;
    lrec_t *v = calloc(n ? n : 1, sizeof *v);
    int maxround = 0;
    for (size_t i = 0; i < n; i++) {
        long long a, b;
        if (sscanf(lat->element[i]->str, "%c %d %d %lld %lld %d", &v[i].kind, &v[i].round,
                   &v[i].slot, &a, &b, &v[i].rc) != 6) {
            fprintf(stderr, "faults: bad latch record \"%s\"\n", lat->element[i]->str);
            exit(3);
        }
        v[i].a = a, v[i].b = b;
        if (v[i].round > maxround)
            maxround = v[i].round;
        if (v[i].kind == 'W') {
            r->sections++;
            if (v[i].rc == 0)
                r->truthful++;
            else
                r->other_rc++;
        } else if (v[i].rc != 0) {
            viol(r, V_API, "latch L%d: count-down by w%d returned %d (Redis never stalled "
                 "longer than timeout_ms)", v[i].round, v[i].slot, v[i].rc);
        }
    }
    /* I5: for each successful wait, COUNT count-down calls of its round began before it
     * returned (a count-down applied twice would open the latch one call early). */
    for (size_t i = 0; i < n; i++) {
        if (v[i].kind != 'W' || v[i].rc != 0)
            continue;
        int before = 0;
        for (size_t j = 0; j < n; j++)
            if (v[j].kind == 'D' && v[j].round == v[i].round && v[j].a < v[i].b)
                before++;
        if (before < sc->latch_count)
            viol(r, V_I5, "latch L%d opened early: w%d's wait returned at %lld us after only %d "
                 "of %d count-down calls had begun", v[i].round, v[i].slot, (long long)v[i].b,
                 before, sc->latch_count);
    }
    /* every round's count-downs: exactly one per count-down process */
    for (int rd = 1; rd <= maxround; rd++) {
        int downs = 0;
        for (size_t j = 0; j < n; j++)
            if (v[j].kind == 'D' && v[j].round == rd)
                downs++;
        if (downs > sc->latch_count)
            viol(r, V_API, "latch L%d: %d count-downs recorded (the test sends %d)", rd, downs,
                 sc->latch_count);
    }
    free(v);
    freeReplyObject(lat);
}

/* once: the fenced store of every round (I4); no run after a confirmed success and at most
 * one confirmed success per round; a caller that returned 0 without running fn did so after
 * some run's fn had succeeded (I8). p: the sections sorted by name, then T_ACQ. */
static void check_once(redisContext *ck, result_t *r, sec_t **p, size_t n)
{
    char d1[256], d2[256];
    int64_t t0 = INT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (p[i]->t_acq < t0)
            t0 = p[i]->t_acq;
    for (size_t i = 0; i < n;) {
        size_t j = i; /* [i, j): one round */
        const sec_t *ok = NULL;
        while (j < n && strcmp(p[j]->name, p[i]->name) == 0) {
            if (p[j]->rc == 0 && p[j]->mode == 'x') {
                if (ok) {
                    desc(ok, d1, sizeof d1, t0);
                    desc(p[j], d2, sizeof d2, t0);
                    viol(r, V_I8, "once %s: two confirmed successes: %s / %s", p[i]->name, d1, d2);
                }
                ok = p[j];
            }
            j++;
        }
        for (size_t k = i; ok && k < j; k++)
            if (p[k]->t_acq > ok->t_rel) {
                desc(ok, d1, sizeof d1, t0);
                desc(p[k], d2, sizeof d2, t0);
                viol(r, V_I8, "once %s: fn ran after the confirmed success: %s, then %s",
                     p[i]->name, d1, d2);
            }
        long long ctr = ck_int(ck, "GET ctr:%s", p[i]->name), acc = ck_int(ck, "GET acc:%s", p[i]->name),
                  bad = ck_int(ck, "GET bad:%s", p[i]->name);
        if ((ctr > 0 ? ctr : 0) != (acc > 0 ? acc : 0) || bad > 0)
            viol(r, V_I4, "%s: counter %lld, accepted writes %lld, writes that found another "
                 "value %lld", p[i]->name, ctr, acc, bad);
        i = j;
    }
    /* every caller that returned 0 without running fn: after some fn of its round succeeded */
    redisReply *x = lrange(ck, "onc");
    for (size_t e = 0; e < x->elements; e++) {
        int slot, gen, round, ran;
        long long tc, tr;
        if (sscanf(x->element[e]->str, "%d %d %d %lld %lld %d", &slot, &gen, &round, &tc, &tr,
                   &ran) != 6) {
            fprintf(stderr, "faults: bad once record \"%s\"\n", x->element[e]->str);
            exit(3);
        }
        if (ran)
            continue;
        char name[16];
        snprintf(name, sizeof name, "o%d", round);
        int before = 0;
        for (size_t i = 0; i < n && !before; i++)
            before = strcmp(p[i]->name, name) == 0 && p[i]->mode == 'x' && p[i]->t_rel < tr;
        if (!before)
            viol(r, V_I8, "once %s: w%d/g%d returned 0 without running fn at %+.3f s, before "
                 "any fn of the round had succeeded", name, slot, gen, (double)(tr - t0) / 1e6);
    }
    freeReplyObject(x);
}

/* cond (worker_cond.c): the buffer is a FIFO that only the mutex keeps consistent, and its
 * commits are logged atomically with it, so with exclusion the consumptions are exactly the
 * productions' prefix, in order, and the rest is what the buffer still holds: an item
 * consumed twice, lost (overwritten), never produced or taken out of order fails here (I10),
 * with no item excused (a killed worker's commit happened entirely or not at all). Each
 * consumption must also belong to a recorded section of its worker whose hold was granted
 * (its token), unless that worker generation died before recording it (no exit key). */
static void check_cond(redisContext *ck, result_t *r, const sec_t *s, size_t n)
{
    redisReply *prod = lrange(ck, "cprod"), *cons = lrange(ck, "ccons");
    size_t np = prod->elements, nc = cons->elements;
    typedef struct { char item[64]; int slot, gen; unsigned long long fence; } crec_t;
    crec_t *P = calloc(np + 1, sizeof *P), *C = calloc(nc + 1, sizeof *C);
    for (size_t i = 0; i < np; i++)
        if (sscanf(prod->element[i]->str, "%63s %d %d %llu", P[i].item, &P[i].slot, &P[i].gen,
                   &P[i].fence) != 4)
            viol(r, V_I10, "bad production record \"%s\"", prod->element[i]->str);
    for (size_t i = 0; i < nc; i++)
        if (sscanf(cons->element[i]->str, "%63s %d %d %llu", C[i].item, &C[i].slot, &C[i].gen,
                   &C[i].fence) != 4)
            viol(r, V_I10, "bad consumption record \"%s\"", cons->element[i]->str);
    long long head = ck_int(ck, "GET cq:head"), tail = ck_int(ck, "GET cq:tail");
    head = head < 0 ? 0 : head, tail = tail < 0 ? 0 : tail;
    long before = r->violations[V_I10];
    /* every consumption: of a produced item, its first, inside a section of its worker */
    for (size_t i = 0; i < nc; i++) {
        size_t first = i;
        for (size_t j = 0; j < i && first == i && strcmp(C[i].item, "-") != 0; j++)
            if (strcmp(C[j].item, C[i].item) == 0)
                first = j;
        if (first != i)
            viol(r, V_I10, "item %s consumed twice: #%zu by w%d/g%d (token %llu), #%zu by "
                 "w%d/g%d (token %llu)", C[i].item, first + 1, C[first].slot, C[first].gen,
                 C[first].fence, i + 1, C[i].slot, C[i].gen, C[i].fence);
        int produced = 0;
        for (size_t j = 0; j < np && !produced; j++)
            produced = strcmp(P[j].item, C[i].item) == 0;
        if (!produced)
            viol(r, V_I10, "consumption #%zu by w%d/g%d (token %llu) took %s, never produced",
                 i + 1, C[i].slot, C[i].gen, C[i].fence, C[i].item);
        int found = 0;
        for (size_t j = 0; j < n && !found; j++)
            found = s[j].slot == C[i].slot && s[j].gen == C[i].gen && s[j].fence == C[i].fence &&
                    s[j].mode == 'c';
        if (!found && ck_int(ck, "EXISTS exit:%d:%d", C[i].slot, C[i].gen) == 1)
            viol(r, V_I10, "consumption of %s by w%d/g%d under token %llu has no section of "
                 "that worker (which lived on)", C[i].item, C[i].slot, C[i].gen, C[i].fence);
    }
    /* every production: consumed, or still in the buffer (cq:s:HEAD .. TAIL-1) */
    for (size_t j = 0; j < np; j++) {
        int used = 0;
        for (size_t i = 0; i < nc && !used; i++)
            used = strcmp(P[j].item, C[i].item) == 0;
        for (long long k = head; k < tail && !used; k++) {
            redisReply *x = ck_cmd(ck, "GET cq:s:%lld", k);
            used = x->type == REDIS_REPLY_STRING && strcmp(x->str, P[j].item) == 0;
            freeReplyObject(x);
        }
        if (!used)
            viol(r, V_I10, "item %s (production #%zu by w%d/g%d, token %llu) lost: neither "
                 "consumed nor in the buffer", P[j].item, j + 1, P[j].slot, P[j].gen, P[j].fence);
    }
    if (head != (long long)nc || tail != (long long)np)
        viol(r, V_I10, "buffer head %lld, tail %lld after %zu consumptions, %zu productions",
             head, tail, nc, np);
    /* FIFO: with nothing above to explain it, consumption #i is production #i */
    for (size_t i = 0; i < nc && i < np && r->violations[V_I10] == before; i++)
        if (strcmp(C[i].item, P[i].item) != 0)
            viol(r, V_I10, "consumption #%zu took %s where the FIFO's item #%zu is %s", i + 1,
                 C[i].item, i + 1, P[i].item);
    long long over = ck_int(ck, "GET cq:over");
    if (over > 0)
        viol(r, V_I10, "%lld production(s) filled the buffer above its %d items", over, COND_CAP);
    if (g_verbose)
        printf("    cond: %zu produced, %zu consumed, %lld left in the buffer\n", np, nc,
               tail - head);
    free(P);
    free(C);
    freeReplyObject(prod);
    freeReplyObject(cons);
}

/* barrier: from "bar" (worker_sync.c), every pass saw the generation move past the one
 * read before its call (I9: nobody passes before a generation that counts it trips); a
 * serial pass whose window is one generation names it, and no generation has two. */
static void check_barrier(redisContext *ck, const scenario_t *sc, result_t *r)
{
    (void)sc;
    redisReply *x = lrange(ck, "bar");
    size_t n = x->elements;
    long long *serial_gen = calloc(n ? n : 1, sizeof *serial_gen);
    int *serial_slot = calloc(n ? n : 1, sizeof *serial_slot);
    size_t ns = 0;
    int64_t t0 = INT64_MAX;
    for (size_t e = 0; e < n; e++) {
        long long tc;
        if (sscanf(x->element[e]->str, "%*d %*d %lld", &tc) == 1 && tc < t0)
            t0 = tc;
    }
    for (size_t e = 0; e < n; e++) {
        int slot, gen, rc;
        long long tc, tr, g0, g1;
        if (sscanf(x->element[e]->str, "%d %d %lld %lld %d %lld %lld", &slot, &gen, &tc, &tr,
                   &rc, &g0, &g1) != 7) {
            fprintf(stderr, "faults: bad barrier record \"%s\"\n", x->element[e]->str);
            exit(3);
        }
        r->sections++;
        if (rc != 0 && rc != RS_BARRIER_SERIAL) {
            r->other_rc++;
            continue;
        }
        r->truthful++;
        if (g0 >= 0 && g1 >= 0 && g1 <= g0)
            viol(r, V_I9, "w%d/g%d passed (rc %d) at %+.3f s, but the generation was %lld "
                 "before its call and %lld after it returned", slot, gen, rc,
                 (double)(tr - t0) / 1e6, g0, g1);
        if (rc == RS_BARRIER_SERIAL && g0 >= 0 && g1 == g0 + 1) {
            for (size_t k = 0; k < ns; k++)
                if (serial_gen[k] == g0)
                    viol(r, V_I9, "generation %lld had two serial parties: w%d and w%d/g%d", g0,
                         serial_slot[k], slot, gen);
            serial_slot[ns] = slot;
            serial_gen[ns++] = g0;
        }
    }
    free(serial_gen);
    free(serial_slot);
    freeReplyObject(x);
}

void check_barrier_record(int data_port, const scenario_t *sc, result_t *r)
{
    redisContext *d = ck_connect(data_port);
    long long g = ck_int(d, "HGET fx:{%s}:barrier g", BARRIER_NAME);
    redisReply *x = ck_cmd(d, "HGETALL fx:{%s}:barrier:out", BARRIER_NAME);
    long *count = calloc(g > 0 ? (size_t)g : 1, sizeof *count);
    long *serial = calloc(g > 0 ? (size_t)g : 1, sizeof *serial);
    for (size_t i = 0; i + 1 < x->elements; i += 2) {
        long long gen;
        int s;
        if (sscanf(x->element[i + 1]->str, "%lld %d", &gen, &s) != 2 || gen < 0 || gen >= g) {
            viol(r, V_I9, "a counted arrival recorded as \"%s\" (generation now %lld)",
                 x->element[i + 1]->str, g);
            continue;
        }
        count[gen]++;
        serial[gen] += s;
    }
    for (long long k = 0; k < g; k++)
        if (count[k] != sc->sem_size || serial[k] != 1)
            viol(r, V_I9, "generation %lld tripped with %ld counted arrivals (parties %d) and %ld "
                 "serial", k, count[k], sc->sem_size, serial[k]);
    if (g <= 0)
        viol(r, V_LIVE, "the barrier never tripped");
    free(count);
    free(serial);
    freeReplyObject(x);
    redisFree(d);
}

/* Lock calls that timed out after LOCK_BOUND_MS (worker.c, list "lwait": "SLOT GEN NAME
 * T_REQ T_END"): each a liveness failure, except under Redlock. There a handoff may take up to a lease without any fault of
 * the library: a release that is late on one master (a lost segment, TCP's retransmission
 * back-off) leaves the lock held there until its lease ends, so seven waiters queued on a
 * name can wait longer than the bound in ticket order. Such a wait is a liveness failure
 * when it was overtaken (more than once: a lapsed reservation may let one later waiter
 * through; docs/deployments.md, "Waiting under Redlock") or when the name went longer than
 * a hold's release round, a lease and a round (lease + 2 timeout_ms) without a grant. */
static void check_waits(redisContext *ck, const scenario_t *sc, result_t *r, const sec_t *s,
                        size_t n)
{
    redisReply *x = lrange(ck, "lwait");
    int64_t *g = calloc(n + 2, sizeof *g);
    for (size_t i = 0; i < x->elements; i++) {
        int slot, gen;
        char name[16];
        long long t_req, t_end;
        if (sscanf(x->element[i]->str, "%d %d %15s %lld %lld", &slot, &gen, name, &t_req,
                   &t_end) != 5) {
            fprintf(stderr, "faults: bad wait record \"%s\"\n", x->element[i]->str);
            exit(3);
        }
        int over = 0;
        size_t m = 0;
        g[m++] = t_req;
        for (size_t k = 0; k < n; k++) {
            if (strcmp(s[k].name, name) != 0 || s[k].t_acq <= t_req || s[k].t_acq >= t_end)
                continue;
            g[m++] = s[k].t_acq;
            over += s[k].t_req > t_req;
        }
        g[m++] = t_end;
        qsort(g, m, sizeof *g, cmp_i64);
        int64_t gap = 0;
        for (size_t k = 1; k < m; k++)
            if (g[k] - g[k - 1] > gap)
                gap = g[k] - g[k - 1];
        char what[200];
        snprintf(what, sizeof what, "w%d gen %d: lock %s waited %lld ms without getting it: %zu "
                 "grant(s) of it to others meanwhile, %d to later callers, longest without a "
                 "grant %lld ms", slot, gen, name, (t_end - t_req) / 1000, m - 2, over,
                 (long long)gap / 1000);
        if (!sc->redlock || over > 1 || gap / 1000 > sc->lease_ms + 2 * sc->timeout_ms)
            viol(r, V_LIVE, "%s", what);
        else
            printf("    (queued, not starved: %s)\n", what);
    }
    free(g);
    freeReplyObject(x);
}

void check_scenario(redisContext *ck, const scenario_t *sc, result_t *r,
                    const restart_win_t *restarts, int nrestarts, int verbose)
{
    g_verbose = verbose;
    /* the workers' own findings */
    redisReply *x = lrange(ck, "api");
    for (size_t i = 0; i < x->elements; i++)
        viol(r, V_API, "%s", x->element[i]->str);
    freeReplyObject(x);
    x = lrange(ck, "live");
    for (size_t i = 0; i < x->elements; i++)
        viol(r, V_LIVE, "%s", x->element[i]->str);
    freeReplyObject(x);

    /* clean exits: on_lost once per lost hold, no socket left */
    x = ck_cmd(ck, "KEYS exit:*");
    for (size_t i = 0; i < x->elements; i++) {
        long long el = -1, ol = -1;
        int socks = -1;
        redisReply *v = ck_cmd(ck, "GET %s", x->element[i]->str);
        if (v->type == REDIS_REPLY_STRING)
            sscanf(v->str, "%lld:%lld:%d", &el, &ol, &socks);
        freeReplyObject(v);
        r->onlost += ol > 0 ? ol : 0;
        if (el != ol)
            viol(r, V_I6, "%s: %lld holds ended with RS_ELOST but on_lost was called %lld times "
                 "(exactly once per lost hold)", x->element[i]->str, el, ol);
        if (socks != 0)
            viol(r, V_I7, "%s: %d socket(s) to the data server still open after rs_client_close",
                 x->element[i]->str, socks);
    }
    freeReplyObject(x);

    /* lock errors, for the table */
    x = ck_cmd(ck, "HGETALL err");
    for (size_t i = 0; i + 1 < x->elements; i += 2) {
        long cnt = strtol(x->element[i + 1]->str, NULL, 10);
        if (strcmp(x->element[i]->str, "lock:EDEADLK-orphan") == 0)
            r->orphans += cnt;
        else if (strncmp(x->element[i]->str, "lock:", 5) == 0)
            r->lock_errors += cnt;
        if (verbose)
            printf("    errors %s: %ld\n", x->element[i]->str, cnt);
    }
    freeReplyObject(x);

    if (sc->prim == P_LATCH) {
        check_latch(ck, sc, r);
        return;
    }
    if (sc->prim == P_BARRIER) {
        check_barrier(ck, sc, r);
        return;
    }

    redisReply *list = lrange(ck, "sec");
    size_t n = list->elements;
    sec_t *s = calloc(n ? n : 1, sizeof *s);
    sec_t **p = calloc(n ? n : 1, sizeof *p);
    int64_t t0 = INT64_MAX;
    r->waits = calloc(n ? n : 1, sizeof *r->waits);
    for (size_t i = 0; i < n; i++) {
        unsigned long long f;
        long long a, b, req;
        if (sscanf(list->element[i]->str, "%d %d %15s %llu %lld %lld %d %d %d %u %c %ld %lld",
                   &s[i].slot, &s[i].gen, s[i].name, &f, &a, &b, &s[i].rc, &s[i].rd, &s[i].wr,
                   &s[i].permits, &s[i].mode, &s[i].onlost, &req) != 13) {
            fprintf(stderr, "faults: bad section record \"%s\"\n", list->element[i]->str);
            exit(3);
        }
        s[i].fence = f, s[i].t_req = req, s[i].t_acq = a, s[i].t_rel = b;
        if (r->waits)
            r->waits[r->nwaits++] = a - req; /* the lock call until its grant */
        p[i] = &s[i];
        if (a < t0)
            t0 = a;
    }
    freeReplyObject(list);
    r->sections = (long)n;
    check_waits(ck, sc, r, s, n);
    if (r->waits)
        qsort(r->waits, (size_t)r->nwaits, sizeof *r->waits, cmp_i64);
    char d1[256], d2[256];

    for (size_t i = 0; i < n; i++) {
        sec_t *e = &s[i];
        int truthful = e->rc == 0;
        if (truthful)
            r->truthful++;
        else if (e->rc == RS_ELOST)
            r->elost++;
        else
            r->other_rc++;
        int refused = exclusive(sc, e) && (e->rd == 0 || e->wr == 0);
        if (truthful && refused) {
            desc(e, d1, sizeof d1, t0);
            viol(r, V_I1, "unlock returned 0 but a fenced op was refused: %s", d1);
        }
        if (refused && e->rc == RS_ELOST)
            r->refused_reported++;
        if (refused && e->rc != RS_ELOST) {
            desc(e, d1, sizeof d1, t0);
            viol(r, V_I6, "a fenced op was refused but unlock did not return RS_ELOST: %s", d1);
        }
        /* a hold that spanned a restart without persistence was lost: it must be told */
        for (int k = 0; k < nrestarts; k++) {
            if (!restarts[k].lossy || !(e->t_acq < restarts[k].down && e->t_rel > restarts[k].up))
                continue;
            if (e->rc == RS_ELOST || (e->rc == RS_ECONN && e->onlost > 0)) {
                r->restart_lost++;
                continue;
            }
            desc(e, d1, sizeof d1, t0);
            viol(r, V_I6, "hold spanned the lossy restart at %+.3f s (down %.0f ms) but its loss "
                 "was not reported (on_lost %ld): %s", (double)(restarts[k].down - t0) / 1e6,
                 (double)(restarts[k].up - restarts[k].down) / 1e3, e->onlost, d1);
        }
    }

    /* I2: duplicates (all sections with a token), then order among truthful ones */
    qsort(p, n, sizeof *p, by_fence);
    for (size_t i = 1; i < n; i++) {
        if (p[i]->fence == 0 || strcmp(p[i]->name, p[i - 1]->name) != 0 || p[i]->fence != p[i - 1]->fence)
            continue;
        if (sc->prim == P_RWLOCK && (p[i]->mode != 'w' || p[i - 1]->mode != 'w'))
            continue;
        r->dup_tokens++;
        if (p[i]->rc == 0 && p[i - 1]->rc == 0) {
            desc(p[i - 1], d1, sizeof d1, t0);
            desc(p[i], d2, sizeof d2, t0);
            viol(r, V_I2, "token handed out twice to truthful holders: %s / %s", d1, d2);
        }
    }
    qsort(p, n, sizeof *p, by_acq);
    if (sc->prim != P_SEM) {
        const sec_t *prev = NULL;
        for (size_t i = 0; i < n; i++) {
            if (p[i]->rc != 0 || !exclusive(sc, p[i]))
                continue;
            if (prev && strcmp(prev->name, p[i]->name) == 0 && p[i]->fence <= prev->fence) {
                desc(prev, d1, sizeof d1, t0);
                desc(p[i], d2, sizeof d2, t0);
                viol(r, V_I2, "token did not rise in grant order: %s then %s", d1, d2);
            }
            prev = p[i];
        }
    }

    /* I3 */
    if (sc->prim == P_MUTEX || sc->prim == P_RMUTEX || sc->prim == P_ONCE || sc->prim == P_COND) {
        const sec_t *last = NULL; /* the truthful section of this name that ends last */
        for (size_t i = 0; i < n; i++) {
            if (p[i]->rc != 0)
                continue;
            if (last && strcmp(last->name, p[i]->name) != 0)
                last = NULL;
            if (last && p[i]->t_acq < last->t_rel) {
                desc(last, d1, sizeof d1, t0);
                desc(p[i], d2, sizeof d2, t0);
                viol(r, V_I3, "two truthful holders overlapped by %.3f ms: %s / %s",
                     (double)(last->t_rel - p[i]->t_acq) / 1e3, d1, d2);
            }
            if (!last || p[i]->t_rel > last->t_rel)
                last = p[i];
        }
    } else if (sc->prim == P_RWLOCK) {
        for (size_t i = 0; i < n; i++) {
            if (p[i]->rc != 0 || p[i]->mode != 'w')
                continue;
            for (size_t j = 0; j < n; j++) {
                if (j == i || p[j]->rc != 0 || strcmp(p[j]->name, p[i]->name) != 0)
                    continue;
                if (p[j]->t_acq < p[i]->t_rel && p[i]->t_acq < p[j]->t_rel &&
                    (p[j]->mode == 'r' || j > i)) {
                    desc(p[i], d1, sizeof d1, t0);
                    desc(p[j], d2, sizeof d2, t0);
                    viol(r, V_I3, "a truthful writer overlapped another truthful holder: %s / %s", d1, d2);
                }
            }
        }
    } else if (sc->prim == P_SEM) {
        pev_t *ev = calloc(2 * n + 1, sizeof *ev);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) /* one name ("n0") per semaphore scenario */
            if (p[i]->rc == 0) {
                ev[m++] = (pev_t){p[i]->t_acq, (int)p[i]->permits};
                ev[m++] = (pev_t){p[i]->t_rel, -(int)p[i]->permits};
            }
        qsort(ev, m, sizeof *ev, by_time);
        int cur = 0, worst = 0;
        int64_t worst_t = 0;
        for (size_t i = 0; i < m; i++) {
            cur += ev[i].delta;
            if (cur > worst)
                worst = cur, worst_t = ev[i].t;
        }
        if (worst > sc->sem_size)
            viol(r, V_I3, "%d permits held at once by truthful holders at %+.3f s (size %d)",
                 worst, (double)(worst_t - t0) / 1e6, sc->sem_size);
        free(ev);
    }

    if (sc->prim == P_COND)
        check_cond(ck, r, s, n);

    /* I4 */
    if (sc->prim == P_ONCE)
        check_once(ck, r, p, n);
    else if (sc->prim != P_SEM) {
        for (int k = 0; k < sc->names; k++) {
            long long ctr = ck_int(ck, "GET ctr:n%d", k), acc = ck_int(ck, "GET acc:n%d", k),
                      bad = ck_int(ck, "GET bad:n%d", k);
            if (ctr < 0)
                ctr = 0;
            if (acc < 0)
                acc = 0;
            if (bad < 0)
                bad = 0;
            if (ctr != acc || bad != 0)
                viol(r, V_I4, "n%d: counter %lld, accepted writes %lld, writes that found another "
                     "value %lld", k, ctr, acc, bad);
        }
    }

    /* in-section faults and takeover: from the fault to the next grant of that name to
     * another process (only where the hold excludes everyone else) */
    x = lrange(ck, "ev");
    r->takeover = calloc(x->elements ? x->elements : 1, sizeof *r->takeover);
    for (size_t i = 0; i < x->elements; i++) {
        char kind, name[16];
        int slot;
        long long t;
        unsigned long long fence;
        long pend;
        int got = sscanf(x->element[i]->str, "%c %d %lld %15s %llu %ld", &kind, &slot, &t, name,
                         &fence, &pend);
        if (got < 5)
            continue;
        r->faults[kind == 'K' ? F_KILL_HOLDER : F_STOP_HOLDER]++;
        if (got == 6) /* an event-loop worker's: its requests pending at the fault */
            apend_add(r, kind == 'K' ? F_KILL_HOLDER : F_STOP_HOLDER, slot, pend);
        if (sc->prim == P_SEM || fence == 0)
            continue;
        int64_t best = -1;
        for (size_t j = 0; j < n; j++)
            if (s[j].slot != slot && strcmp(s[j].name, name) == 0 && s[j].t_acq > t &&
                (best < 0 || s[j].t_acq - t < best))
                best = s[j].t_acq - t;
        if (best >= 0)
            r->takeover[r->ntakeover++] = best;
    }
    freeReplyObject(x);
    qsort(r->takeover, (size_t)r->ntakeover, sizeof *r->takeover, cmp_i64);
    if (sc->redlock && !sc->net)
        check_lost(ck, sc, r, verbose);
    free(p);
    free(s);
}
