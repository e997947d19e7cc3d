/*
 * multilock.c - rs_multilock_t: several mutexes taken all or nothing, without deadlock.
 *
 * A multilock is a sorted list of ordinary mutex handles (possibly of different clients,
 * hence of different servers) and nothing in Redis of its own: each part is taken with the
 * part's own public call (rs_mutex_lock/trylock/timedlock), so each part is an ordinary
 * hold of the calling thread with its own lease, watchdog renewal, fencing token
 * (rs_mutex_fence on the part) and loss report.
 *
 * Deadlock freedom: every multilock takes its parts in one global order that every process
 * computes the same way from what the parts name:
 *   1. the part's main key "PREFIX:{NAME}:mutex" (bytes, memcmp, a shorter key that is a
 *      prefix of a longer one first), then
 *   2. the part's server as its client spells it: "unix:PATH/DB" or "HOST:PORT/DB" (host
 *      lowercased), under Redlock "redlock:" and its masters sorted.
 * The key comes first so that processes that spell one server differently ("localhost" and
 * "127.0.0.1") still agree on the order of differently named parts; the server only breaks
 * ties between equal keys on different servers. Since parts are taken in increasing order
 * and a blocked thread holds only parts below the one it waits for, no cycle of waits can
 * form among multilocks (nor with threads holding one mutex at a time).
 *
 * All or nothing: when a part cannot be taken (EBUSY, ETIMEDOUT, an error), the parts taken
 * so far are released in reverse order and the part's error is returned. A part found lost
 * before the last one was taken (e.g. an outage while waiting for a later part) makes a
 * blocking lock release everything and start again (until the deadline for timedlock);
 * trylock then returns EBUSY. timedlock converts its deadline to the monotonic clock once,
 * on entry, and gives every part what is left of it.
 *
 * One round trip when it can: if every part lives on one client of a single server (or
 * Sentinel's master), the first attempt is one EVALSHA of multilock.lua that takes all parts
 * or none (one_script.c); only when a part is busy (or the call cannot decide) are the parts
 * taken one by one as above.
 *
 * The part's handle is reached through the convention of lib/internal.h that every
 * primitive embeds its rs_handle_t first (struct rs_mutex { rs_handle_t h; } in mutex.c);
 * init checks the handle's kind and script to catch a handle that is not a mutex.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mutex/mutex_internal.h"
#include "internal.h"
#include "one_script.h"

extern const rs_kind_t rs_kind_mutex;

typedef struct ml_part {
    rs_mutex_t *m;
    rs_handle_t *h;
    char server[300]; /* "HOST:PORT/DB", "unix:PATH/DB" or "redlock:HOST:PORT,.../DB"
                         (truncated: a long redlock list only breaks ties less finely) */
} ml_part_t;

/* A thread that holds the multilock (took all its parts through it). */
typedef struct ml_holder {
    uint64_t thread_no;
    struct ml_holder *next;
} ml_holder_t;

struct rs_multilock {
    size_t n;
    ml_part_t *parts;   /* in the global order */
    pthread_mutex_t mu; /* guards holders */
    ml_holder_t *holders;
    rs_handle_t **one;  /* the parts' handles in order, if one script can take them all */
};

#define MODE_LOCK 0
#define MODE_TRY 1
#define MODE_TIMED 2

static rs_handle_t *part_handle(rs_mutex_t *m)
{
    return (rs_handle_t *)(void *)m; /* rs_handle_t is the first member of struct rs_mutex */
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void server_id(const rs_client_t *c, char *buf, size_t len)
{
    const rs_endpoint_t *ep = &c->ep;
    if (ep->mode == RS_MODE_REDLOCK) {
        /* "redlock:HOST:PORT,...,HOST:PORT/DB", masters sorted (lowercased): the same set of
         * masters gives the same id however the URL lists them */
        char names[RS_SEEDS_MAX][300];
        const char *sorted[RS_SEEDS_MAX];
        for (int i = 0; i < ep->nseeds; i++) {
            snprintf(names[i], sizeof names[i], "%s:%d", ep->seeds[i].host, ep->seeds[i].port);
            for (char *p = names[i]; *p; p++)
                *p = (char)tolower((unsigned char)*p);
            sorted[i] = names[i];
        }
        qsort(sorted, (size_t)ep->nseeds, sizeof sorted[0], cmp_str);
        size_t o = (size_t)snprintf(buf, len, "redlock:");
        for (int i = 0; i < ep->nseeds && o < len; i++)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "," : "", sorted[i]);
        if (o < len)
            snprintf(buf + o, len - o, "/%d", ep->db);
        return;
    }
    if (ep->unix_socket) {
        snprintf(buf, len, "unix:%s/%d", ep->path, ep->db);
        return;
    }
    char host[sizeof ep->host];
    size_t i;
    for (i = 0; ep->host[i] && i + 1 < sizeof host; i++)
        host[i] = (char)tolower((unsigned char)ep->host[i]);
    host[i] = '\0';
    snprintf(buf, len, "%s:%d/%d", host, ep->port, ep->db);
}

