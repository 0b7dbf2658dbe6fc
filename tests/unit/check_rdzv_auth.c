/* check_rdzv_auth.c -- unit tests for proto/rdzv_auth.c: HMAC-SHA256
 * known answers (RFC 4231), the secret file's checks, and both sides of
 * the handshake, honest and tampered with. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job_ledger.h"
#include "rdzv_auth.h"
#include "rdzv_proto.h"
#include "rdzv_token.h"

static void unhex(const char *hex, unsigned char *out, size_t n)
{
  size_t i;
  unsigned v;

  ck_assert_uint_eq(strlen(hex), 2 * n);
  for (i = 0; i < n; i++) {
    ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
    out[i] = (unsigned char)v;
  }
}

/* ---- RFC 4231 section 4 test cases (HMAC-SHA-256 lines) ---- */

static void kat(const void *key, size_t keylen, const void *data,
                size_t datalen, const char *want_hex)
{
  unsigned char want[RDZV_PROTO_AUTH_BYTES], got[RDZV_PROTO_AUTH_BYTES];

  unhex(want_hex, want, sizeof want);
  ck_assert_int_eq(rdzv_auth_hmac(key, keylen, data, datalen, got), 0);
  ck_assert_mem_eq(got, want, sizeof want);
}

START_TEST(rfc4231_vectors)
{
  unsigned char key[131], data[50];

  /* Test case 1. */
  memset(key, 0x0b, 20);
  kat(key, 20, "Hi There", 8,
      "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  /* Test case 2: a key shorter than the output. */
  kat("Jefe", 4, "what do ya want for nothing?", 28,
      "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  /* Test case 3. */
  memset(key, 0xaa, 20);
  memset(data, 0xdd, 50);
  kat(key, 20, data, 50,
      "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  /* Test case 6: a key larger than the block (hashed first). */
  memset(key, 0xaa, 131);
  kat(key, 131, "Test Using Larger Than Block-Size Key - Hash Key First",
      54, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}
END_TEST

/* The proofs are HMAC(K, label | Nc | Ns), with a label per direction. */
START_TEST(mac_layout)
{
  struct rdzv_auth_secret k;
  unsigned char nc[RDZV_PROTO_AUTH_BYTES], ns[RDZV_PROTO_AUTH_BYTES],
      msg[19 + 64];
  unsigned char a[RDZV_PROTO_AUTH_BYTES], b[RDZV_PROTO_AUTH_BYTES];

  memset(&k, 0, sizeof k);
  memcpy(k.key, "0123456789abcdef0123", 20);
  k.len = 20;
  memset(nc, 1, sizeof nc);
  memset(ns, 2, sizeof ns);
  memcpy(msg, "cdrun-rdzv-2 client", 19);
  memcpy(msg + 19, nc, 32);
  memcpy(msg + 51, ns, 32);
  ck_assert_int_eq(rdzv_auth_mac(&k, RDZV_AUTH_CLIENT, nc, ns, a), 0);
  ck_assert_int_eq(rdzv_auth_hmac(k.key, k.len, msg, sizeof msg, b), 0);
  ck_assert_mem_eq(a, b, sizeof a);
  memcpy(msg, "cdrun-rdzv-2 server", 19);
  ck_assert_int_eq(rdzv_auth_mac(&k, RDZV_AUTH_SERVER, nc, ns, a), 0);
  ck_assert_int_eq(rdzv_auth_hmac(k.key, k.len, msg, sizeof msg, b), 0);
  ck_assert_mem_eq(a, b, sizeof a);
  /* Directions and nonce order are bound. */
  ck_assert(rdzv_auth_verify(&k, RDZV_AUTH_SERVER, nc, ns, a));
  ck_assert(!rdzv_auth_verify(&k, RDZV_AUTH_CLIENT, nc, ns, a));
  ck_assert(!rdzv_auth_verify(&k, RDZV_AUTH_SERVER, ns, nc, a));
  /* Fresh nonces differ. */
  ck_assert_int_eq(rdzv_auth_nonce(nc), 0);
  ck_assert_int_eq(rdzv_auth_nonce(ns), 0);
  ck_assert_mem_ne(nc, ns, sizeof nc);
}
END_TEST

/* ---- the secret file ---- */

static char dir[64];

static void setup_dir(void)
{
  snprintf(dir, sizeof dir, "/tmp/check_auth.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown_dir(void)
{
  char cmd[128];

  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}

static const char *write_file(const char *name, const void *data,
                              size_t len, mode_t mode)
{
  static char path[128];
  int fd;

  snprintf(path, sizeof path, "%s/%s", dir, name);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
  close(fd);
  ck_assert_int_eq(chmod(path, mode), 0);
  return path;
}

static void refused(const char *path, int want_rc, const char *needle)
{
  struct rdzv_auth_secret k;
  char err[512];
  int rc = rdzv_auth_secret_load(path, &k, err, sizeof err);

  ck_assert_msg(rc == want_rc, "%s: rc %d, want %d (%s)", path, rc, want_rc,
                err);
  ck_assert_msg(strstr(err, needle), "'%s' not in '%s'", needle, err);
  ck_assert_uint_eq(k.len, 0);
}

/* rdzvd --token-key-file: made at the first start (mode 600), the same
 * key at the next; checked as a secret file. */
START_TEST(token_key_file_made_once)
{
  char kdir[] = "/tmp/tkXXXXXX", path[64], err[256];
  struct rdzv_auth_secret a, b;
  struct stat st;

  ck_assert_ptr_nonnull(mkdtemp(kdir));
  snprintf(path, sizeof path, "%s/token.key", kdir);
  ck_assert_int_eq(rdzv_token_key_file(path, &a, err, sizeof err), 0);
  ck_assert_int_eq(stat(path, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0600);
  ck_assert_uint_eq(a.len, 64);
  ck_assert_int_eq(rdzv_token_key_file(path, &b, err, sizeof err), 0);
  ck_assert(a.len == b.len && memcmp(a.key, b.key, a.len) == 0);
  ck_assert_int_eq(chmod(path, 0640), 0);
  ck_assert_int_lt(rdzv_token_key_file(path, &b, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "too open"), "%s", err);
  unlink(path);
  snprintf(path, sizeof path, "%s/no/such/dir/token.key", kdir);
  ck_assert_int_lt(rdzv_token_key_file(path, &b, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "cannot create it"), "%s", err);
  rmdir(kdir);
}
END_TEST

/* Issue 32, item 7: a token key file that is a FIFO hung rdzvd at start
 * (open blocked for a writer) with no log line; a symbolic link put in
 * its place was followed.  Both are refused with a sentence. */
START_TEST(token_key_file_not_regular)
{
  char kdir[] = "/tmp/cdrun-tkey-XXXXXX", path[600], real[600], err[512];
  struct rdzv_auth_secret a;

  ck_assert_ptr_nonnull(mkdtemp(kdir));
  snprintf(path, sizeof path, "%s/fifo.key", kdir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  ck_assert_int_lt(rdzv_token_key_file(path, &a, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
  unlink(path);
  snprintf(real, sizeof real, "%s/real.key", kdir);
  ck_assert_int_eq(rdzv_token_key_file(real, &a, err, sizeof err), 0);
  snprintf(path, sizeof path, "%s/link.key", kdir);
  ck_assert_int_eq(symlink(real, path), 0);
  ck_assert_int_lt(rdzv_token_key_file(path, &a, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "symbolic link"), "%s", err);
  unlink(path);
  unlink(real);
  rmdir(kdir);
}
END_TEST

/* Note [job ledger]: the records a restarted rdzvd reads beside its key
 * file: written whole, read back by another opening, removed; the folder
 * is made mode 700 and one open to others is refused. */
START_TEST(job_ledger_files)
{
  char kdir[] = "/tmp/cdrun-ledger-XXXXXX", key[600], jobs[640], err[512];
  struct rdzv_ledger_rec a = { 0x0123456789abcdefull, 7, 2 }, b;
  struct job_ledger *l;
  struct stat st;

  ck_assert_ptr_nonnull(mkdtemp(kdir));
  snprintf(key, sizeof key, "%s/token.key", kdir);
  snprintf(jobs, sizeof jobs, "%s.jobs", key);
  ck_assert_int_eq(job_ledger_open(key, &l, err, sizeof err), 0);
  ck_assert_int_eq(stat(jobs, &st), 0);
  ck_assert_int_eq(st.st_mode & 0777, 0700);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), -ENOENT);
  ck_assert_int_eq(job_ledger_put(l, "job1", &a), 0);
  a.round = -1;
  ck_assert_int_eq(job_ledger_put(l, "job2", &a), 0);
  a.round = 1 << 30;
  a.restart_count = 1000000;
  ck_assert_int_eq(job_ledger_put(l, "job1", &a), 0);
  job_ledger_close(l);
  ck_assert_int_eq(job_ledger_open(key, &l, err, sizeof err), 0);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), 0);
  ck_assert(b.incarnation == a.incarnation && b.round == 1 << 30 &&
            b.restart_count == 1000000);
  ck_assert_int_eq(job_ledger_get(l, "job2", &b), 0);
  ck_assert_int_eq(b.round, -1);
  ck_assert_int_eq(job_ledger_drop(l, "job1"), 0);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), -ENOENT);
  ck_assert_int_eq(job_ledger_drop(l, "job2"), 0);
  job_ledger_close(l);
  ck_assert_int_eq(chmod(jobs, 0755), 0);
  ck_assert_int_lt(job_ledger_open(key, &l, err, sizeof err), 0);
  ck_assert_msg(strstr(err, "chmod 700"), "%s", err);
  rmdir(jobs);
  rmdir(kdir);
}
END_TEST

/* The one record in folder: its path in path. */
static void the_record(const char *folder, char *path, size_t len)
{
  DIR *d = opendir(folder);
  struct dirent *e;
  int n = 0;

  ck_assert_ptr_nonnull(d);
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(path, len, "%s/%s", folder, e->d_name);
      n++;
    }
  closedir(d);
  ck_assert_int_eq(n, 1);
}

static void put_bytes(const char *path, const char *bytes, size_t n)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, bytes, n), (ssize_t)n);
  close(fd);
}

