/* rdzv_auth.c -- the shared-secret handshake (see rdzv_auth.h). */
#include "rdzv_auth.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/random.h>

#include "sha256.h"

#include "err.h"

/* Same length, so that label | nc | ns has one parse. */
static const char label_client[] = "cdrun-rdzv-2 client";
static const char label_server[] = "cdrun-rdzv-2 server";
#define LABEL_LEN (sizeof label_client - 1)     /* no NUL */

int rdzv_auth_secret_load(const char *path, struct rdzv_auth_secret *out,
                          char *err, size_t errlen)
{
  return rdzv_auth_secret_load_flags(path, 0, out, err, errlen);
}

int rdzv_auth_secret_load_flags(const char *path, int flags,
                                struct rdzv_auth_secret *out, char *err,
                                size_t errlen)
{
  unsigned char buf[RDZV_AUTH_MAX_SECRET + 2];
  struct stat st;
  size_t len = 0;
  ssize_t n;
  int fd;

  memset(out, 0, sizeof *out);
  /* O_NONBLOCK: a FIFO in the file's place must not block the open
   * (it is refused below, as anything but a regular file is). */
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | flags);
  if (fd < 0 && errno == ELOOP && (flags & O_NOFOLLOW))
    return err_set(err, errlen, -ELOOP, "secret file %s: a symbolic link "
                   "(give the file itself)", path);
  if (fd < 0) {
    return err_set(err, errlen, -errno,
                   "secret file %s: %s", path, strerror(errno));
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return err_set(err, errlen, -EINVAL, "secret file %s: not a regular "
                   "file", path);
  }
  /* As ssh refuses a private key others can read. */
  if (st.st_mode & 077) {
    close(fd);
    return err_set(err, errlen, -EPERM, "secret file %s: permissions %04o "
                   "are too open: it must not be accessible by group or "
                   "others (chmod 600 %s)", path,
                   (unsigned)(st.st_mode & 07777), path);
  }
  if (st.st_uid != geteuid() && st.st_uid != 0) {
    close(fd);
    return err_set(err, errlen, -EPERM, "secret file %s: owned by uid %u, "
                   "not by this user (uid %u) or root", path,
                   (unsigned)st.st_uid, (unsigned)geteuid());
  }
  while (len < sizeof buf) {
    n = read(fd, buf + len, sizeof buf - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int rc = err_set(err, errlen, -EIO, "secret file %s: %s", path,
                       strerror(errno));

      explicit_bzero(buf, sizeof buf);
      close(fd);
      return rc;
    }
    if (n == 0)
      break;
    len += (size_t)n;
  }
  close(fd);
  /* One trailing newline is the editor's, not the secret's. */
  if (len > 0 && len <= RDZV_AUTH_MAX_SECRET + 1 && buf[len - 1] == '\n') {
    len--;
    if (len > 0 && buf[len - 1] == '\r')
      len--;
  }
  if (len > RDZV_AUTH_MAX_SECRET || len < RDZV_AUTH_MIN_SECRET) {
    explicit_bzero(buf, sizeof buf);
    return err_set(err, errlen, -EINVAL, "secret file %s: %s (a secret has "
                   "%d..%d bytes; for example: openssl rand -hex 32 > %s)",
                   path,
                   len > RDZV_AUTH_MAX_SECRET ? "too long"
                   : len == 0          ? "empty"
                                       : "too short",
                   RDZV_AUTH_MIN_SECRET, RDZV_AUTH_MAX_SECRET, path);
  }
  memcpy(out->key, buf, len);
  out->len = len;
  explicit_bzero(buf, sizeof buf);
  return 0;
}

void rdzv_auth_secret_clear(struct rdzv_auth_secret *s)
{
  explicit_bzero(s, sizeof *s);
}

int rdzv_auth_nonce(unsigned char out[RDZV_PROTO_AUTH_BYTES])
{
  return getrandom(out, RDZV_PROTO_AUTH_BYTES, 0) == RDZV_PROTO_AUTH_BYTES
             ? 0 : -EIO;
}

