/* rdzv_reply.c -- answers from the rendezvous state machine
 * (rdzv_reply.h). */
#include "rdzv_reply.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void copy_str(char *dst, size_t size, const char *src)
{
  size_t n = strnlen(src, size - 1);

  memcpy(dst, src, n);
  dst[n] = '\0';
}

void rdzv_reply_send(const struct rdzv_state_sink *sink, void *conn,
                     const struct rdzv_proto_msg *m)
{
  /* NULL: a detached node (rdzv_state_conn_reset) */
  if (conn)
    sink->send(sink->ctx, conn, m);
}

void rdzv_reply_text(const struct rdzv_state_sink *sink, void *conn,
                     enum rdzv_proto_op op, enum rdzv_proto_error_code code,
                     bool success, const char *text,
                     const struct rdzv_proto_cause *cause,
                     const char *lost_host, const char *lost_why)
{
  struct rdzv_proto_msg m;

  memset(&m, 0, sizeof m);
  m.op = op;
  m.u.text.code = code;
  m.u.text.success = success;
  copy_str(m.u.text.message, sizeof m.u.text.message, text);
  if (cause)
    m.u.text.cause = *cause;
  if (lost_host) {
    copy_str(m.u.text.lost_host, sizeof m.u.text.lost_host, lost_host);
    copy_str(m.u.text.lost_why, sizeof m.u.text.lost_why, lost_why);
  }
  rdzv_reply_send(sink, conn, &m);
}

int rdzv_reply_refuse(const struct rdzv_state_sink *sink, void *conn,
                      enum rdzv_proto_error_code code, int err, const char *f,
                      ...)
{
  char text[RDZV_PROTO_MAX_TEXT + 1];
  va_list ap;

  va_start(ap, f);
  vsnprintf(text, sizeof text, f, ap);
  va_end(ap);
  rdzv_reply_text(sink, conn, RDZV_PROTO_ERROR, code, false, text, NULL, NULL,
                  NULL);
  return err;
}
