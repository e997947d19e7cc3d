/*
 * semaphore.c - limiting concurrency across processes with a semaphore of leased permits.
 *
 *   build/examples/semaphore [URL]     (URL: argv[1], else $REDISYNC_URL, else
 *                                       redis://127.0.0.1:6379)
 *
 * Six jobs want to use a service that accepts only two clients at a time (a licence, a
 * rate-limited API, a database that falls over beyond N heavy queries). Each job takes a
 * permit of the semaphore "examples:service:PID" (created with 2 permits by whoever comes first),
 * uses the service, and gives the permit back:
 *
 *     rs_sem_init(&s, client, name, 2);   like sem_init(&s, 1, 2), but across machines
 *     rs_sem_wait(s);                     like sem_wait
 *     ... use the service ...
 *     rs_sem_post(s);                     like sem_post (only the thread that took it)
 *
 * A permit is a lease: if a job crashes while holding one, the permit comes back when its
 * lease runs out, instead of being lost for good as with a plain counter. The example
 * measures how many jobs were inside at once and exits 0 when it was never more than 2
 * and every job got its turn.
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

#define NJOBS 6
#define PERMITS 2
#define WORK_MS 250

struct shared {
    atomic_int inside;     /* jobs using the service now */
    atomic_int max_inside; /* the most at once */
    atomic_int done;
};

static struct shared *sh;
static const char *url;
static char sem_name[64];
static struct timespec t0;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static double elapsed(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9;
}

static int job(int id)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *client;
    if (rs_client_open(&client, &cfg) != 0) {
        fprintf(stderr, "semaphore: job %d: %s\n", id, rs_client_lasterror(NULL));
        return 1;
    }
    rs_sem_t *s;
    int rc = rs_sem_init(&s, client, sem_name, PERMITS);
    if (rc) {
        fprintf(stderr, "semaphore: job %d: init: %s\n", id, rs_client_lasterror(client));
        rs_client_close(client);
        return 1;
    }
    rc = rs_sem_wait(s);
    if (rc) {
        fprintf(stderr, "semaphore: job %d: wait: %s\n", id, rs_strerror(rc));
        rs_sem_destroy(s);
        rs_client_close(client);
        return 1;
    }
    int now = atomic_fetch_add(&sh->inside, 1) + 1;
    int seen = atomic_load(&sh->max_inside);
    while (now > seen && !atomic_compare_exchange_weak(&sh->max_inside, &seen, now)) {
    }
    printf("semaphore: %5.2f s  job %d in  (%d using the service)\n", elapsed(), id, now);
    fflush(stdout);
    sleep_ms(WORK_MS); /* use the service */
    atomic_fetch_sub(&sh->inside, 1);
    printf("semaphore: %5.2f s  job %d out\n", elapsed(), id);
    fflush(stdout);
    rc = rs_sem_post(s);
    if (rc)
        fprintf(stderr, "semaphore: job %d: post: %s\n", id, rs_strerror(rc));
    else
        atomic_fetch_add(&sh->done, 1);
    rs_sem_destroy(s);
    rs_client_close(client);
    return rc != 0;
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : NULL;
    snprintf(sem_name, sizeof sem_name, "examples:service:%ld", (long)getpid());

    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *probe;
    if (rs_client_open(&probe, &cfg) != 0) {
        fprintf(stderr, "semaphore: %s\n", rs_client_lasterror(NULL));
        return 1;
    }
    rs_client_close(probe);

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("semaphore: mmap");
        return 1;
    }
    memset(sh, 0, sizeof *sh);

    printf("semaphore: %d jobs, a service that takes %d at a time: rs_sem_t \"%s\" with %d "
           "permits\n",
           NJOBS, PERMITS, sem_name, PERMITS);
    fflush(stdout);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t kids[NJOBS];
    for (int i = 0; i < NJOBS; i++) {
        kids[i] = fork();
        if (kids[i] < 0) {
            perror("semaphore: fork");
            return 1;
        }
        if (kids[i] == 0)
            _exit(job(i));
    }
    int failed = 0;
    for (int i = 0; i < NJOBS; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    int max = atomic_load(&sh->max_inside), done = atomic_load(&sh->done);
    printf("semaphore: %d of %d jobs done in %.2f s; at most %d used the service at once\n",
           done, NJOBS, elapsed(), max);
    if (failed || done != NJOBS || max > PERMITS) {
        printf("semaphore: FAILED\n");
        return 1;
    }
    printf("semaphore: ok: never more than %d at once\n", PERMITS);
    return 0;
}
