/*
 * stress_async.h - what the event-loop stress programs share (stress_async.c: one server or
 * a Cluster; stress_async_redlock.c: three masters under redlock://). Header only, as
 * stress.h: every .c file in tests/stress/ is a program.
 *
 * Two clients (g_cl) on NNAMES mutex names. Per client a loop thread (sa_loop_main: epoll on
 * rs_client_fd, up to INFLIGHT requests pending, rotating through the kinds K_PLAIN ..
 * K_CANCEL; a granted hold released at once with rs_hold_release_async or handed to the
 * releaser thread) and a blocking thread (sa_blocking_main); a releaser thread
 * (sa_releaser_main) for the holds taken on other threads; the done callbacks with their
 * checks (each done once, with a code the contract allows); the close with requests pending
 * (sa_close_pending); the exclusion and completion checks after the run (sa_check_run).
 *
 * What differs between the programs is sa_conf, set by main() before any thread starts:
 *   all        1: the rwlock, the semaphore (SEM_SIZE permits) and the latches too
 *              (stress_async: typed requests, LATCH_WAITS latch waits before the loop's first
 *              acquisition, latch waits and typed requests pending at close); 0: the mutexes
 *   slow       1: some of the blocking thread's sections sleep 1 ms instead of yielding
 *   seed       added to the loop thread's seed (4099 * client id + seed)
 *   give_up_s  a loop thread gives up (a failure) when requests are still pending this long
 */
#ifndef RS_STRESS_ASYNC_H
#define RS_STRESS_ASYNC_H

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

static struct {
    int all, slow;
    unsigned seed;
    long give_up_s;
} sa_conf;

typedef struct ctx {
    int cl, name, kind;
    int type;   /* T_MUTEX (on name), T_READ, T_WRITE (the rwlock), T_SEM (n permits) */
    unsigned n;
    atomic_int ndone;
    atomic_int rc;
    struct timespec dl; /* K_DEADLINE, K_PAST: the deadline given (set before the call) */
} ctx_t;

typedef struct client {
    int id;
    rs_client_t *c;
    rs_mutex_t *m[NNAMES];
    rs_rwlock_t *rw;        /* these four under sa_conf.all only */
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

static inline void releaser_push(rs_hold_t *h)
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

static inline void *sa_releaser_main(void *arg)
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

/* ---- the critical sections ---------------------------------------------------------------- */

static inline void section(int name, int slow)
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
static inline void rw_section(int write)
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
static inline void sem_section(unsigned n)
{
    if (atomic_fetch_add(&g_sem_used, (int)n) + (int)n > SEM_SIZE)
        atomic_fetch_add(&g_sem_bad, 1);
    sched_yield();
    atomic_fetch_add(&g_sem_sections, 1);
    atomic_fetch_sub(&g_sem_used, (int)n);
}

static inline void typed_section(int type, int name, unsigned n, int slow)
{
    if (type == T_MUTEX)
        section(name, slow);
    else if (type == T_SEM)
        sem_section(n);
    else
        rw_section(type == T_WRITE);
}

/* ---- done callbacks ---------------------------------------------------------------------- */

static inline ctx_t *ctx_new(client_t *cl, int name, int kind)
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

static inline void once(ctx_t *x, int rc)
{
    /* rs_client_lasterror() inside done: this request's message (made on the I/O thread,
     * read here), "" for a success */
    const char *text = rs_client_lasterror(NULL);
    if ((rc == 0) != (text[0] == '\0'))
        FAILF("client %d: done(%d) of a kind %d request reads \"%s\"", x->cl, rc, x->kind, text);
    atomic_store(&x->rc, rc);
    int n = atomic_fetch_add(&x->ndone, 1);
    if (n != 0)
        FAILF("client %d: done of a kind %d request ran %d times", x->cl, x->kind, n + 1);
}

static inline void done_rel(int rc, rs_hold_t *hold, void *arg)
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

static inline void done_latch(int rc, rs_hold_t *hold, void *arg)
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

/* Whether the CLOCK_REALTIME deadline dl has passed. */
static inline int passed(const struct timespec *dl)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return now.tv_sec > dl->tv_sec || (now.tv_sec == dl->tv_sec && now.tv_nsec >= dl->tv_nsec);
}

