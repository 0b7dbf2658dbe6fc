#!/bin/bash
# install-deps.sh -- installs the Debian packages cdrun needs to build and
# test.  Idempotent: installs only what is missing; runs apt-get update
# only when something must be installed.
#
#   scripts/install-deps.sh          build + test dependencies
#   scripts/install-deps.sh --bench  also what the benchmarks compare with
set -euo pipefail

pkgs=(build-essential pkg-config libuv1-dev libcjson-dev libcurl4-openssl-dev
      check python3 procps)
# rdzvd's metrics test parses /metrics with the real Prometheus parser.
pkgs+=(python3-prometheus-client)
# The unit suites check proto/util/sha256.c against OpenSSL's libcrypto
# (cdrun and rdzvd link no crypto library).
pkgs+=(libssl-dev)
# The cluster tests (t_slurm, t_hosts_ssh, t_launch_mpirun) run the real
# Slurm, munge, OpenSSH and Open MPI; they skip when these are absent.
pkgs+=(slurmctld slurmd slurm-client munge openssh-server openssh-client
       openmpi-bin iproute2 util-linux)
# The etcd back end's tests: real etcd servers, TLS certificates, curl for
# health checks.
pkgs+=(etcd-server etcd-client openssl curl)
# The PyTorch scenarios (t_python, t_filetimer, t_foreign): Debian's torch.
pkgs+=(python3-torch)
if [ "${1:-}" = "--bench" ]; then
  pkgs+=(time)
  # scripts/bench/net: iperf3's ceiling, Open MPI over TCP.
  pkgs+=(iperf3 openmpi-bin libopenmpi-dev)
  # torchrun's etcd back end (bench/rendezvous part 3)
  pkgs+=(python3-etcd)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  "${missing[@]}"
