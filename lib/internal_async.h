/*
 * internal_async.h - the event-loop API's core (lib/timerheap.c, lib/async.c): what the
 * primitives call to start a non-blocking acquisition, and what client.c calls at close.
 * Part of internal.h, which includes it after handle.c's types; include that.
 */
#ifndef RS_INTERNAL_H
#error "include internal.h, not internal_async.h"
#endif

/* ----- timerheap.c ------------------------------------------------------------------- */
/* A binary min-heap of timers by due time: the deadlines and retry naps of every pending
 * request of a client, in one structure (no timer or thread per request). A timer embeds in
 * its owner; idx is its place in the heap (-1: not in it). */
typedef struct rs_timer {
    uint64_t due_ns;
    int idx;
} rs_timer_t;
typedef struct rs_theap {
    rs_timer_t **v;
    int n, cap;
} rs_theap_t;
/* Room for n timers in all: 0 or ENOMEM (so that rs__theap_set never fails after it). */
int rs__theap_reserve(rs_theap_t *h, int n);
/* Inserts t due at due_ns, or moves it there if it is in the heap already (room reserved). */
void rs__theap_set(rs_theap_t *h, rs_timer_t *t, uint64_t due_ns);
void rs__theap_del(rs_theap_t *h, rs_timer_t *t);
rs_timer_t *rs__theap_top(const rs_theap_t *h); /* the earliest, NULL if empty */
void rs__theap_free(rs_theap_t *h);

/* ----- async.c ----------------------------------------------------------------------- */
/* How a primitive's _async call differs from the generic acquisition. */
typedef struct rs_async_opts {
    unsigned count;  /* the hold's count (a semaphore's permits); 0: 1 */
    int zero_fence;  /* a read hold: fence 0 */
    int busy_rc;     /* what a past deadline that found it busy returns: EBUSY or EAGAIN */
} rs_async_opts_t;
/* Starts an acquisition of k (rs__call_init_object and extras done) without blocking: 0
 * and *req set, done to come from rs_client_dispatch; or an error at once (EINVAL, ENOMEM,
 * ENOTSUP, RS_EFORK, ECANCELED) and done never called. Called between rs__enter and
 * rs__leave. */
int rs__async_acquire(rs_call_t *k, const struct timespec *abstime, const rs_async_opts_t *o,
                      rs_done_fn *done, void *arg, rs_request_t **req);
/* An event to wait for (a latch opening), announced on a channel: op is the script op that
 * checks it; decode reads its reply: 0 happened, 1 not yet, or -error; *state is the
 * request's own memory between checks (starts at -1). It is checked once the channel is
 * subscribed, after every message on it, and every recheck_ms (rs__async_event's). */
typedef struct rs_async_event {
    const char *op;
    int (*decode)(rs_client_t *c, const redisReply *r, long long *state);
} rs_async_event_t;
/* Waits for ev on channel topic (which must live as long as k's handle) without blocking:
 * done(0, NULL, arg) when it happened; errors as rs__async_acquire. */
int rs__async_event(rs_call_t *k, const char *topic, const rs_async_event_t *ev,
                    long recheck_ms, const struct timespec *abstime, rs_done_fn *done, void *arg,
                    rs_request_t **req);
/* ----- async.c, async_req.c, async_wire.c, async_rl.c: shared by these files only ------ */
enum { RQ_ACQ, RQ_REL, RQ_EVT };
enum { ST_NEW, ST_SUB, ST_SEND, ST_FLIGHT, ST_WAIT, ST_DELAY, ST_FIN, ST_UNDO };
enum { OP_ACQ, OP_CANCEL, OP_REL, OP_HREL, OP_GET };
/* REL: undo a grant; HREL: release a hold; GET: check an event (RQ_EVT) */

