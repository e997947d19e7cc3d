/*
 * redisync.h - distributed pthread-style synchronization primitives backed by Redis.
 *
 * This is the only public header of libredisync. Everything a program may rely on is
 * declared and documented here: types, functions, error codes and their semantics.
 *
 * Conventions (they hold for every function below unless its comment says otherwise):
 *
 *  - Functions that can fail return 0 or a positive error number, like pthreads. Standard
 *    errno values are used where one fits; the library's own codes start at 1001 (RS_E*).
 *    rs_strerror() describes every code; rs_client_lasterror() holds a precise message
 *    for the calling thread's last failure.
 *  - Bad input (NULL pointers, empty names, names over RS_NAME_MAX bytes, deadlines with
 *    tv_nsec outside 0..999999999, malformed URLs) returns EINVAL. The library never
 *    prints, exits or aborts; it logs only through a log callback the caller installs.
 *  - A hold belongs to the calling thread of the calling client. Every hold is a lease of
 *    lease_ms, renewed every lease_ms/3 by the client's watchdog thread. When a hold is lost
 *    (Redis says it is gone or taken, or no renewal was confirmed before its local deadline)
 *    on_lost is called once from a library thread, and the holding thread's next unlock
 *    returns RS_ELOST.
 *  - Deadlines are absolute CLOCK_REALTIME times, as in pthread_mutex_timedlock; they are
 *    converted to the monotonic clock on entry. A deadline already past makes one attempt.
 *  - Handles are opaque. rs_X_destroy() frees the local handle only (Redis is untouched)
 *    and returns EBUSY while a thread of this process holds through it; destroy(NULL) is a
 *    no-op returning 0. A handle may be shared by all threads of the process.
 *  - Every function is thread-safe. Blocking functions are marked "Blocks".
 *  - After fork(), a client opened in the parent returns RS_EFORK from every call in the
 *    child; rs_client_close() there only frees memory.
 */
#ifndef REDISYNC_H
#define REDISYNC_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RS_VERSION_MAJOR 0
#define RS_VERSION_MINOR 1
#define RS_VERSION_PATCH 0
#define RS_VERSION_STRING "0.1.0"

#if defined(__GNUC__) && defined(RS_BUILDING_LIBRARY)
#define RS_API __attribute__((visibility("default")))
#else
#define RS_API
#endif

/* Longest accepted primitive name, in bytes (names are any bytes but NUL). */
#define RS_NAME_MAX 512
#define RS_LABEL_MAX 63 /* rs_config_t.label */

/* The library's own error codes. They are ABI: never renumbered, never reused. */
#define RS_ELOST   1001 /* the caller's hold had been lost before this call: its lease ran out,
                           it was taken over, or it was not renewed in time. Mutual exclusion
                           may have been broken meanwhile. */
#define RS_ECONN   1002 /* Redis stayed unreachable for timeout_ms during the call */
#define RS_ESERVER 1003 /* Redis answered with an error (WRONGTYPE, NOPERM, OOM, ...); the
                           server's text is in rs_client_lasterror() */
#define RS_EREPL   1004 /* WAIT confirmed fewer than min_replicas replicas; the hold was undone */
#define RS_EFORK   1005 /* the client was opened in the parent of a fork(): only close it */
#define RS_EQUEUE  1006 /* the waiter queue of this name is full (max_waiters) */

/* Log levels passed to the log callback. */
#define RS_LOG_DEBUG 0
#define RS_LOG_INFO  1
#define RS_LOG_WARN  2
#define RS_LOG_ERROR 3

/* ---------------------------------------------------------------------------------------
 * Client: one per process is typical; it is shared by all threads.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_client rs_client_t;

typedef struct rs_config {
    const char *url;        /* redis://[[user]:password@]host[:port][/db],
                               unix:///path[?db=N],
                               redis-sentinel://[[user]:password@]host[:port][,...]/MASTER[?db=N],
                               redis-cluster://[[user]:password@]host[:port][,...],
                               redlock://[[user]:password@]host[:port],host[:port],
                               host[:port][,...][?db=N] (3 to 16 independent masters; mutex
                               and rmutex only, waiters served by ticket)
                               (docs/deployments.md). NULL: $REDISYNC_URL, else
                               redis://127.0.0.1:6379 */
    const char *prefix;     /* key namespace, no braces; NULL: "rs" */
    long lease_ms;          /* lease of every hold; 0: 30000. Renewed every lease_ms/3. */
    long timeout_ms;        /* how long Redis may stay unreachable during a call before it
                               fails with RS_ECONN; also the connect timeout. 0: 2000 */
    int  min_replicas;      /* > 0: confirm each acquisition (and renewal) with WAIT on
                               its own connection; a shortfall undoes the acquisition and
                               returns RS_EREPL. 0..1000; see docs/deployments.md.
                               Not with redlock:// (EINVAL) */
    long replica_timeout_ms;/* WAIT's timeout; 0: 500 */
    unsigned max_waiters;   /* cap of one name's waiter queue; 0: 100000 */
    void (*on_lost)(const char *kind, const char *name, void *arg);
                            /* called once per lost hold, from a library thread; it must not
                               block or call into the library. kind is "mutex", ... */
    void *on_lost_arg;
    void (*log)(int level, const char *msg, void *arg); /* NULL: the library is silent */
    void *log_arg;
    long confirm_wakeups;   /* non-zero: a waiter woken with a grant asks Redis once more
                               before it returns (one more round trip per contended
                               acquisition), so that even a peer that can read the queue
                               keys and PUBLISH cannot forge a grant (docs/security.md).
                               0: a grant message naming the whole acquisition id, with its
                               64 secret bits, is trusted. Always on with min_replicas > 0 */
    const char *label;      /* shown by inspection (rs_inspect_holder, redisync info) next to
                               this client's holds, with its host, process id and program:
                               e.g. "deploy 42 of api". At most RS_LABEL_MAX bytes, no
                               control characters; NULL or "": none. Not a secret: anyone
                               who can read the keys sees it */
    void *reserved[6];      /* room to grow without breaking the ABI; keep zeroed */
} rs_config_t;

