/* launch_env.c -- RANK, WORLD_SIZE, ... from srun's or mpirun's
 * environment (see launch_env.h). */
#include "launch_env.h"
#include "num.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env(const char *name)
{
  const char *v = getenv(name);

  return v && *v ? v : NULL;
}

int pg__hostlist_first(const char *list, char *out, size_t len)
{
  const char *p = list;
  size_t n = 0;

  while (*p == ' ' || *p == ',')
    p++;
  while (*p && *p != ',' && *p != ' ') {
    if (*p == ']')
      return -EINVAL;
    if (*p != '[') {
      if (n + 1 >= len)
        return -EINVAL;
      out[n++] = *p++;
      continue;
    }
    /* "[07-09,11]": the first number, then skip to the ']'. */
    p++;
    if (*p < '0' || *p > '9')
      return -EINVAL;
    while (*p >= '0' && *p <= '9') {
      if (n + 1 >= len)
        return -EINVAL;
      out[n++] = *p++;
    }
    while (*p && *p != ']' && *p != '[')
      p++;
    if (*p != ']')
      return -EINVAL;
    p++;
  }
  if (n == 0)
    return -EINVAL;
  out[n] = '\0';
  return 0;
}

int pg__agreed_port(const char *id)
{
  unsigned long h = 2166136261u;        /* FNV-1a */

  for (; *id; id++) {
    h ^= (unsigned char)*id;
    h = (h * 16777619u) & 0xffffffffu;
  }
  return 20000 + (int)(h % 12000);
}

/* Slurm's "2(x3),1": the task count of node `node`, or -1. */
static int tasks_on_node(const char *spec, int node)
{
  const char *p = spec;
  size_t digits;
  long count, reps;

  while (*p) {
    digits = strspn(p, "0123456789");
    if (num_parse_long_n(p, digits, 0, INT_MAX, &count))
      return -1;
    p += digits;
    reps = 1;
    if (strncmp(p, "(x", 2) == 0) {
      digits = strspn(p + 2, "0123456789");
      if (num_parse_long_n(p + 2, digits, 1, INT_MAX, &reps) ||
          p[2 + digits] != ')')
        return -1;
      p += 2 + digits + 1;
    }
    if (node < reps)
      return (int)count;
    node -= (int)reps;
    if (*p == ',')
      p++;
    else if (*p)
      return -1;
  }
  return -1;
}

static const char *from_slurm(const char *name, char *buf, size_t len)
{
  const char *job = env("SLURM_JOB_ID"), *step = env("SLURM_STEP_ID");
  const char *v, *list;
  char id[128];
  long node;
  int n;

  if (!env("SLURM_PROCID") || !job || !step)
    return NULL;
  if (strcmp(name, "RANK") == 0)
    return env("SLURM_PROCID");
  if (strcmp(name, "WORLD_SIZE") == 0)
    return (v = env("SLURM_STEP_NUM_TASKS")) ? v : env("SLURM_NTASKS");
  if (strcmp(name, "LOCAL_RANK") == 0)
    return env("SLURM_LOCALID");
  if (strcmp(name, "LOCAL_WORLD_SIZE") == 0) {
    v = env("SLURM_STEP_TASKS_PER_NODE");
    if (!v)
      v = env("SLURM_TASKS_PER_NODE");
    if (!v || !env("SLURM_NODEID") ||
        num_parse_long(env("SLURM_NODEID"), 0, INT_MAX, &node))
      return NULL;
    n = tasks_on_node(v, (int)node);
    if (n < 1)
      return NULL;
    snprintf(buf, len, "%d", n);
    return buf;
  }
  if (strcmp(name, "MASTER_ADDR") == 0) {
    list = env("SLURM_STEP_NODELIST");
    if (!list)
      list = env("SLURM_JOB_NODELIST");
    if (!list || pg__hostlist_first(list, buf, len) != 0)
      return NULL;
    return buf;
  }
  if (strcmp(name, "MASTER_PORT") == 0) {
    snprintf(id, sizeof id, "libpg.%s.%s", job, step);
    snprintf(buf, len, "%d", pg__agreed_port(id));
    return buf;
  }
  return NULL;
}

static const char *from_ompi(const char *name, char *buf, size_t len)
{
  const char *size = env("OMPI_COMM_WORLD_SIZE");
  const char *lsize = env("OMPI_COMM_WORLD_LOCAL_SIZE");
  const char *job;
  char id[128];

  if (!env("OMPI_COMM_WORLD_RANK") || !size)
    return NULL;
  if (strcmp(name, "RANK") == 0)
    return env("OMPI_COMM_WORLD_RANK");
  if (strcmp(name, "WORLD_SIZE") == 0)
    return size;
  if (strcmp(name, "LOCAL_RANK") == 0)
    return env("OMPI_COMM_WORLD_LOCAL_RANK");
  if (strcmp(name, "LOCAL_WORLD_SIZE") == 0)
    return lsize;
  if (strcmp(name, "MASTER_ADDR") == 0) {
    /* Open MPI does not say where rank 0 runs; when every rank is on this
     * host it is here.  Across hosts: mpirun -x MASTER_ADDR=<rank 0's>. */
    if (lsize && strcmp(lsize, size) == 0) {
      snprintf(buf, len, "127.0.0.1");
      return buf;
    }
    return NULL;
  }
  if (strcmp(name, "MASTER_PORT") == 0) {
    job = env("OMPI_MCA_ess_base_jobid");
    if (!job)
      job = env("PMIX_NAMESPACE");
    if (!job)
      return NULL;
    snprintf(id, sizeof id, "libpg.ompi.%s", job);
    snprintf(buf, len, "%d", pg__agreed_port(id));
    return buf;
  }
  return NULL;
}

const char *pg__launch_env(const char *name, char *buf, size_t len)
{
  const char *v = env(name);

  if (v)
    return v;
  if (env("RANK") || env("WORLD_SIZE"))
    return NULL;
  v = from_slurm(name, buf, len);
  if (!v)
    v = from_ompi(name, buf, len);
  return v;
}