static char ledger_logged[1024];
static void ledger_log(void *ctx, const char *line)
{
  (void)ctx;
  snprintf(ledger_logged, sizeof ledger_logged, "%s", line);
}

/* Note [ledger writes]: a record replaces the last one by a rename (a new
 * file, never the old one rewritten in place), a temporary file a crash
 * left is removed at the next opening, and a torn, longer or garbage
 * record is refused (-EPROTO) and logged naming the file, never read as
 * a claim's proof or a crash. */
START_TEST(job_ledger_torn)
{
  char kdir[] = "/tmp/cdrun-ledger-XXXXXX", key[600], jobs[640], err[512];
  char rec[1024], junk[1024], whole[256];
  struct rdzv_ledger_rec a = { 0x0123456789abcdefull, 7, 2 }, b;
  struct job_ledger *l;
  struct rdzv_ledger calls;
  struct stat st1, st2;
  ssize_t n;
  int fd;

  ck_assert_ptr_nonnull(mkdtemp(kdir));
  snprintf(key, sizeof key, "%s/token.key", kdir);
  snprintf(jobs, sizeof jobs, "%s.jobs", key);
  ck_assert_int_eq(job_ledger_open(key, &l, err, sizeof err), 0);
  ck_assert_int_eq(job_ledger_put(l, "job1", &a), 0);
  the_record(jobs, rec, sizeof rec);
  ck_assert_int_eq(stat(rec, &st1), 0);
  a.round = 8;
  ck_assert_int_eq(job_ledger_put(l, "job1", &a), 0);
  the_record(jobs, rec, sizeof rec);     /* no temporary file stays */
  ck_assert_int_eq(stat(rec, &st2), 0);
  ck_assert_msg(st1.st_ino != st2.st_ino, "the record was rewritten in "
                "place, not replaced whole");
  /* A crash between the temporary file and its rename. */
  snprintf(junk, sizeof junk, "%s/.tmp-0123", jobs);
  put_bytes(junk, "cdrun-job-ledger-1 00", 21);
  job_ledger_close(l);
  ck_assert_int_eq(job_ledger_open(key, &l, err, sizeof err), 0);
  ck_assert_int_eq(access(junk, F_OK), -1);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), 0);
  ck_assert_int_eq(b.round, 8);
  fd = open(rec, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  n = read(fd, whole, sizeof whole);
  close(fd);
  ck_assert_int_gt(n, 20);
  /* Torn: half a record. */
  put_bytes(rec, whole, (size_t)n / 2);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), -EPROTO);
  /* A whole record and more after it. */
  memcpy(junk, whole, (size_t)n);
  memcpy(junk + n, "7 1\n", 4);
  put_bytes(rec, junk, (size_t)n + 4);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), -EPROTO);
  /* Garbage of a record's length, and a record whose last digits are
   * gone (a newline where they were). */
  memset(junk, 0xff, (size_t)n);
  put_bytes(rec, junk, (size_t)n);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), -EPROTO);
  memcpy(junk, whole, (size_t)n);
  memset(junk + n - 12, ' ', 11);
  put_bytes(rec, junk, (size_t)n);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), -EPROTO);
  /* The daemon's calls log it once, naming the file and why. */
  calls = job_ledger_calls(l, ledger_log, NULL);
  ledger_logged[0] = '\0';
  ck_assert_int_eq(calls.get(calls.ctx, "job1", &b), -EPROTO);
  ck_assert_msg(strstr(ledger_logged, "not a whole ledger record") &&
                strstr(ledger_logged, rec + strlen(jobs) + 1),
                "logged: '%s'", ledger_logged);
  ledger_logged[0] = '\0';
  ck_assert_int_eq(calls.get(calls.ctx, "nojob", &b), -ENOENT);
  ck_assert_str_eq(ledger_logged, "");
  /* A good write replaces the torn file. */
  ck_assert_int_eq(job_ledger_put(l, "job1", &a), 0);
  ck_assert_int_eq(job_ledger_get(l, "job1", &b), 0);
  ck_assert_int_eq(job_ledger_drop(l, "job1"), 0);
  job_ledger_close(l);
  ck_assert_int_eq(rmdir(jobs), 0);
  rmdir(kdir);
}
END_TEST