/* Fills cfg with the defaults (all zero/NULL, meaning "default" as documented above). */
RS_API void rs_config_init(rs_config_t *cfg);

/* Opens a client: parses the URL, draws a random public id and a 128-bit secret
 * (getrandom), connects once to check the address and credentials (AUTH, SELECT).
 * cfg may be NULL (all defaults). On failure *out is NULL and rs_client_lasterror(NULL)
 * says why. Errors: EINVAL (bad URL or config), RS_ECONN, RS_ESERVER (e.g. bad password),
 * ENOMEM. Blocks for at most timeout_ms. Under redlock:// a quorum (N/2+1) of the masters
 * must be reachable; fewer is RS_ECONN. */
RS_API int rs_client_open(rs_client_t **out, const rs_config_t *cfg);

/* Closes the client: blocked calls on it return ECANCELED, holds it still has are released
 * (owner-checked) in Redis, its threads and connections end, and its memory is freed.
 * Handles may afterwards only be destroyed. NULL is a no-op. In a child after fork() it only
 * frees memory. Blocks for at most timeout_ms. */
RS_API int rs_client_close(rs_client_t *c);

/* The calling thread's last error message (never NULL; "" when none). c may be NULL, e.g.
 * after a failed rs_client_open. The string stays valid until the thread's next call. */
RS_API const char *rs_client_lasterror(rs_client_t *c);

/* The client's public id (16 hex digits), as shown by inspection and used in channels. */
RS_API const char *rs_client_id(const rs_client_t *c);

/* A static description of any error number (errno values included). */
RS_API const char *rs_strerror(int err);

/* The library's version string, e.g. "0.1.0" (compare RS_VERSION_* for the header's). */
RS_API const char *rs_version(void);

/* ---------------------------------------------------------------------------------------
 * Mutex: error-checking, not reentrant (PTHREAD_MUTEX_ERRORCHECK semantics).
 *
 * Under redlock:// every call goes to all masters at once and counts by quorum: a release
 * wakes the first waiter (in the order the waits began, by each client's clock) and keeps
 * the mutex for it briefly (lease/10 of its queue lease, 20-500 ms; trylock meanwhile is
 * EBUSY); past that a free mutex still goes to the first live waiter, or to whoever asks if
 * nobody waits. A call that a quorum does not answer is retried
 * until timeout_ms, then RS_ECONN. docs/deployments.md, "Redlock".
 * ------------------------------------------------------------------------------------- */
typedef struct rs_mutex rs_mutex_t;

/* Attaches *m to the mutex `name` of client c (nothing is written to Redis). EINVAL, ENOMEM. */
RS_API int rs_mutex_init(rs_mutex_t **m, rs_client_t *c, const char *name);

/* Blocks until the calling thread holds the mutex. EDEADLK if it already does (also when
 * the hold was lost and not yet unlocked), RS_EQUEUE, RS_ECONN, RS_ESERVER, ECANCELED.
 * A hold Redis kept for this thread after a lock or unlock that failed with RS_ECONN (the
 * call ran in Redis, its reply was lost) is taken over by the next lock, with a new token. */
RS_API int rs_mutex_lock(rs_mutex_t *m);

/* Takes the mutex only if it is free and nobody is queued for it: EBUSY otherwise (also when
 * the calling thread holds it). Never queues, never blocks beyond one round trip. */
RS_API int rs_mutex_trylock(rs_mutex_t *m);

/* rs_mutex_lock with an absolute CLOCK_REALTIME deadline: ETIMEDOUT when it passes. */
RS_API int rs_mutex_timedlock(rs_mutex_t *m, const struct timespec *abstime);

/* Releases the calling thread's hold (owner-checked in Redis). 0; EPERM if this thread
 * holds nothing here; RS_ELOST if the hold had been lost meanwhile (the hold is cleared and
 * whoever holds the mutex now is untouched); RS_ECONN (the hold is cleared locally and
 * expires in Redis when its lease runs out). */
RS_API int rs_mutex_unlock(rs_mutex_t *m);

