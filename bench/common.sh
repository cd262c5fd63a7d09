# Shared by the benchmark scripts: release build, the ~1 GiB sample store, timing helpers.
# Source it from bench/*.sh after `cd` to the repository root.
ITEMS=${ITEMS:-4000000}
OUT=bench/out
BIN=${BIN:-.build/release}   # BIN=/other/build/release compares another build
STORE=$OUT/bench.sqlite
mkdir -p "$OUT"
# Encrypted repositories' password (format 2), for storectl, restic and borg alike.
PASSWORD_FILE=$OUT/password
[ -f "$PASSWORD_FILE" ] || { echo "bench password $(date +%s)" > "$PASSWORD_FILE"; chmod 600 "$PASSWORD_FILE"; }
export STORECTL_PASSWORD_FILE=$PWD/$PASSWORD_FILE

need() {   # need COMMAND PACKAGE: install a Debian package when a command is missing
  command -v "$1" >/dev/null && return
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y -qq "$2" >/dev/null
}

# The binary users install (`make release`, the .deb): the Swift runtime and Foundation linked in
# statically. Its peak memory is what the benchmarks report (a dynamically linked build maps
# about 4 MiB more of shared libraries).
build_release() {
  [ "$BIN" = .build/release ] || return 0   # another build, given as it is
  swift build -c release --static-swift-stdlib --product storectl >/dev/null &&
    swift build -c release --static-swift-stdlib --product storectl-lab >/dev/null
}

# A Core Data-shaped WAL store of $ITEMS items (20% soft-deleted), regenerated when missing or stale.
ensure_store() {
  local stamp="$ITEMS items, sample v3"   # v2: ZITEM_Z_ENT_INDEX, as Core Data creates; v3: soft-deletable tags
  if [ ! -f "$STORE" ] || [ "$(cat "$OUT/bench.items" 2>/dev/null)" != "$stamp" ]; then
    rm -f "$STORE" "$STORE-wal" "$STORE-shm"
    echo "generating $ITEMS items..." >&2
    "$BIN/storectl-lab" make-store "$STORE" --items "$ITEMS" >/dev/null || exit 1
    echo "$stamp" > "$OUT/bench.items"
  fi
  sqlite3 "$STORE" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  cat "$STORE" > /dev/null   # warm the page cache for everyone
}

now() { date +%s.%N; }

# timed NAME COMMAND...: runs under GNU time; sets SECS, RSS_MB, CPU_S (user + system), STATUS.
timed() {
  shift
  local t0; t0=$(now)
  /usr/bin/time -f "%M %U %S" -o "$OUT/rss" "$@" >/dev/null 2>"$OUT/err"
  STATUS=$?
  SECS=$(echo "$(now) - $t0" | bc -l)
  RSS_MB=$(awk '{ v = $1 } END { printf "%.1f", v / 1024 }' "$OUT/rss")
  CPU_S=$(awk '{ v = $2 + $3 } END { printf "%.1f", v }' "$OUT/rss")
  [ "$STATUS" -eq 0 ] || { echo "  (exit $STATUS: $(head -c 300 "$OUT/err"))" >&2; strict_fail "$@"; }
}

# BENCH_STRICT=1 (bench/smoke.sh, CI): a command that fails ends the script with 1, so a smoke run
# cannot pass while storectl fails; measurements print a failure and go on otherwise.
strict_fail() {
  [ "${BENCH_STRICT:-0}" = 1 ] || return 0
  echo "bench: failed (BENCH_STRICT): $*" >&2
  exit 1
}

# median V1 V2 ...: the middle value (the lower middle for an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# settle: flush the previous run's dirty pages so one measurement does not pay for another's
# writes, then touch WARM_MIB of memory (default 2048; 0: not) so each run starts with memory its
# host backs. The development VM (Firecracker, virtio-balloon free page reporting) hands memory
# left free for a few seconds back to its host, and the first process to write a GiB into it then
# pays up to ~1.2 s more system time in the kernel's copy into the page cache, more or less
# depending on the folio sizes its writes get: measured at stop 43, the same restore took 1.64 s
# right after another and 2.80 s after 6 s idle, while a restore of another repository's
# snapshot took 2.03 s either way; so alternating pairs were skewed by whichever ran second.
settle() { sync; sleep 1; warm_memory; }
warm_memory() {
  local mib=${WARM_MIB:-2048} avail
  [ "$mib" -gt 0 ] && [ -d /dev/shm ] || return 0
  avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
  [ "${avail:-0}" -gt $((mib * 2)) ] || return 0
  head -c "${mib}M" /dev/zero >/dev/shm/storectl-bench-warm 2>/dev/null
  rm -f /dev/shm/storectl-bench-warm
}
