/*
 * redis_acl.c - the least-privilege users of make test-acl (RS_TEST_ACL=1).
 */
#include "redis_server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* RS_TEST_ACL=1 (make test-acl): every server also has the user "rsapp" with exactly the
 * rights docs/security.md lists for redisync, and ts_server_t.url logs in as that user, so
 * the whole suite runs with least privilege. The default user keeps every right for the
 * tests' own raw connections. Keep this list in step with docs/security.md. */
#define TS_ACL_USER "rsapp"
#define TS_ACL_PASS "rsapp-pw"
static const char ts_acl_rules[] =
    "resetkeys ~rs:* ~t* resetchannels &rs:* &t* -@all "
    "+evalsha +script|load +ping +select +subscribe +unsubscribe +scan "
    "+get +set +del +exists +type +pttl +pexpire +time +publish "
    "+hget +hset +hmget +hdel +hexists +hgetall +hlen +hincrby +hsetnx +hscan +hkeys "
    "+zadd +zrem +zscore +zcard +zrange +zrangebyscore +zremrangebyscore "
    "+sadd +srem +sismember +scard +smembers";

/* The user the Sentinel and Cluster suites log in as: the rules above plus what those
 * deployments need (docs/security.md, "Deployments"), nothing more. */
#define TS_DEP_USER "rsdep"
#define TS_DEP_PASS "rsdep-pw"
static const char ts_dep_rules[] = "+role +wait +cluster|slots +asking +spublish +ssubscribe +sunsubscribe";

const char *ts_deploy_userinfo(void)
{
    return ts_acl_mode() ? TS_DEP_USER ":" TS_DEP_PASS "@" : "";
}

const char *ts_acl_userinfo(void)
{
    return ts_acl_mode() ? TS_ACL_USER ":" TS_ACL_PASS "@" : "";
}

int ts_acl_mode(void)
{
    const char *v = getenv("RS_TEST_ACL");
    return v && *v && strcmp(v, "0") != 0;
}

int ts_acl_write_file(const ts_server_t *s, char *path, size_t len)
{
    snprintf(path, len, "%s/users.acl", s->dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "user default on nopass ~* &* +@all\n");
    fprintf(f, "user %s on >%s %s\n", TS_ACL_USER, TS_ACL_PASS, ts_acl_rules);
    fprintf(f, "user %s on >%s %s %s\n", TS_DEP_USER, TS_DEP_PASS, ts_acl_rules, ts_dep_rules);
    return fclose(f);
}
