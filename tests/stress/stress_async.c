/*
 * stress_async.c - the event-loop API under load (make check-tsan, check-valgrind).
 *
 * Two clients on NNAMES mutex names, one rwlock and one semaphore of SEM_SIZE permits. Per
 * client:
 *   - a loop thread: epoll on rs_client_fd, rs_client_dispatch when readable; it keeps up to
 *     INFLIGHT requests pending, each on one of the mutexes (rs_mutex_acquire_async), the
 *     rwlock (rs_rwlock_acquire_read_async or _write_async) or the semaphore
 *     (rs_sem_acquire_async of 1 or 2 permits), rotating through: no deadline, a deadline
 *     5 ms away (ETIMEDOUT or a grant), a deadline already past (EBUSY, for the semaphore
 *     EAGAIN, or a grant) and a request cancelled right after submission (racing its
 *     grant: done must say ECANCELED whatever Redis did). A granted hold is released either
 *     at once with rs_hold_release_async (its done counted too) or handed to the releaser
 *     thread;
 *   - a blocking thread on the same names: rs_mutex_lock/unlock, and rs_mutex_acquire,
 *     rs_rwlock_acquire_read/_write and rs_sem_acquire whose hold objects go to the
 *     releaser thread (rs_hold_release from another thread).
 * Before their first acquisition the loop threads submit LATCH_WAITS rs_latch_wait_async on
 * a latch armed with count 1; main opens it once they are all pending.
 * At the end each client gets requests that cannot complete (behind a hold main keeps, on a
 * latch never opened, plus a release in flight) and is closed with them pending: their done
 * calls run inside rs_client_close.
 *
 * Checks: no two holders of one name inside at once (atomic "inside" flag, a counter read
 * then written relaxed, so a broken exclusion loses increments); a writer of the rwlock
 * alone inside (a writer flag and a reader count, each side checking the other's after
 * setting its own; the writers' counter as the mutexes'); never more than SEM_SIZE permits
 * held of the semaphore (a count of the permits inside); every done runs exactly
 * once (per-request counters) with a code the contract allows; a latch wait ends with 0 and
 * only after the count-down; requests pending at close end with ECANCELED inside the close;
 * no hold and no waiter is left in Redis. If a hold is lost (the machine stalled past the
 * lease), the exclusion checks become a warning, as in stress_mutex.
 *
 * STRESS_CLUSTER=1 (make check-tsan's and check-valgrind's Cluster pass) runs all of it on
 * three masters over redis-cluster://: the names' slots spread the requests over the
 * client's per-master pipelines and sharded wake-up channels; the checks are the same, the
 * connection check of st_finish on every master.
 */
#include <sched.h>
#include <sys/epoll.h>

#include "stress.h"

#define NNAMES 3
#define INFLIGHT 8
#define LATCH_WAITS 6
#define CLOSE_REQS 5
#define SEM_SIZE 2

enum { K_PLAIN, K_DEADLINE, K_PAST, K_CANCEL, K_NKINDS, K_LATCH, K_REL, K_CLOSE, K_CLOSE_LATCH,
       K_CLOSE_REL };
enum { T_MUTEX, T_READ, T_WRITE, T_SEM, T_NTYPES }; /* what an acquisition request is on */

typedef struct ctx {
    int cl, name, kind;
    int type;   /* T_MUTEX (on name), T_READ, T_WRITE (the rwlock), T_SEM (n permits) */
    unsigned n;
    atomic_int ndone;
    atomic_int rc;
} ctx_t;

typedef struct client {
    int id;
    rs_client_t *c;
    rs_mutex_t *m[NNAMES];
    rs_rwlock_t *rw;
    rs_sem_t *sem;
    rs_latch_t *l, *l_shut;
    ctx_t *pool;
    int npool, used;        /* pool slots handed out (loop thread, then main) */
    atomic_int outstanding; /* submitted, done not run yet */
    atomic_int latch_submitted;
    int iters, biters;
} client_t;

static client_t g_cl[2];
static atomic_int g_inside[NNAMES];
static atomic_long g_counter[NNAMES], g_sections[NNAMES];
static atomic_int g_overlaps, g_elost, g_latch_open;
static atomic_long g_granted, g_timedout, g_busy, g_canceled;
static atomic_int g_rw_writer, g_rw_readers, g_sem_used, g_rw_bad, g_sem_bad;
static atomic_long g_rw_counter, g_rw_writes, g_rw_reads, g_sem_sections, g_type_grants[T_NTYPES];

