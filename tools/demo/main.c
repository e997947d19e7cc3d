/*
 * main.c - the demo's parts, in order, and main() (see demo.h for what the demo shows).
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

/* ----- the parts, in order ------------------------------------------------------------- */
static const struct part {
    const char *title;
    int (*run)(demo_t *);
} parts[] = {
    {"rs_mutex_t: a shared counter without a lock", part_without_lock},
    {"rs_mutex_t: the same counter under a distributed mutex", part_with_mutex},
    {"rs_mutex_t: trylock never waits", part_trylock},
    {"rs_mutex_t: a crashed holder does not block others forever", part_crash},
    {"rs_rmutex_t: nested helpers lock the same recursive mutex", part_rmutex},
    {"rs_rwlock_t: readers share a cache, one writer rebuilds it", part_rwlock},
    {"rs_sem_t: at most 2 calls of a slow API at once, fleet-wide", part_sem},
    {"rs_latch_t: a coordinator waits for a batch of workers", part_latch},
    {"rs_inspect: who holds a mutex, and who waits", part_inspect},
};

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    demo_t d;
    memset(&d, 0, sizeof d);
    printf("redisync %s demo\n", rs_version());
    if (ts_server_start(&d.srv, NULL) != 0) {
        fprintf(stderr, "demo: cannot start a redis-server (is redis-server on PATH?)\n");
        return 1;
    }
    ts_unique_prefix(d.prefix, sizeof d.prefix);
    d.sh = mmap(NULL, sizeof *d.sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (d.sh == MAP_FAILED) {
        fprintf(stderr, "demo: mmap: %s\n", strerror(errno));
        ts_server_stop(&d.srv);
        return 1;
    }
    printf("throwaway redis-server (pid %d) at %s\n", (int)d.srv.pid, d.srv.url);

    double t0 = now_ms();
    int failed = 0;
    size_t nparts = sizeof parts / sizeof parts[0];
    for (size_t i = 0; i < nparts; i++) {
        printf("\n%zu. %s\n", i + 1, parts[i].title);
        fflush(stdout);
        memset(d.sh, 0, sizeof *d.sh);
        if (parts[i].run(&d) != 0) {
            printf("   -> FAILED\n");
            failed++;
            char pong[16];
            if (!ts_cmd_str(&d.srv, pong, sizeof pong, "PING") || strcmp(pong, "PONG") != 0) {
                printf("\nthe redis-server does not answer any more: the other parts are skipped\n");
                break;
            }
        }
    }
    ts_server_stop(&d.srv);
    printf("\n%s (%.1f s); server stopped\n",
           failed ? "demo FAILED" : "all parts behaved as shown", (now_ms() - t0) / 1e3);
    return failed ? 1 : 0;
}
