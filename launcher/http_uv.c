/* http_uv.c -- libcurl multi on a libuv loop (curl's docs/examples/multi-uv.c
 * pattern): uv_poll_t per socket, one uv_timer_t, curl_multi_socket_action. */
#include "http_uv.h"

#include <stdbool.h>
#include <stdlib.h>

#include "list.h"

struct http_uv {
  uv_loop_t *loop;
  CURLM *multi;
  uv_timer_t timer;
  int open_handles;             /* the timer and every poll */
  int depth;                    /* inside socket_action/dispatch */
  bool closing;
  bool cleaned;                 /* curl_multi_cleanup done */
  struct list_node socks;       /* struct http_uv_sock, not closing */
};

/* One socket curl asked us to watch. */
struct http_uv_sock {
  uv_poll_t poll;
  curl_socket_t fd;
  struct http_uv *cu;
  struct list_node node;        /* in cu->socks */
};

static void handle_closed(uv_handle_t *h);

static void sock_close(struct http_uv_sock *s)
{
  list_remove(&s->node);
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, handle_closed);
}

static void maybe_free(struct http_uv *cu)
{
  if (cu->closing && cu->cleaned && cu->open_handles == 0)
    free(cu);
}

static void handle_closed(uv_handle_t *h)
{
  struct http_uv *cu;

  if (h->type == UV_POLL) {
    struct http_uv_sock *s = h->data;

    cu = s->cu;
    free(s);
  } else {
    cu = h->data;
  }
  cu->open_handles--;
  maybe_free(cu);
}

static void finish_close(struct http_uv *cu)
{
  if (cu->cleaned || cu->depth > 0)
    return;
  cu->depth++;
  curl_multi_cleanup(cu->multi);  /* may still remove sockets */
  cu->depth--;
  cu->cleaned = true;
  /* Whatever curl did not say it removed: its sockets are closed now. */
  while (!list_empty(&cu->socks))
    sock_close(list_first(&cu->socks, struct http_uv_sock, node));
  if (!uv_is_closing((uv_handle_t *)&cu->timer))
    uv_close((uv_handle_t *)&cu->timer, handle_closed);
  maybe_free(cu);
}

/* Completed transfers: removed from the multi handle before their done
 * callback runs, which may then start or remove others. */
static void dispatch_done(struct http_uv *cu)
{
  struct http_uv_req *r;
  CURLMsg *msg;
  int left;

  while (!cu->closing && (msg = curl_multi_info_read(cu->multi, &left))) {
    if (msg->msg != CURLMSG_DONE)
      continue;
    CURLcode result = msg->data.result;
    CURL *easy = msg->easy_handle;

    r = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
    curl_multi_remove_handle(cu->multi, easy);
    if (r && r->done)
      r->done(r, result);
  }
}

static void socket_action(struct http_uv *cu, curl_socket_t fd, int flags)
{
  int running;

  cu->depth++;
  curl_multi_socket_action(cu->multi, fd, flags, &running);
  dispatch_done(cu);
  cu->depth--;
  if (cu->closing)
    finish_close(cu);
}

static void poll_cb(uv_poll_t *p, int status, int events)
{
  struct http_uv_sock *s = p->data;
  int flags = 0;

  if (status < 0)
    flags = CURL_CSELECT_ERR;
  if (events & UV_READABLE)
    flags |= CURL_CSELECT_IN;
  if (events & UV_WRITABLE)
    flags |= CURL_CSELECT_OUT;
  socket_action(s->cu, s->fd, flags);
}

static void timer_cb(uv_timer_t *t)
{
  struct http_uv *cu = t->data;

  socket_action(cu, CURL_SOCKET_TIMEOUT, 0);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp,
                     void *socketp)
{
  struct http_uv *cu = userp;
  struct http_uv_sock *s = socketp;
  int events = 0;

  (void)easy;
  if (what == CURL_POLL_REMOVE) {
    if (s) {
      sock_close(s);
      curl_multi_assign(cu->multi, fd, NULL);
    }
    return 0;
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s)
      return -1;
    s->fd = fd;
    s->cu = cu;
    if (uv_poll_init_socket(cu->loop, &s->poll, fd) != 0) {
      free(s);
      return -1;
    }
    s->poll.data = s;
    list_insert_head(&cu->socks, &s->node);
    cu->open_handles++;
    curl_multi_assign(cu->multi, fd, s);
  }
  if (what & CURL_POLL_IN)
    events |= UV_READABLE;
  if (what & CURL_POLL_OUT)
    events |= UV_WRITABLE;
  uv_poll_start(&s->poll, events, poll_cb);
  return 0;
}

static int on_timer(CURLM *multi, long ms, void *userp)
{
  struct http_uv *cu = userp;

  (void)multi;
  if (cu->closing)
    return 0;
  if (ms < 0)
    uv_timer_stop(&cu->timer);
  else    /* 0: as soon as possible, but not from inside curl */
    uv_timer_start(&cu->timer, timer_cb, (uint64_t)ms, 0);
  return 0;
}

int http_uv_create(uv_loop_t *loop, struct http_uv **out)
{
  struct http_uv *cu = calloc(1, sizeof *cu);

  if (!cu)
    return UV_ENOMEM;
  cu->loop = loop;
  list_init(&cu->socks);
  cu->multi = curl_multi_init();
  if (!cu->multi) {
    free(cu);
    return UV_ENOMEM;
  }
  uv_timer_init(loop, &cu->timer);
  cu->timer.data = cu;
  cu->open_handles = 1;
  curl_multi_setopt(cu->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(cu->multi, CURLMOPT_SOCKETDATA, cu);
  curl_multi_setopt(cu->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(cu->multi, CURLMOPT_TIMERDATA, cu);
  *out = cu;
  return 0;
}

int http_uv_add(struct http_uv *cu, struct http_uv_req *r)
{
  if (cu->closing)
    return UV_ECANCELED;
  curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
  if (curl_multi_add_handle(cu->multi, r->easy) != CURLM_OK)
    return UV_EIO;
  return 0;
}

void http_uv_remove(struct http_uv *cu, struct http_uv_req *r)
{
  curl_multi_remove_handle(cu->multi, r->easy);
}

void http_uv_close(struct http_uv *cu)
{
  cu->closing = true;
  uv_timer_stop(&cu->timer);
  finish_close(cu);
}
