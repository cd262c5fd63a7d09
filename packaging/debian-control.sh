#!/usr/bin/env bash
# Prints the DEBIAN/control of the storectl package: Depends lists the Debian packages that provide
# the shared libraries the binary links (its NEEDED entries), found with dpkg -S on this machine.
# Usage: debian-control.sh BINARY VERSION ARCH
set -euo pipefail
binary=$1 version=$2 arch=$3

package_of() {   # the package owning a library file, trying the paths dpkg may know it by (usrmerge)
  local path=$1 candidate
  for candidate in "$path" "$(readlink -f "$path")" "/usr$path" "${path#/usr}"; do
    [ -n "$candidate" ] || continue
    if owner=$(dpkg -S "$candidate" 2>/dev/null | awk 'NR == 1'); then echo "${owner%%:*}"; return 0; fi
  done
  echo "debian-control.sh: no package owns $path" >&2
  return 1
}

# libcurl.so.4 is loaded by the first S3 request (dlopen), not linked: not in NEEDED, still needed.
depends=()
for soname in $(objdump -p "$binary" | awk '/NEEDED/ { print $2 }') libcurl.so.4; do
  path=$(ldconfig -p | awk -v lib="$soname" '$1 == lib && !found { print $NF; found = 1 }')
  [ -n "$path" ] || { echo "debian-control.sh: $soname not found by ldconfig" >&2; exit 1; }
  pkg=$(package_of "$path")
  if [ "$pkg" = libc6 ]; then pkg="libc6 (>= $(dpkg-query -W -f='${Version}' libc6 | cut -d- -f1))"; fi
  depends+=("$pkg")
done
joined=$(printf '%s\n' "${depends[@]}" | sort -u | paste -sd, - | sed 's/,/, /g')
size=$(du -sk "$(dirname "$(dirname "$(dirname "$binary")")")" | cut -f1)

cat <<CONTROL
Package: storectl
Version: $version
Architecture: $arch
Maintainer: storectl maintainers <storectl@localhost>
Installed-Size: $size
Depends: $joined
Section: admin
Priority: optional
Description: keep SQLite and Core Data stores safe in production
 Online verified backups of live SQLite stores (Core Data and SwiftData ones
 included), preflight checks, compressed snapshots with retention, staged
 migrations with kill-switch rollback, policy-driven purges of soft-deleted
 rows, and cron or systemd jobs. Every operation either completes and is
 verified, or leaves the store as it was, at any crash point.
CONTROL