int rdzv_auth_hmac(const void *key, size_t keylen, const void *msg,
                   size_t msglen, unsigned char out[RDZV_PROTO_AUTH_BYTES])
{
  _Static_assert(RDZV_PROTO_AUTH_BYTES == SHA256_BYTES, "HMAC-SHA256 tags");
  sha256_hmac(key, keylen, msg, msglen, out);
  return 0;
}

int rdzv_auth_mac(const struct rdzv_auth_secret *k, enum rdzv_auth_side side,
           const unsigned char nc[RDZV_PROTO_AUTH_BYTES],
           const unsigned char ns[RDZV_PROTO_AUTH_BYTES],
           unsigned char out[RDZV_PROTO_AUTH_BYTES])
{
  unsigned char msg[LABEL_LEN + 2 * RDZV_PROTO_AUTH_BYTES];

  memcpy(msg, side == RDZV_AUTH_CLIENT ? label_client : label_server,
         LABEL_LEN);
  memcpy(msg + LABEL_LEN, nc, RDZV_PROTO_AUTH_BYTES);
  memcpy(msg + LABEL_LEN + RDZV_PROTO_AUTH_BYTES, ns, RDZV_PROTO_AUTH_BYTES);
  return rdzv_auth_hmac(k->key, k->len, msg, sizeof msg, out);
}

bool rdzv_auth_verify(const struct rdzv_auth_secret *k,
                      enum rdzv_auth_side side,
                      const unsigned char nc[RDZV_PROTO_AUTH_BYTES],
                      const unsigned char ns[RDZV_PROTO_AUTH_BYTES],
                      const unsigned char mac[RDZV_PROTO_AUTH_BYTES])
{
  unsigned char want[RDZV_PROTO_AUTH_BYTES];
  bool ok;

  if (!k || k->len == 0 || rdzv_auth_mac(k, side, nc, ns, want) != 0)
    return false;
  ok = sha256_equal_ct(want, mac, RDZV_PROTO_AUTH_BYTES);
  explicit_bzero(want, sizeof want);
  return ok;
}

/* ---- server ---- */

static enum rdzv_auth_verdict refuse(struct rdzv_proto_msg *reply,
                                     const char *to_peer, char *why,
                                     size_t whylen, const char *log)
{
  memset(reply, 0, sizeof *reply);
  reply->op = RDZV_PROTO_ERROR;
  reply->u.text.code = RDZV_PROTO_ERR_AUTH;
  snprintf(reply->u.text.message, sizeof reply->u.text.message, "%s",
           to_peer);
  snprintf(why, whylen, "%s", log);
  return RDZV_AUTH_REFUSE;
}

static bool is_handshake(enum rdzv_proto_op op)
{
  return op == RDZV_PROTO_HELLO || op == RDZV_PROTO_CHALLENGE ||
         op == RDZV_PROTO_AUTH || op == RDZV_PROTO_AUTH_OK;
}

