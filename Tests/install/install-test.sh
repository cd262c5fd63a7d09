#!/usr/bin/env bash
# The install test (`make install-test`, run by .ci/run): make install into a temporary root, check
# the tree, that the binary needs no Swift library, that it runs --version and a real backup from a
# clean environment without the Swift toolchain on PATH; make uninstall removes exactly that; make deb
# lists the runtime dependencies and holds the same files. As root with STORECTL_DEB_INSTALL_TEST=1,
# the package is also installed and removed with apt-get.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "install-test: FAILED: $*" >&2; exit 1; }
root=$(mktemp -d /tmp/storectl-install-XXXXXX)
work=$(mktemp -d /tmp/storectl-install-work-XXXXXX)
trap 'rm -rf "$root" "$work" || true' EXIT

make --no-print-directory install DESTDIR="$root" PREFIX=/usr/local
bin="$root/usr/local/bin/storectl"
for f in bin/storectl share/man/man1/storectl.1 share/bash-completion/completions/storectl \
         share/zsh/site-functions/_storectl share/fish/vendor_completions.d/storectl.fish; do
  [ -s "$root/usr/local/$f" ] || fail "make install did not put $f"
done
grep -q '^\.Dt STORECTL 1' "$root/usr/local/share/man/man1/storectl.1" || fail "the man page has no .Dt header"
grep -q 'snapshot' "$root/usr/local/share/bash-completion/completions/storectl" || fail "the bash completion lacks the subcommands"
grep -q '_storectl' "$root/usr/local/share/zsh/site-functions/_storectl" || fail "the zsh completion is not one"
grep -q '^complete -c .*storectl' "$root/usr/local/share/fish/vendor_completions.d/storectl.fish" || fail "the fish completion is not one"

libs=$(ldd "$bin")
echo "$libs"
if echo "$libs" | grep -Eq 'libswift|libFoundation|libdispatch|libBlocksRuntime'; then fail "the binary needs a Swift library"; fi
if echo "$libs" | grep -q 'not found'; then fail "a library the binary needs is missing"; fi

version=$(env -i PATH=/usr/bin:/bin "$bin" --version)
echo "$version"
for word in storectl SQLite libarchive zstd; do echo "$version" | grep -q "^$word" || fail "--version lacks $word"; done

# A real store and a real backup, from a clean environment (no Swift on PATH, no HOME, no TMPDIR).
lab=.build/debug/storectl-lab
[ -x "$lab" ] || swift build --product storectl-lab
"$lab" make-store "$work/Tasks.sqlite" --items 2000 --external-files 2 > /dev/null
mkdir "$work/backups"
env -i PATH=/usr/bin:/bin "$bin" backup "$work/Tasks.sqlite" --output "$work/backups" || fail "the installed binary's backup failed"
ls "$work"/backups/Tasks-*.sqlite "$work"/backups/Tasks-*.manifest.json > /dev/null || fail "no backup was written"
env -i PATH=/usr/bin:/bin "$bin" preflight "$work"/backups/Tasks-*.sqlite > /dev/null || fail "the backup does not check clean"

make --no-print-directory uninstall DESTDIR="$root" PREFIX=/usr/local
left=$(find "$root" -type f)
[ -z "$left" ] || fail "make uninstall left: $left"

make --no-print-directory deb
deb=$(ls -t storectl_*_*.deb | awk "NR == 1")
info=$(dpkg-deb --info "$deb")
for pkg in libsqlite3-0 libarchive13 libzstd1 zlib1g libc6 libcurl4; do
  echo "$info" | grep -E '^ Depends:' | grep -q "$pkg" || fail "$deb does not depend on $pkg"
