/*
 * stress_async_redlock.c - the event-loop API under redlock:// under load (make check-tsan,
 * check-valgrind): three redis-servers, two clients on NNAMES mutex names. Per client:
 *   - a loop thread: epoll on rs_client_fd, rs_client_dispatch when readable; it keeps up to
 *     INFLIGHT rs_mutex_acquire_async requests pending, rotating through no deadline, a
 *     deadline 5 ms away (ETIMEDOUT or a grant), one already past (EBUSY or a grant) and one
 *     cancelled right after submission (racing its grant: done must say ECANCELED whatever
 *     the masters did); a granted hold is released with rs_hold_release_async (its done
 *     counted too) or handed to the releaser thread (rs_hold_release);
 *   - a blocking thread on the same names: rs_mutex_lock/unlock and rs_mutex_acquire (its
 *     hold released by the releaser thread).
 * At the end each client gets requests that cannot complete (behind a hold main keeps, plus
 * a release in flight) and is closed with them pending: their done calls run inside
 * rs_client_close.
 *
 * Checks: no two holders of one name inside at once (an atomic "inside" flag, a counter read
 * then written relaxed, so a broken exclusion loses increments); every done runs exactly once
 * with a code the contract allows; requests pending at close end with ECANCELED inside the
 * close; no hold and no waiter left on any master; no library connection left on any master.
 * If a hold is lost (the machine stalled past the lease) the exclusion checks become a
 * warning, as in stress_mutex.
 */
#include <sched.h>
#include <sys/epoll.h>

#include "stress.h"

#define NM 3
#define NNAMES 3
#define INFLIGHT 8
#define CLOSE_REQS 5

enum { K_PLAIN, K_DEADLINE, K_PAST, K_CANCEL, K_NKINDS, K_REL, K_CLOSE, K_CLOSE_REL };

typedef struct ctx {
    int cl, name, kind;
    atomic_int ndone, rc;
} ctx_t;

typedef struct client {
    int id;
    rs_client_t *c;
    rs_mutex_t *m[NNAMES];
    ctx_t *pool;
    int npool, used;
    atomic_int outstanding;
    int iters, biters;
} client_t;

static client_t g_cl[2];
static atomic_int g_inside[NNAMES], g_overlaps, g_elost;
static atomic_long g_counter[NNAMES], g_sections[NNAMES], g_granted, g_timedout, g_busy,
    g_canceled;

/* ---- the releaser thread ------------------------------------------------------------------ */

typedef struct relq {
    rs_hold_t *h;
    struct relq *next;
} relq_t;

static pthread_mutex_t g_rmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_rcv = PTHREAD_COND_INITIALIZER;
static relq_t *g_rhead;
static int g_rstop;

static void releaser_push(rs_hold_t *h)
{
    relq_t *e = malloc(sizeof *e);
    if (!e) {
        FAILF("out of memory");
        rs_hold_release(h);
        return;
    }
    e->h = h;
    pthread_mutex_lock(&g_rmu);
    e->next = g_rhead;
    g_rhead = e;
    pthread_cond_signal(&g_rcv);
    pthread_mutex_unlock(&g_rmu);
}

static void *releaser_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_rmu);
    for (;;) {
        while (!g_rhead && !g_rstop)
            pthread_cond_wait(&g_rcv, &g_rmu);
        if (!g_rhead)
            break;
        relq_t *e = g_rhead;
        g_rhead = e->next;
        pthread_mutex_unlock(&g_rmu);
        int rc = rs_hold_release(e->h);
        if (rc == RS_ELOST)
            atomic_fetch_add(&g_elost, 1);
        else if (rc)
            FAILF("releaser: rs_hold_release: %d %s", rc, rs_strerror(rc));
        free(e);
        pthread_mutex_lock(&g_rmu);
    }
    pthread_mutex_unlock(&g_rmu);
    return NULL;
}

static void section(int name)
{
    if (atomic_exchange(&g_inside[name], 1))
        atomic_fetch_add(&g_overlaps, 1);
    long v = atomic_load_explicit(&g_counter[name], memory_order_relaxed);
    sched_yield();
    atomic_store_explicit(&g_counter[name], v + 1, memory_order_relaxed);
    atomic_fetch_add(&g_sections[name], 1);
    atomic_store(&g_inside[name], 0);
}

/* ---- done callbacks ------------------------------------------------------------------------ */

static ctx_t *ctx_new(client_t *cl, int name, int kind)
{
    if (cl->used >= cl->npool) {
        FAILF("client %d: context pool exhausted", cl->id);
        return NULL;
    }
    ctx_t *x = &cl->pool[cl->used++];
    x->cl = cl->id;
    x->name = name;
    x->kind = kind;
    atomic_store(&x->rc, -12345);
    return x;
}

