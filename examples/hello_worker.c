/* hello_worker.c -- the smallest cdrun worker: prints what the launcher
 * gave it (ranks, sizes, master address, restart count) and exits 0.
 *
 *   cdrun --standalone --nproc_per_node=4 bin/hello_worker */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *env_or(const char *name, const char *fallback)
{
  const char *v = getenv(name);

  return v ? v : fallback;
}

int main(int argc, char **argv)
{
  char host[256] = "?";
  int i;

  gethostname(host, sizeof host - 1);
  printf("hello from rank %s of %s (local rank %s of %s, node %s of %s) "
         "on %s, pid %d; master %s:%s; run %s, restart %s of %s",
         env_or("RANK", "?"), env_or("WORLD_SIZE", "?"),
         env_or("LOCAL_RANK", "?"), env_or("LOCAL_WORLD_SIZE", "?"),
         env_or("GROUP_RANK", "?"), env_or("GROUP_WORLD_SIZE", "?"), host,
         (int)getpid(), env_or("MASTER_ADDR", "?"),
         env_or("MASTER_PORT", "?"), env_or("TORCHELASTIC_RUN_ID", "?"),
         env_or("TORCHELASTIC_RESTART_COUNT", "?"),
         env_or("TORCHELASTIC_MAX_RESTARTS", "?"));
  for (i = 1; i < argc; i++)
    printf("%s %s", i == 1 ? "; args:" : "", argv[i]);
  putchar('\n');
  return 0;
}
