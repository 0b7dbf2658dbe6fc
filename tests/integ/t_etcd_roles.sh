#!/bin/bash
# Jobs kept apart by etcd itself (proto/ETCD.md §6, the per-job role
# recipe): with authentication on, each job's agents log in as a user
# whose role may read and write only that job's prefix.  A user with
# another job's role can neither read the job (its nodes, its token) nor
# change it (write, delete, revoke its leases), and the job runs on.  On
# a three-member cluster.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"

start_etcd_cluster 3
ectl() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EPS" "$@"; }
# The recipe, as the docs give it.
ectl user add root --new-user-password=rootpw >/dev/null || fail "user add root"
ectl user grant-role root root >/dev/null 2>&1 ||
  { ectl role add root >/dev/null && ectl user grant-role root root >/dev/null; } ||
  fail "grant root"
for j in ja jb; do
  ectl role add "cdrun-$j" >/dev/null || fail "role add $j"
  ectl role grant-permission "cdrun-$j" --prefix=true readwrite "/cdrun/rdzv/$j/" \
    >/dev/null || fail "grant-permission $j"
  ectl user add "$j" --new-user-password="pw-$j" >/dev/null || fail "user add $j"
  ectl user grant-role "$j" "cdrun-$j" >/dev/null || fail "grant-role $j"
  printf 'pw-%s\n' "$j" >"$T/pw.$j"
  chmod 600 "$T/pw.$j"
done
ectl auth enable >/dev/null || fail "auth enable"
root() { ectl --user root:rootpw "$@"; }
asjb() { ectl --user jb:pw-jb "$@"; }

mkdir "$T/w"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EPS" --rdzv_id=ja \
    --rdzv_conf="user=ja,password_file=$T/pw.ja" "$TW" gate "$T/w"
done
wait_files "$T/w/pid.*.0.2" 2 60
state=$(root get /cdrun/rdzv/ja/state --print-value-only)
[ -n "$state" ] || fail "root cannot read the job"
lease=$(root get --prefix /cdrun/rdzv/ja/alive/ --keys-only | head -n 1)
lease=$((16#${lease##*/}))

# jb's user: nothing of ja's, read or written.
denied() {
  local what=$1
  shift
  if "$@" >"$T/denied.out" 2>&1; then
    cat "$T/denied.out"
    fail "jb's user could $what"
  fi
  grep -qi 'permission denied' "$T/denied.out" ||
    { cat "$T/denied.out"; fail "$what: not refused for want of permission"; }
}
denied "read ja's state" asjb get /cdrun/rdzv/ja/state
denied "list ja's keys" asjb get --prefix /cdrun/rdzv/ja/ --keys-only
denied "list every job" asjb get --prefix /cdrun/rdzv/ --keys-only
denied "write ja's state" asjb put /cdrun/rdzv/ja/state '{"phase":"closed"}'
denied "add a node to ja" asjb put /cdrun/rdzv/ja/alive/1 '{}'
denied "delete ja's keys" asjb del --prefix /cdrun/rdzv/ja/
denied "revoke an agent of ja" asjb lease revoke "$(printf %x "$lease")"
# jb's user works on its own prefix.
asjb put /cdrun/rdzv/jb/probe x >/dev/null || fail "jb cannot write its own prefix"

expect_eq "ja's state after jb's tries" \
  "$(root get /cdrun/rdzv/ja/state --print-value-only)" "$state"
touch "$T/w/go"
for n in a b; do
  pid=AGENT_$n
  wait_exit "${!pid}" 60
  [ "$RC" -eq 0 ] || { tail -n 30 "$T/$n.err"; fail "agent $n exited $RC"; }
done
exit 0
