/* auth.c -- the job token and its proofs (auth.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "auth.h"
#include "knobs.h"

int pg__token_from(const char *text, struct pg__token *t)
{
  size_t n;

  t->len = 0;
  if (!text)
    text = pg__knob(PG_KNOB_JOB_TOKEN);
  if (!text || !*text)
    return 0;
  n = strlen(text);
  if (n < PG_TOKEN_MIN || n > PG_TOKEN_MAX)
    return pg__fail(-EINVAL, "%s is %zu bytes long, expected %d..%d (cdrun "
                    "sets it; a job's workers must all have the same one)",
                    PG_TOKEN_VAR, n, PG_TOKEN_MIN, PG_TOKEN_MAX);
  memcpy(t->key, text, n);
  t->len = n;
  return 0;
}

void pg__nonce(uint8_t *out, size_t n)
{
  size_t got = 0;

  while (got < n) {
    ssize_t k = getrandom(out + got, n - got, 0);

    if (k > 0) {
      got += (size_t)k;
    } else if (k < 0 && errno != EINTR) {
      /* No getrandom (old kernel, seccomp): /dev/urandom, else abort
       * rather than hand out a guessable challenge. */
      int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

      while (fd >= 0 && got < n) {
        k = read(fd, out + got, n - got);
        if (k > 0)
          got += (size_t)k;
        else if (k == 0 || errno != EINTR)
          break;
      }
      if (fd >= 0)
        close(fd);
      if (got < n)
        abort();
    }
  }
}

void pg__auth_mac(const struct pg__token *t, const char *label,
                  const void *ctx, size_t ctxlen,
                  const uint8_t a[PG_NONCE_BYTES],
                  const uint8_t b[PG_NONCE_BYTES], uint8_t out[PG_MAC_BYTES])
{
  const void *parts[4] = { label, ctx, a, b };
  size_t lens[4] = { strlen(label) + 1, ctxlen, PG_NONCE_BYTES,
                     PG_NONCE_BYTES };

  sha256_hmac_parts(t->key, t->len, parts, lens, 4, out);
}

bool pg__auth_check(const struct pg__token *t, const char *label,
                    const void *ctx, size_t ctxlen,
                    const uint8_t a[PG_NONCE_BYTES],
                    const uint8_t b[PG_NONCE_BYTES],
                    const uint8_t mac[PG_MAC_BYTES])
{
  uint8_t want[PG_MAC_BYTES];

  pg__auth_mac(t, label, ctx, ctxlen, a, b, want);
  return sha256_equal_ct(want, mac, PG_MAC_BYTES);
}

static pthread_once_t warn_once = PTHREAD_ONCE_INIT;
static bool warn_loopback;

static void warn_print(void)
{
  if (warn_loopback)
    fprintf(stderr, "libpg: warning: %s is not set: the store and the "
            "mesh accept any process of this host (start workers with "
            "cdrun to get a job token)\n", PG_TOKEN_VAR);
  else
    fprintf(stderr, "libpg: warning: %s is not set: the store on "
            "MASTER_PORT is open to anyone who can reach it (start workers "
            "with cdrun to get a job token)\n", PG_TOKEN_VAR);
}

void pg__token_warn_missing(bool loopback)
{
  warn_loopback = loopback;
  pthread_once(&warn_once, warn_print);
}
