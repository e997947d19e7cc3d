/*
 * internal.h - what the core (lib/) offers the primitives, and nothing public.
 *
 * Layers, bottom up (one file per concern):
 *   util.c      clocks, deadlines, per-thread error text, logging, argument vectors, eventfd
 *               wake-ups
 *   life.c      a client's life: fork checks, call brackets (rs__enter/rs__leave), its
 *               references (the last frees it through c->destroy, which client.c sets)
 *   url.c       URL parsing into rs_endpoint_t
 *   transport.c bytes on the wire of every connection: a plain socket or a TLS session
 *   wire.c      commands and replies on one hiredis context
 *   dial.c      one socket opened: connect, close-on-exec, TCP options, TLS handshake
 *   slotmap.c   the Redis Cluster slot map: which master serves a key (no connections)
 *   topology.c  where to connect (the URL's server, the master the sentinels name, a node)
 *   conn.c      connections to Redis: dial, AUTH/SELECT, retries, the pool
 *   cluster.c   loading the slot map with CLUSTER SLOTS
 *   keys.c      key and channel names (hash tags, escaping)
 *   script.c    EVALSHA with SCRIPT LOAD on NOSCRIPT, retries within timeout_ms, error mapping
 *   hold.c      owner identity (thread numbers, owner tokens, acquisition ids), hold lists
 *   notify.c, notify_shard.c  the subscriber connections and threads; wake waiters by id
 *   lease.c, record.c, wdlist.c  the leases; the holder record that rides in the renewals;
 *               the registry of live leases, their local deadlines and loss reports
 *   call.c      one call of a primitive built from its handle (rs_call_t), its argv, the
 *               lease built from it, an acquiring reply decoded
 *   rlvote.c    redlock://: a round's answers decided by quorum (pure functions)
 *   rlround.c, redlock.c  redlock://: every call on all masters at once, decided by quorum;
 *               a lease's op on Redis either way (rs__lease_call)
 *   wdround.c, watchdog.c  one renewal round in one pipeline; the thread that runs them
 *   wait.c      the one blocking loop every primitive uses (deadline, wake-ups, retry)
 *   handle.c, holdobj.c  handles, what a thread holds through them, hold objects
 *   async_dial.c  the event-loop API's dialer threads: the I/O thread's dials and Cluster
 *               slot-map loads (conn.c, cluster.c) made beside it, each result handed back
 *               through its eventfd
 *   timerheap.c, async_wire.c, async_rl.c, async_req.c, async.c  the event-loop API: one
 *               I/O thread per client pipelining the _async calls (under Redlock each round
 *               on every master's pipeline, async_rl.c), their deadlines in one heap,
 *               completions behind one eventfd; it never waits on the network (its dials:
 *               async_dial.c)
 *   client.c    rs_client_t and the public client calls
 * Files on one line are one layer and may call each other (only the event-loop API's do:
 * async.c, async_req.c, async_wire.c and async_rl.c call one another); no file references a
 * function defined in a file listed above it (scripts/layers.sh checks, make check-layers).
 * Calls up go through pointers that client.c sets: topology.c tells the notifier that the
 * master moved through c->topo_hook, wdlist.c starts the watchdog thread through
 * c->wd.start, and the last rs__client_unref (life.c) frees the client through c->destroy.
 * A primitive (primitives/NAME/) builds its keys, runs its script through rs__eval, keeps
 * its holds alive with rs__watch_add and waits with rs__wait_acquire. lib/ never names a
 * primitive.
 */
#ifndef RS_INTERNAL_H
#define RS_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#include "redisync.h"

#define RS_HIDDEN __attribute__((visibility("hidden")))

/* ----- util.c ------------------------------------------------------------------------ */
uint64_t rs__now_ns(void); /* CLOCK_MONOTONIC */
#define RS_NS_PER_MS 1000000ull
#define RS_NO_DEADLINE UINT64_MAX
/* abstime (CLOCK_REALTIME) -> monotonic deadline. EINVAL for NULL or bad tv_nsec. Every
 * public call converts its abstime once, on entry, and passes the monotonic deadline down,
 * so a wall-clock jump during the wait changes nothing; rs__deadline_conversions counts the
 * conversions (tests check "once"). */
