/* rdzv_token.c -- node credentials (Note [node tokens], rdzv_token.h). */
#include "rdzv_token.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>

#include "err.h"
#include "sha256.h"

#define KEY_LABEL "cdrun-rdzv-token-key-1"
#define TOKEN_LABEL_GATHERING "cdrun-rdzv-token-2 gathering"
#define TOKEN_LABEL_RUNNING "cdrun-rdzv-token-2 running"
#define TOKEN_LABEL_JOB "cdrun-rdzv-token-2 job"

/* HMAC-SHA256 with the key's blocks absorbed once: inner = SHA-256 state
 * after (key ^ ipad), outer = after (key ^ opad); each token starts from
 * copies of them. */
struct rdzv_token_key {
  struct sha256 inner, outer;
  bool lasting;
  uint64_t next_incarnation;
};

/* The kernel's CSPRNG. */
static int kernel_random(unsigned char *out, size_t n)
{
  return getrandom(out, n, 0) == (ssize_t)n ? 0 : -EIO;
}

static void absorb_pad(struct sha256 *s, const unsigned char key[32],
                       unsigned char pad)
{
  unsigned char block[SHA256_BLOCK_BYTES];

  memset(block, pad, sizeof block);
  for (size_t i = 0; i < 32; i++)
    block[i] ^= key[i];
  sha256_init(s);
  sha256_update(s, block, sizeof block);
  explicit_bzero(block, sizeof block);
}

struct rdzv_token_key *rdzv_token_key_new(const struct rdzv_auth_secret *file)
{
  struct rdzv_token_key *k = calloc(1, sizeof(*k));
  unsigned char key[RDZV_PROTO_AUTH_BYTES];
  int rc;

  if (!k)
    return NULL;
  k->lasting = file && file->len;
  rc = k->lasting ? rdzv_auth_hmac(file->key, file->len, KEY_LABEL,
                            strlen(KEY_LABEL), key)
                  : kernel_random(key, sizeof key);
  if (!rc) {
    unsigned char start[RDZV_PROTO_AUTH_BYTES];

    rc = kernel_random(start, sizeof start);
    for (size_t i = 0; !rc && i < 8; i++)
      k->next_incarnation = k->next_incarnation << 8 | start[i];
  }
  if (!rc) {
    absorb_pad(&k->inner, key, 0x36);
    absorb_pad(&k->outer, key, 0x5c);
  }
  explicit_bzero(key, sizeof key);
  if (rc) {
    rdzv_token_key_free(k);
    return NULL;
  }
  return k;
}

void rdzv_token_key_free(struct rdzv_token_key *k)
{
  if (!k)
    return;
  explicit_bzero(k, sizeof *k);
  free(k);
}

bool rdzv_token_key_lasting(const struct rdzv_token_key *k)
{
  return k->lasting;
}

int rdzv_token_key_file(const char *path, struct rdzv_auth_secret *out,
                        char *err, size_t errlen)
{
  static const char digits[] = "0123456789abcdef";
  unsigned char raw[RDZV_PROTO_AUTH_BYTES];
  char text[2 * RDZV_PROTO_AUTH_BYTES + 1];
  int fd, rc;

  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY |
            O_NOFOLLOW | O_NONBLOCK, 0600);
  if (fd >= 0) {                /* a first start: make the key */
    rc = rdzv_auth_nonce(raw);
    for (size_t i = 0; !rc && i < sizeof raw; i++) {
      text[2 * i] = digits[raw[i] >> 4];
      text[2 * i + 1] = digits[raw[i] & 15];
    }
    text[sizeof text - 1] = '\n';
    if (rc || write(fd, text, sizeof text) != (ssize_t)sizeof text ||
        fsync(fd) != 0) {
      rc = err_set(err, errlen, -EIO, "token key file %s: cannot write it: "
                   "%s", path, rc ? "no random bytes" : strerror(errno));
      close(fd);
      unlink(path);
      explicit_bzero(text, sizeof text);
      explicit_bzero(raw, sizeof raw);
      return rc;
    }
    close(fd);
    explicit_bzero(text, sizeof text);
    explicit_bzero(raw, sizeof raw);
  } else if (errno != EEXIST) {
    return err_set(err, errlen, -errno,
                   "token key file %s: cannot create it: %s", path,
                   strerror(errno));
  }
  return rdzv_auth_secret_load_flags(path, O_NOFOLLOW, out, err, errlen);
}

uint64_t rdzv_token_incarnation(struct rdzv_token_key *k)
{
  return k->next_incarnation++;
}

/* The MAC's input: a label, then each field length-prefixed (strings) or
 * as 8 big-endian bytes (numbers), so no two claims encode alike. */
struct claim {
  unsigned char buf[64 + 3 * (4 + RDZV_PROTO_MAX_ADDR + 1) + 16 * 8];
  size_t len;
};

static void put_u64(struct claim *c, uint64_t v)
{
  for (int i = 7; i >= 0; i--)
    c->buf[c->len++] = (unsigned char)(v >> (8 * i));
}

