/*
 * test_barrier.c - rs_barrier_t, the cyclic barrier across processes (issue 14), against a
 * real redis-server.
 *
 *   generations_across_processes  four processes, 30 generations: each generation has
 *                                 exactly one serial caller, and nobody passes a generation
 *                                 before every party has arrived at it
 *   timed_out_party_withdrawn     a party that times out is withdrawn: the generation then
 *                                 needs another arrival, and trips with it
 *   timeout_races_the_trip        many rounds of a timed wait whose deadline falls as the
 *                                 last party arrives: it never returns ETIMEDOUT once
 *                                 counted in a generation that tripped, and a generation
 *                                 never trips with a party that returned ETIMEDOUT
 *   one_call_per_party            three parties on three clients, 20 generations: the server
 *                                 counts one script call per party and one PUBLISH per
 *                                 generation, and no SUBSCRIBE after the first (issue 14's
 *                                 cost; the times are in `make bench-fanout`)
 *   bad_input                     NULLs, parties 0, another party count (EINVAL), a foreign
 *                                 key (RS_ESERVER), destroy while waiting (EBUSY)
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "redis_server.h"
#include "redisync.h"
#include "test_assert.h"
#include "test_util.h"

TestSuite(barrier, .timeout = 90);

#define NP 4
#define GENS 30

typedef struct shared {
    atomic_int arrived[GENS];  /* parties that reached generation g's wait */
    atomic_int passed[GENS];   /* parties that returned from it */
    atomic_int serial[GENS];
    atomic_int early;          /* a party returned before all had arrived */
    atomic_int errors;
} shared_t;

static int party(void *arg, const ts_server_t *s)
{
    shared_t *sh = arg;
    rs_client_t *c = tu_open_client_ex(s, 2000, 0, NULL);
    rs_barrier_t *b = NULL;
    if (!c || rs_barrier_init(&b, c, "phases", NP) != 0)
        return 2;
    for (int g = 0; g < GENS; g++) {
        atomic_fetch_add(&sh->arrived[g], 1);
        int rc = rs_barrier_wait(b);
        if (rc != 0 && rc != RS_BARRIER_SERIAL) {
            atomic_fetch_add(&sh->errors, 1);
            break;
        }
        if (atomic_load(&sh->arrived[g]) < NP)
            atomic_fetch_add(&sh->early, 1);
        if (rc == RS_BARRIER_SERIAL)
            atomic_fetch_add(&sh->serial[g], 1);
        atomic_fetch_add(&sh->passed[g], 1);
        usleep((useconds_t)(rand() % 3000));
    }
    rs_barrier_destroy(b);
    rs_client_close(c);
    return 0;
}

Test(barrier, generations_across_processes)
{
    ts_server_t s;
    tu_start_server(&s);
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                        -1, 0);
    cr_assert_neq(sh, MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    pid_t p[NP];
    for (int i = 0; i < NP; i++) {
        p[i] = fork();
        cr_assert_geq(p[i], 0);
        if (p[i] == 0) {
            srand((unsigned)getpid());
            _exit(party(sh, &s));
        }
    }
    for (int i = 0; i < NP; i++) {
        int st;
        cr_assert_eq(waitpid(p[i], &st, 0), p[i]);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "party %d failed", i);
    }
    cr_expect_eq(atomic_load(&sh->errors), 0);
    cr_expect_eq(atomic_load(&sh->early), 0, "a party passed before everyone arrived");
    for (int g = 0; g < GENS; g++) {
        cr_expect_eq(atomic_load(&sh->serial[g]), 1, "generation %d: %d serial callers", g,
                     atomic_load(&sh->serial[g]));
        cr_expect_eq(atomic_load(&sh->passed[g]), NP, "generation %d: %d passed", g,
                     atomic_load(&sh->passed[g]));
    }
    munmap(sh, sizeof *sh);
    ts_server_stop(&s);
}

typedef struct waiter {
    rs_barrier_t *b;
    long ms; /* 0: no deadline */
    int rc;
    atomic_int done;
} waiter_t;

static void *wait_main(void *arg)
{
    waiter_t *w = arg;
    if (w->ms) {
        struct timespec dl = tu_abs_in(w->ms);
        w->rc = rs_barrier_timedwait(w->b, &dl);
    } else {
        w->rc = rs_barrier_wait(w->b);
    }
    atomic_store(&w->done, 1);
    return NULL;
}

static rs_barrier_t *barrier_of(rs_client_t *c, const char *name, unsigned n)
{
    rs_barrier_t *b = NULL;
    cr_assert_eq(rs_barrier_init(&b, c, name, n), 0, "%s", rs_client_lasterror(c));
    return b;
}

