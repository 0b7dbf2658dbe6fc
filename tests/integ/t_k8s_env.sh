#!/bin/bash
# Kubernetes: Kubeflow's PyTorchJob starts `cdrun train.py` in every pod
# with no flags, only the PET_* variables the training operator sets (and
# its pod-level RANK/WORLD_SIZE/MASTER_*, which cdrun replaces per worker).
# Two "pods" on loopback: the static form (PET_MASTER_ADDR/PORT,
# PET_NODE_RANK) and the elastic form (PET_RDZV_*, PET_NNODES=MIN:MAX,
# PET_MAX_RESTARTS), plus --print-config naming the PET_* sources.
. "$(dirname "$0")/lib.sh"

pod() {   # pod NAME ENV... -- ARGS...: cdrun in the background, env only
  local name=$1
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$CDRUN" "$@" >"$T/$name.out" 2>"$T/$name.err" &
  STARTED+=("$!")
  printf -v "POD_$name" '%s' "$!"
}

# ---- static: what the operator sets without an elasticPolicy ---------------
port=$(free_port)
mkdir "$T/s"
for r in 0 1; do
  pod "s$r" PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT="$port" PET_NNODES=2 \
    PET_NODE_RANK=$r PET_NPROC_PER_NODE=2 \
    MASTER_ADDR=job-master-0 MASTER_PORT=23456 WORLD_SIZE=2 RANK=$r \
    -- "$TW" env "$T/s"
done
for r in 0 1; do
  pv=POD_s$r
  wait_exit "${!pv}" 60
  [ "$RC" -eq 0 ] || { cat "$T/s$r.err" >&2; fail "static pod $r exited $RC"; }
done
check_world "$T/s" env 4
expect_eq "static MASTER_ADDR" "$(envval "$T/s/env.3" MASTER_ADDR)" 127.0.0.1
expect_eq "static MASTER_PORT" "$(envval "$T/s/env.3" MASTER_PORT)" "$port"
expect_eq "static NODE_RANK" "$(envval "$T/s/env.3" NODE_RANK)" 1

# ---- elastic: elasticPolicy (rdzvBackend c10d, min/max, maxRestarts) -------
rport=$(free_port)
mkdir "$T/e"
for r in 0 1; do
  pod "e$r" PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT="127.0.0.1:$rport" \
    PET_RDZV_ID=pytorchjob-e PET_NNODES=1:2 PET_NPROC_PER_NODE=1 \
    PET_MAX_RESTARTS=3 PET_RDZV_CONF=last_call_timeout=1 \
    -- "$TW" env "$T/e"
done
for r in 0 1; do
  pv=POD_e$r
  wait_exit "${!pv}" 60
  [ "$RC" -eq 0 ] || { cat "$T/e$r.err" >&2; fail "elastic pod $r exited $RC"; }
done
# One world of 2 or, if the second pod came after the last call, each
# its own round: every worker saw a consistent world.
ws=$(envval "$T/e/env.0" WORLD_SIZE)
check_world "$T/e" env "$ws"
expect_eq "elastic run id" "$(envval "$T/e/env.0" TORCHELASTIC_RUN_ID)" pytorchjob-e
expect_eq "elastic max restarts" \
  "$(envval "$T/e/env.0" TORCHELASTIC_MAX_RESTARTS)" 3

# ---- --print-config names the PET_* variables -------------------------------
PET_NNODES=1:4 PET_RDZV_BACKEND=c10d PET_RDZV_ENDPOINT=job-worker-0:29400 \
  PET_NPROC_PER_NODE=2 "$CDRUN" --print-config "$TW" >"$T/cfg" ||
  fail "--print-config failed"
expect_grep '^nnodes +1:4 +env PET_NNODES$' "$T/cfg"
expect_grep '^rdzv_endpoint +job-worker-0:29400 +env PET_RDZV_ENDPOINT$' "$T/cfg"
expect_grep '^nproc_per_node +2 +env PET_NPROC_PER_NODE$' "$T/cfg"
expect_grep '^max_restarts +0 +default$' "$T/cfg"
"$CDRUN" --print-config --max_restarts=2 "$TW" >"$T/cfg" || fail "print"
expect_grep '^max_restarts +2 +flag --max_restarts$' "$T/cfg"
exit 0