/* A request: one allocation, sized to fit, and all a pending request costs beyond the
 * client's per-request slots (bench/async/async.c prints it; docs/performance.md): one
 * 496-byte malloc chunk (488 usable) for an rs_mutex_acquire_async with a 13-byte name, of
 * which 413 of record (136 its queue-entry lease, 96 its callback waiter, 181 the rest, of
 * which the Cluster's ASK byte, Redlock's rlat and the 4-byte start_ms), 64 of strings (a
 * 38-byte acquisition id, the 24-byte main key, their NULs), 19 of malloc's header and
 * rounding (11 of them usable: a name or id 12 bytes longer crosses into the next 16-byte
 * step). Under Redlock the block also holds the request's
 * rs_arl_t (192 bytes, after the strings, 8-aligned).
 *
 * The block starts with the request's queue-entry lease, so the lease costs no allocation
 * and no copy of the call: its builder (async.c) rebuilds the renewal from the request's
 * fields set before it was submitted (owner_no, nextra, kat, klen, the strings) and ql.src
 * (the handle's suffixes, static), never from the handle, and the block is freed by the
 * lease's last reference (rs__aq_free), never by free(): a watchdog round that still holds
 * the lease after done ran (and after the handle was destroyed) reads a live block. After
 * a loss (its local deadline passed) the same lease is registered again when the request
 * queues again. Then the strings: the acquisition id, each extra argument, and for an
 * acquisition the main key (which also names the lease in the watchdog's log lines; a
 * queue entry is never reported to on_lost), each NUL-terminated. What only an acquisition
 * and only an event wait use shares its memory, and so do the send-queue and completion
 * links (a request leaves the send and subscriber queues when it completes). */
struct rs_request {
    rs_lease_t ql; /* first (see above); RQ_ACQ's is registered with the watchdog while
                      qleased; every request's holds the block's reference */
    rs_handle_t *h;
    uint64_t owner_no;
    rs_done_fn *done;
    void *arg;
    uint64_t deadline_ns;
    /* the I/O thread's (err: also under as->mu once published) */
    union {
        struct { /* RQ_EVT: what is waited for, on channel w.topic */
            const rs_async_event_t *ev;
            long long evstate;
            long recheck_ms;
        };
        struct { /* RQ_ACQ */
            uint64_t fence_floor, lower_ns;
            uint64_t sent_ns; /* of its last acquiring call */
        };
        /* the message behind a nonzero rc, what rs_client_lasterror says inside done:
         * malloc'd at completion (NULL: rc 0, or a static text), freed with the request
         * (rs__aq_free). It takes the place of ev and fence_floor, which nothing reads once
         * it is set: from the completion on, and for an RQ_ACQ from the moment its grant
         * is to be given back (undo_rc set, rs__aq_set_undo: the text of undo_rc, or NULL;
         * RS_RQ_NOTED) */
        char *err;
    };
    rs_timer_t tm;
    uint64_t send_by_ns;
    rs_waiter_t w;
    union {
        struct rs_request *snext; /* send queue or subscriber queue, until it completes */
        struct rs_request *bnext; /* then this pass's completions (after leaving both) */
    };
    struct rs_request *anext, *aprev; /* live requests */
    int undo_rc;
    unsigned count; /* RQ_ACQ: the hold's count */
    int rc;         /* under as->mu, as are the next four */
    atomic_int cancel;
    rs_hold_t *hold;
    struct rs_request *next;  /* submit list, then completion list */
    struct rs_request *wnext; /* woken list */
    struct rs_request *cnext; /* cancel list */
    uint32_t start_ms;        /* rs__now_ns() in ms when it was made, mod 2^32: how long it
                                 has waited (RS_RQ_WAITED_MS) for the ETIMEDOUT message */
    unsigned short kat, klen; /* RQ_ACQ: the main key at str + kat, klen bytes */
    unsigned short rlat;      /* under Redlock: its rs_arl_t at str + rlat (async_rl.c) */
    /* small fields: set before it is submitted, then read-only; one byte each */
    unsigned char type, nextra, zero_fence, try_only, busy_rc; /* busy_rc: EBUSY, EAGAIN */
    /* the I/O thread's (st also rs_request_cancel's and close's, once it is published or
     * the thread is gone): bits, in one memory location no other group shares */
    unsigned char st : 3, op : 3, counted : 1, watching : 1;
    unsigned char final : 1, qleased : 1, queued : 1, registered : 1, resent : 1, lost : 1,
        in_send : 1;
    unsigned char pub, in_woken, in_cancel;                 /* under as->mu: one byte each */
    unsigned char ask;  /* the I/O thread's: an ASK's node + 1, for the next send only */
    char str[]; /* acqid, then nextra extras, then (RQ_ACQ) the main key: NUL-terminated */
};
_Static_assert(ST_UNDO < 8 && OP_GET < 8, "st and op are 3-bit fields of rs_request");
/* Under Redlock, a request's state across the masters (async_rl.c), in its block after the
 * strings (rs__aq_rl): a round's call goes on every master's pipeline and its replies are
 * gathered here, then decided as the blocking calls decide (rlvote.c). */
