#!/bin/bash
# One command for many hosts: `cdrun --hostfile=FILE` on a head node starts
# one agent per host over real OpenSSH.  Each "host" is a network namespace
# with its own sshd (key auth with keys made here, a per-test ssh config
# passed as CDRUN_SSH="ssh -F ..."; ~/.ssh is never read), its address and
# an /etc/hosts naming the others (ip netns exec's /etc/netns overlay).
# Checked: a 2-host job with slots and prefixed output; an unreachable host
# (clear error, the other host's agent stopped); Ctrl-C on the head stops
# every remote worker with SIGTERM; the head SIGKILLed leaves no remote
# orphan (stdin watchdog); a host's agent killed mid-job is an elastic
# event for the other; a host's link cut mid-run is named within the
# keepalive window (exit 75) and its agent stops for want of the head's
# beat; Ctrl-C then names the hosts it waits for.  Needs root, ip netns,
# sshd; skips otherwise.
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/nsbed_lib.sh"
PORT=2222                     # inside private namespaces only

nsbed_stop_daemons() {
  local ns f
  if [ -n "${DEBUG_SSH_TEST:-}" ]; then
    tail -n 30 "$T"/*.err "$T"/*.log >&2
    for ns in "${CREATED_NS[@]+"${CREATED_NS[@]}"}"; do
      echo "== $ns"; ip netns pids "$ns" | xargs -r ps -o pid,ppid,stat,cmd -p
    done >&2
  fi
  for f in "$T"/sshd-*.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
}
trap nsbed_cleanup EXIT

[ "$(id -u)" -eq 0 ] || skip "network namespaces and sshd need root (uid $(id -u))"
[ -x /usr/sbin/sshd ] || skip "openssh-server (/usr/sbin/sshd) is not installed"
command -v ssh >/dev/null && command -v ssh-keygen >/dev/null ||
  skip "openssh-client is not installed"
nsbed_start 214

# Names: the head "hd" and hosts h1, h2; h3 is in the hostfile and /etc/hosts
# but nobody has its address.
declare -A ADDR=([hd]=$NET.10 [h1]=$NET.11 [h2]=$NET.12 [h3]=$NET.13)
for n in hd h1 h2 h3; do echo "${ADDR[$n]} $n"; done >"$T/hosts"
echo "127.0.0.1 localhost" >>"$T/hosts"

for n in hd h1 h2; do nsbed_host "$n"; done

# ---- keys, sshd per host, the client's config ------------------------------
ssh-keygen -q -t ed25519 -N '' -f "$T/hostkey" || fail "ssh-keygen host key"
ssh-keygen -q -t ed25519 -N '' -f "$T/userkey" || fail "ssh-keygen user key"
cp "$T/userkey.pub" "$T/authorized_keys"
echo "* $(cut -d' ' -f1,2 "$T/hostkey.pub")" >"$T/known_hosts"
cat >"$T/ssh_config" <<CONF
Host *
  User root
  Port $PORT
  IdentityFile $T/userkey
  IdentitiesOnly yes
  UserKnownHostsFile $T/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
CONF
mkdir -p /run/sshd    # sshd's privilege separation directory
for n in h1 h2; do
  cat >"$T/sshd-$n.conf" <<CONF
ListenAddress ${ADDR[$n]}:$PORT
HostKey $T/hostkey
PidFile $T/sshd-$n.pid
AuthorizedKeysFile $T/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
LogLevel ERROR
CONF
  ip netns exec "cdrun-$id-$n" /usr/sbin/sshd -f "$T/sshd-$n.conf" \
    -E "$T/sshd-$n.log" || fail "sshd on $n did not start: $(cat "$T/sshd-$n.log")"
done
SSHCMD="ssh -F $T/ssh_config"
inhead() { ip netns exec "cdrun-$id-hd" "$@"; }
for n in h1 h2; do
  out=$(inhead timeout 20 $SSHCMD "$n" hostname -I 2>&1) ||
    fail "ssh to $n does not work: $out"
done

# node_of PID: the host (namespace) the process runs in.
node_of() {
  local want got n
  want=$(readlink "/proc/$1/ns/net" 2>/dev/null) || return 1
  for n in h1 h2; do
    got=$(ip netns exec "cdrun-$id-$n" readlink /proc/self/ns/net)
    [ "$got" = "$want" ] && { echo "$n"; return 0; }
  done
  return 1
}

head_bg() {   # head_bg NAME ARGS...: the head node's cdrun in the background
  local name=$1
  shift
  # ip netns exec and env exec: $! is the head cdrun's own pid.
  ip netns exec "cdrun-$id-hd" env CDRUN_SSH="$SSHCMD" "$CDRUN" "$@" \
    >"$T/$name.out" 2>"$T/$name.err" &
  HEAD=$!
  STARTED+=("$HEAD")
}

# ---- 1. two hosts, slots, prefixed output, the job's status ---------------
cat >"$T/hostfile" <<HF
# the training hosts
h1 slots=2   # two workers here
h2 slots=1

HF
mkdir "$T/w1"
head_bg ok --hostfile="$T/hostfile" --rdzv_conf=last_call_timeout=0.5 --tee=3 \
  "$TW" env "$T/w1"
wait_exit "$HEAD" 60
[ "$RC" -eq 0 ] || { cat "$T/ok.err" >&2; fail "the 2-host job exited $RC"; }
check_world "$T/w1" env 3
expect_eq "h1's LOCAL_WORLD_SIZE" "$(envval "$T/w1/env.0" LOCAL_WORLD_SIZE)" 2
expect_eq "h2's LOCAL_WORLD_SIZE" "$(envval "$T/w1/env.2" LOCAL_WORLD_SIZE)" 1
expect_eq "MASTER_ADDR" "$(envval "$T/w1/env.2" MASTER_ADDR)" "${ADDR[h1]}"
expect_grep '^\[h1\] cdrun: hosting the rendezvous' "$T/ok.err"
expect_grep '^cdrun: starting 2 agents over ssh: rendezvous h1:[0-9]+' "$T/ok.err"

head_bg print --hosts=h1,h2 --rdzv_conf=last_call_timeout=0.5 --tee=3 \
  "$TW" print 2
wait_exit "$HEAD" 60
[ "$RC" -eq 0 ] || { cat "$T/print.err" >&2; fail "the print job exited $RC"; }
expect_grep '^\[h1\] \[default0\]:out rank=0 line=1$' "$T/print.out"
expect_grep '^\[h2\] \[default0\]:out rank=1 line=1$' "$T/print.out"
expect_grep '^\[h2\] \[default0\]:err rank=1 line=0$' "$T/print.err"

# A worker fails: the head exits with the job's failure status.
mkdir "$T/w1f"
head_bg failed --hosts=h1,h2 --rdzv_conf=last_call_timeout=0.5 \
  "$TW" fail "$T/w1f" 1 7 99
wait_exit "$HEAD" 60
[ "$RC" -ne 0 ] || fail "a job whose worker failed exited 0"
expect_grep '^cdrun: host h[12]: the agent exited 7$' "$T/failed.err"
[ "$RC" -eq 7 ] || [ "$RC" -eq 1 ] || fail "the head exited $RC (want 7 or 1)"

# ---- 2. an unreachable host: a clear error, the job stops ------------------
mkdir "$T/w2"
head_bg unreach --hosts=h1,h3 --rdzv_conf=last_call_timeout=0.5 \
  "$TW" sleep "$T/w2" 120
wait_exit "$HEAD" 60
[ "$RC" -ne 0 ] || fail "a job with an unreachable host exited 0"
expect_grep '^cdrun: host h3: ssh failed or the remote agent was killed \(exit 255\): .*h3' "$T/unreach.err"
for f in "$T"/w2/pid.*; do
  [ -f "$f" ] && alive "$(cat "$f")" && fail "h1's worker $(cat "$f") outlived the job"
done

# ---- 3. Ctrl-C on the head: every remote worker gets SIGTERM ---------------
mkdir "$T/w3"
head_bg int --hosts=h1,h2 --rdzv_conf=last_call_timeout=0.5 \
  --nproc_per_node=2 "$TW" trap "$T/w3" 120
wait_files "$T/w3/pid.*" 4 60
kill -INT "$HEAD"
wait_exit "$HEAD" 60
[ "$RC" -ne 0 ] || fail "an interrupted job exited 0"
expect_grep '^cdrun: got Interrupt: stopping the agents on every host' "$T/int.err"
for r in 0 1 2 3; do
  [ -f "$T/w3/sig.$r" ] || { cat "$T/int.err" >&2; fail "rank $r got no signal"; }
  expect_eq "rank $r signal" "$(cat "$T/w3/sig.$r")" 15
done

# ---- 4. the head SIGKILLed: no remote orphan --------------------------------
mkdir "$T/w4"
head_bg kill --hosts=h1,h2 --rdzv_conf=last_call_timeout=0.5 \
  "$TW" sleep "$T/w4" 300
wait_files "$T/w4/pid.*" 2 60
kill -KILL "$HEAD"
wait_exit "$HEAD" 10
for r in 0 1; do
  p=$(cat "$T/w4/pid.$r")
  for ((i = 0; i < 600; i++)); do alive "$p" || break; sleep 0.1; done
  alive "$p" && fail "worker $p (rank $r) outlived the SIGKILLed head"
done

# ---- 4b. one local ssh client dies: its host's workers stop too ------------
mkdir "$T/w4b"
head_bg sshdies --hosts=h1,h2 --rdzv_conf=last_call_timeout=0.5 \
  "$TW" sleep "$T/w4b" 300
wait_files "$T/w4b/pid.*" 2 60
sshs=$(ps -o pid= --ppid "$HEAD" | tr -d ' ')
[ "$(echo "$sshs" | wc -w)" -eq 2 ] || fail "the head has no 2 ssh children: '$sshs'"
kill -KILL $(echo "$sshs" | head -1)
wait_exit "$HEAD" 60
[ "$RC" -ne 0 ] || fail "a job that lost a host's ssh exited 0"
expect_grep '^cdrun: host h[12]: the ssh client was killed by signal 9$' "$T/sshdies.err"
expect_grep '^cdrun: stopping the agents on every host$' "$T/sshdies.err"
for r in 0 1; do
  p=$(cat "$T/w4b/pid.$r")
  for ((i = 0; i < 600; i++)); do alive "$p" || break; sleep 0.1; done
  alive "$p" && fail "worker $p (rank $r) outlived its host's ssh"
done

# ---- 5. a host's agent dies mid-job: the other goes on (elastic) -----------
mkdir "$T/w5"
head_bg el --hosts=h1,h2 --nnodes=1:2 --max_restarts=3 \
  --rdzv_conf=last_call_timeout=0.5,keepalive_interval=0.2 \
  "$TW" elastic "$T/w5" 300
wait_files "$T/w5/ws2.*" 2 60
for r in 0 1; do
  nd=$(node_of "$(cat "$T/w5/pid.$r")") || fail "rank $r is in no host"
  [ "$nd" = h2 ] && victim=$(ps -o ppid= -p "$(cat "$T/w5/pid.$r")" | tr -d ' ')
done
[ -n "${victim:-}" ] || fail "no worker on h2"
kill -KILL "$victim"
wait_files "$T/w5/ws1.*" 1 60
[ "$(node_of "$(cat "$T/w5/pid.0")")" = h1 ] || fail "the survivor is not on h1"
# The head learns of h2's ssh exit on its own: wait for its line.
wait_grep '^cdrun: host h2: ssh failed or the remote agent was killed \(exit 255\).*elastic' "$T/el.err" 60
alive "$HEAD" || fail "the head exited when one host of an elastic job died"
kill -TERM "$HEAD"
wait_exit "$HEAD" 60
p=$(cat "$T/w5/pid.0")
alive "$p" && fail "the survivor's worker outlived the head's SIGTERM"

# ---- 6. a host's link cut mid-run: named within the keepalive window -------
# Note [dead links]: nothing reaches h2 any more, not even a reset.  The
# head's ssh (ServerAlive 1 s x 5) names h2 and the head exits 75, not
# ssh's 255; h2's agent hears no beat from the head and stops its workers
# (its rendezvous alone would keep them 600 s: reconnect_timeout).
mkdir "$T/w6"
# ssh says why it gave up at its default LogLevel (INFO), not at ERROR.
SSHCMD_ERR=$SSHCMD
SSHCMD="$SSHCMD -o LogLevel=INFO"
head_bg cut --hosts=h1,h2 \
  --rdzv_conf=last_call_timeout=0.5,lost_node_grace=1,reconnect_timeout=600 \
  "$TW" sleep "$T/w6" 300
wait_files "$T/w6/pid.*" 2 60
h2w=
for r in 0 1; do
  [ "$(node_of "$(cat "$T/w6/pid.$r")")" = h2 ] && h2w=$(cat "$T/w6/pid.$r")
done
[ -n "$h2w" ] || fail "no worker on h2"
ip -n "$NS_SW" link set "v${id}h2" down || fail "cannot cut h2's link"
wait_exit "$HEAD" 120
expect_eq "the head's status after a cut link" "$RC" 75
expect_grep '^cdrun: host h2: lost: no answer over ssh within 5 s \(ServerAliveInterval 1 x ServerAliveCountMax 5\)' "$T/cut.err"
for ((i = 0; i < 600; i++)); do alive "$h2w" || break; sleep 0.1; done
alive "$h2w" && fail "h2's worker $h2w outlived its cut link"
ip -n "$NS_SW" link set "v${id}h2" up || fail "cannot restore h2's link"
SSHCMD=$SSHCMD_ERR

# ---- 7. Ctrl-C with a cut link: the hosts waited for are named -------------
mkdir "$T/w7"
head_bg cutint --hosts=h1,h2 \
  --rdzv_conf=last_call_timeout=0.5,reconnect_timeout=600 \
  "$TW" sleep "$T/w7" 300
wait_files "$T/w7/pid.*" 2 60
ip -n "$NS_SW" link set "v${id}h2" down || fail "cannot cut h2's link"
kill -INT "$HEAD"
wait_exit "$HEAD" 120
expect_eq "the head's status after Ctrl-C" "$RC" 130
expect_grep '^cdrun: waiting up to [0-9]+ s \(the agents. grace period and 15 s; Interrupt again: at once\) for hosts? (h1, )?h2$' "$T/cutint.err"
ip -n "$NS_SW" link set "v${id}h2" up || fail "cannot restore h2's link"

for f in "$T"/*.err "$T"/*.out; do
  grep -Eq 'Sanitizer|runtime error' "$f" && { cat "$f" >&2; fail "sanitizer report in $f"; }
done
exit 0
