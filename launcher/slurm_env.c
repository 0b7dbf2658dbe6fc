/* slurm_env.c -- deriving cdrun's rendezvous settings from srun's
 * environment (see slurm_env.h). */
#include "slurm_env.h"
#include "err.h"
#include "num.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *get(char *const *env, const char *name)
{
  size_t n = strlen(name);

  for (; env && *env; env++)
    if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
      return *env + n + 1;
  return NULL;
}

/* The first of names that is set and not empty; its name in *which. */
static const char *first_of(char *const *env, const char *const *names,
                            const char **which)
{
  const char *v;

  for (; *names; names++) {
    v = get(env, *names);
    if (v && *v) {
      *which = *names;
      return v;
    }
  }
  return NULL;
}

/* num.h's rule: the whole string, an integer in [lo, hi]. */
static bool parse_int(const char *s, long lo, long hi, int *out)
{
  long v;

  if (!s || num_parse_long(s, lo, hi, &v))
    return false;
  *out = (int)v;
  return true;
}

int slurm_env_port(const char *job_id, const char *step_id)
{
  /* FNV-1a over "job.step". */
  unsigned long h = 2166136261u;
  const char *parts[] = { job_id, ".", step_id };

  for (size_t i = 0; i < 3; i++)
    for (const char *p = parts[i]; *p; p++) {
      h ^= (unsigned char)*p;
      h = (h * 16777619u) & 0xffffffffu;
    }
  return SLURM_PORT_BASE + (int)(h % SLURM_PORT_SPAN);
}

static void add_pet(struct slurm_env *s, const char *name, const char *value,
                    const char *source)
{
  if (s->npet >= SLURM_ENV_MAX_PET)
    return;
  snprintf(s->pet[s->npet], sizeof s->pet[0], "%s=%s", name, value);
  s->pet_source[s->npet] = source;
  s->npet++;
}

int slurm_env_derive(char *const *env, struct slurm_env *s, char *err,
                     size_t errlen)
{
  static const char *const nnodes_vars[] = {
    "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", NULL,
  };
  static const char *const list_vars[] = {
    "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", NULL,
  };
  static const char *const ntasks_vars[] = {
    "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", NULL,
  };
  const char *job, *step, *nodeid, *list, *nn, *v, *which;
  char buf[32], herr[256];
  int ntasks;

  memset(s, 0, sizeof *s);
  v = get(env, "CDRUN_SLURM");
  if (v && strcmp(v, "0") == 0)
    return 0;
  job = get(env, "SLURM_JOB_ID");
  if (!job || !*job)
    job = get(env, "SLURM_JOBID");
  step = get(env, "SLURM_STEP_ID");
  if (!step || !*step)
    step = get(env, "SLURM_STEPID");
  nodeid = get(env, "SLURM_NODEID");
  list = first_of(env, list_vars, &s->nodelist_var);
  nn = first_of(env, nnodes_vars, &s->nnodes_var);
  /* A batch script or salloc shell is no step: it has no SLURM_STEP_ID
   * (or SLURM_NODEID), and its nodes are not all running cdrun. */
  if (!job || !*job || !step || !*step || !nodeid || !list || !nn)
    return 0;

  if (!parse_int(nn, 1, 1 << 20, &s->nnodes))
    return err_invalid(err, errlen, "Slurm: %s: invalid value '%s' "
                       "(expected a node count)", s->nnodes_var, nn);
  if (!parse_int(nodeid, 0, s->nnodes - 1, &s->node_rank))
    return err_invalid(err, errlen, "Slurm: SLURM_NODEID: invalid value '%s' "
                       "(expected 0..%d for %d nodes)", nodeid, s->nnodes - 1,
                       s->nnodes);
  v = first_of(env, ntasks_vars, &which);
  if (v && parse_int(v, 1, 1 << 30, &ntasks) && ntasks > s->nnodes)
    return err_invalid(err, errlen, "Slurm: %s=%d tasks on %d nodes: "
                       "cdrun starts the workers of a node itself and runs "
                       "once per node (srun --ntasks-per-node=1); "
                       "CDRUN_SLURM=0 ignores Slurm's environment", which,
                       ntasks, s->nnodes);
  if (hostlist_first(list, s->first_host, sizeof s->first_host, herr,
                     sizeof herr))
    return err_invalid(err, errlen, "Slurm: %s: %s", s->nodelist_var, herr);
  if (snprintf(s->rdzv_id, sizeof s->rdzv_id, "%s.%s", job, step) >=
      (int)sizeof s->rdzv_id)
    return err_invalid(err, errlen, "Slurm: SLURM_JOB_ID '%s' is too long",
                       job);

  v = get(env, "CDRUN_SLURM_PORT");
  if (v && *v) {
    if (!parse_int(v, 1, 65535, &s->port))
      return err_invalid(err, errlen, "CDRUN_SLURM_PORT: invalid value '%s' "
                         "(expected a port number 1..65535)", v);
    s->port_from_env = true;
  } else {
    s->port = slurm_env_port(job, step);
  }
  v = get(env, "SLURM_GPUS_ON_NODE");
  if (v && *v && !parse_int(v, 0, 1 << 16, &s->gpus_on_node))
    return err_invalid(err, errlen, "Slurm: SLURM_GPUS_ON_NODE: invalid value "
                       "'%s'", v);

  snprintf(buf, sizeof buf, "%d", s->nnodes);
  add_pet(s, "PET_NNODES", buf, s->nnodes_var);
  snprintf(buf, sizeof buf, "%d", s->node_rank);
  add_pet(s, "PET_NODE_RANK", buf, "SLURM_NODEID");
  add_pet(s, "PET_RDZV_BACKEND", "c10d", "SLURM_JOB_ID");
  add_pet(s, "PET_RDZV_ID", s->rdzv_id, "SLURM_JOB_ID.SLURM_STEP_ID");
  {
    char ep[HOSTLIST_MAX_NAME + 16];
    bool v6 = strchr(s->first_host, ':') != NULL;

    snprintf(ep, sizeof ep, "%s%s%s:%d", v6 ? "[" : "", s->first_host,
             v6 ? "]" : "", s->port);
    add_pet(s, "PET_RDZV_ENDPOINT", ep, s->port_from_env
            ? "first host of the node list, CDRUN_SLURM_PORT"
            : "first host of the node list, port hashed from the job "
              "and step ids");
  }
  s->active = true;
  return 0;
}

char **slurm_env_augment(char *const *env, const struct slurm_env *s)
{
  size_t n = 0, k = 0;
  char **out;
  int i;

  while (env && env[n])
    n++;
  out = calloc(n + SLURM_ENV_MAX_PET + 1, sizeof *out);
  if (!out)
    return NULL;
  for (k = 0; k < n; k++)
    out[k] = env[k];
  for (i = 0; i < s->npet; i++) {
    char name[64];
    size_t len = strcspn(s->pet[i], "=");

    snprintf(name, sizeof name, "%.*s", (int)len, s->pet[i]);
    if (!get(env, name))
      out[k++] = (char *)s->pet[i];
  }
  out[k] = NULL;
  return out;
}

const char *slurm_env_source(const struct slurm_env *s, char *const *env,
                             const char *pet_name)
{
  size_t len = strlen(pet_name);
  int i;

  if (!s->active || get(env, pet_name))
    return NULL;
  for (i = 0; i < s->npet; i++)
    if (strncmp(s->pet[i], pet_name, len) == 0 && s->pet[i][len] == '=')
      return s->pet_source[i];
  return NULL;
}