typedef struct rs_arl {
    uint64_t ticket;        /* the acquisition's place in every master's queue */
    uint64_t seen;          /* the fencing counter its last busy answer showed */
    long recheck_ms;        /* its last wait without a wake-up (rs__rl_busy_wait) */
    char *err_text;         /* the message of err, or of v.err (this round's): malloc'd when
                               it came (NULL: none or no memory) */
    uint64_t round_ns;      /* when this round was sent */
    uint64_t first_ns;      /* acquiring: when the rounds without a quorum began (0: a quorum
                               answered the last one); rel: when the call was first sent */
    unsigned attempt;       /* acquiring rounds so far (mutex.lua ARGV[11]) */
    unsigned sent;          /* acquiring: the masters whose answer to this round is due */
    unsigned tried, amask;  /* rel: the masters it was sent to (and not broken since), those
                               that answered */
    int got;                /* replies this round */
    int err;                /* rel: an error a master answered with */
    unsigned char cont;     /* rel: the next send goes to the masters not tried yet */
    unsigned char owed[RS_SEEDS_MAX]; /* replies master i still owes this request (this
                                         round's and earlier rounds' late ones) */
    rs_rl_votes_t v;        /* acquiring: this round's answers */
    rs_rl_tally_t t;        /* rel: the answers */
} rs_arl_t;
/* Before its completion: whether rq->err is the message already (not ev or fence_floor). */
#define RS_RQ_NOTED(rq) ((rq)->type == RQ_ACQ && (rq)->undo_rc)
/* How long rq has waited, in ms (exact to 1 ms for waits under 49 days) */
#define RS_RQ_WAITED_MS(rq) ((uint32_t)(rs__now_ns() / RS_NS_PER_MS) - (rq)->start_ms)
/* A live request's client's async state (no pointer of its own in the record) */
#define RS_RQ_AS(rq) atomic_load(&(rq)->ql.c->as)

/* One pipelined connection of the I/O thread (async_wire.c): to the master outside Cluster
 * (cn[0]), to one node of the cluster table in Cluster (cn[node]). */
typedef struct rs_aconn {
    redisContext *ctx;
    rs_request_t **ring;       /* requests whose replies are owed, in order (NULL: a reply
                                  nobody decodes: SCRIPT LOAD, ASKING, the write before WAIT) */
    size_t rhead, rcount, rcap;
    uint64_t progress_ns;      /* replies are owed: the last one came (or the first was
                                  asked for) then; timeout_ms without one is a stall */
    uint64_t next_dial_ns;     /* a failed dial: not before then again */
    /* min_replicas > 0: the acquiring call whose reply waits for its WAIT's (async_wire.c) */
    rs_request_t *confirm_rq;
    redisReply *confirm_r;
    int node;                  /* cluster: its index in the node table; else -1 */
    int flush;                 /* appended to since the last flush (async_wire.c's) */
    int dialing;               /* a dialer thread dials it (async_dial.c): NULL ctx till then */
} rs_aconn_t;

/* The dialer threads of an I/O thread (async_dial.c): they dial its connections and load
 * the Cluster slot map, so that the I/O thread never waits on the network for them. Under mu
 * unless said otherwise; made by the I/O thread at its first dial (init). */
#define RS_ADIAL_THREADS 4
typedef struct rs_adial {
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* work for the idle threads, or stop */
    pthread_t th[RS_ADIAL_THREADS];
    int init, nth, idle, stop; /* init, nth: the I/O thread's */
    uint64_t want;             /* cn[i] to be dialled (bit i), not taken by a thread yet */
    uint64_t ended;            /* dials that ended: got[i] the context, NULL if it failed */
    redisContext *got[RS_NODES_MAX];
    int refresh;               /* the slot map: 1 to be loaded, 2 being loaded */
    int refreshed;             /* a load ended: the send queue is to be routed again */
    int err_new;               /* err is the outcome of the last ended dial (outside Redlock) */
    char err[200];             /* its message ("": it succeeded) */
    atomic_int ready;          /* ended or refreshed may be set: the I/O thread looks */
} rs_adial_t;

