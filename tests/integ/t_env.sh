#!/bin/bash
# Four workers observe torchrun's environment, with torchrun's values.
. "$(dirname "$0")/lib.sh"

mkdir "$T/e"
CDRUN_TEST_INHERITED=yes "$CDRUN" --standalone --nproc-per-node=4 \
  "$TW" env "$T/e" >"$T/out" 2>"$T/err" || fail "cdrun exited $?"
wait_files "$T/e/env.*" 4 5
port=$(envval "$T/e/env.0" MASTER_PORT)
runid=$(envval "$T/e/env.0" TORCHELASTIC_RUN_ID)
[[ $port =~ ^[0-9]+$ ]] && [ "$port" -gt 0 ] || fail "MASTER_PORT '$port'"
[[ $runid =~ ^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$ ]] ||
  fail "standalone run id is not a uuid4: '$runid'"
for r in 0 1 2 3; do
  f=$T/e/env.$r
  expect_eq "rank $r RANK" "$(envval "$f" RANK)" "$r"
  expect_eq "rank $r LOCAL_RANK" "$(envval "$f" LOCAL_RANK)" "$r"
  expect_eq "rank $r GROUP_RANK" "$(envval "$f" GROUP_RANK)" 0
  expect_eq "rank $r NODE_RANK" "$(envval "$f" NODE_RANK)" 0
  expect_eq "rank $r ROLE_RANK" "$(envval "$f" ROLE_RANK)" "$r"
  expect_eq "rank $r ROLE_NAME" "$(envval "$f" ROLE_NAME)" default
  expect_eq "rank $r LOCAL_WORLD_SIZE" "$(envval "$f" LOCAL_WORLD_SIZE)" 4
  expect_eq "rank $r WORLD_SIZE" "$(envval "$f" WORLD_SIZE)" 4
  expect_eq "rank $r GROUP_WORLD_SIZE" "$(envval "$f" GROUP_WORLD_SIZE)" 1
  expect_eq "rank $r ROLE_WORLD_SIZE" "$(envval "$f" ROLE_WORLD_SIZE)" 4
  expect_eq "rank $r MASTER_ADDR" "$(envval "$f" MASTER_ADDR)" 127.0.0.1
  expect_eq "rank $r MASTER_PORT" "$(envval "$f" MASTER_PORT)" "$port"
  expect_eq "rank $r RESTART_COUNT" \
    "$(envval "$f" TORCHELASTIC_RESTART_COUNT)" 0
  expect_eq "rank $r MAX_RESTARTS" "$(envval "$f" TORCHELASTIC_MAX_RESTARTS)" 0
  expect_eq "rank $r RUN_ID" "$(envval "$f" TORCHELASTIC_RUN_ID)" "$runid"
  expect_eq "rank $r USE_AGENT_STORE" \
    "$(envval "$f" TORCHELASTIC_USE_AGENT_STORE)" False
  expect_eq "rank $r TORCH_NCCL_ASYNC_ERROR_HANDLING" \
    "$(envval "$f" TORCH_NCCL_ASYNC_ERROR_HANDLING)" 1
  expect_eq "rank $r NCCL_ASYNC_ERROR_HANDLING" \
    "$(envval "$f" NCCL_ASYNC_ERROR_HANDLING)" 1
  expect_eq "rank $r OMP_NUM_THREADS" "$(envval "$f" OMP_NUM_THREADS)" 1
  expect_eq "rank $r inherited" "$(envval "$f" CDRUN_TEST_INHERITED)" yes
  expect_eq "rank $r TORCHELASTIC_SIGNALS_TO_HANDLE" \
    "$(envval "$f" TORCHELASTIC_SIGNALS_TO_HANDLE)" SIGTERM,SIGINT,SIGHUP,SIGQUIT
  ef=$(envval "$f" TORCHELASTIC_ERROR_FILE)
  [[ $ef == */${runid}_*/attempt_0/$r/error.json ]] ||
    fail "rank $r TORCHELASTIC_ERROR_FILE '$ef'"
done
# The OMP banner is printed once.
expect_eq "OMP banner count" "$(grep -c 'Setting OMP_NUM_THREADS' "$T/err")" 1

# --nnodes=1 static: rdzv_id, role, explicit master address and port;
# inherited values of OMP_NUM_THREADS and the NCCL variable win.
rm -f "$T"/e/*
OMP_NUM_THREADS=3 TORCH_NCCL_ASYNC_ERROR_HANDLING=0 PET_NPROC_PER_NODE=2 \
  "$CDRUN" --rdzv_id=job7 --role trainer --master_addr=10.1.2.3 \
  --master-port 29555 "$TW" env "$T/e" 2>"$T/err" || fail "static run"
wait_files "$T/e/env.*" 2 5
for r in 0 1; do
  f=$T/e/env.$r
  expect_eq "static RUN_ID" "$(envval "$f" TORCHELASTIC_RUN_ID)" job7
  expect_eq "static ROLE_NAME" "$(envval "$f" ROLE_NAME)" trainer
  expect_eq "static MASTER_ADDR" "$(envval "$f" MASTER_ADDR)" 10.1.2.3
  expect_eq "static MASTER_PORT" "$(envval "$f" MASTER_PORT)" 29555
  expect_eq "static OMP_NUM_THREADS" "$(envval "$f" OMP_NUM_THREADS)" 3
  expect_eq "static TORCH_NCCL" \
    "$(envval "$f" TORCH_NCCL_ASYNC_ERROR_HANDLING)" 0
  expect_eq "static WORLD_SIZE" "$(envval "$f" WORLD_SIZE)" 2
done
[ -f "$T/e/env.2" ] && fail "PET_NPROC_PER_NODE=2 started a third worker"
grep -q 'Setting OMP_NUM_THREADS' "$T/err" &&
  fail "OMP banner printed although OMP_NUM_THREADS was set"

# The static back end takes MASTER_ADDR:PORT from --rdzv_endpoint.
rm -f "$T"/e/*
"$CDRUN" --rdzv_endpoint='[::1]:29777' "$TW" env "$T/e" || fail "endpoint"
expect_eq "endpoint MASTER_ADDR" "$(envval "$T/e/env.0" MASTER_ADDR)" ::1
expect_eq "endpoint MASTER_PORT" "$(envval "$T/e/env.0" MASTER_PORT)" 29777
# A descriptor that cdrun's parent left open does not reach the workers
# (torchrun closes them too); 0, 1 and 2 do.
"$CDRUN" --no-python bash -c 'for f in 0 1 2 9 100; do
    [ -e /proc/$$/fd/$f ] && echo "$f"; done >"$0/fds.$RANK"; true' "$T" \
  9>"$T/nine" 100>"$T/hundred" 2>"$T/fds.err" || fail "fds: cdrun exited $?"
expect_eq "fds a worker inherits" "$(tr '\n' ' ' <"$T/fds.0")" "0 1 2 "
exit 0
