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
#      num_parse_long never meets libpg's;
#   4. inside libpg, its floors (Note [floors] in libpg/core/hooks.h):
#      core (libpg/core/ and the backends libpg/cpu/, libpg/nccl/) < ddp
#      (libpg/ddp/) < live (libpg/live/) < init (libpg/init.c).  Every
#      #include "..." of a floor's file names a header of its own folder
#      or of a floor at or below it (the -I the Makefile gives it), and no
#      floor's objects (OUT/pic/libpg/...) use a symbol that only a higher
#      floor defines.  The core reaches live recovery only through the
#      hooks of its world group, never by name.
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

# 4. libpg's floors, lowest first: a floor's folders (its objects under
# OUT/pic), and the folders whose headers it may include.
floors=(core ddp live init)
declare -A floor_dirs=(
  [core]="libpg/core libpg/cpu libpg/nccl"
  [ddp]="libpg/ddp"
  [live]="libpg/live"
  [init]="libpg"
)
declare -A floor_sees=(
  [core]="libpg/include libpg/core proto/worker proto/util"
  [ddp]="libpg/include libpg/core libpg/ddp proto/worker proto/util"
  [live]="libpg/include libpg/core libpg/ddp libpg/live proto/worker proto/util"
  [init]="libpg/include libpg/core libpg/ddp libpg/live libpg proto/worker proto/util"
)
# The files of floor f (init: libpg/*.c only, not the folders below).
floor_files() {
  local d
  for d in ${floor_dirs[$1]}; do
    if [ "$1" = init ]; then
      find "$d" -maxdepth 1 -name '*.[ch]'
    else
      find "$d" -name '*.[ch]'
    fi
  done
}
# -I: every quoted include resolves in the file's folder or a folder the
# floor sees.
for f in "${floors[@]}"; do
  while IFS= read -r src; do
    while IFS= read -r h; do
      ok=0
      for d in "$(dirname "$src")" ${floor_sees[$f]}; do
        [ -f "$d/$h" ] && { ok=1; break; }
      done
      if [ $ok -eq 0 ]; then
        owner=$(for d in libpg/core libpg/ddp libpg/live libpg; do
                  [ -f "$d/$h" ] && { echo "$d"; break; }; done || true)
        breach "$src (floor $f) includes \"$h\"${owner:+ from $owner}," \
               "which its floor does not see: a lower floor reaches a" \
               "higher one only through the hooks (libpg/core/hooks.h)"
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$src")
  done < <(floor_files "$f")
done
# nm: what each floor's objects define and need.
pic=$out/pic
for f in "${floors[@]}"; do
  # The objects of the floor's sources (a stale object of a file moved
  # away is not the floor's).
  objs=()
  while IFS= read -r src; do
    o=$pic/${src%.c}.o
    [ -f "$o" ] && objs+=("$o")
  done < <(floor_files "$f" | grep '\.c$')
  [ ${#objs[@]} -gt 0 ] ||
    { echo "check-layers: no objects of libpg's floor $f under $pic" >&2; exit 1; }
  nm -g --defined-only "${objs[@]}" | awk 'NF == 3 { print $3 }' |
    sort -u >"$tmp/fdef_$f"
  nm -g --undefined-only "${objs[@]}" | awk '{ print $NF }' |
    sort -u >"$tmp/fneed_$f"
done
: >"$tmp/fbreaches"
for i in "${!floors[@]}"; do
  f=${floors[$i]}
  for h in "${floors[@]:$((i + 1))}"; do
    comm -23 "$tmp/fneed_$f" "$tmp/fdef_$f" | comm -12 - "$tmp/fdef_$h" |
      sed "s/.*/libpg's floor $f uses &, which the higher floor $h defines/" \
      >>"$tmp/fbreaches"
  done
done
while IFS= read -r b; do
  breach "$b"
done <"$tmp/fbreaches"
# And by name: the core calls no pg__live_* function.
if hits=$(grep -rn 'pg__live_' libpg/core libpg/cpu libpg/nccl libpg/ddp \
            --include='*.c' --include='*.h'); then
  while IFS= read -r h; do
    breach "$h: names live recovery below its floor (use the hooks)"
  done <<<"$hits"
fi

[ $rc -eq 0 ] && echo "check-layers: includes and archives keep to" \
  "util < proto < rdzvd < launcher; libpg alone; libpg.so exports pg.h's" \
  "pg_* names only; libpg's floors keep to core < ddp < live < init"
exit $rc