static void put_str(struct claim *c, const char *s, size_t max)
{
  size_t n = strnlen(s, max);

  put_u64(c, n);
  memcpy(c->buf + c->len, s, n);
  c->len += n;
}

static void claim_start(struct claim *c, const char *label, const char *job,
                        uint64_t job_incarnation, const char *host,
                        int64_t pid)
{
  c->len = 0;
  put_str(c, label, 48);
  put_str(c, job, RDZV_PROTO_MAX_ID);
  put_u64(c, job_incarnation);
  put_str(c, host, RDZV_PROTO_MAX_ADDR);
  put_u64(c, (uint64_t)pid);
}

static int mac(const struct rdzv_token_key *k, const struct claim *c,
               unsigned char out[RDZV_PROTO_TOKEN_BYTES])
{
  unsigned char ih[SHA256_BYTES];
  struct sha256 work = k->inner;

  _Static_assert(RDZV_PROTO_TOKEN_BYTES == SHA256_BYTES, "HMAC-SHA256");
  sha256_update(&work, c->buf, c->len);
  sha256_final(&work, ih);
  work = k->outer;
  sha256_update(&work, ih, sizeof ih);
  sha256_final(&work, out);
  explicit_bzero(ih, sizeof ih);
  return 0;
}

int rdzv_token_gathering(const struct rdzv_token_key *k, const char *job,
                         uint64_t job_incarnation, const char *host,
                         int64_t pid, uint64_t incarnation, int round,
                         int restart_count,
                         unsigned char out[RDZV_PROTO_TOKEN_BYTES])
{
  unsigned char tag[RDZV_PROTO_TOKEN_BYTES];
  struct claim c;
  int rc;

  claim_start(&c, TOKEN_LABEL_GATHERING, job, job_incarnation, host, pid);
  put_u64(&c, incarnation);
  put_u64(&c, (uint64_t)round);
  put_u64(&c, (uint64_t)restart_count);
  rc = mac(k, &c, tag);
  if (rc)
    return rc;
  for (int i = 0; i < 8; i++)
    out[i] = (unsigned char)(incarnation >> (56 - 8 * i));
  memcpy(out + 8, tag, RDZV_PROTO_TOKEN_BYTES - 8);
  return 0;
}

bool rdzv_token_gathering_ok(const struct rdzv_token_key *k, const char *job,
                             uint64_t job_incarnation, const char *host,
                             int64_t pid, int round, int restart_count,
                             const unsigned char token[RDZV_PROTO_TOKEN_BYTES])
{
  unsigned char want[RDZV_PROTO_TOKEN_BYTES];
  uint64_t incarnation = 0;

  for (int i = 0; i < 8; i++)
    incarnation = incarnation << 8 | token[i];
  return rdzv_token_gathering(k, job, job_incarnation, host, pid,
                              incarnation, round, restart_count, want) == 0 &&
         rdzv_token_equal(token, want);
}

int rdzv_token_running(const struct rdzv_token_key *k, const char *job,
                       uint64_t job_incarnation, const char *host,
                       int64_t pid, const struct rdzv_proto_round *rd,
                       unsigned char out[RDZV_PROTO_TOKEN_BYTES])
{
  struct claim c;

  claim_start(&c, TOKEN_LABEL_RUNNING, job, job_incarnation, host, pid);
  put_u64(&c, (uint64_t)rd->round);
  put_u64(&c, (uint64_t)rd->restart_count);
  put_u64(&c, (uint64_t)rd->group_rank);
  put_u64(&c, (uint64_t)rd->group_world_size);
  put_u64(&c, (uint64_t)rd->rank_offset);
  put_u64(&c, (uint64_t)rd->world_size);
  put_str(&c, rd->master_addr, RDZV_PROTO_MAX_ADDR);
  put_u64(&c, (uint64_t)rd->master_port);
  return mac(k, &c, out);
}

int rdzv_token_job(const struct rdzv_token_key *k, const char *job,
                   uint64_t job_incarnation, const char *master_addr,
                   int master_port, int restart_count,
                   unsigned char out[RDZV_PROTO_TOKEN_BYTES])
{
  struct claim c;

  claim_start(&c, TOKEN_LABEL_JOB, job, job_incarnation, "", 0);
  put_str(&c, master_addr, RDZV_PROTO_MAX_ADDR);
  put_u64(&c, (uint64_t)master_port);
  put_u64(&c, (uint64_t)restart_count);
  return mac(k, &c, out);
}

bool rdzv_token_equal(const unsigned char a[RDZV_PROTO_TOKEN_BYTES],
                      const unsigned char b[RDZV_PROTO_TOKEN_BYTES])
{
  unsigned char any = 0;

  for (size_t i = 0; i < RDZV_PROTO_TOKEN_BYTES; i++)
    any |= a[i];
  return any && sha256_equal_ct(a, b, RDZV_PROTO_TOKEN_BYTES);
}
