/* workerenv.c -- builds a worker's environment block: torchrun's
 * variables and the worker contract's CDRUN_* ones (worker_contract.h). */
#include "workerenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker_contract.h"

/* The names the agent owns; an inherited value of any of these is
 * replaced.  The three "inherit if set" ones are handled separately. */
static const char *const owned[] = {
  "LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
  "LOCAL_WORLD_SIZE", "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
  "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
  "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
  "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "NODE_RANK",
  WORKER_ENV_RECOVERY, WORKER_ENV_LIVE_OPT_IN, WORKER_ENV_LIVE_STORE,
  WORKER_ENV_LIVE_ROUND_FILE, WORKER_ENV_WORKER_RESTARTS,
  NULL,
};

static bool name_is(const char *entry, const char *name)
{
  size_t n = strlen(name);

  return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

const char *workerenv_get(char *const *env, const char *name)
{
  size_t i;

  for (i = 0; env && env[i]; i++)
    if (name_is(env[i], name))
      return env[i] + strlen(name) + 1;
  return NULL;
}

static bool is_owned(const char *entry, const struct worker_env *w)
{
  size_t i;

  for (i = 0; owned[i]; i++)
    if (name_is(entry, owned[i]))
      return true;
  /* These are ours only when we set them. */
  return (w->virtual_local_rank && name_is(entry, "CUDA_VISIBLE_DEVICES")) ||
         (w->timer_file && name_is(entry, "TORCHELASTIC_TIMER_FILE")) ||
         (w->heartbeat_file && name_is(entry, WORKER_ENV_HEARTBEAT_FILE)) ||
         (w->job_token && name_is(entry, WORKER_ENV_JOB_TOKEN));
}

/* The local_rank-th entry of a CUDA_VISIBLE_DEVICES list ("4,5,GPU-ab"),
 * or the local rank itself when there is no such entry. */
static void own_device(const char *visible, int local_rank, char *out,
                       size_t outlen)
{
  const char *p = visible;

  for (int i = 0; p && *p; i++) {
    size_t len = strcspn(p, ",");
    const char *e = p + len, *b = p;

    /* torch: devices[local_rank].strip() */
    while (b < e && (*b == ' ' || *b == '\t'))
      b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
      e--;
    if (i == local_rank && e > b && (size_t)(e - b) < outlen) {
      snprintf(out, outlen, "%.*s", (int)(e - b), b);
      return;
    }
    p += len;
    if (*p == ',')
      p++;
  }
  snprintf(out, outlen, "%d", local_rank);
}

/* Appends "name=value" to env[*n]; returns -1 when out of memory. */
static int add(char **env, size_t *n, const char *name, const char *value)
{
  if (asprintf(&env[*n], "%s=%s", name, value) < 0) {
    env[*n] = NULL;
    return -1;
  }
  (*n)++;
  return 0;
}

static int add_int(char **env, size_t *n, const char *name, long value)
{
  char buf[32];

  snprintf(buf, sizeof buf, "%ld", value);
  return add(env, n, name, buf);
}

char **workerenv_build(char *const *base, const struct worker_env *w)
{
  size_t nbase = 0, n = 0, i;
  char **env;
  int bad = 0;

  while (base && base[nbase])
    nbase++;
  env = calloc(nbase + 40, sizeof *env);
  if (!env)
    return NULL;
  for (i = 0; i < nbase; i++) {
    if (is_owned(base[i], w))
      continue;
    env[n] = strdup(base[i]);
    if (!env[n])
      goto fail_free_env;
    n++;
  }
  bad |= add_int(env, &n, "LOCAL_RANK",
                 w->virtual_local_rank ? 0 : w->local_rank);
  bad |= add_int(env, &n, "RANK", w->rank);
  bad |= add_int(env, &n, "GROUP_RANK", w->group_rank);
  /* Not torchrun's, but many applications (PyTorch Lightning) read it. */
  bad |= add_int(env, &n, "NODE_RANK", w->group_rank);
  bad |= add_int(env, &n, "ROLE_RANK", w->role_rank);
  bad |= add(env, &n, "ROLE_NAME", w->role_name);
  bad |= add_int(env, &n, "LOCAL_WORLD_SIZE", w->local_world_size);
  bad |= add_int(env, &n, "WORLD_SIZE", w->world_size);
  bad |= add_int(env, &n, "GROUP_WORLD_SIZE", w->group_world_size);
  bad |= add_int(env, &n, "ROLE_WORLD_SIZE", w->role_world_size);
  bad |= add(env, &n, "MASTER_ADDR", w->master_addr);
  bad |= add_int(env, &n, "MASTER_PORT", w->master_port);
  bad |= add_int(env, &n, "TORCHELASTIC_RESTART_COUNT", w->restart_count);
  bad |= add_int(env, &n, "TORCHELASTIC_MAX_RESTARTS", w->max_restarts);
  bad |= add(env, &n, "TORCHELASTIC_RUN_ID", w->run_id);
  /* Python's str(bool), as torchrun writes it. */
  bad |= add(env, &n, "TORCHELASTIC_USE_AGENT_STORE",
             w->use_agent_store ? "True" : "False");
  bad |= add(env, &n, "TORCHELASTIC_ERROR_FILE",
             w->error_file ? w->error_file : "");
  if (!workerenv_get(base, "TORCH_NCCL_ASYNC_ERROR_HANDLING"))
    bad |= add(env, &n, "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (!workerenv_get(base, "NCCL_ASYNC_ERROR_HANDLING"))
    bad |= add(env, &n, "NCCL_ASYNC_ERROR_HANDLING", "1");
  if (w->default_omp_threads && !workerenv_get(base, "OMP_NUM_THREADS"))
    bad |= add(env, &n, "OMP_NUM_THREADS", "1");
  if (w->virtual_local_rank) {
    char dev[128];

    own_device(workerenv_get(base, "CUDA_VISIBLE_DEVICES"), w->local_rank,
               dev, sizeof dev);
    bad |= add(env, &n, "CUDA_VISIBLE_DEVICES", dev);
  }
  if (w->timer_file)
    bad |= add(env, &n, "TORCHELASTIC_TIMER_FILE", w->timer_file);
  if (w->heartbeat_file)
    bad |= add(env, &n, WORKER_ENV_HEARTBEAT_FILE, w->heartbeat_file);
  /* The job's secret for libpg's store and mesh (jobtoken.h). */
  if (w->job_token)
    bad |= add(env, &n, WORKER_ENV_JOB_TOKEN, w->job_token);
  if (w->live) {
    bad |= add(env, &n, WORKER_ENV_RECOVERY, WORKER_RECOVERY_LIVE);
    bad |= add(env, &n, WORKER_ENV_LIVE_OPT_IN, w->live_opt_in);
    bad |= add(env, &n, WORKER_ENV_LIVE_STORE, w->live_store);
    bad |= add(env, &n, WORKER_ENV_LIVE_ROUND_FILE, w->live_round_file);
    bad |= add_int(env, &n, WORKER_ENV_WORKER_RESTARTS,
                   w->worker_restarts);
  }
  if (bad)
    goto fail_free_env;
  env[n] = NULL;
  return env;

fail_free_env:
  workerenv_free(env);
  return NULL;
}

void workerenv_free(char **env)
{
  size_t i;

  if (!env)
    return;
  for (i = 0; env[i]; i++)
    free(env[i]);
  free(env);
}