#define CP 3
#define CGENS 20

static void *gens_main(void *arg)
{
    waiter_t *w = arg;
    for (int g = 0; g < CGENS && (w->rc == 0 || w->rc == RS_BARRIER_SERIAL); g++)
        w->rc = rs_barrier_wait(w->b);
    atomic_store(&w->done, 1);
    return NULL;
}

Test(barrier, one_call_per_party)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c[CP];
    waiter_t w[CP];
    pthread_t th[CP];
    for (int i = 0; i < CP; i++) {
        c[i] = tu_open_client(&s, 2000, 0, NULL);
        memset(&w[i], 0, sizeof w[i]);
        w[i].b = barrier_of(c[i], "cost", CP);
    }
    /* a first generation subscribes every client to the barrier's channel */
    for (int i = 0; i < CP; i++)
        pthread_create(&th[i], NULL, wait_main, &w[i]);
    for (int i = 0; i < CP; i++)
        pthread_join(th[i], NULL);
    long long e0 = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    long long p0 = ts_info_ll(&s, "commandstats", "cmdstat_publish", "calls");
    long long s0 = ts_info_ll(&s, "commandstats", "cmdstat_subscribe", "calls");
    for (int i = 0; i < CP; i++) {
        w[i].rc = 0;
        pthread_create(&th[i], NULL, gens_main, &w[i]);
    }
    for (int i = 0; i < CP; i++) {
        pthread_join(th[i], NULL);
        cr_expect(w[i].rc == 0 || w[i].rc == RS_BARRIER_SERIAL, "party %d: %d", i, w[i].rc);
    }
    long long e1 = ts_info_ll(&s, "commandstats", "cmdstat_evalsha", "calls");
    long long p1 = ts_info_ll(&s, "commandstats", "cmdstat_publish", "calls");
    long long s1 = ts_info_ll(&s, "commandstats", "cmdstat_subscribe", "calls");
    cr_expect_eq(e1 - e0, CP * CGENS, "%lld script calls for %d generations of %d parties",
                 e1 - e0, CGENS, CP);
    cr_expect_eq(p1 - p0, CGENS, "%lld PUBLISH for %d generations", p1 - p0, CGENS);
    cr_expect_eq(s1, s0, "%lld SUBSCRIBE during the generations", s1 - s0);
    for (int i = 0; i < CP; i++) {
        cr_expect_eq(rs_barrier_destroy(w[i].b), 0);
        rs_client_close(c[i]);
    }
    ts_server_stop(&s);
}

Test(barrier, timed_out_party_withdrawn)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c[3];
    rs_barrier_t *b[3];
    for (int i = 0; i < 3; i++) {
        c[i] = tu_open_client(&s, 2000, 0, NULL);
        b[i] = barrier_of(c[i], "w", 2);
    }
    long long tw0 = tu_mono_ms();
    struct timespec dl = tu_abs_in(200);
    cr_expect_eq(rs_barrier_timedwait(b[0], &dl), ETIMEDOUT, "alone: times out");
    long long tw1 = tu_mono_ms();
    /* how long it waited: from its start (after tw0; 100 ms spared) to its return */
    long waited = tu_waited_ms(rs_client_lasterror(c[0]));
    cr_expect(waited >= 100 && waited <= tw1 - tw0 + 1,
              "\"%s\": %ld ms of waiting, not 100 to %lld", rs_client_lasterror(c[0]), waited,
              tw1 - tw0 + 1);
    cr_expect_eq(ts_cmd_int(&s, "SCARD rs:{w}:barrier:in"), 0, "the arrival was not withdrawn");
    /* the withdrawn party does not count: one more arrival does not trip it */
    waiter_t w1 = {.b = b[1]};
    pthread_t t1;
    tu_thread_start(&t1, wait_main, &w1);
    tu_sleep_ms(200);
    cr_expect_eq(atomic_load(&w1.done), 0, "tripped with a withdrawn party");
    waiter_t w2 = {.b = b[2]};
    pthread_t t2;
    tu_thread_start(&t2, wait_main, &w2);
    cr_assert(tu_thread_join(t1, &w1.done, 10000));
    cr_assert(tu_thread_join(t2, &w2.done, 10000));
    cr_expect((w1.rc == RS_BARRIER_SERIAL) + (w2.rc == RS_BARRIER_SERIAL) == 1 &&
                  (w1.rc == 0 || w2.rc == 0),
              "rc %d and %d: one serial, one 0", w1.rc, w2.rc);
    for (int i = 0; i < 3; i++) {
        rs_barrier_destroy(b[i]);
        rs_client_close(c[i]);
    }
    ts_server_stop(&s);
}

