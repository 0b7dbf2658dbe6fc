#!/bin/bash
# cdrun under a real Slurm (Debian's slurmctld/slurmd 22.05, munge) started
# here: slurmctld in its own network namespace, one slurmd per namespace
# ("nodes" n1 and n2, each with its own hostname, address and /etc/hosts),
# two fake GPUs per node (gres on character devices).  Checked:
#   srun -N2 --gpus-per-node=2 cdrun --nproc_per_node=gpu ...   no other flag:
#     4 ranks, MASTER_ADDR on n1, NODE_RANK; train_mlp trains through libpg;
#   srun -N2 -n4 ./pglaunch          per-process launch, no cdrun;
#   scancel                         every worker gets SIGTERM (the grace);
#   scancel -s USR1                 reaches the workers, the agents live on;
#   one node's cdrun killed in a fixed-size step: the other ends the job
#     after lost_node_grace, exit status 75;
#   a node lost (its slurmd, then everything on it, killed) mid-job: the
#     other node's agent restarts its workers in a smaller world.
# Needs root, ip netns, nsenter/unshare, slurm and munge; skips otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/slurm_cluster.sh"

PGL=$(dirname "$TW")/pglaunch
TRAIN=$(dirname "$CDRUN")/train_mlp
[ -x "$PGL" ] || fail "no pglaunch at $PGL"
[ -x "$TRAIN" ] || fail "no train_mlp at $TRAIN"

# node_of PID: the node (namespace) a process runs in.
node_of() {
  local want got n
  want=$(readlink "/proc/$1/ns/net" 2>/dev/null) || return 1
  for n in n1 n2; do
    got=$(ip netns exec "cdrun-$id-$n" readlink /proc/self/ns/net)
    [ "$got" = "$want" ] && { echo "$n"; return 0; }
  done
  return 1
}
# srun_bg NAME ARGS...: srun in the controller's namespace, in the
# background ($SRUN: its pid; ip netns exec execs srun).
srun_bg() {
  local name=$1
  shift
  ip netns exec "cdrun-$id-ctl" srun -J "$name" "$@" >"$T/$name.out" \
    2>"$T/$name.err" &
  SRUN=$!
  STARTED+=("$SRUN")
}
job_of() { inctl squeue -h -n "$1" -o %i; }

# ---- 1. srun -N2 cdrun --nproc_per_node=gpu: nothing else ------------------
mkdir "$T/a"
srun_bg env -N2 --ntasks-per-node=1 --gpus-per-node=2 \
  "$CDRUN" --nproc_per_node=gpu "$TW" env "$T/a"
wait_exit "$SRUN" 120
[ "$RC" -eq 0 ] || { cat "$T/env.err" >&2; fail "srun cdrun exited $RC"; }
check_world "$T/a" env 4
for r in 0 1 2 3; do
  f=$T/a/env.$r
  expect_eq "rank $r NODE_RANK" "$(envval "$f" NODE_RANK)" \
    "$(envval "$f" GROUP_RANK)"
  expect_eq "rank $r LOCAL_WORLD_SIZE" "$(envval "$f" LOCAL_WORLD_SIZE)" 2
  [[ $(envval "$f" TORCHELASTIC_RUN_ID) =~ ^[0-9]+\.[0-9]+$ ]] ||
    fail "rank $r run id '$(envval "$f" TORCHELASTIC_RUN_ID)' is not JOB.STEP"
done
ma=$(envval "$T/a/env.0" MASTER_ADDR)
[ "$ma" = "${ADDR[n1]}" ] || [ "$ma" = "${ADDR[n2]}" ] ||
  fail "MASTER_ADDR '$ma' is no node's address"

# --print-config on a node says where each value came from.
inctl srun -N2 --ntasks-per-node=1 --gpus-per-node=2 -J cfg \
  "$CDRUN" --nproc_per_node=gpu --print-config >"$T/cfg.out" 2>"$T/cfg.err" ||
  fail "srun cdrun --print-config failed: $(cat "$T/cfg.err")"
