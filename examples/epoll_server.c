/*
 * epoll_server.c - an event-loop server on redisync's non-blocking API.
 *
 *   build/examples/epoll_server [URL]  (URL: argv[1], else $REDISYNC_URL, else
 *                                       redis://127.0.0.1:6379)
 *
 * One thread, one epoll loop. It serves simulated requests (400 of them, arriving in
 * bursts from a timerfd), each of which must update one of 8 accounts under that account's
 * distributed mutex. The loop never blocks on Redis:
 *
 *     rs_mutex_acquire_async(account, &deadline, granted, req, &r);  returns at once
 *     ... rs_client_fd(client) becomes readable -> rs_client_dispatch(client)
 *     granted(0, hold, req): work starts; the account's timerfd ends it 2 ms later
 *     timerfd fires: rs_hold_release_async(hold, released, req)       returns at once
 *
 * Every request of an account waits in Redis' FIFO queue of that account's mutex, renewed by
 * the client's watchdog, woken through its one subscriber: no thread per request. Exits 0
 * when every request was served, no two holds of one account overlapped, and each account's
 * fencing tokens only rose.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <redisync.h>

#define ACCOUNTS 8
#define REQUESTS 400
#define BURST 25

typedef struct account {
    rs_mutex_t *m;
    int tfd;              /* ends the current holder's work */
    struct request *busy; /* the request holding it now */
    uint64_t last_fence;
    long balance;
} account_t;

typedef struct request {
    int id;
    account_t *acct;
    rs_hold_t *hold;
} request_t;

static account_t accounts[ACCOUNTS];
static request_t reqs[REQUESTS];
static int served, released, failures, overlaps, fence_drops;

static void released_cb(int rc, rs_hold_t *hold, void *arg)
{
    request_t *r = arg;
    (void)hold;
    released++;
    if (rc != 0) {
        fprintf(stderr, "request %d: release: %s: %s\n", r->id, rs_strerror(rc),
                rs_client_lasterror(NULL)); /* this request's message */
        failures++;
    }
}

static void granted(int rc, rs_hold_t *hold, void *arg)
{
    request_t *r = arg;
    account_t *a = r->acct;
    if (rc != 0) {
        fprintf(stderr, "request %d: %s: %s\n", r->id, rs_strerror(rc), rs_client_lasterror(NULL));
        failures++;
        released++; /* nothing to release */
        return;
    }
    if (a->busy)
        overlaps++;
    uint64_t f = rs_hold_fence(hold);
    if (f <= a->last_fence)
        fence_drops++;
    a->last_fence = f;
    a->busy = r;
    r->hold = hold;
    a->balance += 10;
    /* the work takes 2 ms; the account's timerfd ends it */
    struct itimerspec its = {{0, 0}, {0, 2000000}};
    timerfd_settime(a->tfd, 0, &its, NULL);
}

static void work_done(account_t *a)
{
    request_t *r = a->busy;
    if (!r)
        return;
    a->busy = NULL; /* handed back before the release: the next grant may come at once */
    served++;
    int rc = rs_hold_release_async(r->hold, released_cb, r);
    if (rc != 0) {
        fprintf(stderr, "request %d: release_async: %s\n", r->id, rs_strerror(rc));
        failures++;
        released++;
    }
}

int main(int argc, char **argv)
{
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = argc > 1 ? argv[1] : NULL;
    cfg.lease_ms = 5000;
    rs_client_t *c;
    int rc = rs_client_open(&c, &cfg);
    if (rc) {
        fprintf(stderr, "open: %s: %s\n", rs_strerror(rc), rs_client_lasterror(NULL));
        return 1;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int cfd = rs_client_fd(c);
    int arrivals = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (ep < 0 || cfd < 0 || arrivals < 0) {
        fprintf(stderr, "setup: %s\n", cfd < 0 ? rs_client_lasterror(c) : strerror(errno));
        return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
    ev.data.ptr = &arrivals;
    epoll_ctl(ep, EPOLL_CTL_ADD, arrivals, &ev);
    for (int i = 0; i < ACCOUNTS; i++) {
        char name[32];
        snprintf(name, sizeof name, "account-%d", i);
        if ((rc = rs_mutex_init(&accounts[i].m, c, name)) != 0) {
            fprintf(stderr, "init: %s\n", rs_client_lasterror(c));
            return 1;
        }
        accounts[i].tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        ev.data.ptr = &accounts[i];
        epoll_ctl(ep, EPOLL_CTL_ADD, accounts[i].tfd, &ev);
    }
    /* a burst of BURST requests every 5 ms */
    struct itimerspec its = {{0, 5000000}, {0, 1000000}};
    timerfd_settime(arrivals, 0, &its, NULL);

    int next = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (released < REQUESTS) {
        struct epoll_event got[16];
        int n = epoll_wait(ep, got, 16, 1000);
        for (int i = 0; i < n; i++) {
            uint64_t ticks;
            if (got[i].data.ptr == NULL) {
                rs_client_dispatch(c); /* runs granted() and released_cb() here */
            } else if (got[i].data.ptr == &arrivals) {
                if (read(arrivals, &ticks, sizeof ticks) < 0)
                    continue;
                for (int k = 0; k < BURST && next < REQUESTS; k++, next++) {
                    request_t *r = &reqs[next];
                    r->id = next;
                    r->acct = &accounts[rand() % ACCOUNTS];
                    struct timespec dl;
                    clock_gettime(CLOCK_REALTIME, &dl);
                    dl.tv_sec += 30;
                    rs_request_t *req;
                    rc = rs_mutex_acquire_async(r->acct->m, &dl, granted, r, &req);
                    if (rc != 0) {
                        fprintf(stderr, "acquire_async: %s\n", rs_client_lasterror(c));
                        failures++;
                        released++;
                    }
                }
                if (next == REQUESTS) {
                    struct itimerspec off = {{0, 0}, {0, 0}};
                    timerfd_settime(arrivals, 0, &off, NULL);
                }
            } else {
                account_t *a = got[i].data.ptr;
                if (read(a->tfd, &ticks, sizeof ticks) > 0)
                    work_done(a);
            }
        }
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 30) {
            fprintf(stderr, "epoll_server: stuck: served %d of %d\n", served, REQUESTS);
            return 1;
        }
    }
    long total = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        total += accounts[i].balance;
        rs_mutex_destroy(accounts[i].m);
        close(accounts[i].tfd);
    }
    rs_client_close(c);
    close(arrivals);
    close(ep);
    printf("epoll_server: %d requests served on one thread, balance %ld, overlaps %d, "
           "token drops %d, failures %d\n", served, total, overlaps, fence_drops, failures);
    int ok = served == REQUESTS && total == 10L * REQUESTS && overlaps == 0 &&
             fence_drops == 0 && failures == 0;
    printf("epoll_server: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
