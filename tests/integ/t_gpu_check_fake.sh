#!/bin/bash
# scripts/gpu-check (issue 23: the first real GPU's one command) end to
# end on the fake GPU of tests/fakecuda/ with short sizes: the build
# check, every collective with 1 and 2 ranks under the real cdrun, and
# the busbw table against a raw NCCL loop, live recovery's shrink timing
# (4 ranks); its summary line must say correctness=ok.  The unit suite step is skipped (make check runs it).
# integ-timeout: 240
. "$(dirname "$0")/lib.sh"

REPO=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$(dirname "$(dirname "$TW")")/fake-nccl/tests/pgtest" ] ||
  skip "libpg built without NCCL headers: no fake GPU build"
GPU_CHECK_FAKE=1 GPU_CHECK_SKIP_UNIT=1 "$REPO/scripts/gpu-check" \
  >"$T/out" 2>"$T/err" || { cat "$T/out" "$T/err" >&2; fail "gpu-check failed"; }
expect_grep '^gpu-check device=fake correctness=ok ratio_1GiB=[0-9.]*$' "$T/out"
expect_grep '^nccl_allreduce gpus=1 bytes=1048576 libpg_busbw=' "$T/out"
expect_grep 'nccl_check ranks=1 checks=[0-9]* failures=0' "$T/err"
expect_grep 'nccl_check ranks=2 checks=[0-9]* failures=0' "$T/err"
expect_grep '^nccl_shrink ranks=4 shrink_ms=[0-9.]* revoke_shrink_ms=[0-9.]* init_ms=[0-9.]* failures=0$' "$T/out"
exit 0
