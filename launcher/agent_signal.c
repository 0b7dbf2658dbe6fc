/* agent_signal.c -- signals to the agent and to the workers: stopping the
 * group with a signal, the grace period and SIGKILL, and the signals cdrun
 * handles (Note [signal escalation]). */
#include "agent_internal.h"

#include <signal.h>

#include "say.h"
#include "signames.h"

const char *agent_signame(int sig)
{
  static char buf[16];

  return sig_name(sig, buf, sizeof buf);
}

void agent_kill_running(struct agent *a, int sig)
{
  int i;

  if (sig == SIGKILL)
    a->sigkill_sent = true;
  for (i = 0; i < a->o->nproc; i++)
    if (a->workers[i].running)
      kill(-a->workers[i].pid, sig);
}

static void grace_expired(uv_timer_t *t)
{
  struct agent *a = t->data;

  if (a->nrunning) {
    say("workers still running %.0f s after %s; sending SIGKILL",
              a->o->grace_s, agent_signame(a->stop_signal));
    agent_kill_running(a, SIGKILL);
  }
}

/* Note [signal escalation]: a handled signal is forwarded to every
 * worker's process group and starts the grace period (SIGKILL when it
 * ends).  Only an interactive repeat escalates: a second SIGINT (the
 * impatient second Ctrl-C) SIGKILLs the workers at once.  Anything else
 * received while stopping is no reason to kill: a signal already
 * forwarded is the same event arriving twice (Slurm's srun forwards a
 * SIGTERM and the step's end sends another, milliseconds apart), and a
 * signal not yet forwarded (SIGTERM after Slurm's --signal=USR1 warning)
 * is forwarded too and starts the grace period afresh, as if it were the
 * first.  Each signal is forwarded once per stop, so the grace period is
 * restarted at most once per handled signal. */
unsigned agent_signal_bit(int sig)
{
  return sig > 0 && sig < 32 ? 1u << sig : 0;
}

void agent_start_grace(struct agent *a)
{
  uv_timer_start(&a->grace, grace_expired,
                 (uint64_t)(a->o->grace_s * 1000.0), 0);
}

void agent_on_signal(uv_signal_t *h, int signum)
{
  struct agent *a = h->data;
  bool was_signal;

  switch (a->state) {
  case ST_CLOSING:
    say("received %s; not waiting for the job's end", agent_signame(signum));
    uv_timer_stop(&a->backoff_timer);
    agent_finish_failed(a);
    return;
  case ST_RENDEZVOUS:
  case ST_BARRIER:
    say("received %s; exiting", agent_signame(signum));
    agent_finish(a, 128 + signum);
    return;
  case ST_RUNNING:
    say("received %s; forwarding it to the workers (SIGKILL in %.0f s%s)",
        agent_signame(signum), a->o->grace_s,
        signum == SIGINT ? ", or at once on a second SIGINT" : "");
    agent_begin_stop(a, STOP_SIGNAL, signum);
    return;
  case ST_STOPPING:
    was_signal = a->reason == STOP_SIGNAL;
    /* A signal while restarting after a failure: do not restart. */
    a->reason = STOP_SIGNAL;
    if (!was_signal && (a->forwarded & agent_signal_bit(signum))) {
      say("received %s; the workers were already sent it (stopping "
          "after a failure); no restart", agent_signame(signum));
      return;
    }
    if (signum == SIGINT && (a->forwarded & agent_signal_bit(SIGINT))) {
      if (a->nrunning) {
        say("received %s again; killing the workers now",
            agent_signame(signum));
        agent_kill_running(a, SIGKILL);
      }
      return;
    }
    if (a->forwarded & agent_signal_bit(signum)) {
      say("received %s again; already forwarded to the workers, SIGKILL "
          "when the %.0f s grace period ends", agent_signame(signum),
          a->o->grace_s);
      return;
    }
    a->forwarded |= agent_signal_bit(signum);
    a->stop_signal = signum;
    if (a->nrunning && !a->sigkill_sent) {
      say("received %s; forwarding it to the workers too (SIGKILL in "
          "%.0f s)", agent_signame(signum), a->o->grace_s);
      agent_kill_running(a, signum);
      agent_start_grace(a);
    }
    return;
  case ST_DONE:
    return;
  }
}

