/* agent.h -- the elastic agent: runs the local worker group through
 * rendezvous rounds, supervises it by exit events, restarts it, forwards
 * signals, and reports the failure summary.  Its parts: the workers'
 * output (output.h), their failures and cdrun's exit status
 * (failures.h), hang detection (hang.h). */
#ifndef CDRUN_AGENT_H
#define CDRUN_AGENT_H

#include <stdbool.h>
#include <uv.h>

#include "backoff.h"
#include "numa.h"
#include "output.h"
#include "rdzv.h"

/* Everything the agent needs, resolved by main.c.  Pointers are borrowed
 * for the duration of agent_run. */
struct agent_opts {
  int nproc;
  char **cmd;                     /* argv of every worker */
  const char *target;             /* name for the summary ("train.py") */
  const char *role;
  const char *run_id;
  const char *run_log_dir;        /* <log_dir>/<run_id>_xxxxxx, exists */
  const char *temp_log_base;      /* the temporary log_dir, removed should
                                     the agent be killed; NULL with
                                     --log_dir */
  struct output_conf output;      /* where the workers' streams go */
  bool virtual_local_rank;        /* LOCAL_RANK=0, one GPU each */
  const char *timer_file;         /* torch's file timer FIFO, or NULL */
  double heartbeat_timeout;       /* --worker_heartbeat_timeout, 0: off */
  const struct numa_binding *numa;  /* per local rank, or NULL */
  bool numa_memory;               /* also set the memory policy */
  int max_restarts;
  struct backoff_conf backoff;    /* Note [restart backoff] */
  double grace_s;                 /* signal -> SIGKILL */
  double cofailure_s;             /* Note [simultaneous failures] */
  const int *signals;             /* handled signals */
  int nsignals;
  bool default_omp_threads;       /* OMP_NUM_THREADS=1 if unset */
  bool log_events;                /* --event_log_handler=console */
  bool *error_files_read;         /* out: the summary used error files */
  /* Called once, when the job's exit status is known: true when the
   * temporary log folder (temp_log_base) may go; false keeps it (the
   * callback says where it is).  The agent then removes it (Note
   * [overlapped exit], agent.c).  NULL: it is kept. */
  bool (*logs_disposable)(void *arg, int status);
  /* Creates the rendezvous back end on the agent's loop. */
  int (*rdzv_create)(void *arg, uv_loop_t *loop,
                     const struct rdzv_callbacks *cb, struct rdzv **out);
  void *rdzv_arg;
  /* The rendezvous shared secret, the key of the workers' job token
   * (jobtoken.h); len 0: none. */
  const unsigned char *token_secret;
  size_t token_secret_len;
  /* Note [fixed membership]: the nodes were started by a launcher that
   * cannot bring a lost one back (fixed_source: "Slurm's step", "the
   * hostfile"; NULL: elastic, or started by hand), and the size is fixed
   * (min == max nodes).  A node lost then ends the job after
   * lost_grace_s unless the round completes meanwhile. */
  const char *fixed_source;
  double lost_grace_s;
  /* --recovery=live (man/cdrun.1, LIVE RECOVERY): a failed worker is
   * replaced alone and membership changes keep the workers running,
   * while every local worker has opted in; false: restart mode. */
  bool live;
};

/* Exit status of a cdrun run (documented in man/cdrun.1). */
enum {
  AGENT_EXIT_INTERNAL = 1,        /* cdrun could not do its job */
  AGENT_EXIT_NOT_FOUND = 127,     /* the target could not be executed */
  AGENT_EXIT_NOT_EXECUTABLE = 126,
  AGENT_EXIT_NODE_LOST = 75,      /* a node of a fixed-size job was lost
                                     (sysexits' EX_TEMPFAIL: the job may
                                     run again) */
};

/* Runs the job to its end and returns cdrun's exit status: 0 when every
 * worker succeeded; the root cause's exit code (128 + signal when it was
 * killed) when the group failed and no restart was left; 126/127 when the
 * target could not be executed; 128 + signal when cdrun itself was stopped
 * by a signal; 1 on an internal error (reported on stderr). */
int agent_run(const struct agent_opts *o);

#endif