START_TEST(secret_file_good)
{
  struct rdzv_auth_secret k;
  char err[512];
  const char *p;

  p = write_file("s", "0123456789abcdef\n", 17, 0600);
  ck_assert_int_eq(rdzv_auth_secret_load(p, &k, err, sizeof err), 0);
  ck_assert_uint_eq(k.len, 16);   /* the newline is not part of it */
  ck_assert_mem_eq(k.key, "0123456789abcdef", 16);
  p = write_file("crlf", "0123456789abcdefXY\r\n", 20, 0400);
  ck_assert_int_eq(rdzv_auth_secret_load(p, &k, err, sizeof err), 0);
  ck_assert_uint_eq(k.len, 18);
  rdzv_auth_secret_clear(&k);
  ck_assert_uint_eq(k.len, 0);
}
END_TEST

START_TEST(secret_file_refused)
{
  char big[RDZV_AUTH_MAX_SECRET + 8];

  refused(write_file("g", "0123456789abcdef", 16, 0640), -EPERM,
          "permissions 0640 are too open");
  refused(write_file("o", "0123456789abcdef", 16, 0604), -EPERM,
          "chmod 600");
  refused(write_file("x", "0123456789abcdef", 16, 0610), -EPERM,
          "too open");
  refused(write_file("e", "", 0, 0600), -EINVAL, "empty");
  refused(write_file("nl", "\n", 1, 0600), -EINVAL, "empty");
  refused(write_file("short", "0123456789abcde\n", 16, 0600), -EINVAL,
          "too short");
  memset(big, 'a', sizeof big);
  refused(write_file("long", big, sizeof big, 0600), -EINVAL, "too long");
  refused(dir, -EINVAL, "not a regular file");
  refused("/nonexistent/secret", -ENOENT, "No such file");
}
END_TEST

