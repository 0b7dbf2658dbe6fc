#!/bin/bash
# run-main.sh -- the README's first command: install, build, and run the
# main job: a real data-parallel training run (examples/train_mlp.c) on
# four workers under cdrun, with restarts allowed.  Each run trains from
# scratch in a fresh checkpoint directory (CKPT_DIR to choose one: a
# second run on the same directory resumes from its checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -j2
ckpt=${CKPT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/cdrun-train.XXXXXX")}
echo "run-main: checkpoints in $ckpt"
status=0
bin/cdrun --standalone --nproc_per_node=4 --max_restarts=3 \
  bin/train_mlp --ckpt-dir "$ckpt" "$@" || status=$?
[ -z "${CKPT_DIR:-}" ] && rm -rf "$ckpt"
exit $status
