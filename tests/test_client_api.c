/*
 * test_client_api.c - the client's error reporting (rs_strerror, rs_version, the per-thread
 * last error), input checking and key layout on the mutex entry points, and lifetime (fork,
 * close, client id). Suite `client`, declared in test_client.c.
 */
#include "client_support.h"

/* ---------------------------------------------------------------------------------------
 * 6. rs_strerror and rs_version
 * ------------------------------------------------------------------------------------- */

Test(client, strerror_and_version)
{
    static const int codes[] = {0,         RS_ELOST, RS_ECONN, RS_ESERVER, RS_EREPL,
                                RS_EFORK,  RS_EQUEUE, EINVAL,  EBUSY,      ETIMEDOUT,
                                EPERM,     EDEADLK,  ENOMEM,   EAGAIN,     ENOENT,
                                ECANCELED};
    size_t n = sizeof codes / sizeof codes[0];
    cr_assert_eq(RS_ELOST, 1001);
    cr_assert_eq(RS_ECONN, 1002);
    cr_assert_eq(RS_ESERVER, 1003);
    cr_assert_eq(RS_EREPL, 1004);
    cr_assert_eq(RS_EFORK, 1005);
    cr_assert_eq(RS_EQUEUE, 1006);
    for (size_t i = 0; i < n; i++) {
        const char *a = rs_strerror(codes[i]);
        cr_assert_not_null(a, "rs_strerror(%d) is NULL", codes[i]);
        cr_expect_neq(a[0], '\0', "rs_strerror(%d) is empty", codes[i]);
        for (size_t j = 0; j < i; j++)
            cr_expect_str_neq(a, rs_strerror(codes[j]), "rs_strerror(%d) == rs_strerror(%d)",
                              codes[i], codes[j]);
    }
    static const int unknown[] = {99999, -1, 1000, 1007, 4096};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *u = rs_strerror(unknown[i]);
        cr_assert_not_null(u, "rs_strerror(%d) is NULL", unknown[i]);
        cr_expect_neq(u[0], '\0', "rs_strerror(%d) is empty", unknown[i]);
        cr_expect_str_neq(u, rs_strerror(0), "rs_strerror(%d) says success", unknown[i]);
    }

    const char *v = rs_version();
    cr_assert_not_null(v);
    cr_expect_str_eq(v, RS_VERSION_STRING);
    char major[16];
    snprintf(major, sizeof major, "%d.", RS_VERSION_MAJOR);
    cr_expect_eq(strncmp(v, major, strlen(major)), 0, "version %s does not start with %s", v,
                 major);
    char full[48];
    snprintf(full, sizeof full, "%d.%d.%d", RS_VERSION_MAJOR, RS_VERSION_MINOR, RS_VERSION_PATCH);
    cr_expect_str_eq(v, full);
}

/* ---------------------------------------------------------------------------------------
 * 7. rs_client_lasterror is per thread
 * ------------------------------------------------------------------------------------- */

struct le_ctx {
    rs_client_t *c;
    pthread_barrier_t b1, b2;
    int rc_a, rc_b;
    char msg_a[600], msg_b[600];
    const char *fresh; /* what a thread that made no call sees */
    int fresh_null;
};

static void *le_thread_a(void *p)
{
    struct le_ctx *x = p;
    rs_mutex_t *m = NULL;
    x->rc_a = rs_mutex_init(&m, x->c, "");
    pthread_barrier_wait(&x->b1); /* B fails now */
    pthread_barrier_wait(&x->b2);
    snprintf(x->msg_a, sizeof x->msg_a, "%s", rs_client_lasterror(x->c));
    return NULL;
}

static void *le_thread_b(void *p)
{
    struct le_ctx *x = p;
    pthread_barrier_wait(&x->b1); /* A has failed */
    char name[RS_NAME_MAX + 2];
    memset(name, 'n', RS_NAME_MAX + 1);
    name[RS_NAME_MAX + 1] = '\0';
    rs_mutex_t *m = NULL;
    x->rc_b = rs_mutex_init(&m, x->c, name);
    pthread_barrier_wait(&x->b2);
    snprintf(x->msg_b, sizeof x->msg_b, "%s", rs_client_lasterror(NULL));
    return NULL;
}

