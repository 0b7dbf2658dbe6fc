# scripts/bench/mpi_ready.sh -- sourced by the benchmarks that compare with
# Open MPI (allreduce, net).  mpi_ready DIR: true when mpirun runs and
# mpicc can compile a program that includes <mpi.h> (DIR: scratch).
# openmpi-bin alone brings mpicc and mpirun but not <mpi.h>: that is
# libopenmpi-dev.  What is missing is installed when this runs as root
# with apt-get; otherwise, or when that fails, it says which package is
# missing and returns false (the mpi fields are then NA).
mpi_compiles() {
  command -v mpicc >/dev/null && command -v mpirun >/dev/null || return 1
  printf '#include <mpi.h>\nint main(void) { return MPI_Init(0, 0); }\n' \
    >"$1/mpi_probe.c"
  mpicc "$1/mpi_probe.c" -o "$1/mpi_probe" >/dev/null 2>&1
}

mpi_ready() {
  local dir=$1 missing=()
  mpi_compiles "$dir" && return 0
  command -v mpirun >/dev/null || missing+=(openmpi-bin)
  missing+=(libopenmpi-dev)
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bench: installing ${missing[*]} (Open MPI, to compare with)" >&2
    apt-get update -qq >"$dir/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >>"$dir/apt.log" 2>&1
    mpi_compiles "$dir" && return 0
  fi
  echo "bench: Open MPI cannot be used: ${missing[*]} missing and not" \
    "installable here (see $dir/apt.log); the mpi fields are NA" >&2
  return 1
}
