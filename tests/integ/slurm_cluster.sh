#!/bin/bash
# slurm_cluster.sh -- sourced after lib.sh: starts a real Slurm test cluster
# (Debian's slurmctld/slurmd 22.05 and munge) and stops it on exit.
# slurmctld runs in its own network namespace, one slurmd per namespace
# ("nodes" n1 and n2, each with its own hostname, address and /etc/hosts,
# joined by a bridge in a switch namespace), two fake GPUs per node (gres
# on character devices).  Skips (exit 77) without root, ip netns,
# nsenter/unshare, slurm or munge.  Provides: ADDR[ctl|n1|n2], SLURM_CONF
# (exported), inctl CMD... (runs CMD in the controller's namespace, where
# srun and scontrol work), CREATED_NS, DAEMONS, id.

. "$(dirname "${BASH_SOURCE[0]}")/nsbed_lib.sh"
DAEMONS=()     # pid files of daemons we started

nsbed_stop_daemons() {
  local f
  if [ -n "${DEBUG_SLURM_TEST:-}" ]; then
    tail -n 20 "$T"/*.log "$T"/*.err >&2
  fi
  for f in "${DAEMONS[@]+"${DAEMONS[@]}"}"; do
    [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
  done
}
trap nsbed_cleanup EXIT

[ "$(id -u)" -eq 0 ] || skip "a Slurm test cluster needs root (uid $(id -u))"
for c in ip nsenter unshare; do
  command -v $c >/dev/null || skip "$c is not installed"
done
for c in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged; do
  [ -x $c ] || skip "$c is not installed (slurmctld, slurmd, munge)"
done
for c in srun sbatch scancel squeue sinfo scontrol mungekey; do
  command -v $c >/dev/null || skip "$c is not installed (slurm-client, munge)"
done
nsbed_start 215

CTL_HOST=$(hostname -s)
declare -A ADDR=([ctl]=$NET.1 [n1]=$NET.11 [n2]=$NET.12)
{
  echo "127.0.0.1 localhost"
  echo "${ADDR[ctl]} $CTL_HOST"
  echo "${ADDR[n1]} n1"
  echo "${ADDR[n2]} n2"
} >"$T/hosts"

for n in ctl n1 n2; do nsbed_host "$n"; done

# ---- munge --------------------------------------------------------------
mkdir -p "$T/munge" && chmod 755 "$T" "$T/munge"
mungekey -c -k "$T/munge/munge.key" -b 1024 2>"$T/munge.err" ||
  dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 600 "$T/munge/munge.key"
/usr/sbin/munged --socket="$T/munge/sock" --key-file="$T/munge/munge.key" \
  --pid-file="$T/munge/munged.pid" --seed-file="$T/munge/seed" \
  --log-file="$T/munge.log" --force 2>>"$T/munge.err" ||
  fail "munged did not start: $(cat "$T/munge.err" "$T/munge.log" 2>/dev/null)"
DAEMONS+=("$T/munge/munged.pid")

# ---- slurm.conf ---------------------------------------------------------
CTL_PORT=6917; D_PORT=6918   # inside private namespaces only
mkdir -p "$T/state" "$T/spool/n1" "$T/spool/n2" "$T/dev"
for n in n1 n2; do
  for g in 0 1; do mknod "$T/dev/$n-gpu$g" c 1 3 || fail "mknod"; done
done
cat >"$T/slurm.conf" <<CONF
ClusterName=cdrun$id
SlurmctldHost=$CTL_HOST(${ADDR[ctl]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$T/munge/sock
CredType=cred/munge
SlurmctldPort=$CTL_PORT
SlurmdPort=$D_PORT
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool/%n
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd-%n.pid
SlurmctldLogFile=$T/slurmctld.log
SlurmdLogFile=$T/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=300
KillWait=30
MpiDefault=none
SwitchType=switch/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName=n1 NodeAddr=${ADDR[n1]} CPUs=4 Gres=gpu:2 State=UNKNOWN
NodeName=n2 NodeAddr=${ADDR[n2]} CPUs=4 Gres=gpu:2 State=UNKNOWN
PartitionName=p Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
cat >"$T/gres.conf" <<CONF
NodeName=n1 Name=gpu File=$T/dev/n1-gpu[0-1]
NodeName=n2 Name=gpu File=$T/dev/n2-gpu[0-1]
CONF
export SLURM_CONF=$T/slurm.conf
inctl() { ip netns exec "cdrun-$id-ctl" "$@"; }

inctl /usr/sbin/slurmctld -f "$T/slurm.conf" -i 2>"$T/slurmctld.err" ||
  fail "slurmctld did not start: $(cat "$T/slurmctld.err" "$T/slurmctld.log" 2>/dev/null | tail -5)"
DAEMONS+=("$T/slurmctld.pid")
for n in n1 n2; do
  cp "$T/hosts" "$T/hosts-$n"
  nsenter --net="/run/netns/cdrun-$id-$n" unshare -u -m sh -c \
    "mount --bind '$T/hosts-$n' /etc/hosts && hostname $n && exec /usr/sbin/slurmd -f '$T/slurm.conf' -N $n" \
    2>"$T/slurmd-$n.err" || fail "slurmd $n did not start: $(cat "$T/slurmd-$n.err")"
  DAEMONS+=("$T/slurmd-$n.pid")
done
for ((i = 0; i < 300; i++)); do
  st=$(inctl sinfo -h -N -o '%N %T' 2>/dev/null | sort | tr '\n' ' ')
  [ "$st" = "n1 idle n2 idle " ] && break
  sleep 0.1
done
[ "$st" = "n1 idle n2 idle " ] ||
  fail "nodes not idle: '$st': $(tail -5 "$T/slurmctld.log" "$T"/slurmd-n*.log)"
