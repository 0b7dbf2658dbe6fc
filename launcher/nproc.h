/* nproc.h -- resolves --nproc_per_node: an integer, cpu, gpu or auto. */
#ifndef CDRUN_NPROC_H
#define CDRUN_NPROC_H

#include <stddef.h>

/* Number of CUDA devices visible to this process (CUDA_VISIBLE_DEVICES
 * applies), found through the driver library loaded at run time, so cdrun
 * has no link-time dependency on CUDA.  Returns the count (>= 0), or a
 * negative errno with the reason in err when the driver is missing or
 * fails. */
int nproc_cuda_devices(char *err, size_t errlen);

/* Resolves spec ("4", "cpu", "gpu", "auto") to a worker count >= 1.  Returns
 * the count, or -EINVAL / -ENODEV with a one-line reason in err. */
int nproc_resolve(const char *spec, char *err, size_t errlen);

#endif
