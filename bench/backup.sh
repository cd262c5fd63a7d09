#!/usr/bin/env bash
# Backup benchmark (not a test). Generates a ~1 GiB Core Data-shaped WAL store (4 million items,
# 20% soft-deleted) and times, side by side in one run:
#   cp, sqlite3 .backup, VACUUM INTO, storectl backup (and --verify none)
# first on an idle store, then while a second process commits a small transaction every 2 ms.
# For each copy under load it reports the writer's p50/p99/max commit latency during that copy,
# and whether the copy finished within LIMIT seconds. Peak memory comes from GNU time.
#
#   bash bench/backup.sh                 # ITEMS=4000000 LIMIT=60 by default
#   ITEMS=400000 bash bench/backup.sh    # a quick ~100 MiB run
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
LIMIT=${LIMIT:-60}
INTERVAL_MS=${INTERVAL_MS:-2}
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc
build_release || exit 1
ensure_store

reset() { sqlite3 "$STORE" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null; rm -rf "$OUT"/copy*; }

# copy NAME: runs the named copy under GNU time and `timeout`; sets SECS, RSS_MB, STATUS.
copy() {
  local target="$OUT/copy.sqlite"
  case "$1" in
    cp)            set -- cp "$STORE" "$target" ;;
    sqlite3)       set -- sqlite3 "$STORE" ".backup '$target'" ;;
    vacuum)        set -- sqlite3 "$STORE" "VACUUM INTO '$target'" ;;
    storectl)      set -- "$BIN/storectl" backup "$STORE" --output "$target" ;;
    storectl-none) set -- "$BIN/storectl" backup "$STORE" --output "$target" --verify none ;;
  esac
  local t0; t0=$(now)
  /usr/bin/time -f "%M" -o "$OUT/rss" timeout "$LIMIT" "$@" >/dev/null 2>"$OUT/err"
  STATUS=$?
  SECS=$(echo "$(now) - $t0" | bc -l)
  RSS_MB=$(awk '{ printf "%.1f", $1 / 1024 }' "$OUT/rss" 2>/dev/null | tail -n 1)
}

start_writer() {
  rm -f "$OUT/ready" "$OUT/latency.log"
  "$BIN/storectl-lab" writer "$STORE" --interval-ms "$INTERVAL_MS" --latency-log "$OUT/latency.log" --ready-file "$OUT/ready" >/dev/null &
  WRITER=$!
  while [ ! -e "$OUT/ready" ]; do sleep 0.05; done
  sleep 1
}
stop_writer() { kill -TERM "$WRITER"; wait "$WRITER" 2>/dev/null; }
latency() { "$BIN/storectl-lab" latency "$OUT/latency.log" --from "$1" --to "$2"; }
field() { sed -E "s/.*\"$1\":([0-9.e+-]+).*/\1/"; }

TOOLS="cp sqlite3 vacuum storectl storectl-none"
declare -A IDLE IDLE_RSS
printf '\nstore: %s, %s, %s items (%s soft-deleted), page cache warm\n' "$STORE" \
  "$(du -h "$STORE" | cut -f1)" "$ITEMS" "20%"
sqlite3 "$STORE" "SELECT 'journal_mode: ' || (SELECT journal_mode FROM pragma_journal_mode), 'pages: ' || (SELECT page_count FROM pragma_page_count)" | tr '|' ' '

printf '\n== idle store\n%-16s %9s %11s %9s\n' "copy" "seconds" "vs .backup" "peak MiB"
for tool in $TOOLS; do
  reset; copy "$tool"
  IDLE[$tool]=$SECS; IDLE_RSS[$tool]=$RSS_MB
  [ "$STATUS" -eq 0 ] || { echo "  ($tool exited $STATUS: $(head -c 200 "$OUT/err"))"; strict_fail "$tool"; }
done
for tool in $TOOLS; do
  printf '%-16s %9.2f %11.2f %9s\n' "$tool" "${IDLE[$tool]}" "$(echo "${IDLE[$tool]} / ${IDLE[sqlite3]}" | bc -l)" "${IDLE_RSS[$tool]}"
done

reset; start_writer; t0=$(now); sleep 8; t1=$(now); stop_writer
BASE=$(latency "$t0" "$t1")
BASE_P99=$(echo "$BASE" | field p99Ms)
printf '\n== writer alone, commit every %s ms: p50 %.2f ms, p99 %.2f ms, max %.2f ms (%s commits)\n' "$INTERVAL_MS" \
  "$(echo "$BASE" | field p50Ms)" "$BASE_P99" "$(echo "$BASE" | field maxMs)" "$(echo "$BASE" | field commits)"

printf '\n== under the writer (limit %ss)\n%-16s %-9s %9s %9s %9s %9s %9s %10s\n' "$LIMIT" "copy" "finished" "seconds" "vs idle" \
  "p50 ms" "p99 ms" "max ms" "peak MiB"
for tool in $TOOLS; do
  reset; start_writer
  t0=$(now); copy "$tool"; t1=$(now)
  stop_writer
  STATS=$(latency "$t0" "$t1")
  finished=yes; [ "$STATUS" -eq 0 ] || finished="no($STATUS)"
  printf '%-16s %-9s %9.2f %9.2f %9.2f %9.2f %9.2f %10s\n' "$tool" "$finished" "$SECS" "$(echo "$SECS / ${IDLE[$tool]}" | bc -l)" \
    "$(echo "$STATS" | field p50Ms)" "$(echo "$STATS" | field p99Ms)" "$(echo "$STATS" | field maxMs)" "$RSS_MB"
done
reset
printf '\n(cp of a live WAL store copies the main file only: not a consistent backup; shown as the I/O floor.)\n'
