#!/usr/bin/env bash
# Purge benchmark (not a test), on the ~1 GiB store of bench/common.sh (4M items, 20% soft-deleted,
# most past a 30-day retention), while a second process commits a small transaction every 2 ms:
#   storectl purge (1000-row batches, Core Data cascades included)  vs  one DELETE of the same items
# Reports rows per second for both and the writer's p50/p99/max commit latency (and failed
# commits, its busy timeout being 5 s) during each.
#
#   bash bench/purge.sh             # ITEMS=4000000
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc
build_release || exit 1
ensure_store
BATCH=${BATCH:-1000}
INTERVAL_MS=${INTERVAL_MS:-2}

run_with_writer() {   # run_with_writer STORE COMMAND...: sets SECS, STATS
  local store=$1; shift
  rm -f "$OUT/ready" "$OUT/latency.log"
  "$BIN/storectl-lab" writer "$store" --interval-ms "$INTERVAL_MS" --latency-log "$OUT/latency.log" --ready-file "$OUT/ready" > "$OUT/writer.json" &
  local writer=$!
  while [ ! -e "$OUT/ready" ]; do sleep 0.05; done
  sleep 1
  local t0; t0=$(now)
  "$@" > "$OUT/run.out" 2> "$OUT/run.err"
  local t1; t1=$(now)
  sleep 0.2; kill -TERM "$writer"; wait "$writer" 2>/dev/null
  SECS=$(echo "$t1 - $t0" | bc -l)
  STATS=$("$BIN/storectl-lab" latency "$OUT/latency.log" --from "$t0" --to "$t1")
  ERRORS=$(sed -E 's/.*"errors" : ([0-9]+).*/\1/;t;d' "$OUT/writer.json" | head -n 1)
}
field() { sed -E "s/.*\"$1\":([0-9.e+-]+).*/\1/"; }

for copy in a b; do rm -f "$OUT/purge-$copy.sqlite"*; cp "$STORE" "$OUT/purge-$copy.sqlite"; done
CUTOFF=$(echo "$(date +%s) - 978307200 - 30 * 86400" | bc)
cat > "$OUT/purge.toml" <<TOML
[store]
path = "purge-a.sqlite"
[[purge]]
name = "items"
entity = "Item"
deleted_flag = "ZISDELETED"
deleted_at = "ZDELETEDAT"
time_format = "coredata"
retention = "30d"
batch_size = $BATCH
TOML

printf '\nstore: %s (%s), items soft-deleted before %s UTC go; writer commits every %s ms\n' "$STORE" \
  "$(du -h "$STORE" | cut -f1)" "$(date -u -d "@$(( CUTOFF + 978307200 ))" '+%F %T')" "$INTERVAL_MS"
settle; run_with_writer "$OUT/purge-a.sqlite" "$BIN/storectl" purge --policy "$OUT/purge.toml" --json
S_SECS=$SECS; S_STATS=$STATS; S_ERR=$ERRORS; cp "$OUT/run.out" "$OUT/run.out.storectl"
S_ROWS=$(grep -E '"deleted" :' "$OUT/run.out" | head -n 1 | sed -E 's/[^0-9]//g')
S_CASCADE=$(grep -A2 '"cascaded"' "$OUT/run.out" | grep ZATTACHMENT | sed -E 's/[^0-9]//g')
settle; run_with_writer "$OUT/purge-b.sqlite" sqlite3 "$OUT/purge-b.sqlite" \
  "PRAGMA busy_timeout = 60000; DELETE FROM ZITEM WHERE Z_ENT IN (3, 4) AND ZISDELETED != 0 AND ZDELETEDAT IS NOT NULL AND ZDELETEDAT <= $CUTOFF; SELECT changes();"
D_SECS=$SECS; D_STATS=$STATS; D_ERR=$ERRORS
D_ROWS=$(tail -n 1 "$OUT/run.out")

printf '\n%-34s %9s %9s %10s %8s %8s %9s %7s\n' "" "rows" "seconds" "rows/s" "p50 ms" "p99 ms" "max ms" "errors"
printf '%-34s %9s %9.2f %10.0f %8.2f %8.2f %9.2f %7s\n' "storectl purge (batches of $BATCH)" "$S_ROWS" "$S_SECS" "$(echo "$S_ROWS / $S_SECS" | bc -l)" \
  "$(echo "$S_STATS" | field p50Ms)" "$(echo "$S_STATS" | field p99Ms)" "$(echo "$S_STATS" | field maxMs)" "$S_ERR"
printf '%-34s %9s %9.2f %10.0f %8.2f %8.2f %9.2f %7s\n' "one DELETE statement" "$D_ROWS" "$D_SECS" "$(echo "$D_ROWS / $D_SECS" | bc -l)" \
  "$(echo "$D_STATS" | field p50Ms)" "$(echo "$D_STATS" | field p99Ms)" "$(echo "$D_STATS" | field maxMs)" "$D_ERR"
printf '\nthroughput storectl / DELETE: %.2f   (storectl also deleted %s cascaded attachments and the join rows)\n' \
  "$(echo "($S_ROWS / $S_SECS) / ($D_ROWS / $D_SECS)" | bc -l)" "${S_CASCADE:-0}"
# The run's stages (its --json report): the deletes themselves, and the checks after them, which the
# single DELETE does not do.
STAGES=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(" ".join("%s=%.2f" % (s["name"], s["seconds"]) for s in r["stages"]))' "$OUT/run.out.storectl" 2>/dev/null)
PURGE_SECS=$(echo "$STAGES" | tr ' ' '\n' | sed -n 's/^purge=//p')
echo "storectl stages: $STAGES"
[ -n "$PURGE_SECS" ] && printf 'throughput of the purge stage / DELETE: %.2f   (%.0f rows/s; the rest is lock, plan, and the checks after the deletes)\n' \
  "$(echo "($S_ROWS / $PURGE_SECS) / ($D_ROWS / $D_SECS)" | bc -l)" "$(echo "$S_ROWS / $PURGE_SECS" | bc -l)"
rm -f "$OUT"/purge-[ab].sqlite*