/* Fencing token of the calling thread's hold, 0 if none. Every later hold of the same name
 * gets a larger token (see the README for the limits). Under redlock:// it is the largest
 * token among the masters that granted the hold; docs/deployments.md ("Fencing under
 * Redlock") says when a later token can still be smaller. */
RS_API uint64_t rs_mutex_fence(const rs_mutex_t *m);

/* Milliseconds of lease left on the calling thread's hold as last confirmed by Redis;
 * 0 if none or lost. */
RS_API long rs_mutex_remaining(const rs_mutex_t *m);

/* Sets the lease of later holds through this handle (0: the client's). EINVAL if < 0 or
 * below 30 ms. */
RS_API int rs_mutex_setlease(rs_mutex_t *m, long lease_ms);

/* Frees the handle; EBUSY while a thread of this process holds through it. NULL: no-op. */
RS_API int rs_mutex_destroy(rs_mutex_t *m);

/* ---------------------------------------------------------------------------------------
 * Recursive mutex: like the mutex, but the holding thread may lock it again (and must unlock
 * as many times). The hold count is kept in Redis; the fencing token stays the same across
 * re-entries; an unlock beyond the count returns EPERM. trylock by the holder succeeds.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_rmutex rs_rmutex_t;
RS_API int rs_rmutex_init(rs_rmutex_t **m, rs_client_t *c, const char *name);
RS_API int rs_rmutex_lock(rs_rmutex_t *m);
RS_API int rs_rmutex_trylock(rs_rmutex_t *m);
RS_API int rs_rmutex_timedlock(rs_rmutex_t *m, const struct timespec *abstime);
RS_API int rs_rmutex_unlock(rs_rmutex_t *m);
RS_API uint64_t rs_rmutex_fence(const rs_rmutex_t *m);
RS_API long rs_rmutex_remaining(const rs_rmutex_t *m);
RS_API int rs_rmutex_setlease(rs_rmutex_t *m, long lease_ms);
RS_API int rs_rmutex_destroy(rs_rmutex_t *m);

/* ---------------------------------------------------------------------------------------
 * Read-write lock: readers share, a writer excludes all. Reentrant per thread in both modes;
 * a thread that already holds it re-enters at once whatever is queued. Downgrade: a writer
 * may take the read lock, then unlock (dropping the write hold) and keep reading. Upgrade
 * (read to write) is always EDEADLK. A waiting writer blocks new readers (no starvation).
 * Each reader's hold is its own lease. Not offered under redlock://: init returns ENOTSUP.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_rwlock rs_rwlock_t;
RS_API int rs_rwlock_init(rs_rwlock_t **rw, rs_client_t *c, const char *name);
RS_API int rs_rwlock_rdlock(rs_rwlock_t *rw);
RS_API int rs_rwlock_tryrdlock(rs_rwlock_t *rw);   /* EBUSY */
RS_API int rs_rwlock_timedrdlock(rs_rwlock_t *rw, const struct timespec *abstime);
RS_API int rs_rwlock_wrlock(rs_rwlock_t *rw);      /* EDEADLK if this thread holds only a read hold */
RS_API int rs_rwlock_trywrlock(rs_rwlock_t *rw);   /* EBUSY; EDEADLK on an upgrade */
RS_API int rs_rwlock_timedwrlock(rs_rwlock_t *rw, const struct timespec *abstime);
/* Releases this thread's write hold if it has one, else one of its read holds. */
RS_API int rs_rwlock_unlock(rs_rwlock_t *rw);
RS_API uint64_t rs_rwlock_fence(const rs_rwlock_t *rw); /* token of this thread's write hold */
RS_API int rs_rwlock_destroy(rs_rwlock_t *rw);

/* ---------------------------------------------------------------------------------------
 * Semaphore with leased permits. A permit is a lease held by the taking thread and renewed
 * by the watchdog; a crashed holder's permits come back when their leases run out. Never
 * more permits taken than the size; waiters are served in order. Not offered under
 * redlock://: init returns ENOTSUP.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_sem rs_sem_t;
/* Creates the semaphore with `permits` if it does not exist (0: attach only, ENOENT if
 * absent); an existing one keeps its own size. */
RS_API int rs_sem_init(rs_sem_t **s, rs_client_t *c, const char *name, unsigned permits);
RS_API int rs_sem_wait(rs_sem_t *s);
RS_API int rs_sem_trywait(rs_sem_t *s);             /* EAGAIN when none is free */
RS_API int rs_sem_timedwait(rs_sem_t *s, const struct timespec *abstime); /* ETIMEDOUT */
RS_API int rs_sem_post(rs_sem_t *s);                /* EPERM if this thread holds none */
RS_API int rs_sem_getvalue(rs_sem_t *s, int *value); /* permits free now */
/* n permits at once; NULL abstime: no deadline. */
RS_API int rs_sem_timedwait_n(rs_sem_t *s, unsigned n, const struct timespec *abstime);
RS_API int rs_sem_post_n(rs_sem_t *s, unsigned n);
/* Resizes; holders above a new smaller size keep theirs. */
RS_API int rs_sem_setsize(rs_sem_t *s, unsigned permits);
RS_API uint64_t rs_sem_fence(const rs_sem_t *s);    /* token of this thread's latest permit */
RS_API int rs_sem_destroy(rs_sem_t *s);

