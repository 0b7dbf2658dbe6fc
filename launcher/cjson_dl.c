/* cjson_dl.c -- cJSON for bin/cdrun, loaded with dlopen at its first use.
 *
 * Note [cJSON on demand]: a launch of workers on this node (--standalone,
 * the static back end, a worker that succeeds) calls no cJSON function:
 * JSON is for rdzvd's wire protocol, etcd, error files and the file
 * timer.  Linked, libcjson.so.1 and the libm.so.6 it needs were loaded
 * and relocated at every start, and their touched pages were a ninth of
 * cdrun's peak RSS (scripts/bench/launch).  So bin/cdrun does not link
 * libcjson (nor libm: the few functions of its own come from libm.a):
 * this file defines the cJSON functions that cdrun's code calls, each
 * resolving the real one on its first call.  Only bin/cdrun links it
 * (rdzvd, libpg and the tests link libcjson itself); a cJSON function
 * cdrun starts to use needs its line in CJSON_FNS, or bin/cdrun does not
 * link.
 *
 * If libcjson.so.1 cannot be loaded (it is a dependency of the package,
 * so only a broken installation), cdrun says so once and every call
 * fails as cJSON does when out of memory: NULL, false or 0, which every
 * caller handles already. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include <cJSON.h>

/* X(return type, name, parameters, arguments, value on failure) */
#define CJSON_FNS(X)                                                        \
  X(cJSON *, cJSON_AddArrayToObject, (cJSON *const o, const char *const n),  \
    (o, n), NULL)                                                            \
  X(cJSON *, cJSON_AddBoolToObject,                                          \
    (cJSON *const o, const char *const n, const cJSON_bool b), (o, n, b),    \
    NULL)                                                                    \
  X(cJSON_bool, cJSON_AddItemToArray, (cJSON *a, cJSON *i), (a, i), 0)       \
  X(cJSON_bool, cJSON_AddItemToObject, (cJSON *o, const char *n, cJSON *i),  \
    (o, n, i), 0)                                                            \
  X(cJSON *, cJSON_AddNumberToObject,                                        \
    (cJSON *const o, const char *const n, const double v), (o, n, v), NULL)  \
  X(cJSON *, cJSON_AddObjectToObject, (cJSON *const o, const char *const n), \
    (o, n), NULL)                                                            \
  X(cJSON *, cJSON_AddStringToObject,                                        \
    (cJSON *const o, const char *const n, const char *const s), (o, n, s),   \
    NULL)                                                                    \
  X(cJSON *, cJSON_AddTrueToObject, (cJSON *const o, const char *const n),   \
    (o, n), NULL)                                                            \
  X(cJSON *, cJSON_CreateObject, (void), (), NULL)                           \
  X(cJSON *, cJSON_CreateRaw, (const char *r), (r), NULL)                    \
  X(cJSON *, cJSON_GetArrayItem, (const cJSON *a, int i), (a, i), NULL)      \
  X(int, cJSON_GetArraySize, (const cJSON *a), (a), 0)                       \
  X(cJSON *, cJSON_GetObjectItemCaseSensitive,                               \
    (const cJSON *const o, const char *const n), (o, n), NULL)               \
  X(cJSON_bool, cJSON_HasObjectItem, (const cJSON *o, const char *n),        \
    (o, n), 0)                                                               \
  X(cJSON_bool, cJSON_IsArray, (const cJSON *const i), (i), 0)               \
  X(cJSON_bool, cJSON_IsBool, (const cJSON *const i), (i), 0)                \
  X(cJSON_bool, cJSON_IsNull, (const cJSON *const i), (i), 0)                \
  X(cJSON_bool, cJSON_IsNumber, (const cJSON *const i), (i), 0)              \
  X(cJSON_bool, cJSON_IsObject, (const cJSON *const i), (i), 0)              \
  X(cJSON_bool, cJSON_IsString, (const cJSON *const i), (i), 0)              \
  X(cJSON_bool, cJSON_IsTrue, (const cJSON *const i), (i), 0)                \
  X(cJSON *, cJSON_ParseWithLength, (const char *v, size_t l), (v, l), NULL) \
  X(cJSON *, cJSON_ParseWithLengthOpts,                                      \
    (const char *v, size_t l, const char **e, cJSON_bool z), (v, l, e, z),   \
    NULL)                                                                    \
  X(char *, cJSON_PrintUnformatted, (const cJSON *i), (i), NULL)

/* The two that return nothing. */
#define CJSON_VOID_FNS(X)                                                   \
  X(cJSON_Delete, (cJSON *i), (i))                                           \
  X(cJSON_free, (void *p), (p))

static void *lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void lib_open(void)
{
  lib = dlopen("libcjson.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    fprintf(stderr, "cdrun: cannot load libcjson.so.1 (package libcjson1): "
            "%s\n", dlerror());
}

/* The real function called name, or NULL; *slot caches it. */
static void *resolve(void **slot, const char *name)
{
  void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

  if (fn)
    return fn;
  pthread_once(&lib_once, lib_open);
  fn = lib ? dlsym(lib, name) : NULL;
  __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
  return fn;
}

#define DEFINE_FN(type, name, params, args, fail)                           \
  type name params                                                           \
  {                                                                          \
    static void *slot;                                                       \
    type(*fn) params = (type(*) params)resolve(&slot, #name);                \
                                                                             \
    return fn ? fn args : fail;                                              \
  }
CJSON_FNS(DEFINE_FN)

#define DEFINE_VOID_FN(name, params, args)                                  \
  void name params                                                           \
  {                                                                          \
    static void *slot;                                                       \
    void(*fn) params = (void(*) params)resolve(&slot, #name);                \
                                                                             \
    if (fn)                                                                  \
      fn args;                                                               \
  }
CJSON_VOID_FNS(DEFINE_VOID_FN)