/* ---- the handshake, both sides, no sockets ---- */

static struct rdzv_auth_secret K1, K2;

static void keys(void)
{
  memset(&K1, 0, sizeof K1);
  memset(&K2, 0, sizeof K2);
  memcpy(K1.key, "the right secret, 32 bytes long!", 32);
  K1.len = 32;
  memcpy(K2.key, "the wrong secret, 32 bytes long!", 32);
  K2.len = 32;
}

/* Runs a handshake of a client knowing kc against a server knowing ks;
 * returns the client's last rc (0: both sides done). */
static int handshake(const struct rdzv_auth_secret *kc,
                     const struct rdzv_auth_secret *ks,
                     enum rdzv_auth_verdict *last, char *why)
{
  struct rdzv_auth_client c;
  struct rdzv_auth_server s;
  struct rdzv_proto_msg m, reply, back;
  char err[512];
  int rc;

  memset(&s, 0, sizeof s);
  ck_assert_int_eq(rdzv_auth_client_hello(&c, &m), 0);
  ck_assert_int_eq(m.op, RDZV_PROTO_HELLO);
  *last = rdzv_auth_server_step(&s, ks, &m, &reply, why, 256);
  if (*last != RDZV_AUTH_REPLY)
    return rdzv_auth_client_step(&c, kc, &reply, &back, err, sizeof err);
  ck_assert_int_eq(reply.op, RDZV_PROTO_CHALLENGE);
  rc = rdzv_auth_client_step(&c, kc, &reply, &back, err, sizeof err);
  ck_assert_int_eq(rc, 1);
  ck_assert_int_eq(back.op, RDZV_PROTO_AUTH);
  *last = rdzv_auth_server_step(&s, ks, &back, &reply, why, 256);
  rc = rdzv_auth_client_step(&c, kc, &reply, &m, err, sizeof err);
  if (rc == 0) {
    ck_assert_int_eq(s.state, RDZV_AUTH_S_DONE);
    ck_assert_int_eq(c.state, RDZV_AUTH_C_DONE);
  } else {
    ck_assert_msg(strstr(err, RDZV_AUTH_REFUSED), "%s", err);
  }
  return rc;
}

