/* metrics_http.h -- a tiny, bounded HTTP/1.x responder that serves one
 * path, GET /metrics, from the daemon's libuv loop.
 *
 * Bounds, so that a hostile or broken client costs little and never
 * blocks the rendezvous or the scrapes: a request head of at most
 * METRICS_HTTP_MAX_REQUEST bytes (431 otherwise), sent within the header
 * timeout of the accept (closed otherwise), then METRICS_HTTP_TIMEOUT_MS
 * to write the response; at most METRICS_HTTP_MAX_CONNS scrapes at once.
 * A connection that arrives when every slot is taken evicts the oldest
 * one still waiting for its request (idle); only when none is idle is
 * the newcomer closed.  So idle clients cannot lock the scrapes out.
 * Every response carries Connection: close.  Other paths get 404, other
 * methods 405, anything that is not HTTP/1.x 400. */
#ifndef RDZVD_METRICS_HTTP_H
#define RDZVD_METRICS_HTTP_H

#include <stddef.h>
#include <uv.h>

#define METRICS_HTTP_MAX_REQUEST 8192
#define METRICS_HTTP_HEADER_TIMEOUT 2.0   /* seconds, the default */
#define METRICS_HTTP_TIMEOUT_MS 10000
/* 64 (was 16): a flood from the scraper's own host displaces an idle
 * slot per accept, and a scraper's request must arrive before 64 more
 * strangers are accepted (Note [idle eviction]); 64 x 8 KiB at most. */
#define METRICS_HTTP_MAX_CONNS 64

struct metrics_http;

/* Produces the body of GET /metrics: a malloc'd buffer of *len bytes,
 * freed by the responder.  Returns 0 or a negative errno (500 then). */
typedef int (*metrics_http_render_cb)(void *ctx, char **body, size_t *len);

struct metrics_http_opts {
  const char *host;             /* "" or NULL: every IPv6 and IPv4 address */
  int port;                     /* 0: any free one */
  metrics_http_render_cb render;
  void *ctx;                    /* render's */
  double header_timeout;        /* seconds a scrape has to send its
                                   request head; 0: the default */
};

/* Binds o->host:o->port and serves on loop.  Returns 0, or a negative
 * libuv error with a sentence in err. */
int metrics_http_start(uv_loop_t *loop, const struct metrics_http_opts *o,
                       struct metrics_http **out, char *err, size_t errlen);

/* The port actually bound. */
int metrics_http_port(const struct metrics_http *h);

/* Closes the listener and every scrape in progress; frees h once every
 * handle is closed (the loop must keep running until then). */
void metrics_http_stop(struct metrics_http *h);

#endif
