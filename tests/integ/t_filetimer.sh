#!/bin/bash
# Hang detection with torch's file timer: TORCHELASTIC_ENABLE_FILE_TIMER=1
# makes cdrun serve a FIFO (TORCHELASTIC_TIMER_FILE) where workers put
# deadlines; a worker past its deadline gets the request's signal and is a
# failure with a summary line naming its rank, deadline and scope.  The C
# test worker speaks the protocol (junk first, which is only warned about);
# a real PyTorch worker uses FileTimerClient / expires() unchanged.
. "$(dirname "$0")/lib.sh"

# Without the variable there is no FIFO and no TORCHELASTIC_TIMER_FILE.
"$CDRUN" --no-python bash -c 'echo "${TORCHELASTIC_TIMER_FILE-unset}"' \
  >"$T/out" 2>"$T/err" || fail "plain run"
expect_eq "timer file without the variable" "$(cat "$T/out")" unset

# C worker: rank 1 hangs in 'all_reduce step 812' with a 1 s deadline;
# ranks 0 and 2 take and release a 600 s one.
TORCHELASTIC_ENABLE_FILE_TIMER=1 TORCHELASTIC_TIMER_FILE=$T/fifo \
  bg_cdrun --nproc_per_node=3 "$TW" timer 1 'all_reduce step 812'
wait_exit "$BG" 120
expect_eq "exit status (SIGKILL)" "$RC" 137
expect_grep "^cdrun: rank 1 exceeded its [0-9.]+ s deadline in 'all_reduce step 812'; sending SIGKILL to pid [0-9]+$" "$T/err"
expect_grep "^  traceback : rank 1 exceeded its [0-9.]+ s deadline in 'all_reduce step 812'$" "$T/err"
expect_grep '^  rank      : 1 \(local_rank: 1\)$' "$T/err"
expect_grep '^  exitcode  : -9 ' "$T/err"
expect_grep "^cdrun: file timer: ignoring a malformed request \(not a JSON object\): 'not json'$" "$T/err"
expect_grep "'pid' must be a process id > 0" "$T/err"
grep -q 'rank [02] exceeded' "$T/err" && fail "a healthy rank was killed"
[ -e "$T/fifo" ] && fail "the FIFO was left behind"

# A real PyTorch worker, unchanged torch code.
py=
for c in python3 /usr/bin/python3; do
  if "$c" -c 'import torch.distributed.elastic.timer' 2>/dev/null; then
    py=$(command -v "$c"); break
  fi
done
[ -n "$py" ] || skip "no Python with torch (python3-torch): C worker checked only"
cat >"$T/hang.py" <<'PY'
import os, time
import torch.distributed.elastic.timer as timer

timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
if int(os.environ["RANK"]) == 1:
    with timer.expires(after=2, scope="all_reduce step 812"):
        time.sleep(600)
else:
    with timer.expires(after=600, scope="fine"):
        pass
PY
TORCHELASTIC_ENABLE_FILE_TIMER=1 PYTHON_EXEC=$py \
  bg_cdrun --nproc_per_node=2 "$T/hang.py"
wait_exit "$BG" 170
expect_eq "python exit status" "$RC" 137
expect_grep "^cdrun: rank 1 exceeded its [0-9.]+ s deadline in 'all_reduce step 812'" "$T/err"
expect_grep "^  traceback : rank 1 exceeded its [0-9.]+ s deadline" "$T/err"
exit 0
