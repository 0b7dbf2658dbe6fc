/* nproc.c -- counting CPUs and CUDA devices for --nproc_per_node. */
#include "nproc.h"
#include "err.h"
#include "num.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The two driver API entry points we need, declared by hand so that no
 * CUDA header is required either. */
typedef int (*cu_init_fn)(unsigned int flags);
typedef int (*cu_device_get_count_fn)(int *count);

int nproc_cuda_devices(char *err, size_t errlen)
{
  cu_init_fn cu_init;
  cu_device_get_count_fn cu_count;
  void *lib;
  int count = 0, rc;

  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    return err_set(err, errlen, -ENODEV,
                   "no CUDA driver (libcuda.so.1 not found)");
  }
  cu_init = (cu_init_fn)dlsym(lib, "cuInit");
  cu_count = (cu_device_get_count_fn)dlsym(lib, "cuDeviceGetCount");
  if (!cu_init || !cu_count) {
    dlclose(lib);
    return err_set(err, errlen, -ENODEV,
                   "libcuda.so.1 lacks cuInit/cuDeviceGetCount");
  }
  rc = cu_init(0);
  if (rc == 0)
    rc = cu_count(&count);
  dlclose(lib);
  /* CUDA_ERROR_NO_DEVICE (100) is "zero devices", not a failure. */
  if (rc == 100)
    return 0;
  if (rc != 0) {
    return err_set(err, errlen, -ENODEV,
                   "CUDA driver error %d while counting devices", rc);
  }
  return count;
}

int nproc_resolve(const char *spec, char *err, size_t errlen)
{
  char why[200];
  long n;
  int gpus;

  if (strcmp(spec, "cpu") == 0) {
    n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
  }
  if (strcmp(spec, "gpu") == 0 || strcmp(spec, "auto") == 0) {
    gpus = nproc_cuda_devices(why, sizeof why);
    if (gpus > 0)
      return gpus;
    if (strcmp(spec, "auto") == 0) {
      n = sysconf(_SC_NPROCESSORS_ONLN);
      return n > 0 ? (int)n : 1;
    }
    return err_set(err, errlen, -ENODEV,
                   "--nproc_per_node=gpu: no CUDA device found (%s)",
                   gpus == 0 ? "the driver reports 0 devices" : why);
  }
  if (num_parse_long(spec, 1, NUM_NPROC_MAX, &n)) {
    return err_set(err, errlen, -EINVAL,
                   "--nproc_per_node: invalid value '%s' (expected an "
                   "integer 1..%d, cpu, gpu or auto)", spec, NUM_NPROC_MAX);
  }
  return (int)n;
}
