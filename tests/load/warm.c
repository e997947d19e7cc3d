/*
 * warm.c - the driver's warm-up before it measures "used_memory before" (load.h).
 *
 * Redis keeps a one-time cost for every script it has run: the script cache and the Lua
 * code compiled from it, about 650 KB for redisync's scripts on redis-server 7.0.15, which
 * SCRIPT FLUSH does not give back. It does not grow with clients, names or time, so it is
 * not what "memory flat after the run" is about; measured from a cold server it would hide
 * a real leak of the same size. So the driver first takes and releases each primitive once
 * (a name of its own, so the workers' keys are untouched), closes that client before it
 * forks, and measures once the server counts no library connection: the cold and the warm
 * figures both go in the table.
 */
#include <stdio.h>
#include <time.h>

#include "load.h"

static int once(rs_client_t *c, unsigned sem_size)
{
    const char *name = "load-warm-up";
    rs_mutex_t *m = NULL;
    rs_rmutex_t *rm = NULL;
    rs_rwlock_t *rw = NULL;
    rs_sem_t *s = NULL;
    int rc;
    if ((rc = rs_mutex_init(&m, c, name)) == 0 && (rc = rs_mutex_lock(m)) == 0)
        rc = rs_mutex_unlock(m);
    if (rc == 0 && (rc = rs_rmutex_init(&rm, c, name)) == 0 && (rc = rs_rmutex_lock(rm)) == 0)
        rc = rs_rmutex_unlock(rm);
    if (rc == 0 && (rc = rs_rwlock_init(&rw, c, name)) == 0 && (rc = rs_rwlock_rdlock(rw)) == 0 &&
        (rc = rs_rwlock_unlock(rw)) == 0 && (rc = rs_rwlock_wrlock(rw)) == 0)
        rc = rs_rwlock_unlock(rw);
    if (rc == 0 && (rc = rs_sem_init(&s, c, name, sem_size)) == 0 && (rc = rs_sem_wait(s)) == 0)
        rc = rs_sem_post(s);
    if (rc)
        fprintf(stderr, "load: warm-up: %d %s (%s)\n", rc, rs_strerror(rc), rs_client_lasterror(c));
    rs_mutex_destroy(m);
    rs_rmutex_destroy(rm);
    rs_rwlock_destroy(rw);
    rs_sem_destroy(s);
    return rc;
}

int ld_warm_up(const ld_config_t *cfg, const ts_server_t *srv)
{
    rs_config_t rc_cfg;
    rs_config_init(&rc_cfg);
    rc_cfg.url = cfg->url;
    rc_cfg.prefix = cfg->prefix;
    rc_cfg.lease_ms = cfg->lease_ms;
    rs_client_t *c = NULL;
    int rc = rs_client_open(&c, &rc_cfg);
    if (rc) {
        fprintf(stderr, "load: warm-up: rs_client_open: %s\n", rs_client_lasterror(NULL));
        return rc;
    }
    rc = once(c, cfg->sem_size);
    int rc2 = rs_client_close(c);
    /* the server counts only the connection asking once the client's are gone */
    for (long long until = tu_mono_ms() + 5000; tu_mono_ms() < until; tu_sleep_ms(20))
        if (ts_info_ll(srv, "clients", "connected_clients", NULL) == 1)
            break;
    return rc ? rc : rc2;
}