typedef struct rs_async {
    rs_client_t *c;
    pthread_mutex_t mu;
    int efd, wfd;
    pthread_t thread;
    int started, stop;
    int poked;                 /* wfd written since the thread last took the lists */
    rs_request_t *sub_head, *sub_tail, *woken, *can, *done_head, *done_tail;
    /* the I/O thread's */
    rs_theap_t heap;
    int nlive;
    rs_request_t *live, *sendq, *sendq_tail, *subq, *subq_tail, *batch, *batch_tail;
    rs_aconn_t cn[RS_NODES_MAX]; /* the connections (async_wire.c): cn[0] outside Cluster */
    int ncn;                     /* cn[0..ncn) have been used */
    uint64_t next_dial_ns;     /* when the send queue is to be sent again: 0 after a new
                                  send, 50 ms on when a request found no connection */
    uint64_t drain_end_ns;
    int draining;
    char dial_err[200];        /* the last failed dial's message (named by RS_ECONN's) */
    rs_adial_t dl;             /* the dialer threads (async_dial.c) */
} rs_async_t;

void rs__aq_call(const rs_request_t *rq, rs_call_t *k); /* rq's call, rebuilt */
void rs__aq_on_wake(rs_waiter_t *w);                    /* the callback waiter's wake-up */
/* async_req.c: the request lists, and the transitions */
void rs__aq_list_remove(rs_request_t **head, rs_request_t **tail, rs_request_t *rq);
void rs__aq_list_append(rs_request_t **head, rs_request_t **tail, rs_request_t *rq);
void rs__aq_live_add(rs_async_t *as, rs_request_t *rq);
void rs__aq_live_del(rs_async_t *as, rs_request_t *rq);
void rs__aq_drop_queue_lease(rs_client_t *c, rs_request_t *rq);
/* Frees rq (completed, or never submitted and its err cleared): its messages, and its
 * lease's reference (the block goes with the last one). */
void rs__aq_free(rs_request_t *rq);
/* Ends rq on the I/O thread; published at the end of the pass. A nonzero rc's message (what
 * rs_client_lasterror says inside done) is undo_rc's if noted (rs__aq_set_undo), else this
 * thread's message if the handling of rq's event set one, else rs__aq_why's; the thread's
 * message is cleared after it (each event of the I/O thread starts with none). */
void rs__aq_complete(rs_async_t *as, rs_request_t *rq, int rc, rs_hold_t *hold);
/* Sets this thread's message to the default explanation of rc for rq (ETIMEDOUT: the
 * deadline passed; ECANCELED: rs_request_cancel or rs_client_close; EBUSY/EAGAIN: one
 * attempt found it busy; RS_ELOST...), naming rq's primitive (rq->h still counted): rc. */
int rs__aq_why(rs_async_t *as, rs_request_t *rq, int rc);
/* What a deadline or a cancel ends rq with (ECANCELED if cancelled or closing, else
 * ETIMEDOUT), its message set. */
int rs__aq_stop_rc(rs_async_t *as, rs_request_t *rq);
/* rq's grant is to be given back ("rel"), then done(rc): rq->undo_rc = rc, and rq->err
 * this thread's message if note (else NULL: rs__aq_why's at the end). */
void rs__aq_set_undo(rs_request_t *rq, int rc, int note);
/* A completed acquisition (not a grant) that rs_request_cancel reached before its done ran:
 * ECANCELED, and that message. Under as->mu. */
void rs__aq_cancel_completed(rs_request_t *rq);
/* What a given-back grant ends with: undo_rc with its noted message, or ECANCELED. */
int rs__aq_undone(rs_async_t *as, rs_request_t *rq);
void rs__aq_finish_hold(rs_async_t *as, rs_request_t *rq, int rc); /* a release ended */
void rs__aq_fail(rs_async_t *as, rs_request_t *rq, int rc);
void rs__aq_want_send(rs_async_t *as, rs_request_t *rq, int op);
void rs__aq_set_timer(rs_async_t *as, rs_request_t *rq, int st, uint64_t due);
void rs__aq_granted(rs_async_t *as, rs_request_t *rq, uint64_t fence, long ttl_ms,
                    uint64_t sent_ns, unsigned rl_granted);
