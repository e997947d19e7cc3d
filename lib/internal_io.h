/*
 * internal_io.h - the connection and call layer of lib/ (transport, wire, dial, slotmap,
 * topology, conn, cluster, script, keys): how bytes, commands and scripts reach the right
 * Redis. Part of internal.h, which includes it after the types it needs; include that.
 */
#ifndef RS_INTERNAL_H
#error "include internal.h, not internal_io.h"
#endif

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
/* The hash tag of key (the bytes between its first "{" and the next "}", when not empty)
 * and its length; NULL when the whole key is hashed. */
const char *rs__hash_tag(const char *key, size_t len, size_t *taglen);
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
 * named by the first sentinel that answers (timeout_ms for the whole lookup, shared among the
 * sentinels; the next lookup starts after the last one asked); cluster mode node
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
/* Redlock: how many of the URL's masters make a quorum (N/2 + 1). */
int rs__rl_quorum(const rs_client_t *c);
/* READONLY / MASTERDOWN / NOREPLICAS under Sentinel: the master moved, reconnect and retry. */
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
/* The same, asking stop(arg) before each node (nonzero: no more nodes, RS_ECONN): the
 * event-loop API's dialer thread, which a close must not wait for long (async_dial.c). */
int rs__cluster_refresh_stop(rs_client_t *c, int force, long timeout_ms, int (*stop)(void *),
                             void *arg);
/* Whether rs__cluster_refresh(c, 0, ...) would load the map now (no network). */
int rs__cluster_refresh_due(rs_client_t *c);

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
/* Appends to ctx what makes a WAIT cover everything the master did before it (a script
 * that wrote nothing itself, a grant made by another client's script), then WAIT
 * min_replicas wait_ms: two replies (three with asking: ASKING in front). The write: outside
 * Cluster PUBLISH CHANNEL:sync "" (replicated, no key); in a Cluster, where a PUBLISH is not
 * replicated but copied over the bus to every node, SET PREFIX:{NAME}:sync "" PX 1000 in the
 * slot of key (PREFIX:{NAME}:..., a key of the same node). 0, or -1 (ctx broken). */
int rs__sync_append(rs_client_t *c, redisContext *ctx, const char *key, size_t klen, int asking,
                    long wait_ms);
/* rs__eval_confirm whose first send was made already on pre at pre_sent (only its reply is
 * read; cond.c writes a woken waiter's re-acquisition from the subscriber thread); pre is
 * returned to the pool. Without confirm (min_replicas 0) and outside Cluster only. */
int rs__eval_pre(rs_client_t *c, const rs_script_t *s, int nkeys, const rs_argv_t *args,
                 redisReply **out, long long *acked, uint64_t *sent_ns, rs_conn_t *pre,
                 uint64_t pre_sent);
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
/* LOADING, BUSY, TRYAGAIN, MASTERDOWN, CLUSTERDOWN, NOREPLICAS: wait and send again. */
int rs__is_transient(const redisReply *r);

/* ----- keys.c ------------------------------------------------------------------------ */
/* "PREFIX:{NAME}:KIND" with NAME escaped so its hash tag is never empty. Returns a malloc'd
 * string (NULL on ENOMEM) and its length. */
char *rs__key(const rs_client_t *c, const char *name, size_t namelen, const char *kind,
              const char *suffix, size_t *len);