static int part_cmp(const void *a, const void *b)
{
    const ml_part_t *x = a, *y = b;
    size_t lx = x->h->klen[0], ly = y->h->klen[0];
    int r = memcmp(x->h->key[0], y->h->key[0], lx < ly ? lx : ly);
    if (r)
        return r;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->server, y->server);
}

RS_API int rs_multilock_init(rs_multilock_t **out, rs_mutex_t *const *parts, size_t n)
{
    if (!out)
        return rs__fail(NULL, EINVAL, "multilock handle pointer is NULL");
    *out = NULL;
    if (!parts)
        return rs__fail(NULL, EINVAL, "multilock parts is NULL");
    if (n == 0)
        return rs__fail(NULL, EINVAL, "multilock needs at least one part");
    for (size_t i = 0; i < n; i++) {
        if (!parts[i])
            return rs__fail(NULL, EINVAL, "multilock part %zu is NULL", i);
        const rs_handle_t *h = part_handle(parts[i]);
        if (h->kind != rs_kind_mutex.name || h->script != rs_kind_mutex.script)
            return rs__fail(NULL, EINVAL, "multilock part %zu is not a mutex", i);
    }
    if (n > SIZE_MAX / sizeof(ml_part_t))
        return rs__fail(NULL, ENOMEM, "out of memory");
    rs_multilock_t *ml = calloc(1, sizeof *ml);
    ml_part_t *p = calloc(n, sizeof *p);
    if (!ml || !p) {
        free(ml);
        free(p);
        return rs__fail(NULL, ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        p[i].m = parts[i];
        p[i].h = part_handle(parts[i]);
        server_id(p[i].h->c, p[i].server, sizeof p[i].server);
    }
    qsort(p, n, sizeof *p, part_cmp);
    /* after sorting, duplicates (one handle twice, or two handles of one mutex of one
     * server: taking both would deadlock the caller with itself) are neighbours */
    for (size_t i = 1; i < n; i++)
        if (p[i].m == p[i - 1].m || part_cmp(&p[i], &p[i - 1]) == 0) {
            rs_client_t *c = p[i].h->c;
            int same = p[i].m == p[i - 1].m;
            char name[80];
            snprintf(name, sizeof name, "%.*s", RS_HNAME(p[i].h));
            free(p);
            free(ml);
            return rs__fail(c, EINVAL, "multilock: mutex \"%s\" is given twice%s", name,
                            same ? "" : " (two handles of it)");
        }
    ml->n = n;
    ml->parts = p;
    rs_handle_t **hs = calloc(n, sizeof *hs);
    for (size_t i = 0; hs && i < n; i++)
        hs[i] = p[i].h;
    if (hs && rs__ml_one_script_fits(hs, n))
        ml->one = hs;
    else
        free(hs); /* without it the ordered path serves: no error */
    pthread_mutex_init(&ml->mu, NULL);
    *out = ml;
    return 0;
}

static ml_holder_t **holder_slot(rs_multilock_t *ml, uint64_t thread_no)
{
    ml_holder_t **pp = &ml->holders;
    while (*pp && (*pp)->thread_no != thread_no)
        pp = &(*pp)->next;
    return pp;
}

static int is_holder(rs_multilock_t *ml, uint64_t thread_no)
{
    pthread_mutex_lock(&ml->mu);
    int r = *holder_slot(ml, thread_no) != NULL;
    pthread_mutex_unlock(&ml->mu);
    return r;
}

/* Releases parts [0, upto) in reverse order, keeping the calling thread's error text. */
static void release_taken(rs_multilock_t *ml, size_t upto)
{
    char saved[512];
    snprintf(saved, sizeof saved, "%s", rs_client_lasterror(NULL));
    while (upto-- > 0)
        (void)rs_mutex_unlock(ml->parts[upto].m);
    rs__fail(NULL, 0, "%s", saved);
}

/* Whether the calling thread's hold on part i is already lost. */
static int part_lost(const ml_part_t *p)
{
    rs_hold_t *hold = rs__handle_find(p->h, rs__thread_no());
    return !hold || !hold->lease || rs__lease_is_lost(p->h->c, hold->lease);
}

static int acquire(rs_multilock_t *ml, int mode, const struct timespec *abstime)
{
    if (!ml)
        return rs__fail(NULL, EINVAL, "multilock is NULL");
    uint64_t deadline = RS_NO_DEADLINE;
    if (mode == MODE_TIMED) {
        int rc = rs__deadline_from(ml->parts[0].h->c, abstime, &deadline);
        if (rc)
            return rc;
    }
    uint64_t self = rs__thread_no();
    if (is_holder(ml, self))
        return rs__fail(ml->parts[0].h->c, mode == MODE_TRY ? EBUSY : EDEADLK,
                        "this thread already holds the multilock");
    /* allocated first, so that taking every part never meets ENOMEM */
    ml_holder_t *me = malloc(sizeof *me);
    if (!me)
        return rs__fail(NULL, ENOMEM, "out of memory");
    me->thread_no = self;

    int rc = ml->one ? rs__ml_one_script(ml->one, ml->n) : -1;
    if (rc == EBUSY && mode == MODE_TRY)
        rc = rs__fail(ml->parts[0].h->c, EBUSY, "multilock: a part is busy");
    else if (rc == EBUSY)
        rc = -1; /* wait for it in the ordered path */
    for (int ordered = rc == -1; ordered;) {
        size_t i;
        rc = 0;
        for (i = 0; i < ml->n && rc == 0; i++) {
            rs_mutex_t *m = ml->parts[i].m;
            if (mode == MODE_TRY) {
                rc = rs_mutex_trylock(m);
            } else if (mode == MODE_TIMED) {
                /* the deadline converted once on entry: a wall-clock jump between the parts
                 * changes nothing */
                rc = rs__mutex_lock_until(m, deadline);
            } else {
                rc = rs_mutex_lock(m);
            }
        }
        if (rc) {
            release_taken(ml, i - 1);
            break;
        }
        /* all taken: check that none was lost while later parts were awaited */
        size_t lost = ml->n;
        for (i = 0; i + 1 < ml->n && lost == ml->n; i++)
            if (part_lost(&ml->parts[i]))
                lost = i;
        if (lost == ml->n)
            break;
        const rs_handle_t *lh = ml->parts[lost].h;
        rs__log(lh->c, RS_LOG_WARN, "multilock: mutex \"%.*s\" was lost while later parts were "
                "awaited; releasing all and starting again", RS_HNAME(lh));
        rc = rs__fail(lh->c, mode == MODE_TRY ? EBUSY : ETIMEDOUT,
                      "multilock: mutex \"%.*s\" was lost before all parts were taken",
                      RS_HNAME(lh));
        release_taken(ml, ml->n);
        if (mode == MODE_TRY || (mode == MODE_TIMED && rs__now_ns() >= deadline))
            break;
    }
    if (rc) {
        free(me);
        return rc;
    }
    pthread_mutex_lock(&ml->mu);
    me->next = ml->holders;
    ml->holders = me;
    pthread_mutex_unlock(&ml->mu);
    return 0;
}

RS_API int rs_multilock_lock(rs_multilock_t *ml)
{
    return acquire(ml, MODE_LOCK, NULL);
}

RS_API int rs_multilock_trylock(rs_multilock_t *ml)
{
    return acquire(ml, MODE_TRY, NULL);
}

RS_API int rs_multilock_timedlock(rs_multilock_t *ml, const struct timespec *abstime)
{
    if (ml && !abstime)
        return rs__fail(ml->parts[0].h->c, EINVAL, "deadline is NULL");
    return acquire(ml, MODE_TIMED, abstime);
}

RS_API int rs_multilock_unlock(rs_multilock_t *ml)
{
    if (!ml)
        return rs__fail(NULL, EINVAL, "multilock is NULL");
    pthread_mutex_lock(&ml->mu);
    ml_holder_t **pp = holder_slot(ml, rs__thread_no());
    ml_holder_t *me = *pp;
    if (me)
        *pp = me->next;
    pthread_mutex_unlock(&ml->mu);
    if (!me)
        return rs__fail(ml->parts[0].h->c, EPERM, "this thread does not hold the multilock");
    free(me);

    int lost = 0, first = 0;
    char why[512] = "";
    for (size_t i = ml->n; i-- > 0;) {
        int rc = rs_mutex_unlock(ml->parts[i].m);
        if (rc == RS_ELOST && !lost) {
            lost = 1;
            snprintf(why, sizeof why, "%s", rs_client_lasterror(NULL));
        } else if (rc && rc != RS_ELOST && !first) {
            first = rc;
            if (!lost)
                snprintf(why, sizeof why, "%s", rs_client_lasterror(NULL));
        }
    }
    if (lost)
        return rs__fail(NULL, RS_ELOST, "%s", why);
    if (first)
        return rs__fail(NULL, first, "%s", why);
    return 0;
}

RS_API int rs_multilock_destroy(rs_multilock_t *ml)
{
    if (!ml)
        return 0;
    pthread_mutex_lock(&ml->mu);
    int busy = ml->holders != NULL;
    pthread_mutex_unlock(&ml->mu);
    /* as for a mutex: once a part's client is closed (or in a child after fork()) the holds
     * through it are gone, and the handle may be destroyed */
    for (size_t i = 0; busy && i < ml->n; i++)
        if (ml->parts[i].h->c->closed || rs__forked(ml->parts[i].h->c))
            busy = 0;
    if (busy)
        return rs__fail(NULL, EBUSY, "a thread still holds the multilock");
    while (ml->holders) {
        ml_holder_t *next = ml->holders->next;
        free(ml->holders);
        ml->holders = next;
    }
    pthread_mutex_destroy(&ml->mu);
    free(ml->parts);
    free(ml->one);
    free(ml);
    return 0;
}
