/*
 * ops.c - the redisync command's latch subcommand and the operators' info, list and
 * release --force (tools/cli/cli.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* ========================================================================================
 * latch
 * ====================================================================================== */

int run_latch(const opts_t *o, const char *name, int action, unsigned long arm_n)
{
    rs_client_t *c = NULL;
    int rc = open_client(o, &c);
    if (rc)
        return rc;
    rs_latch_t *l = NULL;
    rc = rs_latch_init(&l, c, name, 0);
    int status = 0;
    if (rc) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    switch (action) {
    case 'a':
        rc = rs_latch_rearm(l, (unsigned)arm_n);
        if (rc)
            status = call_failed(c, rc, name);
        break;
    case 'd':
        rc = rs_latch_count_down(l);
        if (rc == ENOENT) {
            msg("latch \"%s\" is not armed", name);
            status = EXIT_CONFLICT;
        } else if (rc) {
            status = call_failed(c, rc, name);
        }
        break;
    case 'c': {
        unsigned n = 0;
        rc = rs_latch_getcount(l, &n);
        if (rc == ENOENT) {
            msg("latch \"%s\" is not armed", name);
            status = EXIT_CONFLICT;
        } else if (rc) {
            status = call_failed(c, rc, name);
        } else {
            printf("%u\n", n);
        }
        break;
    }
    case 'W':
        if (!o->have_wait) {
            rc = rs_latch_wait(l);
        } else {
            struct timespec abstime = deadline_after(o->wait_s);
            rc = rs_latch_timedwait(l, &abstime);
        }
        if (rc == ETIMEDOUT) {
            msg("timed out after %g s waiting for latch \"%s\" to open", o->wait_s, name);
            status = o->conflict_code;
        } else if (rc) {
            status = call_failed(c, rc, name);
        }
        break;
    }
    rs_latch_destroy(l);
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0) {
        msg("writing output: %s", strerror(errno));
        status = EXIT_SOFTWARE;
    }
    return status;
}

/* ========================================================================================
 * info, list, release --force
 * ====================================================================================== */

static void print_seconds(FILE *f, long ms)
{
    fprintf(f, "%ld.%03ld s", ms / 1000, ms % 1000);
}

/* The line under a holder: who it is, from its client's record (rs_inspect_holder). */
static void print_holder(rs_client_t *c, const rs_info_t *in, unsigned i)
{
    rs_holder_info_t h;
    if (rs_inspect_holder(c, in, i, &h) != 0 || !h.found)
        return; /* no record (just granted, or none kept here): the id alone */
    printf("           host %s, pid %ld, program %s", h.host, h.pid, h.program);
    if (h.label[0])
        printf(", label \"%s\"", h.label);
    if (h.held_ms >= 0) {
        printf(", held for ");
        print_seconds(stdout, h.held_ms);
    }
    printf("\n");
}

static void print_info(rs_client_t *c, const rs_info_t *in, const char *name)
{
    printf("kind:      %s\n", in->kind);
    printf("name:      %s\n", name);
    int is_latch = strcmp(in->kind, "latch") == 0;
    if (strcmp(in->kind, "barrier") == 0) { /* holds nothing: its parties and arrivals */
        printf("parties:   %ld\n", in->count);
        printf("arrived:   %u (in the current generation)\n", in->waiters);
        return;
    }
    if (!is_latch) {
        printf("holders:   %u\n", in->nholders);
        unsigned shown = in->nholders < RS_INFO_HOLDERS ? in->nholders : RS_INFO_HOLDERS;
        for (unsigned i = 0; i < shown; i++) {
            printf("holder:    %.*s\n", (int)sizeof in->holders[i], in->holders[i]);
            print_holder(c, in, i);
        }
        if (in->nholders > shown)
            printf("holder:    (%u more)\n", in->nholders - shown);
        printf("remaining: ");
        if (in->remaining_ms >= 0)
            print_seconds(stdout, in->remaining_ms);
        else
            printf("-");
        printf("\n");
        printf("fence:     %" PRIu64 "\n", in->fence);
        printf("waiters:   %u\n", in->waiters);
    }
    if (strcmp(in->kind, "rwlock") == 0 && in->nholders > 0)
        printf("mode:      %s\n", in->writer ? "write" : "read");
    if (strcmp(in->kind, "sem") == 0) {
        printf("size:      %ld\n", in->size);
        printf("free:      %ld\n", in->free);
    }
    if (strcmp(in->kind, "rmutex") == 0 && in->count >= 0)
        printf("count:     %ld\n", in->count);
    if (strcmp(in->kind, "once") == 0)
        printf("done:      %s\n", in->count == 1 ? "yes" : "no (a runner holds it, or none yet)");
    if (is_latch) {
        if (in->count >= 0)
            printf("count:     %ld\n", in->count);
        else
            printf("count:     not armed\n");
        printf("waiters:   %u\n", in->waiters);
    }
}

