/*
 * driver.h - what the driver's files share (tests/faults/; the program's entry is main.c):
 *
 *   main.c      the scenario table, the command line, the loop over scenarios
 *   procs.c     the worker processes: spawn, reap (and replace), pick one for a fault
 *   schedule.c  the fault schedule: which fault now, on which process or server
 *   phases.c    one scenario: its deployment, the phases (warm-up, faults, quiet, stop,
 *               clean), the checks
 *   net_split.c the split-brain scenarios' deployments and schedule (--net)
 *
 * The phases and limits are described at the top of main.c.
 */
#ifndef RS_FAULTS_DRIVER_H
#define RS_FAULTS_DRIVER_H

#include "faults.h"
#include "redis_server.h"
#include "tls.h"

#define FX_MASTER "fxmaster"

#define PROGRESS_WINDOW_US 8000000
#define QUIET_BOUND_US 20000000
#define MAX_PROCS 16
#define MAX_SCEN 16
#define MAX_STOPPED 3
#define MAX_SPLIT_SRV 9

typedef struct slot {
    pid_t pid;
    int gen;
    int stopped;       /* 0 running, 1 stopped by the driver, 2 stopped itself (cmd stop) */
    int64_t cont_at;
    int cmd;           /* pending command given through the checker: 'k' or 's' */
    int kill_sent;     /* the driver sent SIGKILL */
    int done;          /* exited 0 after stop */
    int crashes;       /* unexpected exits: after 3, the slot is not replaced any more */
    int64_t stop_t;    /* when the driver stopped it (or saw it stopped itself) */
} slot_t;

typedef struct run {
    const scenario_t *sc;
    int index;
    uint64_t rng;
    uint64_t seed;
    ts_server_t *ck_srv;
    redisContext *ck;
    ts_server_t data;
    ts_server_t replica[2];   /* sentinel scenarios: the master's two replicas, and */
    ts_server_t sent[3];      /* the three sentinels; Redlock: data, replica[0], replica[1]
                                 are the three masters */
    ts_server_t cnodes[MAX_SPLIT_SRV]; /* net-cluster-split: 3 masters + 3 replicas (-2r: + 6);
                                          scenario_t.cluster: the 3 masters */
    redisContext *rlconn[2];  /* Redlock: the driver's connections to replica[0] and [1] */
    redisContext *cconn[3];   /* Cluster (scenario_t.cluster): the driver's connections to
                                 cnodes[0..2], the three masters */
    tt_certs_t certs;         /* TLS: the certificates of the scenario (removed at its end) */
    char url[600];            /* what the workers use */
    char ports[96];           /* every port a worker's sockets may go to (the I7 check) */
    redisContext *dconn;      /* the driver's connection to the data server */
    redisContext *pending;    /* DEBUG SLEEP reply still due */
    int64_t pending_until;
    int64_t server_busy_until;
    slot_t slot[MAX_PROCS];
    int phase;                /* 0 warm/faults/quiet: respawn; 1 stop: no respawn */
    int64_t fault_end;        /* when the faults phase ends (a split is not begun too late) */
    int64_t t0;
    char last_detail[96];     /* what the last fault hit, for --verbose */
    restart_win_t restarts[256];
    int nrestarts;
    result_t *res;
} run_t;


extern char g_exe[4096];
extern int g_verbose;
extern int g_sabotage; /* --sabotage: workers sometimes skip the lock; the checks must fail */
extern int g_net;      /* --net: the network scenarios (net.c), inside run.sh's namespace */
extern int g_async_pending; /* --pending N: requests each event-loop worker keeps pending, in
                             every scenario (0: scenario_t.pending, else 300) */

/* slot i runs an event-loop worker (worker_async.c): the scenario's last ASYNC slots */
#define SLOT_ASYNC(R, i) ((i) >= (R)->sc->procs - (R)->sc->async)

/* procs.c */
long long slot_count(run_t *R, int i);
pid_t spawn(run_t *R, int i);
/* Reaps exits and stops of the workers; replaces killed workers while respawning is on. */
void reap(run_t *R);
int nstopped(run_t *R);
/* A random live slot that satisfies the filter, or -1. */
int pick_slot(run_t *R, int need_outside, int min_slot);

/* schedule.c: the fault log on the checker (list "flt", faults.h: check_lost.c reads it) */
void flt_note(run_t *R, int kind, char who, int target, int64_t t0, int64_t t1);
/* schedule.c: injects one fault of the scenario's kinds; the kind, or -1 if none applied now */
int inject(run_t *R);

/* net_split.c (--net: net-sentinel-split, net-cluster-split[-2r]): the deployment, with its
 * processes marked for the cut, its url and ports (0 or -1); every 10 ms of the faults
 * phase, the split schedule (the kind injected or -1); at its end, heal; in the quiet phase,
 * watch for the old master's demotion; after the stop, wait for it (bounded); the keys'
 * TTLs on every master; the servers stopped */
int split_start(run_t *R);
int split_tick(run_t *R);
void split_heal_all(run_t *R);
void split_poll(run_t *R);
void split_end(run_t *R);
int split_scan(run_t *R, long *keys, long *no_ttl);
void split_stop(run_t *R);

/* phases.c */
void run_scenario(run_t *R);

#endif
