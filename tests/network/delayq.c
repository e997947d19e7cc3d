/*
 * delayq.c - the network fault suite's delay line (make test-network; build/redisync-delayq).
 *
 *   redisync-delayq QUEUE DELAY_MS JITTER_MS [SEED]
 *
 * This kernel has no netem, so delay and jitter are made here: iptables rules send the
 * data server's packets to NFQUEUE number QUEUE (`-j NFQUEUE --queue-num QUEUE
 * --queue-bypass`: while no program listens, packets pass), and this program accepts each
 * one DELAY_MS +- JITTER_MS (uniform) after it arrived. Packets wait in a binary heap keyed
 * by release time; the loop poll()s the queue's netlink socket with a timeout to the next
 * release. Verdicts are given by packet id, so jitter reorders packets as a real path can.
 * Only metadata is copied (NFQNL_COPY_META): the packet itself never leaves the kernel.
 *
 * Started and stopped by the fault driver (tests/faults/net.c) inside the test's own network
 * namespace. SIGTERM/SIGINT: every packet still held is accepted, then it exits 0. It prints
 * "delayq: ready" on stdout once bound, so the driver adds its rules only after that. The
 * queue is fail-open (NFQA_CFG_F_FAIL_OPEN): a full queue accepts rather than drops, so this
 * program adds delay, never loss (loss is a separate statistic rule).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <sys/socket.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

typedef struct held {
    int64_t at; /* CLOCK_MONOTONIC us */
    uint32_t id;
} held_t;

static held_t *heap;
static size_t nheap, capheap;
static long g_delay_us, g_jitter_us;
static uint64_t g_rng;
static volatile sig_atomic_t g_stop;
static long g_overflow;

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t rnd(void) /* splitmix64, as in tests/faults/faults.h */
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* 0 held; -1 no room (the caller accepts the packet at once: delay, never loss) */
static int heap_push(held_t h)
{
    if (nheap == capheap) {
        size_t cap = capheap ? capheap * 2 : 4096;
        held_t *n = realloc(heap, cap * sizeof *n);
        if (!n) {
            g_overflow++;
            return -1;
        }
        heap = n, capheap = cap;
    }
    size_t i = nheap++;
    while (i > 0 && heap[(i - 1) / 2].at > h.at) {
        heap[i] = heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    heap[i] = h;
    return 0;
}

static held_t heap_pop(void)
{
    held_t top = heap[0], last = heap[--nheap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= nheap)
            break;
        if (c + 1 < nheap && heap[c + 1].at < heap[c].at)
            c++;
        if (heap[c].at >= last.at)
            break;
        heap[i] = heap[c];
        i = c;
    }
    if (nheap)
        heap[i] = last;
    return top;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *arg)
{
    (void)msg, (void)arg;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    long d = g_delay_us;
    if (g_jitter_us > 0)
        d += (long)(rnd() % (uint64_t)(2 * g_jitter_us + 1)) - g_jitter_us;
    if (heap_push((held_t){mono_us() + (d > 0 ? d : 0), id}) != 0)
        nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: redisync-delayq QUEUE DELAY_MS JITTER_MS [SEED]\n");
        return 2;
    }
    int qnum = atoi(argv[1]);
    g_delay_us = atol(argv[2]) * 1000;
    g_jitter_us = atol(argv[3]) * 1000;
    g_rng = argc > 4 ? strtoull(argv[4], NULL, 10) : (uint64_t)getpid();
    if (g_jitter_us > g_delay_us)
        g_jitter_us = g_delay_us;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    struct nfq_handle *h = nfq_open();
    if (!h) {
        perror("delayq: nfq_open");
        return 1;
    }
    nfq_bind_pf(h, AF_INET); /* (a no-op on kernels >= 3.8; failure is harmless there) */
    struct nfq_q_handle *qh = nfq_create_queue(h, (uint16_t)qnum, on_packet, NULL);
    if (!qh) {
        perror("delayq: nfq_create_queue");
        nfq_close(h);
        return 1;
    }
    if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
        perror("delayq: nfq_set_mode");
        return 1;
    }
    nfq_set_queue_maxlen(qh, 65536);
    nfq_set_queue_flags(qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN);
    nfnl_rcvbufsiz(nfq_nfnlh(h), 8u << 20);
    int fd = nfq_fd(h);
    printf("delayq: ready (queue %d, %ld +- %ld ms)\n", qnum, g_delay_us / 1000, g_jitter_us / 1000);
    fflush(stdout);

    static char buf[65536] __attribute__((aligned));
    long packets = 0, enobufs = 0;
    while (!g_stop) {
        int64_t now = mono_us();
        while (nheap && heap[0].at <= now) {
            held_t p = heap_pop();
            nfq_set_verdict(qh, p.id, NF_ACCEPT, 0, NULL);
        }
        int timeout = -1;
        if (nheap) {
            int64_t wait = heap[0].at - now;
            timeout = (int)((wait + 999) / 1000);
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        int n = poll(&pfd, 1, timeout);
        if (n < 0 && errno != EINTR) {
            perror("delayq: poll");
            break;
        }
        if (n <= 0)
            continue;
        for (;;) {
            ssize_t len = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (len < 0) {
                if (errno == ENOBUFS) { /* the kernel dropped queue messages: they fail open */
                    enobufs++;
                    continue;
                }
                break;
            }
            nfq_handle_packet(h, buf, (int)len);
            packets++;
        }
    }
    while (nheap) { /* nothing held is lost on the way out */
        held_t p = heap_pop();
        nfq_set_verdict(qh, p.id, NF_ACCEPT, 0, NULL);
    }
    nfq_destroy_queue(qh);
    nfq_close(h);
    fprintf(stderr, "delayq: %ld packets delayed, %ld ENOBUFS, %ld overflow\n", packets, enobufs,
            g_overflow);
    free(heap);
    return 0;
}
