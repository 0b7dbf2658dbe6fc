/* ckpt.c -- train_mlp's checkpoints (ckpt.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"

/* ---- checkpoints -----------------------------------------------------------
 * latest.ckpt, all integers and floats little-endian:
 *   "MLPCKPT\0", u32 version, u32 header bytes, u64 payload bytes,
 *   u64 FNV-1a of everything after this field,
 *   u32 NIN, hidden, NCLS, optimizer, u64 seed, samples, global batch,
 *   u32 world size of the writer, u64 step (steps done), f64 lr,
 *   u32 hidden layers (version 2; version 1 files, 88-byte header, have 2),
 * then the parameters and the optimizer state (momentum; or Adam's m and
 * v), f32 each.  The sampler needs nothing more: its position is a pure
 * function of (seed, step). */

#define CKPT_MAGIC "MLPCKPT"
#define CKPT_VERSION 2u
#define CKPT_HEADER 96u
#define CKPT_MAX ((uint64_t)1 << 34)

struct ckpt_info {
  uint32_t hidden, layers, optimizer, world;
  uint64_t seed, samples, global_batch, step, nparams;
  double lr;
};

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
  uint64_t h = 0xcbf29ce484222325ULL;
  size_t i;

  for (i = 0; i < n; i++)
    h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