int rs__deadline_from(rs_client_t *c, const struct timespec *abstime, uint64_t *out);
extern atomic_ulong rs__deadline_conversions;
/* Records a message for the calling thread and returns code. c may be NULL. */
int rs__fail(rs_client_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* ETIMEDOUT, "deadline passed after N ms of waiting": a blocking wait that began at start_ns
 * (rs__now_ns's clock) ran out of time (wait.c, and the primitives' own waits). */
int rs__fail_timedout(rs_client_t *c, uint64_t start_ns);
void rs__clear_error(void);
/* This thread's message (rs_tls_error) as it stands, and a copy of text put in its place
 * (truncated as rs__fail's): the event-loop API carries a request's message across threads. */
const char *rs__error_text(void);
void rs__error_set(const char *text);
void rs__log(rs_client_t *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Checks a primitive name: non-NULL, 1..RS_NAME_MAX bytes. */
int rs__check_name(rs_client_t *c, const char *name, size_t *len);
void rs__sleep_ns(uint64_t ns);
/* An eventfd made readable (poke) and read back (drain): the event-loop API's wake-ups. */
void rs__aq_poke(int fd);
void rs__aq_drain(int fd);
/* pthread_cond_timedwait until until_ns (rs__now_ns's clock: cv made with CLOCK_MONOTONIC). */
void rs__cv_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t until_ns);

/* A small argument vector for one command; strings are copied into an inline arena. */
#define RS_ARGV_MAX 24
#define RS_ARGV_ARENA 256
typedef struct rs_argv {
    int n;
    const char *v[RS_ARGV_MAX];
    size_t len[RS_ARGV_MAX];
    size_t used;
    char arena[RS_ARGV_ARENA];
} rs_argv_t;
void rs__argv_init(rs_argv_t *a);
void rs__argv_ref(rs_argv_t *a, const char *s, size_t len); /* by reference, no copy */
void rs__argv_str(rs_argv_t *a, const char *s);             /* by reference, strlen */
void rs__argv_fmt(rs_argv_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ----- url.c ------------------------------------------------------------------------- */
#define RS_MODE_SINGLE 0   /* redis:// or unix:// : one server */
#define RS_MODE_SENTINEL 1 /* redis-sentinel:// : the master that the sentinels name */
#define RS_MODE_CLUSTER 2  /* redis-cluster:// : the master that owns the key's slot */
#define RS_MODE_REDLOCK 3  /* redlock:// : every call on all N independent masters (redlock.c) */
#define RS_SEEDS_MAX 16
typedef struct rs_node {
    char host[256];
    int port;
} rs_node_t;
typedef struct rs_endpoint {
    int mode;          /* RS_MODE_* */
    int unix_socket;   /* 1: path is a unix socket */
    char host[256];    /* single mode: the server */
    int port;
    int nseeds;        /* sentinel: the sentinels to ask; cluster: nodes to ask for the map;
                          redlock: the masters (node i of redlock.c is seeds[i]) */
    rs_node_t seeds[RS_SEEDS_MAX];
    char master[128];  /* sentinel mode: the monitored master's name */
    char path[108];
    char user[128];
    char pass[256];
    int has_pass;
    int db;
    /* TLS (rediss:// or ?tls=1): the files are read once, at rs_client_open (transport.c) */
    int tls;
    int tls_verify;    /* 1 unless tls_verify=0 */
    char tls_ca[512];
    char tls_cert[512];
    char tls_key[512];
    char tls_servername[256]; /* empty: the host as the URL or the topology names it */
} rs_endpoint_t;
/* Parses url into ep. EINVAL with a message (never containing the password). */
int rs__url_parse(rs_client_t *c, const char *url, rs_endpoint_t *ep);

#include "internal_io.h"

/* ----- hold.c ------------------------------------------------------------------------ */
/* A never-reused number for the calling thread (pthread_self values are reused). */
uint64_t rs__thread_no(void);
/* A number from the same sequence that no thread will ever have: a hold object's owner. */
uint64_t rs__owner_no_new(void);
/* The owner token of owner number no (a thread's, or a hold object's) for client c:
 * "SECRETHEX:NO". Redis stores only its SHA1. buf must hold RS_TOKEN_MAX bytes. */
#define RS_TOKEN_MAX 64
size_t rs__owner_token(const rs_client_t *c, uint64_t no, char *buf);
/* A fresh acquisition id "PUBLICID:N.SECRET", unique per client; SECRET is 64 random bits.
 * In a Cluster that takes sharded wake-ups (rs__cluster_sharded) it is "PUBLICID:sN.SECRET":
 * the waiter that queues under it listens on the sharded channel of the name
 * (PREFIX:{TAG}:w:PUBLICID, notify_shard.c), and the scripts' wake() SPUBLISHes there.
 * "PUBLICID:N" (the route) may be published in messages that only ask for a retry; the whole
 * id is published only in the grant that ends the acquisition, so nobody who cannot read
 * the queue keys can forge a grant. buf: RS_ACQID_MAX bytes. */
#define RS_ACQID_MAX 64
#define RS_ACQID_SEP '.' 
size_t rs__acq_id(rs_client_t *c, char *buf);
int rs__acq_sharded(const char *id); /* 1 for "PUBLICID:sN..." */
/* getrandom(2), retried on EINTR: 0 or -1 */
int rs__random_bytes(unsigned char *buf, size_t n);

typedef struct rs_lease rs_lease_t;
/* What one thread holds through one handle. */
typedef struct rs_hold {
    uint64_t thread_no; /* the owning thread's number, or a hold object's own (owner_no) */
    struct rs_handle *obj; /* a hold object (rs_mutex_acquire...): its handle; else NULL */
    char acqid[RS_ACQID_MAX];
    uint64_t fence;
    unsigned count;     /* re-entries (recursive kinds) or permits */
    rs_lease_t *lease;  /* renewed by the watchdog; NULL once cleared */
    struct rs_hold *next;
} rs_hold_t;
rs_hold_t *rs__hold_find(rs_hold_t *list, uint64_t thread_no);
void rs__hold_unlink(rs_hold_t **list, rs_hold_t *h);

/* ----- wdlist.c, watchdog.c ---------------------------------------------------------- */
/* A lease the watchdog renews: a hold (lost when a renewal does not confirm it) or a
 * waiter's queue entry (its waiter is poked to retry when the entry is gone or granted).
 *
 * Convention shared by every script: ARGV[1] is the operation, and a lease keeps the keys
 * and the arguments that follow it. The watchdog runs renew_op with them (reply: integer
 * 1 renewed, 0 gone, 2 granted to this waiter meanwhile); rs_client_close runs release_op
 * with them for every hold still registered. */
struct rs_waiter;
struct rs_lease_scratch; /* room to rebuild a lease's call in (defined after rs_call_t) */
/* A built lease's call, rebuilt on demand from its owner's block (and l->src): keys, op,
 * arguments (no fence). */
typedef void rs_lease_build_fn(const rs_lease_t *l, const char *op, struct rs_lease_scratch *s,
                               rs_argv_t *out);
struct rs_lease {
    /* immutable after rs__lease_new */
    rs_client_t *c;
    const rs_script_t *script;
    rs_lease_build_fn *build; /* a built lease (rs__lease_init_built): no copy of the call */
    const void *src;          /* a built lease's: what its owner gives build (static); a
                                 copied one's, in the lease's block: its arguments, nargs
                                 pointers (rs__lease_arg), then their lengths, then the bytes
                                 (op placeholder, keys, then the arguments after the op; one
                                 allocation, sized to fit: leases are what a hold costs) */
    const char *renew_op, *release_op;
    long lease_ms;
    struct rs_waiter *waiter; /* set for queue entries */
    uint64_t fence;          /* Redlock: the hold's token, sent with renew and release (set
                                before rs__watch_add, then read-only; 0: none) */
    const char *kind;
    char *name;
    short nkeys;
    short nargs;             /* a copied lease's arguments with the op placeholder; 0: built */
    atomic_uint rl_held;     /* Redlock: the masters that may still hold it (bit i): those
                                that granted it; a renewal or release answered 0 there
                                clears the bit. 0: not known (no rule uses it then) */
    atomic_int refs;
    /* watchdog state, under the watchdog mutex (next to the counts: no hole) */
    unsigned char lost, reported, registered;
    uint64_t due_ns;         /* next renewal */
    uint64_t deadline_ns;    /* local expiry: last confirmed send + lease - drift */
    rs_lease_t *prev, *next;
};
/* A copied lease's argument i (0 is the op placeholder, 1..nkeys the keys): its bytes
 * (NUL-terminated) and *len. */
static inline const char *rs__lease_arg(const rs_lease_t *l, int i, size_t *len)
{
    const char *const *v = (const char *const *)l->src;
    *len = ((const size_t *)(const void *)(v + l->nargs))[i];
    return v[i];
}
/* args (keys, then the arguments after the op) are copied; kind must be static. The lease
 * starts with one reference, the caller's. NULL on ENOMEM. One allocation. */
rs_lease_t *rs__lease_new(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                          const char *renew_op, const char *release_op, long lease_ms,
                          const char *kind, const char *name, size_t namelen);
/* A built lease in the caller's memory: l must start a block of malloc's (zeroed), which
 * the last rs__lease_unref frees, so whatever build reads in that block lives as long as
 * the lease (lib/async.c: a request's queue entry, the request's first member). name
 * (NUL-terminated) must live as long too; kind must be static. One reference, the
 * caller's. */
void rs__lease_init_built(rs_lease_t *l, rs_client_t *c, const rs_script_t *s, int nkeys,
                          rs_lease_build_fn *build, const char *renew_op,
                          const char *release_op, long lease_ms, const char *kind,
                          char *name);
/* The lease's call with op: keys, op, arguments (and under Redlock, when l->fence is set,
 * "" and the fence as ARGV[9] and ARGV[10]). out may point into *s, which must outlive it. */
void rs__lease_argv(const rs_lease_t *l, const char *op, struct rs_lease_scratch *s,
                    rs_argv_t *out);
/* The lease's first key (its primitive's main key; out may point into *s). */
const char *rs__lease_key(const rs_lease_t *l, struct rs_lease_scratch *s, size_t *len);
void rs__lease_unref(rs_lease_t *l);
/* Registers l: Redis confirmed it with ttl_ms left by a call sent at sent_ns. */
int rs__watch_add(rs_client_t *c, rs_lease_t *l, uint64_t sent_ns, long ttl_ms);
/* When the last renewal that Redis confirmed was sent. */
uint64_t rs__lease_confirmed_ns(rs_client_t *c, rs_lease_t *l);
void rs__watch_del(rs_client_t *c, rs_lease_t *l);
/* Whether a live hold registered by this client has main key key and owner token token
 * (the calling thread holds the primitive through some handle). */
int rs__watch_holds(rs_client_t *c, const char *key, size_t keylen, const char *token,
                    size_t toklen);
/* Whether l was lost; also marks it lost if its local deadline passed. */
int rs__lease_is_lost(rs_client_t *c, rs_lease_t *l);
/* Marks l lost (Redis said so); on_lost is delivered once, from the watchdog thread. */
void rs__lease_set_lost(rs_client_t *c, rs_lease_t *l);
long rs__lease_remaining_ms(rs_client_t *c, rs_lease_t *l);
void rs__watchdog_stop(rs_client_t *c);
/* The watchdog's counters since the client opened (bench/async/async.c shows that a round
 * is one pipelined round trip): rounds, renewals sent, write batches (a batch: every
 * command of a round written before its first reply is read; a reload after NOSCRIPT adds
 * one), the last round's start (rs__now_ns) and duration. Write batches on one connection
 * (single server, Sentinel; per node under Cluster); Redlock's (rlround.c) are not counted. */
typedef struct rs_wd_stats {
    atomic_ulong rounds, renewals, batches;
    _Atomic uint64_t last_start_ns, last_round_ns;
} rs_wd_stats_t;
void rs__watchdog_stats(rs_client_t *c, rs_wd_stats_t *out);
void rs__watchdog_forget(rs_client_t *c); /* in a fork child: free without the thread */
/* Drift allowance subtracted from every local deadline. */
uint64_t rs__drift_ns(long lease_ms);
/* A lease's renewal period: a third of the lease. */
static inline uint64_t rs__lease_period_ns(const rs_lease_t *l)
{
    return (uint64_t)l->lease_ms * RS_NS_PER_MS / 3;
}
/* Starts the watchdog thread (c->wd.start; wd.mu held). 0 or EAGAIN. */
int rs__watchdog_start(rs_client_t *c);
/* The registry's bookkeeping for the thread and its rounds (wdlist.c; wd.mu held where the
 * name says _locked). A round's result for l: 1 renewed, 0 gone, 2 granted, -1 no answer,
 * RS_RES_APPLIED (rs__wd_checkpoint applied it already: not applied again). */
#define RS_RES_APPLIED 9
void rs__wd_apply_locked(rs_client_t *c, rs_lease_t *l, int res, uint64_t sent, uint64_t after);
/* Marks l lost if it is live and past its local deadline (a queue entry's waiter is poked
 * to retry instead). */
void rs__wd_expire_one_locked(rs_client_t *c, rs_lease_t *l, uint64_t now);
/* Calls on_lost for every queued report, with wd.mu released around the callbacks. */
void rs__wd_deliver_reports(rs_client_t *c);
/* Called when a wait of a round reaches its cut or a 100 ms slice of it: applies the
 * answers already read, marks every lease past its deadline lost and calls on_lost now.
 * The next cut (the nearest deadline of any live lease); 0 to give up (stopping, or no
 * lease of batch still waits for an answer). */
uint64_t rs__wd_checkpoint(rs_client_t *c, rs_lease_t **batch, int *res, int n, uint64_t sent);
void rs__wd_drop_reports(rs_client_t *c); /* in a fork child */
/* A round (wdround.c): rs__wd_connect opens the watchdog's connection to node (< 0: where
 * topology.c says) into *ctxp, retried until *cut with a checkpoint between attempts (n 0:
 * one attempt, a dial ahead of the first renewal); rs__wd_run_rounds renews every lease of
 * batch (results in res, *sent the earliest send time), each wait cut at cut. */
int rs__wd_connect(rs_client_t *c, int node, redisContext **ctxp, rs_lease_t **batch, int *res,
                   int n, uint64_t *cut);
void rs__wd_run_rounds(rs_client_t *c, rs_lease_t **batch, int *res, int n, uint64_t *sent,
                       uint64_t cut);

/* ----- notify.c ---------------------------------------------------------------------- */
#define RS_WAKE_NONE 0
#define RS_WAKE_MSG 1     /* a message for this waiter arrived: see msg */
#define RS_WAKE_RETRY 2   /* try again now (subscriber reconnected, entry renewal said so) */
#define RS_WAKE_TIMEOUT 3 /* the sleep bound passed */
#define RS_WAKE_CANCEL 4  /* the client is closing */
/* A wake-up's details, after the acquisition id: a fence or a count (at most 20 digits),
 * "retry", "s", "b"; a topic's payload, a number. Longer ones are cut (and rechecked).
 * 27: what fills rs_waiter_t up to its links (every pending request embeds one). */
#define RS_WAKE_MSG_MAX 27
typedef struct rs_waiter {
    const char *id;          /* acquisition id: messages on the client channel (the caller's
                                string, alive while w is registered; "" for none) */
    const char *topic;       /* or a watched channel: every message on it wakes this waiter */
    struct rs_shard *shard;  /* the sharded channel it also listens on (notify_shard.c) */
    int wake;
    char msg[RS_WAKE_MSG_MAX];
    unsigned char cb;        /* a callback waiter (rs__notify_add): on_wake, no cv */
    struct rs_waiter *prev, *next;
    union { /* a blocked waiter's, or a callback waiter's (one per pending request: small) */
        struct {
            pthread_cond_t *cv; /* a blocked waiter's (its caller's storage) */
            /* A sleeping waiter's hook (cond.c), called with nt.mu held when a message with
             * details wakes it, before it is signalled: set with rs__notify_arm; it must
             * never block. */
            void (*on_msg)(struct rs_waiter *w);
            void *arg;
        };
        /* A callback waiter (lib/async.c): called instead of signalling cv, with nt.mu held
         * (and maybe the watchdog's wd.mu): it must only hand the wake-up on, never block.
         * It finds its owner from w (the owner embeds it). */
        void (*on_wake)(struct rs_waiter *w);
    };
} rs_waiter_t;
/* Registers w under an acquisition id or a watched topic (the caller keeps id, topic and
 * cv, which this initializes and rs__notify_end destroys, alive until rs__notify_end),
 * starting the subscriber and waiting for its subscription (at most timeout_ms). Messages
 * are matched from then on. */
int rs__notify_begin(rs_client_t *c, rs_waiter_t *w, pthread_cond_t *cv, const char *id,
                     const char *topic);
/* Whether rs__notify_begin would register at once: the subscriber is subscribed (under
 * Redlock on a quorum of masters). wait.c tries without queueing first when it is not. */
int rs__notify_ready(rs_client_t *c);
/* Subscribes (reference-counted) to channel and waits for Redis to confirm it. */
int rs__notify_watch(rs_client_t *c, const char *channel);
void rs__notify_unwatch(rs_client_t *c, const char *channel);
/* The same without waiting (lib/async.c): the confirmation pokes the channel's callback
 * waiters RS_WAKE_RETRY; rs__notify_watch_ready says whether it stands. 0 or ENOMEM. */
int rs__notify_watch_add(rs_client_t *c, const char *channel);
int rs__notify_watch_ready(rs_client_t *c, const char *channel);
/* Sleeps until a wake-up or until_ns. Returns RS_WAKE_*; msg is valid after RS_WAKE_MSG. */
int rs__notify_sleep(rs_client_t *c, rs_waiter_t *w, uint64_t until_ns);
/* Copies w's msg under the notifier's lock: the payload of a topic waiter's last message (the
 * notifier may write it again while the waiter reads). */
void rs__notify_msg(rs_client_t *c, rs_waiter_t *w, char *buf, size_t len);
void rs__notify_end(rs_client_t *c, rs_waiter_t *w);
/* Sets w's on_msg hook (arg in w->arg) under nt.mu; NULL disarms it. */
void rs__notify_arm(rs_client_t *c, rs_waiter_t *w, void (*on_msg)(rs_waiter_t *w), void *arg);
/* Callback waiters (w->on_wake set, w->id filled, no cv): registers w at once (marked
 * w->cb), starting the subscriber if need be but never waiting for it (rs__notify_ready
 * says when it is subscribed; the confirmation pokes every waiter RS_WAKE_RETRY). 0,
 * EAGAIN, ECANCELED. */
int rs__notify_add(rs_client_t *c, rs_waiter_t *w);
void rs__notify_remove(rs_client_t *c, rs_waiter_t *w);
/* Takes w's pending wake-up (RS_WAKE_NONE if none; msg filled after RS_WAKE_MSG). */
int rs__notify_take(rs_client_t *c, rs_waiter_t *w, char *msg, size_t len);
void rs__notify_poke(rs_client_t *c, rs_waiter_t *w, int wake);
void rs__notify_cancel_all(rs_client_t *c);
void rs__notify_stop(rs_client_t *c);
void rs__notify_forget(rs_client_t *c);   /* in a fork child: free without the thread */
/* The master moved: a subscriber connected before is made to reconnect. */
void rs__notify_topology(rs_client_t *c);
/* For notify_shard.c: a message "ACQID DETAILS" for a local waiter; a wake-up of w (nt.mu
 * held). */
void rs__notify_dispatch(rs_client_t *c, const char *payload, size_t len);
void rs__notify_poke_locked(rs_waiter_t *w, int wake);

/* ----- notify_shard.c ---------------------------------------------------------------- */
/* The most sharded channels a client keeps subscribed (one per name it waits on); beyond,
 * the least recently used one nobody waits on is dropped (channels with waiters never are).
 * tests/test_cluster_shard.c waits on more names than this and checks the count. */
#define RS_SHARD_CHANNELS_MAX 1024
/* After rs__notify_begin of a waiter whose acquisition id is sharded ("PUBLICID:sN..."):
 * listens on the sharded channel of key's hash tag, subscribing (SSUBSCRIBE on the master of
 * its slot) and waiting for the confirmation if need be. 0 or an error (lasterror set). */
int rs__notify_shard_begin(rs_client_t *c, rs_waiter_t *w, const char *key, size_t klen);
/* The same for a callback waiter (rs__notify_add; lib/async.c's requests), which must not
 * block: the subscription is started, never waited for; rs__notify_shard_ready says when
 * it stands (and homes the channel once the map knows its slot). 0 or an error. */
int rs__notify_shard_add(rs_client_t *c, rs_waiter_t *w, const char *key, size_t klen);
int rs__notify_shard_ready(rs_client_t *c, rs_waiter_t *w); /* 1: confirmed (or none) */
/* Before w sleeps: 1 if its channel had to move to the slot's current master (the caller
 * retries at once: a wake-up published before the move may be lost), 0 if it stands, or an
 * error. */
int rs__notify_shard_check(rs_client_t *c, rs_waiter_t *w);
/* Before rs__notify_end. */
void rs__notify_shard_end(rs_client_t *c, rs_waiter_t *w);
void rs__notify_shard_stop(rs_client_t *c);
void rs__notify_shard_forget(rs_client_t *c); /* in a fork child */

/* ----- wait.c ------------------------------------------------------------------------ */
/* A waiter registered with the notifier under acqid and, when acqid is sharded, listening
 * on the sharded channel of key's hash tag too (rs__notify_shard_begin). 0 or an error (w
 * then registered nowhere). rs__waiter_end undoes both. cv and acqid as rs__notify_begin's. */
int rs__waiter_begin(rs_client_t *c, rs_waiter_t *w, pthread_cond_t *cv, const char *acqid,
                     const char *key, size_t klen);
void rs__waiter_end(rs_client_t *c, rs_waiter_t *w);
/* The outcome of one acquisition attempt, filled by a primitive's attempt(). */
typedef struct rs_attempt {
    int granted;       /* 1: the caller holds it now */
    int done;          /* 1: nothing to hold any more (once: a run succeeded) */
    int queued;        /* 1: the caller waits in the Redis queue */
    long retry_ms;     /* busy: retry after at most this long (the holder's remaining lease) */
    long ttl_ms;       /* granted: lease left on the hold when Redis answered */
    uint64_t fence;    /* granted: the fencing token */
    uint64_t seen_fence; /* busy: the fencing counter then (stale wake-ups carry no more) */
    uint64_t sent_ns;  /* when the call was sent (a lower bound of when Redis ran it) */
    unsigned rl_granted; /* granted under Redlock: the masters that granted it (bit i) */
} rs_attempt_t;
typedef struct rs_acquire_ops {
    /* One script call: take it, or queue (queue=1) / just report busy (queue=0). */
    int (*attempt)(void *ctx, int queue, rs_attempt_t *out);
    /* Leave the queue after the deadline; may find the caller granted meanwhile. */
    int (*cancel)(void *ctx, rs_attempt_t *out);
    /* A wake-up message addressed to this acquisition: 1 if it grants (out filled). */
    int (*message)(void *ctx, const char *msg, rs_attempt_t *out);
    /* The lease that keeps the caller's queue entry alive while it sleeps. */
    rs_lease_t *(*queue_lease)(void *ctx);
} rs_acquire_ops_t;
/* Acquires through ops: try_only never queues (EBUSY); otherwise sleeps between attempts
 * until granted or deadline_ns (ETIMEDOUT). acqid names the acquisition in wake-ups. */
int rs__wait_acquire(rs_client_t *c, const rs_acquire_ops_t *ops, void *ctx, const char *acqid,
                     int try_only, uint64_t deadline_ns, rs_attempt_t *out);
/* The same, listening also on the sharded channel of key's hash tag (notify_shard.c) when
 * acqid is sharded (rs__acq_sharded); key NULL: as rs__wait_acquire. */
int rs__wait_acquire_key(rs_client_t *c, const rs_acquire_ops_t *ops, void *ctx,
                         const char *acqid, const char *key, int try_only,
                         uint64_t deadline_ns, rs_attempt_t *out);
/* The same on a waiter the caller registered under acqid (w NULL: one of its own). */
int rs__wait_acquire_with(rs_client_t *c, const rs_acquire_ops_t *ops, void *ctx,
                          const char *acqid, const char *key, int try_only,
                          uint64_t deadline_ns, rs_waiter_t *w, rs_attempt_t *out);
/* Waits for an event announced on channel topic (e.g. a latch opening): check(ctx) returns
 * 0 when the event has happened, 1 when not yet, or -error. It runs once, then again after
 * the topic is subscribed, after every message on it or poke, and every recheck_ms (which
 * also lets it refresh what it watches). 0, ETIMEDOUT at deadline_ns, or the error. */
int rs__wait_event(rs_client_t *c, const char *topic, int (*check)(void *ctx), void *ctx,
                   long recheck_ms, uint64_t deadline_ns);

/* ----- redlock.c --------------------------------------------------------------------- */
/* Frees the connections kept for late replies (rs_client_close, a failed open, a fork). */
void rs__rl_forget(rs_client_t *c);
/* rlround.c: the masters (bit i of a mask is master i) and one round on all of them */
unsigned rs__rl_all_mask(const rs_client_t *c);
long rs__rl_ms_left(uint64_t deadline); /* ms until deadline (monotonic ns), rounded up */
int rs__rl_is_down(rs_client_t *c, int i); /* marked down: not dialled while others suffice */
void rs__rl_mark(rs_client_t *c, int i, int up);
/* Dials the masters of want without a connection (those not marked down first, the others
 * only if have plus those do not make a quorum), each with at most half of what is left
 * until deadline; dial(arg, i, budget_ms) returns 0 when connected. How many it connected. */
int rs__rl_dial_all(rs_client_t *c, unsigned want, int have, uint64_t deadline,
                    int (*dial)(void *arg, int i, long budget_ms), void *arg);
/* Command j of a round, for one master (the same for all). */
typedef void (*rs_rl_build_fn)(void *arg, int j, rs_argv_t *out);
/* Writes commands 0..ncmd-1 on every ctx[i] != NULL, reads the replies of all together
 * until deadline or until `enough` answered and the rest had as long again; rep[i * ncmd
 * + j]. Returns the masters whose connection failed; those that still owe replies go to
 * *late (late NULL: to the result). */
unsigned rs__rl_fanout(redisContext **ctx, int n, rs_rl_build_fn build, void *arg, int ncmd,
                       int enough, uint64_t deadline, redisReply **rep, unsigned *late);
/* The watchdog's form: no `enough` (every master is waited for until deadline), and
 * skip[i] replies that master i still owes from earlier rounds are read and dropped first
 * (the new commands go out behind them). On return skip[i] is what master i still owes (its
 * connection kept: in *late, not broken); 0 for a broken one. */
unsigned rs__rl_fanout_owed(redisContext **ctx, int n, rs_rl_build_fn build, void *arg,
                            int ncmd, int *skip, uint64_t deadline, redisReply **rep,
                            unsigned *late);
/* One script call on the masters of mask within budget_ms, from the pool; rep[i] master i's
 * reply (NULL: no answer; transient errors count as none); masters with a reply are
 * skipped; NOSCRIPT loads the script and sends again within the round. */
void rs__rl_round(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                  unsigned mask, long budget_ms, redisReply **rep);
/* The same for a call that may take several rounds: keep[i] (in and out) is master i's
 * connection on which this call was sent and whose reply is still due; the next round reads
 * it there instead of sending the call again. The caller hands what is left in keep to
 * rs__rl_keep_late when it is done. */
void rs__rl_round_keep(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                       unsigned mask, long budget_ms, redisReply **rep, rs_conn_t **keep);
void rs__rl_keep_late(rs_client_t *c, int i, rs_conn_t *k);
/* At open: a quorum of the masters reachable (and none refusing AUTH/SELECT) within
 * timeout_ms. 0, RS_ECONN, RS_ESERVER. */
int rs__rl_open(rs_client_t *c);
/* What the masters answered to a call whose reply is an integer. */
typedef struct rs_rl_tally {
    int answered;  /* masters that answered with an integer */
    int pos;       /* ... >= 1 (renewed, released, the new count) */
    int zero;      /* ... 0 (not ours there) */
    unsigned zero_mask; /* the masters that answered 0 (bit i) */
    long long max;
} rs_rl_tally_t;
/* Runs the call on every master at once; masters that did not answer are asked again until
 * a quorum has answered or timeout_ms has passed. 0 (a quorum answered: see t), RS_ECONN,
 * or the error a master answered with when no quorum answered otherwise. */
int rs__rl_call_int(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                    long lease_ms, rs_rl_tally_t *t);
int rs__rl_lease_int(rs_client_t *c, rs_lease_t *l, const char *op, rs_rl_tally_t *t);
/* Runs the lease's script with op (e.g. its release_op) through rs__eval; under Redlock on
 * every master (rs__rl_lease_int), with *out NULL. Here, not in lease.c: the one file under
 * its callers (client.c, handle.c) that knows both ways. */
int rs__lease_call(rs_client_t *c, rs_lease_t *l, const char *op, redisReply **out);
/* ----- rlvote.c: Redlock's decisions, shared by redlock.c and async_rl.c ------------- */
struct rs_call;
struct rs_handle;
/* An acquiring round's answers ("acq" or "cancel"), tallied master by master. */
typedef struct rs_rl_votes {
    int answered, granted, busy, mine;
    int err;            /* the first error a master answered with (0: none) */
    int queued;         /* a master queued the waiter */
    unsigned undo;      /* to undo unless granted: masters that granted, erred or did not
                           answer (and so may have granted) */
    unsigned gmask, mmask, bmask; /* granted, this owner's already (EDEADLK), busy */
    long min_ttl;       /* the smallest lease granted (-1: none) */
    long busy_ttl;      /* the smallest ms a busy master's holder or reservation has left */
    uint64_t fence;     /* the largest token granted */
    uint64_t seen_fence; /* the largest fencing counter a busy answer showed */
} rs_rl_votes_t;
void rs__rl_votes_init(rs_rl_votes_t *v);
/* Master i's reply r (NULL: no answer) to k's acquiring call, into v. */
void rs__rl_vote(rs_rl_votes_t *v, const struct rs_call *k, int i, const redisReply *r);
/* The round's verdict (q: the quorum; elapsed_ms since the call was sent; *validity: the
 * smallest lease granted less elapsed_ms and the drift allowance). The caller undoes v->undo
 * unless granted. */
enum { RS_RL_GRANT, RS_RL_ERROR, RS_RL_NOQUORUM, RS_RL_BUSY, RS_RL_SPLIT };
int rs__rl_decide(const rs_rl_votes_t *v, int q, long lease_ms, long elapsed_ms, long *validity);
/* RS_RL_BUSY: how long to wait for a wake-up before checking again; *seen (the counter the
 * last busy answer showed) and *recheck_ms (the last such wait) are the acquisition's. */
long rs__rl_busy_wait(const rs_rl_votes_t *v, long lease_ms, uint64_t *seen, long *recheck_ms);
/* RS_RL_SPLIT: a random back-off of 5..50 ms (at most a tenth of the lease, at least 1). */
long rs__rl_backoff_ms(long lease_ms);
/* A round's budget on all masters: lease/5 within 50..500 ms, at most timeout_ms. */
long rs__rl_round_ms(const rs_client_t *c, long lease_ms);
/* Appends ARGV[9..11] of a Redlock call of the mutex script to v: the waiter's ticket (0: none,
 * for an undo), no fence floor, the attempt's number (mutex.lua's header). */
void rs__rl_argv_tail(rs_argv_t *v, uint64_t ticket, unsigned attempt);
/* RS_ECONN, its message the blocking calls' and the event loop's: only answered of the
 * masters answered within timeout_ms, those of amask (bit i: master i), not a quorum. */
int rs__rl_noquorum(rs_client_t *c, int answered, unsigned amask);
/* Whether a release's (or renewal's) answers t say that hold lease l was lost. */
int rs__rl_denied(rs_client_t *c, rs_lease_t *l, const rs_rl_tally_t *t);
/* One line at RS_LOG_DEBUG per acquiring round: what each master answered (G granted, b
 * busy, - no answer or an error, m this owner's) and the verdict, e.g.
 *   redlock mutex "n1" acq #4: Gb- (busy 2727 ms, valid -1 ms), split vote: back-off 23 ms */
void rs__rl_log_round(rs_client_t *c, const struct rs_handle *h, const char *op,
                      unsigned attempt, const rs_rl_votes_t *v, long validity,
                      const char *what, long ms);
/* The watchdog's round under Redlock: res[i] as run_round's (1 renewed on a quorum, 0 denied
 * by more than N - quorum masters, 2 a queue entry found granted, -1 no answer). */
/* The start of a renewal round of n leases (watchdog.c, redlock.c): every res[i] = -1 (no
 * answer yet); returns the round's I/O budget in ms: the time left until cut_ns, the
 * nearest local deadline of the client's live leases (at least 10 ms). A round may wait
 * for slow answers that long, not just a share of the lease: a hold is lost at its
 * deadline, not at a slow reply. */
long rs__round_begin(int *res, int n, uint64_t cut_ns);
void rs__rl_renew_round(rs_client_t *c, rs_lease_t **batch, int *res, int n, uint64_t *sent,
                        uint64_t cut_ns);
/* Closes the watchdog's connection to master i (c->wd.cctx[i], on its thread only) and
 * forgets the replies it owed. */
void rs__rl_wd_drop(rs_client_t *c, int i);
/* rs__wait_acquire's operations under Redlock (ctx: the rs_call_t). */
extern const rs_acquire_ops_t rs__rl_ops;
/* 0, or ENOTSUP with a message when the client is in Redlock mode: for the primitives that
 * cannot be offered there (why: the primitive's own words). */
int rs__rl_refuse(rs_client_t *c, const char *kind, const char *why);

/* ----- primitives -------------------------------------------------------------------- */
/* What inspection needs to know of a primitive kind: its script and keys. Each primitive
 * defines one (rs_kind_NAME); primitives/inspect.c lists them. Every script answers the ops
 * "info" (read-only, reply {exists, nholders, ttl, fence, waiters, writer, size, free,
 * count, holder acqids...}) and "force" (drop the holds, wake waiters; reply: holds
 * dropped). */
typedef struct rs_kind {
    const char *name;
    const rs_script_t *script;
    const char *const *suffixes;
    int nkeys;
} rs_kind_t;

/* ----- handle.c ---------------------------------------------------------------------- */
/* The part every primitive handle shares; embed it first in the primitive's struct.
 *
 * A handle stores its name once and its main key once: key[0] = PREFIX:{NAME}:KIND (one
 * malloc'd, NUL-terminated string) with the name's bytes inside it. The other keys,
 * PREFIX:{NAME}:KIND:SUFFIX, are built per call in rs_call_t (rs__call_init), so a handle
 * costs its struct plus one string, whatever its kind's number of keys (docs/performance.md,
 * "Memory"). */
#define RS_KEYS_MAX 6
#define RS_PREFIX_MAX 128  /* longest client prefix (rs_config_t.prefix) */
#define RS_KIND_MAX 15     /* longest kind name ("mutex", "rwlock", ...) */
#define RS_SUFFIX_MAX 15   /* longest key suffix ("fence", "holders", ...) */
/* PREFIX:{NAME}:KIND with the name escaped (keys.c: one '\' more at most) */
#define RS_MAINKEY_MAX (RS_PREFIX_MAX + 2 + 1 + RS_NAME_MAX + 2 + RS_KIND_MAX)
#define RS_KEY_MAX (RS_MAINKEY_MAX + 1 + RS_SUFFIX_MAX) /* PREFIX:{NAME}:KIND:SUFFIX */
typedef struct rs_handle {
    rs_client_t *c;
    const char *kind;          /* "mutex", "rwlock", ...: part of every key */
    const rs_script_t *script;
    const char *const *suffixes; /* the kind's (static): suffixes[i] names key i, i >= 1 */
    char *key[1];              /* key[0]: the main key PREFIX:{NAME}:KIND (the latch's channel,
                                  the multilock's order); the only key stored */
    size_t klen[1];
    const char *name;          /* namelen bytes INSIDE key[0], not NUL-terminated: print it
                                  with "%.*s", RS_HNAME(h) */
    size_t namelen;
    int nkeys;
    atomic_long lease_ms;      /* 0: the client's */
    pthread_mutex_t mu;        /* guards holds */
    rs_hold_t *holds;
    atomic_int nobj;           /* hold objects taken through it and not yet released */
    atomic_int inside;         /* threads inside a call that holds nothing but may sleep
                                  (once's run, barrier's wait): destroy answers EBUSY */
} rs_handle_t;
/* printf arguments for "%.*s": the handle's name */
#define RS_HNAME(h) (int)(h)->namelen, (h)->name
/* Key 0 is the main key PREFIX:{NAME}:KIND (suffixes[0] is not read, normally NULL); key i
 * is PREFIX:{NAME}:KIND:suffixes[i]. suffixes must outlive the handle (the kinds' are
 * static): the handle keeps the pointer and builds those keys per call. */
int rs__handle_init(rs_handle_t *h, rs_client_t *c, const char *kind, const rs_script_t *s,
                    const char *name, const char *const *suffixes, int nkeys);
int rs__handle_destroy(rs_handle_t *h); /* EBUSY while a thread holds through it */
/* Allocates a primitive struct of size bytes (rs_handle_t first) and inits it; *out NULL on
 * failure. rs__handle_free destroys and frees it (NULL: 0). */
int rs__handle_new(void *out, size_t size, rs_client_t *c, const char *kind,
                   const rs_script_t *s, const char *name, const char *const *suffixes, int nkeys);
int rs__handle_free(rs_handle_t *h);
/* Entry of a public call: EINVAL for a NULL handle, deadline from abstime (if given), then
 * rs__enter. On 0 the caller must rs__leave(h->c). */
int rs__handle_begin(rs_handle_t *h, const char *kind, const struct timespec *abstime,
                     uint64_t *deadline);
uint64_t rs__handle_fence(const rs_handle_t *h);   /* the calling thread's hold's, or 0 */
long rs__handle_remaining(const rs_handle_t *h);
long rs__handle_lease(const rs_handle_t *h);
int rs__handle_setlease(rs_handle_t *h, long lease_ms);
rs_hold_t *rs__handle_find(const rs_handle_t *h, uint64_t thread_no);
/* Adds hold at the front: rs__handle_find returns a thread's latest hold (the semaphore
 * relies on it). */
void rs__handle_add(rs_handle_t *h, rs_hold_t *hold);
void rs__handle_remove(rs_handle_t *h, rs_hold_t *hold);

/* One script call (or acquisition) by the calling thread through a handle. */
#define RS_CALL_EXTRA_MAX 4
typedef struct rs_call {
    rs_handle_t *h;
    char token[RS_TOKEN_MAX];
    size_t toklen;
    char acqid[RS_ACQID_MAX];
    size_t acqlen;
    char lease[24];
    char maxw[24];
    int nextra;
    char extra[RS_CALL_EXTRA_MAX][32]; /* ARGV[9..]: the primitive's own arguments */
    /* keys 1..nkeys-1 (PREFIX:{NAME}:KIND:SUFFIX), built by rs__call_init from the handle's
     * main key: key i is keys[koff[i]], kklen[i] bytes (offsets, so that a copy of the struct
     * stays valid). Key 0 is the handle's own. */
    unsigned short koff[RS_KEYS_MAX], kklen[RS_KEYS_MAX];
    char keys[(RS_KEYS_MAX - 1) * (RS_KEY_MAX + 1)];
    /* Redlock (redlock.c), for the whole acquisition: its place in every master's queue
     * (the client's wall clock in us when it began), the fencing counter its last busy
     * answer showed, and how long it sleeps before it checks again without a wake-up */
    uint64_t rl_ticket, rl_seen;
    unsigned rl_attempt; /* Redlock: the acquisition's rounds so far (mutex.lua ARGV[11]) */
    long rl_recheck_ms;
    uint64_t owner_no; /* the owner: the calling thread's number, or a hold object's own */
    /* the first attempt's call, sent already on pre at pre_sent (cond.c's re-acquisition
     * written by the subscriber thread): its reply is read instead of a send; NULL mostly */
    struct rs_conn *pre;
    uint64_t pre_sent;
} rs_call_t;
/* Where a built lease's call is rebuilt (rs__lease_argv): a view of its handle and a call. */
typedef struct rs_lease_scratch {
    rs_handle_t view;
    rs_call_t k;
} rs_lease_scratch_t;
/* acqid NULL: a fresh acquisition id; else the id of an existing hold. The owner is the
 * calling thread. */
void rs__call_init(rs_call_t *k, rs_handle_t *h, const char *acqid);
/* The same for a hold object: a fresh owner of its own (a number no thread ever has), so the
 * hold belongs to the program, and any thread may release it. */
void rs__call_init_object(rs_call_t *k, rs_handle_t *h);
/* The same for a given acquisition id and owner number (lib/async.c rebuilds a request's
 * call from what it keeps). */
void rs__call_init_owner(rs_call_t *k, rs_handle_t *h, const char *acqid, uint64_t owner_no);
/* A hold object's acquisition (rs_mutex_acquire...): abstime NULL waits without a deadline,
 * one already past makes one attempt (EBUSY); on 0 *out is the hold, counted in the handle. */
int rs__acquire_object(rs_call_t *k, const struct timespec *abstime, rs_hold_t **out);
void rs__call_extra(rs_call_t *k, const char *arg);
/* keys, [op], token, acqid, lease, channel prefix, mode, max waiters, queue lease, extras */
void rs__call_argv(const rs_call_t *k, const char *op, const char *mode, rs_argv_t *v);
int rs__call_run(const rs_call_t *k, const char *op, const char *mode, redisReply **out);
rs_lease_t *rs__call_lease(const rs_call_t *k, const char *renew_op, const char *release_op);
/* The two halves of a granted acquisition, for a grant made outside rs__acquire (the
 * multilock's one-script path): rs__hold_new allocates the hold and its lease before Redis
 * is asked (a grant never meets ENOMEM); rs__hold_granted records the grant (fence, lease
 * ttl from sent_ns) and hands the lease to the watchdog; rs__hold_discard drops an unused
 * one. The caller then rs__handle_add's the hold. */
int rs__hold_new(const rs_call_t *k, rs_hold_t **out);
void rs__hold_granted(const rs_call_t *k, rs_hold_t *hold, uint64_t fence, long ttl_ms,
                      uint64_t sent_ns);
void rs__hold_discard(rs_hold_t *hold);
/* Decodes the acquiring reply convention into out. EDEADLK for {-1}. */
int rs__decode_grant(const rs_call_t *k, const redisReply *r, rs_attempt_t *out);
/* Decodes a script's "info" reply (primitives/info_decode.c) into out, which it zeroes first.
 * 0; RS_ESERVER for any shape but an array of at least 9 elements (out stays zeroed); EINVAL
 * if out is NULL. Never reads past what r holds, whatever its shape. */
int rs__decode_info(const char *kind, const redisReply *r, rs_info_t *out);
/* Acquires (op "acq"), waiting unless try_only (EBUSY) until deadline (ETIMEDOUT). On 0,
 * *out is a new hold (count 1, lease registered with the watchdog, renewed with op "renew",
 * released at close with op "rel") that the caller adds to its handle. */
int rs__acquire(rs_call_t *k, int try_only, uint64_t deadline, rs_hold_t **out);
/* The same with the hold allocated already (rs__hold_new; freed on failure) and, if w is
 * not NULL, waiting on w (rs__notify_begin'd under k's acqid by the caller, who ends it):
 * cond.c's re-acquisition, whose first attempt may have been sent already (k->pre). */
int rs__acquire_with(rs_call_t *k, int try_only, uint64_t deadline, rs_waiter_t *w,
                     rs_hold_t *hold, rs_hold_t **out);
/* A fresh acquisition by the calling thread through h (no extra arguments), recorded in h. */
int rs__handle_take(rs_handle_t *h, int try_only, uint64_t deadline);
/* Ends a hold the caller already removed from its handle: unregisters its lease, runs op
 * (normally "rel"), frees it. 0, RS_ELOST (lost before or found lost now), RS_ECONN... */
int rs__release(rs_handle_t *h, rs_hold_t *hold, const char *op);

#include "internal_async.h"
#include "internal_client.h"

#endif
