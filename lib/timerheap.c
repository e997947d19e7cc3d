/*
 * timerheap.c - a binary min-heap of timers (rs_timer_t embedded in their owners), keyed by
 * due time. lib/async.c keeps the deadlines and retry naps of all a client's pending
 * requests in one, so that 10,000 pending requests cost 10,000 slots, not threads or timer
 * file descriptors. Not thread-safe: one thread (the client's I/O thread) owns a heap.
 */
#include <stdlib.h>

#include "internal.h"

int rs__theap_reserve(rs_theap_t *h, int n)
{
    if (n <= h->cap)
        return 0;
    int cap = h->cap ? h->cap : 64;
    while (cap < n)
        cap *= 2;
    rs_timer_t **v = realloc(h->v, sizeof *v * (size_t)cap);
    if (!v)
        return ENOMEM;
    h->v = v;
    h->cap = cap;
    return 0;
}

static void place(rs_theap_t *h, int i, rs_timer_t *t)
{
    h->v[i] = t;
    t->idx = i;
}

static void up(rs_theap_t *h, int i)
{
    rs_timer_t *t = h->v[i];
    while (i > 0) {
        int p = (i - 1) / 2;
        if (h->v[p]->due_ns <= t->due_ns)
            break;
        place(h, i, h->v[p]);
        i = p;
    }
    place(h, i, t);
}

static void down(rs_theap_t *h, int i)
{
    rs_timer_t *t = h->v[i];
    for (;;) {
        int l = 2 * i + 1, m = l;
        if (l >= h->n)
            break;
        if (l + 1 < h->n && h->v[l + 1]->due_ns < h->v[l]->due_ns)
            m = l + 1;
        if (h->v[m]->due_ns >= t->due_ns)
            break;
        place(h, i, h->v[m]);
        i = m;
    }
    place(h, i, t);
}

void rs__theap_set(rs_theap_t *h, rs_timer_t *t, uint64_t due_ns)
{
    if (t->idx < 0) {
        if (h->n >= h->cap && rs__theap_reserve(h, h->n + 1) != 0)
            return; /* not reached: the caller reserved room */
        t->due_ns = due_ns;
        place(h, h->n++, t);
        up(h, t->idx);
        return;
    }
    uint64_t was = t->due_ns;
    t->due_ns = due_ns;
    if (due_ns < was)
        up(h, t->idx);
    else
        down(h, t->idx);
}

void rs__theap_del(rs_theap_t *h, rs_timer_t *t)
{
    int i = t->idx;
    if (i < 0)
        return;
    t->idx = -1;
    rs_timer_t *last = h->v[--h->n];
    if (i == h->n)
        return;
    place(h, i, last);
    up(h, i);
    down(h, last->idx);
}

rs_timer_t *rs__theap_top(const rs_theap_t *h)
{
    return h->n > 0 ? h->v[0] : NULL;
}

void rs__theap_free(rs_theap_t *h)
{
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
