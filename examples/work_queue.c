/*
 * work_queue.c - a bounded work queue shared by producer and consumer processes, under one
 * distributed mutex and two condition variables ("not full", "not empty").
 *
 *   build/examples/work_queue [URL]    (URL: argv[1], else $REDISYNC_URL, else
 *                                       redis://127.0.0.1:6379)
 *
 * Two producers put 30 items each into a queue of 4 slots; three consumers take them out.
 * It is the textbook pthread program, with the pthread calls swapped for their redisync
 * counterparts, so the processes could as well run on different machines:
 *
 *     rs_mutex_lock(m);                          pthread_mutex_lock
 *     while (q->count == SLOTS)
 *         rs_cond_wait(not_full, m);             pthread_cond_wait: releases m, sleeps,
 *     put(q, item);                              and holds m again when it returns
 *     rs_cond_signal(not_empty);                 pthread_cond_signal: wakes one consumer
 *     rs_mutex_unlock(m);
 *
 * The queue itself (the shared state the mutex guards) is a block of shared memory here; in
 * a real deployment it would be a table, a file on shared storage, or Redis keys, and each
 * holder would fence its writes with rs_mutex_fence(m). When the producers are done, the
 * last one sets "closed" and broadcasts "not empty", so every waiting consumer wakes, finds
 * the queue empty and closed, and ends. The example exits 0 when every item was consumed
 * exactly once and the queue never held more than its 4 slots.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <redisync.h>

#define PRODUCERS 2
#define CONSUMERS 3
#define PER_PRODUCER 30
#define ITEMS (PRODUCERS * PER_PRODUCER)
#define SLOTS 4

struct shared {
    /* the queue, guarded by the distributed mutex */
    int slot[SLOTS];
    int head, count;
    int producers_left;
    int max_count;
    /* the verdict */
    atomic_int consumed[ITEMS];
    atomic_int errors;
};

static struct shared *q;
static const char *url;
static char names[3][64]; /* the mutex and the two conditions, unique per run */

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

typedef struct party {
    rs_client_t *c;
    rs_mutex_t *m;
    rs_cond_t *not_full, *not_empty;
} party_t;

static int attach(party_t *p, const char *who)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    memset(p, 0, sizeof *p);
    if (rs_client_open(&p->c, &cfg) != 0) {
        fprintf(stderr, "work_queue: %s: %s\n", who, rs_client_lasterror(NULL));
        return -1;
    }
    if (rs_mutex_init(&p->m, p->c, names[0]) || rs_cond_init(&p->not_full, p->c, names[1]) ||
        rs_cond_init(&p->not_empty, p->c, names[2])) {
        fprintf(stderr, "work_queue: %s: init: %s\n", who, rs_client_lasterror(p->c));
        return -1;
    }
    return 0;
}

static void detach(party_t *p)
{
    rs_cond_destroy(p->not_full);
    rs_cond_destroy(p->not_empty);
    rs_mutex_destroy(p->m);
    rs_client_close(p->c);
}

static int check(party_t *p, int rc, const char *what)
{
    if (rc == 0)
        return 0;
    fprintf(stderr, "work_queue: %s: %s (%s)\n", what, rs_strerror(rc),
            rs_client_lasterror(p->c));
    atomic_fetch_add(&q->errors, 1);
    return -1;
}

