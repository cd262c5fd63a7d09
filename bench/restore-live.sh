#!/usr/bin/env bash
# A restore in place beside a running app (benchmark, not a test): the ~1 GiB store, a snapshot of
# it, then ROUNDS rounds, alternating, of
#   - `snapshot restore --in-place` (the swap; the app stopped first, as it requires),
#   - `snapshot restore --in-place --live` beside a writer committing every 2 ms,
#   - `--live` with no app (nothing commits: its safety snapshot is taken before the lock),
#   - the anchor: the sqlite3 shell's `.restore` of the same snapshot's file beside the same writer
#     (the backup API alone: no staging, no check, no safety snapshot, no read-back),
# each on the store as the previous left it. For the two beside the writer: the writer's commits
# that waited over 100 ms and their waits in all (what the lock cost the app), its p99/max commit
# latency during the run, its failed commits (SQLITE_BUSY after its 5 s busy timeout), and the
# -wal's size after; for --live, how long it held the lock (writeLockSeconds). Medians printed.
#
#   bash bench/restore-live.sh            # ROUNDS=3
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
ROUNDS=${ROUNDS:-3}
need sqlite3 sqlite3; need bc bc
build_release || exit 1
ensure_store
export STORECTL_PASSWORD_FILE=$PWD/$PASSWORD_FILE
REPO=$OUT/live-repo
rm -rf "$REPO" "$OUT/live-file.sqlite"
"$BIN/storectl" repo init --repo "$REPO" >/dev/null || exit 1
ID=$("$BIN/storectl" snapshot create "$STORE" --repo "$REPO" --json | sed -nE 's/^  "id" : "([^"]+)".*/\1/p')
[ -n "$ID" ] || { echo "no snapshot" >&2; exit 1; }
"$BIN/storectl" snapshot restore --repo "$REPO" "$ID" --to "$OUT/live-file.sqlite" >/dev/null || exit 1

field() { sed -E "s/.*\"$1\" ?: ?([0-9.e+-]+).*/\1/"; }
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
col() { awk -v c="$2" '{ print $c }' "$OUT/live.$1" | median; }

# beside LABEL CMD...: a writer running, the command under it; appends "secs p50 p99 max failed walMiB"
beside() {
  local label=$1; shift
  rm -f "$OUT/ready" "$OUT/latency.log"
  "$BIN/storectl-lab" writer "$STORE" --interval-ms 2 --latency-log "$OUT/latency.log" --ready-file "$OUT/ready" > "$OUT/writer.json" &
  local writer=$!
  while [ ! -e "$OUT/ready" ]; do sleep 0.05; done
  sleep 1
  local t0 t1 status
  t0=$(now); "$@" >"$OUT/out.json" 2>"$OUT/err"; status=$?; t1=$(now)
  local lock; lock=$(tr -d '\n ' < "$OUT/out.json" | grep -o '"writeLockSeconds":[0-9.e+-]*' | cut -d: -f2)
  local wal; wal=$(( $(stat -c %s "$STORE-wal" 2>/dev/null || echo 0) / 1048576 ))   # before the writer's close removes it
  sleep 0.5
  kill -TERM "$writer"; wait "$writer" 2>/dev/null
  [ "$status" -eq 0 ] || { echo "  ($label exited $status: $(head -c 300 "$OUT/err"))"; strict_fail "$label"; }
  local stats; stats=$("$BIN/storectl-lab" latency "$OUT/latency.log" --from "$t0" --to "$(echo "$t1 + 0.5" | bc -l)")
  # What the lock cost the app: its commits begun in the window that waited over 100 ms, and how
  # long they waited in all (p50/p99 over the window mostly count the commits made while the
  # restore staged and snapshotted, unlocked, so a longer run looks better).
  local waits; waits=$(awk -v a="$t0" -v b="$t1" '$1 >= a && $1 <= b && $2 > 0.1 { n++; s += $2 } END { printf "%d %.2f", n, s }' "$OUT/latency.log")
  echo "$(echo "$t1 - $t0" | bc -l) $waits $(echo "$stats" | field p99Ms) $(echo "$stats" | field maxMs) $(tr -d '\n ' < "$OUT/writer.json" | field errors) $wal ${lock:-0}" >> "$OUT/live.$label"
}
alone() {
  sqlite3 "$STORE" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  local t0; t0=$(now)
  "$BIN/storectl" snapshot restore --repo "$REPO" "$ID" --in-place "$STORE" >/dev/null 2>"$OUT/err" || { echo "  (swap: $(head -c 300 "$OUT/err"))"; strict_fail swap; }
  echo "$(echo "$(now) - $t0" | bc -l)" >> "$OUT/live.swap"
}

