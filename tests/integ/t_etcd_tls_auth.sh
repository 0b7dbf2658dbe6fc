#!/bin/bash
# The etcd back end over TLS with client certificates (made here with
# openssl: a CA, a server certificate for 127.0.0.1, a client certificate),
# and with etcd user/password authentication (the password from a file).
# Without the client certificate, or with a wrong password, the agent
# fails with a clear message instead of hanging.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
command -v openssl >/dev/null || skip "openssl not installed"

# ---- TLS ----
pki=$T/pki
mkdir -p "$pki"
(
  cd "$pki" || exit 1
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem \
    -days 2 -subj "/CN=cdrun-test-ca" &&
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
    -subj "/CN=127.0.0.1" &&
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out server.pem -days 2 -extfile server.ext &&
  openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr \
    -subj "/CN=cdrun-agent" &&
  printf 'extendedKeyUsage=clientAuth\n' >client.ext &&
  openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out client.pem -days 2 -extfile client.ext
) >"$T/openssl.log" 2>&1 || { cat "$T/openssl.log"; fail "openssl failed"; }

ETCD_SCHEME=https start_etcd tls --cert-file "$pki/server.pem" \
  --key-file "$pki/server.key" --trusted-ca-file "$pki/ca.pem" \
  --client-cert-auth
etcd_wait_healthy "$ETCD_URL" 30 --cacert "$pki/ca.pem" \
  --cert "$pki/client.pem" --key "$pki/client.key"
tls=protocol=https,cacert=$pki/ca.pem,cert=$pki/client.pem,key=$pki/client.key

mkdir "$T/w"
for n in a b; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EP" --rdzv_id=tls --rdzv_conf="$tls" \
    "$TW" env "$T/w"
done
wait_exit "$AGENT_a" 60; rca=$RC
wait_exit "$AGENT_b" 60; rcb=$RC
[ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] ||
  { cat "$T/a.err" "$T/b.err"; fail "TLS agents exited $rca/$rcb"; }
check_world "$T/w" env 2

# No client certificate: etcd refuses the handshake.
agent nocert --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
  --rdzv_endpoint="$ETCD_EP" --rdzv_id=tls2 \
  --rdzv_conf="protocol=https,cacert=$pki/ca.pem,join_timeout=3" "$TW" env "$T"
wait_exit "$AGENT_nocert" 60
[ "$RC" -ne 0 ] || fail "an agent without a client certificate exited 0"
expect_grep "cannot use etcd" "$T/nocert.err"

# ---- user/password ----
start_etcd auth
etcd_wait_healthy "$ETCD_URL" 30
ectl() { ETCDCTL_API=3 etcdctl --endpoints="$ETCD_EP" "$@"; }
ectl user add root --new-user-password=s3cret >/dev/null || fail "user add"
ectl role add root >/dev/null 2>&1
ectl user grant-role root root >/dev/null || fail "grant-role"
ectl auth enable >/dev/null || fail "auth enable"
printf 's3cret\n' >"$T/pw"
chmod 600 "$T/pw"

mkdir "$T/u"
for n in c d; do
  agent "$n" --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
    --rdzv_endpoint="$ETCD_EP" --rdzv_id=auth \
    --rdzv_conf="user=root,password_file=$T/pw" "$TW" env "$T/u"
done
wait_exit "$AGENT_c" 60; rcc=$RC
wait_exit "$AGENT_d" 60; rcd=$RC
[ "$rcc" -eq 0 ] && [ "$rcd" -eq 0 ] ||
  { cat "$T/c.err" "$T/d.err"; fail "authenticated agents exited $rcc/$rcd"; }
check_world "$T/u" env 2

# A wrong password: refused at once, not after the join timeout.
printf 'wrong\n' >"$T/badpw"
agent bad --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
  --rdzv_endpoint="$ETCD_EP" --rdzv_id=auth2 \
  --rdzv_conf="user=root,password_file=$T/badpw" "$TW" env "$T"
wait_exit "$AGENT_bad" 60
[ "$RC" -ne 0 ] || fail "a wrong password was accepted"
expect_grep "etcd refused: etcd authentication as 'root' failed" "$T/bad.err"
# Without credentials, etcd with auth enabled refuses too.
agent anon --nnodes=2 --nproc_per_node=1 --rdzv_backend=etcd \
  --rdzv_endpoint="$ETCD_EP" --rdzv_id=auth3 --rdzv_conf=join_timeout=30 \
  "$TW" env "$T"
wait_exit "$AGENT_anon" 60
[ "$RC" -ne 0 ] || fail "an anonymous agent was accepted"
expect_grep "etcd refused" "$T/anon.err"
exit 0
