/*
 * rwlock.c - the rs_rwlock_t part: readers share a cache, one writer rebuilds it.
 * (moved from tools/demo.c; shared declarations in demo.h)
 */
#include "demo.h"

/* ----- part: the read-write lock, a cache rebuilt without a stampede -------------------- */

/* MGET cache version: both as integers (nil: 0). -1 on error. */
static int rw_read_state(redisContext *rc, const demo_t *d, long long *cache, long long *version)
{
    char kc[96], kv[96];
    key_of(d, kc, sizeof kc, "cache");
    key_of(d, kv, sizeof kv, "version");
    redisReply *r = redisCommand(rc, "MGET %s %s", kc, kv);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2;
    if (ok) {
        *cache = r->element[0]->type == REDIS_REPLY_STRING ? atoll(r->element[0]->str) : 0;
        *version = r->element[1]->type == REDIS_REPLY_STRING ? atoll(r->element[1]->str) : 0;
    }
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

/* One request: serve from the cache under the read lock; if it is stale, take the write lock,
 * check again (someone may have rebuilt it meanwhile) and rebuild only if still stale.
 * Returns 0, or 1 on an error. *overlap counts a reader and a writer seen inside together. */
static int rw_request(demo_t *d, redisContext *rc, rs_rwlock_t *rw, long long *overlap)
{
    long long cache, version, other;
    struct timespec dl = tu_abs_in(WAIT_MS);
    double t0 = now_ms();
    int e = rs_rwlock_timedrdlock(rw, &dl);
    if (e) {
        say("rs_rwlock_timedrdlock: %s", rs_strerror(e));
        return 1;
    }
    if (now_ms() - t0 > RW_REBUILD_MS / 2)
        atomic_fetch_add(&d->sh->rw_waited, 1); /* held back by the rebuild */
    int err = gauge(rc, d, "readers", "writers", 1, &other) != 0;
    *overlap += other > 0;
    err |= rw_read_state(rc, d, &cache, &version) != 0;
    tu_sleep_ms(RW_READ_MS);
    err |= gauge(rc, d, "readers", "writers", -1, &other) != 0;
    *overlap += other > 0;
    if ((e = rs_rwlock_unlock(rw)) != 0) {
        say("rs_rwlock_unlock (read): %s", rs_strerror(e));
        return 1;
    }
    if (err || (cache == version && cache > 0)) {
        atomic_fetch_add(&d->sh->rw_reads, 1);
        return err;
    }
    /* stale: one process rebuilds, the others queue for the write lock and find it fresh */
    dl = tu_abs_in(WAIT_MS);
    if ((e = rs_rwlock_timedwrlock(rw, &dl)) != 0) {
        say("rs_rwlock_timedwrlock: %s", rs_strerror(e));
        return 1;
    }
    char kw[96];
    key_of(d, kw, sizeof kw, "writers");
    err |= gauge(rc, d, "writers", "readers", 1, &other) != 0;
    *overlap += other > 0;
    err |= rw_read_state(rc, d, &cache, &version) != 0;
    if (!err && (cache != version || cache == 0)) {
        tu_sleep_ms(RW_REBUILD_MS); /* the expensive part */
        char kc[96], kr[96];
        key_of(d, kc, sizeof kc, "cache");
        key_of(d, kr, sizeof kr, "rebuilds");
        /* counted first: once the parent sees the fresh cache, its rebuild is counted */
        redisReply *r = redisCommand(rc, "INCR %s", kr);
        err |= !r || r->type != REDIS_REPLY_INTEGER;
        if (r)
            freeReplyObject(r);
        r = redisCommand(rc, "SET %s %lld", kc, version);
        err |= !r || r->type != REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
    } else if (!err) {
        atomic_fetch_add(&d->sh->rw_waited, 1); /* rebuilt by someone else meanwhile */
    }
    *overlap += get_ll(rc, kw) != 1; /* another writer inside too */
    err |= gauge(rc, d, "writers", "readers", -1, &other) != 0;
    *overlap += other > 0;
    if ((e = rs_rwlock_unlock(rw)) != 0) {
        say("rs_rwlock_unlock (write): %s", rs_strerror(e));
        return 1;
    }
    atomic_fetch_add(&d->sh->rw_reads, 1);
    return err;
}

static int child_rw_reader(demo_t *d, int id)
{
    (void)id;
    rs_client_t *c = open_client(d, 0);
    redisContext *rc = ts_connect(&d->srv);
    rs_rwlock_t *rw = NULL;
    int err = !c || !rc || rs_rwlock_init(&rw, c, RW_NAME) != 0;
    long long overlap = 0;
    double end = now_ms() + REAP_MS;
    while (!err && !atomic_load(&d->sh->stop) && now_ms() < end)
        err = rw_request(d, rc, rw, &overlap);
    if (overlap && rc) {
        char ko[96];
        key_of(d, ko, sizeof ko, "overlaps");
        redisReply *r = redisCommand(rc, "INCRBY %s %lld", ko, overlap);
        if (r)
            freeReplyObject(r);
    }
    if (rc)
        redisFree(rc);
    rs_rwlock_destroy(rw);
    rs_client_close(c);
    return err;
}

int part_rwlock(demo_t *d)
{
    struct shared *sh = d->sh;
    char kv[96];
    key_of(d, kv, sizeof kv, "version");
    char buf[32];
    if (!ts_cmd_str(&d->srv, buf, sizeof buf, "SET %s 1", kv))
        return 1;
    say("%d processes serve requests from \"cache\" under rs_rwlock_rdlock (%d ms each); when",
        RW_READERS, RW_READ_MS);
    say("  it is older than \"version\" one rebuilds it under rs_rwlock_wrlock (%d ms):",
        RW_REBUILD_MS);
    pid_t p[RW_READERS];
    for (int i = 0; i < RW_READERS; i++)
        p[i] = spawn(d, child_rw_reader, i);
    long long rebuilds[RW_EVENTS] = {0};
    int fail = 0;
    long long before = 0;
    for (int v = 1; v <= RW_EVENTS && !fail; v++) {
        if (v > 1 && !ts_cmd_str(&d->srv, buf, sizeof buf, "SET %s %d", kv, v))
            fail = 1; /* the data changed: the cache is stale */
        double end = now_ms() + WAIT_MS;
        while (!fail && get_key(d, "cache") != v) {
            if (now_ms() > end) {
                say("the cache never reached version %d", v);
                fail = 1;
            }
            tu_sleep_ms(5);
        }
        tu_sleep_ms(RW_STEADY_MS); /* fresh-cache reading; any extra rebuild would happen here */
        long long now = get_key(d, "rebuilds");
        rebuilds[v - 1] = now - before;
        before = now;
    }
    atomic_store(&sh->stop, 1);
    int bad = reap(p, RW_READERS);
    long long rmax = get_key(d, "readers:max"), wmax = get_key(d, "writers:max");
    long long overlaps = get_key(d, "overlaps");
    int per_event_ok = 1;
    for (int i = 0; i < RW_EVENTS; i++)
        per_event_ok &= rebuilds[i] == 1;
    if (rmax < 0 || wmax < 0 || overlaps < 0) {
        say("could not read the results from Redis; %d of %d processes reported an error", bad,
            RW_READERS);
        return 1;
    }
    say("readers inside at once: up to %lld (INCR/DECR gauge)%s; %ld requests served",
        rmax, rmax > 1 ? "" : "  <-- readers did NOT share the lock", atomic_load(&sh->rw_reads));
    say("stale cache: the cold start and %d data changes: %lld, %lld, %lld rebuild(s)%s",
        RW_EVENTS - 1, rebuilds[0], rebuilds[1], rebuilds[2],
        per_event_ok ? " (one each)" : "  <-- expected exactly one each");
    say("while it was rebuilt, %d requests waited for the fresh copy instead of rebuilding it",
        atomic_load(&sh->rw_waited));
    if (overlaps == 0 && wmax == 1)
        say("no reader was ever inside together with the writer, nor two writers together");
    else
        say("EXCLUSION BROKEN: %lld reader/writer overlaps seen, up to %lld writers at once",
            overlaps, wmax);
    if (bad)
        say("%d of %d processes reported an error", bad, RW_READERS);
    return fail || bad || rmax <= 1 || !per_event_ok || overlaps != 0 || wmax != 1;
}
