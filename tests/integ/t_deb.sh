#!/bin/bash
# The Debian packages (`make deb`: build/pkg/cdrun_VERSION_amd64.deb and
# libpg-dev) install with apt-get on this machine (root): the rdzvd user,
# /var/lib/rdzvd (700) and its key (600, rdzvd's), /etc/default/rdzvd,
# the versions of the binaries, man pages and libpg.pc; rdzvd runs as the
# unit's ExecStart does (its user, its environment, its key file: rdzvd
# refuses a key it does not own) and serves a job of the installed cdrun;
# remove leaves only the configuration and the key, purge nothing.
# integ-timeout: 300
. "$(dirname "$0")/lib.sh"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $CDRUN in   # the packages hold release builds, tested in that run
  */build/asan/*) skip "the packages are not sanitizer builds" ;;
esac
version=$(cat "$ROOT/VERSION")
deb=$ROOT/build/pkg/cdrun_${version}_amd64.deb
dev=$ROOT/build/pkg/libpg-dev_${version}_amd64.deb
[ -f "$deb" ] && [ -f "$dev" ] || skip "no packages of cdrun $version (make deb)"
[ "$(id -u)" = 0 ] || skip "installing a package needs root"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || skip "no apt-get/dpkg"
command -v setpriv >/dev/null || skip "no setpriv (util-linux)"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
for p in cdrun libpg-dev; do
  ! installed "$p" || skip "package $p is installed already: not touching it"
done
[ ! -e /etc/default/rdzvd ] && [ ! -e /var/lib/rdzvd ] ||
  skip "/etc/default/rdzvd or /var/lib/rdzvd exists already: not touching it"

apt_q() {
  DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Lock::Timeout=120 \
    --no-install-recommends "$@" >"$T/apt.log" 2>&1 ||
    { cat "$T/apt.log"; fail "apt-get $*"; }
}
# Whatever happens, this scenario leaves no package of its own behind.
purge_all() {
  dpkg --purge cdrun libpg-dev >/dev/null 2>&1
}
trap 'purge_all; cleanup' EXIT

apt_q install "$deb" "$dev"
installed cdrun || fail "cdrun is not installed"
list=$(dpkg -L cdrun libpg-dev)

# --- what the packages put in place -----------------------------------------
getent passwd rdzvd >/dev/null || fail "no rdzvd user"
expect_eq "/var/lib/rdzvd" "$(stat -c '%U:%G %a' /var/lib/rdzvd)" "rdzvd:rdzvd 700"
key=/var/lib/rdzvd/token.key
expect_eq "the key file" "$(stat -c '%U:%G %a' "$key")" "rdzvd:rdzvd 600"
grep -Eqx '[0-9a-f]{64}' "$key" || fail "the key is not 32 bytes as hex"
keysum=$(md5sum <"$key")
[ -f /etc/default/rdzvd ] || fail "no /etc/default/rdzvd"
expect_eq "cdrun --version" "$(/usr/bin/cdrun --version)" "cdrun $version"
expect_eq "rdzvd --version" "$(/usr/bin/rdzvd --version)" "rdzvd $version"
for m in man1/cdrun.1 man8/rdzvd.8 man3/libpg.3; do
  expect_grep "^\.TH .*\"cdrun $version\"" <(zcat "/usr/share/man/$m.gz")
done
[ -s /usr/share/bash-completion/completions/cdrun ] || fail "no bash completion"
expect_eq "pkg-config libpg" "$(pkg-config --modversion libpg 2>&1)" "$version"
unit=/lib/systemd/system/rdzvd.service
expect_grep '^User=rdzvd$' "$unit"
expect_grep '^ExecStart=/usr/bin/rdzvd ' "$unit"

# --- rdzvd as the unit runs it ------------------------------------------------
# Its environment: the unit's Environment= lines, then /etc/default/rdzvd
# (EnvironmentFile=), then a free port, as an admin would set there.
declare -A uenv=()
while IFS= read -r l; do
  l=${l#Environment=}
  uenv[${l%%=*}]=${l#*=}
done < <(grep '^Environment=' "$unit")
while IFS= read -r l; do
  [[ $l =~ ^([A-Z_]+)=(.*)$ ]] && uenv[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done </etc/default/rdzvd
uenv[RDZVD_PORT]=$(free_port)
expect_eq "the unit's key file" "${uenv[RDZVD_TOKEN_KEY_FILE]}" "$key"
# ExecStart: ${VAR} is one word, $VAR is split on whitespace (systemd).
exec_line=$(sed -n 's/^ExecStart=//p' "$unit")
argv=()
for w in $exec_line; do
  if [[ $w =~ ^(.*)\$\{([A-Z_]+)\}(.*)$ ]]; then
    argv+=("${BASH_REMATCH[1]}${uenv[${BASH_REMATCH[2]}]}${BASH_REMATCH[3]}")
  elif [[ $w =~ ^\$([A-Z_]+)$ ]]; then
    argv+=(${uenv[${BASH_REMATCH[1]}]})
  else
    argv+=("$w")
  fi
done
envs=()
for k in "${!uenv[@]}"; do envs+=("$k=${uenv[$k]}"); done
: >"$T/rdzvd.log"
setpriv --reuid rdzvd --regid rdzvd --init-groups --inh-caps=-all \
  env -i PATH=/usr/bin:/bin "${envs[@]}" "${argv[@]}" 2>>"$T/rdzvd.log" &
RDZVD_PID=$!
STARTED+=("$RDZVD_PID")
wait_grep '^rdzvd: listening on ' "$T/rdzvd.log" 20
expect_eq "rdzvd's user" "$(ps -o user= -p "$RDZVD_PID")" rdzvd
# The installed cdrun runs a job through it.
mkdir -m 777 "$T/job"
/usr/bin/cdrun --nnodes=1 --nproc_per_node=2 --rdzv_backend=c10d \
  --rdzv_endpoint="127.0.0.1:${uenv[RDZVD_PORT]}" --rdzv_id=deb --no_python \
  /bin/sh -c 'echo "$WORLD_SIZE" > "$0/w.$RANK"' "$T/job" \
  >"$T/job.out" 2>"$T/job.err" || { cat "$T/job.err" "$T/rdzvd.log"; fail "the job failed"; }
expect_eq "rank 1's world" "$(cat "$T/job/w.1")" 2
expect_eq "the key, after rdzvd read it" "$(md5sum <"$key")" "$keysum"
kill -TERM "$RDZVD_PID"
wait_exit "$RDZVD_PID" 30

# --- remove: the configuration and the key stay; purge: nothing -------------
apt_q remove cdrun libpg-dev
installed cdrun && fail "cdrun still installed after remove"
[ -f /etc/default/rdzvd ] || fail "remove took /etc/default/rdzvd"
expect_eq "the key after remove" "$(md5sum <"$key")" "$keysum"
left=$(while IFS= read -r f; do
         [ -d "$f" ] && continue
         [ -f "$f" ] || [ -L "$f" ] || continue
         [ "$f" = /etc/default/rdzvd ] || echo "$f"
       done <<<"$list")
[ -z "$left" ] || fail "left after remove: $left"
# (libpg-dev has no conffile: remove took all of it, apt knows it no more)
apt_q purge cdrun
[ ! -e /etc/default/rdzvd ] || fail "purge left /etc/default/rdzvd"
[ ! -e /var/lib/rdzvd ] || fail "purge left /var/lib/rdzvd: $(ls -la /var/lib/rdzvd)"
for p in cdrun libpg-dev; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ -z "$st" ] || [ "$st" = "unknown ok not-installed" ] ||
    fail "$p not purged: $st"
done
exit 0
