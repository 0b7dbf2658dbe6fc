/* rdzv_proto_int.h -- what the codec's files share (rdzv_proto.c: the
 * tables and the checks; rdzv_proto_encode.c; rdzv_proto_decode.c), and
 * nothing outside proto/ uses: the field tables that describe every
 * message, and the checks and error texts both directions apply. */
#ifndef RDZV_PROTO_INT_H
#define RDZV_PROTO_INT_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "rdzv_proto.h"

/* The kinds of field a message carries; each knows its C type. */
enum kind {
  K_INT,    /* int */
  K_I64,    /* int64_t, |x| <= 2^53 - 1 */
  K_DBL,    /* double, finite */
  K_BOOL,   /* bool */
  K_STR,    /* char[size] */
  K_OSTR,   /* char[size], optional: absent on the wire when "" */
  K_VALUE,  /* struct rdzv_proto_kv's heap value + value_len */
  K_REASON, /* enum rdzv_proto_join_reason */
  K_PHASE,  /* enum rdzv_proto_resume_phase */
  K_CODE,   /* enum rdzv_proto_error_code */
  K_CONF,   /* struct rdzv_proto_conf, a nested object */
  K_CAUSE,      /* struct rdzv_proto_cause, a nested object; absent on the wire
                   when its exited_at is 0 (none) */
  K_STATUS,     /* char *status_json, an object on the wire */
  K_HEX,        /* unsigned char[size], lowercase hex on the wire */
  K_TOKEN,      /* unsigned char[RDZV_PROTO_TOKEN_BYTES], optional hex: absent
                   on the wire when all zero (none) */
};

struct field {
  const char *name;
  enum kind kind;
  size_t off; /* from the start of struct rdzv_proto_msg (or rdzv_proto_conf) */
  size_t size;   /* K_STR: sizeof the array */
  double lo, hi; /* numbers: range; strings: byte length range */
  bool lo_open;  /* lo itself is excluded (timeouts > 0) */
  bool required;
};

/* size of a K_BOOL or K_INT field that is encoded only when not 0/false:
 * a field added later, so that bodies without it stay as they were. */
#define OMIT_ZERO 1

/* A message's name on the wire and its fields (ending with a NULL
 * name), by op. */
struct rdzv_proto__op {
  const char *name;
  const struct field *fields;
};

extern const struct rdzv_proto__op rdzv_proto__ops[RDZV_PROTO_OP_COUNT];

/* The wire names of the enums, by value. */
#define RDZV_PROTO__N_REASONS (RDZV_PROTO_REASON_MEMBERSHIP + 1)
#define RDZV_PROTO__N_PHASES (RDZV_PROTO_PHASE_EXIT + 1)
#define RDZV_PROTO__N_CODES (RDZV_PROTO_ERR_AUTH + 1)
extern const char *const rdzv_proto__reasons[RDZV_PROTO__N_REASONS];
extern const char *const rdzv_proto__phases[RDZV_PROTO__N_PHASES];
extern const char *const rdzv_proto__codes[RDZV_PROTO__N_CODES];
const char *rdzv_proto__reason_name(enum rdzv_proto_join_reason r);
const char *rdzv_proto__phase_name(enum rdzv_proto_resume_phase p);

/* The fields of a nested object's kind (K_CONF, K_CAUSE). */
const struct field *rdzv_proto__sub_fields(enum kind k);

/* Where an error is written, and the field path it names. */
struct ctx {
  char *err;
  size_t errlen;
  const char *op;         /* prefix of field names: "join" */
  const char *sub;        /* nested object: "conf", or NULL */
};

/* Writes the error (if c->err) and returns rc. */
__attribute__((format(printf, 3, 4)))
int rdzv_proto__fail(struct ctx *c, int rc, const char *fmt, ...);
/* "join.conf.min_nodes" into buf. */
const char *rdzv_proto__path(const struct ctx *c, const char *name, char *buf,
                             size_t len);
const char *rdzv_proto__sanitize(const char *s, char *buf, size_t len);
const char *rdzv_proto__type_name(const cJSON *it);
const char *rdzv_proto__num_text(double d, char *buf, size_t len);

/* The checks shared by encode and decode: a number's range, a string's
 * length, the relations between a message's fields. */
int rdzv_proto__check_number(struct ctx *c, const struct field *f, double d);
int rdzv_proto__check_length(struct ctx *c, const struct field *f, size_t n);
int rdzv_proto__check_relations(struct ctx *c, const struct rdzv_proto_msg *m);

/* No raw NUL byte and no \u0000 escape in s[0..len): cJSON would cut a
 * string short at it. */
int rdzv_proto__check_nul(struct ctx *c, const char *s, size_t len);
/* s[0..len) as one JSON object (no NUL, nothing after it) into *out. */
int rdzv_proto__parse_object(struct ctx *c, const char *s, size_t len,
                             cJSON **out);

#endif
