/* libcurl_dl.h -- libcurl, loaded with dlopen when the etcd back end starts.
 *
 * Linking libcurl into cdrun would make every launch load its ~30 shared
 * libraries (TLS, HTTP/2, LDAP, SSH...), which more than doubles a
 * launch's time and peak RSS (scripts/bench/launch shows it).  So cdrun
 * does not link it: the few libcurl functions it calls go through a table filled by
 * libcurl_dl_load(), and the names below point into that table.  Include this
 * header instead of <curl/curl.h>. */
#ifndef CDRUN_LIBCURL_DL_H
#define CDRUN_LIBCURL_DL_H

#include <stddef.h>

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>

struct libcurl_dl {
  CURLcode (*global_init)(long flags);
  void (*global_cleanup)(void);
  CURL *(*easy_init)(void);
  void (*easy_cleanup)(CURL *e);
  CURLcode (*easy_setopt)(CURL *e, CURLoption o, ...);
  CURLcode (*easy_getinfo)(CURL *e, CURLINFO i, ...);
  const char *(*easy_strerror)(CURLcode c);
  struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
  void (*slist_free_all)(struct curl_slist *l);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_cleanup)(CURLM *m);
  CURLMcode (*multi_setopt)(CURLM *m, CURLMoption o, ...);
  CURLMcode (*multi_socket_action)(CURLM *m, curl_socket_t s, int ev,
                                   int *running);
  CURLMsg *(*multi_info_read)(CURLM *m, int *left);
  CURLMcode (*multi_add_handle)(CURLM *m, CURL *e);
  CURLMcode (*multi_remove_handle)(CURLM *m, CURL *e);
  CURLMcode (*multi_assign)(CURLM *m, curl_socket_t s, void *p);
};

/* The table; valid after libcurl_dl_load() returned 0. */
extern struct libcurl_dl libcurl_dl;

/* Loads libcurl.so.4 once.  Returns 0, or -ENOENT with the reason in err. */
int libcurl_dl_load(char *err, size_t errlen);

/* curl.h defines these three as checking macros. */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init libcurl_dl.global_init
#define curl_global_cleanup libcurl_dl.global_cleanup
#define curl_easy_init libcurl_dl.easy_init
#define curl_easy_cleanup libcurl_dl.easy_cleanup
#define curl_easy_setopt libcurl_dl.easy_setopt
#define curl_easy_getinfo libcurl_dl.easy_getinfo
#define curl_easy_strerror libcurl_dl.easy_strerror
#define curl_slist_append libcurl_dl.slist_append
#define curl_slist_free_all libcurl_dl.slist_free_all
#define curl_multi_init libcurl_dl.multi_init
#define curl_multi_cleanup libcurl_dl.multi_cleanup
#define curl_multi_setopt libcurl_dl.multi_setopt
#define curl_multi_socket_action libcurl_dl.multi_socket_action
#define curl_multi_info_read libcurl_dl.multi_info_read
#define curl_multi_add_handle libcurl_dl.multi_add_handle
#define curl_multi_remove_handle libcurl_dl.multi_remove_handle
#define curl_multi_assign libcurl_dl.multi_assign

#endif