/* ---------------------------------------------------------------------------------------
 * Countdown latch. Opening (count reaching 0) wakes every waiting client with one publish;
 * an opened latch stays open (a late init cannot close it), rs_latch_rearm is the only way.
 * Not offered under redlock://: init returns ENOTSUP.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_latch rs_latch_t;
/* Arms the latch with `count` if it has never been armed; count 0 only attaches. */
RS_API int rs_latch_init(rs_latch_t **l, rs_client_t *c, const char *name, unsigned count);
RS_API int rs_latch_count_down(rs_latch_t *l);     /* at 0: no-op; never armed: ENOENT */
RS_API int rs_latch_wait(rs_latch_t *l);           /* returns once the count is 0; waits for
                                                      arming first if not armed yet */
RS_API int rs_latch_timedwait(rs_latch_t *l, const struct timespec *abstime); /* ETIMEDOUT */
RS_API int rs_latch_getcount(rs_latch_t *l, unsigned *count);
RS_API int rs_latch_rearm(rs_latch_t *l, unsigned count);
RS_API int rs_latch_destroy(rs_latch_t *l);

/* ---------------------------------------------------------------------------------------
 * MultiLock: several mutexes taken all or nothing, by the calling thread. Parts are taken in
 * one global order that every process computes alike (each part's key, then its server as
 * its client's URL names it), so multilocks over overlapping sets never deadlock. Each part
 * is an ordinary hold of its mutex: its own lease renewed by the watchdog, its own fencing
 * token (rs_mutex_fence on the part), its own loss report. Nothing of the multilock itself
 * is kept in Redis. Parts of one client on one server (not Cluster), at most 6, are first
 * tried with one script that takes all or none: one round trip when none is busy.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_multilock rs_multilock_t;
/* Builds *ml over n mutex handles, which may belong to different clients (and servers). ml
 * does not own them: they must outlive it. EINVAL for NULL, n == 0, or a mutex given twice
 * (the same handle, or two handles of one name, prefix and server URL). ENOMEM. */
RS_API int rs_multilock_init(rs_multilock_t **ml, rs_mutex_t *const *parts, size_t n);
/* Blocks until the calling thread holds every part: each taken in order with a blocking
 * lock. On an error, what was taken is released (reverse order) and the error returned;
 * EDEADLK if this thread holds the multilock or one of its parts already. */
RS_API int rs_multilock_lock(rs_multilock_t *ml);
/* Takes each part with trylock; EBUSY at the first busy part, with nothing held afterwards. */
RS_API int rs_multilock_trylock(rs_multilock_t *ml);
/* rs_multilock_lock with one absolute CLOCK_REALTIME deadline for all parts: ETIMEDOUT,
 * with nothing held afterwards. */
RS_API int rs_multilock_timedlock(rs_multilock_t *ml, const struct timespec *abstime);
/* Releases every part (reverse order). EPERM if this thread does not hold the multilock;
 * RS_ELOST if any part had been lost (the others are released all the same); else the
 * first other error of a part. */
RS_API int rs_multilock_unlock(rs_multilock_t *ml);
/* Frees the handle (never the parts); EBUSY while a thread holds through it. NULL: no-op. */
RS_API int rs_multilock_destroy(rs_multilock_t *ml);

