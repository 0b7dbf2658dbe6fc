/* ar_floor.c -- the physical reference for scripts/bench/allreduce's
 * 4 KiB line: two processes (fork) each write 4 KiB of f32 into shared
 * memory, publish a counter, wait for the other's, and add the other's
 * 4 KiB to their own: an all-reduce of 2 ranks with nothing else, one
 * flag per op (two buffers, alternated, so nobody waits for a reader).
 * Its time per op is what moving 4 KiB between two cores costs on this
 * machine; a library can beat it only by moving less (libpg's two-phase
 * path reads half).  The mean over >= ~0.25 s after warm-up, the slower
 * process's.  Prints
 *   floor bytes=4096 us=... */
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ar_common.h"

#define FLOOR_FLOATS 1024       /* 4 KiB */
#define FLOOR_WARM 20000L

struct floor_seg {
  _Alignas(128) atomic_ulong seq[2][16];      /* one line pair each */
  _Alignas(128) float buf[2][2][FLOOR_FLOATS];
  _Alignas(128) double us[2];
};

/* Op k of process me: publish, wait for the peer's op k (a peer that
 * died ends the wait: checked every 2^20 spins), add. */
static void floor_op(struct floor_seg *s, int me, unsigned long k,
                     const float *x, float *y, pid_t peer_pid)
{
  const float *peer = s->buf[!me][k & 1];
  unsigned long spins = 0;
  int i;

  memcpy(s->buf[me][k & 1], x, sizeof s->buf[me][k & 1]);
  atomic_store_explicit(&s->seq[me][0], k + 1, memory_order_release);
  while (atomic_load_explicit(&s->seq[!me][0], memory_order_acquire) < k + 1)
    if (++spins % (1UL << 20) == 0 && kill(peer_pid, 0) != 0)
      _exit(1);
  for (i = 0; i < FLOOR_FLOATS; i++)
    y[i] = x[i] + peer[i];
}

static void floor_run(struct floor_seg *s, int me, long iters,
                      pid_t peer_pid)
{
  float x[FLOOR_FLOATS], y[FLOOR_FLOATS];
  unsigned long k;
  double t0 = 0;
  int i;

  for (i = 0; i < FLOOR_FLOATS; i++)
    x[i] = (float)i;
  for (k = 0; k < (unsigned long)(FLOOR_WARM + iters); k++) {
    if (k == FLOOR_WARM)
      t0 = ar_now();
    floor_op(s, me, k, x, y, peer_pid);
  }
  s->us[me] = (ar_now() - t0) / (double)iters * 1e6;
  if (y[1] != 2.0f)
    s->us[me] = -1;
}

int main(void)
{
  struct floor_seg *s;
  long iters;
  pid_t pid, parent = getpid();
  int status;

  s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s == MAP_FAILED) {
    perror("ar_floor: mmap");
    return 1;
  }
  /* ~1-2 us per op: AR_TARGET_S worth, whatever this machine does. */
  iters = (long)ar_iters(2e-6, AR_TARGET_S);
  pid = fork();
  if (pid < 0) {
    perror("ar_floor: fork");
    return 1;
  }
  if (pid == 0)
    prctl(PR_SET_PDEATHSIG, SIGKILL);
  floor_run(s, pid == 0, iters, pid == 0 ? parent : pid);
  if (pid == 0)
    _exit(0);
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0 || s->us[0] < 0 || s->us[1] < 0) {
    fprintf(stderr, "ar_floor: the other process failed\n");
    return 1;
  }
  printf("floor bytes=%d us=%.3f\n", FLOOR_FLOATS * 4,
         s->us[0] > s->us[1] ? s->us[0] : s->us[1]);
  return 0;
}