static void once(ctx_t *x, int rc)
{
    atomic_store(&x->rc, rc);
    int n = atomic_fetch_add(&x->ndone, 1);
    if (n != 0)
        FAILF("client %d: done of a kind %d request ran %d times", x->cl, x->kind, n + 1);
}

static void done_rel(int rc, rs_hold_t *hold, void *arg)
{
    ctx_t *x = arg;
    once(x, rc);
    if (hold)
        FAILF("client %d: a release's done got a hold", x->cl);
    if (x->kind == K_CLOSE_REL) {
        if (rc != 0 && rc != RS_ELOST && rc != ECANCELED)
            FAILF("client %d: release pending at close: done(%d %s)", x->cl, rc,
                  rs_strerror(rc));
        return;
    }
    if (rc == RS_ELOST)
        atomic_fetch_add(&g_elost, 1);
    else if (rc)
        FAILF("client %d: rs_hold_release_async: done(%d %s)", x->cl, rc, rs_strerror(rc));
    atomic_fetch_sub(&g_cl[x->cl].outstanding, 1);
}

static void done_acq(int rc, rs_hold_t *hold, void *arg)
{
    ctx_t *x = arg;
    client_t *cl = &g_cl[x->cl];
    once(x, rc);
    if ((rc == 0) != (hold != NULL))
        FAILF("client %d: done(%d) with hold %p", x->cl, rc, (void *)hold);
    int ok = x->kind == K_PLAIN      ? rc == 0
             : x->kind == K_DEADLINE ? rc == 0 || rc == ETIMEDOUT
             : x->kind == K_PAST     ? rc == 0 || rc == EBUSY
                                     : rc == ECANCELED; /* cancelled, or pending at close */
    if (!ok)
        FAILF("client %d: kind %d request: done(%d %s)", x->cl, x->kind, rc, rs_strerror(rc));
    if (rc == ETIMEDOUT)
        atomic_fetch_add(&g_timedout, 1);
    else if (rc == EBUSY)
        atomic_fetch_add(&g_busy, 1);
    else if (rc == ECANCELED)
        atomic_fetch_add(&g_canceled, 1);
    if (hold) {
        atomic_fetch_add(&g_granted, 1);
        if (rs_hold_fence(hold) == 0)
            FAILF("client %d: a hold without a fencing token", x->cl);
        section(x->name);
        ctx_t *r = x->kind < K_NKINDS && (cl->used % 2) ? ctx_new(cl, x->name, K_REL) : NULL;
        if (r) {
            atomic_fetch_add(&cl->outstanding, 1);
            int src = rs_hold_release_async(hold, done_rel, r);
            if (src) {
                FAILF("client %d: rs_hold_release_async: %d %s", x->cl, src, rs_strerror(src));
                atomic_fetch_sub(&cl->outstanding, 1);
            }
        } else if (x->kind < K_NKINDS) {
            releaser_push(hold);
        } else {
            rs_hold_release(hold);
        }
    }
    if (x->kind < K_NKINDS)
        atomic_fetch_sub(&cl->outstanding, 1);
}

/* ---- the loop thread and the blocking thread ------------------------------------------------ */

static void *loop_main(void *arg)
{
    client_t *cl = arg;
    unsigned seed = 4099u * (unsigned)cl->id + 7;
    int efd = rs_client_fd(cl->c);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    if (efd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) != 0) {
        FAILF("client %d: rs_client_fd %d, epoll: %s", cl->id, efd, strerror(errno));
        if (ep >= 0)
            close(ep);
        return NULL;
    }
    long long give_up = st_mono_ms() + 240000;
    int submitted = 0;
    while (submitted < cl->iters || atomic_load(&cl->outstanding) > 0) {
        if (st_mono_ms() > give_up) {
            FAILF("client %d: %d request(s) still pending after 240 s", cl->id,
                  atomic_load(&cl->outstanding));
            break;
        }
        while (submitted < cl->iters && atomic_load(&cl->outstanding) < INFLIGHT) {
            int kind = (int)(st_rand(&seed) % K_NKINDS), name = (int)(st_rand(&seed) % NNAMES);
            ctx_t *x = ctx_new(cl, name, kind);
            if (!x)
                break;
            struct timespec dl = st_abs_in(kind == K_PAST ? -1000 : 5);
            const struct timespec *dp = kind == K_DEADLINE || kind == K_PAST ? &dl : NULL;
            rs_request_t *req = NULL;
            atomic_fetch_add(&cl->outstanding, 1);
            int rc = rs_mutex_acquire_async(cl->m[name], dp, done_acq, x, &req);
            submitted++;
            if (rc) {
                FAILF("client %d: rs_mutex_acquire_async: %d %s", cl->id, rc, rs_strerror(rc));
                atomic_fetch_sub(&cl->outstanding, 1);
                continue;
            }
            if (kind == K_CANCEL)
                EXPECT_RC(rs_request_cancel(req), 0); /* this thread dispatches: req valid */
        }
        struct epoll_event got;
        if (epoll_wait(ep, &got, 1, 50) < 0 && errno != EINTR)
            FAILF("client %d: epoll_wait: %s", cl->id, strerror(errno));
        rs_client_dispatch(cl->c);
    }
    close(ep);
    return NULL;
}

