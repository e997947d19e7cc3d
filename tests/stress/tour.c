/*
 * tour.c - every public call of redisync at least once, error paths included, in one plain
 * program: the representative run of make check-valgrind (memory errors and leaks of every
 * path: open/close, failed opens, handles, waits, inspection, lost holds, Redis going away,
 * fork), and of make check-tsan.
 *
 * Sections: basics and failed opens; opens that work (ACL user and password, SELECT, unix
 * socket); mutex; rmutex; rwlock; semaphore; latch; inspection and force release (a lost hold:
 * on_lost, RS_ELOST); a paused server (a hold lost by its local deadline); a killed server
 * (RS_ECONN, then recovery); close (twice, calls after it); fork (every call in the child is
 * RS_EFORK, close there only frees memory; under valgrind the child gets its own leak check
 * and its exit status is checked here).
 *
 * Exits 0 when every check passed, 1 otherwise, 2 when the setup failed.
 * It also checks two library bugs these checks found, now fixed: close with Redis down
 * (close_with_redis_down) and a fork child's close freeing what it inherited (fork_tour).
 */
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>

#include "stress.h"

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1 /* TSan does not support starting threads in a child of a threaded fork */
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif

#define CHECK(cond, ...)                                                                        \
    do {                                                                                        \
        if (!(cond))                                                                            \
            FAILF(__VA_ARGS__);                                                                 \
    } while (0)

static ts_server_t g_srv;
static char g_prefix[64];

static rs_client_t *open_cfg(const char *url, long lease_ms, long timeout_ms)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.prefix = g_prefix;
    cfg.lease_ms = lease_ms;
    cfg.timeout_ms = timeout_ms;
    cfg.on_lost = st_on_lost;
    cfg.log = st_log;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        FAILF("rs_client_open(%s): %d %s", url, rc, rs_client_lasterror(NULL));
        return NULL;
    }
    return c;
}

static int open_rc(const rs_config_t *cfg)
{
    rs_client_t *c = (rs_client_t *)&c; /* must come back NULL */
    int rc = rs_client_open(&c, cfg);
    if (rc && c != NULL)
        FAILF("a failed rs_client_open left *out non-NULL");
    if (rc == 0)
        rs_client_close(c);
    return rc;
}

/* ---- basics and failed opens ------------------------------------------------------------ */

static void basics(void)
{
    CHECK(strcmp(rs_version(), RS_VERSION_STRING) == 0, "rs_version() is %s", rs_version());
    int codes[] = {0, RS_ELOST, RS_ECONN, RS_ESERVER, RS_EREPL, RS_EFORK, RS_EQUEUE, EINVAL,
                   EBUSY, ETIMEDOUT, ECANCELED, -1, 1000, 1007, INT_MAX};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = rs_strerror(codes[i]);
        CHECK(s && *s, "rs_strerror(%d) is empty", codes[i]);
    }
    rs_config_init(NULL);
    CHECK(rs_client_id(NULL) && !*rs_client_id(NULL), "rs_client_id(NULL) is not \"\"");
    CHECK(rs_client_close(NULL) == 0, "rs_client_close(NULL) is not 0");
    EXPECT_RC(rs_client_open(NULL, NULL), EINVAL);
    CHECK(*rs_client_lasterror(NULL), "no message after a failed open");

    rs_config_t cfg;
    static const char *const bad_urls[] = {
        "", "localhost", "http://x", "redis://", "redis://:6379", "redis://h:0", "redis://h:65536",
        "redis://h:12x", "redis://h/x", "redis://h?db=x", "redis://h?nope=1", "redis://[::1",
        "redis://[]:1", "redis://h$st", "redis://u:p%zz@h", "unix://relative", "unix:///s?db=-1",
        "redis-sentinel://h", "redis-cluster://h:0", "redlock://h", "redis://h#frag",
        "redis://user:hunter2secret@h:port"};
    for (size_t i = 0; i < sizeof bad_urls / sizeof bad_urls[0]; i++) {
        rs_config_init(&cfg);
        cfg.url = bad_urls[i];
        EXPECT_RC(open_rc(&cfg), EINVAL);
        CHECK(!strstr(rs_client_lasterror(NULL), "hunter2"), "the password is in \"%s\"",
              rs_client_lasterror(NULL));
    }
    char longp[200];
    memset(longp, 'p', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    const char *bad_prefixes[] = {"", "a{b", "a}", longp};
    for (size_t i = 0; i < 4; i++) {
        rs_config_init(&cfg);
        cfg.url = g_srv.url;
        cfg.prefix = bad_prefixes[i];
        EXPECT_RC(open_rc(&cfg), EINVAL);
    }
    long bad[][4] = {/* lease, timeout, replica timeout, min replicas */
                     {10, 0, 0, 0}, {-1, 0, 0, 0}, {86400001L, 0, 0, 0}, {0, -1, 0, 0},
                     {0, 86400001L, 0, 0}, {0, 0, -5, 0}, {0, 0, 0, -1}, {0, 0, 0, 1001}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rs_config_init(&cfg);
        cfg.url = g_srv.url;
        cfg.lease_ms = bad[i][0];
        cfg.timeout_ms = bad[i][1];
        cfg.replica_timeout_ms = bad[i][2];
        cfg.min_replicas = (int)bad[i][3];
        EXPECT_RC(open_rc(&cfg), EINVAL);
    }
    /* nobody listens on port 1; a wrong password; a user without the right to EVALSHA is
     * only found out later, so not here */
    rs_config_init(&cfg);
    cfg.url = "redis://127.0.0.1:1";
    cfg.timeout_ms = 100;
    EXPECT_RC(open_rc(&cfg), RS_ECONN);
    char url[256];
    snprintf(url, sizeof url, "redis://tour:wrong@127.0.0.1:%d", g_srv.port);
    rs_config_init(&cfg);
    cfg.url = url;
    EXPECT_RC(open_rc(&cfg), RS_ESERVER);
    CHECK(!strstr(rs_client_lasterror(NULL), "wrong"), "the password is in \"%s\"",
          rs_client_lasterror(NULL));
}

