/* rdzv_proto_flat.h -- the decoder's fast path: a body in the flat form
 * the encoder prints (no whitespace, no escapes, whole numbers of at most
 * 15 digits, one nested object; Note [flat parse] in rdzv_proto_flat.c)
 * parsed into cJSON items held in a struct rdzv_proto_flat, the same tree
 * cJSON_Parse would build, without an allocation.  Internal to proto/:
 * the decoder (rdzv_proto_decode.c) is its one user. */
#ifndef RDZV_PROTO_FLAT_H
#define RDZV_PROTO_FLAT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define RDZV_PROTO_FLAT_ITEMS 48
#define RDZV_PROTO_FLAT_TEXT 1536
#define RDZV_PROTO_FLAT_DEPTH 2            /* a message and its conf or cause */

struct rdzv_proto_flat {
  cJSON items[RDZV_PROTO_FLAT_ITEMS];
  size_t n_items;
  char text[RDZV_PROTO_FLAT_TEXT]; /* keys and strings, each NUL-terminated */
  size_t n_text;
  const char *p, *end;
};

/* The body s[0..len) as one flat object: its root, whose items live in
 * *fl (valid while *fl is; never cJSON_Delete them).  NULL when the body
 * is not in the flat form (or does not fit *fl): the caller then parses
 * it with cJSON, which names every syntax error. */
cJSON *rdzv_proto_flat_parse(struct rdzv_proto_flat *fl, const char *s,
                             size_t len);

#endif
