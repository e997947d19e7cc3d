/*
 * cache_rebuild.c - a cache rebuilt under a read-write lock, without a stampede.
 *
 *   build/examples/cache_rebuild [URL]   (URL: argv[1], else $REDISYNC_URL, else
 *                                         redis://127.0.0.1:6379)
 *
 * Several processes serve requests from a cache file. While the cache is fresh they only
 * read it, all at once, under the read lock. When it is stale (missing, or older than the
 * data it was built from) rebuilding is expensive, and without coordination every process
 * that notices would rebuild it at the same time (a "cache stampede"). Here:
 *
 *   rdlock; fresh?  -> serve it; unlock                         (the common case)
 *   stale:  unlock; wrlock;                                     (one writer at a time; a
 *           still stale? -> rebuild                              waiting writer holds new
 *           rdlock; unlock  (downgrade: keep reading)            readers back)
 *           serve it; unlock
 *
 * The first process to take the write lock rebuilds; the others wait for the write lock,
 * find the cache fresh when they get it (the double check) and serve it. The example runs
 * two rounds (a cold start, then the data changes) with several processes started at the
 * same instant, and checks that each round rebuilt the cache exactly once and that every
 * process served the current version. Exits 0 when so.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <redisync.h>

#define NPROC 5         /* processes serving requests */
#define REBUILD_MS 300  /* how long a rebuild takes */

/* State shared with the children (a stand-in for "the database" and for measurements). */
struct shared {
    atomic_int data_version; /* the source the cache is built from */
    atomic_int rebuilds;     /* rebuilds done, all rounds */
    atomic_int served_ok;    /* requests served with the current version */
};

static struct shared *sh;
static const char *url;
static char lock_name[64];
static char cache_path[128];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* The cached version, -1 if there is no cache. */
static int read_cache(void)
{
    FILE *f = fopen(cache_path, "r");
    if (!f)
        return -1;
    int v = -1;
    if (fscanf(f, "version %d", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

/* The expensive part; written to a temporary file and renamed, as a careful rebuild is. */
static int rebuild_cache(int id)
{
    int version = atomic_load(&sh->data_version);
    printf("cache_rebuild:   process %d rebuilds the cache (version %d) under the write lock\n",
           id, version);
    fflush(stdout);
    sleep_ms(REBUILD_MS);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp%d", cache_path, id);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    fprintf(f, "version %d\n", version);
    if (fclose(f) != 0 || rename(tmp, cache_path) != 0)
        return -1;
    atomic_fetch_add(&sh->rebuilds, 1);
    return 0;
}

static int fresh(int cached)
{
    return cached >= 0 && cached == atomic_load(&sh->data_version);
}

#define CHECK(call)                                                                           \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_) {                                                                            \
            fprintf(stderr, "cache_rebuild: process %d: %s: %s\n", id, #call,                 \
                    rs_strerror(rc_));                                                        \
            return 1;                                                                         \
        }                                                                                     \
    } while (0)

/* One request. */
static int serve(int id, rs_rwlock_t *rw)
{
    CHECK(rs_rwlock_rdlock(rw));
    int cached = read_cache();
    if (!fresh(cached)) {
        CHECK(rs_rwlock_unlock(rw));
        CHECK(rs_rwlock_wrlock(rw));
        cached = read_cache(); /* someone may have rebuilt it while we waited */
        if (!fresh(cached)) {
            if (rebuild_cache(id) != 0) {
                fprintf(stderr, "cache_rebuild: cannot write %s\n", cache_path);
                return 1;
            }
        } else {
            printf("cache_rebuild:   process %d waited for the rebuild instead of redoing it\n",
                   id);
            fflush(stdout);
        }
        CHECK(rs_rwlock_rdlock(rw)); /* downgrade: read lock taken while writing ... */
        CHECK(rs_rwlock_unlock(rw)); /* ... then the write hold dropped; still reading */
        cached = read_cache();
    }
    if (fresh(cached))
        atomic_fetch_add(&sh->served_ok, 1);
    CHECK(rs_rwlock_unlock(rw));
    return 0;
}

static int child(int id, int go_fd)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *client;
    if (rs_client_open(&client, &cfg) != 0) {
        fprintf(stderr, "cache_rebuild: %s\n", rs_client_lasterror(NULL));
        return 1;
    }
    rs_rwlock_t *rw;
    if (rs_rwlock_init(&rw, client, lock_name) != 0) {
        fprintf(stderr, "cache_rebuild: %s\n", rs_client_lasterror(client));
        rs_client_close(client);
        return 1;
    }
    char c;
    while (read(go_fd, &c, 1) < 0 && errno == EINTR) { /* all start together */
    }
    int rc = serve(id, rw);
    rs_rwlock_destroy(rw);
    rs_client_close(client);
    return rc;
}

/* One round: NPROC processes serve one request each, starting at the same instant. */
static int round_of_requests(void)
{
    int go[2];
    if (pipe(go) != 0)
        return -1;
    fflush(stdout);
    pid_t kids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        kids[i] = fork();
        if (kids[i] < 0)
            return -1;
        if (kids[i] == 0) {
            close(go[1]);
            _exit(child(i, go[0]));
        }
    }
    close(go[0]);
    sleep_ms(200); /* let them connect */
    close(go[1]); /* go */
    int failed = 0;
    for (int i = 0; i < NPROC; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return failed ? -1 : 0;
}

int main(int argc, char **argv)
{
    url = argc > 1 ? argv[1] : NULL;
    snprintf(lock_name, sizeof lock_name, "examples:cache:%ld", (long)getpid());
    char dir[] = "/tmp/redisync-cache.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("cache_rebuild: mkdtemp");
        return 1;
    }
    snprintf(cache_path, sizeof cache_path, "%s/cache", dir);

    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *probe;
    if (rs_client_open(&probe, &cfg) != 0) {
        fprintf(stderr, "cache_rebuild: %s\n", rs_client_lasterror(NULL));
        rmdir(dir);
        return 1;
    }
    rs_client_close(probe);

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("cache_rebuild: mmap");
        return 1;
    }
    memset(sh, 0, sizeof *sh);
    atomic_store(&sh->data_version, 1);

    int ok = 1;
    printf("cache_rebuild: %d processes serve from %s under the rs_rwlock_t \"%s\"\n", NPROC,
           cache_path, lock_name);
    printf("cache_rebuild: round 1: cold start, no cache yet\n");
    ok &= round_of_requests() == 0;
    int r1 = atomic_load(&sh->rebuilds);
    printf("cache_rebuild: round 1: %d rebuild(s), %d of %d requests served version %d\n", r1,
           atomic_load(&sh->served_ok), NPROC, atomic_load(&sh->data_version));
    ok &= r1 == 1 && atomic_load(&sh->served_ok) == NPROC;

    atomic_store(&sh->data_version, 2);
    atomic_store(&sh->served_ok, 0);
    printf("cache_rebuild: round 2: the data changed, the cache (version 1) is stale\n");
    ok &= round_of_requests() == 0;
    int r2 = atomic_load(&sh->rebuilds) - r1;
    printf("cache_rebuild: round 2: %d rebuild(s), %d of %d requests served version %d\n", r2,
           atomic_load(&sh->served_ok), NPROC, atomic_load(&sh->data_version));
    ok &= r2 == 1 && atomic_load(&sh->served_ok) == NPROC;

    unlink(cache_path);
    rmdir(dir);
    if (!ok) {
        printf("cache_rebuild: FAILED\n");
        return 1;
    }
    printf("cache_rebuild: ok: one rebuild per stale cache, nobody stampeded\n");
    return 0;
}