static int producer(int id)
{
    party_t p;
    if (attach(&p, "producer"))
        return 1;
    int bad = 0;
    for (int i = 0; i < PER_PRODUCER && !bad; i++) {
        int item = id * PER_PRODUCER + i;
        if (check(&p, rs_mutex_lock(p.m), "lock"))
            return 1;
        while (q->count == SLOTS && !bad)
            bad = check(&p, rs_cond_wait(p.not_full, p.m), "wait (not full)");
        if (!bad) {
            q->slot[(q->head + q->count) % SLOTS] = item;
            q->count++;
            if (q->count > q->max_count)
                q->max_count = q->count;
            bad = check(&p, rs_cond_signal(p.not_empty), "signal");
        }
        rs_mutex_unlock(p.m);
    }
    /* the last producer closes the queue and wakes every consumer that waits */
    if (check(&p, rs_mutex_lock(p.m), "lock"))
        return 1;
    if (--q->producers_left == 0)
        bad |= check(&p, rs_cond_broadcast(p.not_empty), "broadcast");
    rs_mutex_unlock(p.m);
    printf("work_queue: producer %d put %d items\n", id, PER_PRODUCER);
    fflush(stdout);
    detach(&p);
    return bad != 0;
}

static int consumer(int id)
{
    party_t p;
    if (attach(&p, "consumer"))
        return 1;
    int taken = 0, bad = 0;
    for (;;) {
        if (check(&p, rs_mutex_lock(p.m), "lock"))
            return 1;
        while (q->count == 0 && q->producers_left > 0 && !bad)
            bad = check(&p, rs_cond_wait(p.not_empty, p.m), "wait (not empty)");
        if (bad || q->count == 0) { /* closed and drained */
            rs_mutex_unlock(p.m);
            break;
        }
        int item = q->slot[q->head];
        q->head = (q->head + 1) % SLOTS;
        q->count--;
        bad = check(&p, rs_cond_signal(p.not_full), "signal");
        rs_mutex_unlock(p.m);
        atomic_fetch_add(&q->consumed[item], 1);
        taken++;
        sleep_ms(2 + item % 5); /* the work itself, outside the mutex */
    }
    printf("work_queue: consumer %d took %d items\n", id, taken);
    fflush(stdout);
    detach(&p);
    return bad != 0;
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : NULL;
    snprintf(names[0], sizeof names[0], "examples:queue:%ld", (long)getpid());
    snprintf(names[1], sizeof names[1], "examples:queue:%ld:notfull", (long)getpid());
    snprintf(names[2], sizeof names[2], "examples:queue:%ld:notempty", (long)getpid());

    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *probe;
    if (rs_client_open(&probe, &cfg) != 0) {
        fprintf(stderr, "work_queue: %s\n", rs_client_lasterror(NULL));
        return 1;
    }
    rs_client_close(probe);

    q = mmap(NULL, sizeof *q, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) {
        perror("work_queue: mmap");
        return 1;
    }
    memset(q, 0, sizeof *q);
    q->producers_left = PRODUCERS;

    printf("work_queue: %d producers x %d items, %d consumers, %d slots: rs_mutex_t \"%s\", "
           "rs_cond_t \"%s\" and \"%s\"\n",
           PRODUCERS, PER_PRODUCER, CONSUMERS, SLOTS, names[0], names[1], names[2]);
    fflush(stdout);
    pid_t kids[PRODUCERS + CONSUMERS];
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) {
        kids[i] = fork();
        if (kids[i] < 0) {
            perror("work_queue: fork");
            return 1;
        }
        if (kids[i] == 0)
            _exit(i < CONSUMERS ? consumer(i) : producer(i - CONSUMERS));
    }
    int failed = 0;
    for (int i = 0; i < PRODUCERS + CONSUMERS; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    int once = 0, twice = 0, never = 0;
    for (int i = 0; i < ITEMS; i++) {
        int n = atomic_load(&q->consumed[i]);
        once += n == 1, twice += n > 1, never += n == 0;
    }
    printf("work_queue: %d of %d items consumed exactly once (%d twice or more, %d never); "
           "at most %d of %d slots used\n",
           once, ITEMS, twice, never, q->max_count, SLOTS);
    if (failed || once != ITEMS || q->max_count > SLOTS || atomic_load(&q->errors)) {
        printf("work_queue: FAILED\n");
        return 1;
    }
    printf("work_queue: ok: every item consumed exactly once\n");
    return 0;
}
