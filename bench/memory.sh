#!/usr/bin/env bash
# Peak memory of a format-2 first snapshot against the budget of the format-2 issue
# (64 MiB + 48 bytes a page), on the 1 GiB bench store and on a store four times its size
# (BIG_ITEMS items, generated once into bench/out/big.sqlite: about 4 GiB of disk, several minutes).
# Also what the create left in temporary files: nothing but the repository's own objects.
#
#   bash bench/memory.sh                 # BIG_ITEMS=16000000
#   BIG_ITEMS=0 bash bench/memory.sh     # the 1 GiB store only
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need /usr/bin/time time; need bc bc; need sqlite3 sqlite3
build_release || exit 1
ensure_store
BIG_ITEMS=${BIG_ITEMS:-16000000}
BIG=$OUT/big.sqlite
if [ "$BIG_ITEMS" -gt 0 ] && { [ ! -f "$BIG" ] || [ "$(cat "$OUT/big.items" 2>/dev/null)" != "$BIG_ITEMS" ]; }; then
  rm -f "$BIG" "$BIG-wal" "$BIG-shm"
  echo "generating $BIG_ITEMS items..." >&2
  "$BIN/storectl-lab" make-store "$BIG" --items "$BIG_ITEMS" >/dev/null || exit 1
  echo "$BIG_ITEMS" > "$OUT/big.items"
fi
W=$PWD/$OUT/memory
printf '%-14s %10s %8s %12s %12s %10s\n' store pages seconds "peak MiB" "budget MiB" "temp files"
STORES=("$STORE"); [ "$BIG_ITEMS" -gt 0 ] && STORES+=("$BIG")
for db in "${STORES[@]}"; do
  rm -rf "$W"; mkdir -p "$W"
  sqlite3 "$db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null; cat "$db" > /dev/null
  "$BIN/storectl" repo init --repo "$W/repo" >/dev/null
  PAGES=$(sqlite3 "$db" "PRAGMA page_count")
  settle
  # Temporary files are only packs being staged (`.<name>.tmp-storectl-…`); sample their size.
  ( while sleep 0.2; do find "$W/repo" -name '*.tmp-storectl-*' -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; done ) > "$W/temp" &
  SAMPLER=$!
  timed m "$BIN/storectl" snapshot create "$db" --repo "$W/repo"
  kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null
  TEMP=$(sort -n "$W/temp" | tail -1); TEMP=${TEMP:-0}
  printf '%-14s %10s %8.2f %12s %12s %7.1f MiB\n' "$(du -h "$db" | cut -f1)" "$PAGES" "$SECS" "$RSS_MB" \
    "$(echo "scale=1; 64 + 48 * $PAGES / 1048576" | bc)" "$(echo "scale=1; $TEMP / 1048576" | bc)"
done
rm -rf "$W"
