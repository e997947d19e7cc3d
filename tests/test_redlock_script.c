/*
 * test_redlock_script.c - the mutex script's Redlock mode on one master, call by call
 * (primitives/mutex/mutex.lua with a mode ending in "r"; docs/scripts.md, "Under Redlock"):
 * the rules that make waiters be woken and served in turn (issue 17). Each test sends the
 * calls the library would send, with EVALSHA, and reads the keys and the wake-up messages.
 *
 *   release_reserves_for_head   a release wakes the first waiter by ticket (not by arrival)
 *                               and reserves the free lock for it: a relock by the releaser
 *                               and a try by another waiter are busy (queued or not), with
 *                               the reservation's time left; the woken waiter is granted, the
 *                               reservation cleared, its queue entry kept until its release
 *   undo_wakes_nobody           "ur" (a grant that got no quorum) frees the lock, reserves
 *                               nothing, publishes nothing and keeps the undoer's place
 *                               (first by ticket, so the lock it freed is still its own)
 *   release_drops_entry         a release where this master did not grant (busy here, a
 *                               quorum elsewhere) takes the acquisition's entry out of the
 *                               queue, so it cannot swallow the next wake-up
 *   cancel_passes_reservation   the reserved waiter leaving passes the reservation on
 *   lapsed_reservation          a reservation past its time lets the first live waiter
 *                               in, not anyone
 *   free_lock_in_ticket_order   a free, unreserved lock goes to the first live waiter by
 *                               ticket, queued or trying (busy for the others, for the time
 *                               that waiter's entry has left), to the next once that entry
 *                               has lapsed, and to anyone when nobody waits: the waiters
 *                               whose checks fall on a free lock no longer race for it and
 *                               split the vote (net-rl-slowloss: lock calls waiting 15 s)
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "redis_server.h"
#include "scripts.h"
#include "test_assert.h"

TestSuite(redlock_script, .timeout = 60);

typedef struct world {
    ts_server_t s;
    redisContext *k;   /* calls */
    redisContext *sub; /* subscribed to every client channel "rs:client:*" */
    char sha[41];
    char key[4][64];
} world_t;

static void start(world_t *w)
{
    tu_start_server(&w->s);
    w->k = ts_connect(&w->s);
    w->sub = ts_connect(&w->s);
    cr_assert(w->k && w->sub);
    redisReply *r = redisCommand(w->k, "SCRIPT LOAD %b", rs_script_mutex.body,
                                 rs_script_mutex.len);
    cr_assert(r && r->type == REDIS_REPLY_STRING);
    snprintf(w->sha, sizeof w->sha, "%s", r->str);
    freeReplyObject(r);
    const char *suf[4] = {"", ":fence", ":q", ":qi"};
    for (int i = 0; i < 4; i++)
        snprintf(w->key[i], sizeof w->key[i], "rs:{rl}:mutex%s", suf[i]);
    r = redisCommand(w->sub, "PSUBSCRIBE rs:client:*");
    cr_assert(r);
    freeReplyObject(r);
}

static void stop(world_t *w)
{
    redisFree(w->k);
    redisFree(w->sub);
    ts_server_stop(&w->s);
}

/* One call as lib/redlock.c makes it: owner OWNER (its token "tok-OWNER"), acquisition id
 * "OWNER:N.secret" (so its channel is rs:client:OWNER), lease 60 s (queue entry too), the
 * ticket as ARGV[9] when given. */
static redisReply *call(world_t *w, const char *op, const char *owner, const char *id,
                        const char *mode, const char *ticket)
{
    char tok[32], acq[64];
    snprintf(tok, sizeof tok, "tok-%s", owner);
    snprintf(acq, sizeof acq, "%s:%s.secret", owner, id);
    const char *argv[20] = {"EVALSHA", w->sha, "4", w->key[0], w->key[1], w->key[2], w->key[3],
                            op, tok, acq, "60000", "rs:client:", mode, "100", "60000"};
    int n = 15;
    if (ticket)
        argv[n++] = ticket;
    redisReply *r = redisCommandArgv(w->k, n, argv, NULL);
    cr_assert(r, "connection error");
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "%s %s: %s", op, acq, r->str);
    return r;
}

static long long first(redisReply *r)
{
    long long v = r->type == REDIS_REPLY_ARRAY ? r->element[0]->integer : r->integer;
    return v;
}

static void expect_grant(world_t *w, const char *owner, const char *id, const char *mode,
                         const char *ticket)
{
    redisReply *r = call(w, "acq", owner, id, mode, ticket);
    cr_expect_eq(first(r), 1, "acq %s:%s: not granted (%lld)", owner, id, first(r));
    freeReplyObject(r);
}

