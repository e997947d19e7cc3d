/*
 * storm_worker.c - the worker side of the storm: a forked process that runs one redisync
 * primitive (or the raw floor) through the line protocol described in storm.c.
 */

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storm_driver.h"

/* Reads one line from fd into buf (without the newline). 0, or -1 at EOF/error. */
static int read_line(int fd, char *buf, size_t len)
{
    size_t n = 0;
    for (;;) {
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        if (ch == '\n')
            break;
        if (n + 1 < len)
            buf[n++] = ch;
    }
    buf[n] = '\0';
    return 0;
}

void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    for (int off = 0; off < n;) {
        ssize_t w = write(1, buf + off, (size_t)(n - off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        off += (int)w;
    }
}

/* A forked redisync worker: stdin/stdout are the protocol pipes. Returns the exit status. */
int c_worker(const storm_impl_t *im, const char *url, const char *name, const char *file,
             int idx)
{
    /* a reader of a row of readers and writers */
    int (*lock)(void *) = im->readers && idx % 2 ? im->c->rdlock : im->c->lock;
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    rs_client_t *c = NULL;
    void *h = NULL;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        say("error rs_client_open: %s (%s)", rs_strerror(rc), rs_client_lasterror(NULL));
        return 1;
    }
    if ((rc = im->c->init(&h, c, url, name)) != 0) {
        say("error init: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        rs_client_close(c);
        return 1;
    }
    /* warm-up: starts the subscriber, loads the script on this client's connections */
    if ((rc = lock(h)) != 0 || (rc = im->c->unlock(h)) != 0) {
        say("error warm-up lock/unlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
        rs_client_close(c);
        return 1;
    }
    say("ready");

    size_t cap = 4096, n = 0;
    rec_t *r = malloc(cap * sizeof *r);
    char line[256];
    int status = 0;
    while (r && read_line(0, line, sizeof line) == 0) {
        unsigned long long start, end;
        unsigned work_us;
        if (strcmp(line, "quit") == 0)
            break;
        if (sscanf(line, "go %llu %llu %u", &start, &end, &work_us) != 3) {
            say("error bad command \"%s\"", line);
            status = 1;
            break;
        }
        n = 0;
        sleep_until(start);
        int err = 0;
        while (now_ns() < end) {
            rec_t x;
            x.t0 = now_ns();
            if ((rc = lock(h)) != 0) {
                say("error lock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
                err = 1;
                break;
            }
            x.t1 = now_ns();
            while (now_ns() - x.t1 < (uint64_t)work_us * 1000u) {
            }
            x.t2 = now_ns();
            if ((rc = im->c->unlock(h)) != 0) {
                say("error unlock: %s (%s)", rs_strerror(rc), rs_client_lasterror(c));
                err = 1;
                break;
            }
            x.t3 = now_ns();
            if (n == cap) {
                rec_t *nr = realloc(r, 2 * cap * sizeof *r);
                if (!nr) {
                    say("error out of memory");
                    err = 1;
                    break;
                }
                r = nr;
                cap *= 2;
            }
            r[n++] = x;
        }
        if (err) {
            status = 1;
            break;
        }
        FILE *f = fopen(file, "w");
        if (!f) {
            say("error %s: %s", file, strerror(errno));
            status = 1;
            break;
        }
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%llu %llu %llu %llu\n", (unsigned long long)r[i].t0,
                    (unsigned long long)r[i].t1, (unsigned long long)r[i].t2,
                    (unsigned long long)r[i].t3);
        if (fclose(f) != 0) {
            say("error %s: %s", file, strerror(errno));
            status = 1;
            break;
        }
        say("done %zu 0", n);
    }
    free(r);
    im->c->destroy(h);
    rs_client_close(c);
    return status;
}