enum rdzv_auth_verdict rdzv_auth_server_step(struct rdzv_auth_server *st,
                                             const struct rdzv_auth_secret *k,
                                             const struct rdzv_proto_msg *m,
                                             struct rdzv_proto_msg *reply,
                                             char *why, size_t whylen)
{
  bool secret = k && k->len > 0;

  if (!secret) {
    if (m->op == RDZV_PROTO_HELLO)
      return refuse(reply, "this server has no shared secret configured, "
                    "but the client has one", why, whylen,
                    "it offers a shared secret, but this server has none "
                    "(--secret-file)");
    if (is_handshake(m->op))
      return refuse(reply, "unexpected handshake message", why, whylen,
                    "unexpected handshake message");
    return RDZV_AUTH_PASS;
  }
  switch (st->state) {
  case RDZV_AUTH_S_HELLO:
    if (m->op != RDZV_PROTO_HELLO)
      return refuse(reply, "this server requires a shared secret", why,
                    whylen, "no shared secret: it did not authenticate "
                    "(its first message was not a hello)");
    memcpy(st->nc, m->u.auth.nonce, RDZV_PROTO_AUTH_BYTES);
    if (rdzv_auth_nonce(st->ns) != 0)
      return refuse(reply, "internal error", why, whylen,
                    "internal: no random bytes for a nonce");
    memset(reply, 0, sizeof *reply);
    reply->op = RDZV_PROTO_CHALLENGE;
    memcpy(reply->u.auth.nonce, st->ns, RDZV_PROTO_AUTH_BYTES);
    st->state = RDZV_AUTH_S_PROOF;
    return RDZV_AUTH_REPLY;
  case RDZV_AUTH_S_PROOF:
    if (m->op != RDZV_PROTO_AUTH)
      return refuse(reply, "handshake out of order", why, whylen,
                    "handshake out of order (expected auth)");
    if (st->read_with_hello)
      return refuse(reply, "auth sent before the challenge", why, whylen,
                    "auth sent before the challenge (pipelined behind "
                    "hello): it cannot hold the proof");
    if (!rdzv_auth_verify(k, RDZV_AUTH_CLIENT, st->nc, st->ns, m->u.auth.mac))
      return refuse(reply, "wrong shared secret", why, whylen,
                    "wrong shared secret");
    memset(reply, 0, sizeof *reply);
    reply->op = RDZV_PROTO_AUTH_OK;
    if (rdzv_auth_mac(k, RDZV_AUTH_SERVER, st->nc, st->ns, reply->u.auth.mac) !=
        0)
      return refuse(reply, "internal error", why, whylen,
                    "internal: HMAC failed");
    st->state = RDZV_AUTH_S_DONE;
    return RDZV_AUTH_REPLY;
  case RDZV_AUTH_S_DONE:
    break;
  }
  if (is_handshake(m->op))
    return refuse(reply, "handshake out of order", why, whylen,
                  "handshake message after authentication");
  return RDZV_AUTH_PASS;
}

bool rdzv_auth_server_frame_too_big(const struct rdzv_auth_server *st,
                             const struct rdzv_auth_secret *k, size_t n)
{
  return k && k->len > 0 && st->state != RDZV_AUTH_S_DONE &&
         n > RDZV_AUTH_PREAUTH_MAX_FRAME;
}

/* ---- client ---- */

int rdzv_auth_client_hello(struct rdzv_auth_client *st,
                           struct rdzv_proto_msg *hello)
{
  memset(st, 0, sizeof *st);
  if (rdzv_auth_nonce(st->nc) != 0)
    return -EIO;
  memset(hello, 0, sizeof *hello);
  hello->op = RDZV_PROTO_HELLO;
  memcpy(hello->u.auth.nonce, st->nc, RDZV_PROTO_AUTH_BYTES);
  st->state = RDZV_AUTH_C_CHALLENGE;
  return 0;
}

int rdzv_auth_client_step(struct rdzv_auth_client *st,
                          const struct rdzv_auth_secret *k,
                          const struct rdzv_proto_msg *m,
                          struct rdzv_proto_msg *reply, char *err,
                          size_t errlen)
{
  if (m->op == RDZV_PROTO_ERROR) {
    bool plain = m->u.text.code == RDZV_PROTO_ERR_AUTH;

    return err_set(err, errlen, -EACCES,
                   RDZV_AUTH_REFUSED ": the server says: %s%s%s%s",
                   m->u.text.message[0] ? m->u.text.message : "(no reason)",
                   plain ? "" : " (",
                   plain ? "" : rdzv_proto_error_name(m->u.text.code),
                   plain ? "" : ")");
  }
  if (st->state == RDZV_AUTH_C_CHALLENGE && m->op == RDZV_PROTO_CHALLENGE) {
    /* Our own nonce coming back is a reflection attempt. */
    if (sha256_equal_ct(m->u.auth.nonce, st->nc, RDZV_PROTO_AUTH_BYTES)) {
      return err_set(err, errlen, -EACCES,
                     RDZV_AUTH_REFUSED ": the server reflected our nonce");
    }
    memcpy(st->ns, m->u.auth.nonce, RDZV_PROTO_AUTH_BYTES);
    memset(reply, 0, sizeof *reply);
    reply->op = RDZV_PROTO_AUTH;
    if (rdzv_auth_mac(k, RDZV_AUTH_CLIENT, st->nc, st->ns, reply->u.auth.mac) !=
        0) {
      return err_set(err, errlen, -EACCES, RDZV_AUTH_REFUSED ": HMAC failed");
    }
    st->state = RDZV_AUTH_C_OK;
    return 1;
  }
  if (st->state == RDZV_AUTH_C_OK && m->op == RDZV_PROTO_AUTH_OK) {
    if (!rdzv_auth_verify(k, RDZV_AUTH_SERVER, st->nc, st->ns, m->u.auth.mac)) {
      return err_set(err, errlen, -EACCES,
                     RDZV_AUTH_REFUSED ": the server did not prove that "
                     "it knows the shared secret");
    }
    st->state = RDZV_AUTH_C_DONE;
    return 0;
  }
  return err_set(err, errlen, -EACCES,
                 RDZV_AUTH_REFUSED ": unexpected '%s' from the server "
                 "during the handshake (it may be an older version without "
                 "shared secrets)",
                 rdzv_proto_op_name(m->op) ? rdzv_proto_op_name(m->op) : "?");
}

