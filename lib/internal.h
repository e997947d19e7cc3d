/*
 * internal.h - what the core (lib/) offers the primitives, and nothing public.
 *
 * Layers, bottom up (one file per concern):
 *   util.c      clocks, deadlines, per-thread error text, logging, argument vectors
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
 *   lease.c, watchdog.c, record.c  the leases, the thread renewing them in one pipeline, the
 *               holder record that rides in it
 *   redlock.c, rlround.c  redlock://: every call on all masters at once, decided by quorum
 *   notify.c, notify_shard.c  the subscriber connections and threads; wake waiters by id
 *   wait.c      the one blocking loop every primitive uses (deadline, wake-ups, retry)
 *   hold.c, handle.c, holdobj.c  owner identity, what a thread holds, handles, hold objects
 *   life.c, client.c  fork checks and call brackets; rs_client_t and the public client calls
 * Still pointing up: topology.c pokes notify.c when the master moves, redlock.c calls
 * handle.c's call helpers, and handle.c takes client references through client.c.
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
/* abstime (CLOCK_REALTIME) -> monotonic deadline. EINVAL for NULL or bad tv_nsec. */
int rs__deadline_from(rs_client_t *c, const struct timespec *abstime, uint64_t *out);
/* Records a message for the calling thread and returns code. c may be NULL. */
int rs__fail(rs_client_t *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void rs__clear_error(void);
void rs__log(rs_client_t *c, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Checks a primitive name: non-NULL, 1..RS_NAME_MAX bytes. */
int rs__check_name(rs_client_t *c, const char *name, size_t *len);
void rs__sleep_ns(uint64_t ns);
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

/* ----- transport.c ------------------------------------------------------------------- */
/* One per client: the SSL_CTX (its CA, certificate and key read at open), the socket BIO
 * method and each server's last session. 0, or RS_ECONN/ENOMEM with err filled. */
typedef struct rs_tls rs_tls_t;
int rs__tls_new(const rs_endpoint_t *ep, rs_tls_t **out, char *err, size_t errlen);
void rs__tls_free(rs_tls_t *t);
void rs__tls_forget_sessions(rs_tls_t *t); /* the next connects make full handshakes */
/* TLS handshake on ctx (connected, blocking) with the server called name (checked against
 * its certificate, sent as SNI when not an IP address), until deadline_ns. 0: every later
 * byte of ctx goes through the session; RS_ECONN: a TLS failure that a retry would not
 * cure (verification, a plain server, a timeout); -1: the network failed (worth a retry);
 * ENOMEM. err says why. ctx must then be freed with rs__ctx_free. */
int rs__tp_tls_start(rs_tls_t *t, redisContext *ctx, const char *name, int port,
                     uint64_t deadline_ns, char *err, size_t errlen);
int rs__tp_is_tls(const redisContext *ctx);
/* The connection failed for a TLS reason (an alert, a refused certificate): no retry. */
int rs__tp_fatal(const redisContext *ctx);
int rs__tp_reused(const redisContext *ctx); /* its handshake resumed a session */
/* "plain", or the protocol and cipher ("TLSv1.3 TLS_AES_256_GCM_SHA384"). */
void rs__tp_describe(const redisContext *ctx, char *buf, size_t len);
/* Bounds each later read or write on ctx (ms; 0: none). */
void rs__tp_set_timeout(redisContext *ctx, long ms);
/* Sends all of buf: 0, or RS_ECONN with why (may be NULL) filled; ctx itself is left as it
 * was (the caller marks it failed: another thread may be reading it). Never raises SIGPIPE.
 * Safe while another thread waits in rs__tp_fill on the same ctx. */
int rs__tp_send(redisContext *ctx, const char *buf, size_t len, char *why, size_t whylen);
/* One read from the connection into ctx's reader: 1 bytes fed, 0 none ready (nonblock
 * only), -1 failed (ctx->err, ctx->errstr set; a timeout is REDIS_ERR_IO with EAGAIN). */
int rs__tp_fill(redisContext *ctx, int nonblock);
/* Bytes already inside the TLS session, which poll() on the socket cannot see. */
int rs__tp_pending(const redisContext *ctx);
/* Frees ctx and its TLS session (nothing is written). Every context of the library. */
void rs__ctx_free(redisContext *ctx);

/* ----- wire.c ------------------------------------------------------------------------ */
/* One command on ctx. 0 with *out set (possibly an error reply), or RS_ECONN when the
 * connection failed (the context is then unusable). Writes never raise SIGPIPE. */
int rs__ctx_command(redisContext *ctx, int argc, const char **argv, const size_t *lens,
                    redisReply **out);
/* Pipelining on ctx: append, then read (which first flushes what was appended). */
int rs__ctx_append(redisContext *ctx, int argc, const char **argv, const size_t *lens);
int rs__ctx_read(redisContext *ctx, redisReply **out);
/* Sends what was appended to ctx, all of it, through the transport (rs__tp_send): 0, or
 * RS_ECONN with the context marked failed. The only way the library writes commands. */
int rs__ctx_flush(redisContext *ctx);
/* Sets ctx's socket (send and receive) timeouts to what is left until end_ns: 0, or
 * RS_ECONN when nothing is left. */
int rs__ctx_timeout_until(redisContext *ctx, uint64_t end_ns);
/* Sends what was appended (within end_ns), then waits with poll() for one reply until
 * end_ns. 0 with *out set; RS_ECONN when the connection failed (ctx unusable); ETIMEDOUT
 * when no reply was complete by end_ns (ctx still usable: the reply may come later). */
int rs__ctx_read_until(redisContext *ctx, uint64_t end_ns, redisReply **out);

/* ----- dial.c ------------------------------------------------------------------------ */
/* One socket to node (NULL: the URL's unix socket), connected, close-on-exec, with the
 * library's TCP options and, when the client has TLS, the handshake done, all before
 * end_ns. 0 with *out set; -1: the network failed (worth a retry); RS_ECONN: a TLS failure
 * a retry would not cure; ENOMEM. why says why (no address prefix: callers add theirs). */
int rs__dial(rs_client_t *c, const rs_node_t *node, uint64_t end_ns, redisContext **out,
             char *why, size_t whylen);

/* ----- slotmap.c --------------------------------------------------------------------- */
#define RS_NODES_MAX 64
unsigned rs__cluster_slot(const char *key, size_t len); /* CRC16 of the hash tag & 16383 */
void rs__cluster_init(rs_client_t *c);                  /* the URL's nodes become the table */
void rs__cluster_free(rs_client_t *c);
/* Index of host:port in the node table, adding it; -1 when the table is full. cl.mu held. */
int rs__cluster_node_index_locked(rs_client_t *c, const char *host, size_t hlen, int port);
void rs__cluster_stale(rs_client_t *c); /* a node failed: reload the map before next use */
/* 1 if the last CLUSTER SLOTS showed only Redis >= 7.0 masters (and classic pub/sub is not
 * forced): waiters then take sharded wake-ups (notify_shard.c). */
int rs__cluster_sharded(rs_client_t *c);
/* The node serving key's slot (an index into the node table), -1 if unknown. */
int rs__cluster_node_of(rs_client_t *c, const char *key, size_t len);
int rs__cluster_node(rs_client_t *c, int idx, rs_node_t *out); /* 0 or -1 */
int rs__cluster_nnodes(rs_client_t *c);
/* The nodes that serve at least one slot, at most max of them. */
int rs__cluster_masters(rs_client_t *c, int *idx, int max);
/* A MOVED or ASK error: the node it names (added to the table), *ask set for ASK. MOVED
 * also updates the slot and marks the map stale. -1 if err is neither. */
int rs__cluster_redirect(rs_client_t *c, const char *err, int *ask);

/* ----- topology.c -------------------------------------------------------------------- */
/* Where the next connection goes: single mode the URL's server; sentinel mode the master
 * named by the first sentinel that answers (each asked with timeout_ms); cluster mode node
 * number node of slotmap.c's table (node < 0: any node, in turn). 0 or RS_ECONN with why
 * filled. */
int rs__topo_target(rs_client_t *c, int node, long timeout_ms, rs_node_t *out, char *why,
                    size_t whylen);
/* Checks a fresh, authenticated connection to node: sentinel mode needs ROLE master.
 * 0, or RS_ECONN (try again: not the master yet) with why filled. */
int rs__topo_check(rs_client_t *c, redisContext *ctx, const rs_node_t *node, char *why,
                   size_t whylen);
/* A reply or a broken connection says the master moved: drop pooled connections. */
void rs__topo_changed(rs_client_t *c);
unsigned rs__topo_gen(rs_client_t *c);
/* READONLY / MASTERDOWN outside single mode: the master moved, reconnect and retry. */
int rs__is_topology_error(const rs_client_t *c, const redisReply *r);
/* Sentinel mode: the thread that follows +switch-master (started at open, stopped at close;
 * rs__topo_free releases what start set up). No-ops in other modes. */
int rs__topo_start(rs_client_t *c);
void rs__topo_stop(rs_client_t *c);
void rs__topo_free(rs_client_t *c);

/* ----- conn.c ------------------------------------------------------------------------ */
typedef struct rs_conn {
    redisContext *ctx;
    int node;          /* cluster: the node table index it is connected to; else -1 */
    unsigned gen;      /* topology generation it was opened in (stale ones are dropped) */
    struct rs_conn *next;
    int owed;             /* Redlock: replies still due on it (redlock.c, late masters) */
    uint64_t owed_since;  /* ... since when (monotonic ns) */
} rs_conn_t;
/* Opens a connection (connect, timeouts, AUTH, SELECT, close-on-exec), retrying refused
 * connects until deadline_ns. io_timeout_ms bounds each later read/write (0: none). */
int rs__conn_connect(rs_client_t *c, uint64_t deadline_ns, long io_timeout_ms, redisContext **out);
/* The same to a given node of the cluster table (node < 0: any; other modes ignore it). */
int rs__conn_connect_to(rs_client_t *c, int node, uint64_t deadline_ns, long io_timeout_ms,
                        redisContext **out);
/* The same with a hook called between failed attempts: it returns the deadline to go on
 * to (it may move: the watchdog's is its nearest hold deadline), or 0 to give up. */
typedef uint64_t (*rs_retry_fn)(void *arg);
int rs__conn_connect_retry(rs_client_t *c, int node, uint64_t deadline_ns, long io_timeout_ms,
                           rs_retry_fn between, void *arg, redisContext **out);
/* Pool: take a live connection (or open one), give it back (broken ones are freed).
 * rs__conn_get_node takes one to a given cluster node (node < 0: any). */
int rs__conn_get(rs_client_t *c, uint64_t deadline_ns, rs_conn_t **out);
int rs__conn_get_node(rs_client_t *c, int node, uint64_t deadline_ns, rs_conn_t **out);
void rs__conn_put(rs_client_t *c, rs_conn_t *k, int broken);
/* One connection attempt (no retry) to node, connect and handshake within budget_ms: for
 * Redlock, where a master that is down must cost one refused connect, not timeout_ms. */
int rs__conn_connect_once(rs_client_t *c, int node, long budget_ms, long io_timeout_ms,
                          redisContext **out);
/* A pooled connection to node, or one attempt at a new one (rs__conn_connect_once). */
int rs__conn_get_once(rs_client_t *c, int node, long budget_ms, rs_conn_t **out);
/* An idle pooled connection to node (node < 0: to any), or NULL. */
rs_conn_t *rs__conn_take_idle(rs_client_t *c, int node);
void rs__conn_pool_free(rs_client_t *c);
/* ----- cluster.c --------------------------------------------------------------------- */
/* (Re)loads the slot map with CLUSTER SLOTS from the first node that answers: always when
 * force, else only when a MOVED made it stale (at most every 100 ms). 0, RS_ECONN, RS_ESERVER. */
int rs__cluster_refresh(rs_client_t *c, int force, long timeout_ms);

/* ----- script.c ---------------------------------------------------------------------- */
typedef struct rs_script {
    const char *name;
    const unsigned char *body;
    size_t len;
    const char *sha; /* 40 hex digits, computed at build time */
} rs_script_t;
/* Runs script s with EVALSHA (loading it on NOSCRIPT), retrying connection failures and
 * transient server states (LOADING, BUSY) until timeout_ms has passed. args holds the keys
 * then the arguments. On 0, *out is a non-error reply the caller frees. Errors: RS_ECONN,
 * RS_ESERVER (text in lasterror), ECANCELED, and the scripts' own error replies "RSQUEUE",
 * "RSNOENT", "RSINVAL" as RS_EQUEUE, ENOENT, EINVAL. */
int rs__eval(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
             redisReply **out);
/* rs__eval, and with min_replicas > 0 confirms the call with WAIT min_replicas
 * replica_timeout_ms sent on the same connection right behind it (after a PUBLISH of ours,
 * so that WAIT covers the call even when it wrote nothing itself). *acked is WAIT's count
 * (-1 when WAIT failed or min_replicas is 0); the caller decides what a shortfall means.
 * *sent_ns (if not NULL): when the call that was answered was sent, a lower bound of when
 * Redis ran it (the retries before it, TRYAGAIN, LOADING, a reconnect, came earlier). */
int rs__eval_confirm(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                     redisReply **out, long long *acked, uint64_t *sent_ns);
/* How many script calls this thread has sent (each send of rs__eval_confirm counts, its
 * retries too): a caller that compares the count around one call learns whether it was
 * re-sent, i.e. whether a lost reply may have let the script run twice. */
unsigned rs__eval_sends(void);
/* Builds the argv of EVALSHA sha nkeys args... into out (references only). */
void rs__evalsha_argv(const rs_script_t *s, int nkeys, const rs_argv_t *args, rs_argv_t *out);
/* SCRIPT LOAD s on ctx. 0, RS_ECONN or RS_ESERVER. */
int rs__script_load(rs_client_t *c, redisContext *ctx, const rs_script_t *s);
/* Maps an error reply to a code and records its text. */
int rs__reply_error(rs_client_t *c, const redisReply *r);
int rs__is_noscript(const redisReply *r);
/* LOADING, BUSY, TRYAGAIN, MASTERDOWN, CLUSTERDOWN: wait and send again. */
int rs__is_transient(const redisReply *r);

/* ----- keys.c ------------------------------------------------------------------------ */
/* "PREFIX:{NAME}:KIND" with NAME escaped so its hash tag is never empty. Returns a malloc'd
 * string (NULL on ENOMEM) and its length. */
char *rs__key(const rs_client_t *c, const char *name, size_t namelen, const char *kind,
              const char *suffix, size_t *len);

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
unsigned rs__fork_generation(void); /* life.c: bumped in every fork child (pthread_atfork) */

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

/* ----- watchdog.c -------------------------------------------------------------------- */
/* A lease the watchdog renews: a hold (lost when a renewal does not confirm it) or a
 * waiter's queue entry (its waiter is poked to retry when the entry is gone or granted).
 *
 * Convention shared by every script: ARGV[1] is the operation, and a lease keeps the keys
 * and the arguments that follow it. The watchdog runs renew_op with them (reply: integer
 * 1 renewed, 0 gone, 2 granted to this waiter meanwhile); rs_client_close runs release_op
 * with them for every hold still registered. */
struct rs_waiter;
struct rs_lease {
    /* immutable after rs__lease_new */
    rs_client_t *c;
    const rs_script_t *script;
    int nkeys;
    rs_argv_t args;          /* op placeholder, keys, then arguments (pointing into store) */
    char *store;
    const char *renew_op, *release_op;
    long lease_ms;
    struct rs_waiter *waiter; /* set for queue entries */
    char fence[24];          /* Redlock: the hold's token, sent with renew and release (set
                                before rs__watch_add, then read-only) */
    atomic_uint rl_held;     /* Redlock: the masters that may still hold it (bit i): those
                                that granted it; a renewal or release answered 0 there
                                clears the bit. 0: not known (no rule uses it then) */
    const char *kind;
    char *name;
    /* watchdog state, under the watchdog mutex */
    uint64_t due_ns;         /* next renewal */
    uint64_t deadline_ns;    /* local expiry: last confirmed send + lease - drift */
    int lost, reported, registered;
    atomic_int refs;
    rs_lease_t *prev, *next;
};
/* args (keys, then the arguments after the op) are copied; kind must be static. The lease
 * starts with one reference, the caller's. NULL on ENOMEM. */
rs_lease_t *rs__lease_new(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                          const char *renew_op, const char *release_op, long lease_ms,
                          const char *kind, const char *name, size_t namelen);
/* The lease's call with op: keys, op, arguments (and under Redlock, when l->fence is set,
 * "" and the fence as ARGV[9] and ARGV[10]). */
void rs__lease_argv(const rs_lease_t *l, const char *op, rs_argv_t *out);
/* Runs the lease's script with op (e.g. its release_op) through rs__eval; under Redlock on
 * every master (rs__rl_lease_int), with *out NULL. */
int rs__lease_call(rs_client_t *c, rs_lease_t *l, const char *op, redisReply **out);
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
void rs__watchdog_forget(rs_client_t *c); /* in a fork child: free without the thread */
/* Drift allowance subtracted from every local deadline. */
uint64_t rs__drift_ns(long lease_ms);

/* ----- notify.c ---------------------------------------------------------------------- */
#define RS_WAKE_NONE 0
#define RS_WAKE_MSG 1     /* a message for this waiter arrived: see msg */
#define RS_WAKE_RETRY 2   /* try again now (subscriber reconnected, entry renewal said so) */
#define RS_WAKE_TIMEOUT 3 /* the sleep bound passed */
#define RS_WAKE_CANCEL 4  /* the client is closing */
typedef struct rs_waiter {
    char id[RS_ACQID_MAX];   /* acquisition id: messages on the client channel */
    const char *topic;       /* or a watched channel: every message on it wakes this waiter */
    struct rs_shard *shard;  /* the sharded channel it also listens on (notify_shard.c) */
    pthread_cond_t cv;
    int wake;
    char msg[96];
    struct rs_waiter *prev, *next;
} rs_waiter_t;
/* Registers w under an acquisition id or a watched topic (the caller keeps topic alive),
 * starting the subscriber and waiting for its subscription (at most timeout_ms). Messages
 * are matched from then on. */
int rs__notify_begin(rs_client_t *c, rs_waiter_t *w, const char *id, const char *topic);
/* Whether rs__notify_begin would register at once: the subscriber is subscribed (under
 * Redlock on a quorum of masters). wait.c tries without queueing first when it is not. */
int rs__notify_ready(rs_client_t *c);
/* Subscribes (reference-counted) to channel and waits for Redis to confirm it. */
int rs__notify_watch(rs_client_t *c, const char *channel);
void rs__notify_unwatch(rs_client_t *c, const char *channel);
/* Sleeps until a wake-up or until_ns. Returns RS_WAKE_*; msg is valid after RS_WAKE_MSG. */
int rs__notify_sleep(rs_client_t *c, rs_waiter_t *w, uint64_t until_ns);
void rs__notify_end(rs_client_t *c, rs_waiter_t *w);
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
 * the least recently used one nobody waits on is dropped. */
#define RS_SHARD_CHANNELS_MAX 1024
/* After rs__notify_begin of a waiter whose acquisition id is sharded ("PUBLICID:sN..."):
 * listens on the sharded channel of key's hash tag, subscribing (SSUBSCRIBE on the master of
 * its slot) and waiting for the confirmation if need be. 0 or an error (lasterror set). */
int rs__notify_shard_begin(rs_client_t *c, rs_waiter_t *w, const char *key, size_t klen);
/* Before w sleeps: 1 if its channel had to move to the slot's current master (the caller
 * retries at once: a wake-up published before the move may be lost), 0 if it stands, or an
 * error. */
int rs__notify_shard_check(rs_client_t *c, rs_waiter_t *w);
/* Before rs__notify_end. */
void rs__notify_shard_end(rs_client_t *c, rs_waiter_t *w);
void rs__notify_shard_stop(rs_client_t *c);
void rs__notify_shard_forget(rs_client_t *c); /* in a fork child */

/* ----- wait.c ------------------------------------------------------------------------ */
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
/* Waits for an event announced on channel topic (e.g. a latch opening): check(ctx) returns
 * 0 when the event has happened, 1 when not yet, or -error. It runs once, then again after
 * the topic is subscribed, after every message on it or poke, and every recheck_ms (which
 * also lets it refresh what it watches). 0, ETIMEDOUT at deadline_ns, or the error. */
int rs__wait_event(rs_client_t *c, const char *topic, int (*check)(void *ctx), void *ctx,
                   long recheck_ms, uint64_t deadline_ns);

/* ----- redlock.c --------------------------------------------------------------------- */
int rs__rl_quorum(const rs_client_t *c); /* N/2 + 1 */
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
/* One script call on the masters of mask within budget_ms, from the pool; rep[i] master i's
 * reply (NULL: no answer; transient errors count as none); masters with a reply are
 * skipped; NOSCRIPT loads the script and sends again within the round. */
void rs__rl_round(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                  unsigned mask, long budget_ms, redisReply **rep);
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
    long rl_recheck_ms;
    uint64_t owner_no; /* the owner: the calling thread's number, or a hold object's own */
} rs_call_t;
/* acqid NULL: a fresh acquisition id; else the id of an existing hold. The owner is the
 * calling thread. */
void rs__call_init(rs_call_t *k, rs_handle_t *h, const char *acqid);
/* The same for a hold object: a fresh owner of its own (a number no thread ever has), so the
 * hold belongs to the program, and any thread may release it. */
void rs__call_init_object(rs_call_t *k, rs_handle_t *h);
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
/* A fresh acquisition by the calling thread through h (no extra arguments), recorded in h. */
int rs__handle_take(rs_handle_t *h, int try_only, uint64_t deadline);
/* Ends a hold the caller already removed from its handle: unregisters its lease, runs op
 * (normally "rel"), frees it. 0, RS_ELOST (lost before or found lost now), RS_ECONN... */
int rs__release(rs_handle_t *h, rs_hold_t *hold, const char *op);

/* ----- client.c ---------------------------------------------------------------------- */
struct rs_client {
    rs_endpoint_t ep;
    char *prefix;
    size_t prefix_len;
    char *channel_prefix;     /* "PREFIX:client:" */
    char *channel;            /* "PREFIX:client:PUBLICID": this client's wake-up channel */
    char *label;              /* rs_config_t.label (NULL: none), in the holder record */
    long lease_ms, timeout_ms, replica_timeout_ms;
    int min_replicas;
    int confirm_wakeups;      /* rs_config_t.confirm_wakeups: a grant message is re-checked */
    unsigned max_waiters;
    void (*on_lost)(const char *kind, const char *name, void *arg);
    void *on_lost_arg;
    void (*log)(int level, const char *msg, void *arg);
    void *log_arg;
    rs_tls_t *tls;            /* TLS: the client's SSL_CTX (transport.c); NULL: plain */

    atomic_int refs;          /* the opener's and one per handle */
    int closed;
    unsigned fork_generation; /* fork detection: see rs__forked */
    char public_id[17];
    char secret_hex[33];
    atomic_uint_fast64_t next_acq;

    /* lifetime: calls in progress, closing flag */
    pthread_mutex_t life_mu;
    pthread_cond_t life_cv;
    int active;
    atomic_int closing;

    /* topology (topology.c) */
    atomic_uint topo_gen;     /* bumped when the master moved */
    atomic_uint topo_next;    /* the sentinel to ask first */
    struct {                  /* the +switch-master watcher (sentinel mode) */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t thread;
        int inited, started, stop;
        int fd;
        /* the master the last +switch-master named (its message carries the address):
         * connections go there first, since a sentinel asked right after the switch may
         * still name the old master, which answers ROLE master until it is demoted */
        int has_hint;
        rs_node_t hint;
    } sw;

    /* cluster slot map (slotmap.c; loaded by cluster.c) */
    struct {
        pthread_mutex_t mu;
        int inited, stale;
        uint64_t refreshed_ns;
        int nnodes;
        rs_node_t nodes[RS_NODES_MAX]; /* append-only: indices never change */
        uint8_t slot[16384];           /* node index + 1; 0: unknown */
        atomic_int sharded;            /* rs__cluster_sharded */
        int detected, classic_forced;
    } cl;

    /* Redlock (redlock.c): a master whose connect failed or hung is not dialled again
     * before this (monotonic ns) while the others can make a quorum without it */
    struct {
        _Atomic uint64_t down_until[RS_SEEDS_MAX];
        /* a connection per master whose reply came after the round had decided: kept (not
         * dropped and dialled again) until the reply is read, at the next round there */
        rs_conn_t *_Atomic late[RS_SEEDS_MAX];
    } rl;

    /* connection pool (conn.c) */
    pthread_mutex_t pool_mu;
    rs_conn_t *idle;
    int nidle;

    /* watchdog (watchdog.c) */
    struct {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t thread;
        int started, stop;
        uint64_t wake_ns;      /* when the thread plans to wake next */
        rs_lease_t *head;      /* registered leases */
        rs_lease_t **batch;    /* the thread's round buffers (here, not on its stack, so that a
                                  fork child's close can free them) */
        int *res;
        int cap;
        struct rs_report *reports; /* losses to tell on_lost about */
        redisContext *ctx;     /* its own connection */
        unsigned ctx_gen;      /* its topology generation */
        uint64_t dial_after_ns; /* no dial ahead of a renewal before this (one failed) */
        redisContext *cctx[RS_NODES_MAX]; /* cluster: one per node */
        _Atomic uint64_t rec_until_ns; /* the holder record (record.c) is alive until then
                                          as far as known; 0: to be written */
        uint64_t rec_retry_ns; /* no early round to write it before this (one a lease) */
    } wd;

    /* notifier (notify.c) */
    struct {
        pthread_mutex_t mu;
        pthread_cond_t cv;     /* subscription state changes */
        int started, stop, failed;
        int nlinks;            /* subscriber connections: 1, or one per master (Redlock) */
        int nsubscribed;       /* links subscribed to the client's channel now */
        struct rs_nt_link {
            rs_client_t *c;
            int node;          /* -1: where topology.c says; Redlock: the master's number */
            pthread_t thread;
            int started;
            int subscribed;
            int fd;            /* the subscriber socket, for shutdown() on close */
            redisContext *ctx; /* the subscriber connection (freed by a fork child) */
            unsigned conn_gen; /* topology generation of its connection */
        } link[RS_SEEDS_MAX];
        uint64_t generation;   /* bumps on every (re)subscription */
        rs_waiter_t *head;
        struct rs_watch *watches; /* extra channels (latches) */
        /* sharded wake-ups (notify_shard.c): the channels, and one subscriber connection
         * and thread per master that serves one of them */
        struct rs_shard *shards;
        int nshards;
        uint64_t shard_tick;   /* LRU clock */
        struct rs_nt_slink {
            rs_client_t *c;
            int node;          /* index in the cluster node table */
            pthread_t thread;
            int started;
            int fd;            /* -1 while not connected */
            redisContext *ctx;
        } *slink[RS_NODES_MAX];
        char error[160];       /* the server's refusal of a SUBSCRIBE, if any */
    } nt;
};

/* ----- record.c: the client's holder record (PREFIX:{PUBLICID}:client) ------------------ */
/* 1 where the watchdog keeps it (a single server, Sentinel) */
int rs__rec_enabled(const rs_client_t *c);
long rs__rec_ttl_ms(const rs_client_t *c);
/* The record key of the client public_id (idlen bytes) into out; its length, -1 if too long */
int rs__rec_key(const rs_client_t *c, const char *public_id, size_t idlen, char *out,
                size_t outlen);
/* Appends to ctx the record's HSET (full) and its PEXPIRE; the number of replies due (the
 * PEXPIRE's last), -1 on error. */
int rs__rec_append(rs_client_t *c, redisContext *ctx, int full);
/* The PEXPIRE's reply, for a pipeline sent at sent_ns: alive, or to be written again. */
void rs__rec_answered(rs_client_t *c, const redisReply *r, uint64_t sent_ns);

/* Handles keep the client's memory alive after rs_client_close (then c->closed is 1). */
void rs__client_ref(rs_client_t *c);
void rs__client_unref(rs_client_t *c);
/* life.c (the bottom layer, under every other file of lib/): 1 in a child of fork() (of the
 * process that opened c). */
int rs__forked(const rs_client_t *c);
/* The fork generation a new client records (and the fork watch set up, once). */
unsigned rs__fork_watch(void);
/* Every public call on a client brackets its work with these: EFORK in a forked child,
 * ECANCELED once closing. */
int rs__enter(rs_client_t *c);
void rs__leave(rs_client_t *c);

#endif