/* ---- the releaser thread: rs_hold_release of holds taken on other threads --------------- */

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

/* ---- the critical section --------------------------------------------------------------- */

static void section(int name, int slow)
{
    if (atomic_exchange(&g_inside[name], 1))
        atomic_fetch_add(&g_overlaps, 1);
    long v = atomic_load_explicit(&g_counter[name], memory_order_relaxed);
    if (slow)
        st_sleep_ms(1);
    else
        sched_yield();
    atomic_store_explicit(&g_counter[name], v + 1, memory_order_relaxed);
    atomic_fetch_add(&g_sections[name], 1);
    atomic_store(&g_inside[name], 0);
}

/* The rwlock's section: a writer sets its flag, then must see no reader; a reader counts
 * itself, then must see no writer (sequentially consistent: of two overlapping, at least one
 * sees the other). Writers count as the mutexes do. */
static void rw_section(int write)
{
    if (write) {
        if (atomic_exchange(&g_rw_writer, 1) || atomic_load(&g_rw_readers) != 0)
            atomic_fetch_add(&g_rw_bad, 1);
        long v = atomic_load_explicit(&g_rw_counter, memory_order_relaxed);
        sched_yield();
        atomic_store_explicit(&g_rw_counter, v + 1, memory_order_relaxed);
        atomic_fetch_add(&g_rw_writes, 1);
        atomic_store(&g_rw_writer, 0);
    } else {
        atomic_fetch_add(&g_rw_readers, 1);
        if (atomic_load(&g_rw_writer))
            atomic_fetch_add(&g_rw_bad, 1);
        sched_yield();
        atomic_fetch_add(&g_rw_reads, 1);
        atomic_fetch_sub(&g_rw_readers, 1);
    }
}

/* The semaphore's: never more than SEM_SIZE permits inside. */
static void sem_section(unsigned n)
{
    if (atomic_fetch_add(&g_sem_used, (int)n) + (int)n > SEM_SIZE)
        atomic_fetch_add(&g_sem_bad, 1);
    sched_yield();
    atomic_fetch_add(&g_sem_sections, 1);
    atomic_fetch_sub(&g_sem_used, (int)n);
}

static void typed_section(int type, int name, unsigned n, int slow)
{
    if (type == T_MUTEX)
        section(name, slow);
    else if (type == T_SEM)
        sem_section(n);
    else
        rw_section(type == T_WRITE);
}

/* ---- done callbacks ---------------------------------------------------------------------- */

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
    x->type = T_MUTEX;
    x->n = 1;
    atomic_store(&x->rc, -12345);
    return x;
}

static int once(ctx_t *x, int rc)
{
    atomic_store(&x->rc, rc);
    int n = atomic_fetch_add(&x->ndone, 1);
    if (n != 0)
        FAILF("client %d: done of a kind %d request ran %d times", x->cl, x->kind, n + 1);
    return n == 0;
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

static void done_latch(int rc, rs_hold_t *hold, void *arg)
{
    ctx_t *x = arg;
    once(x, rc);
    if (hold)
        FAILF("client %d: a latch wait's done got a hold", x->cl);
    if (x->kind == K_CLOSE_LATCH) {
        if (rc != ECANCELED)
            FAILF("client %d: latch wait pending at close: done(%d %s)", x->cl, rc,
                  rs_strerror(rc));
        return;
    }
    if (rc)
        FAILF("client %d: rs_latch_wait_async: done(%d %s)", x->cl, rc, rs_strerror(rc));
    else if (!atomic_load(&g_latch_open))
        FAILF("client %d: a latch wait ended before the count-down", x->cl);
    atomic_fetch_sub(&g_cl[x->cl].outstanding, 1);
}

static void done_acq(int rc, rs_hold_t *hold, void *arg)
{
    ctx_t *x = arg;
    client_t *cl = &g_cl[x->cl];
    once(x, rc);
    if ((rc == 0) != (hold != NULL))
        FAILF("client %d: done(%d) with hold %p", x->cl, rc, (void *)hold);
    int ok;
    switch (x->kind) {
    case K_PLAIN:
        ok = rc == 0;
        break;
    case K_DEADLINE:
        ok = rc == 0 || rc == ETIMEDOUT;
        break;
    case K_PAST: /* the semaphore says EAGAIN where the locks say EBUSY */
        ok = rc == 0 || rc == (x->type == T_SEM ? EAGAIN : EBUSY);
        break;
    default: /* cancelled before it could be dispatched; or pending at close */
        ok = rc == ECANCELED;
        break;
    }
    if (!ok)
        FAILF("client %d: kind %d request: done(%d %s)", x->cl, x->kind, rc, rs_strerror(rc));
    if (rc == ETIMEDOUT)
        atomic_fetch_add(&g_timedout, 1);
    else if (rc == EBUSY || rc == EAGAIN)
        atomic_fetch_add(&g_busy, 1);
    else if (rc == ECANCELED)
        atomic_fetch_add(&g_canceled, 1);
    if (hold) {
        atomic_fetch_add(&g_granted, 1);
        atomic_fetch_add(&g_type_grants[x->type], 1);
        if ((rs_hold_fence(hold) == 0) != (x->type == T_READ))
            FAILF("client %d: a type %d hold has fencing token %llu", x->cl, x->type,
                  (unsigned long long)rs_hold_fence(hold));
        typed_section(x->type, x->name, x->n, 0);
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
            rs_hold_release(hold); /* (a failure already reported) */
        }
    }
    if (x->kind < K_NKINDS)
        atomic_fetch_sub(&cl->outstanding, 1);
}

