#!/bin/bash
# scripts/pkg/cjson-src.sh DIR: Debian's cJSON source package (bookworm's
# `cjson`, with Debian's patches applied) unpacked as DIR, for the wheel's
# static cdrun and rdzvd: Debian ships libcjson only as a shared library,
# and a wheel's binaries may need nothing but glibc.  The source comes
# through apt from the archive the machine already trusts (its Release
# file's signature covers the .dsc's checksums), with a deb-src list of
# our own in build/, so the machine's apt configuration is not changed.
# Idempotent: an unpacked DIR is kept.
set -euo pipefail
dir=$1
[ -f "$dir/cJSON.c" ] && exit 0
work=$(dirname "$dir")/cjson-apt
mkdir -p "$work/lists/partial" "$work/dl"
work=$(cd "$work" && pwd)
cat >"$work/src.sources" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt_opts=(-o "Dir::Etc::SourceList=$work/src.sources"
          -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists"
          -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
(cd "$work/dl" && apt-get "${apt_opts[@]}" source --download-only -qq cjson)
rm -rf "$dir"
# The archive's signature already vouched for the .dsc's checksums.
dpkg-source --no-check -x "$work"/dl/cjson_*.dsc "$dir" >/dev/null
test -f "$dir/cJSON.c"
echo "pkg/cjson-src: $(sed -n 's/^Version: //p' "$work"/dl/cjson_*.dsc) in $dir"