done
if echo "$info" | grep -E '^ Depends:' | grep -q -- '-dev'; then fail "$deb depends on a -dev package"; fi
make --no-print-directory install DESTDIR="$work/usr-root" PREFIX=/usr > /dev/null
diff <(dpkg-deb -c "$deb" | awk '{ print $NF }' | grep -v '/$' | sed 's|^\./||' | sort) \
     <(cd "$work/usr-root" && find . -type f | sed 's|^\./||' | sort) || fail "the package's files differ from make install's"

if [ "${STORECTL_DEB_INSTALL_TEST:-}" = 1 ] && [ "$(id -u)" -eq 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "./$deb" > /dev/null
  env -i PATH=/usr/bin:/bin /usr/bin/storectl --version | grep -q "^storectl" || fail "the installed package does not run"
  DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq storectl > /dev/null
  [ ! -e /usr/bin/storectl ] || fail "apt-get remove left /usr/bin/storectl"
  echo "install-test: apt-get install and remove of $deb ok"

  # A clean Debian root without Swift (debootstrap, minbase): apt-get installs the package and its
  # runtime dependencies from Debian's archive, storectl works there, apt-get removes it.
  command -v debootstrap > /dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null
  chroot_dir="$work/chroot"
  suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
  debootstrap --variant=minbase "$suite" "$chroot_dir" http://deb.debian.org/debian > "$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log"; fail "debootstrap $suite failed"; }
  cp "$deb" "$chroot_dir/tmp/" && cp /etc/resolv.conf "$chroot_dir/etc/resolv.conf"
  "$lab" make-store "$chroot_dir/tmp/Tasks.sqlite" --items 2000 --external-files 2 > /dev/null
  mount -t proc proc "$chroot_dir/proc"
  trap 'umount "$chroot_dir/proc" 2>/dev/null || true; rm -rf "$root" "$work" || true' EXIT
  chroot "$chroot_dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin bash -euc "
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/$deb > /dev/null
    [ ! -e /usr/lib/swift ] && ! command -v swift > /dev/null
    storectl --version
    mkdir /tmp/backups && storectl backup /tmp/Tasks.sqlite --output /tmp/backups
    echo 'a password for the test' > /tmp/password && export STORECTL_PASSWORD_FILE=/tmp/password
    storectl repo init --repo /tmp/snaps && storectl snapshot create /tmp/Tasks.sqlite --repo /tmp/snaps
    storectl snapshot verify --repo /tmp/snaps --all && storectl repo check --repo /tmp/snaps --read-data
    # libcurl is loaded by the first S3 request (not linked): it is there and used (a closed port
    # is refused: 74); without it, local repositories still work and S3 says what to install (1).
    s3() { AWS_ACCESS_KEY_ID=a AWS_SECRET_ACCESS_KEY=b AWS_ENDPOINT_URL=http://127.0.0.1:9 storectl snapshot list --repo s3://bucket/p 2> /tmp/s3.err; }
    status=0; s3 || status=\$?
    [ \$status -eq 74 ] && grep -q 'connection refused' /tmp/s3.err || { echo \"S3 through libcurl: \$status\"; cat /tmp/s3.err; exit 1; }
    curl_package=\$(dpkg -S libcurl.so.4 | head -n 1 | cut -d: -f1)   # libcurl4, or libcurl4t64 on newer suites
    dpkg --remove --force-depends \"\$curl_package\" > /dev/null
    storectl snapshot verify --repo /tmp/snaps --all > /dev/null
    status=0; s3 || status=\$?
    [ \$status -eq 1 ] && grep -q 'S3 needs libcurl (install libcurl4)' /tmp/s3.err || { echo \"S3 without libcurl: \$status\"; cat /tmp/s3.err; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq storectl > /dev/null
    [ ! -e /usr/bin/storectl ] && [ ! -e /usr/share/man/man1/storectl.1 ]" || fail "the package in a clean Debian root"
  umount "$chroot_dir/proc"
  echo "install-test: apt-get install, use and remove of $deb in a clean $suite root ok"
fi
echo "install-test: ok ($deb)"
exit 0
