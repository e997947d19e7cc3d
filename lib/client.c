/*
 * client.c - rs_client_t: configuration, identity, lifetime.
 *
 * Open parses and checks the configuration, draws the client's identity (a public id for
 * channel names and inspection, a 128-bit secret from which owner tokens derive), and
 * connects once so that a bad address or password fails here rather than at the first lock.
 * The watchdog and notifier threads start lazily, at the first hold and the first wait.
 *
 * Lifetime: every public call brackets itself with rs__enter/rs__leave. Close marks the
 * client closing, cancels sleeping waiters, waits for calls in progress to return, releases
 * the holds still registered with the watchdog, stops the threads and frees what it can.
 * Handles keep a reference on the client (rs__client_ref, life.c) so that destroying a handle
 * after close touches no freed memory; the last reference frees it through c->destroy. In a
 * child after fork() every call returns RS_EFORK and close only frees memory: the parent's
 * holds are the parent's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "internal.h"

RS_API void rs_config_init(rs_config_t *cfg)
{
    if (cfg)
        memset(cfg, 0, sizeof *cfg);
}

RS_API const char *rs_version(void)
{
    return RS_VERSION_STRING;
}

RS_API const char *rs_client_id(const rs_client_t *c)
{
    return c ? c->public_id : "";
}

RS_API const char *rs_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case RS_ELOST:
        return "the hold had been lost (lease expired, taken over or not renewed in time)";
    case RS_ECONN:
        return "Redis could not be reached within timeout_ms";
    case RS_ESERVER:
        return "Redis answered with an error (see rs_client_lasterror)";
    case RS_EREPL:
        return "fewer replicas than min_replicas confirmed the acquisition; it was undone";
    case RS_EFORK:
        return "the client was opened before fork(); in the child it may only be closed";
    case RS_EQUEUE:
        return "the waiter queue of this name is full (max_waiters)";
    }
    const char *d = err > 0 ? strerrordesc_np(err) : NULL;
    return d ? d : "unknown error";
}

/* fork() detection without a system call per call: every child bumps a generation. */
static void hex(const unsigned char *in, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int check_config(const rs_config_t *cfg)
{
    if (cfg->lease_ms < 0 || (cfg->lease_ms > 0 && cfg->lease_ms < 30))
        return rs__fail(NULL, EINVAL, "lease_ms must be 0 (default) or at least 30, got %ld",
                        cfg->lease_ms);
    if (cfg->lease_ms > 86400000L)
        return rs__fail(NULL, EINVAL, "lease_ms must be at most one day, got %ld", cfg->lease_ms);
    if (cfg->timeout_ms < 0 || cfg->timeout_ms > 86400000L)
        return rs__fail(NULL, EINVAL, "timeout_ms must be 0 (default) to one day, got %ld",
                        cfg->timeout_ms);
    if (cfg->replica_timeout_ms < 0 || cfg->replica_timeout_ms > 86400000L)
        return rs__fail(NULL, EINVAL, "replica_timeout_ms must be 0 (default) to one day");
    if (cfg->min_replicas < 0)
        return rs__fail(NULL, EINVAL, "min_replicas must not be negative");
    if (cfg->min_replicas > 1000)
        return rs__fail(NULL, EINVAL, "min_replicas must be at most 1000, got %d",
                        cfg->min_replicas);
    if (cfg->label) {
        size_t n = strlen(cfg->label);
        if (n > RS_LABEL_MAX)
            return rs__fail(NULL, EINVAL, "label must be at most %d bytes, got %zu",
                            RS_LABEL_MAX, n);
        for (const unsigned char *p = (const unsigned char *)cfg->label; *p; p++)
            if (*p < 0x20 || *p == 0x7f)
                return rs__fail(NULL, EINVAL, "label must not contain control characters "
                                              "(it is shown on one line by redisync info)");
    }
    if (cfg->prefix) {
        size_t n = strlen(cfg->prefix);
        if (n == 0 || n > RS_PREFIX_MAX)
            return rs__fail(NULL, EINVAL, "prefix must be 1 to %d bytes", RS_PREFIX_MAX);
        if (strpbrk(cfg->prefix, "{}"))
            return rs__fail(NULL, EINVAL, "prefix must not contain braces (they would break "
                                          "the hash tag of every key)");
    }
    return 0;
}

static void client_free(rs_client_t *c)
{
    if (rs__forked(c)) {
        /* the parent's threads may have been waiting on these condition variables when it
         * forked; glibc's pthread_cond_destroy would wait for them forever: only free. No
         * other thread exists here, so the lists are walked without their locks. */
        rs__watchdog_forget(c);
        rs__notify_shard_forget(c);
        rs__notify_forget(c);
        rs__tls_free(c->tls);
        free(c->prefix);
        free(c->channel_prefix);
        free(c->channel);
        free(c->label);
        memset(&c->ep, 0, sizeof c->ep);
        free(c);
        return;
    }
    pthread_mutex_destroy(&c->life_mu);
    pthread_cond_destroy(&c->life_cv);
    pthread_mutex_destroy(&c->pool_mu);
    pthread_mutex_destroy(&c->wd.mu);
    pthread_cond_destroy(&c->wd.cv);
    pthread_mutex_destroy(&c->nt.mu);
    pthread_cond_destroy(&c->nt.cv);
    rs__topo_free(c);
    rs__cluster_free(c);
    rs__tls_free(c->tls);
    free(c->prefix);
    free(c->channel_prefix);
    free(c->channel);
    free(c->label);
    memset(&c->ep, 0, sizeof c->ep); /* the password */
    free(c);
}

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

RS_API int rs_client_open(rs_client_t **out, const rs_config_t *cfg_in)
{
    rs__clear_error();
    if (!out)
        return rs__fail(NULL, EINVAL, "out is NULL");
    *out = NULL;
    rs_config_t cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        rs_config_init(&cfg);
    int rc = check_config(&cfg);
    if (rc)
        return rc;

    rs_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return rs__fail(NULL, ENOMEM, "out of memory");
    atomic_init(&c->refs, 1);
    c->destroy = client_free; /* the last rs__client_unref (life.c) */
    pthread_mutex_init(&c->life_mu, NULL);
    pthread_cond_init(&c->life_cv, NULL);
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_mutex_init(&c->wd.mu, NULL);
    cond_init_mono(&c->wd.cv);
    pthread_mutex_init(&c->nt.mu, NULL);
    c->topo_hook = rs__notify_topology;
    c->wd.start = rs__watchdog_start;
    cond_init_mono(&c->nt.cv);
    for (int i = 0; i < RS_SEEDS_MAX; i++)
        c->nt.link[i].fd = -1;

    const char *url = cfg.url ? cfg.url : getenv("REDISYNC_URL");
    if (!url || (!cfg.url && !*url))
        url = "redis://127.0.0.1:6379";
    rc = rs__url_parse(NULL, url, &c->ep);
    if (rc)
        goto fail;

    c->lease_ms = cfg.lease_ms ? cfg.lease_ms : 30000;
    c->timeout_ms = cfg.timeout_ms ? cfg.timeout_ms : 2000;
    c->min_replicas = cfg.min_replicas;
    c->confirm_wakeups = cfg.confirm_wakeups != 0;
    c->replica_timeout_ms = cfg.replica_timeout_ms ? cfg.replica_timeout_ms : 500;
    c->max_waiters = cfg.max_waiters ? cfg.max_waiters : 100000;
    c->on_lost = cfg.on_lost;
    c->on_lost_arg = cfg.on_lost_arg;
    c->log = cfg.log;
    c->log_arg = cfg.log_arg;
    c->fork_generation = rs__fork_watch();

    unsigned char rnd[24];
    if (rs__random_bytes(rnd, sizeof rnd) != 0) {
        rc = rs__fail(NULL, EAGAIN, "getrandom failed: %s", strerror(errno));
        goto fail;
    }
    hex(rnd, 8, c->public_id);
    hex(rnd + 8, 16, c->secret_hex);
    memset(rnd, 0, sizeof rnd);

    const char *prefix = cfg.prefix ? cfg.prefix : "rs";
    c->prefix = strdup(prefix);
    c->prefix_len = strlen(prefix);
    size_t cplen = c->prefix_len + sizeof ":client:";
    c->channel_prefix = malloc(cplen);
    c->channel = malloc(cplen + sizeof c->public_id);
    c->label = cfg.label && *cfg.label ? strdup(cfg.label) : NULL;
    if (!c->prefix || !c->channel_prefix || !c->channel || (cfg.label && *cfg.label && !c->label)) {
        rc = rs__fail(NULL, ENOMEM, "out of memory");
        goto fail;
    }
    snprintf(c->channel_prefix, cplen, "%s:client:", prefix);
    snprintf(c->channel, cplen + sizeof c->public_id, "%s%s", c->channel_prefix, c->public_id);

    if (c->ep.tls) {
        /* one SSL_CTX for every connection of the client: its files are read now */
        char why[400];
        rc = rs__tls_new(&c->ep, &c->tls, why, sizeof why);
        if (rc) {
            rc = rs__fail(NULL, rc, "%s", why);
            goto fail;
        }
        if (!c->ep.tls_verify)
            rs__log(c, RS_LOG_WARN, "tls_verify=0: server certificates and names are not "
                                    "checked; anyone on the path can impersonate Redis");
    }

    /* connect once: a wrong address or password is reported now */
    if (c->ep.mode == RS_MODE_REDLOCK) {
        if (c->min_replicas > 0) {
            /* WAIT per master could be done, but a Redlock master is meant to stand alone;
             * accepting and ignoring it would promise what is not done */
            rc = rs__fail(NULL, EINVAL, "min_replicas is not supported with redlock:// (each "
                                        "master stands alone; see docs/deployments.md)");
            goto fail;
        }
        rc = rs__rl_open(c); /* a quorum of the masters, each tried once per round */
        if (rc)
            goto fail;
    } else {
        if (c->ep.mode == RS_MODE_CLUSTER)
            rs__cluster_init(c);
        rs_conn_t *k;
        rc = rs__conn_get(c, rs__now_ns() + (uint64_t)c->timeout_ms * RS_NS_PER_MS, &k);
        if (rc)
            goto fail;
        rs__conn_put(c, k, 0);
    }
    if (c->ep.mode == RS_MODE_CLUSTER && (rc = rs__cluster_refresh(c, 1, c->timeout_ms)) != 0)
        goto fail;
    rc = rs__topo_start(c);
    if (rc)
        goto fail;
    *out = c;
    return 0;
fail:
    rs__topo_stop(c);
    rs__rl_forget(c);
    rs__conn_pool_free(c);
    rs__client_unref(c);
    return rc;
}

/* Releases, owner-checked, every hold still registered (best effort: Redis may be gone,
 * and then the leases simply run out). Once Redis proved unreachable, the rest are only
 * unregistered, so close blocks for about timeout_ms at most, not once per hold. */
static void release_all(rs_client_t *c)
{
    int reachable = 1;
    while (reachable) {
        pthread_mutex_lock(&c->wd.mu);
        rs_lease_t *l = c->wd.head;
        while (l && (l->waiter || l->lost))
            l = l->next;
        if (l)
            atomic_fetch_add(&l->refs, 1);
        pthread_mutex_unlock(&c->wd.mu);
        if (!l)
            break;
        rs__watch_del(c, l);
        redisReply *r = NULL;
        int rc = l->release_op ? rs__lease_call(c, l, l->release_op, &r) : 0;
        if (rc == 0 && r)
            freeReplyObject(r);
        if (rc == RS_ECONN)
            reachable = 0;
        rs__lease_unref(l);
    }
    /* what is left (lost holds) is only unregistered */
    for (;;) {
        pthread_mutex_lock(&c->wd.mu);
        rs_lease_t *l = c->wd.head;
        if (l)
            atomic_fetch_add(&l->refs, 1);
        pthread_mutex_unlock(&c->wd.mu);
        if (!l)
            return;
        rs__watch_del(c, l);
        rs__lease_unref(l);
    }
}

RS_API int rs_client_close(rs_client_t *c)
{
    if (!c)
        return 0;
    if (rs__forked(c)) {
        /* a child of fork(): the threads do not exist here and the holds are the parent's */
        rs__async_forget(c);
        rs__rl_forget(c);
        rs__conn_pool_free(c);
        if (c->wd.ctx)
            rs__ctx_free(c->wd.ctx);
        c->wd.ctx = NULL;
        c->closed = 1;
        rs__client_unref(c);
        return 0;
    }
    pthread_mutex_lock(&c->life_mu);
    if (atomic_exchange(&c->closing, 1)) {
        pthread_mutex_unlock(&c->life_mu);
        return rs__fail(c, EINVAL, "the client is already closed");
    }
    pthread_mutex_unlock(&c->life_mu);
    rs__notify_cancel_all(c);
    pthread_mutex_lock(&c->life_mu);
    while (c->active > 0)
        pthread_cond_wait(&c->life_cv, &c->life_mu);
    pthread_mutex_unlock(&c->life_mu);

    rs__async_stop(c);    /* pending requests leave Redis' queues */
    release_all(c);
    rs__async_finish(c);  /* their done(ECANCELED) runs here, on this thread */
    rs__topo_stop(c);
    rs__watchdog_stop(c);
    rs__notify_shard_stop(c);
    rs__notify_stop(c);
    rs__rl_forget(c);
    rs__conn_pool_free(c);
    c->closed = 1;
    rs__client_unref(c);
    return 0;
}
