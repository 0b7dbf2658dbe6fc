#!/bin/bash
# The wheel (`make wheel`, build/pkg/dist/*.whl, or $CDRUN_WHEEL) installs
# into a fresh venv with no compiler on PATH and runs jobs from there:
# cdrun and rdzvd are the venv's, need nothing but glibc and agree with
# VERSION; `python -m cdrun` runs the launcher and cdrun.libpg_dir() finds
# pg.h and libpg.so; a standalone job of 2 Python workers (an all-reduce
# through torch.distributed's gloo where Debian's torch is installed), and
# a 2-node c10d job through the wheel's rdzvd.
# integ-timeout: 240
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $CDRUN in   # the packages hold release builds, tested in that run
  */build/asan/*) skip "the packages are not sanitizer builds" ;;
esac
version=$(cat "$ROOT/VERSION")
whl=${CDRUN_WHEEL:-$(ls "$ROOT"/build/pkg/dist/cdrun-"$version"-py3-none-manylinux*_x86_64.whl 2>/dev/null | head -n 1)}
[ -n "$whl" ] && [ -f "$whl" ] ||
  skip "no wheel of cdrun $version (make wheel builds build/pkg/dist/*.whl)"
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || skip "no python3"
"$py" -c 'import venv, ensurepip' 2>/dev/null ||
  skip "$py cannot make a venv with pip (python3-venv)"

# A fresh venv (it sees Debian's torch, where installed), the wheel from
# the file alone: no index, no dependency.
"$py" -m venv --system-site-packages "$T/venv" >"$T/venv.log" 2>&1 ||
  { cat "$T/venv.log"; fail "python3 -m venv failed"; }
"$T/venv/bin/pip" install -q --no-index --no-deps --disable-pip-version-check \
  "$whl" >"$T/pip.log" 2>&1 || { cat "$T/pip.log"; fail "pip install $whl failed"; }

# PATH: the venv, and a folder of the few tools the workers use; no cc.
mkdir "$T/tools"
for t in sh bash env cat sleep python3 grep sed rm mkdir ls wc head; do
  ln -s "$(command -v "$t")" "$T/tools/$t"
done
export PATH=$T/venv/bin:$T/tools
for c in cc gcc clang; do
  ! command -v "$c" >/dev/null || fail "a compiler is on PATH: $(command -v "$c")"
done
expect_eq "cdrun on PATH" "$(command -v cdrun)" "$T/venv/bin/cdrun"
expect_eq "rdzvd on PATH" "$(command -v rdzvd)" "$T/venv/bin/rdzvd"
expect_eq "cdrun --version" "$(cdrun --version)" "cdrun $version"
expect_eq "rdzvd --version" "$(rdzvd --version)" "rdzvd $version"
expect_eq "python -m cdrun --version" "$(python3 -m cdrun --version)" "cdrun $version"
expect_eq "the wheel's version" \
  "$(python3 -c 'import cdrun; print(cdrun.__version__)')" "$version"
if [ -x /usr/bin/readelf ]; then
  for b in cdrun rdzvd; do
    need=$(/usr/bin/readelf -d "$T/venv/bin/$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    expect_eq "$b's shared libraries" "$need" "libc.so.6"
  done
fi
read -r inc lib < <(python3 -c 'import cdrun; print(*cdrun.libpg_dir())')
[ -f "$inc/pg.h" ] || fail "libpg_dir(): no pg.h in $inc"
[ -f "$lib/libpg.so" ] && [ -f "$lib/libpg.so.0" ] ||
  fail "libpg_dir(): no libpg.so(.0) in $lib"
# cdrun finds libpg beside its bin/ (live recovery loads it from there).
expect_eq "libpg beside bin/" "$(cd "$lib" && pwd -P)" "$(cd "$T/venv/lib" && pwd -P)"

cat >"$T/worker.py" <<'PY'
import os, sys
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
total = "no-torch"
try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None
if torch is not None:
    dist.init_process_group("gloo")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    total = "%g" % t.item()
    dist.destroy_process_group()
with open(os.path.join(sys.argv[1], "w.%d" % rank), "w") as f:
    f.write("%d %s\n" % (world, total))
PY
has_torch=0
python3 -c 'import torch.distributed' 2>/dev/null && has_torch=1

# check_out DIR WORLD: each rank wrote the world size and, with torch, the
# all-reduced sum 1 + 2 + ... + WORLD.
check_out() {
  local r want=no-torch
  [ "$has_torch" = 0 ] || want=$(($2 * ($2 + 1) / 2))
  for ((r = 0; r < $2; r++)); do
    [ -f "$1/w.$r" ] || fail "rank $r wrote nothing in $1"
    expect_eq "rank $r of $1" "$(cat "$1/w.$r")" "$2 $want"
  done
}

mkdir "$T/solo"
cdrun --standalone --nproc_per_node=2 "$T/worker.py" "$T/solo" \
  >"$T/solo.out" 2>"$T/solo.err" || { cat "$T/solo.err"; fail "standalone job failed"; }
check_out "$T/solo" 2

# Two nodes through the wheel's rdzvd.
: >"$T/rdzvd.log"
rdzvd --host 127.0.0.1 --port 0 2>>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
wait_grep '^rdzvd: listening on ' "$T/rdzvd.log" 20
port=$(sed -n 's/^rdzvd: listening on [^ ]*:\([0-9]*\) .*/\1/p' "$T/rdzvd.log")
mkdir "$T/two"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$port" --rdzv_id=wheel "$T/worker.py" "$T/two"
done
wait_exit "$AGENT_a" 120
[ "$RC" = 0 ] || { cat "$T/a.err"; fail "node a exited $RC"; }
wait_exit "$AGENT_b" 120
[ "$RC" = 0 ] || { cat "$T/b.err"; fail "node b exited $RC"; }
check_out "$T/two" 2
echo "t_wheel: torch=$has_torch"
expect_grep 'wheel' "$T/rdzvd.log"
exit 0