static void *le_thread_fresh(void *p)
{
    struct le_ctx *x = p;
    const char *e = rs_client_lasterror(NULL);
    x->fresh_null = e == NULL;
    x->fresh = e && e[0] == '\0' ? "" : "not empty";
    return NULL;
}

Test(client, lasterror_is_per_thread)
{
    ts_server_t s;
    tu_start_server(&s);
    struct le_ctx x;
    memset(&x, 0, sizeof x);
    x.c = open_ok(s.url, 2000, 0);
    pthread_barrier_init(&x.b1, NULL, 2);
    pthread_barrier_init(&x.b2, NULL, 2);
    /* the main thread's own message, set before and checked after */
    rs_mutex_t *m = NULL;
    cr_assert_eq(rs_mutex_init(&m, x.c, NULL), EINVAL);
    char mine[600];
    snprintf(mine, sizeof mine, "%s", rs_client_lasterror(NULL));

    pthread_t a, b, f;
    pthread_create(&a, NULL, le_thread_a, &x);
    pthread_create(&b, NULL, le_thread_b, &x);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_create(&f, NULL, le_thread_fresh, &x);
    pthread_join(f, NULL);

    cr_expect_eq(x.rc_a, EINVAL);
    cr_expect_eq(x.rc_b, EINVAL);
    cr_expect(strstr(x.msg_a, "empty") != NULL, "thread A sees \"%s\"", x.msg_a);
    cr_expect(strstr(x.msg_b, "longer") != NULL || strstr(x.msg_b, "512") != NULL,
              "thread B sees \"%s\"", x.msg_b);
    cr_expect_str_neq(x.msg_a, x.msg_b);
    cr_expect_str_eq(rs_client_lasterror(NULL), mine, "the main thread's message changed");
    cr_expect_str_eq(rs_client_lasterror(x.c), rs_client_lasterror(NULL));
    cr_expect(strstr(mine, "NULL") != NULL, "main thread sees \"%s\"", mine);
    cr_expect(!x.fresh_null, "lasterror is NULL in a fresh thread");
    cr_expect_str_eq(x.fresh, "", "a fresh thread's lasterror is not \"\"");

    pthread_barrier_destroy(&x.b1);
    pthread_barrier_destroy(&x.b2);
    cr_assert_eq(rs_client_close(x.c), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 8. Bad input on the mutex functions; names of any bytes
 * ------------------------------------------------------------------------------------- */

Test(client, mutex_bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_ok(s.url, 2000, 0);
    rs_mutex_t *m = (rs_mutex_t *)&s;

    cr_expect_eq(rs_mutex_init(NULL, c, "x"), EINVAL);
    cr_expect_eq(rs_mutex_init(&m, NULL, "x"), EINVAL);
    cr_expect_null(m);
    m = (rs_mutex_t *)&s;
    cr_expect_eq(rs_mutex_init(&m, c, NULL), EINVAL);
    cr_expect_null(m);
    m = (rs_mutex_t *)&s;
    cr_expect_eq(rs_mutex_init(&m, c, ""), EINVAL);
    cr_expect_null(m);

    char name[RS_NAME_MAX + 2];
    memset(name, 'z', RS_NAME_MAX + 1);
    name[RS_NAME_MAX + 1] = '\0';
    m = (rs_mutex_t *)&s;
    cr_expect_eq(rs_mutex_init(&m, c, name), EINVAL, "a %d-byte name", RS_NAME_MAX + 1);
    cr_expect_null(m);
    name[RS_NAME_MAX] = '\0';
    m = NULL;
    cr_assert_eq(rs_mutex_init(&m, c, name), 0, "a %d-byte name: %s", RS_NAME_MAX,
                 rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0, "%s", rs_client_lasterror(c));

    struct timespec ts = tu_abs_in(1000);
    cr_expect_eq(rs_mutex_lock(NULL), EINVAL);
    cr_expect_eq(rs_mutex_unlock(NULL), EINVAL);
    cr_expect_eq(rs_mutex_trylock(NULL), EINVAL);
    cr_expect_eq(rs_mutex_timedlock(NULL, &ts), EINVAL);
    cr_expect_eq(rs_mutex_timedlock(m, NULL), EINVAL);
    struct timespec bad = ts;
    bad.tv_nsec = -1;
    cr_expect_eq(rs_mutex_timedlock(m, &bad), EINVAL);
    bad.tv_nsec = 1000000000L;
    cr_expect_eq(rs_mutex_timedlock(m, &bad), EINVAL);
    cr_expect(strstr(rs_client_lasterror(c), "tv_nsec") != NULL, "message: %s",
              rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_fence(m), 0, "a fence without a hold");
    cr_expect_eq(rs_mutex_fence(NULL), 0);
    cr_expect_eq(rs_mutex_remaining(NULL), 0);
    cr_expect_eq(rs_mutex_destroy(NULL), 0);
    cr_expect_eq(rs_client_close(NULL), 0);
    cr_expect_str_eq(rs_client_id(NULL), "");

    cr_expect_eq(rs_mutex_setlease(NULL, 0), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, -1), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, 10), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, 29), EINVAL);
    cr_expect_eq(rs_mutex_setlease(m, 0), 0);
    cr_expect_eq(rs_mutex_setlease(m, 30), 0);
    cr_expect_eq(rs_mutex_setlease(m, 500), 0);
    cr_expect_eq(rs_mutex_setlease(m, 5000), 0);
    /* the handle's lease is used (the client's is 30 s) */
    cr_assert_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    long left = rs_mutex_remaining(m);
    cr_expect(left > 0 && left <= 5000, "remaining %ld with a 5000 ms lease", left);
    cr_expect_gt(rs_mutex_fence(m), 0);
    cr_expect_eq(rs_mutex_destroy(m), EBUSY, "destroy while held");
    cr_expect_eq(rs_mutex_unlock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), EPERM);
    cr_expect_eq(rs_mutex_destroy(m), 0);

    cr_assert_eq(rs_client_close(c), 0);
    ts_server_stop(&s);
}

