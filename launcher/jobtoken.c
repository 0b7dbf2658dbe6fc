/* jobtoken.c -- the workers' job token (jobtoken.h). */
#include "jobtoken.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "rdzv_auth.h"

#define LABEL "cdrun-job-token-1"
#define PUBLIC_KEY "cdrun-job-token-public"

static void hex(const unsigned char *b, size_t n, char *out)
{
  static const char digits[] = "0123456789abcdef";
  size_t i;

  for (i = 0; i < n; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * n] = '\0';
}

void jobtoken_run_nonce(char out[JOBTOKEN_NONCE_HEX + 1])
{
  unsigned char raw[JOBTOKEN_NONCE_HEX / 2];
  struct timespec ts;

  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    clock_gettime(CLOCK_MONOTONIC, &ts);
    memset(raw, 0, sizeof raw);
    memcpy(raw, &ts, sizeof ts < sizeof raw ? sizeof ts : sizeof raw);
    raw[sizeof raw - 1] ^= (unsigned char)getpid();
  }
  hex(raw, sizeof raw, out);
}

int jobtoken_make(const unsigned char *secret, size_t keylen,
                  const char *run_id, const struct rdzv_assignment *as,
                  bool private_ok, char out[JOBTOKEN_HEX + 1],
                  bool *guessable)
{
  const char *own = getenv(JOBTOKEN_VAR);
  unsigned char mac[RDZV_PROTO_AUTH_BYTES];
  char *msg;
  int n, err;

  *guessable = false;
  if (as->live_store[0] && as->job_token[0]) {
    /* Note [live store in rdzvd]: the store the rendezvous serves knows
     * its own token only. */
    snprintf(out, JOBTOKEN_HEX + 1, "%s", as->job_token);
    return 0;
  }
  if (own && *own) {
    secret = (const unsigned char *)own;
    keylen = strlen(own);
  } else if (as->job_token[0]) {        /* the rendezvous issued it */
    snprintf(out, JOBTOKEN_HEX + 1, "%s", as->job_token);
    return 0;
  }
  if (keylen == 0 && as->group_world_size <= 1 && private_ok) {
    /* The kernel's CSPRNG, not OpenSSL's: no libcrypto set-up in an
     * agent that has no secret. */
    if (getrandom(mac, sizeof mac, 0) != (ssize_t)sizeof mac)
      return -EIO;
    hex(mac, sizeof mac, out);
    return 0;
  }
  if (keylen == 0) {
    secret = (const unsigned char *)PUBLIC_KEY;
    keylen = strlen(PUBLIC_KEY);
    *guessable = true;
  }
  /* NULs between the fields: no two tuples give the same message.  The
   * run nonce, where there is one, after the port (Note [job token]). */
  n = asprintf(&msg, "%s%c%s%c%s%c%d%s%s", LABEL, 0, run_id ? run_id : "",
               0, as->master_addr, 0, as->master_port,
               as->run_nonce[0] ? " nonce " : "", as->run_nonce);
  if (n < 0)
    return -ENOMEM;
  err = rdzv_auth_hmac(secret, keylen, msg, (size_t)n, mac);
  free(msg);
  if (err)
    return -EIO;
  hex(mac, sizeof mac, out);
  return 0;
}
