# live_train_lib.sh -- what the t_live_train*.sh scenarios share
# (sourced after lib.sh): train_mlp's small job, a runner, the checks
# of a run against the fault-free one, and the holding and accuracy
# helpers of the elastic ones.
use_train_mlp

# train NAME CDRUN-ARGS... -- TRAIN-ARGS...: 4 workers, checkpoints in
# $T/NAME.ckpt, parameters in $T/NAME.params, output in $T/NAME.log;
# fails unless cdrun exits 0.
train() {
  local name=$1 cargs=()
  shift
  while [ "$1" != -- ]; do cargs+=("$1"); shift; done
  shift
  "$CDRUN" --standalone --nproc_per_node=4 "${cargs[@]}" "$TRAIN" \
    "${SMALL[@]}" --ckpt-dir "$T/$name.ckpt" --params-out "$T/$name.params" \
    "$@" >"$T/$name.log" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || { cat "$T/$name.log" >&2; fail "$name: cdrun exited $rc"; }
}

# final NAME: the run's final line from "step" on.
final() {
  local s
  s=$(sed -n 's/^final: //p' "$T/$1.log")
  [ -n "$s" ] || { cat "$T/$1.log" >&2; fail "$1: no final line"; }
  echo "$s"
}

# same_as_ref NAME: the final line and the parameters' bytes are the
# fault-free run's.
same_as_ref() {
  expect_eq "$1: final line" "$(final "$1")" "$(final ref)"
  cmp -s "$T/$1.params" "$T/ref.params" ||
    fail "$1: the parameters differ from the fault-free run's"
}

# starts NAME RANK: the "started" lines of RANK, "step/restart" each.
starts() {
  sed -En "s/^live: rank $2 pid [0-9]+ started at step ([0-9]+) \(world 4, restart ([0-9]+)\)$/\1\/\2/p" \
    "$T/$1.log" | tr '\n' ' '
}

# ref: the fault-free run, in restart mode.
ref() {
  train ref --
  expect_grep '^train_mlp: 4 workers ' "$T/ref.log"
}

# holding N FILES...: waits until N workers say they hold.
holding() {
  local n=$1 i
  shift
  for ((i = 0; i < 1200; i++)); do
    [ "$(cat "$@" | grep -c ': holding at step ')" -ge "$n" ] && return 0
    sleep 0.05
  done
  cat "$@" >&2
  fail "timed out waiting for $n workers holding"
}

# acc FILE: the final test accuracy; near A B: within 0.3 points.
acc() {
  sed -En 's/^final: step [0-9]+ test-acc ([0-9.]+)% .*/\1/p' "$1"
}
near() {
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && d <= 0.3 && d >= -0.3) }'
}
