/* agent_spawn.c -- starting the agent's workers: each one's folder,
 * environment and output streams, then the processes, several at once
 * (spawn.h), and what a start that fails means. */
#include "agent_internal.h"

#include <errno.h>
#include <limits.h>
#include <linux/mempolicy.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "contain.h"
#include "guardian.h"
#include "hang.h"
#include "live_agent.h"
#include "logdir.h"
#include "logs.h"
#include "output.h"
#include "say.h"
#include "spawn.h"
#include "workerenv.h"

/* In the worker between clone and exec (spawn.h's in_child: system calls
 * only): onto the guardian's list, before it can start anything (it was
 * born in the cgroup: spawn_opts' cgroup_fd). */
static int register_group(void *ctx)
{
  struct agent *a = ctx;

  return guardian_watch(&a->guardian, getpid());
}

/* The exec failed: the group is gone, and must leave the guardian's list
 * (its number may be reused by anything). */
static void forget_group(void *ctx, pid_t pid)
{
  struct agent *a = ctx;

  guardian_forget(&a->guardian, pid);
}

/* Workers are started a batch at a time: each prepared here (its folder,
 * environment and output streams) and spawned on the spawner's threads
 * as soon as it is ready, while the next is prepared (spawn.h's stream),
 * then recorded. */
#define SPAWN_BATCH 64
#define SPAWN_THREADS 4

struct spawn_prep {
  struct spawn_opts so[SPAWN_BATCH];
  char **env[SPAWN_BATCH];
  int close_out[SPAWN_BATCH], close_err[SPAWN_BATCH];
  pid_t pid[SPAWN_BATCH];
  int err[SPAWN_BATCH];
};

/* What the worker has its own copies of once spawned: EOF on the tee
 * pipes must come only from the worker's side. */
static void spawn_prep_release(struct spawn_prep *p, int k)
{
  if (p->close_out[k] >= 0)
    close(p->close_out[k]);
  if (p->close_err[k] >= 0)
    close(p->close_err[k]);
  workerenv_free(p->env[k]);
}

/* ---- output -------------------------------------------------------------- */

/* A tee'd stream of a worker is closed (output.h). */
static void stream_closed(void *ctx)
{
  struct agent *a = ctx;

  a->nstreams--;
  live_agent_start_replacements(&a->live);
  agent_check_stopped(a);
}

/* Sends one stream of w where the options say (output.h), counting the
 * tee'd ones the agent waits for.  Returns 0 or a negative errno. */
static int open_stream(struct agent *a, struct worker *w,
                       struct output_stream *s, int bit, int *child_fd,
                       int *close_after)
{
  int r = output_stream_open(s, &a->loop, &a->o->output, bit,
                             w->local_rank, w->rank, w->dir,
                             a->console[bit == LOGS_STDOUT ? 0 : 1],
                             stream_closed, a, child_fd, close_after);

  if (r < 0)
    return r;
  a->nstreams += r;
  return 0;
}

/* torchrun's environment for worker w (workerenv.h); borrows from a
 * and w. */
static void worker_env(const struct agent *a, const struct worker *w,
                       struct worker_env *we)
{
  const struct agent_opts *o = a->o;

  memset(we, 0, sizeof *we);
  we->local_rank = w->local_rank;
  we->rank = w->rank;
  we->group_rank = a->assign.group_rank;
  we->role_rank = w->rank;
  we->role_name = o->role;
  we->local_world_size = o->nproc;
  we->world_size = a->assign.world_size;
  we->group_world_size = a->assign.group_world_size;
  we->role_world_size = a->assign.world_size;
  we->master_addr = a->assign.master_addr;
  we->master_port = a->assign.master_port;
  we->restart_count = a->assign.restart_count;
  we->max_restarts = o->max_restarts;
  we->run_id = o->run_id;
  we->use_agent_store = false;
  we->error_file = w->error_file;
  we->default_omp_threads = o->default_omp_threads;
  we->virtual_local_rank = o->virtual_local_rank;
  we->timer_file = o->timer_file;
  we->heartbeat_file = w->hang.heartbeat_file[0] ? w->hang.heartbeat_file
                                                 : NULL;
  we->job_token = a->job_token[0] ? a->job_token : NULL;
}

/* Prepares attempt_<k>/<local_rank>/ and slot k of p for one worker; on
 * error nothing of slot k is left to release. */
static int prepare_worker(struct agent *a, struct worker *w, int attempt,
                          struct spawn_prep *p, int k)
{
  const struct agent_opts *o = a->o;
  struct spawn_opts so = SPAWN_OPTS_INIT;
  struct worker_env we;
  char **env, opt_in[PATH_MAX];
  int out_fd, err_fd, close_out, close_err, err, n;

  free(w->dir);
  free(w->error_file);
  w->error_file = NULL;
  /* Note [live replacement]: a replacement's folder is inside the
   * original's, so attempt_<k>/ keeps torchrun's layout. */
  if (live_agent_replaced(&a->live, w->local_rank) > 0)
    n = asprintf(&w->dir, "%s/attempt_%d/%d/live_%d", o->run_log_dir,
                 attempt, w->local_rank,
                 live_agent_replaced(&a->live, w->local_rank));
  else
    n = asprintf(&w->dir, "%s/attempt_%d/%d", o->run_log_dir, attempt,
                 w->local_rank);
  if (n < 0) {
    w->dir = NULL;
    return -ENOMEM;
  }
  if (asprintf(&w->error_file, "%s/error.json", w->dir) < 0) {
    w->error_file = NULL;
    return -ENOMEM;
  }
  /* A new folder holds no error file; a reused one may hold an old one. */
  if (mkdir(w->dir, 0755) < 0) {
    err = logdir_mkdirs(w->dir);
    if (err)
      return err;
    unlink(w->error_file);
  }
  err = hang_watch_start(&w->hang, w->dir, o->heartbeat_timeout > 0,
                         agent_now_epoch());
  if (err)
    return err;

