#!/bin/bash
# check-layers.sh OUT LIBPG_A LIBPG_SO -- the layering that the Makefile
# promises, checked on the sources, on the layer archives built in OUT
# (build/release, build/asan), on libpg's archive LIBPG_A and on its
# shared library LIBPG_SO:
#
#   1. no #include reaches into another folder with "../": a folder sees
#      another layer's headers only through its -I in the Makefile;
#   2. no layer's archive needs a symbol that only a higher layer defines
#      (util < proto < rdzvd < launcher), and neither the layers nor libpg
#      need one of the other's: libpg is installed alone;
#   3. libpg.so exports only its public API: pg_* names that pg.h
#      declares.  The helpers of proto/util compiled into it (Note
#      [libpg's own copies] in the Makefile) and its pg__ internals are
#      hidden, so that a program that has its own sha256_init or
#      num_parse_long never meets libpg's.
#
# `make check-layers` builds the archives first, then runs this and the
# header check (every .h compiles alone).  Exit status 1 names each breach.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: check-layers.sh OUT LIBPG_A LIBPG_SO}
libpg_a=${2:?usage: check-layers.sh OUT LIBPG_A LIBPG_SO}
libpg_so=${3:?usage: check-layers.sh OUT LIBPG_A LIBPG_SO}
layers=(util proto rdzvd launcher)
rc=0

breach() {
  echo "check-layers: $*" >&2
  rc=1
}

# 1. "../" includes.
if hits=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]*\.\./' \
            --include='*.c' --include='*.h' \
            proto rdzvd launcher libpg examples tests); then
  while IFS= read -r h; do
    breach "$h: includes through '../'; name the header and let the" \
           "Makefile's -I for this folder decide what it may see"
  done <<<"$hits"
fi

# 2. Symbols.  Global symbols defined by an archive, and those it needs.
defined() { nm -g --defined-only "$1" | awk 'NF == 3 { print $3 }' | sort -u; }
needed() { nm -g --undefined-only "$1" | awk '{ print $NF }' | sort -u; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for l in "${layers[@]}" pg; do
  a=$out/libcdrun_$l.a
  [ "$l" = pg ] && a=$libpg_a
  [ -f "$a" ] || { echo "check-layers: $a is not built" >&2; exit 1; }
  defined "$a" >"$tmp/def_$l"
  needed "$a" >"$tmp/need_$l"
done

# A layer may use what it and the layers below it define.
: >"$tmp/below"
: >"$tmp/breaches"
for i in "${!layers[@]}"; do
  l=${layers[$i]}
  sort -u "$tmp/below" "$tmp/def_$l" -o "$tmp/below"
  : >"$tmp/above"
  for h in "${layers[@]:$((i + 1))}" pg; do
    cat "$tmp/def_$h" >>"$tmp/above"
  done
  sort -u "$tmp/above" -o "$tmp/above"
  comm -23 "$tmp/need_$l" "$tmp/below" | comm -12 - "$tmp/above" |
    while IFS= read -r s; do
      for owner in "${layers[@]:$((i + 1))}" pg; do
        if grep -qxF "$s" "$tmp/def_$owner"; then break; fi
      done
      echo "$l uses $s, which only the higher layer $owner defines"
    done >>"$tmp/breaches"
done
# libpg sees only libpg.
comm -23 "$tmp/need_pg" "$tmp/def_pg" | comm -12 - "$tmp/below" |
  sed 's/.*/libpg uses &, which only cdrun'"'"'s layers define/' >>"$tmp/breaches"
while IFS= read -r b; do
  breach "$b"
done <"$tmp/breaches"

# 3. What libpg.so exports.
[ -f "$libpg_so" ] || { echo "check-layers: $libpg_so is not built" >&2; exit 1; }
while IFS= read -r s; do
  if [[ ! $s =~ ^pg_[a-z0-9] ]]; then
    breach "libpg.so exports $s: only pg_* names may leave it (a helper" \
           "or a pg__ internal must be hidden, as -fvisibility=hidden makes it)"
  elif ! grep -qw -- "$s" libpg/include/pg.h; then
    breach "libpg.so exports $s, which libpg/include/pg.h does not declare"
  fi
done < <(nm -D --defined-only "$libpg_so" | awk 'NF == 3 { print $3 }' | sort -u)

[ $rc -eq 0 ] && echo "check-layers: includes and archives keep to" \
  "util < proto < rdzvd < launcher; libpg alone; libpg.so exports pg.h's" \
  "pg_* names only"
exit $rc
