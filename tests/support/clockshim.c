/* Test support: the offset file of the clock shim (see clockshim.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "clockshim.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int ts_clock_create(ts_clock_t *k, const char *shim_path)
{
    memset(k, 0, sizeof *k);
    if (access(shim_path, R_OK) != 0) {
        fprintf(stderr, "ts_clock_create: the clock shim %s is missing (make test-build)\n",
                shim_path);
        return -1;
    }
    snprintf(k->shim, sizeof k->shim, "%s", shim_path);
    snprintf(k->path, sizeof k->path, "/tmp/ts-clock.%d.XXXXXX", (int)getpid());
    int fd = mkstemp(k->path);
    if (fd < 0) {
        memset(k, 0, sizeof *k);
        return -1;
    }
    void *p = MAP_FAILED;
    if (ftruncate(fd, 4096) == 0)
        p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        unlink(k->path);
        memset(k, 0, sizeof *k);
        return -1;
    }
    k->off = p;
    return 0;
}

void ts_clock_set_ms(ts_clock_t *k, long long off_ms)
{
    if (k->off)
        __atomic_store_n(k->off, (int64_t)off_ms * 1000000LL, __ATOMIC_RELEASE);
}

int ts_clock_env(const ts_clock_t *k)
{
    if (!k->off)
        return -1;
    /* a sanitized program refuses a preload ahead of its runtime unless told (the options
     * check-asan set, e.g. where reports go, are kept) */
    char asan[1024];
    const char *old = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", old ? old : "",
             old && *old ? ":" : "");
    return setenv("LD_PRELOAD", k->shim, 1) == 0 && setenv("RS_CLOCKSHIM", k->path, 1) == 0 &&
                   setenv("ASAN_OPTIONS", asan, 1) == 0
               ? 0
               : -1;
}

int ts_clock_server_start(ts_server_t *s, const ts_clock_t *k, const char *const *args)
{
    if (!k->off) {
        memset(s, 0, sizeof *s);
        return -1;
    }
    /* the forked server inherits the environment: set it around the start only */
    const char *old = getenv("LD_PRELOAD");
    char *saved = old ? strdup(old) : NULL;
    setenv("LD_PRELOAD", k->shim, 1);
    setenv("RS_CLOCKSHIM", k->path, 1);
    static const char *const none[] = {NULL};
    int rc = ts_server_startv(s, args ? args : none);
    if (saved)
        setenv("LD_PRELOAD", saved, 1);
    else
        unsetenv("LD_PRELOAD");
    unsetenv("RS_CLOCKSHIM");
    free(saved);
    return rc;
}

void ts_clock_destroy(ts_clock_t *k)
{
    if (k->off) {
        munmap((void *)k->off, 4096);
        unlink(k->path);
    }
    memset(k, 0, sizeof *k);
}
