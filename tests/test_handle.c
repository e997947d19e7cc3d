/*
 * test_handle.c - Criterion tests of what every primitive handle shares (lib/handle.c): a
 * handle stores its name once, inside its main key PREFIX:{NAME}:KIND, and the other keys
 * are built for each call in rs_call_t. These tests check those keys against rs__key
 * (lib/keys.c, the one definition of key names) at the limits: the longest prefix, the
 * longest names, names that need the escape, every kind; and that messages still name the
 * primitive exactly.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "test_assert.h"

TestSuite(handle, .timeout = 60);

extern const rs_kind_t rs_kind_mutex, rs_kind_rmutex, rs_kind_rwlock, rs_kind_sem,
    rs_kind_latch;
static const rs_kind_t *const kinds[] = {&rs_kind_mutex, &rs_kind_rmutex, &rs_kind_rwlock,
                                         &rs_kind_sem, &rs_kind_latch};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static rs_client_t *open_with_prefix(const ts_server_t *s, const char *prefix)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = s->url;
    cfg.prefix = prefix;
    rs_client_t *c = NULL;
    cr_assert_eq(rs_client_open(&c, &cfg), 0, "open: %s", rs_client_lasterror(NULL));
    return c;
}

/* The keys a call through a handle of kind k named name sends, against rs__key. */
static void check_keys(rs_client_t *c, const rs_kind_t *k, const char *name, size_t len,
                       const char *label)
{
    rs_handle_t h;
    cr_assert_eq(rs__handle_init(&h, c, k->name, k->script, name, k->suffixes, k->nkeys), 0,
                 "[%s %s] init: %s", k->name, label, rs_client_lasterror(c));
    cr_expect_eq(h.namelen, len, "[%s %s] namelen", k->name, label);
    cr_expect_eq(memcmp(h.name, name, len), 0, "[%s %s] name", k->name, label);

    size_t mlen;
    char *main_key = rs__key(c, name, len, k->name, NULL, &mlen);
    cr_assert_not_null(main_key);
    cr_expect_eq(h.klen[0], mlen, "[%s %s] main key length", k->name, label);
    cr_expect_eq(memcmp(h.key[0], main_key, mlen + 1), 0, "[%s %s] main key", k->name, label);
    free(main_key);

    rs_call_t call;
    rs__call_init(&call, &h, NULL);
    /* a copy of the call must build the same argv (keys are kept as offsets) */
    rs_call_t *copy = malloc(sizeof call);
    cr_assert_not_null(copy);
    memcpy(copy, &call, sizeof call);
    memset(&call, 0x55, sizeof call);
    rs_argv_t v;
    rs__call_argv(copy, "acq", "q", &v);
    cr_assert_eq(v.n, k->nkeys + 8, "[%s %s] argc", k->name, label);
    for (int i = 0; i < k->nkeys; i++) {
        size_t kl;
        char *want = rs__key(c, name, len, k->name, i ? k->suffixes[i] : NULL, &kl);
        cr_assert_not_null(want);
        cr_expect_eq(v.len[i], kl, "[%s %s] key %d: length %zu, want %zu", k->name, label, i,
                     v.len[i], kl);
        cr_expect(v.len[i] == kl && memcmp(v.v[i], want, kl) == 0, "[%s %s] key %d differs",
                  k->name, label, i);
        cr_expect(v.v[i] < (const char *)copy || v.v[i] >= (const char *)(copy + 1) ||
                      v.v[i][v.len[i]] == '\0',
                  "[%s %s] key %d is not terminated", k->name, label, i);
        free(want);
    }
    cr_expect_eq(strcmp(v.v[k->nkeys], "acq"), 0, "[%s %s] op after the keys", k->name, label);
    free(copy);
    cr_expect_eq(rs__handle_destroy(&h), 0);
}

static void check_all(rs_client_t *c)
{
    static char names[6][RS_NAME_MAX + 1];
    static const char *labels[6] = {"short", "longest", "longest, leading }",
                                    "longest, leading \\", "lone }", "bytes 1-255"};
    size_t lens[6];
    snprintf(names[0], sizeof names[0], "x");
    memset(names[1], 'n', RS_NAME_MAX);
    memset(names[2], 'b', RS_NAME_MAX);
    names[2][0] = '}';
    memset(names[3], 'c', RS_NAME_MAX);
    names[3][0] = '\\';
    snprintf(names[4], sizeof names[4], "}");
    for (int b = 1; b <= 255; b++)
        names[5][b - 1] = (char)b;
    for (int i = 0; i < 6; i++)
        lens[i] = strlen(names[i]);
    cr_assert_eq(lens[1], RS_NAME_MAX);
    for (size_t k = 0; k < NKINDS; k++)
        for (int i = 0; i < 6; i++)
            check_keys(c, kinds[k], names[i], lens[i], labels[i]);
}