struct odd_name {
    const char *label;
    char name[RS_NAME_MAX + 1];
    size_t len;
};

static void odd_names(struct odd_name *out, int *n)
{
    static const char *const plain[][2] = {
        {"quotes", "it's \"quoted\" 'x'"},
        {"lua-injection", "x') redis.call('FLUSHALL') --"},
        {"lua-long-string", "x]] redis.call('FLUSHALL') --[["},
        {"spaces", "with spaces and\ttabs\nand a newline"},
        {"braces", "{a}}b"},
        {"leading-close-brace", "}x"},
        {"escaped-close-brace", "\\}x"},
        {"leading-backslash", "\\x"},
        {"lone-close-brace", "}"},
        {"lone-open-brace", "{"},
        {"empty-tag", "{}"},
        {"format", "%s%n%x%p"},
        {"key-like", "rs:{x}:mutex"},
    };
    int k = 0;
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++, k++) {
        out[k].label = plain[i][0];
        out[k].len = strlen(plain[i][1]);
        memcpy(out[k].name, plain[i][1], out[k].len + 1);
    }
    out[k].label = "bytes-1-255";
    for (int b = 1; b <= 255; b++)
        out[k].name[b - 1] = (char)b;
    out[k].name[255] = '\0';
    out[k].len = 255;
    k++;
    out[k].label = "bytes-255-1";
    for (int b = 255; b >= 1; b--)
        out[k].name[255 - b] = (char)b;
    out[k].name[255] = '\0';
    out[k].len = 255;
    k++;
    out[k].label = "512-close-braces";
    memset(out[k].name, '}', RS_NAME_MAX);
    out[k].name[RS_NAME_MAX] = '\0';
    out[k].len = RS_NAME_MAX;
    k++;
    *n = k;
}

