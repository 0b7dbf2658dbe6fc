/* fuzz_proto.c -- libFuzzer target: framing, decode, re-encode round trip. */
#include "rdzv_proto.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same_double(double a, double b)
{
  /* Exact: the encoder must print every double so it reads back equal. */
  return a == b || (isnan(a) && isnan(b));
}

static bool same_conf(const struct rdzv_proto_conf *a,
                      const struct rdzv_proto_conf *b)
{
  return a->min_nodes == b->min_nodes && a->max_nodes == b->max_nodes &&
         a->max_restarts == b->max_restarts &&
         same_double(a->join_timeout, b->join_timeout) &&
         same_double(a->last_call_timeout, b->last_call_timeout) &&
         same_double(a->close_timeout, b->close_timeout) &&
         same_double(a->keepalive_interval, b->keepalive_interval) &&
         a->keepalive_misses == b->keepalive_misses;
}

static bool same_kv(const struct rdzv_proto_kv *a,
                    const struct rdzv_proto_kv *b)
{
  return strcmp(a->key, b->key) == 0 && a->value_len == b->value_len &&
         (a->value_len == 0 ||
          memcmp(a->value, b->value, a->value_len) == 0) &&
         a->delta == b->delta && same_double(a->wait, b->wait) &&
         a->found == b->found;
}

static bool same_msg_join(const struct rdzv_proto_join *ja,
                          const struct rdzv_proto_join *jb)
{
  return strcmp(ja->id, jb->id) == 0 && strcmp(ja->addr, jb->addr) == 0 &&
         strcmp(ja->host, jb->host) == 0 && ja->pid == jb->pid &&
         ja->nproc == jb->nproc && ja->master_port == jb->master_port &&
         ja->reason == jb->reason && same_conf(&ja->conf, &jb->conf);
}

static bool same_msg(const struct rdzv_proto_msg *a,
                     const struct rdzv_proto_msg *b)
{
  const struct rdzv_proto_join *ja = &a->u.join, *jb = &b->u.join;
  const struct rdzv_proto_waiting *wa = &a->u.waiting, *wb = &b->u.waiting;
  const struct rdzv_proto_round *ra = &a->u.round, *rb = &b->u.round;

  if (a->op != b->op)
    return false;
  switch (a->op) {
  case RDZV_PROTO_JOIN:
    return same_msg_join(ja, jb);
  case RDZV_PROTO_FAILURE:
    return a->u.failure.final == b->u.failure.final &&
           strcmp(a->u.failure.message, b->u.failure.message) == 0;
  case RDZV_PROTO_BARRIER:
  case RDZV_PROTO_BARRIER_DONE:
    return strcmp(a->u.barrier.name, b->u.barrier.name) == 0 &&
           a->u.barrier.round == b->u.barrier.round;
  case RDZV_PROTO_KV_SET:
  case RDZV_PROTO_KV_GET:
  case RDZV_PROTO_KV_ADD:
  case RDZV_PROTO_KV_VALUE:
    return same_kv(&a->u.kv, &b->u.kv);
  case RDZV_PROTO_WAITING:
    return wa->round == wb->round && wa->present == wb->present &&
           wa->min_nodes == wb->min_nodes && wa->max_nodes == wb->max_nodes &&
           same_double(wa->deadline, wb->deadline) &&
           same_double(wa->last_call, wb->last_call) &&
           wa->restart_count == wb->restart_count &&
           memcmp(wa->token, wb->token, RDZV_PROTO_TOKEN_BYTES) == 0;
  case RDZV_PROTO_ROUND:
    return ra->round == rb->round && ra->restart_count == rb->restart_count &&
           ra->group_rank == rb->group_rank &&
           ra->group_world_size == rb->group_world_size &&
           ra->rank_offset == rb->rank_offset &&
           ra->world_size == rb->world_size &&
           strcmp(ra->master_addr, rb->master_addr) == 0 &&
           ra->master_port == rb->master_port &&
           ra->embedded == rb->embedded && ra->host_rank == rb->host_rank &&
           memcmp(ra->token, rb->token, RDZV_PROTO_TOKEN_BYTES) == 0 &&
           memcmp(ra->job_token, rb->job_token, RDZV_PROTO_TOKEN_BYTES) == 0;
  case RDZV_PROTO_RESUME:
    return same_msg_join(&a->u.resume.join, &b->u.resume.join) &&
           a->u.resume.phase == b->u.resume.phase &&
           a->u.resume.round.round == b->u.resume.round.round &&
           a->u.resume.round.restart_count ==
             b->u.resume.round.restart_count &&
           a->u.resume.round.group_rank == b->u.resume.round.group_rank &&
           a->u.resume.round.group_world_size ==
             b->u.resume.round.group_world_size &&
           a->u.resume.round.rank_offset == b->u.resume.round.rank_offset &&
           a->u.resume.round.world_size == b->u.resume.round.world_size &&
           strcmp(a->u.resume.round.master_addr,
                  b->u.resume.round.master_addr) == 0 &&
           a->u.resume.round.master_port == b->u.resume.round.master_port &&
           memcmp(a->u.resume.round.token, b->u.resume.round.token,
                  RDZV_PROTO_TOKEN_BYTES) == 0;
  case RDZV_PROTO_RESTART:
  case RDZV_PROTO_CLOSED:
  case RDZV_PROTO_ERROR:
    return a->u.text.code == b->u.text.code &&
           a->u.text.success == b->u.text.success &&
           strcmp(a->u.text.message, b->u.text.message) == 0;
  case RDZV_PROTO_STATUS_REPLY:
    return strcmp(a->u.status_json, b->u.status_json) == 0;
  case RDZV_PROTO_HELLO:
  case RDZV_PROTO_CHALLENGE:
    return memcmp(a->u.auth.nonce, b->u.auth.nonce, RDZV_PROTO_AUTH_BYTES) == 0;
  case RDZV_PROTO_AUTH:
  case RDZV_PROTO_AUTH_OK:
    return memcmp(a->u.auth.mac, b->u.auth.mac, RDZV_PROTO_AUTH_BYTES) == 0;
  default:
    return true;
  }
}