Test(handle, keys_per_call_match_rs_key_default_prefix)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = open_with_prefix(&s, NULL);
    check_all(c);
    rs_client_close(c);
    ts_server_stop(&s);
}

Test(handle, keys_per_call_match_rs_key_longest_prefix)
{
    ts_server_t s;
    tu_start_server(&s);
    char prefix[RS_PREFIX_MAX + 1];
    memset(prefix, 'p', RS_PREFIX_MAX);
    prefix[0] = 't'; /* the test servers' ACL user (make test-acl) may use prefixes t* */
    prefix[RS_PREFIX_MAX] = '\0';
    rs_client_t *c = open_with_prefix(&s, prefix);
    check_all(c);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* The longest names under the longest prefix, through the public calls: every key reaches
 * Redis whole (all of one name's keys hash alike, or the script would fail). */
Test(handle, longest_names_work_end_to_end)
{
    ts_server_t s;
    tu_start_server(&s);
    char prefix[RS_PREFIX_MAX + 1];
    memset(prefix, 'p', RS_PREFIX_MAX);
    prefix[0] = 't'; /* the test servers' ACL user (make test-acl) may use prefixes t* */
    prefix[RS_PREFIX_MAX] = '\0';
    rs_client_t *c = open_with_prefix(&s, prefix);
    char name[RS_NAME_MAX + 1];
    memset(name, 'n', RS_NAME_MAX);
    name[RS_NAME_MAX] = '\0';
    name[0] = '}';

    rs_mutex_t *m;
    cr_assert_eq(rs_mutex_init(&m, c, name), 0);
    cr_expect_eq(rs_mutex_lock(m), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_mutex_unlock(m), 0, "%s", rs_client_lasterror(c));
    rs_rwlock_t *rw;
    cr_assert_eq(rs_rwlock_init(&rw, c, name), 0);
    cr_expect_eq(rs_rwlock_rdlock(rw), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_rwlock_wrlock(rw), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_rwlock_unlock(rw), 0, "%s", rs_client_lasterror(c));
    rs_sem_t *sem;
    cr_assert_eq(rs_sem_init(&sem, c, name, 2), 0, "%s", rs_client_lasterror(c));
    cr_expect_eq(rs_sem_wait(sem), 0, "%s", rs_client_lasterror(c));
    int val = -1;
    cr_expect_eq(rs_sem_getvalue(sem, &val), 0);
    cr_expect_eq(val, 1);
    cr_expect_eq(rs_sem_post(sem), 0, "%s", rs_client_lasterror(c));
    rs_mutex_destroy(m);
    rs_rwlock_destroy(rw);
    rs_sem_destroy(sem);
    rs_client_close(c);
    ts_server_stop(&s);
}

/* The name lives inside the main key (not NUL-terminated there): messages print exactly it. */
Test(handle, messages_name_the_primitive_exactly)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 0, 0, NULL);
    static const char *const names[] = {"abc", "}x", "\\y"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\"%s\"", names[i]);
        rs_mutex_t *m;
        rs_rmutex_t *rm;
        rs_rwlock_t *rw;
        rs_sem_t *sem;
        cr_assert_eq(rs_mutex_init(&m, c, names[i]), 0);
        cr_assert_eq(rs_rmutex_init(&rm, c, names[i]), 0);
        cr_assert_eq(rs_rwlock_init(&rw, c, names[i]), 0);
        cr_assert_eq(rs_sem_init(&sem, c, names[i], 1), 0);
        cr_expect_eq(rs_mutex_unlock(m), EPERM);
        cr_expect_not_null(strstr(rs_client_lasterror(c), want), "mutex: %s",
                           rs_client_lasterror(c));
        cr_expect_eq(rs_rmutex_unlock(rm), EPERM);
        cr_expect_not_null(strstr(rs_client_lasterror(c), want), "rmutex: %s",
                           rs_client_lasterror(c));
        cr_expect_eq(rs_rwlock_unlock(rw), EPERM);
        cr_expect_not_null(strstr(rs_client_lasterror(c), want), "rwlock: %s",
                           rs_client_lasterror(c));
        cr_expect_eq(rs_sem_post(sem), EPERM);
        cr_expect_not_null(strstr(rs_client_lasterror(c), want), "sem: %s",
                           rs_client_lasterror(c));
        cr_expect_eq(rs_mutex_lock(m), 0);
        cr_expect_eq(rs_mutex_destroy(m), EBUSY);
        cr_expect_not_null(strstr(rs_client_lasterror(c), want), "destroy: %s",
                           rs_client_lasterror(c));
        cr_expect_eq(rs_mutex_unlock(m), 0);
        cr_expect_eq(rs_mutex_destroy(m), 0);
        rs_rmutex_destroy(rm);
        rs_rwlock_destroy(rw);
        rs_sem_destroy(sem);
    }
    rs_client_close(c);
    ts_server_stop(&s);
}