/* ---- blocking helper ---- */

static int write_all(int fd, const char *p, size_t n)
{
  ssize_t w;

  while (n > 0) {
    w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int send_msg_fd(int fd, const struct rdzv_proto_msg *m)
{
  char *frame;
  size_t len;
  int rc = rdzv_proto_encode(m, &frame, &len);

  if (rc)
    return rc;
  rc = write_all(fd, frame, len);
  free(frame);
  return rc;
}

/* Reads n bytes within timeout_ms per wait. */
static int read_full(int fd, char *buf, size_t n, int timeout_ms, char *err,
                     size_t errlen)
{
  struct pollfd p = { fd, POLLIN, 0 };
  size_t len = 0;
  ssize_t r;
  int rc;

  while (len < n) {
    rc = poll(&p, 1, timeout_ms);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0) {
      return err_set(err, errlen, -ETIMEDOUT,
                     "no answer to the handshake within %d ms",
                     timeout_ms);
    }
    r = read(fd, buf + len, n - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      return err_set(err, errlen, -EIO,
                     "the server closed the connection during the "
                     "handshake");
    }
    len += (size_t)r;
  }
  return 0;
}

/* Reads exactly one frame (handshake answers are small, and nothing
 * follows them before we send again) and decodes it into m. */
static int read_msg_fd(int fd, int timeout_ms, struct rdzv_proto_msg *m,
                       char *err, size_t errlen)
{
  char buf[RDZV_PROTO_FRAME_HEADER + 4 * RDZV_PROTO_MAX_TEXT];
  const unsigned char *h = (const unsigned char *)buf;
  size_t n;
  int rc;

  rc = read_full(fd, buf, RDZV_PROTO_FRAME_HEADER, timeout_ms, err, errlen);
  if (rc)
    return rc;
  n = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
  if (n == 0 || n > sizeof buf - RDZV_PROTO_FRAME_HEADER) {
    return err_set(err, errlen, -EIO,
                   "bad frame of %zu bytes from the server during "
                   "the handshake", n);
  }
  rc = read_full(fd, buf + RDZV_PROTO_FRAME_HEADER, n, timeout_ms, err, errlen);
  if (rc)
    return rc;
  return rdzv_proto_decode(buf + RDZV_PROTO_FRAME_HEADER, n, m, err, errlen)
             ? -EIO
             : 0;
}

int rdzv_auth_handshake_fd(int fd, const struct rdzv_auth_secret *k,
                           int timeout_ms, char *err, size_t errlen)
{
  struct rdzv_auth_client st;
  struct rdzv_proto_msg m, reply;
  int rc;

  if (rdzv_auth_client_hello(&st, &m) != 0) {
    return err_set(err, errlen, -EIO, "no random bytes for a nonce");
  }
  if (send_msg_fd(fd, &m) != 0) {
    return err_set(err, errlen, -EIO, "cannot send the hello");
  }
  for (;;) {
    rc = read_msg_fd(fd, timeout_ms, &m, err, errlen);
    if (rc)
      return rc;
    rc = rdzv_auth_client_step(&st, k, &m, &reply, err, errlen);
    rdzv_proto_msg_free(&m);
    if (rc <= 0)
      return rc;
    if (send_msg_fd(fd, &reply) != 0) {
      return err_set(err, errlen, -EIO, "cannot send the proof");
    }
  }
}