/* ---- opens that work -------------------------------------------------------------------- */

static void good_opens(const char *sock)
{
    char url[256];
    snprintf(url, sizeof url, "redis://tour:t%%6Fur-pw@127.0.0.1:%d/3", g_srv.port); /* %6F: o */
    rs_client_t *c = open_cfg(url, 0, 0);
    if (c) {
        const char *id = rs_client_id(c);
        CHECK(strlen(id) == 16 && strspn(id, "0123456789abcdef") == 16, "client id \"%s\"", id);
        rs_mutex_t *m;
        EXPECT_RC(rs_mutex_init(&m, c, "db3"), 0);
        EXPECT_RC(rs_mutex_lock(m), 0);
        EXPECT_RC(rs_mutex_unlock(m), 0);
        EXPECT_RC(rs_mutex_destroy(m), 0);
        EXPECT_RC(rs_client_close(c), 0);
    }
    snprintf(url, sizeof url, "unix://%s?db=2", sock);
    if ((c = open_cfg(url, 0, 0)) != NULL)
        EXPECT_RC(rs_client_close(c), 0);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = g_srv.url; /* default prefix, lease, timeout */
    rs_client_t *d = NULL;
    EXPECT_RC(rs_client_open(&d, &cfg), 0);
    EXPECT_RC(rs_client_close(d), 0);
}

/* ---- mutex ------------------------------------------------------------------------------ */

typedef struct helper {
    rs_mutex_t *m;
    int rc_lock, rc_unlock;
} helper_t;

static void *lock_unlock_main(void *arg)
{
    helper_t *h = arg;
    h->rc_lock = rs_mutex_lock(h->m);
    h->rc_unlock = h->rc_lock ? -1 : rs_mutex_unlock(h->m);
    return NULL;
}