static inline void done_acq(int rc, rs_hold_t *hold, void *arg)
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
        /* 5 ms ahead: on a slow machine (TSan, a loaded CI) it may have passed when the call
         * looked at it, which makes it one attempt, busy as K_PAST; then it has passed now */
        ok = rc == 0 || rc == ETIMEDOUT ||
             (rc == (x->type == T_SEM ? EAGAIN : EBUSY) && passed(&x->dl));
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
static inline int submit_acq(client_t *cl, ctx_t *x, const struct timespec *dl,
                             rs_request_t **req)
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

static inline void dispatch_some(client_t *cl, int ep, int efd, int ms)
{
    struct epoll_event ev;
    int n = epoll_wait(ep, &ev, 1, ms);
    if (n < 0 && errno != EINTR)
        FAILF("client %d: epoll_wait: %s", cl->id, strerror(errno));
    if (n > 0 && ev.data.fd != efd)
        FAILF("client %d: epoll says fd %d", cl->id, ev.data.fd);
    rs_client_dispatch(cl->c); /* also when not readable: then it runs nothing */
}

/* Under sa_conf.all, before the first acquisition: LATCH_WAITS waits on the client's latch,
 * which main opens once every one is pending (half with a far deadline). */
static inline void submit_latch_waits(client_t *cl)
{
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
}

static inline void *sa_loop_main(void *arg)
{
    client_t *cl = arg;
    unsigned seed = 4099u * (unsigned)cl->id + sa_conf.seed;
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
    if (sa_conf.all)
        submit_latch_waits(cl);
    long long give_up = st_mono_ms() + sa_conf.give_up_s * 1000;
    int submitted = 0;
    while (submitted < cl->iters || atomic_load(&cl->outstanding) > 0) {
        if (st_mono_ms() > give_up) {
            FAILF("client %d: %d request(s) still pending after %ld s", cl->id,
                  atomic_load(&cl->outstanding), sa_conf.give_up_s);
            break;
        }
        while (submitted < cl->iters && atomic_load(&cl->outstanding) < INFLIGHT) {
            int kind = (int)(st_rand(&seed) % K_NKINDS), name = (int)(st_rand(&seed) % NNAMES);
            ctx_t *x = ctx_new(cl, name, kind);
            if (!x)
                break;
            if (sa_conf.all) {
                x->type = (int)(st_rand(&seed) % T_NTYPES);
                x->n = x->type == T_SEM ? 1 + st_rand(&seed) % SEM_SIZE : 1;
            }
            struct timespec dl = st_abs_in(kind == K_PAST ? -1000 : 5);
            x->dl = dl;
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

/* rs_mutex_lock/unlock on odd turns; on even ones rs_mutex_acquire (under sa_conf.all in
 * turn rs_rwlock_acquire_read/_write and rs_sem_acquire too) whose hold goes to the
 * releaser thread. */
static inline void *sa_blocking_main(void *arg)
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
            section(name, sa_conf.slow && i % 5 == 1);
            rc = rs_mutex_unlock(cl->m[name]);
            if (rc == RS_ELOST)
                atomic_fetch_add(&g_elost, 1);
            else if (rc)
                FAILF("client %d: rs_mutex_unlock: %d %s", cl->id, rc, rs_strerror(rc));
        } else {
            rs_hold_t *h = NULL;
            int type = sa_conf.all ? (i / 2) % T_NTYPES : T_MUTEX;
            unsigned n = 1 + (unsigned)(i / 8) % SEM_SIZE;
            int rc = type == T_READ    ? rs_rwlock_acquire_read(cl->rw, NULL, &h)
                     : type == T_WRITE ? rs_rwlock_acquire_write(cl->rw, NULL, &h)
                     : type == T_SEM   ? rs_sem_acquire(cl->sem, n, NULL, &h)
                                       : rs_mutex_acquire(cl->m[name], NULL, &h);
            if (rc) {
                FAILF("client %d: type %d acquisition: %d %s", cl->id, type, rc, rs_strerror(rc));
                break;
            }
            typed_section(type, name, n, sa_conf.slow && i % 6 == 0);
            releaser_push(h);
        }
    }
    return NULL;
}

/* ---- main's part --------------------------------------------------------------------------- */

/* Client id on c: its context pool (room for every request the run and the close make) and
 * its NNAMES mutexes, named name_fmt with the name's number. Exits 2 when it cannot. */