/* busy; returns the time left it answered */
static long long expect_busy(world_t *w, const char *owner, const char *id, const char *mode,
                             const char *ticket)
{
    redisReply *r = call(w, "acq", owner, id, mode, ticket);
    cr_expect_eq(first(r), 0, "acq %s:%s: not busy (%lld)", owner, id, first(r));
    long long ttl = r->elements >= 2 ? r->element[1]->integer : -1;
    freeReplyObject(r);
    return ttl;
}

static long long rel(world_t *w, const char *owner, const char *id, const char *mode)
{
    redisReply *r = call(w, "rel", owner, id, mode, NULL);
    long long v = first(r);
    freeReplyObject(r);
    return v;
}

/* The queue's ids, in order, joined by spaces. */
static const char *queue(world_t *w, char *buf, size_t len)
{
    redisReply *r = redisCommand(w->k, "ZRANGE %s 0 -1", w->key[2]);
    buf[0] = '\0';
    for (size_t i = 0; r && i < r->elements; i++) {
        size_t u = strlen(buf);
        snprintf(buf + u, len - u, "%s%s", i ? " " : "", r->element[i]->str);
    }
    freeReplyObject(r);
    return buf;
}

/* The lock's reservation field w ("" if none). */
static const char *reserved_for(world_t *w, char *buf, size_t len)
{
    redisReply *r = redisCommand(w->k, "HGET %s w", w->key[0]);
    snprintf(buf, len, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return buf;
}

/* The next wake-up message within ms, "" if none. */
static const char *message(world_t *w, long ms, char *buf, size_t len)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    redisSetTimeout(w->sub, tv);
    buf[0] = '\0';
    redisReply *r = NULL;
    if (redisGetReply(w->sub, (void **)&r) == REDIS_OK && r && r->elements == 4)
        snprintf(buf, len, "%s", r->element[3]->str);
    if (r)
        freeReplyObject(r);
    if (w->sub->err) { /* the timeout makes the context unusable: subscribe anew */
        redisFree(w->sub);
        w->sub = ts_connect(&w->s);
        freeReplyObject(redisCommand(w->sub, "PSUBSCRIBE rs:client:*"));
    }
    return buf;
}

Test(redlock_script, release_reserves_for_head)
{
    world_t w;
    start(&w);
    char b1[256], b2[64], b3[64];
    expect_grant(&w, "pa", "1", "qr", "100");
    expect_busy(&w, "pb", "1", "qr", "300");
    expect_busy(&w, "pc", "1", "qr", "200"); /* arrives later, began earlier */
    cr_expect_str_eq(queue(&w, b1, sizeof b1), "pc:1.secret pb:1.secret",
                     "the queue is not in ticket order");
    cr_expect_eq(rel(&w, "pa", "1", "tr"), 1);
    cr_expect_str_eq(reserved_for(&w, b2, sizeof b2), "pc:1.secret");
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pc:1 retry");
    /* the releaser relocks at once, another waiter tries: both busy, for the reservation */
    long long ttl = expect_busy(&w, "pa", "2", "qr", "400");
    cr_expect(ttl > 0 && ttl <= 500, "busy for %lld ms, not the reservation's time", ttl);
    expect_busy(&w, "pb", "1", "tr", "300");
    expect_grant(&w, "pc", "1", "qr", "200");
    cr_expect_str_eq(reserved_for(&w, b2, sizeof b2), "", "the grant left the reservation");
    cr_expect_str_eq(queue(&w, b1, sizeof b1), "pc:1.secret pb:1.secret pa:2.secret",
                     "the holder's entry goes only at its release");
    cr_expect_eq(rel(&w, "pc", "1", "tr"), 1);
    cr_expect_str_eq(queue(&w, b1, sizeof b1), "pb:1.secret pa:2.secret");
    cr_expect_str_eq(reserved_for(&w, b2, sizeof b2), "pb:1.secret");
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pb:1 retry");
    stop(&w);
}

