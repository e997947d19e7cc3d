/*
 * latch.c - a batch job that waits on a countdown latch for its inputs.
 *
 *   build/examples/latch [URL]         (URL: argv[1], else $REDISYNC_URL, else
 *                                       redis://127.0.0.1:6379)
 *
 * A nightly batch merges the outputs of several preparation jobs that run elsewhere (other
 * processes here; other machines in real life) and finish in any order. The coordinator
 * arms a latch with the number of parts; each preparation job writes its part and counts
 * the latch down; the batch waits on the latch and starts merging the moment the last part
 * is there, without polling for files:
 *
 *     rs_latch_init(&l, client, name, NPARTS);   arms it (if it was never armed)
 *     rs_latch_count_down(l);                    one part done (each job)
 *     rs_latch_timedwait(l, &deadline);          the batch: returns when the count is 0
 *
 * An opened latch stays open: a batch that starts after the last part still goes straight
 * through. From a shell, `redisync latch NAME --down` / `--wait` do the same.
 * Exits 0 when the batch found every part when the latch let it through.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <redisync.h>

#define NPARTS 4

static const char *url;
static char latch_name[64];
static char dir[] = "/tmp/redisync-batch.XXXXXX";

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int open_latch(rs_client_t **client, rs_latch_t **l, unsigned count, const char *who)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    if (rs_client_open(client, &cfg) != 0) {
        fprintf(stderr, "latch: %s: %s\n", who, rs_client_lasterror(NULL));
        return 1;
    }
    if (rs_latch_init(l, *client, latch_name, count) != 0) {
        fprintf(stderr, "latch: %s: init: %s\n", who, rs_client_lasterror(*client));
        rs_client_close(*client);
        return 1;
    }
    return 0;
}

static void close_latch(rs_client_t *client, rs_latch_t *l)
{
    rs_latch_destroy(l);
    rs_client_close(client);
}

/* A preparation job: some work, its part on disk, one count down. */
static int prepare(int part)
{
    rs_client_t *client;
    rs_latch_t *l;
    if (open_latch(&client, &l, 0, "job")) /* 0: attach, the coordinator armed it */
        return 1;
    sleep_ms(100 + (part * 137) % 400); /* parts finish in any order */
    char path[128];
    snprintf(path, sizeof path, "%s/part%d", dir, part);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "part %d\n", part) < 0 || fclose(f) != 0) {
        fprintf(stderr, "latch: cannot write %s\n", path);
        close_latch(client, l);
        return 1;
    }
    int rc = rs_latch_count_down(l);
    unsigned left = 0;
    if (rc == 0)
        rc = rs_latch_getcount(l, &left);
    if (rc) {
        fprintf(stderr, "latch: job %d: %s\n", part, rs_strerror(rc));
    } else {
        printf("latch:   part %d written, counted down (%u to go)\n", part, left);
        fflush(stdout);
    }
    close_latch(client, l);
    return rc != 0;
}

/* The batch: waits for the latch, then merges. */
static int batch(void)
{
    rs_client_t *client;
    rs_latch_t *l;
    if (open_latch(&client, &l, 0, "batch"))
        return 1;
    printf("latch:   batch waits for the latch\n");
    fflush(stdout);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 60; /* a batch should not hang forever on a crashed job */
    int rc = rs_latch_timedwait(l, &deadline);
    close_latch(client, l);
    if (rc) {
        fprintf(stderr, "latch: batch: wait: %s\n", rs_strerror(rc));
        return 1;
    }
    int found = 0;
    for (int i = 0; i < NPARTS; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/part%d", dir, i);
        found += access(path, F_OK) == 0;
    }
    printf("latch:   batch let through: merging %d of %d parts\n", found, NPARTS);
    fflush(stdout);
    return found == NPARTS ? 0 : 1;
}

static pid_t start(int (*fn)(int), int arg)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(arg));
    return pid;
}

static int batch_fn(int unused)
{
    (void)unused;
    return batch();
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : NULL;
    snprintf(latch_name, sizeof latch_name, "examples:batch:%ld", (long)getpid());
    if (!mkdtemp(dir)) {
        perror("latch: mkdtemp");
        return 1;
    }

    /* the coordinator arms the latch before anyone counts down */
    rs_client_t *client;
    rs_latch_t *l;
    if (open_latch(&client, &l, NPARTS, "coordinator")) {
        rmdir(dir);
        return 1;
    }
    printf("latch: rs_latch_t \"%s\" armed with %d: the batch waits for %d parts\n", latch_name,
           NPARTS, NPARTS);

    pid_t b = start(batch_fn, 0);
    pid_t jobs[NPARTS];
    for (int i = 0; i < NPARTS; i++)
        jobs[i] = start(prepare, i);

    int failed = 0, st;
    for (int i = 0; i < NPARTS; i++) {
        waitpid(jobs[i], &st, 0);
        failed |= jobs[i] < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    waitpid(b, &st, 0);
    int batch_ok = b > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0;

    /* a latecomer goes straight through: an opened latch stays open */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int late = rs_latch_timedwait(l, &now);
    printf("latch: a late waiter %s\n", late == 0 ? "went straight through" : rs_strerror(late));
    close_latch(client, l);

    for (int i = 0; i < NPARTS; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/part%d", dir, i);
        unlink(path);
    }
    rmdir(dir);
    if (failed || !batch_ok || late != 0) {
        printf("latch: FAILED\n");
        return 1;
    }
    printf("latch: ok: the batch started once all %d parts were there\n", NPARTS);
    return 0;
}
