/* rp_flat.h -- the decoder's fast path: a body in the flat form the
 * encoder prints (no whitespace, no escapes, whole numbers of at most 15
 * digits, one nested object; Note [flat parse] in rp_flat.c) parsed into
 * cJSON items held in a struct rp_flat, the same tree cJSON_Parse would
 * build, without an allocation.  Internal to proto/: the decoder
 * (rdzv_proto_decode.c) is its one user. */
#ifndef RP_FLAT_H
#define RP_FLAT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define RP_FLAT_ITEMS 48
#define RP_FLAT_TEXT 1536
#define RP_FLAT_DEPTH 2            /* a message and its conf or cause */

struct rp_flat {
  cJSON items[RP_FLAT_ITEMS];
  size_t n_items;
  char text[RP_FLAT_TEXT];         /* keys and strings, each NUL-terminated */
  size_t n_text;
  const char *p, *end;
};

/* The body s[0..len) as one flat object: its root, whose items live in
 * *fl (valid while *fl is; never cJSON_Delete them).  NULL when the body
 * is not in the flat form (or does not fit *fl): the caller then parses
 * it with cJSON, which names every syntax error. */
cJSON *rp_flat_parse(struct rp_flat *fl, const char *s, size_t len);

#endif
