/* metrics_http.c -- GET /metrics over HTTP/1.x, bounded (see the header).
 *
 * A scrape is: accept, read the request head into a fixed buffer, answer
 * once, shut down the write side, close.  A timer per scrape bounds each
 * half: the header timeout until the request head is in, then
 * METRICS_HTTP_TIMEOUT_MS to write the answer.
 *
 * Note [idle eviction]: slots are few (METRICS_HTTP_MAX_CONNS), so
 * clients that connect and send nothing could hold them all, and each
 * reopened one would hold its slot again.  A newcomer that finds every
 * slot taken therefore evicts the oldest scrape still waiting for its
 * request: an idle client keeps its slot only while nobody else needs
 * it, and a scraper, which sends its request at once, gets an answer.
 * A scrape whose request is in the kernel but not read yet (libuv accepts
 * the whole backlog before it reads any socket, so a flood behind a
 * scraper is accepted first) is not idle: it is never the one evicted. */
#include "metrics_http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "err.h"
#include "list.h"

#define MS_PER_S 1000.0

struct scrape {
  uv_tcp_t tcp;                 /* both handles: data is the scrape */
  uv_timer_t timer;
  uv_write_t write;
  uv_shutdown_t shutdown;
  struct metrics_http *h;
  struct list_node in_server;   /* h->scrapes, oldest first */
  char *response;               /* while being written */
  int open_handles;             /* tcp and timer: freed at 0 */
  bool closing, answered;       /* answered: the request head is in */
  size_t len;
  char req[METRICS_HTTP_MAX_REQUEST];
};

struct metrics_http {
  uv_loop_t *loop;
  uv_tcp_t listener;
  metrics_http_render_cb render;
  void *ctx;
  struct list_node scrapes;
  int n_scrapes;
  uint64_t header_ms;           /* the header timeout */
  int port;
  int open_handles;             /* listener + each scrape */
  bool stopping;
};

static void http_released(struct metrics_http *h)
{
  if (--h->open_handles == 0 && h->stopping)
    free(h);
}

static void listener_closed(uv_handle_t *handle)
{
  http_released(handle->data);
}

static void scrape_handle_closed(uv_handle_t *handle)
{
  struct scrape *sc = handle->data;
  struct metrics_http *h = sc->h;

  if (--sc->open_handles > 0)
    return;
  free(sc->response);
  free(sc);
  http_released(h);
}

static void scrape_close(struct scrape *sc)
{
  struct metrics_http *h = sc->h;

  if (sc->closing)
    return;
  sc->closing = true;
  list_remove(&sc->in_server);
  h->n_scrapes--;
  uv_close((uv_handle_t *)&sc->tcp, scrape_handle_closed);
  uv_close((uv_handle_t *)&sc->timer, scrape_handle_closed);
}

static void shutdown_done(uv_shutdown_t *req, int status)
{
  (void)status;
  scrape_close(req->data);
}

static void write_done(uv_write_t *req, int status)
{
  struct scrape *sc = req->data;

  if (sc->closing)
    return;
  if (status < 0 ||
      uv_shutdown(&sc->shutdown, (uv_stream_t *)&sc->tcp, shutdown_done))
    scrape_close(sc);
}

static void timer_fired(uv_timer_t *t)
{
  scrape_close(t->data);
}

/* Sends one response (body may be NULL) and then closes. */
static void respond(struct scrape *sc, const char *status,
                    const char *extra_headers, const char *body,
                    size_t body_len, bool head_only)
{
  char head[512];
  int n;
  uv_buf_t b;

  sc->answered = true;
  uv_read_stop((uv_stream_t *)&sc->tcp);
  /* The request is in: the rest of the time is for writing the answer. */
  uv_timer_start(&sc->timer, timer_fired, METRICS_HTTP_TIMEOUT_MS, 0);
  n = snprintf(head, sizeof head,
               "HTTP/1.1 %s\r\n"
               "Content-Type: %s\r\n"
               "Content-Length: %zu\r\n"
               "%s"
               "Connection: close\r\n\r\n",
               status,
               strncmp(status, "200", 3) == 0
                 ? "text/plain; version=0.0.4; charset=utf-8"
                 : "text/plain; charset=utf-8",
               body_len, extra_headers ? extra_headers : "");
  if (head_only)
    body_len = 0;
  sc->response = malloc((size_t)n + body_len);
  if (!sc->response) {
    scrape_close(sc);
    return;
  }
  memcpy(sc->response, head, (size_t)n);
  if (body_len)
    memcpy(sc->response + n, body, body_len);
  b = uv_buf_init(sc->response, (unsigned int)((size_t)n + body_len));
  sc->write.data = sc;
  sc->shutdown.data = sc;
  if (uv_write(&sc->write, (uv_stream_t *)&sc->tcp, &b, 1, write_done))
    scrape_close(sc);
}