static void *blocking_main(void *arg)
{
    client_t *cl = arg;
    unsigned seed = 131u * (unsigned)cl->id + 17;
    for (int i = 0; i < cl->biters; i++) {
        int name = (int)(st_rand(&seed) % NNAMES);
        if (i % 2) {
            int rc = rs_mutex_lock(cl->m[name]);
            if (rc) {
                FAILF("client %d: rs_mutex_lock: %d %s", cl->id, rc, rs_strerror(rc));
                break;
            }
            section(name);
            rc = rs_mutex_unlock(cl->m[name]);
            if (rc == RS_ELOST)
                atomic_fetch_add(&g_elost, 1);
            else if (rc)
                FAILF("client %d: rs_mutex_unlock: %d %s", cl->id, rc, rs_strerror(rc));
        } else {
            rs_hold_t *h = NULL;
            int rc = rs_mutex_acquire(cl->m[name], NULL, &h);
            if (rc) {
                FAILF("client %d: rs_mutex_acquire: %d %s", cl->id, rc, rs_strerror(rc));
                break;
            }
            section(name);
            releaser_push(h);
        }
    }
    return NULL;
}

/* ---- close with requests pending ------------------------------------------------------------ */

static void close_pending(client_t *cl)
{
    int first = cl->used;
    rs_request_t *req;
    for (int i = 0; i < CLOSE_REQS; i++) {
        ctx_t *x = ctx_new(cl, 0, K_CLOSE);
        struct timespec dl = st_abs_in(120000);
        if (x)
            EXPECT_RC(rs_mutex_acquire_async(cl->m[0], i % 2 ? &dl : NULL, done_acq, x, &req),
                      0);
    }
    rs_hold_t *h = NULL;
    EXPECT_RC(rs_mutex_acquire(cl->m[2], NULL, &h), 0);
    ctx_t *x = ctx_new(cl, 2, K_CLOSE_REL);
    if (h && x)
        EXPECT_RC(rs_hold_release_async(h, done_rel, x), 0);
    st_sleep_ms(30); /* let some of them reach the masters' queues */
    EXPECT_RC(rs_client_close(cl->c), 0);
    for (int i = first; i < cl->used; i++)
        if (atomic_load(&cl->pool[i].ndone) != 1)
            FAILF("client %d: kind %d request pending at close: done ran %d times", cl->id,
                  cl->pool[i].kind, atomic_load(&cl->pool[i].ndone));
}

/* No holder and no waiter of any name on any master (within a few seconds: a queue entry of
 * a request that ended while its master was slow expires with its queue lease). */
static void check_clean(ts_server_t *s, const char *prefix, const char *when)
{
    for (int n = 0; n < NNAMES; n++)
        for (int i = 0; i < NM; i++) {
            long long held = -1, queued = -1;
            for (long long until = st_mono_ms() + 3 * st_lease_ms() + 2000;
                 st_mono_ms() < until; st_sleep_ms(20)) {
                held = ts_cmd_int(&s[i], "HEXISTS %s:{stress-rl-%d}:mutex o", prefix, n);
                queued = ts_cmd_int(&s[i], "ZCARD %s:{stress-rl-%d}:mutex:q", prefix, n);
                if (held == 0 && queued == 0)
                    break;
            }
            if (held != 0 || queued != 0)
                FAILF("%s: name %d on master %d: held %lld, %lld waiter(s)", when, n, i, held,
                      queued);
        }
}