/* ---------------------------------------------------------------------------------------
 * Condition variable, across processes (pthread_cond_t). wait puts the caller in the
 * condition's FIFO queue first (a leased entry the watchdog renews), then releases m, then
 * sleeps without polling: a signal or broadcast sent any time after the release finds it, so
 * no wake-up is lost. signal wakes the longest-waiting live waiter (one targeted message),
 * broadcast every waiter queued at the call (one message per waiting client); a crashed
 * waiter's entry stops absorbing signals once its lease (the client's lease_ms) has run out.
 * A woken waiter re-acquires m through the mutex's own queue (it does not jump ahead of the
 * mutex's waiters), with a new hold and a new fencing token (rs_mutex_fence). Re-check the
 * predicate in a loop: spurious wake-ups are allowed, as in POSIX (a signal whose reply was
 * lost and that was re-sent may wake two waiters; a waiter whose entry's lease ran out while
 * Redis was away wakes). signal and broadcast need not hold m. The condition may be used
 * with mutexes of any name, of its own client or of another client (and server): nothing
 * ties the two in Redis, and no script touches both (they may live on different Cluster
 * slots). m must be an rs_mutex_t: recursive mutexes (rs_rmutex_t) are not supported (POSIX
 * leaves them undefined with condition variables; a handle of another kind cast to
 * rs_mutex_t * is EINVAL).
 *
 * What the caller holds when wait/timedwait returns:
 *   0, ETIMEDOUT  m, re-acquired (a new hold; a timedwait whose deadline passed as a signal
 *                 took its entry returns 0: the wake-up is not lost);
 *   ECANCELED     (rs_client_close of the condition's client; a signal that already reached
 *                 the waiter returns 0 instead) m re-acquired when m's client is still open,
 *                 nothing when m's client is the one closing;
 *   errors before the wait began (EINVAL, EPERM: m not held by this thread; RS_ELOST: m's
 *                 hold had been lost, nothing waited, its record left for rs_mutex_unlock;
 *                 RS_ECONN, RS_ESERVER (WRONGTYPE on a foreign key), RS_EQUEUE, ENOMEM
 *                 while queueing) m exactly as before the call, nothing queued beyond the
 *                 entry's lease;
 *   RS_ELOST found by the release of m: the wait withdraws and m is re-acquired, as below;
 *   other errors after m was released: m is re-acquired if Redis allows; if that fails, its
 *                 error is returned and m is not held.
 * In every case rs_mutex_fence(m) != 0 tells whether the thread holds m. Timed waits never
 * give up re-acquiring m at the deadline (as pthread_cond_timedwait). Errors also: EINVAL
 * (NULL cv or m, NULL or bad abstime), ENOTSUP under redlock://, RS_EFORK. destroy is EBUSY
 * while a thread of this process waits through the handle, and so is rs_mutex_destroy of the
 * m a thread waits with (it re-acquires m through that handle). Thread-safe.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_cond rs_cond_t;
RS_API int rs_cond_init(rs_cond_t **cv, rs_client_t *c, const char *name);
RS_API int rs_cond_wait(rs_cond_t *cv, rs_mutex_t *m);     /* m: held by this thread */
RS_API int rs_cond_timedwait(rs_cond_t *cv, rs_mutex_t *m, const struct timespec *abstime);
RS_API int rs_cond_signal(rs_cond_t *cv);    /* wakes the longest-waiting live waiter, if any */
RS_API int rs_cond_broadcast(rs_cond_t *cv); /* wakes every waiter queued at the call */
RS_API int rs_cond_destroy(rs_cond_t *cv);

/* ---------------------------------------------------------------------------------------
 * Barrier (cyclic), across processes: wait returns when parties callers have arrived, one
 * of them (the one that completed the generation) with RS_BARRIER_SERIAL, the others with
 * 0; the barrier is then ready for the next generation at once. timedwait that runs out
 * withdraws this caller's arrival atomically (ETIMEDOUT): a generation never trips with a
 * party that returned ETIMEDOUT, and a party counted in a generation that tripped never
 * returns ETIMEDOUT. No polling: one message per trip wakes every client's waiters.
 * init with another number of parties than the barrier's is EINVAL. Errors: EINVAL (NULL,
 * parties 0, bad abstime), ENOENT (its keys expired while waited on: 24 h unused),
 * RS_ECONN, RS_ESERVER, ENOTSUP under redlock://, ECANCELED (closing: the arrival is
 * withdrawn), RS_EFORK, ENOMEM; destroy is EBUSY while a thread of this process waits.
 * ------------------------------------------------------------------------------------- */
#define RS_BARRIER_SERIAL (-1) /* as PTHREAD_BARRIER_SERIAL_THREAD */
typedef struct rs_barrier rs_barrier_t;
RS_API int rs_barrier_init(rs_barrier_t **b, rs_client_t *c, const char *name,
                           unsigned parties);
RS_API int rs_barrier_wait(rs_barrier_t *b);
RS_API int rs_barrier_timedwait(rs_barrier_t *b, const struct timespec *abstime);
RS_API int rs_barrier_destroy(rs_barrier_t *b);

/* ---------------------------------------------------------------------------------------
 * Once: a fleet-wide pthread_once. fn runs in exactly one caller at a time across every
 * process until a call succeeds (fn returns 0); the others wait without polling and return
 * 0 without calling fn once it succeeded. The runner holds a lease (renewed by the
 * watchdog, reported by on_lost; fence is its fencing token): if fn fails (non-zero: run
 * returns that value to its caller only), or the runner dies or loses its lease, the next
 * waiter runs fn instead. The success mark lasts 30 days after its last run or state.
 * run blocks; timedrun gives up with ETIMEDOUT (nothing left queued beyond its entry's
 * lease). RS_ELOST from run: fn returned 0 but the run hold had been lost meanwhile, so the
 * mark is not set and the next runner runs fn again (fence fn's effects with fence).
 * Errors: EINVAL (NULL once or fn, bad abstime), RS_ECONN, RS_ESERVER (also WRONGTYPE on a
 * foreign key), ENOTSUP under redlock://, ECANCELED (closing), RS_EFORK, ENOMEM.
 * destroy is EBUSY while a thread of this process is inside run. Thread-safe.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_once rs_once_t;
RS_API int rs_once_init(rs_once_t **o, rs_client_t *c, const char *name);
RS_API int rs_once_run(rs_once_t *o, int (*fn)(void *arg, uint64_t fence), void *arg);
RS_API int rs_once_timedrun(rs_once_t *o, int (*fn)(void *arg, uint64_t fence), void *arg,
                            const struct timespec *abstime);
RS_API int rs_once_state(rs_once_t *o, int *done);   /* *done 1 once a run has succeeded */
RS_API int rs_once_reset(rs_once_t *o);              /* operators: forget the success */
RS_API int rs_once_destroy(rs_once_t *o);