static void respond_text(struct scrape *sc, const char *status,
                         const char *extra_headers, const char *text,
                         bool head_only)
{
  respond(sc, status, extra_headers, text, strlen(text), head_only);
}

/* The end of the request head ("\r\n\r\n", or "\n\n" from a lenient
 * client), or NULL while it has not arrived. */
static const char *head_end(const char *buf, size_t len)
{
  size_t i;

  for (i = 0; i + 1 < len; i++) {
    if (buf[i] == '\n' && buf[i + 1] == '\n')
      return buf + i;
    if (i + 3 < len && memcmp(buf + i, "\r\n\r\n", 4) == 0)
      return buf + i;
  }
  return NULL;
}

/* Answers the request whose head is complete in sc->req. */
static void handle_request(struct scrape *sc)
{
  char method[16], target[256], version[16];
  char *line_end, *q;
  bool head_only;
  char *body = NULL;
  size_t len = 0;
  int rc;

  line_end = memchr(sc->req, '\n', sc->len);
  *line_end = '\0';
  if (line_end > sc->req && line_end[-1] == '\r')
    line_end[-1] = '\0';
  if (sscanf(sc->req, "%15s %255s %15s", method, target, version) != 3 ||
      strncmp(version, "HTTP/1.", 7) != 0) {
    respond_text(sc, "400 Bad Request", NULL,
                 "rdzvd: not an HTTP/1.x request\n", false);
    return;
  }
  head_only = strcmp(method, "HEAD") == 0;
  q = strchr(target, '?');
  if (q)
    *q = '\0';
  if (strcmp(target, "/metrics") != 0) {
    respond_text(sc, "404 Not Found", NULL,
                 "rdzvd: only /metrics is served here\n", head_only);
    return;
  }
  if (strcmp(method, "GET") != 0 && !head_only) {
    respond_text(sc, "405 Method Not Allowed", "Allow: GET, HEAD\r\n",
                 "rdzvd: /metrics takes GET\n", false);
    return;
  }
  rc = sc->h->render(sc->h->ctx, &body, &len);
  if (rc) {
    respond_text(sc, "500 Internal Server Error", NULL,
                 "rdzvd: cannot render the metrics\n", head_only);
    return;
  }
  respond(sc, "200 OK", NULL, body, len, head_only);
  free(body);
}

static void alloc_cb(uv_handle_t *handle, size_t hint, uv_buf_t *buf)
{
  struct scrape *sc = handle->data;

  (void)hint;
  *buf = uv_buf_init(sc->req + sc->len,
                     (unsigned int)(sizeof sc->req - sc->len));
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
  struct scrape *sc = stream->data;

  (void)buf;
  if (sc->closing || sc->answered)
    return;
  if (nread < 0) {
    scrape_close(sc);
    return;
  }
  sc->len += (size_t)nread;
  if (head_end(sc->req, sc->len)) {
    handle_request(sc);
  } else if (sc->len == sizeof sc->req) {
    respond_text(sc, "431 Request Header Fields Too Large", NULL,
                 "rdzvd: request too large\n", false);
  }
}

