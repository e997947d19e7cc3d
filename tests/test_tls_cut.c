/*
 * test_tls_cut.c - TLS connections cut in the middle of the handshake (issue 12, "Bad input
 * and failures"): a fake server on a free loopback port accepts the TCP connection, reads
 * what the client sends, and then closes it after a number of bytes of the ClientHello, or
 * answers with half a TLS record, or with a plain-text line. rs_client_open must fail with
 * RS_ECONN and one line of reason within timeout_ms, never hang, never fall back to plain
 * text, and leave no descriptor behind. (Cuts in the middle of a reply are the fault suite's:
 * make test-faults, scenario mutex-tls.)
 *
 *   cut_after_client_hello   the server closes after reading the first bytes
 *   half_a_server_hello      the server sends a TLS record header and 10 bytes, then closes
 *   plain_answer             the server answers the ClientHello with "-ERR ..." (plain RESP)
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "redisync.h"
#include "test_util.h"

TestSuite(tls_cut, .timeout = 60);

typedef struct fake {
    int lfd, port;
    int mode;          /* 0 close after reading, 1 half a record, 2 plain text */
    atomic_int served;
    pthread_t th;
} fake_t;

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    for (;;) {
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        char buf[512];
        ssize_t n = recv(fd, buf, sizeof buf, 0); /* (part of) the ClientHello */
        if (n > 0 && f->mode == 1) {
            static const unsigned char half[] = {0x16, 0x03, 0x03, 0x00, 0x7a, 0x02, 0x00,
                                                 0x00, 0x76, 0x03, 0x03, 1, 2, 3, 4};
            ssize_t w = send(fd, half, sizeof half, MSG_NOSIGNAL);
            (void)w;
        } else if (n > 0 && f->mode == 2) {
            static const char plain[] = "-ERR wrong protocol\r\n";
            ssize_t w = send(fd, plain, sizeof plain - 1, MSG_NOSIGNAL);
            (void)w;
        }
        close(fd);
        atomic_fetch_add(&f->served, 1);
    }
}

static void fake_start(fake_t *f, int mode)
{
    memset(f, 0, sizeof *f);
    f->mode = mode;
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->lfd, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(f->lfd, (struct sockaddr *)&a, &len), 0);
    f->port = ntohs(a.sin_port);
    cr_assert_eq(listen(f->lfd, 16), 0);
    cr_assert_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    close(f->lfd);
    pthread_join(f->th, NULL);
}

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Opens rediss:// to the fake server with timeout_ms 1000: RS_ECONN with a reason, within
 * the timeout (plus a margin for a loaded machine), no descriptor left. */
static void expect_cut(int mode, const char *says)
{
    fake_t f;
    fake_start(&f, mode);
    int before = count_fds();
    char url[128];
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?tls_verify=0", f.port);
    rs_config_t cfg;
    rs_config_init(&cfg);
    cfg.url = url;
    cfg.timeout_ms = 1000;
    rs_client_t *c = NULL;
    long long t0 = tu_mono_ms();
    int rc = rs_client_open(&c, &cfg);
    long long took = tu_mono_ms() - t0;
    const char *why = rs_client_lasterror(NULL);
    cr_log_info("mode %d: %d after %lld ms: %s", mode, rc, took, why);
    cr_expect_eq(rc, RS_ECONN, "open: %d (%s)", rc, why);
    cr_expect_null(c);
    cr_expect(strchr(why, '\n') == NULL && strlen(why) > 0, "one line: '%s'", why);
    cr_expect(strstr(why, says) != NULL, "the reason '%s' does not say '%s'", why, says);
    cr_expect_leq(took, 1000 + 2000, "took %lld ms with timeout_ms 1000", took);
    cr_expect_gt(atomic_load(&f.served), 0, "the fake server saw no connection");
    fake_stop(&f);
    cr_expect_eq(count_fds(), before - 1, "descriptors before %d (with the listener), after %d",
                 before, count_fds());
    if (c)
        rs_client_close(c);
}

Test(tls_cut, cut_after_client_hello)
{
    expect_cut(0, "TLS");
}

Test(tls_cut, half_a_server_hello)
{
    expect_cut(1, "TLS");
}

Test(tls_cut, plain_answer)
{
    expect_cut(2, "plain");
}
