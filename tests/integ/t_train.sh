#!/bin/bash
# examples/train_mlp under cdrun: 1 and 4 workers over one global batch,
# and the reducer and --no-reducer, end at the same parameters (and
# --no-overlap at the reducer's very bits); a worker
# SIGKILLed mid-run is restarted, resumes from the checkpoint and ends
# bitwise equal to an uninterrupted run; a run checkpointed by 2 workers
# finishes with 4; bad flags and a checkpoint written for other flags
# exit 2.
. "$(dirname "$0")/lib.sh"

use_train_mlp

# train NAME NPROC ARGS...: cdrun with NPROC workers, checkpoints in
# $T/NAME.ckpt, output in $T/NAME.log; fails unless cdrun exits 0.
train() {
  local name=$1 n=$2
  shift 2
  "$CDRUN" --standalone --nproc_per_node="$n" "$@" >"$T/$name.log" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || { cat "$T/$name.log" >&2; fail "$name: cdrun exited $rc"; }
}

# sums NAME: "sum abs l2" from the run's final line.
sums() {
  local s
  s=$(sed -En 's/^final: .* params: sum=(.*) abs=(.*) l2=(.*)$/\1 \2 \3/p' \
        "$T/$1.log")
  [ -n "$s" ] || { cat "$T/$1.log" >&2; fail "$1: no final line"; }
  echo "$s"
}

# close A B: the checksums agree within 1e-4 (sum relative to abs).
close() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    split(a, x, " "); split(b, y, " "); t = 1e-4
    d1 = x[1] - y[1]; d2 = x[2] - y[2]; d3 = x[3] - y[3]
    exit !(d1 * d1 <= (t * x[2]) ^ 2 && d2 * d2 <= (t * x[2]) ^ 2 &&
           d3 * d3 <= (t * x[3]) ^ 2) }'
}

# 1 worker and 4: the same math per step, up to rounding.
train one 1 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/one.ckpt"
train four 4 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/four.ckpt"
expect_grep '^train_mlp: 4 workers .* global batch 128 \(32 per worker\)' \
  "$T/four.log"
expect_grep '^epoch 3/3: loss [0-9.]+ train-acc' "$T/four.log"
close "$(sums one)" "$(sums four)" ||
  fail "1 vs 4 workers: $(sums one) vs $(sums four)"
# The reducer averages as one all-reduce per gradient does.
train serial 4 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/serial.ckpt" \
  --no-reducer
close "$(sums serial)" "$(sums four)" ||
  fail "reducer vs --no-reducer: $(sums four) vs $(sums serial)"
# It learns: the loss falls epoch after epoch.
awk '/^epoch/ { l = $4 + 0; if (n++ && l >= prev) bad = 1; prev = l }
     END { exit bad || n != 3 }' "$T/four.log" ||
  fail "the loss did not fall: $(grep ^epoch "$T/four.log")"

# Rank 2 dies at step 45: cdrun restarts the group, which resumes at the
# checkpoint of step 40 and ends exactly where the uninterrupted run did.
train kill 4 --max_restarts=1 "$TRAIN" "${SMALL[@]}" \
  --ckpt-dir "$T/kill.ckpt" --die-at-step 45 --die-rank 2
# Its peers fail (ECONNRESET) right after it: on a busy machine cdrun may
# reap one of them first, and rank 2 is then listed as failing too.
expect_grep 'worker 2 \(local rank 2, pid [0-9]+\) (was killed by SIGKILL|failed too \(signal 9\))' \
  "$T/kill.log"
expect_grep 'restarting it \(1 of 1 restarts used\)' "$T/kill.log"
expect_grep '^resumed from step 40 ' "$T/kill.log"
expect_eq "killed and resumed vs uninterrupted" "$(sums kill)" "$(sums four)"

# Elastic: 2 workers run 45 steps (the last checkpoint is the end); 4
# workers continue from it and match the uninterrupted run.
train half 2 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/el.ckpt" --steps 45
expect_grep '^final: step 45 ' "$T/half.log"
train rest 4 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/el.ckpt"
expect_grep '^resumed from step 45 .*written by 2 workers; now 4' \
  "$T/rest.log"
expect_grep '^final: step 96 ' "$T/rest.log"
close "$(sums rest)" "$(sums four)" ||
  fail "2 then 4 workers vs 4: $(sums rest) vs $(sums four)"