/* True when sc's peer sent bytes that are not read yet. */
static bool has_input(struct scrape *sc)
{
  uv_os_fd_t fd;
  char c;

  return uv_fileno((uv_handle_t *)&sc->tcp, &fd) == 0 &&
         recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

/* Note [idle eviction]: makes room for a newcomer when every slot is
 * taken.  Returns false when no scrape is idle (the newcomer goes). */
static bool evict_idle(struct metrics_http *h)
{
  struct list_node *pos, *next;

  list_for_each_safe(pos, next, &h->scrapes) {
    struct scrape *sc = list_entry(pos, struct scrape, in_server);

    if (!sc->answered && !sc->closing && !has_input(sc)) {
      scrape_close(sc);
      return true;
    }
  }
  return false;
}

static void on_connection(uv_stream_t *listener, int status)
{
  struct metrics_http *h = listener->data;
  struct scrape *sc;
  bool room;

  if (status < 0)
    return;
  sc = calloc(1, sizeof *sc);
  if (!sc)
    return;
  sc->h = h;
  list_init(&sc->in_server);
  uv_tcp_init(h->loop, &sc->tcp);
  uv_timer_init(h->loop, &sc->timer);
  sc->tcp.data = sc->timer.data = sc;
  sc->open_handles = 2;
  h->open_handles++;
  /* Over the limit with nobody idle: accepted only to be closed, so that
   * the backlog does not fill with scrapes nobody will answer. */
  room = h->n_scrapes < METRICS_HTTP_MAX_CONNS || evict_idle(h);
  list_insert_tail(&h->scrapes, &sc->in_server);
  h->n_scrapes++;
  if (uv_accept(listener, (uv_stream_t *)&sc->tcp) != 0 || !room) {
    scrape_close(sc);
    return;
  }
  uv_timer_start(&sc->timer, timer_fired, h->header_ms, 0);
  if (uv_read_start((uv_stream_t *)&sc->tcp, alloc_cb, read_cb))
    scrape_close(sc);
}

static int bind_listen(struct metrics_http *h, const char *host, int port,
                       char *err, size_t errlen)
{
  struct addrinfo hints, *res = NULL;
  char portstr[16];
  int rc;

  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  snprintf(portstr, sizeof portstr, "%d", port);
  if (!host || !*host) {
    /* Dual stack first; an IPv4-only machine falls back to 0.0.0.0. */
    struct sockaddr_in6 a6;
    struct sockaddr_in a4;

    uv_ip6_addr("::", port, &a6);
    rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&a6, 0);
    if (rc == UV_EAFNOSUPPORT || rc == UV_EADDRNOTAVAIL) {
      uv_ip4_addr("0.0.0.0", port, &a4);
      rc = uv_tcp_bind(&h->listener, (struct sockaddr *)&a4, 0);
    }
    host = "[::]";
  } else {
    rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
      return err_set(err, errlen, UV_EINVAL,
                     "--metrics: cannot resolve '%s': %s", host,
                     gai_strerror(rc));
    }
    rc = uv_tcp_bind(&h->listener, res->ai_addr, 0);
    freeaddrinfo(res);
  }
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&h->listener, 128, on_connection);
  if (rc)
    snprintf(err, errlen, "--metrics: cannot listen on %s:%d: %s", host,
             port, uv_strerror(rc));
  return rc;
}

int metrics_http_start(uv_loop_t *loop, const struct metrics_http_opts *o,
                       struct metrics_http **out, char *err, size_t errlen)
{
  struct metrics_http *h = calloc(1, sizeof *h);
  struct sockaddr_storage ss;
  int namelen = sizeof ss, rc;

  if (!h) {
    return err_set(err, errlen, UV_ENOMEM, "out of memory");
  }
  h->loop = loop;
  list_init(&h->scrapes);
  h->render = o->render;
  h->ctx = o->ctx;
  h->header_ms = (uint64_t)((o->header_timeout > 0
                               ? o->header_timeout
                               : METRICS_HTTP_HEADER_TIMEOUT) * MS_PER_S);
  uv_tcp_init(loop, &h->listener);
  h->listener.data = h;
  h->open_handles = 1;
  rc = bind_listen(h, o->host, o->port, err, errlen);
  if (rc) {
    metrics_http_stop(h);
    return rc;
  }
  if (uv_tcp_getsockname(&h->listener, (struct sockaddr *)&ss,
                         &namelen) == 0)
    h->port = ntohs(ss.ss_family == AF_INET6
                        ? ((struct sockaddr_in6 *)&ss)->sin6_port
                        : ((struct sockaddr_in *)&ss)->sin_port);
  *out = h;
  return 0;
}

int metrics_http_port(const struct metrics_http *h)
{
  return h->port;
}

void metrics_http_stop(struct metrics_http *h)
{
  if (h->stopping)
    return;
  h->stopping = true;
  while (!list_empty(&h->scrapes))
    scrape_close(list_first(&h->scrapes, struct scrape, in_server));
  uv_close((uv_handle_t *)&h->listener, listener_closed);
}
