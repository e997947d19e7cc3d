/*
 * faults.h - what the parts of the fault-injection suite share (tests/faults/, one program:
 * build/redisync-faults; see mk/faults.mk and docs in main.c).
 *
 *   main.c     the driver: the scenario table and the command line; its parts share
 *              driver.h: procs.c (worker processes), schedule.c (the fault schedule),
 *              phases.c (one scenario's deployment, phases and checks)
 *   inject.c   the faults themselves (processes and the data redis-server)
 *   worker.c   one worker process ("redisync-faults --worker ..."): critical sections on
 *              the data server, recorded on the checker (worker_sync.c: once and barrier;
 *              worker_cond.c: the condition variable's producers and consumers;
 *              worker_async.c: the mutex through the event-loop API, hundreds pending)
 *   check.c    the invariants, computed from what the workers recorded on the checker
 *   checker.c  the checker's scripts and the small hiredis helpers every part uses
 *   topology.c the deployments a scenario runs on (Sentinel, Redlock masters)
 *   net.c      network faults (--net, make test-network): iptables rules inside the test's
 *              own network namespace, the delay program (net_figures.c: the network figures)
 *   net_split.c  split brain under Sentinel and Cluster (--net): a master and its side's
 *              workers cut from the rest, failover, heal, the old master demoted
 *
 * Two redis-servers per run: the *data* server the library uses (faults hit it) and the
 * *checker* (never touched by a fault) where workers record every critical section and run
 * the fenced store. Times are CLOCK_MONOTONIC microseconds, which is one clock for every
 * process of the machine, so sections of different processes can be compared.
 */
#ifndef RS_FAULTS_H
#define RS_FAULTS_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <hiredis/hiredis.h>

/* ---- primitives and scenarios --------------------------------------------------------- */
typedef enum { P_MUTEX, P_RMUTEX, P_RWLOCK, P_SEM, P_LATCH, P_ONCE, P_BARRIER, P_COND } prim_t;

/* Fault kinds. Every kind is counted in the table. */
typedef enum {
    F_KILL_HOLDER,     /* kill -9 (SIGKILL) of a process inside its critical section */
    F_KILL_WAITER,     /* kill -9 of a process outside it (waiting in lock, or between) */
    F_STOP_HOLDER,     /* SIGSTOP inside the section (between fenced read and write), past
                          the lease, then SIGCONT */
    F_STOP_ANY,        /* kill -STOP of a random process past the lease, then kill -CONT */
    F_RESTART_AOF,     /* kill -9 of redis-server, restart (appendonly, appendfsync always) */
    F_RESTART_LOSE,    /* kill -9 of redis-server, restart without persistence: data lost */
    F_PAUSE,           /* CLIENT PAUSE ms ALL, longer than the command timeout */
    F_DEBUG_SLEEP,     /* DEBUG SLEEP s: the server blocks */
    F_CLIENT_KILL,     /* CLIENT KILL ID of one random library connection */
    F_CLIENT_KILL_ALL, /* CLIENT KILL TYPE normal (every data and watchdog connection) */
    F_PUBSUB_KILL,     /* CLIENT KILL TYPE pubsub (every notifier connection) */
    F_SCRIPT_FLUSH,    /* SCRIPT FLUSH (the library reloads on NOSCRIPT) */
    F_FAILOVER,        /* SENTINEL FAILOVER: the replica becomes the master, the old master
                          is demoted some seconds later (sentinel scenarios only) */
    F_NET_BLACKHOLE,   /* every packet of one worker's connections to the data server
                          dropped (no RST) for 1.5-2.5 leases, then healed (net.c) */
    F_NET_ONEWAY,      /* the same, replies only: requests arrive, replies do not */
    F_NET_SLOW_LOSSY,  /* 100 +- 25 ms each way and 5 % loss on every data link, all along */
    F_NET_FLAP,        /* the data port dropped for everyone for 1-3 s */
    F_NET_RL_PART,     /* Redlock: one worker's packets to and from one master dropped for
                          1.5-2.5 leases (the other workers and masters untouched) */
    F_NET_SPLIT,       /* split brain: the master (Sentinel) or one shard's master (Cluster)
                          and the workers on its side cut from everything else for longer
                          than the failover, then healed (net_split.c) */
    F_COUNT
} fault_t;