START_TEST(handshake_ok)
{
  enum rdzv_auth_verdict v;
  char why[256];

  keys();
  ck_assert_int_eq(handshake(&K1, &K1, &v, why), 0);
  ck_assert_int_eq(v, RDZV_AUTH_REPLY);
}
END_TEST

START_TEST(handshake_wrong_secret)
{
  enum rdzv_auth_verdict v;
  char why[256];

  keys();
  ck_assert_int_eq(handshake(&K2, &K1, &v, why), -EACCES);
  ck_assert_int_eq(v, RDZV_AUTH_REFUSE);
  ck_assert_str_eq(why, "wrong shared secret");
}
END_TEST

/* Without a secret on one side: a clear refusal either way. */
START_TEST(handshake_secret_on_one_side)
{
  struct rdzv_auth_server s;
  struct rdzv_proto_msg m, reply;
  enum rdzv_auth_verdict v;
  char why[256];

  keys();
  /* The client has one, the server has none. */
  ck_assert_int_eq(handshake(&K1, NULL, &v, why), -EACCES);
  ck_assert_int_eq(v, RDZV_AUTH_REFUSE);
  ck_assert_ptr_nonnull(strstr(why, "this server has none"));
  /* The server has one; the client sends a join at once. */
  memset(&s, 0, sizeof s);
  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_JOIN;
  ck_assert_int_eq(rdzv_auth_server_step(&s, &K1, &m, &reply, why, sizeof why),
                   RDZV_AUTH_REFUSE);
  ck_assert_int_eq(reply.op, RDZV_PROTO_ERROR);
  ck_assert_int_eq(reply.u.text.code, RDZV_PROTO_ERR_AUTH);
  ck_assert_str_eq(reply.u.text.message,
                   "this server requires a shared secret");
  /* A status query is no exception. */
  memset(&s, 0, sizeof s);
  m.op = RDZV_PROTO_STATUS;
  ck_assert_int_eq(rdzv_auth_server_step(&s, &K1, &m, &reply, why, sizeof why),
                   RDZV_AUTH_REFUSE);
  /* Neither side has one: everything passes. */
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(rdzv_auth_server_step(&s, NULL, &m, &reply, why, sizeof why),
                   RDZV_AUTH_PASS);
}
END_TEST

