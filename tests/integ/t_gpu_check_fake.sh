#!/bin/bash
# scripts/gpu-check (issues 23, 31: the first real GPU's one command) end
# to end on the fake GPU of tests/fakecuda/, which does NCCL 2.28's split
# and shrink as its source does (the handle written after the call, the
# parent in progress meanwhile), with short sizes: the version checks, the
# build, the NCCL unit suite on one fake device, every collective in and
# out of place on the world, a pg_split and a pg_new_group sub-group with
# 1 and 2 ranks under the real cdrun, the busbw table against a raw NCCL
# loop, the one-rank split and shrink refusal, and live recovery's
# shrink timing (4 ranks); its summary line must say correctness=ok.
# integ-timeout: 360
. "$(dirname "$0")/lib.sh"

REPO=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$(dirname "$(dirname "$TW")")/fake-nccl/tests/pgtest" ] ||
  skip "libpg built without NCCL headers: no fake GPU build"
GPU_CHECK_FAKE=1 "$REPO/scripts/gpu-check" \
  >"$T/out" 2>"$T/err" || { cat "$T/out" "$T/err" >&2; fail "gpu-check failed"; }
expect_grep '^gpu-check device=fake correctness=ok ratio_1GiB=[0-9.]*$' "$T/out"
expect_grep '^nccl_allreduce gpus=1 bytes=1048576 libpg_busbw=' "$T/out"
expect_grep 'NCCL unit suite' "$T/err"
expect_grep 'gpu-check:    100%: Checks: [1-9][0-9]*, Failures: 0, Errors: 0' "$T/err"
expect_grep 'nccl_check ranks=1 checks=[0-9]* failures=0 groups=world,split,new_group' "$T/err"
expect_grep 'nccl_check ranks=2 checks=[0-9]* failures=0 groups=world,split,new_group' "$T/err"
expect_grep '^nccl_shrink ranks=1 split_ms=[0-9.]* shrink=refused failures=0$' "$T/out"
expect_grep '^nccl_shrink ranks=4 shrink_ms=[0-9.]* revoke_shrink_ms=[0-9.]* init_ms=[0-9.]* failures=0$' "$T/out"
exit 0