int run_info(const opts_t *o, const char *name)
{
    rs_client_t *c = NULL;
    int rc = open_client(o, &c);
    if (rc)
        return rc;
    int found = 0, status = 0;
    for (size_t i = 0; i < NKINDS; i++) {
        if (o->kind && strcmp(o->kind, kinds[i]) != 0)
            continue;
        rs_info_t in;
        memset(&in, 0, sizeof in);
        rc = rs_inspect(c, kinds[i], name, &in);
        if (rc == EINVAL && !o->kind)
            continue; /* a kind this library cannot inspect (the name was checked) */
        if (rc) {
            status = call_failed(c, rc, name);
            break;
        }
        if (!in.exists)
            continue;
        if (!in.kind[0])
            snprintf(in.kind, sizeof in.kind, "%s", kinds[i]);
        if (found++)
            printf("\n");
        print_info(c, &in, name);
    }
    if (!status && !found) {
        if (o->kind)
            msg("there is no %s \"%s\"", o->kind, name);
        else
            msg("there is nothing named \"%s\"", name);
        status = EXIT_CONFLICT;
    }
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_SOFTWARE;
    return status;
}

static int list_each(const char *kind, const char *name, void *arg)
{
    (void)arg;
    printf("%s %s\n", kind, name);
    return 0;
}

int run_list(const opts_t *o, const char *pattern)
{
    rs_client_t *c = NULL;
    int rc = open_client(o, &c);
    if (rc)
        return rc;
    int status = 0;
    rc = rs_list(c, pattern, list_each, NULL);
    if (rc)
        status = call_failed(c, rc, "list");
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_SOFTWARE;
    return status;
}

int run_release(const opts_t *o, const char *name)
{
    rs_client_t *c = NULL;
    int rc = open_client(o, &c);
    if (rc)
        return rc;
    int status = 0;
    rs_info_t in;
    memset(&in, 0, sizeof in);
    rc = rs_inspect(c, o->kind, name, &in);
    if (rc) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    rc = rs_force_release(c, o->kind, name);
    if (rc) {
        status = call_failed(c, rc, name);
        rs_client_close(c);
        return status;
    }
    if (!in.exists || in.nholders == 0) {
        printf("%s %s: nothing was held\n", o->kind, name);
    } else {
        unsigned shown = in.nholders < RS_INFO_HOLDERS ? in.nholders : RS_INFO_HOLDERS;
        printf("%s %s: released %u hold%s", o->kind, name, in.nholders,
               in.nholders == 1 ? "" : "s");
        if (strcmp(o->kind, "rwlock") == 0)
            printf(" (%s)", in.writer ? "write" : "read");
        if (in.fence)
            printf(", fence %" PRIu64, in.fence);
        if (in.remaining_ms >= 0) {
            printf(", ");
            print_seconds(stdout, in.remaining_ms);
            printf(" of lease left");
        }
        printf("\n");
        for (unsigned i = 0; i < shown; i++)
            printf("  holder %.*s\n", (int)sizeof in.holders[i], in.holders[i]);
        if (in.nholders > shown)
            printf("  (%u more)\n", in.nholders - shown);
        if (in.waiters)
            printf("  %u waiter%s woken\n", in.waiters, in.waiters == 1 ? "" : "s");
    }
    rs_client_close(c);
    if (fflush(stdout) != 0 && status == 0)
        status = EXIT_SOFTWARE;
    return status;
}