int main(void)
{
    long long t0 = st_mono_ms();
    st_prog = "stress_async_redlock";
    ts_server_t srv[NM];
    for (int i = 0; i < NM; i++)
        if (ts_server_start(&srv[i], NULL) != 0) {
            fprintf(stderr, "stress_async_redlock: cannot start redis-server %d\n", i);
            return 2;
        }
    char url[256], prefix[64];
    ts_redlock_url(url, sizeof url, srv, NM);
    ts_unique_prefix(prefix, sizeof prefix);
    for (int i = 0; i < 2; i++) {
        client_t *cl = &g_cl[i];
        cl->id = i;
        rs_config_t cfg;
        rs_config_init(&cfg);
        cfg.url = url;
        cfg.prefix = prefix;
        cfg.lease_ms = st_lease_ms();
        cfg.timeout_ms = 10000; /* sanitizers and valgrind are slow; Redis is local */
        cfg.on_lost = st_on_lost;
        cfg.log = st_log;
        if (rs_client_open(&cl->c, &cfg) != 0) {
            fprintf(stderr, "stress_async_redlock: open %s: %s\n", url, rs_client_lasterror(NULL));
            return 2;
        }
        cl->iters = st_scaled(1000);
        cl->biters = st_scaled(150);
        cl->npool = 2 * cl->iters + CLOSE_REQS + 1;
        cl->pool = calloc((size_t)cl->npool, sizeof *cl->pool);
        if (!cl->pool)
            return 2;
        for (int n = 0; n < NNAMES; n++) {
            char name[32];
            snprintf(name, sizeof name, "stress-rl-%d", n);
            if (rs_mutex_init(&cl->m[n], cl->c, name) != 0) {
                fprintf(stderr, "stress_async_redlock: rs_mutex_init: %s\n",
                        rs_client_lasterror(cl->c));
                return 2;
            }
        }
    }
    pthread_t rel, loops[2], blockers[2];
    st_spawn(&rel, releaser_main, NULL);
    for (int i = 0; i < 2; i++) {
        st_spawn(&loops[i], loop_main, &g_cl[i]);
        st_spawn(&blockers[i], blocking_main, &g_cl[i]);
    }
    st_join_all(blockers, 2);
    st_join_all(loops, 2);
    pthread_mutex_lock(&g_rmu);
    g_rstop = 1;
    pthread_cond_signal(&g_rcv);
    pthread_mutex_unlock(&g_rmu);
    pthread_join(rel, NULL);

    long sections = 0;
    int bad = atomic_load(&g_overlaps);
    for (int n = 0; n < NNAMES; n++) {
        sections += atomic_load(&g_sections[n]);
        if (atomic_load(&g_counter[n]) != atomic_load(&g_sections[n]))
            bad++;
    }
    int lost = atomic_load(&st_lost) + atomic_load(&g_elost);
    if (bad && lost)
        fprintf(stderr, "stress_async_redlock: WARNING: %d overlap(s) or lost increment(s) "
                "after %d lost hold(s): exclusion not checked\n", bad, lost);
    else if (bad)
        FAILF("%d overlap(s) or lost increment(s)", bad);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < g_cl[i].used; k++)
            if (atomic_load(&g_cl[i].pool[k].ndone) != 1)
                FAILF("client %d: kind %d request: done ran %d times (rc %d)", i,
                      g_cl[i].pool[k].kind, atomic_load(&g_cl[i].pool[k].ndone),
                      atomic_load(&g_cl[i].pool[k].rc));
    if (atomic_load(&g_granted) == 0)
        FAILF("no acquisition was granted");
    check_clean(srv, prefix, "after the run");
    if (st_verbose() || lost)
        fprintf(stderr, "stress_async_redlock: %ld sections, %ld async grants, %ld ETIMEDOUT, "
                "%ld EBUSY, %ld ECANCELED, %d lost\n", sections, atomic_load(&g_granted),
                atomic_load(&g_timedout), atomic_load(&g_busy), atomic_load(&g_canceled), lost);

    /* close with requests pending: main holds name 0 through a hold object of client 0 */
    rs_hold_t *keep = NULL;
    EXPECT_RC(rs_mutex_acquire(g_cl[0].m[0], NULL, &keep), 0);
    close_pending(&g_cl[1]);
    close_pending(&g_cl[0]);
    if (keep) {
        int rc = rs_hold_release(keep); /* after the close: only frees it */
        if (rc != 0 && rc != RS_ELOST)
            FAILF("rs_hold_release after the close: %d %s", rc, rs_strerror(rc));
    }
    check_clean(srv, prefix, "after the closes");
    for (int i = 0; i < 2; i++) {
        for (int n = 0; n < NNAMES; n++)
            EXPECT_RC(rs_mutex_destroy(g_cl[i].m[n]), 0);
        free(g_cl[i].pool);
    }
    for (int i = 0; i < NM; i++) {
        long long n = -1;
        for (long long until = st_mono_ms() + 3000; st_mono_ms() < until; st_sleep_ms(20))
            if ((n = ts_info_ll(&srv[i], "clients", "connected_clients", NULL)) == 1)
                break;
        if (n != 1)
            FAILF("master %d: %lld connection(s) still open after every client was closed", i,
                  n - 1);
        ts_server_stop(&srv[i]);
    }
    int f = atomic_load(&st_failures);
    fprintf(stderr, "stress_async_redlock: %s in %.1f s (%d failure(s), %d on_lost, %ld log "
            "lines)\n", f ? "FAILED" : "ok", (double)(st_mono_ms() - t0) / 1000.0, f,
            atomic_load(&st_lost), atomic_load(&st_logs));
    return f ? 1 : 0;
}
