/*
 * internal_client.h - struct rs_client, the state every layer of lib/ keeps in the client,
 * the holder record's calls (record.c) and life.c's (fork checks, call brackets, the
 * client's references). Part of internal.h, which includes it last;
 * include that.
 */
#ifndef RS_INTERNAL_H
#error "include internal.h, not internal_client.h"
#endif

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

    struct rs_async *_Atomic as; /* the event-loop API (async.c): made at the first use */
    atomic_int refs;          /* the opener's and one per handle (life.c) */
    void (*destroy)(rs_client_t *c); /* frees c at the last reference (client.c sets it) */
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
    atomic_uint cond_presends; /* cond.c: re-acquisitions the subscriber sent (for tests) */

    /* topology (topology.c) */
    atomic_uint topo_gen;     /* bumped when the master moved */
    /* called after a bump, so a layer above topology.c reacts without topology.c naming it
     * (client.c sets rs__notify_topology: the subscriber reconnects to the new master) */
    void (*topo_hook)(rs_client_t *c);
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

    /* watchdog (wdlist.c, wdround.c, watchdog.c) */
    struct {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t thread;
        int started, stop;
        int (*start)(rs_client_t *); /* rs__watchdog_start (client.c sets it) */
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
        redisContext *cctx[RS_NODES_MAX]; /* cluster: one per node; redlock: per master */
        /* Redlock: the replies cctx[i] still owes from rounds that ended without them (read
         * and dropped at the next round there, redlock.c), and since when it owes */
        int rl_owed[RS_SEEDS_MAX];
        uint64_t rl_owed_since[RS_SEEDS_MAX];
        _Atomic uint64_t rec_until_ns; /* the holder record (record.c) is alive until then
                                          as far as known; 0: to be written */
        uint64_t rec_retry_ns; /* no early round to write it before this (one a lease) */
        rs_wd_stats_t st;      /* counters (rs__watchdog_stats) */
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

/* ----- life.c (just above util.c, under every other file of lib/) -------------------- */
/* Handles keep the client's memory alive after rs_client_close (then c->closed is 1); the
 * last reference calls c->destroy. */
void rs__client_ref(rs_client_t *c);
void rs__client_unref(rs_client_t *c);
/* 1 in a child of fork() (of the process that opened c). */
int rs__forked(const rs_client_t *c);
/* The fork generation a new client records (and the fork watch set up, once). */
unsigned rs__fork_watch(void);
unsigned rs__fork_generation(void); /* bumped in every fork child (pthread_atfork) */
/* Every public call on a client brackets its work with these: EFORK in a forked child,
 * ECANCELED once closing. */
int rs__enter(rs_client_t *c);
void rs__leave(rs_client_t *c);
