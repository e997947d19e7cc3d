/*
 * migrate_once.c - a deploy's schema migration, run by exactly one of the instances that
 * start at once (rs_once_t, the fleet-wide pthread_once).
 *
 *   build/examples/migrate_once [URL]   (URL: argv[1], else $REDISYNC_URL, else
 *                                        redis://127.0.0.1:6379)
 *
 * Several instances of a service start at the same instant, each needing the schema
 * migrated before it serves. Each calls rs_once_run(once, migrate, ...): the first to get
 * there runs migrate() (holding the once's run hold, fenced, renewed by the watchdog); the
 * others sleep, without polling, until it has succeeded, and return 0 without running it.
 * If migrate() fails (the first attempt here fails on purpose: "the database was not ready")
 * its error goes to its own caller, and the next waiting instance runs it; had the runner
 * died, the next would have run it once the runner's lease ran out. The success is
 * remembered (30 days after its last use), so an instance started later goes straight on.
 *
 * The example forks NPROC instances, checks that the migration ran to success exactly once,
 * that no instance went on before it had succeeded, and that a late instance does not run
 * it again. Exits 0 when so.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <redisync.h>

#define NPROC 5          /* instances started at once */
#define MIGRATE_MS 300   /* how long the migration takes */

/* State shared with the children (a stand-in for "the database"). */
struct shared {
    atomic_int attempts;     /* migrate() calls */
    atomic_int migrated;     /* successful migrations */
    atomic_int running;      /* migrate() calls in progress */
    atomic_int overlap;      /* set if two ran at once */
    atomic_int early;        /* an instance went on before the schema was migrated */
    atomic_int served;       /* instances that went on to serve */
};

static struct shared *sh;
static const char *url;
static char once_name[64];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* fn of rs_once_run: the migration. 0 on success; the first attempt fails. */
static int migrate(void *arg, uint64_t fence)
{
    int id = *(int *)arg;
    if (atomic_fetch_add(&sh->running, 1) != 0)
        atomic_store(&sh->overlap, 1);
    int attempt = atomic_fetch_add(&sh->attempts, 1) + 1;
    printf("migrate_once:   instance %d migrates (attempt %d, fencing token %llu)\n", id,
           attempt, (unsigned long long)fence);
    fflush(stdout);
    sleep_ms(MIGRATE_MS); /* the database would refuse writes carrying a lower token */
    atomic_fetch_sub(&sh->running, 1);
    if (attempt == 1) {
        printf("migrate_once:   instance %d: the database was not ready; the next one "
               "retries\n", id);
        fflush(stdout);
        return 42;
    }
    atomic_fetch_add(&sh->migrated, 1);
    return 0;
}

/* One instance: migrate (or wait for it), then serve. Exit status: 0, or 1 on an error. */
static int instance(int id, int go_fd)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *client;
    if (rs_client_open(&client, &cfg) != 0) {
        fprintf(stderr, "migrate_once: %s\n", rs_client_lasterror(NULL));
        return 1;
    }
    rs_once_t *once;
    if (rs_once_init(&once, client, once_name) != 0) {
        fprintf(stderr, "migrate_once: %s\n", rs_client_lasterror(client));
        rs_client_close(client);
        return 1;
    }
    if (go_fd >= 0) {
        char c;
        while (read(go_fd, &c, 1) < 0 && errno == EINTR) { /* all start together */
        }
    }
    int rc;
    /* a failed migration is handed to the next instance; this one tries again after it */
    while ((rc = rs_once_run(once, migrate, &id)) == 42) {
    }
    if (rc != 0) {
        fprintf(stderr, "migrate_once: instance %d: %s\n", id, rs_client_lasterror(client));
    } else {
        if (atomic_load(&sh->migrated) != 1)
            atomic_store(&sh->early, 1);
        atomic_fetch_add(&sh->served, 1);
    }
    rs_once_destroy(once);
    rs_client_close(client);
    return rc != 0;
}

static pid_t start(int id, int go_fd, int close_fd)
{
    pid_t p = fork();
    if (p == 0) {
        if (close_fd >= 0)
            close(close_fd);
        _exit(instance(id, go_fd));
    }
    return p;
}

static int reap(pid_t p)
{
    int st;
    while (waitpid(p, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : NULL;
    snprintf(once_name, sizeof once_name, "examples:migrate:%ld", (long)getpid());
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("migrate_once: mmap");
        return 1;
    }
    memset(sh, 0, sizeof *sh);

    printf("migrate_once: %d instances start at once\n", NPROC);
    fflush(stdout);
    int go[2];
    if (pipe(go) != 0) {
        perror("migrate_once: pipe");
        return 1;
    }
    pid_t kids[NPROC];
    for (int i = 0; i < NPROC; i++)
        if ((kids[i] = start(i, go[0], go[1])) < 0) {
            perror("migrate_once: fork");
            return 1;
        }
    close(go[0]);
    sleep_ms(200); /* let them connect */
    close(go[1]);  /* go */
    int failed = 0;
    for (int i = 0; i < NPROC; i++)
        failed |= reap(kids[i]) != 0;

    printf("migrate_once: a late instance starts\n");
    fflush(stdout);
    pid_t late = start(NPROC, -1, -1);
    failed |= late < 0 || reap(late) != 0;

    int attempts = atomic_load(&sh->attempts), migrated = atomic_load(&sh->migrated);
    printf("migrate_once: %d attempts, %d successful migration, %d instances served\n",
           attempts, migrated, atomic_load(&sh->served));
    int ok = !failed && attempts == 2 && migrated == 1 && !atomic_load(&sh->overlap) &&
             !atomic_load(&sh->early) && atomic_load(&sh->served) == NPROC + 1;
    if (!ok)
        fprintf(stderr, "migrate_once: FAILED (want 2 attempts, 1 migration, no overlap, "
                        "nobody early, %d served)\n", NPROC + 1);
    else
        printf("migrate_once: ok: migrated exactly once; everyone went on after it\n");

    /* operators' reset, so that a rerun of the example starts afresh (the name is per pid) */
    rs_client_t *c;
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    if (rs_client_open(&c, &cfg) == 0) {
        rs_once_t *once;
        if (rs_once_init(&once, c, once_name) == 0) {
            rs_once_reset(once);
            rs_once_destroy(once);
        }
        rs_client_close(c);
    }
    return ok ? 0 : 1;
}
