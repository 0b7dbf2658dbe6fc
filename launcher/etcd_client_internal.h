/* etcd_client_internal.h -- what etcd_client.c (the client, its calls
 * and its members) and etcd_watch.c (its watches) share: the client's
 * state, and the few calls that cross.  Nothing here is for the client's
 * users (etcd_client.h). */
#ifndef CDRUN_ETCD_CLIENT_INTERNAL_H
#define CDRUN_ETCD_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <uv.h>

#include "etcd_client.h"
#include "libcurl_dl.h"
#include "list.h"
#include "say.h"

#define MAX_MEMBERS 16

struct etcd_client {
  uv_loop_t *loop;
  struct http_uv *cu;
  char members_text[1024];
  char *members[MAX_MEMBERS];   /* "host:port" */
  int n_members;
  int cur;                      /* member in use */
  double bad_until[MAX_MEMBERS];  /* Note [a hung member] (monotime) */
  double latency[MAX_MEMBERS];  /* a member's answers, smoothed (s) */
  bool https;
  char *cacert, *cert, *key, *user, *password;
  long timeout_ms;
  char *token;                  /* "" until authenticated */
  bool authenticating;
  struct list_node calls;       /* struct etcd_call */
  struct list_node watches;     /* struct etcd_watch, not stopped */
  int watches_alive;            /* not yet freed */
  int walking;                  /* token_ready walks calls: no free */
  bool closing;
  char local_ip[64];
  char peer_ip[64];             /* the member that answered last */
  long peer_port;
};


/* LOGLEVEL=DEBUG: every request and its outcome on stderr. */
bool etcd_debug_on(void);
#define DEBUG(...) \
  do { if (etcd_debug_on()) say("etcd: " __VA_ARGS__); } while (0)

/* ---- etcd_client.c ------------------------------------------------------ */

/* Frees a closed client once nothing of it is still in use. */
void etcd_client_free_if_done(struct etcd_client *c);
/* Appends data[0..n) to *buf (NUL-terminated, growing up to a reply's
 * bound): n, or 0 when it would not fit (curl then fails the transfer). */
size_t etcd_grow_append(char **buf, size_t *len, size_t *cap,
                        const char *data, size_t n);
/* A transfer to member's path with the options every one shares. */
CURL *etcd_easy_for(struct etcd_client *c, int member, const char *path,
                    const char *body, struct curl_slist **hdrs);
/* Note [a hung member]: the member to use (skip: a bit per member not to
 * pick while another is left), one that failed, and how long an attempt
 * on m may take. */
int etcd_member_pick(const struct etcd_client *c, unsigned skip);
void etcd_member_bad_now(struct etcd_client *c, int m);
long etcd_attempt_ms(const struct etcd_client *c, int m, long whole_ms,
                     int tries);
/* Asks for a token (the calls and watches that need one wait for it). */
void etcd_authenticate(struct etcd_client *c);

/* ---- etcd_watch.c ------------------------------------------------------- */

/* The watches leave a member that failed for the one now in use. */
void etcd_watches_follow(struct etcd_client *c);
/* Stops every watch of a closing client. */
void etcd_watch_stop_all(struct etcd_client *c);
/* A watch's body: its create_request for [key64, end64) (base64; end64
 * NULL: the key alone) from start_rev (0: now), with flags
 * (ETCD_WATCH_NOPUT), as malloc'd text; NULL when out of memory. */
char *etcd_watch_request(const char *key64, const char *end64,
                         int64_t start_rev, unsigned flags);

#endif