static void put_u32(unsigned char *p, uint32_t v)
{
  int i;

  for (i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
  int i;

  for (i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const unsigned char *p)
{
  return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void put_floats(unsigned char *p, const float *f, size_t n)
{
  uint32_t u;
  size_t i;

  for (i = 0; i < n; i++) {
    memcpy(&u, &f[i], 4);
    put_u32(p + 4 * i, u);
  }
}

static void get_floats(const unsigned char *p, float *f, size_t n)
{
  uint32_t u;
  size_t i;

  for (i = 0; i < n; i++) {
    u = get_u32(p + 4 * i);
    memcpy(&f[i], &u, 4);
  }
}

static size_t nstates(int optimizer)
{
  return optimizer == OPT_ADAM ? 2 : 1;
}

/* The checkpoint as bytes (malloc'd, *len). */
unsigned char *ckpt_encode(const struct net *n, const struct opts *o,
                                  int world, long step, size_t *len)
{
  size_t payload = n->total * 4 * (1 + nstates(o->optimizer));
  unsigned char *b = mlp_xcalloc(CKPT_HEADER + payload, 1), *q;
  uint64_t lr;

  memcpy(b, CKPT_MAGIC, 8);
  put_u32(b + 8, CKPT_VERSION);
  put_u32(b + 12, CKPT_HEADER);
  put_u64(b + 16, payload);
  put_u32(b + 32, NIN);
  put_u32(b + 36, (uint32_t)n->hid);
  put_u32(b + 40, NCLS);
  put_u32(b + 44, (uint32_t)o->optimizer);
  put_u64(b + 48, o->seed);
  put_u64(b + 56, (uint64_t)o->samples);
  put_u32(b + 64, (uint32_t)o->global_batch);
  put_u32(b + 68, (uint32_t)world);
  put_u64(b + 72, (uint64_t)step);
  memcpy(&lr, &o->lr, 8);
  put_u64(b + 80, lr);
  put_u32(b + 88, (uint32_t)n->nw - 1);
  q = b + CKPT_HEADER;
  put_floats(q, n->w, n->total);
  put_floats(q + n->total * 4, n->opt1, n->total);
  if (o->optimizer == OPT_ADAM)
    put_floats(q + n->total * 8, n->opt2, n->total);
  put_u64(b + 24, fnv1a(b + 32, CKPT_HEADER - 32 + payload));
  *len = CKPT_HEADER + payload;
  return b;
}

/* Checks a checkpoint's framing and checksum; fills *ci.  Returns 0 or
 * writes why not into why. */
static int ckpt_check(const unsigned char *b, size_t len,
                      struct ckpt_info *ci, char *why, size_t whylen)
{
  uint64_t payload, lr;

  if (len < CKPT_HEADER || memcmp(b, CKPT_MAGIC, 8) != 0) {
    snprintf(why, whylen, "not a train_mlp checkpoint (bad magic)");
    return -1;
  }
  if (get_u32(b + 8) != CKPT_VERSION || get_u32(b + 12) != CKPT_HEADER) {
    snprintf(why, whylen, "version %" PRIu32 ", expected %u",
             get_u32(b + 8), CKPT_VERSION);
    return -1;
  }
  payload = get_u64(b + 16);
  if (payload != len - CKPT_HEADER) {
    snprintf(why, whylen, "truncated: %zu bytes, header says %" PRIu64,
             len, payload + CKPT_HEADER);
    return -1;
  }
  if (fnv1a(b + 32, len - 32) != get_u64(b + 24)) {
    snprintf(why, whylen, "checksum mismatch (corrupt file)");
    return -1;
  }
  ci->hidden = get_u32(b + 36);
  ci->layers = get_u32(b + 88);
  ci->optimizer = get_u32(b + 44);
  ci->seed = get_u64(b + 48);
  ci->samples = get_u64(b + 56);
  ci->global_batch = get_u32(b + 64);
  ci->world = get_u32(b + 68);
  ci->step = get_u64(b + 72);
  lr = get_u64(b + 80);
  memcpy(&ci->lr, &lr, 8);
  if (get_u32(b + 32) != NIN || get_u32(b + 40) != NCLS ||
      ci->optimizer > OPT_ADAM) {
    snprintf(why, whylen, "written by another model");
    return -1;
  }
  return 0;
}

/* The flags that shape the model, the data or a step must match. */
static int ckpt_matches(const struct ckpt_info *ci, const struct opts *o,
                        char *why, size_t whylen)
{
  static const char *const optname[] = { "sgd", "adam" };

  if (ci->hidden != (uint64_t)o->hidden)
    snprintf(why, whylen, "--hidden %" PRIu32 " there, %ld here",
             ci->hidden, o->hidden);
  else if (ci->layers != (uint64_t)o->layers)
    snprintf(why, whylen, "--layers %" PRIu32 " there, %ld here",
             ci->layers, o->layers);
  else if (ci->optimizer != (uint32_t)o->optimizer)
    snprintf(why, whylen, "--optimizer %s there, %s here",
             optname[ci->optimizer], optname[o->optimizer]);
  else if (ci->seed != o->seed)
    snprintf(why, whylen, "--seed %" PRIu64 " there, %" PRIu64 " here",
             ci->seed, o->seed);
  else if (ci->samples != (uint64_t)o->samples)
    snprintf(why, whylen, "--samples %" PRIu64 " there, %ld here",
             ci->samples, o->samples);
  else if (ci->global_batch != (uint64_t)o->global_batch)
    snprintf(why, whylen, "--global-batch %" PRIu64 " there, %ld here",
             ci->global_batch, o->global_batch);
  else
    return 0;
  return -1;
}

static void ckpt_apply(const unsigned char *b, struct net *n, int optimizer)
{
  const unsigned char *q = b + CKPT_HEADER;

  get_floats(q, n->w, n->total);
  get_floats(q + n->total * 4, n->opt1, n->total);
  if (optimizer == OPT_ADAM)
    get_floats(q + n->total * 8, n->opt2, n->total);
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
  ssize_t k;

  while (n) {
    k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int mkdirs(const char *dir)
{
  char path[4096];
  size_t i, len = strlen(dir);

  if (len >= sizeof path)
    return errno = ENAMETOOLONG, -1;
  memcpy(path, dir, len + 1);
  for (i = 1; i <= len; i++)
    if (path[i] == '/' || path[i] == '\0') {
      char c = path[i];

      path[i] = '\0';
      if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return -1;
      path[i] = c;
    }
  return 0;
}

/* --params-out: the parameters' bytes, as in a checkpoint (little-endian
 * f32, forward order), so that runs can be compared bit for bit. */
int ckpt_write_params(const char *path, const struct net *n)
{
  unsigned char *b = mlp_xcalloc(n->total, 4);
  char why[4400];
  int fd, rc = 0;

  put_floats(b, n->w, n->total);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write_all(fd, b, n->total * 4) != 0 || close(fd) != 0) {
    snprintf(why, sizeof why, "%s: %s", path, strerror(errno));
    mlp_err_msg("cannot write --params-out", why);
    rc = -1;
  }
  free(b);
  return rc;
}

/* Writes dir/latest.ckpt so that a crash at any moment leaves either the
 * old or the new file, complete: temporary file, fsync, rename, fsync of
 * the directory (which makes the rename itself durable). */
int ckpt_save(const char *dir, const unsigned char *b, size_t len)
{
  char tmp[4200], path[4200], why[4400];
  int fd, dfd, e;

  snprintf(tmp, sizeof tmp, "%s/latest.ckpt.tmp", dir);
  snprintf(path, sizeof path, "%s/latest.ckpt", dir);
  if (mkdirs(dir) != 0)
    goto fail;
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    goto fail;
  if (write_all(fd, b, len) != 0 || fsync(fd) != 0) {
    e = errno;
    close(fd);
    errno = e;
    goto fail_unlink;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0)
    goto fail_unlink;
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return 0;
fail_unlink:
  /* A full disk must not keep a half-written file (the old checkpoint,
   * if any, stays). */
  e = errno;
  unlink(tmp);
  errno = e;
fail:
  snprintf(why, sizeof why, "%s: %s", tmp, strerror(errno));
  mlp_err_msg("cannot write the checkpoint", why);
  return -1;
}

/* Rank 0: dir/latest.ckpt's bytes; 0 and *b = NULL when there is none. */
static int ckpt_read(const char *dir, unsigned char **b, size_t *len)
{
  char path[4200], why[4400];
  struct stat st;
  size_t got = 0;
  ssize_t k;
  int fd;

  *b = NULL;
  *len = 0;
  snprintf(path, sizeof path, "%s/latest.ckpt", dir);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT)
    return 0;
  if (fd < 0 || fstat(fd, &st) != 0)
    goto fail;
  if ((uint64_t)st.st_size > CKPT_MAX || st.st_size < 1) {
    close(fd);
    snprintf(why, sizeof why, "%s: %lld bytes", path,
             (long long)st.st_size);
    mlp_err_msg("implausible checkpoint size", why);
    return -1;
  }
  *b = mlp_xcalloc((size_t)st.st_size, 1);
  while (got < (size_t)st.st_size) {
    k = read(fd, *b + got, (size_t)st.st_size - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += (size_t)k;
  }
  close(fd);
  *len = got;
  return 0;
fail:
  snprintf(why, sizeof why, "%s: %s", path, strerror(errno));
  mlp_err_msg("cannot read the checkpoint", why);
  if (fd >= 0)
    close(fd);
  return -1;
}

/* Every rank: rank 0 reads the checkpoint and broadcasts it, everyone
 * checks and applies it.  Returns the step to start at (0: fresh), or -1
 * (exit 1) / -2 (exit 2: flags differ) on every rank alike. */
long ckpt_load(pg_group *g, const struct opts *o, struct net *n)
{
  unsigned char *b = NULL;
  size_t len = 0;
  int64_t hdr = 0;   /* bytes, 0: none, -1: rank 0 failed to read */
  struct ckpt_info ci;
  char why[256];
  int err, rank = pg_rank(g);

  if (rank == 0) {
    hdr = ckpt_read(o->ckpt_dir, &b, &len) ? -1 : (int64_t)len;
  }
  if ((err = pg_broadcast(g, &hdr, 1, PG_I64, 0)) != 0) {
    mlp_pg_fail("broadcast of the checkpoint size", err);
    free(b);
    return -1;
  }
  if (hdr <= 0)
    return hdr < 0 ? -1 : 0;
  if (rank != 0) {
    len = (size_t)hdr;
    b = mlp_xcalloc(len, 1);
  }
  if ((err = pg_broadcast(g, b, len, PG_U8, 0)) != 0) {
    mlp_pg_fail("broadcast of the checkpoint", err);
    free(b);
    return -1;
  }
  /* The same bytes everywhere, so every rank decides alike. */
  if (ckpt_check(b, len, &ci, why, sizeof why) != 0) {
    if (rank == 0)
      fprintf(stderr, "train_mlp: %s/latest.ckpt: %s; remove it to start "
              "over\n", o->ckpt_dir, why);
    free(b);
    return -1;
  }
  if (ckpt_matches(&ci, o, why, sizeof why) != 0 ||
      len != CKPT_HEADER + n->total * 4 * (1 + nstates(o->optimizer))) {
    if (rank == 0)
      fprintf(stderr, "train_mlp: %s/latest.ckpt was written for other "
              "flags (%s); use them, another --ckpt-dir, or remove it\n",
              o->ckpt_dir, why);
    free(b);
    return -2;
  }
  ckpt_apply(b, n, o->optimizer);
  free(b);
  if (rank == 0)
    printf("resumed from step %" PRIu64 " (%s/latest.ckpt, written by %"
           PRIu32 " worker%s; now %d)\n", ci.step, o->ckpt_dir, ci.world,
           ci.world == 1 ? "" : "s", pg_size(g));
  return (long)ci.step;
}

