/*
 * hold.c - who owns a hold, and the local record of what each thread holds.
 *
 * A hold belongs to one thread of one client, or, as a hold object (rs_mutex_acquire...), to
 * the program. The owner token sent to Redis is "SECRET:NO": SECRET is the client's 128-bit
 * random secret, NO a per-process number given to a thread on first use, or to a hold
 * object, and never reused (pthread_self() and gettid() values are recycled when threads
 * exit, which would let a new thread inherit a dead one's hold).
 * Scripts store only SHA1(token), so reading the keys does not let anyone release or renew
 * a hold. Acquisition ids "PUBLICID:N.SECRET" name one acquisition: scripts use them to make
 * a retried call idempotent and the notifier uses them to route wake-ups. SECRET makes a
 * grant message unforgeable by whoever can publish on the client channel but not read the
 * queue keys: the notifier accepts a grant only with the whole id, and the whole id is only
 * published by the grant itself (a retry message carries "PUBLICID:N").
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static atomic_uint_fast64_t rs_thread_counter = 1;
static _Thread_local uint64_t rs_thread_no_tls;

uint64_t rs__thread_no(void)
{
    if (!rs_thread_no_tls)
        rs_thread_no_tls = atomic_fetch_add(&rs_thread_counter, 1);
    return rs_thread_no_tls;
}

uint64_t rs__owner_no_new(void)
{
    return atomic_fetch_add(&rs_thread_counter, 1);
}

size_t rs__owner_token(const rs_client_t *c, uint64_t no, char *buf)
{
    int n = snprintf(buf, RS_TOKEN_MAX, "%s:%llx", c->secret_hex, (unsigned long long)no);
    return (size_t)n;
}

/* Random bits for acquisition secrets, drawn from getrandom 512 bytes at a time: one system
 * call per 64 acquisitions of a thread. A fork child would replay its parent's pool, so the
 * pool is refilled when the fork generation moved. */
static _Thread_local struct {
    unsigned char buf[512];
    size_t pos;
    unsigned gen;
} rs_pool = {.pos = sizeof rs_pool.buf};

static uint64_t secret64(uint64_t n)
{
    unsigned gen = rs__fork_generation();
    if (rs_pool.pos + 8 > sizeof rs_pool.buf || rs_pool.gen != gen) {
        if (rs__random_bytes(rs_pool.buf, sizeof rs_pool.buf) != 0) {
            /* getrandom cannot fail on Linux >= 3.17 with these arguments; should it, the
             * id stays unique but guessable, which is the protection without the secret */
            return n * 0x9e3779b97f4a7c15ull ^ rs__now_ns();
        }
        rs_pool.pos = 0;
        rs_pool.gen = gen;
    }
    uint64_t v;
    memcpy(&v, rs_pool.buf + rs_pool.pos, sizeof v);
    rs_pool.pos += sizeof v;
    return v;
}

size_t rs__acq_id(rs_client_t *c, char *buf)
{
    unsigned long long n = (unsigned long long)atomic_fetch_add(&c->next_acq, 1);
    int sharded = c->ep.mode == RS_MODE_CLUSTER && rs__cluster_sharded(c);
    return (size_t)snprintf(buf, RS_ACQID_MAX, "%s:%s%llx%c%016llx", c->public_id,
                            sharded ? "s" : "", n, RS_ACQID_SEP,
                            (unsigned long long)secret64(n));
}

int rs__acq_sharded(const char *id)
{
    const char *colon = strchr(id, ':');
    return colon && colon[1] == 's';
}

rs_hold_t *rs__hold_find(rs_hold_t *list, uint64_t thread_no)
{
    for (; list; list = list->next)
        if (list->thread_no == thread_no)
            return list;
    return NULL;
}

void rs__hold_unlink(rs_hold_t **list, rs_hold_t *h)
{
    for (rs_hold_t **p = list; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            h->next = NULL;
            return;
        }
}