Test(redlock_script, undo_wakes_nobody)
{
    world_t w;
    start(&w);
    char b1[256], b2[64], b3[64];
    expect_grant(&w, "px", "1", "qr", "1");
    expect_busy(&w, "pa", "1", "qr", "10");
    expect_busy(&w, "pb", "1", "qr", "20");
    cr_expect_eq(rel(&w, "px", "1", "tr"), 1);
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pa:1 retry");
    expect_grant(&w, "pa", "1", "qr", "10");
    /* no quorum elsewhere: the undo */
    cr_expect_eq(rel(&w, "pa", "1", "ur"), 1);
    cr_expect_str_eq(reserved_for(&w, b2, sizeof b2), "", "an undo reserved the lock");
    cr_expect_str_eq(message(&w, 200, b3, sizeof b3), "", "an undo woke someone");
    cr_expect_str_eq(queue(&w, b1, sizeof b1), "pa:1.secret pb:1.secret",
                     "the undo lost its place");
    /* free, unreserved: the first by ticket, which is still pa */
    expect_busy(&w, "pb", "1", "tr", "20");
    expect_grant(&w, "pa", "1", "qr", "10");
    stop(&w);
}

Test(redlock_script, release_drops_entry)
{
    world_t w;
    start(&w);
    char b1[256], b3[64];
    expect_grant(&w, "px", "1", "qr", "1");
    expect_busy(&w, "pa", "1", "qr", "10"); /* busy here; a quorum grants it elsewhere */
    expect_busy(&w, "pb", "1", "qr", "20");
    cr_expect_eq(rel(&w, "pa", "1", "tr"), 0, "not held here");
    cr_expect_str_eq(queue(&w, b1, sizeof b1), "pb:1.secret",
                     "the released acquisition is still queued here");
    cr_expect_eq(rel(&w, "px", "1", "tr"), 1);
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pb:1 retry",
                     "the wake-up did not go to the real waiter");
    stop(&w);
}

Test(redlock_script, cancel_passes_reservation)
{
    world_t w;
    start(&w);
    char b2[64], b3[64];
    expect_grant(&w, "px", "1", "qr", "1");
    expect_busy(&w, "pa", "1", "qr", "10");
    expect_busy(&w, "pb", "1", "qr", "20");
    cr_expect_eq(rel(&w, "px", "1", "tr"), 1);
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pa:1 retry");
    redisReply *r = call(&w, "cancel", "pa", "1", "tr", NULL);
    cr_expect_eq(first(r), 0);
    freeReplyObject(r);
    cr_expect_str_eq(reserved_for(&w, b2, sizeof b2), "pb:1.secret");
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pb:1 retry");
    stop(&w);
}

Test(redlock_script, lapsed_reservation)
{
    world_t w;
    start(&w);
    char b3[64];
    expect_grant(&w, "px", "1", "qr", "1");
    expect_busy(&w, "pa", "1", "qr", "10");
    cr_expect_eq(rel(&w, "px", "1", "tr"), 1);
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pa:1 retry");
    expect_busy(&w, "pc", "1", "tr", "30");
    freeReplyObject(redisCommand(w.k, "HSET %s x 1", w.key[0])); /* its time has passed */
    /* pa is still the first live waiter: the lock waits for its retry */
    long long ttl = expect_busy(&w, "pc", "1", "tr", "30");
    cr_expect(ttl > 500 && ttl <= 60000, "busy for %lld ms, not pa's entry's time left", ttl);
    expect_grant(&w, "pa", "1", "qr", "10");
    stop(&w);
}

/* The rule the masters grant a free lock by under Redlock. Before it, a free lock that no
 * reservation covered went to whoever asked first: the waiters whose checks fell on it
 * raced, won a master each at a round trip's distance, undid and tried again (make
 * test-network --only net-rl-slowloss: split votes in a row, a lock call waiting 15 s). Now
 * every master grants it to the same waiter, the first live one by ticket. */
Test(redlock_script, free_lock_in_ticket_order)
{
    world_t w;
    start(&w);
    char b1[256], b2[64], b3[64];
    expect_grant(&w, "px", "1", "qr", "1");
    expect_busy(&w, "pb", "1", "qr", "20");
    expect_busy(&w, "pa", "1", "qr", "10"); /* arrives later, began earlier */
    /* px's grant got no quorum elsewhere: the undo frees the lock, reserves nothing */
    cr_expect_eq(rel(&w, "px", "1", "ur"), 1);
    cr_expect_str_eq(reserved_for(&w, b2, sizeof b2), "");
    cr_expect_str_eq(message(&w, 200, b3, sizeof b3), "", "an undo woke someone");
    /* pb's check falls on the free lock first, and a newcomer's try, and px again */
    long long ttl = expect_busy(&w, "pb", "1", "qr", "20");
    cr_expect(ttl > 500 && ttl <= 60000, "busy for %lld ms, not pa's entry's time left", ttl);
    expect_busy(&w, "pc", "1", "tr", "30");
    expect_busy(&w, "px", "2", "qr", "40");
    cr_expect_str_eq(queue(&w, b1, sizeof b1), "pa:1.secret pb:1.secret px:2.secret");
    expect_grant(&w, "pa", "1", "qr", "10");
    cr_expect_eq(rel(&w, "pa", "1", "tr"), 1);
    cr_expect_str_eq(message(&w, 1000, b3, sizeof b3), "pb:1 retry");
    /* pb died: its reservation and then its entry lapse; the next live waiter gets it */
    freeReplyObject(redisCommand(w.k, "HSET %s x 1", w.key[0]));
    expect_busy(&w, "pc", "1", "tr", "30");
    freeReplyObject(redisCommand(w.k, "HSET %s pb:1.secret %s", w.key[3],
                                 "1 60000 0123456789abcdef0123456789abcdef01234567"));
    expect_busy(&w, "pc", "1", "tr", "30");
    expect_grant(&w, "px", "2", "qr", "40");
    cr_expect_str_eq(queue(&w, b1, sizeof b1), "px:2.secret", "the lapsed entry stayed");
    cr_expect_eq(rel(&w, "px", "2", "tr"), 1);
    /* nobody waits: anyone */
    expect_grant(&w, "pc", "1", "tr", "30");
    stop(&w);
}