/* ---------------------------------------------------------------------------------------
 * Holds as objects: a hold that belongs to the program, not to the thread that took it, for
 * thread pools, event loops and FFI callers whose work moves between threads.
 *
 * rs_mutex_acquire, rs_rwlock_acquire_read/_write and rs_sem_acquire block like the timed
 * calls (abstime NULL: no deadline; one already past: one attempt, EBUSY, or EAGAIN for the
 * semaphore) and return a hold granted under its own acquisition id and owner token: any
 * thread may read it and release it. The watchdog renews it like every hold, on_lost fires
 * for it, and rs_client_close releases it in Redis. The scripts cannot tell it from a
 * thread's hold: a hold object and a thread-bound hold on one name exclude each other and
 * queue in one FIFO line, and two hold objects of one client on one mutex are two contenders
 * (the second waits; never EDEADLK). Errors: EINVAL (NULL handle or out, bad abstime, n of 0),
 * ETIMEDOUT, EBUSY/EAGAIN, RS_ECONN, RS_ESERVER, RS_EFORK, ECANCELED (closing), ENOMEM; on
 * error *out is NULL. A handle with hold objects not yet released cannot be destroyed
 * (EBUSY). Thread-safe.
 * ------------------------------------------------------------------------------------- */
typedef struct rs_hold rs_hold_t;
RS_API int rs_mutex_acquire(rs_mutex_t *m, const struct timespec *abstime, rs_hold_t **out);
RS_API int rs_rwlock_acquire_read(rs_rwlock_t *rw, const struct timespec *abstime,
                                  rs_hold_t **out);
RS_API int rs_rwlock_acquire_write(rs_rwlock_t *rw, const struct timespec *abstime,
                                   rs_hold_t **out);
RS_API int rs_sem_acquire(rs_sem_t *s, unsigned n, const struct timespec *abstime,
                          rs_hold_t **out); /* n permits in one hold */
/* Releases the hold and frees h, from any thread; blocks for one round trip. 0, RS_ELOST
 * (it had been lost: on_lost was called), RS_ECONN (the lease then runs out in Redis),
 * EINVAL for NULL or a pointer that is not a hold object. After rs_client_close it only
 * frees h (close released it): 0, or RS_ELOST; in a fork child it frees h and returns
 * RS_EFORK (the parent's hold is untouched). Releasing the same hold twice is a
 * use-after-free the library cannot catch. */
RS_API int rs_hold_release(rs_hold_t *h);
RS_API uint64_t rs_hold_fence(const rs_hold_t *h);   /* its fencing token; 0 for a read hold */
RS_API long rs_hold_remaining(const rs_hold_t *h);   /* ms of lease left as last confirmed; 0
                                                        once lost */
RS_API int rs_hold_lost(const rs_hold_t *h);         /* 1 once the hold is known lost */

/* ---------------------------------------------------------------------------------------
 * The event-loop API: non-blocking acquisition (api.md, "Holds as objects, and the
 * event-loop API").
 *
 * An _async call never blocks and never waits for a round trip: it checks its arguments,
 * hands the request to the client's one library I/O thread (started at the first _async
 * call; no thread per request) and returns 0, or an error at once, in which case done is
 * never called. The I/O thread pipelines the requests' script calls on a connection of its
 * own; a pending request costs memory only (a few hundred bytes; see `make bench`), its
 * queue entry in Redis is renewed by the client's watchdog and its wake-up comes through
 * the client's one subscriber, like a blocked thread's. Requests on one name are served in
 * the order Redis received them (FIFO); a hold object and the thread-bound calls on one
 * name exclude each other and queue in one line. Two requests of one client on one mutex
 * are two contenders: the second waits for the first (no EDEADLK).
 *
 * done(rc, hold, arg) is called exactly once per request that was started, from
 * rs_client_dispatch on whichever thread calls it - never from inside the _async call,
 * never from a library thread. rc is 0 with hold the granted hold (the program's: release
 * it with rs_hold_release or rs_hold_release_async, from any thread), else hold is NULL and
 * rc is one of:
 *   ETIMEDOUT   abstime passed while waiting (the request left the queue);
 *   EBUSY       abstime was already past at the call and one attempt found it busy
 *               (EAGAIN for a semaphore without enough free permits);
 *   ECANCELED   rs_request_cancel, or rs_client_close;
 *   RS_ECONN    the I/O thread's connection could not be re-established within
 *               timeout_ms, or Redis did not answer for timeout_ms (a stalled server: the
 *               connection is then dropped; a broken connection is re-dialled and every
 *               request that was on it re-sent with its acquisition id, which the scripts
 *               recognise: a grant is never taken twice); RS_ECONN also when the subscriber
 *               could not subscribe within timeout_ms (RS_ESERVER when the server refused
 *               the subscription, e.g. a user without the pub/sub rights: the log callback
 *               gets the server's text). A deadline of a request whose call is
 *               on the wire is acted on when its reply comes, at most timeout_ms late;
 *   RS_EQUEUE, RS_ESERVER, ENOMEM as the blocking calls.
 * Inside done, rs_client_lasterror() on the dispatching thread is the message that explains
 * that request's rc, as a blocking call's would ("" when rc is 0): e.g. which deadline
 * passed on which name, whether rs_request_cancel or rs_client_close cancelled it, the
 * address Redis could not be reached at, the server's error text, which Redlock masters
 * answered. Each done reads its own request's message, also when one dispatch runs several;
 * when rs_client_dispatch (or rs_client_close, for the completions it runs) returns, the
 * thread's last message is what it was before the call.
 * req (required) is the request's handle for rs_request_cancel; it is valid until done
 * runs, and must not be used after (done may run on another thread if several dispatch: a
 * program that cancels from a thread other than the one dispatching serialises the two).
 *
 * abstime: absolute CLOCK_REALTIME deadline, NULL for none; one already past makes one
 * attempt (EBUSY/EAGAIN as the try variants). Deadlines are kept in one min-heap of the
 * client and fire at the I/O thread's next pass (no per-request timer).
 *
 * Errors at the call: EINVAL (NULL handle, done or req; tv_nsec out of range; n of 0),
 * ENOMEM, RS_EFORK (a fork child), ECANCELED (the client is closing). Under redlock:// the
 * mutex's _async calls work as everywhere: each round of a request goes to every master's
 * pipeline of the I/O thread at once and is decided by quorum as the blocking calls' rounds
 * are (validity, largest token, undo, RS_ECONN when no quorum answers for timeout_ms); the
 * rwlock, semaphore and latch stay ENOTSUP there, at their init, as their blocking forms. Under
 * redis-cluster:// the I/O thread keeps one pipelined connection per master and sends each
 * request's calls to the master of its name's slot, following MOVED and ASK. With
 * min_replicas > 0 an acquiring request is followed in the pipeline by a write (in the
 * name's slot under Cluster) and WAIT, as a blocking acquisition is; a grant fewer replicas
 * acknowledged is given back: done gets RS_EREPL.
 *
 * Thread-safety: every call here may be made from any thread; a handle may be used by
 * _async calls and blocking calls at once. The handle must stay alive (rs_X_destroy returns
 * EBUSY) while it has pending requests or unreleased holds.
 */