Test(client, mutex_names_of_any_bytes)
{
    ts_server_t s;
    tu_start_server(&s);
    cr_assert_eq(raw_ok(&s, "SET canary 1"), 0);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    static struct odd_name names[24];
    int n;
    odd_names(names, &n);
    char key[RS_NAME_MAX + 64];
    for (int i = 0; i < n; i++) {
        const struct odd_name *on = &names[i];
        rs_mutex_t *ma = mutex_ok(a, on->name), *mb = mutex_ok(b, on->name);
        cr_assert_eq(rs_mutex_lock(ma), 0, "[%s] lock: %s", on->label, rs_client_lasterror(a));
        cr_expect_eq(rs_mutex_trylock(mb), EBUSY, "[%s] another client got it too", on->label);

        keylist_t kl;
        cr_assert_eq(list_keys(&s, "canary", &kl), 0);
        size_t klen = mutex_key("rs", on->name, on->len, key, sizeof key);
        cr_expect(keylist_has(&kl, key, klen), "[%s] no key %s", on->label, key);
        cr_expect_eq(kl.n, 2, "[%s] %d keys, want 2 (lock and fence)", on->label, kl.n);
        expect_one_slot(&kl, on->label);
        keylist_free(&kl);

        cr_expect_eq(rs_mutex_unlock(ma), 0, "[%s] unlock: %s", on->label, rs_client_lasterror(a));
        cr_expect_eq(rs_mutex_trylock(mb), 0, "[%s] trylock after unlock: %s", on->label,
                     rs_client_lasterror(b));
        cr_expect_eq(rs_mutex_unlock(mb), 0, "[%s] second unlock", on->label);
        cr_expect_eq(ts_cmd_int(&s, "EXISTS canary"), 1, "[%s] the canary key is gone", on->label);
        rs_mutex_destroy(ma);
        rs_mutex_destroy(mb);
        cr_assert_eq(raw_ok(&s, "FLUSHDB"), 0);
        cr_assert_eq(raw_ok(&s, "SET canary 1"), 0);
    }

    /* "}x" and "\}x" are two mutexes: both held at once, by different clients */
    rs_mutex_t *m1 = mutex_ok(a, "}x"), *m2 = mutex_ok(b, "\\}x"), *m1b = mutex_ok(b, "}x");
    cr_expect_eq(rs_mutex_lock(m1), 0);
    cr_expect_eq(rs_mutex_trylock(m2), 0, "\\}x is busy while }x is held: %s",
                 rs_client_lasterror(b));
    cr_expect_eq(rs_mutex_trylock(m1b), EBUSY);
    cr_expect_eq(raw_exists(&s, 0, "rs:{\\}x}:mutex", 14), 1);
    cr_expect_eq(raw_exists(&s, 0, "rs:{\\\\}x}:mutex", 15), 1);
    cr_expect_eq(rs_mutex_unlock(m1), 0);
    cr_expect_eq(rs_mutex_unlock(m2), 0);
    rs_mutex_destroy(m1);
    rs_mutex_destroy(m2);
    rs_mutex_destroy(m1b);

    cr_assert_eq(rs_client_close(a), 0);
    cr_assert_eq(rs_client_close(b), 0);
    ts_server_stop(&s);
}

/* With a waiter queued, all four keys of a name (lock, fence, queue, queue info) exist: they
 * must share one slot. */
