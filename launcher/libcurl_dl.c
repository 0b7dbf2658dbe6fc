/* libcurl_dl.c -- libcurl's entry points, resolved at run time
 * (libcurl_dl.h). */
#include "libcurl_dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "err.h"

struct libcurl_dl libcurl_dl;

static void *lib;

int libcurl_dl_load(char *err, size_t errlen)
{
  static const struct { const char *name; size_t off; } fns[] = {
#define FN(f, n) { "curl_" n, offsetof(struct libcurl_dl, f) }
    FN(global_init, "global_init"), FN(global_cleanup, "global_cleanup"),
    FN(easy_init, "easy_init"), FN(easy_cleanup, "easy_cleanup"),
    FN(easy_setopt, "easy_setopt"), FN(easy_getinfo, "easy_getinfo"),
    FN(easy_strerror, "easy_strerror"), FN(slist_append, "slist_append"),
    FN(slist_free_all, "slist_free_all"), FN(multi_init, "multi_init"),
    FN(multi_cleanup, "multi_cleanup"), FN(multi_setopt, "multi_setopt"),
    FN(multi_socket_action, "multi_socket_action"),
    FN(multi_info_read, "multi_info_read"),
    FN(multi_add_handle, "multi_add_handle"),
    FN(multi_remove_handle, "multi_remove_handle"),
    FN(multi_assign, "multi_assign"),
#undef FN
  };
  struct libcurl_dl t;
  size_t i;
  void *h, *sym;

  if (lib)
    return 0;
  h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!h)
    return err_set(err, errlen, -ENOENT,
                   "the etcd back end needs libcurl (libcurl4): %s",
                   dlerror());
  memset(&t, 0, sizeof t);
  for (i = 0; i < sizeof fns / sizeof fns[0]; i++) {
    sym = dlsym(h, fns[i].name);
    if (!sym) {
      dlclose(h);
      return err_set(err, errlen, -ENOENT,
                     "libcurl.so.4 has no %s (too old?)", fns[i].name);
    }
    memcpy((char *)&t + fns[i].off, &sym, sizeof sym);
  }
  libcurl_dl = t;
  lib = h;    /* kept for the life of the process */
  return 0;
}
