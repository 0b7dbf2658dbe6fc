#!/bin/bash
# Note [static run nonce] (launcher/static_barrier.h): two runs of the same
# static job (same run id, master endpoint and secret) give their workers
# different job tokens, each the same on both nodes of its run, and a
# process holding the first run's CDRUN_JOB_TOKEN (a former node's worker)
# is refused by the second run's store.  Before, both runs derived the same
# HMAC of the run id and MASTER_ADDR:MASTER_PORT, and the former worker was
# let in.
. "$(dirname "$0")/lib.sh"

PGTEST=$(dirname "$TW")/pgtest
[ -x "$PGTEST" ] || fail "no pgtest binary at $PGTEST"
port=$(free_port)
secret=$T/secret
(umask 077 && echo "a-rendezvous-secret-of-some-length" >"$secret")
export PG_TIMEOUT=60

# static_run NAME WORKER...: both nodes of the job, backgrounded.
static_run() {
  local name=$1 k
  shift
  for k in 0 1; do
    agent "$name$k" --nnodes=2 --node_rank=$k --nproc_per_node=1 \
      --max_restarts=0 --master_addr=127.0.0.1 --master_port="$port" \
      --rdzv_conf="secret_file=$secret" --rdzv_id=same-job "$@"
  done
}

# both_ok NAME: both nodes of run NAME exit 0.
both_ok() {
  local k pid
  for k in 0 1; do
    pid=AGENT_$1$k
    wait_exit "${!pid}" 120
    [ "$RC" -eq 0 ] || { cat "$T/$1$k.err"; fail "$1$k exited $RC"; }
  done
}

# The worker: writes its CDRUN_JOB_TOKEN to DIR/tok.RANK; with PGTEST,
# then runs pgtest store (rank 0 serves the store on MASTER_PORT), rank 1
# only once DIR/go exists (the former worker has tried).
cat >"$T/worker.sh" <<'SH'
#!/bin/sh
d=$1
echo "$CDRUN_JOB_TOKEN" >"$d/tok.$RANK.tmp" && mv "$d/tok.$RANK.tmp" "$d/tok.$RANK"
[ -n "${2:-}" ] || exit 0
if [ "$RANK" = 1 ]; then
  i=0
  while [ ! -e "$d/go" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done
fi
exec "$2" store
SH
chmod +x "$T/worker.sh"

# ---- run 1 ----
mkdir "$T/r1"
static_run a --no_python "$T/worker.sh" "$T/r1"
both_ok a
tok1=$(cat "$T/r1/tok.0")
[ ${#tok1} -eq 64 ] || fail "run 1: no job token: '$tok1'"
expect_eq "run 1: rank 1's token" "$(cat "$T/r1/tok.1")" "$tok1"

# ---- run 2: the same job again ----
mkdir "$T/r2"
static_run b --no_python "$T/worker.sh" "$T/r2" "$PGTEST"
wait_files "$T/r2/tok.*" 2 120
tok2=$(cat "$T/r2/tok.0")
[ ${#tok2} -eq 64 ] || fail "run 2: no job token: '$tok2'"
expect_eq "run 2: rank 1's token" "$(cat "$T/r2/tok.1")" "$tok2"
[ "$tok1" != "$tok2" ] || fail "run 2 got run 1's job token $tok1"

# The former worker: run 1's token, as rank 1, at run 2's store.  Rank 0's
# store may not listen yet: the client waits for it (connection refused is
# retried), then its token is refused.
rc=0
env RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" CDRUN_JOB_TOKEN="$tok1" \
  PG_TIMEOUT=60 timeout 90 "$PGTEST" store >"$T/former.out" 2>"$T/former.err" || rc=$?
[ "$rc" -ne 0 ] || fail "run 1's token was let into run 2's store"
expect_grep "refused our job token" "$T/former.err"
touch "$T/r2/go"
both_ok b
expect_grep "pgtest store: rank 0 of 2 .*: [0-9]+ checks, 0 failed" "$T/b0.err"
exit 0