typedef struct rs_request rs_request_t;
/* hold NULL unless rc == 0; rs_client_lasterror() inside it: this request's message */
typedef void rs_done_fn(int rc, rs_hold_t *hold, void *arg);
RS_API int rs_mutex_acquire_async(rs_mutex_t *m, const struct timespec *abstime,
                                  rs_done_fn *done, void *arg, rs_request_t **req);
RS_API int rs_rwlock_acquire_read_async(rs_rwlock_t *rw, const struct timespec *abstime,
                                        rs_done_fn *done, void *arg, rs_request_t **req);
RS_API int rs_rwlock_acquire_write_async(rs_rwlock_t *rw, const struct timespec *abstime,
                                         rs_done_fn *done, void *arg, rs_request_t **req);
/* n permits (1..INT_MAX) in one hold */
RS_API int rs_sem_acquire_async(rs_sem_t *s, unsigned n, const struct timespec *abstime,
                                rs_done_fn *done, void *arg, rs_request_t **req);
/* Waits for the latch to open (count 0, or an opening since the call) without blocking:
 * done(0, NULL, arg) then; hold is always NULL. ETIMEDOUT at abstime (a past abstime checks
 * once), ECANCELED, RS_ECONN; a latch not armed yet is waited for, as rs_latch_wait does.
 * The client's subscriber listens on the latch's channel while requests wait on it. */
RS_API int rs_latch_wait_async(rs_latch_t *l, const struct timespec *abstime, rs_done_fn *done,
                               void *arg, rs_request_t **req);
/* Releases h without blocking: from here on h belongs to the library (do not touch it
 * again, not even to release it: a second release of one hold is a use-after-free that the
 * API cannot catch). done(0, NULL, arg) when released, done(RS_ELOST, NULL, arg) if the
 * hold had been lost meanwhile (on_lost was called), RS_ECONN if Redis stayed unreachable
 * for timeout_ms (the hold then expires with its lease). EINVAL for NULL h or done, or a
 * hold that is not a hold object. Under redlock:// "rel" goes to every master and RS_ELOST
 * means more masters denied the hold than a quorum could spare. After rs_client_close (which
 * released h in Redis) it returns ECANCELED at the call, frees h and done is not called; in a
 * fork child RS_EFORK (h is the parent's and is left alone). */
RS_API int rs_hold_release_async(rs_hold_t *h, rs_done_fn *done, void *arg);
/* Cancels a pending request: done(ECANCELED, NULL, arg) follows unless done already ran (req
 * must still be valid: not after done). A grant that raced the cancel (granted in Redis, or
 * a completion queued but not yet dispatched) is released, and done still gets ECANCELED.
 * The request leaves Redis' queue. Never blocks. 0, or EINVAL for NULL. */