# A deeper model (--layers 4: 4 hidden layers, 5 backward stages): 1 and
# 4 workers agree, and its buckets are several (the gradients of the
# later layers are all-reduced while the earlier ones are computed).
train deep1 1 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/deep1.ckpt" --layers 4
train deep4 4 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/deep4.ckpt" --layers 4
expect_grep '^train_mlp: 4 workers .* MLP 64-64-64-64-64-10 ' "$T/deep4.log"
close "$(sums deep1)" "$(sums deep4)" ||
  fail "--layers 4, 1 vs 4 workers: $(sums deep1) vs $(sums deep4)"
# --no-overlap (scripts/bench/overlap's serial baseline): the same buckets
# all-reduced after the backward pass, so the very same bits.
train late4 4 "$TRAIN" "${SMALL[@]}" --ckpt-dir "$T/late4.ckpt" --layers 4 \
  --no-overlap
expect_grep 'gradients: reducer, [0-9]+ buckets? after backward$' \
  "$T/late4.log"
expect_eq "--no-overlap vs the reducer" "$(sums late4)" "$(sums deep4)"
[ "$(sums deep4)" != "$(sums four)" ] || fail "--layers 4 trained the default model"
expect_grep 'stages_ms=[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+,[0-9.]+$' "$T/deep4.log"
"$CDRUN" --standalone --nproc_per_node=1 "$TRAIN" "${SMALL[@]}" \
  --ckpt-dir "$T/deep4.ckpt" >"$T/deepother.log" 2>&1
expect_eq "checkpoint for other --layers: exit" "$?" 2
expect_grep 'written for other flags \(--layers 4 there, 2 here\)' \
  "$T/deepother.log"
"$TRAIN" --layers 2 --device-compute --backward-ms 1,2 >"$T/bms.log" 2>&1
expect_eq "--backward-ms count: exit" "$?" 2
expect_grep 'backward-ms has 2 times; --layers 2 has 3 backward stages' \
  "$T/bms.log"

# Errors: exit 2 with a sentence.
"$CDRUN" --standalone --nproc_per_node=1 "$TRAIN" "${SMALL[@]}" \
  --ckpt-dir "$T/four.ckpt" --hidden 32 >"$T/other.log" 2>&1
expect_eq "checkpoint for other flags: exit" "$?" 2
expect_grep 'written for other flags \(--hidden 64 there, 32 here\)' \
  "$T/other.log"
"$CDRUN" --standalone --nproc_per_node=3 "$TRAIN" "${SMALL[@]}" \
  --ckpt-dir "$T/three.ckpt" >"$T/three.log" 2>&1
expect_eq "global batch not divisible: exit" "$?" 2
expect_grep '\-\-global-batch: 128 is not divisible by WORLD_SIZE 3' \
  "$T/three.log"
"$TRAIN" --no-overlap --no-reducer >"$T/pick.log" 2>&1
expect_eq "--no-overlap --no-reducer: exit" "$?" 2
expect_grep 'no-reducer, --no-overlap and --no-comm: pick one' "$T/pick.log"
"$TRAIN" --epochs two >"$T/flag.log" 2>&1
expect_eq "bad flag: exit" "$?" 2
expect_grep "^train_mlp: --epochs: 'two' is not an integer" "$T/flag.log"

# A checkpoint that cannot be written (a full disk: a 4 KiB tmpfs in a
# mount namespace of its own) fails the run and leaves no temporary file.
if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null; then
  mkdir "$T/full"
  unshare -m sh -c 'mount -t tmpfs -o size=4k tmpfs "$0" || exit 99
    "$@" --ckpt-dir "$0/ck"; rc=$?; ls -A "$0/ck" >"$0.ls"; exit $rc' \
    "$T/full" "$TRAIN" "${SMALL[@]}" >"$T/full.log" 2>&1
  rc=$?
  [ "$rc" -ne 99 ] || fail "cannot mount a tmpfs: $(cat "$T/full.log")"
  expect_eq "full disk: exit" "$rc" 1
  expect_grep 'cannot write the checkpoint.*No space left on device' "$T/full.log"
  expect_eq "full disk: files left" "$(cat "$T/full.ls")" ""
fi
exit 0