void rs__aq_woken(rs_async_t *as, rs_request_t *rq, int wake, const char *msg);
void rs__aq_to_wait(rs_async_t *as, rs_request_t *rq, uint64_t until);
void rs__aq_give_up(rs_async_t *as, rs_request_t *rq);
void *rs__aq_main(void *arg); /* the I/O thread */
/* async_wire.c */
void rs__aq_conn_broken(rs_async_t *as, rs_aconn_t *cn);
void rs__aq_conns_free(rs_async_t *as); /* closes every connection, frees the rings */
/* The I/O thread's wait: polls wfd and every connection until due (RS_NO_DEADLINE: none;
 * at most a second) or the nearest stall; reads what came, and reconnects a connection that
 * stalled. 1 if wfd was readable. */
int rs__aq_poll(rs_async_t *as, uint64_t due);
/* Takes the dials that ended, asks for the ones missing (async_dial.c) and the slot map if
 * it is stale, sends the send queue. */
void rs__aq_flush(rs_async_t *as);
int rs__aq_ring_push(rs_aconn_t *cn, rs_request_t *rq); /* a reply owed to rq (NULL: nobody) */
/* Under Redlock: the I/O thread's connection to master i (cn[i]), or NULL if it has none:
 * then, if dial, a dialer thread is asked for one (not while closing, nor within a second
 * of a failed dial, nor while one dials it: cn[i].dialing). */
rs_aconn_t *rs__aq_master(rs_async_t *as, int i, int dial);
/* async_dial.c: the dialer threads (each call the I/O thread's, but for forget) */
/* Has cn dialled off the I/O thread (budget and back-off as before: 250 ms at most and 50
 * ms after a failure, under Redlock one attempt and a second): cn->dialing until the result
 * is taken. Nothing while it is dialled already, while closing, or within its back-off. */
void rs__adial_want(rs_async_t *as, rs_aconn_t *cn);
/* Has the slot map loaded by a dialer thread, if it is stale and no load is under way. */
void rs__adial_refresh(rs_async_t *as);
/* The dials that ended go into their connections (a failure: its back-off, its message in
 * as->dial_err outside Redlock); an ended load or a new connection sends the queue again. */
void rs__adial_take(rs_async_t *as);
/* Closing: no dial is started any more (one under way ends within its budget). */
void rs__adial_stop(rs_async_t *as);
/* The end of the I/O thread: stops and joins the dialer threads, frees what they dialled
 * and nobody took. */
void rs__adial_join(rs_async_t *as);
/* A fork child's close: frees what was dialled (no thread, no lock taken). */
void rs__adial_forget(rs_async_t *as);
/* async_rl.c: a request's calls under Redlock */
static inline rs_arl_t *rs__aq_rl(rs_request_t *rq)
{
    return (rs_arl_t *)(void *)(rq->str + rq->rlat);
}
/* rq's op on every master it can reach: 0, or 1 when it is to wait in the send queue
 * (fewer than a quorum of masters connected and a dial under way, within send_by_ns). */
int rs__arl_send(rs_async_t *as, rs_request_t *rq);
void rs__arl_reply(rs_async_t *as, rs_aconn_t *cn, rs_request_t *rq, redisReply *r);
void rs__arl_lost(rs_async_t *as, rs_request_t *rq, int i); /* master i's conn broke */
void rs__arl_timer(rs_async_t *as, rs_request_t *rq);       /* its round's budget passed */
void rs__arl_forget(rs_async_t *as, rs_request_t *rq); /* no reply is read for it any more */

/* rs_client_close: stops the I/O thread after leaving Redis' queues (pending requests are
 * cancelled there, grants that raced are released); rs__async_finish, after the holds are
 * released, runs every completion still queued (pending ones get ECANCELED) and frees it
 * all. rs__async_forget: a fork child's close (frees without threads or callbacks). */
void rs__async_stop(rs_client_t *c);
void rs__async_finish(rs_client_t *c);
void rs__async_forget(rs_client_t *c);