extern const char *const fault_names[F_COUNT];

#define FB(k) (1u << (k))

/* Network scenarios (net.c): which fault a --net scenario injects. */
typedef enum {
    NET_NONE, NET_BLACKHOLE, NET_ONEWAY, NET_SLOW_LOSSY, NET_FLAP, NET_RL_PART,
    NET_SPLIT_SENTINEL, NET_SPLIT_CLUSTER, NET_SPLIT_CLUSTER2, /* net_split.c (CLUSTER2: two */
    NET_SPLIT_CLUSTER2A /* replicas per shard; 2A: one cut along with the master) */
} netkind_t;
#define NET_IS_SPLIT(sc) ((sc)->net >= NET_SPLIT_SENTINEL && (sc)->net <= NET_SPLIT_CLUSTER2A)
#define NET_SPLIT_A 3  /* a split: worker slots 0..NET_SPLIT_A-1 are on the cut master's side */
#define NET_GID0 20000 /* --net: worker SLOT runs with group id NET_GID0 + SLOT */

typedef struct scenario {
    const char *name;
    prim_t prim;
    int persist;          /* 1: --appendonly yes --appendfsync always; 0: no persistence */
    int procs;            /* worker processes (>= 8) */
    int seconds;          /* fault phase */
    long lease_ms;
    long timeout_ms;
    unsigned faults;      /* FB(kind) mask */
    int names;            /* names contended (mutex, rmutex, rwlock, sem) */
    int sem_size;         /* semaphore permits; barrier: parties */
    int latch_count;      /* latch: count-downs per round (= number of count-down processes) */
    long round_ms;        /* latch: one round every round_ms */
    int sentinel;         /* 1: a master, a replica and three sentinels; workers use
                             redis-sentinel:// and the data server is whichever is master */
    int min_replicas;     /* the workers' rs_config_t.min_replicas (WAIT-confirmed holds) */
    int redlock;          /* 1: three masters (appendonly, fsync always), redlock:// URL;
                             every server fault hits one master, drawn at random */
    int net;              /* netkind_t: a network scenario (only with --net) */
    int tls;              /* 1: the data server speaks TLS (certificates made at start), the
                             workers use rediss://; faults go through its plain admin port */
    int optin;            /* 1: runs only when --only names it (a known failure, kept as its
                             reproduction: see docs/reliability.md) */
    int async;            /* mutex: the last ASYNC slots are event-loop workers
                             (worker_async.c), each keeping PENDING requests pending */
    int cluster;          /* 1: a Cluster of three masters, no replicas (topology.c), the
                             workers on redis-cluster://; each server fault hits one master,
                             drawn at random */
    int pending;          /* async: requests each event-loop worker keeps pending (0: 300);
                             --pending N sets it for every scenario */
} scenario_t;

extern const char *prim_names[];

/* ---- time ----------------------------------------------------------------------------- */
static inline int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline void sleep_us(int64_t us)
{
    if (us <= 0)
        return;
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) == -1) {
    }
}