RS_API int rs_request_cancel(rs_request_t *req);
/* An eventfd (non-blocking, close-on-exec) that is readable while completions are queued:
 * register it for reading with epoll, poll, libuv's uv_poll_t... and call rs_client_dispatch
 * when it is. Created at the first call (before any _async call, so it can be registered
 * first); the same fd for the client's life; closed by rs_client_close (do not close it
 * yourself). -1 on error (lasterror: EINVAL for NULL, RS_EFORK, ECANCELED once closing,
 * ENOMEM, or the eventfd(2) error). */
RS_API int rs_client_fd(rs_client_t *c);
/* Runs the done callbacks of the completions queued now, on the calling thread, in the
 * order they completed; never blocks; returns how many ran (0 for NULL, a fork child or
 * nothing queued). Completions queued by those callbacks are left for the next call (the fd
 * stays readable). From inside a done callback it runs nothing and returns 0. Callbacks of
 * one client are never run by two dispatching threads at once for the same request, but
 * two threads may dispatch different completions concurrently.
 *
 * rs_client_close with requests pending: each pending request is cancelled in Redis (a
 * grant that raced is released) and its done(ECANCELED) runs inside rs_client_close, on the
 * closing thread, together with every completion still queued (a grant not yet dispatched
 * is released and reported as ECANCELED; release completions keep their code). After close
 * rs_client_dispatch is not to be called (the client may be freed). */
RS_API int rs_client_dispatch(rs_client_t *c);

/* ---------------------------------------------------------------------------------------
 * Inspection, for operators and the command-line tool. Read-only except rs_force_release.
 * kind is one of "mutex", "rmutex", "rwlock", "sem", "latch", "once".
 * ------------------------------------------------------------------------------------- */
#define RS_INFO_HOLDERS 8
typedef struct rs_info {
    char kind[16];
    int exists;             /* 0: nothing of this kind and name is in Redis now */
    unsigned nholders;      /* holders now (owner threads; readers count one each) */
    char holders[RS_INFO_HOLDERS][48]; /* acquisition ids "PUBLICID:N" of the first holders;
                                          PUBLICID is the holder's rs_client_id() */
    long remaining_ms;      /* lease left on the first holder's hold, -1 if none */
    uint64_t fence;         /* fencing token of the current exclusive hold (or the latest
                               grant), 0 if none */
    unsigned waiters;       /* queued waiters */
    int writer;             /* 1 if the holder holds exclusively (mutex, rmutex, rwlock
                               writer); 0 for readers, permits and latches */
    long size, free;        /* sem: size and free permits; -1 otherwise */
    long count;             /* latch: count (-1 never armed); mutex, rmutex: the holder's
                               hold count (1 for a mutex) while held; once: 1 when done, 0
                               not yet (a holder is the runner); else -1 */
    void *reserved[8];
} rs_info_t;

/* Fills out with what Redis says about the primitive (one round trip). EINVAL for an
 * unknown kind or a bad name; RS_ECONN, RS_ESERVER. */
RS_API int rs_inspect(rs_client_t *c, const char *kind, const char *name, rs_info_t *out);

/* Who holds, as people read it: the client record of holder i of info (a filled rs_inspect
 * result, i < min(nholders, RS_INFO_HOLDERS)), which every client keeps while it holds
 * something (a hash PREFIX:{PUBLICID}:client with a TTL, renewed by its watchdog; a single
 * server and Sentinel only). No secret is in it. held_ms comes from the hold's fencing token
 * (the server's clock in microseconds at the grant, unless grants came faster than that) and
 * the server's clock now. One round trip or two. EINVAL for a bad i or a NULL pointer;
 * RS_ECONN, RS_ESERVER. */
typedef struct rs_holder_info {
    char id[48];            /* the acquisition id "PUBLICID:N", as in info->holders[i] */
    int found;              /* 1: the holder's record exists; 0: none (it has just taken
                               its first hold, it died, or Cluster/Redlock: not kept) */
    char host[64];          /* gethostname() of the holder (truncated) */
    long pid;               /* its process id, 0 if unknown */
    char program[64];       /* its program's name (program_invocation_short_name) */
    char label[RS_LABEL_MAX + 1]; /* its rs_config_t.label, "" if none */
    long held_ms;           /* how long this hold has been held; -1 if unknown (a read hold,
                               a permit, another holder than the first) */
    void *reserved[4];
} rs_holder_info_t;
RS_API int rs_inspect_holder(rs_client_t *c, const rs_info_t *info, unsigned i,
                             rs_holder_info_t *out);
/* Calls each(kind, name, arg) for every primitive under the client's prefix whose name
 * matches the glob pattern (NULL: all), using SCAN (never KEYS). A non-zero return from each
 * stops the walk and is returned. */
RS_API int rs_list(rs_client_t *c, const char *pattern,
                   int (*each)(const char *kind, const char *name, void *arg), void *arg);
/* Operators only: removes every hold of the primitive (its holders learn at their next
 * renewal: on_lost, RS_ELOST) and wakes its first waiters as a release would. Keeps the
 * fencing counter. 0 (also when nothing was held), EINVAL, RS_ECONN, RS_ESERVER. */
RS_API int rs_force_release(rs_client_t *c, const char *kind, const char *name);

#ifdef __cplusplus
}
#endif
#endif /* REDISYNC_H */