Test(barrier, timeout_races_the_trip)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c1 = tu_open_client(&s, 2000, 0, NULL), *c2 = tu_open_client(&s, 2000, 0, NULL);
    rs_barrier_t *b1 = barrier_of(c1, "race", 2), *b2 = barrier_of(c2, "race", 2);
    int tripped_with_it = 0, timed_out = 0;
    for (int round = 0; round < 40; round++) {
        waiter_t w = {.b = b1, .ms = 30};
        pthread_t t;
        tu_thread_start(&t, wait_main, &w);
        tu_sleep_ms(20 + round % 20); /* around the other's deadline */
        struct timespec dl = tu_abs_in(60);
        int rc2 = rs_barrier_timedwait(b2, &dl);
        cr_assert(tu_thread_join(t, &w.done, 10000));
        if (w.rc == ETIMEDOUT) {
            timed_out++;
            /* the first party returned ETIMEDOUT: the generation must not have tripped with
             * it, so the second one cannot have passed with it */
            cr_expect_eq(rc2, ETIMEDOUT, "round %d: tripped with a party that timed out", round);
        } else {
            tripped_with_it++;
            cr_expect(w.rc == 0 || w.rc == RS_BARRIER_SERIAL, "round %d: rc %d", round, w.rc);
            cr_expect(rc2 == 0 || rc2 == RS_BARRIER_SERIAL, "round %d: the other's rc %d",
                      round, rc2);
            cr_expect((w.rc == RS_BARRIER_SERIAL) + (rc2 == RS_BARRIER_SERIAL) == 1,
                      "round %d: %d and %d", round, w.rc, rc2);
        }
        cr_expect_eq(ts_cmd_int(&s, "SCARD rs:{race}:barrier:in"), 0, "round %d: left arrived",
                     round);
    }
    cr_log_info("race: %d rounds tripped with the timed party, %d it timed out", tripped_with_it,
                timed_out);
    rs_barrier_destroy(b1);
    rs_barrier_destroy(b2);
    rs_client_close(c1);
    rs_client_close(c2);
    ts_server_stop(&s);
}

Test(barrier, bad_input)
{
    ts_server_t s;
    tu_start_server(&s);
    rs_client_t *c = tu_open_client(&s, 2000, 0, NULL);
    rs_barrier_t *b = NULL;
    cr_expect_eq(rs_barrier_init(NULL, c, "x", 2), EINVAL);
    cr_expect_eq(rs_barrier_init(&b, c, "x", 0), EINVAL);
    cr_expect_null(b);
    b = barrier_of(c, "x", 2);
    rs_barrier_t *b3 = NULL;
    cr_expect_eq(rs_barrier_init(&b3, c, "x", 3), EINVAL, "another party count");
    cr_expect(strstr(rs_client_lasterror(c), "2 parties") != NULL, "%s",
              rs_client_lasterror(c));
    cr_expect_null(b3);
    cr_expect_eq(rs_barrier_wait(NULL), EINVAL);
    cr_expect_eq(rs_barrier_timedwait(b, NULL), EINVAL);
    waiter_t w = {.b = b};
    pthread_t t;
    tu_thread_start(&t, wait_main, &w);
    tu_sleep_ms(100);
    cr_assert_eq(rs_barrier_destroy(b), EBUSY, "destroy while a wait is in progress");
    rs_barrier_t *b2 = barrier_of(c, "x", 2);
    int rc2 = rs_barrier_wait(b2); /* the second party trips it */
    cr_assert(tu_thread_join(t, &w.done, 10000));
    cr_expect((rc2 == RS_BARRIER_SERIAL) + (w.rc == RS_BARRIER_SERIAL) == 1 &&
                  (rc2 == 0 || w.rc == 0),
              "rc %d and %d: one serial, one 0", rc2, w.rc);
    cr_expect_eq(rs_barrier_destroy(b), 0);
    rs_barrier_destroy(b2);
    cr_assert_eq(ts_cmd_int(&s, "RPUSH rs:{foreign}:barrier x"), 1);
    rs_barrier_t *f = NULL;
    cr_expect_eq(rs_barrier_init(&f, c, "foreign", 2), RS_ESERVER);
    cr_expect(strstr(rs_client_lasterror(c), "WRONGTYPE") != NULL, "%s",
              rs_client_lasterror(c));
    rs_client_close(c);
    ts_server_stop(&s);
}