Test(client, mutex_keys_share_one_slot_with_waiters)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    static struct odd_name names[24];
    int n;
    odd_names(names, &n);
    static const char *const pick[] = {"leading-close-brace", "braces", "lone-close-brace",
                                       "bytes-1-255", "512-close-braces", "lua-injection"};
    for (size_t p = 0; p < sizeof pick / sizeof pick[0]; p++) {
        const struct odd_name *on = NULL;
        for (int i = 0; i < n; i++)
            if (strcmp(names[i].label, pick[p]) == 0)
                on = &names[i];
        cr_assert_not_null(on);
        rs_mutex_t *ma = mutex_ok(a, on->name), *mb = mutex_ok(b, on->name);
        cr_assert_eq(rs_mutex_lock(ma), 0, "[%s] %s", on->label, rs_client_lasterror(a));
        struct lock_job j = {mb, -1, -1, 1, 0};
        pthread_t t;
        pthread_create(&t, NULL, lock_thread, &j);
        int nk = wait_keys(&s, 4, 5000);
        keylist_t kl;
        cr_assert_eq(list_keys(&s, NULL, &kl), 0);
        cr_expect_eq(nk, 4, "[%s] %d keys with a waiter, want 4", on->label, nk);
        expect_one_slot(&kl, on->label);
        keylist_free(&kl);
        cr_expect_eq(rs_mutex_unlock(ma), 0);
        pthread_join(t, NULL);
        cr_expect_eq(j.rc, 0, "[%s] waiter's lock = %d", on->label, j.rc);
        cr_expect_eq(j.unlock_rc, 0, "[%s] waiter's unlock = %d", on->label, j.unlock_rc);
        rs_mutex_destroy(ma);
        rs_mutex_destroy(mb);
        cr_assert_eq(raw_ok(&s, "FLUSHDB"), 0);
    }
    cr_assert_eq(rs_client_close(a), 0);
    cr_assert_eq(rs_client_close(b), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 9. fork
 * ------------------------------------------------------------------------------------- */

Test(client, fork_child_gets_efork)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_ok(s.url, 2000, 0);
    rs_mutex_t *m = mutex_ok(c, "forked"), *other = mutex_ok(c, "other");
    cr_assert_eq(rs_mutex_lock(m), 0); /* the parent holds "forked" across the fork */
    cr_assert_eq(rs_mutex_lock(other), 0);
    cr_assert_eq(rs_mutex_unlock(other), 0);

    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        struct timespec ts = tu_abs_in(200);
        rs_mutex_t *m2 = (rs_mutex_t *)&ts;
        if (rs_mutex_lock(other) != RS_EFORK)
            bad |= 1;
        if (rs_mutex_init(&m2, c, "child") != RS_EFORK || m2 != NULL)
            bad |= 2;
        if (rs_mutex_unlock(m) != RS_EFORK)
            bad |= 4;
        if (rs_mutex_trylock(other) != RS_EFORK)
            bad |= 8;
        if (rs_mutex_timedlock(other, &ts) != RS_EFORK)
            bad |= 16;
        if (strstr(rs_client_lasterror(c), "fork") == NULL)
            bad |= 32;
        if (rs_client_close(c) != 0)
            bad |= 64;
        _exit(bad);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    cr_assert(WIFEXITED(st), "child did not exit normally (status %#x)", st);
    int bad = WEXITSTATUS(st);
    cr_expect_eq(bad & 1, 0, "child: lock != RS_EFORK");
    cr_expect_eq(bad & 2, 0, "child: init != RS_EFORK or handle not NULL");
    cr_expect_eq(bad & 4, 0, "child: unlock of the parent's hold != RS_EFORK");
    cr_expect_eq(bad & 8, 0, "child: trylock != RS_EFORK");
    cr_expect_eq(bad & 16, 0, "child: timedlock != RS_EFORK");
    cr_expect_eq(bad & 32, 0, "child: lasterror does not mention fork");
    cr_expect_eq(bad & 64, 0, "child: rs_client_close != 0");

    /* the child's close released nothing of the parent's: the hold is still there */
    rs_client_t *c2 = open_ok(s.url, 2000, 0);
    rs_mutex_t *m2 = mutex_ok(c2, "forked");
    cr_expect_eq(rs_mutex_trylock(m2), EBUSY, "the parent's hold was released by the child");
    /* and the parent's client still works */
    cr_expect_eq(rs_mutex_unlock(m), 0, "parent unlock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_lock(other), 0, "parent lock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(other), 0);
    cr_expect_eq(rs_mutex_lock(m), 0, "parent lock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0);
    rs_mutex_destroy(m2);
    rs_client_close(c2);
    rs_mutex_destroy(m);
    rs_mutex_destroy(other);
    cr_assert_eq(rs_client_close(c), 0);
    ts_server_stop(&s);
}

/* ---------------------------------------------------------------------------------------
 * 10. Close
 * ------------------------------------------------------------------------------------- */

Test(client, close_cancels_blocked_calls)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    rs_mutex_t *ma = mutex_ok(a, "x"), *mb = mutex_ok(b, "x"), *idle = mutex_ok(b, "idle");
    cr_assert_eq(rs_mutex_lock(ma), 0);

    struct lock_job j = {mb, -1, -1, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, lock_thread, &j);
    cr_assert(tu_wait_zcard(&s, "mutex", "x", 1, 5000), "the waiter never queued");
    tu_sleep_ms(50); /* let it settle into its sleep */

    long long t0 = tu_mono_ms();
    cr_expect_eq(rs_client_close(b), 0);
    long long closed = tu_mono_ms();
    pthread_join(t, NULL);
    cr_expect_eq(j.rc, ECANCELED, "blocked lock returned %d (%s)", j.rc, rs_strerror(j.rc));
    cr_expect_lt(j.done_ms - t0, 2000 + 2000, "the blocked lock took %lld ms to return",
                 j.done_ms - t0);
    cr_expect_lt(closed - t0, 2000 + 2000, "close took %lld ms", closed - t0);

    /* handles of the closed client: calls return ECANCELED, destroy works */
    struct timespec ts = tu_abs_in(100);
    cr_expect_eq(rs_mutex_lock(idle), ECANCELED);
    cr_expect_eq(rs_mutex_trylock(idle), ECANCELED);
    cr_expect_eq(rs_mutex_timedlock(idle, &ts), ECANCELED);
    cr_expect_eq(rs_mutex_unlock(idle), ECANCELED);
    cr_expect_eq(rs_mutex_destroy(idle), 0);
    cr_expect_eq(rs_mutex_destroy(mb), 0);

    /* the closed client left the queue: when A unlocks, nobody dead gets the mutex */
    cr_expect(tu_wait_zcard(&s, "mutex", "x", 0, 3000), "the closed client is still queued");
    cr_expect_eq(rs_mutex_unlock(ma), 0);
    rs_client_t *c = open_ok(s.url, 2000, 0);
    rs_mutex_t *mc = mutex_ok(c, "x");
    cr_expect_eq(rs_mutex_trylock(mc), 0, "after A's unlock: %s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(mc), 0);
    rs_mutex_destroy(mc);
    rs_mutex_destroy(ma);
    rs_client_close(c);
    cr_assert_eq(rs_client_close(a), 0);
    ts_server_stop(&s);
}

struct hold_job {
    rs_mutex_t *m;
    int rc;
};

static void *hold_thread(void *p)
{
    struct hold_job *j = p;
    j->rc = rs_mutex_lock(j->m); /* and the thread ends holding it */
    return NULL;
}

Test(client, close_releases_holds)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    rs_mutex_t *ax = mutex_ok(a, "x"), *ay = mutex_ok(a, "y");
    cr_assert_eq(rs_mutex_lock(ax), 0);
    struct hold_job hj = {ay, -1};
    pthread_t t;
    pthread_create(&t, NULL, hold_thread, &hj);
    pthread_join(t, NULL);
    cr_assert_eq(hj.rc, 0, "%s", rs_client_lasterror(a));

    rs_mutex_t *bx = mutex_ok(b, "x"), *by = mutex_ok(b, "y");
    cr_assert_eq(rs_mutex_trylock(bx), EBUSY);
    cr_assert_eq(rs_mutex_trylock(by), EBUSY);

    cr_expect_eq(rs_client_close(a), 0);
    /* the lease is 30 s: only close can have freed them */
    cr_expect_eq(rs_mutex_trylock(bx), 0, "x still held after its owner's close: %s",
                 rs_client_lasterror(b));
    cr_expect_eq(rs_mutex_trylock(by), 0, "y still held after its owner's close: %s",
                 rs_client_lasterror(b));
    cr_expect_eq(rs_mutex_destroy(ax), 0, "destroy of a holding handle after close");
    cr_expect_eq(rs_mutex_destroy(ay), 0);
    cr_expect_eq(rs_mutex_unlock(bx), 0);
    cr_expect_eq(rs_mutex_unlock(by), 0);
    rs_mutex_destroy(bx);
    rs_mutex_destroy(by);
    cr_assert_eq(rs_client_close(b), 0);
    ts_server_stop(&s);
}

Test(client, client_id)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *a = open_ok(s.url, 2000, 0), *b = open_ok(s.url, 2000, 0);
    const char *ia = rs_client_id(a), *ib = rs_client_id(b);
    cr_assert_not_null(ia);
    cr_expect_eq(strlen(ia), 16, "id \"%s\"", ia);
    cr_expect_eq(strspn(ia, "0123456789abcdefABCDEF"), 16, "id \"%s\" is not hex", ia);
    cr_expect_str_neq(ia, ib, "two clients share an id");
    rs_client_close(a);
    rs_client_close(b);
    ts_server_stop(&s);
}