/* One bit flipped in either proof is refused. */
START_TEST(handshake_tampered)
{
  struct rdzv_auth_client c;
  struct rdzv_auth_server s;
  struct rdzv_proto_msg m, reply, back;
  char why[256], err[512];
  int bit;

  keys();
  for (bit = 0; bit < 256; bit += 37) {
    /* The client's proof. */
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(rdzv_auth_client_hello(&c, &m), 0);
    ck_assert_int_eq(
        rdzv_auth_server_step(&s, &K1, &m, &reply, why, sizeof why),
        RDZV_AUTH_REPLY);
    ck_assert_int_eq(rdzv_auth_client_step(&c, &K1, &reply, &back, err,
                                    sizeof err), 1);
    back.u.auth.mac[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    ck_assert_int_eq(rdzv_auth_server_step(&s, &K1, &back, &reply, why,
                                    sizeof why), RDZV_AUTH_REFUSE);
    /* The server's proof. */
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(rdzv_auth_client_hello(&c, &m), 0);
    ck_assert_int_eq(
        rdzv_auth_server_step(&s, &K1, &m, &reply, why, sizeof why),
        RDZV_AUTH_REPLY);
    ck_assert_int_eq(rdzv_auth_client_step(&c, &K1, &reply, &back, err,
                                    sizeof err), 1);
    ck_assert_int_eq(rdzv_auth_server_step(&s, &K1, &back, &reply, why,
                                    sizeof why), RDZV_AUTH_REPLY);
    ck_assert_int_eq(reply.op, RDZV_PROTO_AUTH_OK);
    reply.u.auth.mac[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    ck_assert_int_eq(rdzv_auth_client_step(&c, &K1, &reply, &back, err,
                                    sizeof err), -EACCES);
    ck_assert_ptr_nonnull(strstr(err, "did not prove"));
  }
}
END_TEST

/* A proof from one session is worthless in the next (fresh server nonce),
 * and a server that reflects the client's nonce is caught. */
START_TEST(handshake_replay_and_reflection)
{
  struct rdzv_auth_client c;
  struct rdzv_auth_server s;
  struct rdzv_proto_msg m, reply, proof, back;
  char why[256], err[512];

  keys();
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(rdzv_auth_client_hello(&c, &m), 0);
  ck_assert_int_eq(rdzv_auth_server_step(&s, &K1, &m, &reply, why, sizeof why),
                   RDZV_AUTH_REPLY);
  ck_assert_int_eq(
      rdzv_auth_client_step(&c, &K1, &reply, &proof, err, sizeof err), 1);
  /* Replay the same hello and proof to a new connection. */
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(rdzv_auth_server_step(&s, &K1, &m, &reply, why, sizeof why),
                   RDZV_AUTH_REPLY);
  ck_assert_int_eq(
      rdzv_auth_server_step(&s, &K1, &proof, &reply, why, sizeof why),
      RDZV_AUTH_REFUSE);
  /* Reflection: the challenge carries the client's own nonce. */
  ck_assert_int_eq(rdzv_auth_client_hello(&c, &m), 0);
  reply = m;
  reply.op = RDZV_PROTO_CHALLENGE;
  ck_assert_int_eq(
      rdzv_auth_client_step(&c, &K1, &reply, &back, err, sizeof err), -EACCES);
  ck_assert_ptr_nonnull(strstr(err, "reflected"));
  /* Out of order: auth before hello; hello after success. */
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(
      rdzv_auth_server_step(&s, &K1, &proof, &reply, why, sizeof why),
      RDZV_AUTH_REFUSE);
}
END_TEST

START_TEST(preauth_frame_limit)
{
  struct rdzv_auth_server s;

  keys();
  memset(&s, 0, sizeof s);
  ck_assert(
      !rdzv_auth_server_frame_too_big(&s, &K1, RDZV_AUTH_PREAUTH_MAX_FRAME));
  ck_assert(
      rdzv_auth_server_frame_too_big(&s, &K1, RDZV_AUTH_PREAUTH_MAX_FRAME + 1));
  ck_assert(!rdzv_auth_server_frame_too_big(&s, NULL, RDZV_PROTO_MAX_FRAME));
  s.state = RDZV_AUTH_S_DONE;
  ck_assert(!rdzv_auth_server_frame_too_big(&s, &K1, RDZV_PROTO_MAX_FRAME));
}
END_TEST

/* ---- the codec's handshake messages ---- */

START_TEST(codec_hex_fields)
{
  struct rdzv_proto_msg m, d;
  char *frame, err[256];
  size_t len;
  int i;

  memset(&m, 0, sizeof m);
  m.op = RDZV_PROTO_HELLO;
  for (i = 0; i < RDZV_PROTO_AUTH_BYTES; i++)
    m.u.auth.nonce[i] = (unsigned char)(i * 9);
  ck_assert_int_eq(rdzv_proto_encode(&m, &frame, &len), 0);
  ck_assert_uint_le(len - RDZV_PROTO_FRAME_HEADER, RDZV_AUTH_PREAUTH_MAX_FRAME);
  ck_assert_int_eq(rdzv_proto_decode(frame + RDZV_PROTO_FRAME_HEADER,
                                     len - RDZV_PROTO_FRAME_HEADER, &d, err,
                                     sizeof err),
                   0);
  ck_assert_int_eq(d.op, RDZV_PROTO_HELLO);
  ck_assert_mem_eq(d.u.auth.nonce, m.u.auth.nonce, RDZV_PROTO_AUTH_BYTES);
  ck_assert_ptr_nonnull(memmem(frame, len, "\"nonce\":\"0009121b", 17));
  free(frame);
  ck_assert_int_eq(rdzv_proto_decode("{\"v\":2,\"op\":\"auth\",\"mac\":\"00\"}",
                                     30, &d, err, sizeof err),
                   -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "auth.mac: expected 64 hex digits"));
  {
    char body[160];

    snprintf(body, sizeof body, "{\"v\":2,\"op\":\"challenge\",\"nonce\":"
             "\"%064d\"}", 0);
    ck_assert_int_eq(rdzv_proto_decode(body, strlen(body), &d, err, sizeof err),
                     0);
    body[40] = 'A';
    ck_assert_int_eq(rdzv_proto_decode(body, strlen(body), &d, err, sizeof err),
                     -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "not lowercase hex"));
  }
  ck_assert_int_eq(rdzv_proto_decode("{\"v\":2,\"op\":\"hello\"}", 20, &d, err,
                             sizeof err), -EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "hello.nonce: missing"));
}
END_TEST

