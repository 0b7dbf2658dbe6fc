/* rdzv_rules.c -- the rendezvous rules both back ends apply
 * (rdzv_rules.h). */
#include "rdzv_rules.h"

#include <math.h>
#include <stdio.h>

/* ---- rank order ---- */

int rdzv_rules_rank_cmp(int prev_rank_a, uint64_t seq_a, int prev_rank_b,
                        uint64_t seq_b)
{
  if ((prev_rank_a < 0) != (prev_rank_b < 0))
    return prev_rank_a < 0 ? 1 : -1;
  if (prev_rank_a != prev_rank_b)
    return prev_rank_a < prev_rank_b ? -1 : 1;
  return seq_a < seq_b ? -1 : seq_a > seq_b;
}

/* ---- admission ---- */

enum rdzv_rules_admission rdzv_rules_admit(const struct rdzv_rules_job *j,
                                           bool expected)
{
  if (j->gathering)
    return expected || rdzv_rules_spare_fits(j) ? RDZV_ADMIT_ROUND
                                                : RDZV_ADMIT_WAIT;
  /* A running round with room: the newcomer starts a new one, unless
   * the round is finishing (past "exit") or the job is closing (it
   * starts no round and admits no one to it: Note [root cause]). */
  if (!j->exit_passed && !j->closing && j->n_part < j->max_nodes)
    return RDZV_ADMIT_NEW_ROUND;
  return RDZV_ADMIT_WAIT;
}

bool rdzv_rules_spare_fits(const struct rdzv_rules_job *j)
{
  return j->n_part + j->n_outstanding < j->max_nodes;
}

bool rdzv_rules_spare_fits_at_completion(const struct rdzv_rules_job *j)
{
  return j->n_part < j->max_nodes;
}

double rdzv_rules_last_call_wait(const struct rdzv_rules_job *j,
                                 double rejoin_window)
{
  if (j->restarting && j->n_outstanding)
    return fmax(j->last_call_timeout, rejoin_window);
  return j->last_call_timeout;
}

enum rdzv_rules_gather rdzv_rules_gather(const struct rdzv_rules_job *j,
                                         double rejoin_window)
{
  if (j->n_part >= j->max_nodes ||
      (j->restarting && !j->n_outstanding && j->n_part >= j->min_nodes))
    return RDZV_GATHER_COMPLETE;
  if (j->n_part < j->min_nodes)
    return RDZV_GATHER_WAIT;
  if (j->in_last_call)
    return RDZV_GATHER_LAST_CALL;
  return rdzv_rules_last_call_wait(j, rejoin_window) <= 0
           ? RDZV_GATHER_COMPLETE : RDZV_GATHER_LAST_CALL;
}

/* ---- the config check ---- */

static const char *conf_problem(const struct rdzv_rules_conf *c,
                                int max_nodes_limit)
{
  if (c->min_nodes < 1 || c->min_nodes > c->max_nodes ||
      c->max_nodes > max_nodes_limit)
    return "min_nodes..max_nodes out of range";
  if (c->max_restarts < 0)
    return "max_restarts < 0";
  if (!(c->last_call_timeout >= 0) || !isfinite(c->last_call_timeout))
    return "bad timeout";
  return NULL;
}

enum rdzv_rules_conf_verdict
rdzv_rules_conf_check(const struct rdzv_rules_conf *c,
                      const struct rdzv_rules_conf *job, int max_nodes_limit,
                      const char *job_name, char *problem,
                      size_t problem_len)
{
  const char *bad = conf_problem(c, max_nodes_limit);

  if (bad) {
    snprintf(problem, problem_len, "%s", bad);
    return RDZV_CONF_BAD;
  }
  if (job && (c->min_nodes != job->min_nodes ||
              c->max_nodes != job->max_nodes)) {
    snprintf(problem, problem_len, "min_nodes..max_nodes %d..%d differs "
             "from %s's %d..%d", c->min_nodes, c->max_nodes, job_name,
             job->min_nodes, job->max_nodes);
    return RDZV_CONF_NODES_DIFFER;
  }
  if (job && c->max_restarts != job->max_restarts) {
    snprintf(problem, problem_len, "max_restarts %d differs from %s's %d",
             c->max_restarts, job_name, job->max_restarts);
    return RDZV_CONF_RESTARTS_DIFFER;
  }
  if (problem_len)
    problem[0] = '\0';
  return RDZV_CONF_OK;
}

/* ---- the restart budget and the final failure ---- */

bool rdzv_rules_restart_left(int restart_count, int max_restarts)
{
  return restart_count < max_restarts;
}

bool rdzv_rules_failure_final(int restart_count, int max_restarts)
{
  return !rdzv_rules_restart_left(restart_count, max_restarts);
}

bool rdzv_rules_replacement_final(int replaced, int max_restarts)
{
  return !rdzv_rules_restart_left(replaced, max_restarts);
}

enum rdzv_rules_failure rdzv_rules_failure(bool reported_final,
                                           int restart_count,
                                           int max_restarts)
{
  if (reported_final)
    return RDZV_FAILURE_CLOSE;
  if (!rdzv_rules_restart_left(restart_count, max_restarts))
    return RDZV_FAILURE_CLOSE_EXHAUSTED;
  return RDZV_FAILURE_RESTART;
}

/* ---- the keepalive window ---- */

double rdzv_rules_keepalive_window(double keepalive_interval,
                                   int keepalive_misses)
{
  return keepalive_interval * keepalive_misses;
}

/* ---- a lost node ---- */

static bool short_of_size(const struct rdzv_rules_loss *l)
{
  return l->n_left < l->min_nodes &&
         !rdzv_rules_restart_left(l->restart_count, l->max_restarts);
}

static bool fixed_and_gone(const struct rdzv_rules_loss *l)
{
  return l->nodes_fixed && l->how != RDZV_LEFT_SILENT;
}

bool rdzv_rules_lost_ends(const struct rdzv_rules_loss *l)
{
  return short_of_size(l) || fixed_and_gone(l);
}

double rdzv_rules_host_wait(const struct rdzv_rules_loss *l, double window,
                            double reconnect_timeout)
{
  double wait;

  if (!rdzv_rules_lost_ends(l))
    return reconnect_timeout;
  wait = (l->how == RDZV_LEFT_SILENT ? 0 : window) + RDZV_RULES_HOST_GRACE;
  return wait < reconnect_timeout ? wait : reconnect_timeout;
}

const char *rdzv_rules_leave_name(enum rdzv_rules_leave how)
{
  switch (how) {
  case RDZV_LEFT_GOODBYE: return "it said goodbye";
  case RDZV_LEFT_DIED: return "its agent died";
  case RDZV_LEFT_SILENT: return "its link went silent";
  }
  return "it left";
}

void rdzv_rules_lost_why(const struct rdzv_rules_loss *l, char *buf,
                         size_t len)
{
  if (!len)
    return;
  if (short_of_size(l))
    snprintf(buf, len, "the job cannot reach its size (%d of %d node%s) "
             "and no restart is left (%d of %d used)", l->n_left,
             l->min_nodes, l->min_nodes == 1 ? "" : "s", l->restart_count,
             l->max_restarts);
  else if (fixed_and_gone(l))
    snprintf(buf, len, "the job's nodes are fixed: none can take its place");
  else
    buf[0] = '\0';
}
