/* errors.c -- error codes, their names and meanings, the per-thread last
 * error sentence, and the monotonic clock. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pg_internal.h"
#include "worker_contract.h"

/* One sentence per thread: a library may not print, and errno-style codes
 * alone cannot say "MASTER_PORT is 'abc'". */
static __thread char last_error[512];

double pg__now(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Formatted apart first: an argument may be pg_last_error() itself (a
 * sentence prefixed with context), and vsnprintf may not read the buffer
 * it writes. */
int pg__fail(int err, const char *fmt, ...)
{
  char line[sizeof last_error];
  va_list ap;

  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  memcpy(last_error, line, sizeof line);
  return err;
}

const char *pg_last_error(void)
{
  return last_error;
}

#define PG_ERRNO_MAP(XX)                                                  \
  XX(EINVAL, "invalid argument or environment")                           \
  XX(ETIMEDOUT, "operation timed out")                                    \
  XX(ECONNRESET, "a peer closed its connection or died")                  \
  XX(EPIPE, "a peer went away")                                           \
  XX(ECONNREFUSED, "connection refused (is the store running?)")          \
  XX(ENOMEM, "out of memory")                                             \
  XX(EPROTO, "protocol error: a peer sent something unexpected")          \
  XX(ENOENT, "no such key")                                               \
  XX(ENODEV, "no GPU available for the NCCL backend")                     \
  XX(ENOTSUP, "not supported by this build or backend")                   \
  XX(EMSGSIZE, "message too large")                                       \
  XX(EBUSY, "resource busy")                                              \
  XX(EADDRINUSE, "address already in use")                                \
  XX(EHOSTUNREACH, "host unreachable")                                    \
  XX(EAGAIN, "resource temporarily unavailable")                          \
  XX(EALREADY, "already done (e.g. a gradient marked ready twice)")       \
  XX(ERANGE, "result out of range (store counter overflow)")            \
  XX(EACCES, "refused: the job token (" WORKER_ENV_JOB_TOKEN               \
             ") does not match")                                          \
  XX(ENOSPC, "over the store's memory budget")                            \
  XX(ENODATA, "live recovery: no member holds the state any more")

const char *pg_err_name(int err)
{
  switch (-err) {
#define XX(code, text) case code: return #code;
    PG_ERRNO_MAP(XX)
#undef XX
  }
  if (err == 0)
    return "OK";
  if (err == PG_EPEERFAIL)
    return "EPEERFAIL";
  if (err == PG_ERR_PEER_LOST)
    return "ERR_PEER_LOST";
  if (err == PG_ESTALE_GROUP)
    return "ESTALE_GROUP";
  if (err <= PG_EBACKEND_BASE - 1000)
    return "ECUDA";
  if (err <= PG_EBACKEND_BASE)
    return "ENCCL";
  return "EUNKNOWN";
}

const char *pg_strerror(int err)
{
  switch (-err) {
#define XX(code, text) case code: return text;
    PG_ERRNO_MAP(XX)
#undef XX
  }
  if (err == 0)
    return "success";
  if (err == PG_EPEERFAIL)
    return "an earlier collective failed; the group is unusable";
  if (err == PG_ERR_PEER_LOST)
    return "a member of the group died (live recovery: call pg_recover)";
  if (err == PG_ESTALE_GROUP)
    return "a sub-group of an earlier live generation (make it again)";
  if (err <= PG_EBACKEND_BASE - 1000)
    return "CUDA error (pg_last_error() has the details)";
  if (err <= PG_EBACKEND_BASE)
    return "NCCL error (pg_last_error() has the details)";
  return err < 0 ? strerror(-err) : "unknown error";
}

size_t pg_dtype_size(pg_dtype t)
{
  static const size_t sizes[PG_DTYPE_COUNT] = { 4, 8, 2, 2, 4, 8, 1 };

  return (unsigned)t < PG_DTYPE_COUNT ? sizes[t] : 0;
}
