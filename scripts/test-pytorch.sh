#!/bin/bash
# test-pytorch.sh -- every PyTorch scenario against the newest torch from
# PyPI (or any Python with torch): DDP standalone, DDP on two nodes through
# rdzvd, @record failure summaries, torch's file timer (expires()), and
# --virtual-local-rank.  NOT part of CI: the venv is gigabytes.  CI keeps
# testing Debian's python3-torch through `make test`.
#
#   scripts/test-pytorch.sh                  venv in ~/.cache/cdrun-torch
#                                            (pip install torch; reused)
#   scripts/test-pytorch.sh --python PATH    use this interpreter instead
#                                            (e.g. /usr/bin/python3)
#   VENV=DIR scripts/test-pytorch.sh         the venv's place
#
# Exit status 0 when every scenario passed; the first failure stops it.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD

PY=
if [ "${1:-}" = --python ]; then
  PY=${2:?--python needs a path}
else
  VENV=${VENV:-$HOME/.cache/cdrun-torch}
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" || { echo "cannot create $VENV" >&2; exit 1; }
  fi
  # The newest torch; the CPU-only wheel index may be unreachable, so the
  # default index (CUDA wheels, several GB) is used.
  "$VENV/bin/pip" install --upgrade --quiet pip torch numpy ||
    { echo "pip install torch failed" >&2; exit 1; }
  PY=$VENV/bin/python
fi
"$PY" -c 'import torch; print("torch", torch.__version__)' || exit 1

make -j2 all build/release/tests/testworker >/dev/null || exit 1
export CDRUN=$ROOT/bin/cdrun RDZVD=$ROOT/bin/rdzvd
export TESTWORKER=$ROOT/build/release/tests/testworker
export PYTHON_EXEC=$PY
# lib.sh: $T (removed at exit), fail, expect_grep, start_rdzvd, agent, ...
. "$ROOT/tests/integ/lib.sh"

pass() { echo "PASS $*"; }

cat >"$T/ddp.py" <<'PY'
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(rank)
for step in range(20):
    x = torch.randn(16, 8, generator=g)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
    opt.step()
p = torch.cat([q.detach().flatten() for q in model.parameters()])
every = [torch.zeros_like(p) for _ in range(world)]
dist.all_gather(every, p)
assert all(torch.equal(every[0], e) for e in every), "ranks disagree"
if rank == 0:
    print(f"DDP OK world={world} sum={p.sum().item():.6f}", flush=True)
dist.destroy_process_group()
PY

cat >"$T/record.py" <<'PY'
import os
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if int(os.environ["RANK"]) == 1:
        raise ValueError("bad batch at step 7")

main()
PY

cat >"$T/timer.py" <<'PY'
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

cat >"$T/vlr.py" <<'PY'
import os
import torch
assert os.environ["LOCAL_RANK"] == "0", os.environ["LOCAL_RANK"]
want = os.environ["LOCAL_RANK_WANT"].split(",")[int(os.environ["RANK"])]
assert os.environ["CUDA_VISIBLE_DEVICES"] == want, os.environ["CUDA_VISIBLE_DEVICES"]
# With GPUs, each worker sees exactly one, as device 0.
if torch.cuda.is_available():
    assert torch.cuda.device_count() == 1
print("VLR OK", os.environ["RANK"], flush=True)
PY

# 1. DDP standalone, 2 workers.
"$CDRUN" --standalone --nproc-per-node=2 "$T/ddp.py" >"$T/out" 2>"$T/err" ||
  { cat "$T/err" >&2; fail "DDP standalone"; }
expect_grep '^DDP OK world=2 ' "$T/out"
pass "DDP standalone"

# 2. DDP on two nodes (agents) through rdzvd, c10d back end.
start_rdzvd
agent a --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d \
  --rdzv-endpoint="127.0.0.1:$RDZVD_PORT" --rdzv-id="pt$$" "$T/ddp.py"
agent b --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d \
  --rdzv-endpoint="127.0.0.1:$RDZVD_PORT" --rdzv-id="pt$$" "$T/ddp.py"
wait_exit "$AGENT_a" 170; rc_a=$RC
wait_exit "$AGENT_b" 170; rc_b=$RC
[ "$rc_a" = 0 ] && [ "$rc_b" = 0 ] ||
  { cat "$T/a.err" "$T/b.err" >&2; fail "DDP multi-node: exits $rc_a $rc_b"; }
cat "$T/a.out" "$T/b.out" >"$T/ab.out"
expect_grep '^DDP OK world=2 ' "$T/ab.out"
kill "$RDZVD_PID" && wait "$RDZVD_PID" 2>/dev/null
pass "DDP multi-node (rdzvd)"

# 3. @record: the error file reaches the summary.
"$CDRUN" --nproc-per-node=2 "$T/record.py" >"$T/out" 2>"$T/err" &&
  fail "@record: a failing run exited 0"
expect_grep "^$T/record.py FAILED$" "$T/err"
expect_grep 'ValueError: bad batch at step 7' "$T/err"
expect_grep '^  rank      : 1 \(local_rank: 1\)$' "$T/err"
expect_grep '^  error_file: /.*/error.json$' "$T/err"
pass "@record summary"

# 4. The file timer: torch's expires() unchanged.
TORCHELASTIC_ENABLE_FILE_TIMER=1 "$CDRUN" --nproc-per-node=2 "$T/timer.py" \
  >"$T/out" 2>"$T/err"
expect_eq "file timer exit status" "$?" 137
expect_grep "^cdrun: rank 1 exceeded its [0-9.]+ s deadline in 'all_reduce step 812'" "$T/err"
pass "file timer"

# 5. --virtual-local-rank.
CUDA_VISIBLE_DEVICES=3,1 LOCAL_RANK_WANT=3,1 "$CDRUN" --nproc-per-node=2 \
  --virtual-local-rank "$T/vlr.py" >"$T/out" 2>"$T/err" ||
  { cat "$T/err" >&2; fail "--virtual-local-rank"; }
expect_eq "virtual local rank workers" "$(grep -c '^VLR OK' "$T/out")" 2
pass "--virtual-local-rank"
echo "test-pytorch: every scenario passed ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