static inline void sa_client_init(client_t *cl, int id, rs_client_t *c, const char *name_fmt,
                                  int iters, int biters)
{
    cl->id = id;
    cl->c = c;
    cl->iters = iters;
    cl->biters = biters;
    cl->npool = sa_conf.all ? LATCH_WAITS + 2 * iters + 3 * CLOSE_REQS + 1
                            : 2 * iters + CLOSE_REQS + 1;
    cl->pool = calloc((size_t)cl->npool, sizeof *cl->pool);
    if (!cl->pool)
        exit(2);
    for (int n = 0; n < NNAMES; n++) {
        char name[32];
        snprintf(name, sizeof name, name_fmt, n);
        if (rs_mutex_init(&cl->m[n], c, name) != 0) {
            fprintf(stderr, "%s: rs_mutex_init: %s\n", st_prog, rs_client_lasterror(c));
            exit(2);
        }
    }
}

/* The mutexes (and what sa_conf.all adds) destroyed, the pool freed. */
static inline void sa_client_free(client_t *cl)
{
    for (int n = 0; n < NNAMES; n++)
        EXPECT_RC(rs_mutex_destroy(cl->m[n]), 0);
    if (sa_conf.all) {
        EXPECT_RC(rs_rwlock_destroy(cl->rw), 0);
        EXPECT_RC(rs_sem_destroy(cl->sem), 0);
        EXPECT_RC(rs_latch_destroy(cl->l), 0);
        EXPECT_RC(rs_latch_destroy(cl->l_shut), 0);
    }
    free(cl->pool);
}

static pthread_t sa_rel, sa_loops[2], sa_blockers[2];

/* The releaser, then each client's loop and blocking threads. */
static inline void sa_start(void)
{
    st_spawn(&sa_rel, sa_releaser_main, NULL);
    for (int i = 0; i < 2; i++) {
        st_spawn(&sa_loops[i], sa_loop_main, &g_cl[i]);
        st_spawn(&sa_blockers[i], sa_blocking_main, &g_cl[i]);
    }
}

/* Joins what sa_start started, the releaser once it has released every hold handed to it. */
static inline void sa_join(void)
{
    st_join_all(sa_blockers, 2);
    st_join_all(sa_loops, 2);
    pthread_mutex_lock(&g_rmu);
    g_rstop = 1;
    pthread_cond_signal(&g_rcv);
    pthread_mutex_unlock(&g_rmu);
    pthread_join(sa_rel, NULL);
}

/* After sa_join: no two holders of a name inside at once and no lost increment (a warning
 * only when holds were lost), every done ran once, some acquisition was granted. Returns the
 * holds lost (on_lost calls and RS_ELOST releases); *sections: the mutexes' sections. */
static inline int sa_check_run(long *sections)
{
    *sections = 0;
    int bad = atomic_load(&g_overlaps);
    for (int n = 0; n < NNAMES; n++) {
        *sections += atomic_load(&g_sections[n]);
        if (atomic_load(&g_counter[n]) != atomic_load(&g_sections[n]))
            bad++;
    }
    int lost = atomic_load(&st_lost) + atomic_load(&g_elost);
    if (bad && lost)
        fprintf(stderr, "%s: WARNING: %d overlap(s) or lost increment(s) after %d "
                "lost hold(s): exclusion not checked\n", st_prog, bad, lost);
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
    return lost;
}

/* ---- close with requests pending ---------------------------------------------------------- */

/* Submits what cannot complete before the close (holds of main's block name 0, under
 * sa_conf.all the rwlock and the semaphore too, and the shut latch is never opened) plus a
 * release; then closes the client and checks every done ran, inside the close. */
static inline void sa_close_pending(client_t *cl)
{
    int first = cl->used;
    rs_request_t *req;
    for (int i = 0; i < CLOSE_REQS; i++) {
        ctx_t *x = ctx_new(cl, 0, K_CLOSE);
        struct timespec dl = st_abs_in(120000);
        if (x)
            EXPECT_RC(rs_mutex_acquire_async(cl->m[0], i % 2 ? &dl : NULL, done_acq, x, &req),
                      0);
        if (!sa_conf.all)
            continue;
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

/* Main keeps the n holds of kept (of client 0) while both clients close with requests pending
 * behind them; then releases them (after the close that only frees them). */
static inline void sa_close_both(rs_hold_t **kept, int n)
{
    sa_close_pending(&g_cl[1]);
    sa_close_pending(&g_cl[0]);
    for (int i = 0; i < n; i++)
        if (kept[i]) {
            int rc = rs_hold_release(kept[i]);
            if (rc != 0 && rc != RS_ELOST)
                FAILF("rs_hold_release after the close: %d %s", rc, rs_strerror(rc));
        }
}

#endif
