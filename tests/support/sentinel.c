/* sentinel.c - see sentinel.h: redis-sentinel processes for the tests. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sentinel.h"

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static pid_t spawn_sentinel(const ts_server_t *s, const char *conf)
{
    char logpath[300];
    snprintf(logpath, sizeof logpath, "%s/sentinel.log", s->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid < 0 ? -1 : pid;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(126);
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0 && in != 0)
        dup2(in, 0);
    int out = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out >= 0) {
        dup2(out, 1);
        dup2(out, 2);
    }
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    execlp("redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
    _exit(127);
}

int ts_sentinel_start(ts_server_t *s, const char *name, int master_port, int quorum,
                      long down_after_ms, long failover_timeout_ms)
{
    return ts_sentinel_start_ex(s, name, master_port, quorum, down_after_ms, failover_timeout_ms,
                                NULL);
}

int ts_sentinel_start_ex(ts_server_t *s, const char *name, int master_port, int quorum,
                         long down_after_ms, long failover_timeout_ms, const char *extra)
{
    if (ts_server_start(s, NULL) != 0)
        return -1;
    ts_server_kill(s); /* keeps the port reserved and the dir */
    char conf[320];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", s->dir);
    FILE *f = fopen(conf, "w");
    if (!f) {
        ts_server_stop(s);
        return -1;
    }
    fprintf(f, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"
               "logfile %s/sentinel.log\n"
               "sentinel monitor %s 127.0.0.1 %d %d\n"
               "sentinel down-after-milliseconds %s %ld\n"
               "sentinel failover-timeout %s %ld\n",
            s->port, s->dir, s->dir, name, master_port, quorum, name, down_after_ms, name,
            failover_timeout_ms);
    if (extra)
        fputs(extra, f);
    fclose(f);
    pid_t pid = spawn_sentinel(s, conf);
    if (pid < 0) {
        ts_server_stop(s);
        return -1;
    }
    s->pid = pid;
    long long deadline = mono_ms() + 5000;
    while (mono_ms() < deadline) {
        char buf[32];
        if (ts_cmd_str(s, buf, sizeof buf, "PING") && strcmp(buf, "PONG") == 0)
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            break;
        }
        nap_ms(20);
    }
    fprintf(stderr, "ts_sentinel_start: sentinel on port %d did not come up (see %s)\n", s->port,
            s->dir);
    ts_server_stop(s);
    return -1;
}

int ts_sentinel_master_port(const ts_server_t *s, const char *name)
{
    redisContext *c = ts_connect(s);
    if (!c)
        return -1;
    redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", name);
    int port = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[1]->type == REDIS_REPLY_STRING)
        port = atoi(r->element[1]->str);
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return port;
}

int ts_wait_replica_up(const ts_server_t *replica, long timeout_ms)
{
    long long deadline = mono_ms() + timeout_ms;
    while (mono_ms() < deadline) {
        redisContext *c = ts_connect(replica);
        if (c) {
            redisReply *r = redisCommand(c, "INFO replication");
            int up = 0;
            if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
                strstr(r->str, "master_link_status:up"))
                up = 1;
            if (r)
                freeReplyObject(r);
            redisFree(c);
            if (up)
                return 0;
        }
        nap_ms(20);
    }
    return -1;
}

int ts_wait_replicas_online(const ts_server_t *master, int n, long timeout_ms)
{
    long long deadline = mono_ms() + timeout_ms;
    while (mono_ms() < deadline) {
        char buf[4096];
        int online = 0;
        if (ts_cmd_str(master, buf, sizeof buf, "INFO replication"))
            for (const char *p = buf; (p = strstr(p, "state=online")) != NULL; p++)
                online++;
        if (online >= n)
            return 0;
        nap_ms(20);
    }
    return -1;
}
