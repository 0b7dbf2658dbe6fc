/* live_store.c -- a live store, libpg's store server loaded at run time
 * (live_store.h). */
#include "live_store.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "pg.h"

/* libpg's calls, named and typed by its public header (this object alone
 * sees libpg/include: the Makefile).  __typeof__ and # name no symbol, so
 * the archive needs none of libpg's (make check-layers): dlsym finds
 * them in the libpg.so loaded. */
#define LIBPG_SYM(h, name) ((__typeof__(name) *)dlsym(h, #name))

struct live_store {
  pg_store_server *server;
};

static __typeof__(pg_store_server_start_auth) *server_start;
static __typeof__(pg_store_server_stop) *server_stop;
static __typeof__(pg_last_error) *last_error;

/* <dir of /proc/self/exe>/../lib/libpg.so, or "" when unknown. */
static void beside_binary(char *path, size_t len)
{
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash;

  path[0] = '\0';
  if (n <= 0)
    return;
  exe[n] = '\0';
  slash = strrchr(exe, '/');
  if (!slash)
    return;
  *slash = '\0';
  snprintf(path, len, "%s/../lib/libpg.so", exe);
}

/* Loads libpg once, for the life of the process. */
static int load(char *err, size_t errlen)
{
  char path[PATH_MAX + 16], first[256] = "";
  void *h = NULL;

  if (server_start)
    return 0;
  beside_binary(path, sizeof path);
  if (path[0] && access(path, F_OK) == 0) {
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
      snprintf(first, sizeof first, "%s; ", dlerror());
  }
  if (!h)
    h = dlopen("libpg.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return err_set(err, errlen, -ENOENT,
                   "live recovery needs libpg.so (looked for %s, then the "
                   "loader's path): %s%s", path[0] ? path : "?", first,
                   dlerror());
  server_start = LIBPG_SYM(h, pg_store_server_start_auth);
  server_stop = LIBPG_SYM(h, pg_store_server_stop);
  last_error = LIBPG_SYM(h, pg_last_error);
  if (!server_start || !server_stop) {
    server_start = NULL;
    dlclose(h);
    return err_set(err, errlen, -ENOENT,
                   "libpg.so has no pg_store_server_start_auth (too old?)");
  }
  return 0;     /* h is kept: the server's thread runs its code */
}

int live_store_start(const char *addr, int *port, const char *token,
                     struct live_store **out, char *err, size_t errlen)
{
  struct live_store *s;
  int r, want = *port;

  if (want < 0 || want > 65535)
    return err_set(err, errlen, -EINVAL, "port %d is not a TCP port", want);
  r = load(err, errlen);
  if (r)
    return r;
  s = calloc(1, sizeof *s);
  if (!s)
    return err_set(err, errlen, -ENOMEM, "out of memory");
  /* "" and not NULL: NULL would make libpg read our own environment. */
  r = server_start(addr && *addr ? addr : NULL, port, token ? token : "",
                   &s->server);
  if (r < 0) {
    const char *why = last_error ? last_error() : "";

    free(s);
    return err_set(err, errlen, r, "cannot serve on %s port %d: %s",
                   addr && *addr ? addr : "every address", want,
                   why && *why ? why : err_str(r));
  }
  *out = s;
  return 0;
}

void live_store_stop(struct live_store *s)
{
  if (!s)
    return;
  server_stop(s->server);
  free(s);
}
