/* fuzz_store.c -- libFuzzer target: libpg's store server (store_server.c
 * and its codec, store_wire.c), the one parser in libpg that anyone who
 * can reach its port may talk to.  The server has a job token and small
 * memory budgets (Note [store budget]).  Each input goes over a real
 * loopback connection to an in-process server: the input's first byte
 * odd: the rest of the input as is (a stranger's handshake); even: the
 * handshake with a proof of the token (bit 1 set: of a wrong token), then
 * the rest of the input as request frames; then our side shuts down and
 * the replies are read until the server closes or REPLY_WAIT passes (a
 * GET or WAIT may wait for a key that never comes).  Every STATE_RUNS
 * inputs the server must still serve a well-behaved client (a SET, a GET
 * of it, NUM_KEYS), and is replaced by a fresh one, so that the keys of
 * earlier inputs do not pile up. */
#include "pg.h"
#include "auth.h"
#include "store_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STATE_RUNS 256
#define REPLY_WAIT_MS 20
#define TOKEN "fuzz-token-0123456789abcdef"

static pg_store_server *srv;
static int port;
static unsigned runs;

static void die(const char *what, int err)
{
  fprintf(stderr, "fuzz_store: %s: %s\n", what, strerror(err < 0 ? -err : err));
  abort();
}

/* A well-behaved client still gets its answers. */
static void check_alive(void)
{
  pg_store *c;
  void *v = NULL;
  size_t len = 0;
  int64_t n = -1;
  int err;

  if ((err = pg_store_connect_auth("127.0.0.1", port, 5.0, TOKEN, &c)) != 0)
    die("connect after the inputs", err);
  if ((err = pg_store_set(c, "fuzz/alive", "yes", 3)) != 0 ||
      (err = pg_store_get(c, "fuzz/alive", 5.0, &v, &len)) != 0 ||
      (err = pg_store_num_keys(c, &n)) != 0)
    die("a request after the inputs", err);
  if (len != 3 || memcmp(v, "yes", 3) != 0 || n < 1)
    die("a wrong answer after the inputs", EPROTO);
  free(v);
  pg_store_close(c);
}

static void server_fresh(void)
{
  int err;

  if (srv) {
    check_alive();
    pg_store_server_stop(srv);
  }
  port = 0;
  /* Small budgets, so that inputs reach them (read once per process). */
  setenv("PG_STORE_MAX_BYTES", "8388608", 0);
  setenv("PG_STORE_MAX_CONN_BYTES", "1048576", 0);
  if ((err = pg_store_server_start_auth("127.0.0.1", &port, TOKEN, &srv))
      != 0)
    die("pg_store_server_start", err);
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return;             /* the server closed: a fine answer to junk */
    p += k;
    n -= (size_t)k;
  }
}

/* Reads replies until EOF or REPLY_WAIT_MS without one. */
static void drain(int fd)
{
  uint8_t buf[65536];
  struct pollfd pfd = { .fd = fd, .events = POLLIN };
  int i;

  for (i = 0; i < 1000; i++) {
    ssize_t k;

    if (poll(&pfd, 1, REPLY_WAIT_MS) <= 0)
      return;
    k = recv(fd, buf, sizeof buf, 0);
    if (k <= 0)
      return;
  }
}

/* The handshake with a proof of the token (or, wrong, of another). */
static void handshake(int fd, bool wrong)
{
  struct pg__token t;
  uint8_t hello[ST_HELLO_BYTES], answer[5 + PG_NONCE_BYTES];
  uint8_t mac[PG_MAC_BYTES];

  memcpy(hello, stw_hello, 4);
  pg__nonce(hello + 4, PG_NONCE_BYTES);
  send_all(fd, hello, sizeof hello);
  if (recv(fd, answer, sizeof answer, MSG_WAITALL) != sizeof answer)
    die("the server's hello", EPROTO);
  if (pg__token_from(wrong ? TOKEN "-wrong" : TOKEN, &t) != 0)
    die("the token", EINVAL);
  pg__auth_mac(&t, ST_LABEL_CLIENT, NULL, 0, hello + 4, answer + 5, mac);
  send_all(fd, mac, sizeof mac);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct sockaddr_in sa;
  struct timeval tv = { 2, 0 };
  int fd;

  if (!srv || ++runs % STATE_RUNS == 0)
    server_fresh();
  if (size == 0)
    return 0;
  fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    die("socket", errno);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
    die("connect", errno);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (!(data[0] & 1))
    handshake(fd, data[0] & 2);
  send_all(fd, data + 1, size - 1);
  shutdown(fd, SHUT_WR);
  drain(fd);
  close(fd);
  return 0;
}
