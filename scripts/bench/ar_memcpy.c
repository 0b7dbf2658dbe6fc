/* ar_memcpy.c -- the physical reference for scripts/bench/allreduce: one
 * core's memcpy of 64 MiB between two page-faulted buffers (glibc memcpy,
 * which at this size uses non-temporal stores).  gbps = bytes copied per
 * second / 1e9 (each byte read once and written once), the mean over
 * >= ~0.25 s after 3 warm-up copies.  Prints
 *   memcpy bytes=67108864 gbps=... */
#include "ar_common.h"

int main(void)
{
  size_t bytes = (size_t)64 << 20;
  char *a, *b;
  long i, iters;
  double t0, dt;

  if (posix_memalign((void **)&a, 4096, bytes) != 0 ||
      posix_memalign((void **)&b, 4096, bytes) != 0) {
    fprintf(stderr, "ar_memcpy: out of memory\n");
    return 1;
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  t0 = ar_now();
  for (i = 0; i < 3; i++)
    memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
  iters = (long)ar_iters((ar_now() - t0) / 3, AR_TARGET_S);
  t0 = ar_now();
  for (i = 0; i < iters; i++) {
    memcpy(b, a, bytes);
    __asm__ __volatile__("" : : "r"(b) : "memory");
  }
  dt = (ar_now() - t0) / (double)iters;
  printf("memcpy bytes=%zu gbps=%.2f\n", bytes, (double)bytes / dt / 1e9);
  free(a);
  free(b);
  return 0;
}
