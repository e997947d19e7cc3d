/*
 * life.c - what every layer of lib/ asks about a client's life, kept at the bottom (just
 * above util.c) so that no lower file calls up into client.c: the fork generation (a child
 * of fork() sees its clients as the parent's: RS_EFORK), the bracket of every public call
 * (rs__enter / rs__leave: refused once the client is closing; close waits for the calls in
 * progress) and the client's references (the opener's and one per handle: the last one
 * frees it through c->destroy). client.c opens and closes clients on top of it.
 */
#include <pthread.h>

#include "internal.h"

static atomic_uint rs_fork_generation;
static pthread_once_t rs_atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    atomic_fetch_add(&rs_fork_generation, 1);
}

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

unsigned rs__fork_watch(void)
{
    pthread_once(&rs_atfork_once, atfork_register);
    return atomic_load(&rs_fork_generation);
}

int rs__forked(const rs_client_t *c)
{
    return rs__fork_generation() != c->fork_generation;
}

unsigned rs__fork_generation(void)
{
    return atomic_load(&rs_fork_generation);
}

void rs__client_ref(rs_client_t *c)
{
    atomic_fetch_add(&c->refs, 1);
}

void rs__client_unref(rs_client_t *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1)
        c->destroy(c);
}

int rs__enter(rs_client_t *c)
{
    if (!c)
        return rs__fail(NULL, EINVAL, "client is NULL");
    if (rs__forked(c))
        return rs__fail(c, RS_EFORK, "this client was opened before fork(); the child may only "
                                     "close it");
    pthread_mutex_lock(&c->life_mu);
    int closing = atomic_load(&c->closing);
    if (!closing)
        c->active++;
    pthread_mutex_unlock(&c->life_mu);
    if (closing)
        return rs__fail(c, ECANCELED, "the client is closed");
    return 0;
}

void rs__leave(rs_client_t *c)
{
    pthread_mutex_lock(&c->life_mu);
    if (--c->active == 0 && atomic_load(&c->closing))
        pthread_cond_broadcast(&c->life_cv);
    pthread_mutex_unlock(&c->life_mu);
}