expect_grep '^nnodes +2:2 +Slurm \(SLURM_STEP_NUM_NODES\)' "$T/cfg.out"
expect_grep '^rdzv_endpoint +n1:[0-9]+ +Slurm \(first host' "$T/cfg.out"
expect_grep '^node_rank +1 +Slurm \(SLURM_NODEID\)' "$T/cfg.out"
expect_grep '^\(workers on this node\) +2 +Slurm \(SLURM_GPUS_ON_NODE\)' "$T/cfg.out"
expect_grep '^\(rendezvous served by\) +this node' "$T/cfg.out"

# A batch script is no step: cdrun there derives nothing (it would wait
# for nodes that never run it).
cat >"$T/batch.sh" <<SH
#!/bin/sh
env | grep '^SLURM_' | sort >"$T/batch.env"
"$CDRUN" --print-config >"$T/batch.cfg.tmp" 2>&1; mv "$T/batch.cfg.tmp" "$T/batch.cfg"
SH
chmod +x "$T/batch.sh"
inctl sbatch -N2 -o /dev/null "$T/batch.sh" >"$T/sbatch.out" 2>&1 ||
  fail "sbatch: $(cat "$T/sbatch.out")"
wait_files "$T/batch.cfg" 1 60
expect_grep '^nnodes +1:1 +default$' "$T/batch.cfg"
[ -n "${DEBUG_SLURM_TEST:-}" ] && cat "$T/batch.env" >&2
grep -q '^SLURM_JOB_NUM_NODES=2$' "$T/batch.env" ||
  fail "the batch script did not run in a 2-node job: $(cat "$T/batch.env")"

# ---- 2. training through libpg ---------------------------------------------
mkdir "$T/ck"
srun_bg train -N2 --ntasks-per-node=1 --gpus-per-node=2 \
  "$CDRUN" --nproc_per_node=gpu "$TRAIN" --epochs 1 --samples 4096 \
  --hidden 64 --ckpt-dir "$T/ck"
wait_exit "$SRUN" 170
[ "$RC" -eq 0 ] || { tail -20 "$T/train.err" >&2; fail "srun train_mlp exited $RC"; }
grep -Eqi 'loss' "$T/train.out" "$T/train.err" ||
  fail "train_mlp printed no loss: $(tail -5 "$T/train.out" "$T/train.err")"

# ---- 3. per-process launch: srun -n 4 ./pglaunch ----------------------------
mkdir "$T/c"
srun_bg pgl -N2 -n4 env -u RANK -u WORLD_SIZE PG_TIMEOUT=60 "$PGL" "$T/c"
wait_exit "$SRUN" 120
[ "$RC" -eq 0 ] || { cat "$T/pgl.err" >&2; fail "srun -n4 pglaunch exited $RC"; }
for r in 0 1 2 3; do
  read -r -a line <"$T/c/id.$r" || fail "rank $r wrote nothing"
  expect_eq "pglaunch rank $r" "${line[0]} ${line[1]} ${line[2]}" "$r 4 6"
done
expect_eq "pglaunch rank 0 host" "$(cut -d' ' -f5 "$T/c/id.0")" n1
expect_eq "pglaunch rank 3 host" "$(cut -d' ' -f5 "$T/c/id.3")" n2

# ---- 4. scancel: every worker gets SIGTERM ----------------------------------
mkdir "$T/d"
srun_bg cancel -N2 --ntasks-per-node=1 "$CDRUN" --nproc_per_node=2 \
  "$TW" trap "$T/d" 300
wait_files "$T/d/pid.*" 4 60
jid=$(job_of cancel)
[ -n "$jid" ] || fail "no job 'cancel' in squeue"
inctl scancel "$jid" || fail "scancel $jid"
wait_exit "$SRUN" 60
for r in 0 1 2 3; do
  [ -f "$T/d/sig.$r" ] || { cat "$T/cancel.err" >&2; fail "rank $r got no signal from scancel"; }
  expect_eq "scancel: rank $r signal" "$(cat "$T/d/sig.$r")" 15