/* Decoded once, it must encode, and that must decode to the same. */
static void round_trip(const struct rdzv_proto_msg *m)
{
  struct rdzv_proto_msg m2;
  char err[256], *frame;
  size_t len, flen;
  int rc;

  rc = rdzv_proto_encode(m, &frame, &len);
  if (rc) {
    fprintf(stderr, "re-encode of %s failed: %d\n", rdzv_proto_op_name(m->op),
            rc);
    abort();
  }
  if (rdzv_proto_frame_peek(frame, len, &flen) != 1 || flen != len) {
    fprintf(stderr, "re-encoded frame does not peek whole\n");
    abort();
  }
  rc = rdzv_proto_decode(frame + RDZV_PROTO_FRAME_HEADER,
                         len - RDZV_PROTO_FRAME_HEADER, &m2, err, sizeof err);
  if (rc) {
    fprintf(stderr, "re-decode failed: %s: %.*s\n", err,
            (int)(len - RDZV_PROTO_FRAME_HEADER),
            frame + RDZV_PROTO_FRAME_HEADER);
    abort();
  }
  if (!same_msg(m, &m2)) {
    fprintf(stderr, "round trip changed the message: %.*s\n",
            (int)(len - RDZV_PROTO_FRAME_HEADER),
            frame + RDZV_PROTO_FRAME_HEADER);
    abort();
  }
  rdzv_proto_msg_free(&m2);
  free(frame);
}

/* rdzvd answers a refused frame with ERROR carrying the reason: it must
 * be one line and encodable. */
static void check_error_text(int rc, const char *err)
{
  struct rdzv_proto_msg e;
  char *frame;
  size_t len;

  if (err[0] == '\0' || strchr(err, '\n')) {
    fprintf(stderr, "error %d without a one-line reason\n", rc);
    abort();
  }
  memset(&e, 0, sizeof e);
  e.op = RDZV_PROTO_ERROR;
  e.u.text.code = RDZV_PROTO_ERR_BAD_REQUEST;
  snprintf(e.u.text.message, sizeof e.u.text.message, "%s", err);
  if (rdzv_proto_encode(&e, &frame, &len) != 0) {
    fprintf(stderr, "cannot encode the reason '%s'\n", err);
    abort();
  }
  free(frame);
}

/* Note [flat parse] (rdzv_proto_flat.c): a body decodes as it does with a
 * space after its '{', which only cJSON parses: the same message, or the
 * same refusal (a syntax error's text names an offset the space moves). */
static void flat_vs_cjson(const uint8_t *body, size_t len)
{
  struct rdzv_proto_msg a, b;
  char ea[256], eb[256], *spaced;
  int ra, rb;

  if (len == 0 || len >= RDZV_PROTO_MAX_FRAME || body[0] != '{')
    return;
  spaced = malloc(len + 1);
  if (!spaced)
    abort();
  spaced[0] = '{';
  spaced[1] = ' ';
  memcpy(spaced + 2, body + 1, len - 1);
  ra = rdzv_proto_decode(body, len, &a, ea, sizeof ea);
  rb = rdzv_proto_decode(spaced, len + 1, &b, eb, sizeof eb);
  if (ra != rb || (ra == 0 && !same_msg(&a, &b)) ||
      (ra != 0 && ra != -EBADMSG && strcmp(ea, eb) != 0)) {
    fprintf(stderr, "flat parse differs from cJSON's: %d (%s) / %d (%s): "
            "%.*s\n", ra, ea, rb, eb, (int)len, (const char *)body);
    abort();
  }
  if (ra == 0) {
    rdzv_proto_msg_free(&a);
    rdzv_proto_msg_free(&b);
  }
  free(spaced);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct rdzv_proto_msg m;
  char err[256];
  size_t off = 0, flen;
  int rc;

  /* A stream of frames, as a connection would see it. */
  while (off < size) {
    rc = rdzv_proto_frame_peek(data + off, size - off, &flen);
    if (rc <= 0)
      break;
    rc = rdzv_proto_decode(data + off + RDZV_PROTO_FRAME_HEADER,
                           flen - RDZV_PROTO_FRAME_HEADER, &m, err, sizeof err);
    if (rc == 0) {
      round_trip(&m);
      rdzv_proto_msg_free(&m);
    } else {
      check_error_text(rc, err);
    }
    off += flen;
  }
  flat_vs_cjson(data, size);
  /* The whole input as one body too: no framing needed to reach decode. */
  if (size > 0 && size <= RDZV_PROTO_MAX_FRAME &&
      rdzv_proto_decode(data, size, &m, err, sizeof err) == 0) {
    round_trip(&m);
    rdzv_proto_msg_free(&m);
  }
  return 0;
}