/* CLOCK_REALTIME now + ms, for the timed calls. */
static inline struct timespec abs_in_ms(long ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + (long long)ms * 1000000LL;
    ts.tv_sec = (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    return ts;
}

/* splitmix64: the one pseudo-random generator (seeded, so a run can be repeated). */
static inline uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline long rnd_range(uint64_t *s, long lo, long hi) /* [lo, hi] */
{
    return lo + (long)(rnd_next(s) % (uint64_t)(hi - lo + 1));
}

/* ---- checker (checker.c) -------------------------------------------------------------- */
/* Checker keys (the checker is flushed before each scenario):
 *   stop           set by the driver: finish the current section (latch: the last round)
 *   cmd:SLOT       "kill" | "stop": a fault the worker carries out inside its next section
 *   in:SLOT        "NAME T" while SLOT is inside a section (the driver picks waiters by it)
 *   n:SLOT         sections (latch: rounds) completed by SLOT, any generation
 *   sec            list of section records (see worker.c, rec_section)
 *   ev             list of in-section fault events "K|S SLOT T NAME FENCE [PENDING]"
 *                  (PENDING: an event-loop worker's requests pending at the fault)
 *   flt            the driver's fault log "KIND M|W TARGET T0 T1": KIND a fault_t, M a
 *                  server fault on Redlock master (Cluster node) TARGET, W a process fault
 *                  on slot TARGET; [T0, T1] when it acted (a restart: down to up; PAUSE and
 *                  DEBUG SLEEP: their length; a stop: SIGSTOP to SIGCONT; kills: T0 = T1)
 *   lat            list of latch records "D|W ROUND SLOT T0 T1 RC"
 *   onc            once: "SLOT GEN ROUND T_CALL T_RET RAN", one per call that returned 0
 *   bar            barrier: "SLOT GEN T_CALL T_RET RC G0 G1" per wait (G0, G1: the
 *                  generation read from the data server before the call and after it)
 *   cq:head cq:tail cq:s:I   cond: the bounded buffer (worker_cond.c), cq:over its
 *                  overflows; cprod / ccons: "ITEM SLOT GEN TOKEN" per committed produce /
 *                  consume, written atomically with the buffer update
 *   oround         once: the highest round a worker has started (respawns start below it)
 *   err            hash "lock:RC" / "unlock:RC" / ... -> count of non-zero return codes
 *   pend:SLOT      event-loop workers: requests pending now (written every 50 ms)
 *   aout           event-loop workers: hash "granted" / "ETIMEDOUT" / "ECANCELED" / ... ->
 *                  how many of their requests ended so (worker_async.c)
 *   exit:SLOT:GEN  "ELOST ONLOST SOCKETS REENTRY_BAD" written by a worker that exited cleanly
 *   hi:NAME ctr:NAME acc:NAME bad:NAME   the fenced store (see CK_FREAD / CK_FWRITE)
 */
extern const char CK_FREAD[];  /* KEYS hi, ctr; ARGV token -> {1, value} | {0, highest} */
extern const char CK_FWRITE[]; /* KEYS hi, ctr, acc, bad; ARGV token, expected, new -> 1 | 0 */
extern const char CK_ENTER[];  /* KEYS in:SLOT, cmd:SLOT; ARGV "NAME T" -> cmd or nil */

redisContext *ck_connect(int port);            /* exits 3 on failure */
redisReply *ck_cmd(redisContext *c, const char *fmt, ...); /* exits 3 on a broken link */
long long ck_int(redisContext *c, const char *fmt, ...);   /* integer or decimal string; -1 */
/* SCRIPT LOAD body into sha (41 bytes). */
void ck_load(redisContext *c, const char *body, char *sha);

/* ---- results (check.c) ---------------------------------------------------------------- */
enum {
    V_I1,     /* a truthful section had a fenced read or write refused */
    V_I2,     /* tokens not rising in grant order among truthful sections */
    V_I3,     /* exclusion: truthful overlap / above N permits / writer overlapping */
    V_I4,     /* counter != accepted writes, or an accepted write found another value */
    V_I5,     /* latch opened early */
    V_I6,     /* refused without RS_ELOST; loss over a lossy restart not reported;
                 on_lost count != RS_ELOST count */
    V_I7,     /* a key without TTL; a library socket left open after close */
    V_I8,     /* once: fn ran after a confirmed success; a caller returned 0 before any run
                 had succeeded; two confirmed successes */
    V_I9,     /* barrier: a party passed before a generation tripped after its arrival; two
                 serial parties in one generation; a tripped generation without exactly
                 PARTIES arrivals and one serial */
    V_I10,    /* cond: an item consumed twice, lost, consumed out of order or never
                 produced; the buffer above its capacity; a consumption outside a recorded
                 section of its (surviving) worker */
    V_LOST,   /* Redlock: a hold reported lost (RS_ELOST, on_lost) with no fault around it
                 that can explain it (check_lost.c) */
    V_LIVE,   /* no progress in a phase; a waiter that did not get through */
    V_API,    /* a return code the API does not allow there; a worker crash */
    V_COUNT
};
extern const char *const viol_names[V_COUNT];

typedef struct result {
    const scenario_t *sc;
    long sections, truthful, elost, other_rc;
    long refused_reported;      /* sections with a refused fenced op and RS_ELOST */
    long dup_tokens;            /* I2 duplicates, reported separately */
    long faults[F_COUNT];
    long violations[V_COUNT];
    long processes;             /* processes started, respawns included */
    long lock_errors;           /* non-zero lock returns (RS_ECONN under stalls, ...) */
    long orphans;               /* EDEADLK from an orphan of a failed call (documented limit,
                                   docs/design.md; see worker.c, orphan()) */
    long restart_lost;          /* holds that spanned a lossy restart, told RS_ELOST */
    long onlost;                /* on_lost calls reported by cleanly exiting workers */
    int64_t *takeover;          /* us, one per holder kill/stop */
    int ntakeover;
    int64_t *waits;             /* us, one per section: the lock call until its grant */
    int nwaits;
    double seconds;
    int setup_failed;
    /* network scenarios (net.c, net_check); times in us */
    long net_cuts, cut_holders; /* cuts; holds that a cut caught */
    int64_t *detect;            /* cut -> on_lost of a hold the cut caught */
    int ndetect;
    int64_t *ntake;             /* cut -> the next grant of that name to another worker */
    int nntake;
    int64_t *recover;           /* heal -> the cut worker's next grant */
    int nrecover;
    long recover_slow;          /* recoveries later than lease + timeout_ms */
    long false_lost;            /* net-slow-lossy: RS_ELOST or on_lost (Redis kept every hold) */
    long onlost_late;           /* a cut holder's on_lost after another worker's grant */
    long part_lost;             /* net-rl-part: cut holds reported lost (their quorum broken) */
    int64_t margin_min;         /* the least time from a cut holder's on_lost to that grant */
    long margin_n;
    /* split brain (net_split.c); times in us */
    int64_t *promote;           /* cut -> the other side has promoted a new master */
    int npromote;
    int64_t *demote;            /* heal -> the old master is a replica */
    int ndemote;
    long split_nofailover;      /* cuts during which no replica was promoted */
    long split_nodemote;        /* heals after which the old master stayed master 30 s */
    long split_votes;           /* Cluster, two replicas: cuts without a promotion because the
                                   replicas' election split (net_split.c, split_vote) */
    int64_t *far_n0;            /* cut -> the first grant of n0 (the cut shard's name) to a
                                   worker of the far side */
    int nfar_n0;
    long far_n0_during;         /* ... of which before the heal */
    long far_n0_never;          /* cuts after which the far side never got n0 */
    /* event-loop workers (worker_async.c): the requests pending in the process at each kill
     * -9 or SIGSTOP that hit one (in-section ones from its "ev" record, the others from its
     * pend:SLOT at the fault); their outcomes over the scenario (the "aout" hash) */
    struct { int kind, slot; long pending; } apend[64];
    int napend;
} result_t;

/* A restart window (for the loss check of a restart without persistence). */
typedef struct restart_win {
    int64_t down, up;
    int lossy;
} restart_win_t;

/* Computes every invariant of one finished scenario from the checker into r; prints each
 * violation (the first ones of each kind in full). */
void check_scenario(redisContext *ck, const scenario_t *sc, result_t *r,
                    const restart_win_t *restarts, int nrestarts, int verbose);
/* Redlock (check_lost.c): every hold reported lost is explained by a fault of the driver's
 * log (the checker's "flt"): a stop of its own process around it, or a server fault begun
 * after its grant round could begin and before its unlock returned; else V_LOST */
void check_lost(redisContext *ck, const scenario_t *sc, result_t *r, int verbose);
/* barrier: every tripped generation in the data server's record of counted arrivals
 * (PREFIX:{B}:barrier:out) has PARTIES arrivals and one serial (I9) */
void check_barrier_record(int data_port, const scenario_t *sc, result_t *r);
#define BARRIER_NAME "B"
#define COND_CAP 3 /* cond: the bounded buffer's capacity (worker_cond.c) */
void viol(result_t *r, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- the tables (report.c) ------------------------------------------------------------ */
/* Prints the tables of the scenarios that ran (ran[k]) and the closing line "LABEL: ok" or
 * "LABEL: FAILED"; returns 1 if failed was set or any had a violation or failed to set up. */
int report_print(const scenario_t *scenarios, int nscen, const result_t *res, const int *ran,
                 uint64_t seed, int64_t elapsed_us, const char *label, int failed);
long total_viol(const result_t *r);

/* ---- the worker (worker.c) ------------------------------------------------------------ */
int worker_main(int argc, char **argv);
/* report.c: the pending counts at the faults that hit event-loop workers, and how their
 * requests ended (the checker's "aout" hash) */
void async_report(redisContext *ck, const result_t *r);
void apend_add(result_t *r, int kind, int slot, long pending);

/* ---- injection (inject.c) ------------------------------------------------------------- */
struct ts_server;
/* Runs one server-side fault on the data server; conn is the driver's connection to it
 * (replaced when it breaks). Returns 0 when injected. For DEBUG SLEEP, *pending receives a
 * connection whose reply is still due (free it after *busy_until_us). */
int inject_pause(redisContext **conn, struct ts_server *data, long ms);
int inject_debug_sleep(struct ts_server *data, long ms, redisContext **pending);
int inject_client_kill_one(redisContext **conn, struct ts_server *data, uint64_t *rng);
int inject_client_kill_type(redisContext **conn, struct ts_server *data, const char *type);
int inject_script_flush(redisContext **conn, struct ts_server *data);
/* SENTINEL FAILOVER name, asked of the sentinel s. 0 when accepted (the switch follows). */
int inject_failover(struct ts_server *s, const char *name);
/* Counts the keys under prefix: and those without a TTL (PTTL -1); prints the first few. */
int scan_ttls(struct ts_server *data, const char *prefix, long *keys, long *no_ttl);

/* ---- deployments (topology.c) --------------------------------------------------------- */
/* Three masters with their data (appendonly, fsync always); url gets the redlock:// URL,
 * ports the comma-separated ports. */
int start_redlock_masters(struct ts_server *m[3], char *url, size_t urllen, char *ports,
                          size_t portslen);
/* A master (data), two replicas and three sentinels watching master_name; url gets the
 * redis-sentinel:// URL, ports every port. */
int start_sentinel_topology(struct ts_server *data, struct ts_server *replica,
                            struct ts_server *sent, const char *master_name, char *url,
                            size_t urllen, char *ports, size_t portslen);
/* A Cluster of three masters (redis-cli --cluster create); url gets the redis-cluster://
 * URL of the three, ports their ports. */
int start_cluster_masters(struct ts_server *nodes, char *url, size_t urllen, char *ports,
                          size_t portslen);
/* The server the sentinels name master now (data when none answers). */
struct ts_server *current_master(struct ts_server *data, struct ts_server *replica,
                                 struct ts_server *sent, const char *master_name);

/* ---- the network (net.c; --net, make test-network) ------------------------------------ */
extern const scenario_t net_scenarios[];
extern const int net_nscen;
/* --net: 0 when this process runs inside the namespace run.sh made (RS_NETNS), never the
 * root's, and build/redisync-delayq exists; installs the atexit and signal clean-ups. */
int net_guard(int verbose);
int net_child(int slot);    /* in a forked worker before exec: group id NET_GID0 + slot */
/* Scenario start (before the workers): the connmark rules on every data port (Redlock: the
 * three masters'); the delay and loss of the slow-lossy scenarios. 0 or -1. */
int net_begin(const scenario_t *sc, const int *ports, int nports, uint64_t seed);
/* Called every 10 ms of the faults phase: cuts and heals; the kind injected or -1. */
int net_tick(redisContext *ck, uint64_t *rng, result_t *res, char *detail, size_t len);
void net_heal_all(redisContext *ck); /* end of the faults phase: heal, release a waiter */
void net_end(void);                  /* every rule removed, the delay program stopped */
/* Adds "iptables -t TABLE -A CHAIN spec" (recorded: net_end and the signal handler remove
 * it); its index, or -1 (reported). net_rule_del removes it again. */
int net_rule_add(const char *table, const char *chain, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int net_rule_del(int i);
/* net_figures.c: the figures of one network scenario from the checker's records */
void net_check(redisContext *ck, const scenario_t *sc, result_t *r);
/* The network figures table; 1 if a net-slow-lossy run had a false loss report. */
int net_report(const scenario_t *scen, int nscen, const result_t *res, const int *ran);
/* net_split.c: the split figures of one scenario (promotion and demotion times, n0 on the
 * far side); whether its deployment must give the cut shard's names to the far side during
 * the split (two replicas per Cluster shard: a liveness violation if not) */
void split_report(const scenario_t *sc, const result_t *r);
int split_far_live(const scenario_t *sc);

#endif
