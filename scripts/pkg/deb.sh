#!/usr/bin/env bash
# scripts/pkg/deb.sh BUILD OUT: the Debian packages of cdrun (`make deb`).
#
# BUILD holds the binaries built for them (build/deb: `make PKG=deb
# PREFIX=/usr pkg-bins`: Debian's libuv1 and libcjson1, libpg without
# NCCL); OUT (build/pkg) gets
#
#   OUT/cdrun_VERSION_amd64.deb      cdrun, rdzvd, libpg.so.0, man pages,
#                                    bash completion, rdzvd.service, its
#                                    user and key (maintainer scripts),
#                                    /etc/default/rdzvd
#   OUT/libpg-dev_VERSION_amd64.deb  pg.h, libpg.a, the libpg.so link,
#                                    libpg.pc, libpg(3)
#   OUT/lintian.txt                  lintian's output on both
#
# The split: what an admin installs to run jobs and the daemon (cdrun,
# with the library its workers and its live recovery load), and what a
# developer adds to build C workers (libpg-dev).  The files are under
# scripts/pkg/deb/ rather than a debian/ folder: these are binary packages
# of the tree as `make` built and tested it, assembled with dpkg-deb, not
# a Debian source package (a debian/ folder at the top would promise that
# dpkg-buildpackage works).  Lintian must report no error and no warning
# (overrides, each explained, in scripts/pkg/deb/cdrun.lintian-overrides);
# DEB_NO_LINTIAN=1 skips it.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${1:?usage: deb.sh BUILD OUT}
out=${2:?usage: deb.sh BUILD OUT}
die() { echo "deb: $*" >&2; exit 1; }
command -v dpkg-deb >/dev/null || die "needs dpkg-deb (scripts/pkg/deps.sh)"
for f in bin/cdrun bin/rdzvd lib/libpg.so.0 lib/libpg.a; do
  [[ -e $build/$f ]] || die "$build/$f missing (make PKG=deb PREFIX=/usr pkg-bins)"
done
version=$(cat "$repo/VERSION")
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
d=$here/deb
date=$(date -R -d "@$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)")
# The maintainer: DEB_MAINTAINER, else the author of the tree's last commit.
maint=${DEB_MAINTAINER:-$(git -C "$repo" log -1 --format='%an <%ae>' 2>/dev/null || true)}
[[ $maint == *'<'*@*'>' ]] || die "DEB_MAINTAINER must be 'Name <email>' (got '$maint')"
mkdir -p "$out"
rm -rf "$out/deb" "$out"/cdrun_*.deb "$out"/libpg-dev_*.deb

# doc PKG ROOT: copyright and changelog.gz (a native package: its
# version has no Debian revision), as policy wants.
doc() {
  install -d "$2/usr/share/doc/$1"
  install -m 644 "$d/copyright" "$2/usr/share/doc/$1/copyright"
  printf '%s (%s) unstable; urgency=medium\n\n  * Built from the cdrun repository (make deb).\n\n -- %s  %s\n' \
    "$1" "$version" "$maint" "$date" | gzip -9n >"$2/usr/share/doc/$1/changelog.gz"
}
# man PAGE SECTION ROOT: the page with VERSION, gzipped.
man() {
  install -d "$3/usr/share/man/man$2"
  "$here/man.sh" "$version" "$repo/man/$1.$2" | gzip -9n \
    >"$3/usr/share/man/man$2/$1.$2.gz"
}
# finish PKG ROOT: control (its Installed-Size, the libc6 the binaries
# need), md5sums, the package.
finish() {
  local pkg=$1 root=$2 size libc
  chmod -R u=rwX,go=rX "$root"
  size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  libc=$(find "$root" -path "$root/DEBIAN" -prune -o -type f \
           \( -perm -u+x -o -name '*.so*' \) -print |
         xargs objdump -T 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' |
         sort -uV | tail -n 1) || true
  [[ -n $libc ]] || libc=GLIBC_2.2.5
  sed -e "s/@VERSION@/$version/g" -e "s/@SIZE@/$size/" \
      -e "s/@LIBC@/libc6 (>= ${libc#GLIBC_})/" -e "s|@MAINT@|$maint|" \
      "$d/control.$pkg" \
      >"$root/DEBIAN/control"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' |
     sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
  chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"
  dpkg-deb --root-owner-group -Zxz --build "$root" \
    "$out/${pkg}_${version}_amd64.deb" >/dev/null
}