done

# ---- 5. scancel -s USR1 reaches the workers; the agents live on -------------
mkdir "$T/u"
srun_bg usr1 -N2 --ntasks-per-node=1 "$CDRUN" --nproc_per_node=2 \
  "$TW" trap "$T/u" 300
wait_files "$T/u/pid.*" 4 60
jid=$(job_of usr1)
inctl scancel -s USR1 "$jid" || fail "scancel -s USR1 $jid"
wait_exit "$SRUN" 60
for r in 0 1 2 3; do
  [ -f "$T/u/sig.$r" ] || fail "rank $r got no SIGUSR1"
  expect_eq "USR1: rank $r signal" "$(cat "$T/u/sig.$r")" 10
done
# The workers exit 0 after the signal: the job succeeds only if no agent
# died of SIGUSR1.
[ "$RC" -eq 0 ] || { cat "$T/usr1.err" >&2; fail "srun exited $RC after scancel -s USR1"; }

# ---- 6. fixed size, one node's cdrun killed: the job ends -------------------
# Note [fixed membership]: srun cannot start it again, so the survivor
# names the lost node, waits lost_node_grace and exits 75.
mkdir "$T/x"
srun_bg fixed -N2 --ntasks-per-node=1 "$CDRUN" --max_restarts=3 \
  --rdzv_conf=keepalive_interval=0.2,keepalive_misses=5,lost_node_grace=1 \
  "$TW" elastic "$T/x" 300
wait_files "$T/x/ws2.*" 2 60
killed=
for p in $(ip netns pids "cdrun-$id-n2"); do
  [ "$(cat "/proc/$p/comm" 2>/dev/null)" = cdrun ] && kill -9 "$p" && killed=$p
done
[ -n "$killed" ] || fail "no cdrun on n2 to kill"
wait_exit "$SRUN" 120
expect_grep "cdrun: node n2 lost \(its agent exited\) and this job's size is fixed \(its nodes come from Slurm's step" "$T/fixed.err"
expect_grep 'cdrun: node n2 is not back after 1 s: ending the job \(exit status 75\)' "$T/fixed.err"
for f in "$T"/x/pid.*; do
  alive "$(cat "$f")" && fail "worker $(cat "$f") outlived the fixed job"
done

# ---- 7. a node lost mid-job: an elastic event -------------------------------
mkdir "$T/f"
srun_bg elastic -N2 --ntasks-per-node=1 --no-kill "$CDRUN" --nnodes=1:2 \
  --max_restarts=3 --rdzv_conf=keepalive_interval=0.2,keepalive_misses=5 \
  "$TW" elastic "$T/f" 300
wait_files "$T/f/ws2.*" 2 60
# n1 (node 0) serves the rendezvous; n2 goes: its slurmd, then the rest.
kill -9 "$(cat "$T/slurmd-n2.pid")" || fail "cannot kill slurmd on n2"
for p in $(ip netns pids "cdrun-$id-n2"); do kill -9 "$p" 2>/dev/null; done
wait_files "$T/f/ws1.*" 1 60
[ "$(node_of "$(cat "$T/f/pid.0")")" = n1 ] || fail "the survivor is not on n1"
expect_grep 'restarting the worker group: .*lost' "$T/elastic.err"
jid=$(job_of elastic)
[ -n "$jid" ] && inctl scancel "$jid"
p=$(cat "$T/f/pid.0")
for ((i = 0; i < 600; i++)); do alive "$p" || break; sleep 0.1; done
alive "$p" && fail "the survivor's worker outlived scancel"
for f in "$T"/*.err "$T"/*.out; do
  grep -Eq 'Sanitizer|runtime error' "$f" && { cat "$f" >&2; fail "sanitizer report in $f"; }
done
exit 0
