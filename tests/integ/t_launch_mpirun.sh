#!/bin/bash
# Per-process launch without cdrun: `mpirun -n 4 ./pglaunch` (real Open
# MPI, one host) initialises libpg from OMPI_COMM_WORLD_* and all-reduces;
# -x MASTER_ADDR/MASTER_PORT win; across hosts without MASTER_ADDR the
# error says what to pass.  (srun -n: see t_slurm.sh.)
. "$(dirname "$0")/lib.sh"

PGL=$(dirname "$TW")/pglaunch
[ -x "$PGL" ] || fail "no pglaunch binary at $PGL"
command -v mpirun >/dev/null || skip "mpirun (Open MPI) is not installed"
mpirun --version 2>/dev/null | grep -q "Open MPI" ||
  skip "mpirun is not Open MPI's"

check_ids() {   # check_ids DIR N
  local r line
  for ((r = 0; r < $2; r++)); do
    [ -f "$1/id.$r" ] || { cat "$T/err" >&2; fail "rank $r wrote nothing"; }
    read -r -a line <"$1/id.$r"
    expect_eq "rank $r rank" "${line[0]}" "$r"
    expect_eq "rank $r world" "${line[1]}" "$2"
    expect_eq "rank $r sum" "${line[2]}" "$(($2 * ($2 - 1) / 2))"
  done
  [ -f "$1/id.$2" ] && fail "a rank beyond the world ran"
  return 0
}

# Nothing of cdrun's or torchrun's environment may leak in.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
export PG_TIMEOUT=60

mkdir "$T/a"
timeout 120 mpirun -n 4 --oversubscribe --allow-run-as-root "$PGL" "$T/a" \
  >"$T/out" 2>"$T/err" || { rc=$?; cat "$T/err" >&2; fail "mpirun -n 4 exited $rc"; }
check_ids "$T/a" 4

# Explicit MASTER_ADDR/MASTER_PORT (mpirun -x) win.
mkdir "$T/b"
port=$(free_port)
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 mpirun -n 3 \
  --oversubscribe --allow-run-as-root -x MASTER_ADDR -x MASTER_PORT \
  "$PGL" "$T/b" >"$T/out" 2>"$T/err" ||
  { rc=$?; cat "$T/err" >&2; fail "mpirun -x MASTER_ADDR exited $rc"; }
check_ids "$T/b" 3

# Ranks spread over several hosts: Open MPI does not say where rank 0 is.
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 \
  OMPI_COMM_WORLD_LOCAL_SIZE=2 "$PGL" "$T/b" >"$T/out" 2>"$T/err" &&
  fail "a multi-host Open MPI rank started without MASTER_ADDR"
expect_grep 'mpirun across hosts: -x MASTER_ADDR' "$T/err"
exit 0