/* ---- the loop thread --------------------------------------------------------------------- */

/* The _async call of x's type. */
static int submit_acq(client_t *cl, ctx_t *x, const struct timespec *dl, rs_request_t **req)
{
    switch (x->type) {
    case T_READ:
        return rs_rwlock_acquire_read_async(cl->rw, dl, done_acq, x, req);
    case T_WRITE:
        return rs_rwlock_acquire_write_async(cl->rw, dl, done_acq, x, req);
    case T_SEM:
        return rs_sem_acquire_async(cl->sem, x->n, dl, done_acq, x, req);
    default:
        return rs_mutex_acquire_async(cl->m[x->name], dl, done_acq, x, req);
    }
}

static void dispatch_some(client_t *cl, int ep, int efd, int ms)
{
    struct epoll_event ev;
    int n = epoll_wait(ep, &ev, 1, ms);
    if (n < 0 && errno != EINTR)
        FAILF("client %d: epoll_wait: %s", cl->id, strerror(errno));
    if (n > 0 && ev.data.fd != efd)
        FAILF("client %d: epoll says fd %d", cl->id, ev.data.fd);
    rs_client_dispatch(cl->c); /* also when not readable: then it runs nothing */
}

static void *loop_main(void *arg)
{
    client_t *cl = arg;
    unsigned seed = 4099u * (unsigned)cl->id + 3;
    int efd = rs_client_fd(cl->c);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    if (efd < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev) != 0) {
        FAILF("client %d: rs_client_fd %d, epoll: %s", cl->id, efd, strerror(errno));
        if (ep >= 0)
            close(ep);
        return NULL;
    }
    if (rs_client_fd(cl->c) != efd)
        FAILF("client %d: rs_client_fd changed", cl->id);
    for (int i = 0; i < LATCH_WAITS; i++) {
        ctx_t *x = ctx_new(cl, 0, K_LATCH);
        struct timespec dl = st_abs_in(120000);
        rs_request_t *req;
        atomic_fetch_add(&cl->outstanding, 1);
        int rc = x ? rs_latch_wait_async(cl->l, i % 2 ? &dl : NULL, done_latch, x, &req) : -1;
        if (rc) {
            FAILF("client %d: rs_latch_wait_async: %d", cl->id, rc);
            atomic_fetch_sub(&cl->outstanding, 1);
        }
    }
    atomic_store(&cl->latch_submitted, 1);
    long long give_up = st_mono_ms() + 120000;
    int submitted = 0;
    while (submitted < cl->iters || atomic_load(&cl->outstanding) > 0) {
        if (st_mono_ms() > give_up) {
            FAILF("client %d: %d request(s) still pending after 120 s", cl->id,
                  atomic_load(&cl->outstanding));
            break;
        }
        while (submitted < cl->iters && atomic_load(&cl->outstanding) < INFLIGHT) {
            int kind = (int)(st_rand(&seed) % K_NKINDS), name = (int)(st_rand(&seed) % NNAMES);
            ctx_t *x = ctx_new(cl, name, kind);
            if (!x)
                break;
            x->type = (int)(st_rand(&seed) % T_NTYPES);
            x->n = x->type == T_SEM ? 1 + st_rand(&seed) % SEM_SIZE : 1;
            struct timespec dl = st_abs_in(kind == K_PAST ? -1000 : 5);
            const struct timespec *dp = kind == K_DEADLINE || kind == K_PAST ? &dl : NULL;
            rs_request_t *req = NULL;
            atomic_fetch_add(&cl->outstanding, 1);
            int rc = submit_acq(cl, x, dp, &req);
            submitted++;
            if (rc) {
                FAILF("client %d: a type %d _async call: %d %s", cl->id, x->type, rc,
                      rs_strerror(rc));
                atomic_fetch_sub(&cl->outstanding, 1);
                continue;
            }
            if (kind == K_CANCEL)
                EXPECT_RC(rs_request_cancel(req), 0); /* this thread dispatches: req valid */
        }
        dispatch_some(cl, ep, efd, 50);
    }
    close(ep);
    return NULL;
}

