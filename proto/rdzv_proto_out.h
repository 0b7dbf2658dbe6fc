/* rdzv_proto_out.h -- the encoder's output buffer: JSON text written as
 * cJSON_PrintUnformatted writes it, straight into the caller's buffer,
 * grown onto the heap past it (Note [direct encoder] in rdzv_proto_out.c).
 * Writers never fail one by one: the first failure (-ENOMEM, or -EMSGSIZE
 * past a frame's bound) is kept in err and every later write is dropped,
 * so a caller checks err once at the end.  Internal to proto/:
 * the encoder (rdzv_proto_encode.c) is its one user. */
#ifndef RDZV_PROTO_OUT_H
#define RDZV_PROTO_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct rdzv_proto_out {
  char *buf;
  size_t len, cap;
  bool heap;              /* buf is malloc'd here (grown past the caller's) */
  int err;                /* the first failure: -ENOMEM, -EMSGSIZE */
};

/* Room for n more bytes: false (err set) when there is none. */
bool rdzv_proto_out_grow(struct rdzv_proto_out *o, size_t n);

static inline bool rdzv_proto_out_room(struct rdzv_proto_out *o, size_t n)
{
  return (!o->err && n <= o->cap - o->len) || rdzv_proto_out_grow(o, n);
}

static inline void rdzv_proto_out_put(struct rdzv_proto_out *o, const char *s,
                                      size_t n)
{
  if (rdzv_proto_out_room(o, n)) {
    memcpy(o->buf + o->len, s, n);
    o->len += n;
  }
}

static inline void rdzv_proto_out_char(struct rdzv_proto_out *o, char ch)
{
  if (rdzv_proto_out_room(o, 1))
    o->buf[o->len++] = ch;
}

/* A JSON string, escaped as cJSON escapes it. */
void rdzv_proto_out_string(struct rdzv_proto_out *o, const char *s);

/* ,"name": (the comma unless *first; clears *first) */
void rdzv_proto_out_key(struct rdzv_proto_out *o, const char *name,
                        bool *first);

void rdzv_proto_out_i64(struct rdzv_proto_out *o, int64_t v);

/* A number as a text that reads back exactly (integral: a whole one). */
void rdzv_proto_out_number(struct rdzv_proto_out *o, double d, bool integral);

#endif