static void mutex_tour(rs_client_t *c, rs_client_t *c2)
{
    rs_mutex_t *m = NULL, *m2 = NULL, *tmp = (rs_mutex_t *)&tmp;
    char name[RS_NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0'; /* 513 bytes */
    EXPECT_RC(rs_mutex_init(NULL, c, "x"), EINVAL);
    EXPECT_RC(rs_mutex_init(&tmp, NULL, "x"), EINVAL);
    CHECK(tmp == NULL, "a failed rs_mutex_init left *m non-NULL");
    EXPECT_RC(rs_mutex_init(&tmp, c, NULL), EINVAL);
    EXPECT_RC(rs_mutex_init(&tmp, c, ""), EINVAL);
    EXPECT_RC(rs_mutex_init(&tmp, c, name), EINVAL);
    name[RS_NAME_MAX] = '\0'; /* 512 bytes: fine */
    EXPECT_RC(rs_mutex_init(&tmp, c, name), 0);
    EXPECT_RC(rs_mutex_lock(tmp), 0);
    EXPECT_RC(rs_mutex_unlock(tmp), 0);
    EXPECT_RC(rs_mutex_destroy(tmp), 0);
    EXPECT_RC(rs_mutex_lock(NULL), EINVAL);
    EXPECT_RC(rs_mutex_trylock(NULL), EINVAL);
    EXPECT_RC(rs_mutex_timedlock(NULL, NULL), EINVAL);
    EXPECT_RC(rs_mutex_unlock(NULL), EINVAL);
    EXPECT_RC(rs_mutex_setlease(NULL, 100), EINVAL);
    EXPECT_RC(rs_mutex_destroy(NULL), 0);
    CHECK(rs_mutex_fence(NULL) == 0 && rs_mutex_remaining(NULL) == 0, "NULL fence/remaining");

    EXPECT_RC(rs_mutex_init(&m, c, "}tour-mutex"), 0); /* a name whose tag needs escaping */
    EXPECT_RC(rs_mutex_init(&m2, c2, "}tour-mutex"), 0);
    EXPECT_RC(rs_mutex_unlock(m), EPERM);
    EXPECT_RC(rs_mutex_setlease(m, -1), EINVAL);
    EXPECT_RC(rs_mutex_setlease(m, 29), EINVAL);
    EXPECT_RC(rs_mutex_setlease(m, 2000), 0);
    EXPECT_RC(rs_mutex_setlease(m, 0), 0);
    EXPECT_RC(rs_mutex_lock(m), 0);
    uint64_t f = rs_mutex_fence(m);
    CHECK(f > 0 && rs_mutex_remaining(m) > 0, "fence %llu, remaining %ld while holding",
          (unsigned long long)f, rs_mutex_remaining(m));
    EXPECT_RC(rs_mutex_lock(m), EDEADLK);
    EXPECT_RC(rs_mutex_trylock(m), EBUSY);
    EXPECT_RC(rs_mutex_destroy(m), EBUSY);
    EXPECT_RC(rs_mutex_trylock(m2), EBUSY);
    struct timespec dl = st_abs_in(50), past = st_abs_in(-1000), bad = st_abs_in(50);
    bad.tv_nsec = 1000000000L;
    EXPECT_RC(rs_mutex_timedlock(m2, &dl), ETIMEDOUT);
    EXPECT_RC(rs_mutex_timedlock(m2, &past), ETIMEDOUT);
    EXPECT_RC(rs_mutex_timedlock(m2, &bad), EINVAL);
    EXPECT_RC(rs_mutex_timedlock(m2, NULL), EINVAL);
    /* a waiter of the other client is handed the mutex by the unlock */
    helper_t h = {m2, -1, -1};
    pthread_t t;
    st_spawn(&t, lock_unlock_main, &h);
    st_sleep_ms(100);
    EXPECT_RC(rs_mutex_unlock(m), 0);
    pthread_join(t, NULL);
    CHECK(h.rc_lock == 0 && h.rc_unlock == 0, "the waiter got %d, %d", h.rc_lock, h.rc_unlock);
    EXPECT_RC(rs_mutex_trylock(m), 0);
    CHECK(rs_mutex_fence(m) > f, "the fence did not rise");
    EXPECT_RC(rs_mutex_unlock(m), 0);
    dl = st_abs_in(1000);
    EXPECT_RC(rs_mutex_timedlock(m, &dl), 0);
    EXPECT_RC(rs_mutex_unlock(m), 0);
    CHECK(rs_mutex_fence(m) == 0 && rs_mutex_remaining(m) == 0, "fence/remaining after unlock");
    EXPECT_RC(rs_mutex_destroy(m), 0);
    EXPECT_RC(rs_mutex_destroy(m2), 0);
}

/* ---- rmutex ----------------------------------------------------------------------------- */

static void rmutex_tour(rs_client_t *c, rs_client_t *c2)
{
    rs_rmutex_t *m = NULL, *m2 = NULL;
    EXPECT_RC(rs_rmutex_init(NULL, c, "x"), EINVAL);
    EXPECT_RC(rs_rmutex_init(&m, c, ""), EINVAL);
    EXPECT_RC(rs_rmutex_lock(NULL), EINVAL);
    EXPECT_RC(rs_rmutex_trylock(NULL), EINVAL);
    EXPECT_RC(rs_rmutex_timedlock(NULL, NULL), EINVAL);
    EXPECT_RC(rs_rmutex_unlock(NULL), EINVAL);
    EXPECT_RC(rs_rmutex_setlease(NULL, 100), EINVAL);
    EXPECT_RC(rs_rmutex_destroy(NULL), 0);
    CHECK(rs_rmutex_fence(NULL) == 0 && rs_rmutex_remaining(NULL) == 0, "NULL fence/remaining");
    EXPECT_RC(rs_rmutex_init(&m, c, "tour-rmutex"), 0);
    EXPECT_RC(rs_rmutex_init(&m2, c2, "tour-rmutex"), 0);
    EXPECT_RC(rs_rmutex_setlease(m, 5), EINVAL);
    EXPECT_RC(rs_rmutex_setlease(m, 1000), 0);
    EXPECT_RC(rs_rmutex_unlock(m), EPERM);
    EXPECT_RC(rs_rmutex_lock(m), 0);
    uint64_t f = rs_rmutex_fence(m);
    EXPECT_RC(rs_rmutex_trylock(m), 0);
    struct timespec dl = st_abs_in(1000);
    EXPECT_RC(rs_rmutex_timedlock(m, &dl), 0);
    EXPECT_RC(rs_rmutex_timedlock(m, NULL), EINVAL);
    CHECK(rs_rmutex_fence(m) == f && f > 0 && rs_rmutex_remaining(m) > 0, "fence on re-entry");
    rs_info_t info;
    EXPECT_RC(rs_inspect(c, "rmutex", "tour-rmutex", &info), 0);
    CHECK(info.count == 3 && info.nholders == 1, "inspect: count %ld, holders %u", info.count,
          info.nholders);
    EXPECT_RC(rs_rmutex_trylock(m2), EBUSY);
    dl = st_abs_in(30);
    EXPECT_RC(rs_rmutex_timedlock(m2, &dl), ETIMEDOUT);
    EXPECT_RC(rs_rmutex_destroy(m), EBUSY);
    for (int i = 0; i < 3; i++)
        EXPECT_RC(rs_rmutex_unlock(m), 0);
    EXPECT_RC(rs_rmutex_unlock(m), EPERM);
    EXPECT_RC(rs_rmutex_trylock(m2), 0);
    EXPECT_RC(rs_rmutex_unlock(m2), 0);
    EXPECT_RC(rs_rmutex_destroy(m), 0);
    EXPECT_RC(rs_rmutex_destroy(m2), 0);
}

/* ---- rwlock ----------------------------------------------------------------------------- */

static void rwlock_tour(rs_client_t *c, rs_client_t *c2)
{
    rs_rwlock_t *rw = NULL, *rw2 = NULL;
    EXPECT_RC(rs_rwlock_init(NULL, c, "x"), EINVAL);
    EXPECT_RC(rs_rwlock_init(&rw, NULL, "x"), EINVAL);
    EXPECT_RC(rs_rwlock_rdlock(NULL), EINVAL);
    EXPECT_RC(rs_rwlock_tryrdlock(NULL), EINVAL);
    EXPECT_RC(rs_rwlock_timedrdlock(NULL, NULL), EINVAL);
    EXPECT_RC(rs_rwlock_wrlock(NULL), EINVAL);
    EXPECT_RC(rs_rwlock_trywrlock(NULL), EINVAL);
    EXPECT_RC(rs_rwlock_timedwrlock(NULL, NULL), EINVAL);
    EXPECT_RC(rs_rwlock_unlock(NULL), EINVAL);
    EXPECT_RC(rs_rwlock_destroy(NULL), 0);
    CHECK(rs_rwlock_fence(NULL) == 0, "NULL fence");
    EXPECT_RC(rs_rwlock_init(&rw, c, "tour-rw"), 0);
    EXPECT_RC(rs_rwlock_init(&rw2, c2, "tour-rw"), 0);
    EXPECT_RC(rs_rwlock_unlock(rw), EPERM);
    /* readers share */
    EXPECT_RC(rs_rwlock_rdlock(rw), 0);
    EXPECT_RC(rs_rwlock_tryrdlock(rw2), 0);
    struct timespec dl = st_abs_in(1000);
    EXPECT_RC(rs_rwlock_timedrdlock(rw, &dl), 0); /* re-entry */
    EXPECT_RC(rs_rwlock_timedrdlock(rw, NULL), EINVAL);
    EXPECT_RC(rs_rwlock_wrlock(rw), EDEADLK);     /* upgrade */
    EXPECT_RC(rs_rwlock_trywrlock(rw2), EDEADLK); /* the other client's reader: upgrade */
    CHECK(rs_rwlock_fence(rw) == 0, "a reader has a write fence");
    EXPECT_RC(rs_rwlock_destroy(rw), EBUSY);
    EXPECT_RC(rs_rwlock_unlock(rw), 0);
    EXPECT_RC(rs_rwlock_unlock(rw), 0);
    EXPECT_RC(rs_rwlock_unlock(rw2), 0);
    /* a writer excludes */
    dl = st_abs_in(1000);
    EXPECT_RC(rs_rwlock_timedwrlock(rw, &dl), 0);
    EXPECT_RC(rs_rwlock_timedwrlock(rw, NULL), EINVAL);
    uint64_t f = rs_rwlock_fence(rw);
    CHECK(f > 0, "a writer without a fence");
    EXPECT_RC(rs_rwlock_trywrlock(rw), 0); /* re-entry */
    EXPECT_RC(rs_rwlock_tryrdlock(rw2), EBUSY);
    dl = st_abs_in(30);
    EXPECT_RC(rs_rwlock_timedrdlock(rw2, &dl), ETIMEDOUT);
    dl = st_abs_in(30);
    EXPECT_RC(rs_rwlock_timedwrlock(rw2, &dl), ETIMEDOUT);
    EXPECT_RC(rs_rwlock_unlock(rw), 0);
    /* downgrade */
    EXPECT_RC(rs_rwlock_rdlock(rw), 0);
    EXPECT_RC(rs_rwlock_unlock(rw), 0); /* drops the write hold */
    CHECK(rs_rwlock_fence(rw) == 0, "write fence after the downgrade");
    EXPECT_RC(rs_rwlock_tryrdlock(rw2), 0);
    EXPECT_RC(rs_rwlock_unlock(rw2), 0);
    EXPECT_RC(rs_rwlock_unlock(rw), 0);
    EXPECT_RC(rs_rwlock_unlock(rw), EPERM);
    EXPECT_RC(rs_rwlock_wrlock(rw2), 0);
    EXPECT_RC(rs_rwlock_unlock(rw2), 0);
    EXPECT_RC(rs_rwlock_destroy(rw), 0);
    EXPECT_RC(rs_rwlock_destroy(rw2), 0);
}

/* ---- semaphore -------------------------------------------------------------------------- */

static void sem_tour(rs_client_t *c, rs_client_t *c2)
{
    rs_sem_t *s = NULL, *s2 = NULL;
    int v = -1;
    EXPECT_RC(rs_sem_init(NULL, c, "x", 1), EINVAL);
    EXPECT_RC(rs_sem_init(&s, c, "tour-absent", 0), ENOENT);
    EXPECT_RC(rs_sem_init(&s, c, "x", (unsigned)INT_MAX + 1u), EINVAL);
    EXPECT_RC(rs_sem_wait(NULL), EINVAL);
    EXPECT_RC(rs_sem_trywait(NULL), EINVAL);
    EXPECT_RC(rs_sem_timedwait(NULL, NULL), EINVAL);
    EXPECT_RC(rs_sem_timedwait_n(NULL, 1, NULL), EINVAL);
    EXPECT_RC(rs_sem_post(NULL), EINVAL);
    EXPECT_RC(rs_sem_post_n(NULL, 1), EINVAL);
    EXPECT_RC(rs_sem_getvalue(NULL, &v), EINVAL);
    EXPECT_RC(rs_sem_setsize(NULL, 1), EINVAL);
    EXPECT_RC(rs_sem_destroy(NULL), 0);
    CHECK(rs_sem_fence(NULL) == 0, "NULL fence");
    EXPECT_RC(rs_sem_init(&s, c, "tour-sem", 2), 0);
    EXPECT_RC(rs_sem_init(&s2, c2, "tour-sem", 0), 0); /* attach */
    EXPECT_RC(rs_sem_getvalue(s, NULL), EINVAL);
    EXPECT_RC(rs_sem_getvalue(s, &v), 0);
    CHECK(v == 2, "getvalue %d, not 2", v);
    EXPECT_RC(rs_sem_post(s), EPERM);
    EXPECT_RC(rs_sem_wait(s), 0);
    CHECK(rs_sem_fence(s) > 0, "no fence with a permit");
    EXPECT_RC(rs_sem_trywait(s2), 0);
    EXPECT_RC(rs_sem_trywait(s2), EAGAIN);
    struct timespec dl = st_abs_in(30);
    EXPECT_RC(rs_sem_timedwait(s2, &dl), ETIMEDOUT);
    EXPECT_RC(rs_sem_timedwait(s2, NULL), EINVAL);
    EXPECT_RC(rs_sem_getvalue(s2, &v), 0);
    CHECK(v == 0, "getvalue %d, not 0", v);
    EXPECT_RC(rs_sem_destroy(s), EBUSY);
    EXPECT_RC(rs_sem_post(s), 0);
    EXPECT_RC(rs_sem_post(s2), 0);
    EXPECT_RC(rs_sem_timedwait_n(s, 0, NULL), EINVAL);
    dl = st_abs_in(1000);
    EXPECT_RC(rs_sem_timedwait_n(s, 3, &dl), EINVAL); /* more than the size */
    dl = st_abs_in(1000);
    EXPECT_RC(rs_sem_timedwait_n(s, 2, &dl), 0);
    EXPECT_RC(rs_sem_post_n(s, 0), EINVAL);
    EXPECT_RC(rs_sem_post_n(s, 3), EPERM);
    EXPECT_RC(rs_sem_post_n(s, 1), 0); /* keeps one */
    EXPECT_RC(rs_sem_setsize(s, 0), EINVAL);
    EXPECT_RC(rs_sem_setsize(s, 3), 0);
    EXPECT_RC(rs_sem_getvalue(s2, &v), 0);
    CHECK(v == 2, "getvalue %d after resize, not 2", v);
    EXPECT_RC(rs_sem_timedwait_n(s2, 2, NULL), 0);
    EXPECT_RC(rs_sem_post_n(s2, 2), 0);
    EXPECT_RC(rs_sem_post(s), 0);
    EXPECT_RC(rs_sem_destroy(s), 0);
    EXPECT_RC(rs_sem_destroy(s2), 0);
}

/* ---- latch ------------------------------------------------------------------------------ */

typedef struct latch_waiter {
    rs_latch_t *l;
    int rc;
} latch_waiter_t;

static void *latch_wait_main(void *arg)
{
    latch_waiter_t *w = arg;
    w->rc = rs_latch_wait(w->l);
    return NULL;
}

static void latch_tour(rs_client_t *c, rs_client_t *c2)
{
    rs_latch_t *l = NULL, *l2 = NULL;
    unsigned n = 99;
    EXPECT_RC(rs_latch_init(NULL, c, "x", 1), EINVAL);
    EXPECT_RC(rs_latch_count_down(NULL), EINVAL);
    EXPECT_RC(rs_latch_wait(NULL), EINVAL);
    EXPECT_RC(rs_latch_timedwait(NULL, NULL), EINVAL);
    EXPECT_RC(rs_latch_getcount(NULL, &n), EINVAL);
    EXPECT_RC(rs_latch_rearm(NULL, 1), EINVAL);
    EXPECT_RC(rs_latch_destroy(NULL), 0);
    EXPECT_RC(rs_latch_init(&l2, c2, "tour-latch", 0), 0); /* attach only */
    EXPECT_RC(rs_latch_count_down(l2), ENOENT);
    EXPECT_RC(rs_latch_getcount(l2, &n), ENOENT);
    EXPECT_RC(rs_latch_getcount(l2, NULL), EINVAL);
    EXPECT_RC(rs_latch_init(&l, c, "tour-latch", 2), 0);
    EXPECT_RC(rs_latch_getcount(l2, &n), 0);
    CHECK(n == 2, "count %u, not 2", n);
    struct timespec dl = st_abs_in(30);
    EXPECT_RC(rs_latch_timedwait(l2, &dl), ETIMEDOUT);
    EXPECT_RC(rs_latch_timedwait(l2, NULL), EINVAL);
    latch_waiter_t w = {l2, -1};
    pthread_t t;
    st_spawn(&t, latch_wait_main, &w);
    EXPECT_RC(rs_latch_count_down(l), 0);
    st_sleep_ms(50);
    EXPECT_RC(rs_latch_count_down(l), 0);
    pthread_join(t, NULL);
    EXPECT_RC(w.rc, 0);
    EXPECT_RC(rs_latch_count_down(l), 0); /* at 0: no-op */
    EXPECT_RC(rs_latch_wait(l), 0);
    dl = st_abs_in(1000);
    EXPECT_RC(rs_latch_timedwait(l, &dl), 0);
    EXPECT_RC(rs_latch_rearm(l, 0), EINVAL);
    EXPECT_RC(rs_latch_rearm(l, 1), 0);
    EXPECT_RC(rs_latch_getcount(l, &n), 0);
    CHECK(n == 1, "count %u after rearm, not 1", n);
    EXPECT_RC(rs_latch_count_down(l2), 0);
    EXPECT_RC(rs_latch_wait(l2), 0);
    EXPECT_RC(rs_latch_destroy(l), 0);
    EXPECT_RC(rs_latch_destroy(l2), 0);
}

/* ---- inspection, force release, lost holds ---------------------------------------------- */

static int count_each(const char *kind, const char *name, void *arg)
{
    (void)kind;
    (void)name;
    return ++*(int *)arg >= 1000 ? 7 : 0;
}

static int stop_each(const char *kind, const char *name, void *arg)
{
    (void)kind;
    (void)name;
    (void)arg;
    return 42;
}

static int wait_lost(int before, long ms)
{
    long long until = st_mono_ms() + ms;
    while (atomic_load(&st_lost) == before && st_mono_ms() < until)
        st_sleep_ms(10);
    return atomic_load(&st_lost) > before;
}

static void inspect_tour(rs_client_t *c, rs_client_t *op)
{
    rs_info_t info;
    EXPECT_RC(rs_inspect(c, "mutex", "x", NULL), EINVAL);
    EXPECT_RC(rs_inspect(c, "nope", "x", &info), EINVAL);
    EXPECT_RC(rs_inspect(c, NULL, "x", &info), EINVAL);
    EXPECT_RC(rs_inspect(c, "mutex", "", &info), EINVAL);
    EXPECT_RC(rs_inspect(NULL, "mutex", "x", &info), EINVAL);
    EXPECT_RC(rs_list(c, NULL, NULL, NULL), EINVAL);
    EXPECT_RC(rs_force_release(c, "nope", "x"), EINVAL);
    EXPECT_RC(rs_inspect(c, "latch", "tour-nothing", &info), 0);
    CHECK(!info.exists, "a latch never armed exists");

    rs_mutex_t *m;
    rs_latch_t *l;
    EXPECT_RC(rs_mutex_init(&m, c, "tour-inspect"), 0);
    EXPECT_RC(rs_latch_init(&l, c, "tour-inspect", 3), 0);
    EXPECT_RC(rs_mutex_lock(m), 0);
    EXPECT_RC(rs_inspect(op, "mutex", "tour-inspect", &info), 0);
    CHECK(info.exists && info.nholders == 1 && info.fence == rs_mutex_fence(m) &&
              info.remaining_ms > 0 && strncmp(info.holders[0], rs_client_id(c), 16) == 0 &&
              strcmp(info.kind, "mutex") == 0,
          "inspect of a held mutex: exists %d, holders %u, fence %llu, remaining %ld, "
          "holder %s", info.exists, info.nholders, (unsigned long long)info.fence,
          info.remaining_ms, info.holders[0]);
    EXPECT_RC(rs_inspect(op, "latch", "tour-inspect", &info), 0);
    CHECK(info.count == 3, "latch count %ld", info.count);
    int n = 0;
    EXPECT_RC(rs_list(op, NULL, count_each, &n), 0);
    CHECK(n >= 2, "rs_list found %d primitives", n);
    n = 0;
    EXPECT_RC(rs_list(op, "tour-insp*", count_each, &n), 0);
    CHECK(n == 2, "rs_list with a pattern found %d, not 2", n);
    EXPECT_RC(rs_list(op, "*", stop_each, NULL), 42);

    /* force release: the holder learns at its next renewal (on_lost), unlock says RS_ELOST */
    int before = atomic_load(&st_lost);
    EXPECT_RC(rs_force_release(op, "mutex", "tour-inspect"), 0);
    CHECK(wait_lost(before, 5000), "no on_lost after a force release");
    CHECK(rs_mutex_remaining(m) == 0, "remaining of a lost hold is %ld", rs_mutex_remaining(m));
    EXPECT_RC(rs_mutex_lock(m), EDEADLK); /* lost but not unlocked yet */
    EXPECT_RC(rs_mutex_unlock(m), RS_ELOST);
    EXPECT_RC(rs_force_release(op, "mutex", "tour-inspect"), 0); /* nothing held: 0 */
    EXPECT_RC(rs_mutex_lock(m), 0);
    EXPECT_RC(rs_mutex_unlock(m), 0);
    EXPECT_RC(rs_mutex_destroy(m), 0);
    EXPECT_RC(rs_latch_destroy(l), 0);
}

/* A hold lost by its local deadline: Redis stops answering for longer than the lease. */
static void paused_server(void)
{
    rs_client_t *c = open_cfg(g_srv.url, 300, 2000);
    if (!c)
        return;
    rs_mutex_t *m;
    EXPECT_RC(rs_mutex_init(&m, c, "tour-pause"), 0);
    EXPECT_RC(rs_mutex_lock(m), 0);
    int before = atomic_load(&st_lost);
    ts_server_pause(&g_srv);
    CHECK(wait_lost(before, 5000), "no on_lost while Redis was paused past the lease");
    ts_server_resume(&g_srv);
    EXPECT_RC(rs_mutex_unlock(m), RS_ELOST);
    EXPECT_RC(rs_mutex_lock(m), 0);
    EXPECT_RC(rs_mutex_unlock(m), 0);
    EXPECT_RC(rs_mutex_destroy(m), 0);
    EXPECT_RC(rs_client_close(c), 0);
}

/* Redis killed: RS_ECONN within timeout_ms; after a restart the same client works again. */
static void killed_server(void)
{
    rs_client_t *c = open_cfg(g_srv.url, 2000, 300);
    if (!c)
        return;
    rs_mutex_t *m;
    rs_latch_t *l;
    EXPECT_RC(rs_mutex_init(&m, c, "tour-kill"), 0);
    EXPECT_RC(rs_latch_init(&l, c, "tour-kill", 1), 0);
    EXPECT_RC(rs_mutex_lock(m), 0);
    EXPECT_RC(rs_mutex_unlock(m), 0);
    ts_server_kill(&g_srv);
    long long t = st_mono_ms();
    EXPECT_RC(rs_mutex_lock(m), RS_ECONN);
    unsigned n;
    EXPECT_RC(rs_latch_getcount(l, &n), RS_ECONN);
    CHECK(st_mono_ms() - t < 3000, "two calls took %lld ms with timeout_ms 300",
          st_mono_ms() - t);
    if (ts_server_restart(&g_srv) != 0) {
        fprintf(stderr, "tour: cannot restart redis-server\n");
        exit(2);
    }
    EXPECT_RC(rs_mutex_lock(m), 0); /* NOSCRIPT after the restart: loaded again */
    EXPECT_RC(rs_latch_getcount(l, &n), ENOENT); /* the server kept nothing */
    EXPECT_RC(rs_latch_destroy(l), 0);
    EXPECT_RC(rs_mutex_unlock(m), 0);
    EXPECT_RC(rs_mutex_destroy(m), 0);
    EXPECT_RC(rs_client_close(c), 0);
}

/* ---- close ------------------------------------------------------------------------------ */

static void close_tour(void)
{
    rs_client_t *c = open_cfg(g_srv.url, 0, 0);
    if (!c)
        return;
    rs_mutex_t *m, *held;
    rs_latch_t *l;
    EXPECT_RC(rs_mutex_init(&m, c, "tour-close"), 0);
    EXPECT_RC(rs_mutex_init(&held, c, "tour-close-held"), 0);
    EXPECT_RC(rs_latch_init(&l, c, "tour-close", 1), 0);
    EXPECT_RC(rs_mutex_lock(held), 0); /* released by the close */
    EXPECT_RC(rs_client_close(c), 0);
    EXPECT_RC(rs_client_close(c), EINVAL); /* the handles keep its memory: a second close says so */
    EXPECT_RC(rs_mutex_lock(m), ECANCELED);
    EXPECT_RC(rs_mutex_unlock(held), ECANCELED);
    EXPECT_RC(rs_latch_count_down(l), ECANCELED);
    rs_mutex_t *late = (rs_mutex_t *)&late;
    EXPECT_RC(rs_mutex_init(&late, c, "tour-close-late"), ECANCELED);
    CHECK(late == NULL, "a failed rs_mutex_init left *m non-NULL");
    EXPECT_RC(rs_mutex_destroy(held), 0); /* closed: no EBUSY */
    EXPECT_RC(rs_mutex_destroy(m), 0);
    EXPECT_RC(rs_latch_destroy(l), 0); /* the last reference: frees the client */
    rs_client_t *op = open_cfg(g_srv.url, 0, 0);
    if (op) {
        rs_info_t info;
        EXPECT_RC(rs_inspect(op, "mutex", "tour-close-held", &info), 0);
        CHECK(info.nholders == 0, "close left %u holder(s)", info.nholders);
        EXPECT_RC(rs_client_close(op), 0);
    }
}

/* ---- fork ------------------------------------------------------------------------------- */

/* Waits (up to 10 s) until the watchdog has renewed m's hold once (its remaining lease goes
 * up again): its connection then stands and it sleeps for a third of the lease. */
static void wait_renewed(rs_mutex_t *m)
{
    long last = rs_mutex_remaining(m);
    for (int i = 0; i < 2000; i++) {
        usleep(5000);
        long now = rs_mutex_remaining(m);
        if (now > last)
            return;
        last = now;
    }
}

static void fork_tour(void)
{
    /* a short lease: the watchdog renews, then sleeps, within a second (see wait_renewed) */
    rs_client_t *c = open_cfg(g_srv.url, 900, 0);
    if (!c)
        return;
    rs_mutex_t *m, *free_m;
    rs_latch_t *l;
    EXPECT_RC(rs_mutex_init(&m, c, "tour-fork"), 0);
    EXPECT_RC(rs_mutex_init(&free_m, c, "tour-fork-free"), 0);
    EXPECT_RC(rs_latch_init(&l, c, "tour-fork", 1), 0);
    /* trylock: starts the watchdog and its connection, but not the notifier */
    EXPECT_RC(rs_mutex_trylock(free_m), 0);
    EXPECT_RC(rs_mutex_unlock(free_m), 0);
    /* The parent forks holding a lock taken with a blocking call, so its notifier thread runs
     * too: the child's close must free the subscriber connection and the hold's lease it
     * inherited (valgrind found both leaking once). */
    int hold_at_fork = 1;
    EXPECT_RC(rs_mutex_lock(m), 0);
    /* The watchdog dials as soon as a lease is registered, on its own thread: fork right
     * after its first renewal, when it has its connection and sleeps, or the child may
     * inherit a context half-made on the parent's watchdog thread, which nothing in the
     * child can reach or free (valgrind reports it lost; seen in CI under load) */
    wait_renewed(m);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        atomic_store(&st_failures, 0);
        st_prog = "tour (fork child)";
        EXPECT_RC(rs_mutex_lock(free_m), RS_EFORK);
        EXPECT_RC(rs_mutex_trylock(free_m), RS_EFORK);
        EXPECT_RC(rs_mutex_unlock(m), RS_EFORK);
        EXPECT_RC(rs_latch_count_down(l), RS_EFORK);
        rs_info_t info;
        EXPECT_RC(rs_inspect(c, "mutex", "tour-fork", &info), RS_EFORK);
        rs_mutex_t *late;
        EXPECT_RC(rs_mutex_init(&late, c, "x"), RS_EFORK);
        EXPECT_RC(rs_mutex_destroy(m), 0);
        EXPECT_RC(rs_mutex_destroy(free_m), 0);
        EXPECT_RC(rs_latch_destroy(l), 0);
        EXPECT_RC(rs_client_close(c), 0);
        /* a client opened in the child works (TSan cannot start threads here: inspect only) */
        rs_client_t *cc = open_cfg(g_srv.url, 0, 0);
        if (cc) {
            EXPECT_RC(rs_inspect(cc, "mutex", "tour-fork", &info), 0);
            CHECK(info.nholders == (unsigned)hold_at_fork, "the child sees %u holder(s)",
                  info.nholders);
            if (!UNDER_TSAN) {
                rs_mutex_t *cm;
                EXPECT_RC(rs_mutex_init(&cm, cc, "tour-fork-child"), 0);
                EXPECT_RC(rs_mutex_lock(cm), 0);
                EXPECT_RC(rs_mutex_unlock(cm), 0);
                EXPECT_RC(rs_mutex_destroy(cm), 0);
            }
            EXPECT_RC(rs_client_close(cc), 0);
        }
        /* exit(), not _exit(): the test-support atexit handler must not touch the parent's
         * server (it checks its owner pid) and valgrind checks the child's leaks at exit */
        exit(atomic_load(&st_failures) ? 1 : 0);
    }
    if (pid < 0) {
        FAILF("fork: %s", strerror(errno));
    } else {
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the fork child ended with status %d (99: valgrind found errors or leaks in it)",
              WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
    }
    if (hold_at_fork)
        EXPECT_RC(rs_mutex_unlock(m), 0); /* the child's close did not release it */
    EXPECT_RC(rs_mutex_lock(free_m), 0);
    EXPECT_RC(rs_mutex_unlock(free_m), 0);
    EXPECT_RC(rs_mutex_destroy(m), 0);
    EXPECT_RC(rs_mutex_destroy(free_m), 0);
    EXPECT_RC(rs_latch_destroy(l), 0);
    EXPECT_RC(rs_client_close(c), 0);
}

