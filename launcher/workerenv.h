/* workerenv.h -- the environment each worker gets: the agent's own, plus
 * torchrun's variables (shared/reference/torchrun.md §1.2) and cdrun's
 * CDRUN_* ones, whose names and meanings are the worker contract's
 * (proto/worker/worker_contract.h). */
#ifndef CDRUN_WORKERENV_H
#define CDRUN_WORKERENV_H

#include <stdbool.h>

/* The per-worker facts.  Strings are borrowed. */
struct worker_env {
  int local_rank;
  int rank;
  int group_rank;
  int role_rank;
  const char *role_name;
  int local_world_size;
  int world_size;
  int group_world_size;
  int role_world_size;
  const char *master_addr;
  int master_port;
  int restart_count;
  int max_restarts;
  const char *run_id;
  bool use_agent_store;
  const char *error_file;     /* "" when there is none */
  bool default_omp_threads;   /* set OMP_NUM_THREADS=1 when it is unset */
  /* --virtual_local_rank: LOCAL_RANK=0 and CUDA_VISIBLE_DEVICES naming
   * only this worker's GPU (the local_rank-th entry of an inherited
   * CUDA_VISIBLE_DEVICES list, else the local rank). */
  bool virtual_local_rank;
  const char *timer_file;     /* TORCHELASTIC_TIMER_FILE, or NULL */
  const char *heartbeat_file; /* CDRUN_HEARTBEAT_FILE, or NULL */
  const char *job_token;      /* CDRUN_JOB_TOKEN (jobtoken.h), or NULL */
  /* Live recovery (man/cdrun.1, LIVE RECOVERY): CDRUN_RECOVERY=live and
   * the handshake's variables when live is set.  The CDRUN_RECOVERY and
   * CDRUN_LIVE_* names are the agent's in either mode: an inherited value
   * (an outer live job's) never reaches a worker of a restart-mode one. */
  bool live;
  const char *live_opt_in;     /* CDRUN_LIVE_OPT_IN: the worker's file */
  const char *live_store;      /* CDRUN_LIVE_STORE: "host:port" */
  const char *live_round_file; /* CDRUN_LIVE_ROUND_FILE: the node's */
  int worker_restarts;         /* CDRUN_WORKER_RESTARTS: this rank's
                                  replacements so far */
};

/* Returns a NULL-terminated heap array of "NAME=value" strings: every entry
 * of base (usually environ) except the names set here, then ours.  Inherited
 * TORCH_NCCL_ASYNC_ERROR_HANDLING / NCCL_ASYNC_ERROR_HANDLING /
 * OMP_NUM_THREADS values win, as in torchrun.  NULL when out of memory. */
char **workerenv_build(char *const *base, const struct worker_env *w);

void workerenv_free(char **env);

/* The value of name in env, or NULL. */
const char *workerenv_get(char *const *env, const char *name);

#endif
