/* http_uv.h -- libcurl's multi interface driven by a libuv loop.
 *
 * curl tells us which sockets to watch (CURLMOPT_SOCKETFUNCTION, one
 * uv_poll_t each) and when to wake up (CURLMOPT_TIMERFUNCTION, one
 * uv_timer_t); we hand readiness back with curl_multi_socket_action.  So
 * every transfer runs on the caller's loop thread, without threads or
 * polling.  Completion callbacks run after curl_multi_socket_action has
 * returned, so they may add and remove transfers freely. */
#ifndef CDRUN_HTTP_UV_H
#define CDRUN_HTTP_UV_H

#include "libcurl_dl.h"
#include <uv.h>

struct http_uv;

/* One transfer.  The caller owns it and the easy handle; it must stay
 * valid until done runs or http_uv_remove is called. */
struct http_uv_req {
  CURL *easy;
  /* The transfer ended: result is CURLE_OK or why it failed. */
  void (*done)(struct http_uv_req *r, CURLcode result);
  void *data;
};

/* Creates the driver on loop.  Returns 0 or a negative libuv error. */
int http_uv_create(uv_loop_t *loop, struct http_uv **out);

/* Starts r's transfer.  Returns 0, or UV_EIO when curl refused it (done
 * will not run then). */
int http_uv_add(struct http_uv *cu, struct http_uv_req *r);

/* Aborts r's transfer; done does not run.  Safe from any callback. */
void http_uv_remove(struct http_uv *cu, struct http_uv_req *r);

/* Frees the driver once its libuv handles are closed.  Every transfer
 * must have been removed or have completed. */
void http_uv_close(struct http_uv *cu);

#endif