/* An auth the server read with the hello (read_with_hello, set by the
 * caller) was sent before the challenge: refused as such, whatever it
 * holds, and not as a wrong secret. */
START_TEST(auth_read_with_hello)
{
  struct rdzv_auth_client c;
  struct rdzv_auth_server s;
  struct rdzv_proto_msg m, reply, back;
  char err[512], why[256];

  keys();
  memset(&s, 0, sizeof s);
  ck_assert_int_eq(rdzv_auth_client_hello(&c, &m), 0);
  ck_assert_int_eq(rdzv_auth_server_step(&s, &K1, &m, &reply, why, sizeof why),
                   RDZV_AUTH_REPLY);
  ck_assert_int_eq(
      rdzv_auth_client_step(&c, &K1, &reply, &back, err, sizeof err), 1);
  s.read_with_hello = true;
  ck_assert_int_eq(
      rdzv_auth_server_step(&s, &K1, &back, &reply, why, sizeof why),
      RDZV_AUTH_REFUSE);
  ck_assert_int_eq(reply.op, RDZV_PROTO_ERROR);
  ck_assert_int_eq(reply.u.text.code, RDZV_PROTO_ERR_AUTH);
  ck_assert_str_eq(reply.u.text.message, "auth sent before the challenge");
  ck_assert_msg(strstr(why, "pipelined behind hello"), "%s", why);
  ck_assert_int_ne(s.state, RDZV_AUTH_S_DONE);
}
END_TEST

static Suite *auth_suite(void)
{
  Suite *s = suite_create("rdzv_auth");
  TCase *tc = tcase_create("hmac");
  TCase *files = tcase_create("secret_file");
  TCase *hs = tcase_create("handshake");

  tcase_add_test(tc, rfc4231_vectors);
  tcase_add_test(tc, mac_layout);
  suite_add_tcase(s, tc);
  tcase_add_checked_fixture(files, setup_dir, teardown_dir);
  tcase_add_test(files, secret_file_good);
  tcase_add_test(files, token_key_file_made_once);
  tcase_add_test(files, token_key_file_not_regular);
  tcase_add_test(files, job_ledger_files);
  tcase_add_test(files, job_ledger_torn);
  tcase_add_test(files, secret_file_refused);
  suite_add_tcase(s, files);
  tcase_add_test(hs, handshake_ok);
  tcase_add_test(hs, handshake_wrong_secret);
  tcase_add_test(hs, handshake_secret_on_one_side);
  tcase_add_test(hs, handshake_tampered);
  tcase_add_test(hs, handshake_replay_and_reflection);
  tcase_add_test(hs, preauth_frame_limit);
  tcase_add_test(hs, codec_hex_fields);
  tcase_add_test(hs, auth_read_with_hello);
  suite_add_tcase(s, hs);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(auth_suite());
  int failed;

  srunner_run_all(sr, CK_NORMAL);
  failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