/* ---- close with Redis down ------------------------------------------------------------- */

static void close_with_redis_down(void)
{
    /* rs_client_close "blocks for at most timeout_ms": with Redis unreachable it once spent
     * timeout_ms on EACH hold it still had. */
    rs_client_t *c = open_cfg(g_srv.url, 30000, 300);
    if (!c)
        return;
    enum { HOLDS = 6 };
    rs_mutex_t *m[HOLDS];
    for (int i = 0; i < HOLDS; i++) {
        char name[32];
        snprintf(name, sizeof name, "tour-bug-%d", i);
        EXPECT_RC(rs_mutex_init(&m[i], c, name), 0);
        EXPECT_RC(rs_mutex_lock(m[i]), 0);
    }
    ts_server_kill(&g_srv);
    long long t = st_mono_ms();
    EXPECT_RC(rs_client_close(c), 0);
    long long took = st_mono_ms() - t;
    CHECK(took < 300 + 200, "rs_client_close took %lld ms with Redis down, "
          "timeout_ms 300 and %d holds", took, HOLDS);
    for (int i = 0; i < HOLDS; i++)
        EXPECT_RC(rs_mutex_destroy(m[i]), 0);
    if (ts_server_restart(&g_srv) != 0)
        exit(2);
}

int main(void)
{
    long long t0 = st_mono_ms();
    char sock[108];
    snprintf(sock, sizeof sock, "/tmp/rs-tour-%ld.sock", (long)getpid());
    st_prog = "tour";
    if (ts_server_start(&g_srv, "--unixsocket", sock, "--unixsocketperm", "700", NULL) != 0) {
        fprintf(stderr, "tour: cannot start redis-server\n");
        return 2;
    }
    ts_unique_prefix(g_prefix, sizeof g_prefix);
    char buf[64];
    if (!ts_cmd_str(&g_srv, buf, sizeof buf, "ACL SETUSER tour on >tour-pw ~* &* +@all") ||
        strcmp(buf, "OK") != 0) {
        fprintf(stderr, "tour: ACL SETUSER failed\n");
        return 2;
    }
    basics();
    good_opens(sock);
    rs_client_t *c = open_cfg(g_srv.url, 300, 0), *c2 = open_cfg(g_srv.url, 300, 0);
    if (!c || !c2)
        return 2;
    mutex_tour(c, c2);
    rmutex_tour(c, c2);
    rwlock_tour(c, c2);
    sem_tour(c, c2);
    latch_tour(c, c2);
    inspect_tour(c, c2);
    EXPECT_RC(rs_client_close(c2), 0);
    EXPECT_RC(rs_client_close(c), 0);
    paused_server();
    killed_server();
    close_tour();
    fork_tour();
    close_with_redis_down();
    unlink(sock);
    return st_finish(&g_srv, t0);
}