  worker_env(a, w, &we);
  live_agent_worker_env(&a->live, w->local_rank, w->dir, &we, opt_in,
                        sizeof opt_in);
  env = workerenv_build(environ, &we);
  if (!env)
    return -ENOMEM;

  err = open_stream(a, w, &w->out, LOGS_STDOUT, &out_fd, &close_out);
  if (err)
    goto out_env;
  err = open_stream(a, w, &w->err, LOGS_STDERR, &err_fd, &close_err);
  if (err) {
    if (close_out >= 0)
      close(close_out);
    goto out_env;
  }
  so.argv = o->cmd;
  so.envp = env;
  so.stdout_fd = out_fd;
  so.stderr_fd = err_fd;
  so.in_child = register_group;
  so.exec_failed = forget_group;
  so.ctx = a;
  so.cgroup_fd = a->contain.dir_fd;
  so.cgroup_err = &a->contain.enter_err;
  if (o->numa) {
    const struct numa_binding *b = &o->numa[w->local_rank];

    so.cpus = &b->cpus;
    if (o->numa_memory && b->nnodes > 0) {
      so.mempolicy = b->nnodes == 1 ? MPOL_PREFERRED : MPOL_INTERLEAVE;
      so.nodes = b->nodes;
      so.maxnode = NUMA_MAX_NODES + 1;
    }
  }
  p->so[k] = so;
  p->env[k] = env;
  p->close_out[k] = close_out;
  p->close_err[k] = close_err;
  return 0;
out_env:
  workerenv_free(env);
  return err;
}

/* A worker could not be started: fail without restarting (a target
 * that cannot be executed will not be executable next time either). */
void agent_start_failed(struct agent *a, struct worker *w, int err,
                        pid_t pid)
{
  if (err == -ENOENT || err == -EACCES || err == -ENOEXEC ||
      err == -ENOTDIR || err == -EISDIR || err == -ELOOP) {
    char msg[PATH_MAX + 64];

    snprintf(msg, sizeof msg, "cannot execute '%s': %s", a->o->cmd[0],
             say_strerror(err));
    say("%s", msg);
    a->exit_status = err == -ENOENT ? AGENT_EXIT_NOT_FOUND
                                    : AGENT_EXIT_NOT_EXECUTABLE;
    agent_record_failure(a, w, pid, a->exit_status, msg);
  } else {
    say("cannot start worker %d: %s", w->rank, say_strerror(err));
    a->exit_status = AGENT_EXIT_INTERNAL;
  }
  agent_begin_stop(a, STOP_FATAL, SIGTERM);
}

void agent_spawn_worker(struct agent *a, struct worker *w)
{
  struct spawn_prep prep;
  int err = prepare_worker(a, w, a->assign.restart_count, &prep, 0);

  if (err) {
    agent_start_failed(a, w, err, 0);
    return;
  }
  spawn_many(a->spawner, prep.so, 1, prep.pid, prep.err);
  spawn_prep_release(&prep, 0);
  if (prep.err[0]) {
    agent_start_failed(a, w, prep.err[0], prep.pid[0]);
    return;
  }
  w->pid = prep.pid[0];
  w->running = true;
  a->nrunning++;
  agent_pid_insert(a, w);
}

bool agent_start_workers(struct agent *a, const struct rdzv_assignment *as)
{
  struct spawn_prep prep;
  struct worker *bad = NULL;
  pid_t bad_pid = 0;            /* the child whose exec failed */
  int i, k, err, first_err = 0, batch, end;

  for (batch = 0; batch < a->o->nproc; batch = end) {
    struct spawn_batch stream;

    end = batch + SPAWN_BATCH < a->o->nproc ? batch + SPAWN_BATCH
                                             : a->o->nproc;
    if (!a->spawner && a->o->nproc > 1)
      spawner_start(SPAWN_THREADS - 1, &a->spawner);  /* NULL: one thread */
    /* Each worker starts once prepared, while the next is prepared. */
    spawn_stream_begin(a->spawner, &stream, prep.so, (size_t)(end - batch),
                       prep.pid, prep.err);
    for (i = batch; i < end; i++) {
      struct worker *w = &a->workers[i];

      w->agent = a;
      w->local_rank = i;
      w->rank = as->rank_offset + i;
      w->pid = 0;
      w->running = false;
      err = prepare_worker(a, w, as->restart_count, &prep, i - batch);
      if (err) {
        bad = w;
        first_err = err;
        break;
      }
      spawn_stream_ready(&stream, (size_t)(i - batch + 1));
    }
    spawn_stream_end(&stream, (size_t)(i - batch));
    for (k = 0; k < i - batch; k++) {
      struct worker *w = &a->workers[batch + k];

      spawn_prep_release(&prep, k);
      if (prep.err[k]) {
        if (!first_err || w < bad) {
          first_err = prep.err[k];
          bad = w;
          bad_pid = prep.pid[k];
        }
        continue;
      }
      w->pid = prep.pid[k];
      w->running = true;
      a->nrunning++;
      agent_pid_insert(a, w);
    }
    err = contain_check(&a->contain);
    if (err)
      say("cannot use the cgroup for the workers (%s); falling back to "
          "the subreaper", say_strerror(err));
    if (first_err) {
      agent_start_failed(a, bad, first_err, bad_pid);
      return false;
    }
  }
  return true;
}