/* ---- the blocking thread ------------------------------------------------------------------ */

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
            section(name, i % 5 == 1);
            rc = rs_mutex_unlock(cl->m[name]);
            if (rc == RS_ELOST)
                atomic_fetch_add(&g_elost, 1);
            else if (rc)
                FAILF("client %d: rs_mutex_unlock: %d %s", cl->id, rc, rs_strerror(rc));
        } else {
            rs_hold_t *h = NULL;
            int type = (i / 2) % T_NTYPES;
            unsigned n = 1 + (unsigned)(i / 8) % SEM_SIZE;
            int rc = type == T_READ    ? rs_rwlock_acquire_read(cl->rw, NULL, &h)
                     : type == T_WRITE ? rs_rwlock_acquire_write(cl->rw, NULL, &h)
                     : type == T_SEM   ? rs_sem_acquire(cl->sem, n, NULL, &h)
                                       : rs_mutex_acquire(cl->m[name], NULL, &h);
            if (rc) {
                FAILF("client %d: type %d acquisition: %d %s", cl->id, type, rc, rs_strerror(rc));
                break;
            }
            typed_section(type, name, n, i % 6 == 0);
            releaser_push(h);
        }
    }
    return NULL;
}

/* ---- close with requests pending ---------------------------------------------------------- */

/* Submits what cannot complete before the close (holds of main's block name 0, the rwlock
 * and the semaphore; the shut latch is never opened) plus a release; then closes the client
 * and checks every done ran, inside the close. */
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
        if ((x = ctx_new(cl, 0, K_CLOSE_LATCH)) != NULL)
            EXPECT_RC(rs_latch_wait_async(cl->l_shut, NULL, done_latch, x, &req), 0);
        /* main holds the rwlock for writing and every permit of the semaphore */
        if ((x = ctx_new(cl, 0, K_CLOSE)) != NULL) {
            x->type = T_READ + i % 3; /* T_READ, T_WRITE, T_SEM */
            x->n = 1;
            EXPECT_RC(submit_acq(cl, x, i % 2 ? &dl : NULL, &req), 0);
        }
    }
    rs_hold_t *h = NULL;
    EXPECT_RC(rs_mutex_acquire(cl->m[2], NULL, &h), 0);
    ctx_t *x = ctx_new(cl, 2, K_CLOSE_REL);
    if (h && x)
        EXPECT_RC(rs_hold_release_async(h, done_rel, x), 0);
    st_sleep_ms(30); /* let some of them reach Redis' queues */
    EXPECT_RC(rs_client_close(cl->c), 0);
    for (int i = first; i < cl->used; i++)
        if (atomic_load(&cl->pool[i].ndone) != 1)
            FAILF("client %d: kind %d request pending at close: done ran %d times", cl->id,
                  cl->pool[i].kind, atomic_load(&cl->pool[i].ndone));
}

static void check_one(rs_client_t *c, const char *kind, const char *name, const char *when)
{
    rs_info_t info;
    int rc = rs_inspect(c, kind, name, &info);
    if (rc)
        FAILF("%s: rs_inspect(%s %s): %d %s", when, kind, name, rc, rs_client_lasterror(c));
    else if (info.nholders || info.waiters)
        FAILF("%s: %s %s has %u holder(s), %u waiter(s)", when, kind, name, info.nholders,
              info.waiters);
}

