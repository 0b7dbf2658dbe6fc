/* slurm_env.h -- what cdrun learns from Slurm's environment when it runs
 * as one srun task per node: the node count, this node's rank, a job id,
 * the rendezvous endpoint (first host of the step, an agreed port) and
 * the GPUs Slurm gave this node.  They become defaults below the command
 * line and PET_* (see "RUNNING UNDER SLURM" in cdrun(1)). */
#ifndef CDRUN_SLURM_ENV_H
#define CDRUN_SLURM_ENV_H

#include <stdbool.h>
#include <stddef.h>

#include "hostlist.h"

/* The agreed rendezvous port lies in [SLURM_PORT_BASE, +SLURM_PORT_SPAN):
 * below Linux's ephemeral range, so no outgoing connection holds it. */
#define SLURM_PORT_BASE 20000
#define SLURM_PORT_SPAN 12000

#define SLURM_ENV_MAX_PET 5

struct slurm_env {
  bool active;                  /* a Slurm step: the values below are set */
  int nnodes;
  const char *nnodes_var;       /* the variable it came from */
  int node_rank;                /* SLURM_NODEID */
  char rdzv_id[64];             /* "<job id>.<step id>" */
  char first_host[HOSTLIST_MAX_NAME + 1];
  const char *nodelist_var;
  int port;
  bool port_from_env;           /* CDRUN_SLURM_PORT */
  int gpus_on_node;             /* SLURM_GPUS_ON_NODE, 0 when unset */
  /* The PET_* defaults derived: "PET_NAME=value", with their source. */
  char pet[SLURM_ENV_MAX_PET][HOSTLIST_MAX_NAME + 64];
  const char *pet_source[SLURM_ENV_MAX_PET];
  int npet;
};

/* Reads env ("NAME=value" array).  Not under a Slurm step (no SLURM_JOB_ID,
 * SLURM_STEP_ID, SLURM_NODEID and node list), or CDRUN_SLURM=0: returns 0
 * with s->active false.  Inconsistent or malformed values (a bad hostlist,
 * several tasks per node) are -EINVAL with a message in err. */
int slurm_env_derive(char *const *env, struct slurm_env *s, char *err,
                     size_t errlen);

/* env plus those of s's PET_* defaults that env lacks: a heap array of
 * borrowed strings (free the array only), or NULL when out of memory. */
char **slurm_env_augment(char *const *env, const struct slurm_env *s);

/* For a PET_ variable name: the Slurm variables it was derived from when
 * s supplied it (env lacked it), else NULL. */
const char *slurm_env_source(const struct slurm_env *s, char *const *env,
                             const char *pet_name);

/* The port every node of a step agrees on without talking: a hash of the
 * job and step ids into the range above. */
int slurm_env_port(const char *job_id, const char *step_id);

#endif