# --- cdrun -----------------------------------------------------------------
r=$out/deb/cdrun
install -d "$r/DEBIAN" "$r/usr/bin" "$r/usr/lib/$ma" "$r/etc/default" \
  "$r/lib/systemd/system" "$r/usr/share/bash-completion/completions" \
  "$r/usr/share/lintian/overrides"
install -m 755 "$build/bin/cdrun" "$build/bin/rdzvd" "$r/usr/bin/"
install -m 644 "$build/lib/libpg.so.0" "$r/usr/lib/$ma/libpg.so.0"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  "$r/usr/bin/cdrun" "$r/usr/bin/rdzvd" "$r/usr/lib/$ma/libpg.so.0"
man cdrun 1 "$r"
man rdzvd 8 "$r"
"$build/bin/cdrun" --print-completion bash \
  >"$r/usr/share/bash-completion/completions/cdrun"
# The unit as scripts/rdzvd.service, run as the package's rdzvd user
# (made by postinst, owner of the key) instead of a dynamic one.
sed -e 's|/usr/local/bin/rdzvd|/usr/bin/rdzvd|' \
    -e 's|^DynamicUser=yes$|User=rdzvd\nGroup=rdzvd|' \
    "$repo/scripts/rdzvd.service" >"$r/lib/systemd/system/rdzvd.service"
grep -q '^User=rdzvd$' "$r/lib/systemd/system/rdzvd.service" ||
  die "scripts/rdzvd.service has no DynamicUser=yes line to replace"
install -m 644 "$d/default.rdzvd" "$r/etc/default/rdzvd"
install -m 644 "$d/cdrun.lintian-overrides" "$r/usr/share/lintian/overrides/cdrun"
doc cdrun "$r"
install -m 755 "$d/postinst" "$d/prerm" "$d/postrm" "$r/DEBIAN/"
echo /etc/default/rdzvd >"$r/DEBIAN/conffiles"
echo "activate-noawait ldconfig" >"$r/DEBIAN/triggers"
echo "libpg 0 cdrun (>= $version)" >"$r/DEBIAN/shlibs"
chmod 644 "$r/DEBIAN/conffiles" "$r/DEBIAN/triggers" "$r/DEBIAN/shlibs"
finish cdrun "$r"

# --- libpg-dev ---------------------------------------------------------------
r=$out/deb/libpg-dev
install -d "$r/DEBIAN" "$r/usr/include" "$r/usr/lib/$ma/pkgconfig"
install -m 644 "$repo"/libpg/include/*.h "$r/usr/include/"
install -m 644 "$build/lib/libpg.a" "$r/usr/lib/$ma/libpg.a"
strip --strip-debug --remove-section=.comment "$r/usr/lib/$ma/libpg.a"
ln -s libpg.so.0 "$r/usr/lib/$ma/libpg.so"
sed -e 's|@PREFIX@|/usr|' -e "s|@VERSION@|$version|" \
    -e 's|@LIBS_PRIVATE@|-lpthread -lrt -lm|' \
    -e "s|@LIBDIR@|\${prefix}/lib/$ma|" \
    -e 's|@INCLUDEDIR@|${prefix}/include|' \
    "$repo/libpg/libpg.pc.in" >"$r/usr/lib/$ma/pkgconfig/libpg.pc"
man libpg 3 "$r"
doc libpg-dev "$r"
finish libpg-dev "$r"

echo "deb: $out/cdrun_${version}_amd64.deb $out/libpg-dev_${version}_amd64.deb"
if [[ ${DEB_NO_LINTIAN:-0} != 1 ]]; then
  command -v lintian >/dev/null || die "needs lintian (scripts/pkg/deps.sh)"
  lintian --tag-display-limit 0 "$out/cdrun_${version}_amd64.deb" \
    "$out/libpg-dev_${version}_amd64.deb" >"$out/lintian.txt" 2>&1 || true
  cat "$out/lintian.txt"
  ! grep -qE '^[EW]: ' "$out/lintian.txt" ||
    die "lintian reports errors or warnings ($out/lintian.txt)"
  echo "deb: lintian: no error, no warning"
fi
