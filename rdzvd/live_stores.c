/* live_stores.c -- rdzvd's live stores, one per live job (live_stores.h,
 * Note [live store in rdzvd]). */
#include "live_stores.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "list.h"
#include "live_store.h"

struct served {
  struct list_node in_stores;
  struct live_store *store;
  int port;
  char token[2 * RDZV_PROTO_TOKEN_BYTES + 1];
  char job[RDZV_PROTO_MAX_ID + 1];
};

struct live_stores {
  struct list_node served;      /* struct served, in_stores */
  int n;                        /* <= LIVE_STORES_MAX */
  char host[RDZV_PROTO_MAX_ADDR + 1];
  void (*log)(void *ctx, const char *line);
  void *log_ctx;
};

static void say(const struct live_stores *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void say(const struct live_stores *s, const char *fmt, ...)
{
  char line[1024];
  va_list ap;

  if (!s->log)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  s->log(s->log_ctx, line);
}

/* The job's entry, or NULL; at most LIVE_STORES_MAX steps. */
static struct served *find(struct live_stores *s, const char *job)
{
  struct list_node *pos, *next;

  list_for_each_safe(pos, next, &s->served) {
    struct served *e = list_entry(pos, struct served, in_stores);

    if (strcmp(e->job, job) == 0)
      return e;
  }
  return NULL;
}

static void served_free(struct live_stores *s, struct served *e)
{
  list_remove(&e->in_stores);
  live_store_stop(e->store);
  s->n--;
  free(e);
}

/* The job's store with token: the one it has, or a new one (a restart
 * gives the job a new token, and the old store's members are gone). */
static int serve(void *ctx, const char *job, const char *token, int *port)
{
  struct live_stores *s = ctx;
  struct served *e = find(s, job);
  char why[512];
  int err;

  if (e && strcmp(e->token, token) == 0) {
    *port = e->port;
    return 0;
  }
  if (e)
    served_free(s, e);
  if (s->n >= LIVE_STORES_MAX) {
    say(s, "job %s: no live store (%d served, the most): its agents fall "
        "back to node 0's", job, s->n);
    return -ENOSPC;
  }
  e = calloc(1, sizeof *e);
  if (!e)
    return -ENOMEM;
  snprintf(e->job, sizeof e->job, "%s", job);
  snprintf(e->token, sizeof e->token, "%s", token);
  err = live_store_start(s->host, &e->port, token, &e->store, why,
                         sizeof why);
  if (err) {
    say(s, "job %s: cannot serve its live store (%s): its agents fall back "
        "to node 0's", job, why);
    free(e);
    return err;
  }
  list_insert_tail(&s->served, &e->in_stores);
  s->n++;
  say(s, "job %s: live store on port %d", job, e->port);
  *port = e->port;
  return 0;
}

static void drop(void *ctx, const char *job)
{
  struct live_stores *s = ctx;
  struct served *e = find(s, job);

  if (e) {
    say(s, "job %s: live store on port %d stopped", job, e->port);
    served_free(s, e);
  }
}

struct live_stores *live_stores_create(const char *host,
                                       void (*log)(void *ctx,
                                                   const char *line),
                                       void *log_ctx)
{
  struct live_stores *s = calloc(1, sizeof *s);

  if (!s)
    return NULL;
  list_init(&s->served);
  snprintf(s->host, sizeof s->host, "%s", host ? host : "");
  s->log = log;
  s->log_ctx = log_ctx;
  return s;
}

struct rdzv_live_host live_stores_host(struct live_stores *s)
{
  struct rdzv_live_host h = { s, serve, drop };

  return h;
}

void live_stores_destroy(struct live_stores *s)
{
  int i;

  if (!s)
    return;
  for (i = 0; i <= LIVE_STORES_MAX && !list_empty(&s->served); i++)
    served_free(s, list_first(&s->served, struct served, in_stores));
  free(s);
}
