/*
 * util.c - small things every layer needs: clocks and deadlines, the per-thread error
 * message behind rs_client_lasterror, the optional log callback, name checks and the
 * inline argument vector used to build commands without allocating, and random bytes.
 */
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <stdatomic.h>

#include "internal.h"

/* One message per thread, shared by all clients: a string shared between threads would
 * race (SQLite documents the same trap), and after a failed open there is no client. */
static _Thread_local char rs_tls_error[512];

int rs__random_bytes(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

uint64_t rs__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rs__cv_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t until_ns)
{
    struct timespec ts = {(time_t)(until_ns / 1000000000ull), (long)(until_ns % 1000000000ull)};
    pthread_cond_timedwait(cv, mu, &ts);
}

void rs__sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

atomic_ulong rs__deadline_conversions;

int rs__deadline_from(rs_client_t *c, const struct timespec *abstime, uint64_t *out)
{
    if (!abstime)
        return rs__fail(c, EINVAL, "deadline is NULL");
    if (abstime->tv_nsec < 0 || abstime->tv_nsec > 999999999L)
        return rs__fail(c, EINVAL, "deadline tv_nsec %ld is outside 0..999999999",
                        (long)abstime->tv_nsec);
    atomic_fetch_add_explicit(&rs__deadline_conversions, 1, memory_order_relaxed);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t left = ((int64_t)abstime->tv_sec - (int64_t)now.tv_sec) * 1000000000ll +
                   (abstime->tv_nsec - now.tv_nsec);
    uint64_t mono = rs__now_ns();
    if (left <= 0)
        *out = mono; /* already past: one attempt, never queue */
    else if ((uint64_t)left > UINT64_MAX - mono - 1)
        *out = RS_NO_DEADLINE - 1;
    else
        *out = mono + (uint64_t)left;
    return 0;
}

int rs__fail(rs_client_t *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rs_tls_error, sizeof rs_tls_error, fmt, ap);
    va_end(ap);
    if (c && c->log)
        rs__log(c, RS_LOG_DEBUG, "error %d: %s", code, rs_tls_error);
    return code;
}

int rs__fail_timedout(rs_client_t *c, uint64_t start_ns)
{
    return rs__fail(c, ETIMEDOUT, "deadline passed after %llu ms of waiting",
                    (unsigned long long)((rs__now_ns() - start_ns) / RS_NS_PER_MS));
}

void rs__clear_error(void)
{
    rs_tls_error[0] = '\0';
}

const char *rs__error_text(void)
{
    return rs_tls_error;
}

void rs__error_set(const char *text)
{
    snprintf(rs_tls_error, sizeof rs_tls_error, "%s", text);
}

RS_API const char *rs_client_lasterror(rs_client_t *c)
{
    (void)c;
    return rs_tls_error;
}

void rs__log(rs_client_t *c, int level, const char *fmt, ...)
{
    if (!c || !c->log)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->log(level, buf, c->log_arg);
}

int rs__check_name(rs_client_t *c, const char *name, size_t *len)
{
    if (!name)
        return rs__fail(c, EINVAL, "name is NULL");
    size_t n = strnlen(name, RS_NAME_MAX + 1);
    if (n == 0)
        return rs__fail(c, EINVAL, "name is empty");
    if (n > RS_NAME_MAX)
        return rs__fail(c, EINVAL, "name is longer than %d bytes", RS_NAME_MAX);
    *len = n;
    return 0;
}

void rs__argv_init(rs_argv_t *a)
{
    a->n = 0;
    a->used = 0;
}

void rs__argv_ref(rs_argv_t *a, const char *s, size_t len)
{
    if (a->n >= RS_ARGV_MAX)
        return; /* callers size their vectors statically; see RS_ARGV_MAX */
    a->v[a->n] = s;
    a->len[a->n] = len;
    a->n++;
}

void rs__argv_str(rs_argv_t *a, const char *s)
{
    rs__argv_ref(a, s, strlen(s));
}

void rs__argv_fmt(rs_argv_t *a, const char *fmt, ...)
{
    char *dst = a->arena + a->used;
    size_t room = sizeof a->arena - a->used;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room)
        n = 0; /* cannot happen with the short numbers formatted here */
    a->used += (size_t)n + 1;
    rs__argv_ref(a, dst, (size_t)n);
}

/* An eventfd (non-blocking) made readable, and read back to not readable: how the event-loop
 * API's threads wake each other (async.c, async_req.c, async_dial.c). */
void rs__aq_poke(int fd)
{
    uint64_t one = 1;
    ssize_t n = write(fd, &one, sizeof one);
    (void)n; /* EAGAIN only when the counter is full: it is readable then anyway */
}

void rs__aq_drain(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
}