static void check_clean(rs_client_t *c, const char *when)
{
    check_one(c, "rwlock", "stress-async-rw", when);
    check_one(c, "sem", "stress-async-sem", when);
    for (int n = 0; n < NNAMES; n++) {
        char name[32];
        snprintf(name, sizeof name, "stress-async-%d", n);
        rs_info_t info;
        int rc = rs_inspect(c, "mutex", name, &info);
        if (rc)
            FAILF("%s: rs_inspect(%s): %d %s", when, name, rc, rs_client_lasterror(c));
        else if (info.nholders || info.waiters)
            FAILF("%s: %s has %u holder(s), %u waiter(s)", when, name, info.nholders,
                  info.waiters);
    }
}

int main(void)
{
    long long t0 = st_mono_ms();
    ts_server_t srv;
    st_start_server_cluster(&srv, "stress_async");
    char prefix[64];
    ts_unique_prefix(prefix, sizeof prefix);
    rs_latch_t *arm = NULL;
    for (int i = 0; i < 2; i++) {
        client_t *cl = &g_cl[i];
        cl->id = i;
        cl->c = st_open(&srv, prefix);
        cl->iters = st_scaled(2000);
        cl->biters = st_scaled(300);
        cl->npool = LATCH_WAITS + 2 * cl->iters + 3 * CLOSE_REQS + 1;
        cl->pool = calloc((size_t)cl->npool, sizeof *cl->pool);
        if (!cl->pool)
            return 2;
        for (int n = 0; n < NNAMES; n++) {
            char name[32];
            snprintf(name, sizeof name, "stress-async-%d", n);
            if (rs_mutex_init(&cl->m[n], cl->c, name) != 0) {
                fprintf(stderr, "stress_async: rs_mutex_init: %s\n", rs_client_lasterror(cl->c));
                return 2;
            }
        }
        if (rs_rwlock_init(&cl->rw, cl->c, "stress-async-rw") != 0 ||
            rs_sem_init(&cl->sem, cl->c, "stress-async-sem", SEM_SIZE) != 0) {
            fprintf(stderr, "stress_async: rwlock/sem init: %s\n", rs_client_lasterror(cl->c));
            return 2;
        }
        if ((i == 0 && rs_latch_init(&arm, cl->c, "stress-async-latch", 1) != 0) ||
            rs_latch_init(&cl->l, cl->c, "stress-async-latch", 0) != 0 ||
            rs_latch_init(&cl->l_shut, cl->c, "stress-async-shut", 0) != 0) {
            fprintf(stderr, "stress_async: rs_latch_init: %s\n", rs_client_lasterror(cl->c));
            return 2;
        }
    }
    pthread_t rel, loops[2], blockers[2];
    st_spawn(&rel, releaser_main, NULL);
    for (int i = 0; i < 2; i++) {
        st_spawn(&loops[i], loop_main, &g_cl[i]);
        st_spawn(&blockers[i], blocking_main, &g_cl[i]);
    }
    /* open the latch while the waits are pending */
    while (!atomic_load(&g_cl[0].latch_submitted) || !atomic_load(&g_cl[1].latch_submitted))
        st_sleep_ms(5);
    st_sleep_ms(100);
    atomic_store(&g_latch_open, 1);
    EXPECT_RC(rs_latch_count_down(arm), 0);
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
    if (atomic_load(&g_rw_counter) != atomic_load(&g_rw_writes))
        atomic_fetch_add(&g_rw_bad, 1);
    int rwbad = atomic_load(&g_rw_bad), sembad = atomic_load(&g_sem_bad);
    if ((rwbad || sembad) && lost)
        fprintf(stderr, "stress_async: WARNING: rwlock %d / semaphore %d overlap(s) after %d "
                "lost hold(s): exclusion not checked\n", rwbad, sembad, lost);
    else if (rwbad || sembad)
        FAILF("rwlock: %d overlap(s) or lost increment(s) (counter %ld for %ld writes); "
              "semaphore: %d time(s) above %d permits", rwbad, atomic_load(&g_rw_counter),
              atomic_load(&g_rw_writes), sembad, SEM_SIZE);
    for (int t = 0; t < T_NTYPES; t++)
        if (atomic_load(&g_type_grants[t]) == 0)
            FAILF("no async request of type %d was granted", t);
    if (bad && lost)
        fprintf(stderr, "stress_async: WARNING: %d overlap(s) or lost increment(s) after %d "
                "lost hold(s): exclusion not checked\n", bad, lost);
    else if (bad)
        FAILF("%d overlap(s), counters %ld/%ld/%ld for %ld/%ld/%ld sections",
              atomic_load(&g_overlaps), atomic_load(&g_counter[0]), atomic_load(&g_counter[1]),
              atomic_load(&g_counter[2]), atomic_load(&g_sections[0]),
              atomic_load(&g_sections[1]), atomic_load(&g_sections[2]));
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < g_cl[i].used; k++)
            if (atomic_load(&g_cl[i].pool[k].ndone) != 1)
                FAILF("client %d: kind %d request: done ran %d times (rc %d)", i,
                      g_cl[i].pool[k].kind, atomic_load(&g_cl[i].pool[k].ndone),
                      atomic_load(&g_cl[i].pool[k].rc));
    if (atomic_load(&g_granted) == 0)
        FAILF("no acquisition was granted");
    check_clean(g_cl[0].c, "after the run");
    if (st_verbose() || lost)
        fprintf(stderr, "stress_async: %ld mutex sections, %ld async grants (mutex %ld, read "
                "%ld, write %ld, sem %ld), %ld ETIMEDOUT, %ld EBUSY/EAGAIN, %ld ECANCELED, %d "
                "lost; rwlock %ld reads %ld writes, semaphore %ld sections\n", sections,
                atomic_load(&g_granted), atomic_load(&g_type_grants[T_MUTEX]),
                atomic_load(&g_type_grants[T_READ]), atomic_load(&g_type_grants[T_WRITE]),
                atomic_load(&g_type_grants[T_SEM]), atomic_load(&g_timedout),
                atomic_load(&g_busy), atomic_load(&g_canceled), lost,
                atomic_load(&g_rw_reads), atomic_load(&g_rw_writes), atomic_load(&g_sem_sections));

    /* close with requests pending: main holds name 0 through a hold object of client 0 */
    rs_hold_t *keep = NULL, *keep_rw = NULL, *keep_sem = NULL;
    EXPECT_RC(rs_mutex_acquire(g_cl[0].m[0], NULL, &keep), 0);
    EXPECT_RC(rs_rwlock_acquire_write(g_cl[0].rw, NULL, &keep_rw), 0);
    EXPECT_RC(rs_sem_acquire(g_cl[0].sem, SEM_SIZE, NULL, &keep_sem), 0);
    close_pending(&g_cl[1]);
    close_pending(&g_cl[0]);
    rs_hold_t *kept[3] = {keep, keep_rw, keep_sem};
    for (int i = 0; i < 3; i++)
        if (kept[i]) {
            int rc = rs_hold_release(kept[i]); /* after the close: only frees it */
            if (rc != 0 && rc != RS_ELOST)
                FAILF("rs_hold_release after the close: %d %s", rc, rs_strerror(rc));
        }
    rs_client_t *check = st_open(&srv, prefix);
    check_clean(check, "after the closes");
    for (int i = 0; st_cluster_on && i < ST_CLUSTER_NODES; i++) /* the names spread over all */
        if (ts_info_ll(&st_nodes[i], "commandstats", "cmdstat_evalsha", "calls") <= 0)
            FAILF("master %d ran no script: the names did not spread over the Cluster", i);
    EXPECT_RC(rs_client_close(check), 0);
    EXPECT_RC(rs_latch_destroy(arm), 0);
    for (int i = 0; i < 2; i++) {
        for (int n = 0; n < NNAMES; n++)
            EXPECT_RC(rs_mutex_destroy(g_cl[i].m[n]), 0);
        EXPECT_RC(rs_rwlock_destroy(g_cl[i].rw), 0);
        EXPECT_RC(rs_sem_destroy(g_cl[i].sem), 0);
        EXPECT_RC(rs_latch_destroy(g_cl[i].l), 0);
        EXPECT_RC(rs_latch_destroy(g_cl[i].l_shut), 0);
        free(g_cl[i].pool);
    }
    return st_finish(&srv, t0);
}