# idle LABEL: --live with no app (nothing commits: the safety snapshot is taken before the lock)
idle() {
  sqlite3 "$STORE" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null; sleep 0.2
  local t0; t0=$(now)
  STORECTL_LOG_LEVEL=debug "$BIN/storectl" snapshot restore --repo "$REPO" "$ID" --in-place "$STORE" --live --json >"$OUT/out.json" 2>"$OUT/err" || { echo "  (idle: $(head -c 300 "$OUT/err"))"; strict_fail idle; }
  grep -q "safety snapshot taken before the write lock" "$OUT/err" || echo "  (idle: the safety snapshot was taken again under the lock)"
  echo "$(echo "$(now) - $t0" | bc -l) $(tr -d '\n ' < "$OUT/out.json" | grep -o '"writeLockSeconds":[0-9.e+-]*' | cut -d: -f2)" >> "$OUT/live.idle"
}

rm -f "$OUT"/live.*
for round in $(seq "$ROUNDS"); do
  settle; alone
  settle; sqlite3 "$STORE" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  beside live "$BIN/storectl" snapshot restore --repo "$REPO" "$ID" --in-place "$STORE" --live --json
  settle; idle
  settle; sqlite3 "$STORE" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
  beside shell sqlite3 -cmd ".timeout 60000" "$STORE" ".restore $OUT/live-file.sqlite"
done
# Each run leaves a safety snapshot; the repository goes with the round.
rm -rf "$REPO" "$OUT/live-file.sqlite"
sqlite3 "$STORE" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null

printf '\nstore %s (%s), writer commits every 2 ms (busy timeout 5 s); median of %s rounds\n' "$STORE" "$(du -h "$STORE" | cut -f1)" "$ROUNDS"
printf '%-44s %8s %6s %8s %8s %9s %7s %8s %7s\n' "" seconds "waits" "waited s" "p99 ms" "max ms" failed "-wal MiB" "lock s"
printf '%-44s %8.2f\n' "restore --in-place (swap, the app stopped)" "$(awk '{ print $1 }' "$OUT/live.swap" | median)"
printf '%-44s %8.2f %6d %8.2f %8.2f %9.1f %7d %8d %7.2f\n' "restore --in-place --live (beside the app)" "$(col live 1)" "$(col live 2)" "$(col live 3)" "$(col live 4)" "$(col live 5)" "$(col live 6)" "$(col live 7)" "$(col live 8)"
printf '%-44s %8.2f %6s %8s %8s %9s %7s %8s %7.2f\n' "restore --in-place --live (no app)" "$(col idle 1)" "" "" "" "" "" "" "$(col idle 2)"
printf '%-44s %8.2f %6d %8.2f %8.2f %9.1f %7d %8d\n' "sqlite3 .restore (beside the app)" "$(col shell 1)" "$(col shell 2)" "$(col shell 3)" "$(col shell 4)" "$(col shell 5)" "$(col shell 6)" "$(col shell 7)"
echo "waits: the writer's commits that waited over 100 ms, and their waits in all; lock s: writeLockSeconds (--live's own count)"
printf 'ratio of what the app waited, --live / sqlite3 .restore: %.2f (whole runs: %.2f)\n' "$(echo "$(col live 3) / $(col shell 3)" | bc -l)" "$(echo "$(col live 1) / $(col shell 1)" | bc -l)"
