/*
 * clockshim.c - an LD_PRELOAD library that shifts a process's wall clock by an offset that
 * a test changes while the process runs (build/tests/rs-clockshim.so; mk/clock.mk).
 *
 * Why not libfaketime: Debian's libfaketime resolves the real clock functions with dlsym,
 * which allocates, and Debian's redis-server allocates with jemalloc, which reads the clock:
 * redis-server deadlocks or crashes at start, and faketime's own monotonic handling makes
 * monotonic waits spin (docs testing.md). This shim calls no libc time function and never
 * allocates: every clock is read with the raw clock_gettime system call, and the wall-clock
 * ones get the offset added.
 *
 * The offset. RS_CLOCKSHIM names a file whose first 8 bytes are a native int64_t: the
 * offset in nanoseconds (a missing or short file is offset 0). The shim maps the file
 * shared and read-only on the first clock call and reads the offset with an atomic load on
 * every call, so a test that writes a new offset through its own shared mapping (atomic
 * store; tests/support/clockshim.h) moves the process's clock at once, forward or back.
 *
 * Shifted: clock_gettime(CLOCK_REALTIME, CLOCK_REALTIME_COARSE, CLOCK_TAI), gettimeofday,
 * time, timespec_get(TIME_UTC). Not shifted: CLOCK_MONOTONIC, CLOCK_BOOTTIME and the rest
 * (a wall-clock step moves none of them on Linux either), nor the timeouts the kernel
 * measures itself (a CLOCK_REALTIME timer or pthread_cond_timedwait absolute deadline still
 * sees the real clock: the shim moves what the process reads, as a date(1) step would not
 * quite; what redisync and redis-server read is what the tests are about).
 *
 * Costs a system call per clock read instead of the vDSO (about 0.1-0.3 us): for tests.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NO_MAP ((int64_t *)1)

static int64_t *volatile g_off; /* NULL: not looked yet; NO_MAP: no offset file */

static const int64_t *offset_page(void)
{
    int64_t *p = __atomic_load_n(&g_off, __ATOMIC_ACQUIRE);
    if (p)
        return p;
    int64_t *m = NO_MAP;
    const char *path = getenv("RS_CLOCKSHIM");
    if (path && *path) {
        int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            void *a = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
            syscall(SYS_close, fd);
            if (a != MAP_FAILED)
                m = a;
        }
    }
    int64_t *expected = NULL;
    if (!__atomic_compare_exchange_n(&g_off, &expected, m, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (m != NO_MAP)
            munmap(m, 4096); /* another thread mapped it first */
        return expected;
    }
    return m;
}

static int64_t offset_ns(void)
{
    const int64_t *p = offset_page();
    return p == NO_MAP ? 0 : __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static int raw_gettime(clockid_t id, struct timespec *ts)
{
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static void shift(struct timespec *ts, int64_t off)
{
    int64_t ns = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + off;
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000L;
        ts->tv_sec--;
    }
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int rc = raw_gettime(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_TAI))
        shift(ts, offset_ns());
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    (void)tz;
    struct timespec ts;
    if (raw_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    shift(&ts, offset_ns());
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t)
{
    struct timespec ts;
    if (raw_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    shift(&ts, offset_ns());
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base)
{
    if (base != TIME_UTC || raw_gettime(CLOCK_REALTIME, ts) != 0)
        return 0;
    shift(ts, offset_ns());
    return base;
}
