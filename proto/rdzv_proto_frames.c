/* rdzv_proto_frames.c -- the one frame-reading loop (see
 * rdzv_proto_frames.h). */
#include "rdzv_proto_frames.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "err.h"

/* The body length a frame's header announces; the header must be in. */
static size_t announced(const char *p)
{
  const unsigned char *u = (const unsigned char *)p;

  return (size_t)((uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
                  (uint32_t)u[2] << 8 | (uint32_t)u[3]);
}

ssize_t rdzv_proto_frames_read(const char *data, size_t len, size_t max_body,
                               rdzv_proto_frames_cb cb, void *ctx, char *err,
                               size_t errlen)
{
  size_t off = 0, flen;
  struct rdzv_proto_msg m;
  int rc, stop;

  if (!max_body || max_body > RDZV_PROTO_MAX_FRAME)
    max_body = RDZV_PROTO_MAX_FRAME;
  for (;;) {
    if (len - off >= RDZV_PROTO_FRAME_HEADER &&
        announced(data + off) > max_body) {
      return err_set(err, errlen, -EMSGSIZE,
                     "frame too large (%zu bytes; the limit is %zu)",
                     announced(data + off), max_body);
    }
    rc = rdzv_proto_frame_peek(data + off, len - off, &flen);
    if (rc == 0)
      return (ssize_t)off;
    if (rc < 0) {
      return err_set(err, errlen, rc, "%s",
                     rc == -EMSGSIZE ? "frame too large" : "empty frame");
    }
    rc = rdzv_proto_decode(data + off + RDZV_PROTO_FRAME_HEADER,
                           flen - RDZV_PROTO_FRAME_HEADER, &m, err, errlen);
    if (rc)
      return rc;
    off += flen;
    stop = cb(ctx, &m);
    rdzv_proto_msg_free(&m);
    if (stop)
      return (ssize_t)off;
  }
}
