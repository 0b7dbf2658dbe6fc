#!/bin/bash
# A Slurm job's time limit with --signal's warning, on the real test
# cluster (slurm_cluster.sh): srun -t 1 --signal=USR1@30 runs cdrun on two
# nodes with --signals_to_handle=...,SIGUSR1 and workers that checkpoint
# for 5 s in their signal handlers (and train on after SIGUSR1).  Slurm
# sends SIGUSR1 before the limit (up to a minute before, its resolution)
# and SIGTERM at it (to the agents, more than once, and to the workers);
# KillWait gives 30 s.  The grace period (--shutdown_timeout=150) outlasts
# the time between the two, as it must for a job that trains on after the
# warning.  Every worker's SIGUSR1 and SIGTERM checkpoints
# finish: cdrun SIGKILLs nobody (Note [signal escalation]).  Takes one to
# two minutes (Slurm's time limits have a resolution of a minute).
# Needs root, ip netns, nsenter/unshare, slurm and munge; skips otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/slurm_cluster.sh"

mkdir "$T/k"
ip netns exec "cdrun-$id-ctl" srun -J limit -t 1 --signal=USR1@30 -N2 \
  --ntasks-per-node=1 "$CDRUN" --nproc_per_node=2 --shutdown_timeout=150 \
  --signals_to_handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 \
  "$TW" ckpt "$T/k" 5 >"$T/limit.out" 2>"$T/limit.err" &
SRUN=$!
STARTED+=("$SRUN")
wait_files "$T/k/pid.*" 4 60
wait_exit "$SRUN" 240
[ -n "${DEBUG_SLURM_TEST:-}" ] && cat "$T/limit.err" >&2
for sig in 10 15; do
  for r in 0 1 2 3; do
    [ -f "$T/k/sig$sig.$r" ] ||
      { cat "$T/limit.err" >&2; fail "rank $r never got signal $sig"; }
    [ -f "$T/k/ckpt$sig.$r" ] ||
      { cat "$T/limit.err" >&2; fail "rank $r's checkpoint on signal $sig did not finish"; }
  done
done
# The SIGTERM after the warning was forwarded, not taken as a second signal
# (each agent also gets it twice at the limit, srun's and the step's).
expect_grep 'received SIGTERM; forwarding it to the workers too' "$T/limit.err"
grep -E 'killing the workers now|sending SIGKILL' "$T/limit.err" &&
  fail "cdrun SIGKILLed the workers at the time limit"
for f in "$T"/*.err "$T"/*.out; do
  grep -Eq 'Sanitizer|runtime error' "$f" && { cat "$f" >&2; fail "sanitizer report in $f"; }
done
exit 0