/* One Redlock call with the attempt's number (ARGV[11]) as lib/redlock.c sends it: acq with
 * the ticket as ARGV[9], the undo ("rel" "ur") with ARGV[9] and ARGV[10] empty. The reply's
 * first integer. */
static long long attempt_call(world_t *w, const char *op, const char *owner, const char *id,
                              const char *mode, const char *ticket, const char *attempt)
{
    char tok[32], acq[64];
    snprintf(tok, sizeof tok, "tok-%s", owner);
    snprintf(acq, sizeof acq, "%s:%s.secret", owner, id);
    const char *argv[20] = {"EVALSHA", w->sha, "4", w->key[0], w->key[1], w->key[2], w->key[3],
                            op, tok, acq, "60000", "rs:client:", mode, "100", "60000",
                            ticket, "", attempt};
    redisReply *r = redisCommandArgv(w->k, 18, argv, NULL);
    cr_assert(r, "connection error");
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "%s %s: %s", op, acq, r->str);
    long long v = first(r);
    freeReplyObject(r);
    return v;
}

/* An attempt that got no quorum undoes its grants; its undo may travel on a connection that
 * is then dropped and arrive after the next attempt of the same acquisition was granted on
 * another connection (make test-network, net-rl-slowloss: holds found gone at release).
 * The undo carries its attempt's number and leaves a later attempt's grant alone. */
Test(redlock_script, late_undo_spares_a_later_attempt)
{
    world_t w;
    start(&w);
    cr_expect_eq(attempt_call(&w, "acq", "pa", "1", "qr", "10", "1"), 1, "attempt 1");
    cr_expect_eq(attempt_call(&w, "rel", "pa", "1", "ur", "", "1"), 1, "attempt 1's undo");
    cr_expect_eq(attempt_call(&w, "acq", "pa", "1", "qr", "10", "2"), 1, "attempt 2");
    /* attempt 1's undo again, late: attempt 2's grant stays */
    cr_expect_eq(attempt_call(&w, "rel", "pa", "1", "ur", "", "1"), 0,
                 "a late undo of attempt 1 freed attempt 2's grant");
    expect_busy(&w, "pb", "1", "tr", "20");
    /* attempt 3 finds it granted to its id (attempt 2's grant, whose reply was late, with
     * little of its lease left): it is attempt 3's now, with a whole lease, and attempt 2's
     * undo leaves it */
    cr_assert_eq(ts_cmd_int(&w.s, "PEXPIRE %s 500", w.key[0]), 1);
    cr_expect_eq(attempt_call(&w, "acq", "pa", "1", "qr", "10", "3"), 1, "attempt 3");
    long long pttl = ts_cmd_int(&w.s, "PTTL %s", w.key[0]);
    cr_expect_gt(pttl, 50000, "a re-grant kept the earlier grant's %lld ms", pttl);
    cr_expect_eq(attempt_call(&w, "rel", "pa", "1", "ur", "", "2"), 0,
                 "attempt 2's undo freed attempt 3's grant");
    expect_busy(&w, "pb", "1", "tr", "20");
    /* its own undo frees it, and leaves no stamp behind */
    cr_expect_eq(attempt_call(&w, "rel", "pa", "1", "ur", "", "3"), 1, "attempt 3's undo");
    cr_expect_eq(ts_cmd_int(&w.s, "HEXISTS %s u", w.key[0]), 0, "the stamp outlived the hold");
    expect_grant(&w, "pb", "1", "tr", "20");
    stop(&w);
}
