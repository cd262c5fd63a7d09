#!/usr/bin/env bash
# Restore at a point of a long history (not a test): how a restore at a point grows with the time
# since its chain's base, from its latest milestone through digests (the default) and without
# milestones (from the chain's base, through digests: STORECTL_TEST_IGNORE_MILESTONES=1; what
# restore did before milestones), against the same run's plain restore
# of the base (a format-2 snapshot restore: the target is <= 1.2x it at any point of an hour).
# The fairest anchor is a plain restore of the same database: the point restored once is taken
# as a snapshot into a second repository (same settings), and that snapshot's plain restore
# ("same") is timed beside the others: a store grows while it is followed, so the base can be
# a fifth smaller than the point, and restoring it is cheaper for that alone. That snapshot's
# store passed quick_check when it was taken, so its restore does not run it again; a point's
# does (as the base's, recorded unchecked): "checked" is the same snapshot restored with --check,
# the same checks as the point.
# storectl only (bench/replicate.sh runs Litestream beside it): a copy of the ~1 GiB store of
# bench/common.sh followed into a local folder (plain: --insecure-no-encryption, as there) while
# storectl-lab writer commits a small transaction every INTERVAL_MS for DURATION seconds; then, at
# each fraction in AT of the writing window, ROUNDS alternating rounds of the three restores
# (medians), each fsynced and verified as any restore.
#
#   bash bench/point-history.sh                  # ITEMS=4000000 DURATION=900 AT="0.25 0.5 0.95" ROUNDS=3
#   DURATION=1800 AT="0.5 0.98" bash bench/point-history.sh
#   NAME=hour DURATION=3600 AT= bash bench/point-history.sh     # follow only (no restores), kept in bench/out/hour
#   NAME=hour REUSE=1 AT="0.5 0.98" bash bench/point-history.sh # time restores of a history already followed
#   NAME=base15 BASE_INTERVAL=15m DURATION=1800 AT="0.49 0.98" bash bench/point-history.sh   # a base every 15 minutes
#   (plain is always the first chain's base; same and checked are the point's own database)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need /usr/bin/time time; need bc bc; need python3 python3
build_release || exit 1
ensure_store
DURATION=${DURATION:-900}
INTERVAL_MS=${INTERVAL_MS:-2}
AT=${AT-0.25 0.5 0.95}
ROUNDS=${ROUNDS:-3}
BASE_INTERVAL=${BASE_INTERVAL:-1h}   # replicate --base-interval: 15m starts a chain (a new base) every 15 minutes
W=$PWD/$OUT/${NAME:-point-history}
ratio() { if [ "$(echo "$2 == 0" | bc -l)" = 1 ]; then echo n/a; else printf '%.2f' "$(echo "$1 / $2" | bc -l)"; fi; }
mib() { printf '%.1f' "$(echo "$1 / 1048576" | bc -l)"; }
rfc() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S.%3NZ; }

if [ "${REUSE:-0}" = 1 ]; then
  [ -s "$W/window" ] || { echo "bench: REUSE=1 but $W holds no followed history (run without REUSE first)" >&2; exit 1; }
  read -r W0 W1 <"$W/window"
  printf 'reusing the history followed in %s (%s s of writing)\n' "$W" "$(printf '%.0f' "$(echo "$W1 - $W0" | bc -l)")"
  rm -rf "$W/anchor"
else
rm -rf "$W"; mkdir -p "$W"
cp "$STORE" "$W/Tasks.sqlite"
"$BIN/storectl" repo init --repo "$W/repo" --insecure-no-encryption >/dev/null 2>&1 || { echo "bench: repo init failed" >&2; exit 1; }
"$BIN/storectl" replicate "$W/Tasks.sqlite" --repo "$W/repo" --base-interval "$BASE_INTERVAL" --json >"$W/replicate.json" 2>"$W/replicate.err" &
FPID=$!
trap 'kill $FPID 2>/dev/null' EXIT
until [ -n "$(find "$W/repo/points" -type f ! -name '*.tmp*' 2>/dev/null | head -n 1)" ]; do
  kill -0 "$FPID" 2>/dev/null || { echo "bench: replicate did not start: $(tail -c 400 "$W/replicate.err")" >&2; exit 1; }
  sleep 0.1
done
sleep 1
W0=$(now)
"$BIN/storectl-lab" writer "$W/Tasks.sqlite" --interval-ms "$INTERVAL_MS" --duration "$DURATION" >"$W/writer.json" 2>"$W/writer.err" ||
  { echo "bench: writer failed: $(head -c 300 "$W/writer.err")" >&2; strict_fail writer; }
W1=$(now)
echo "$W0 $W1" >"$W/window"
sleep 3
kill -TERM "$FPID"; wait "$FPID" || { echo "bench: replicate exited $?: $(tail -c 400 "$W/replicate.err")" >&2; strict_fail replicate; }
trap - EXIT
python3 - "$W/replicate.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stores"][0]
print(f"replicate: {s['points']} points in {s['segments']} segments, {len(s['gaps'])} gaps, {len(s['bases'])} bases")
PY
DIGESTS=$(find "$W/repo/points" -name 'digest-*' | wc -l)
MILESTONES=$(find "$W/repo/points" -name 'milestone-*' | wc -l)
printf 'store: %s (%s items); writer: a commit every %s ms for %s s; repository %s MiB, of it points %s MiB, digests %s (%s MiB), milestones %s\n' \
  "$STORE" "$ITEMS" "$INTERVAL_MS" "$DURATION" "$(mib "$(du -sb "$W/repo" | cut -f1)")" "$(mib "$(du -sb "$W/repo/points" | cut -f1)")" \
  "$DIGESTS" "$(mib "$(find "$W/repo/points" -name 'digest-*' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')")" "$MILESTONES"

fi
BASE=$(ls "$W/repo/snapshots" | head -n 1)
"$BIN/storectl" repo init --repo "$W/anchor" --insecure-no-encryption >/dev/null 2>&1 || { echo "bench: repo init (anchor) failed" >&2; exit 1; }
printf '\n%-6s %-24s %8s %9s %11s %8s %8s %9s %8s %8s %9s %12s\n' at time "point s" "peak MiB" "from-base s" "plain s" "same s" "checked s" "/ plain" "/ same" "/ checked" "/ from-base"
for at in $AT; do
  T=$(echo "$W0 + $at * ($W1 - $W0)" | bc -l)
  declare -a A=() B=() C=() D=() E=()
  PEAK=0
  # The point's database as a snapshot of its own, for the same-size anchor.
  rm -f "$W"/r.sqlite*
  timed r "$BIN/storectl" snapshot restore --repo "$W/repo" --at "$(rfc "$T")" --to "$W/r.sqlite"
  timed s "$BIN/storectl" snapshot create "$W/r.sqlite" --repo "$W/anchor"
  SAME=$(ls "$W/anchor/snapshots" | sort | tail -n 1)
  for _ in $(seq "$ROUNDS"); do
    rm -f "$W"/r.sqlite*; settle
    timed r "$BIN/storectl" snapshot restore --repo "$W/repo" --at "$(rfc "$T")" --to "$W/r.sqlite"; A+=("$SECS"); PEAK=$RSS_MB
    rm -f "$W"/r.sqlite*; settle
    timed r env STORECTL_TEST_IGNORE_MILESTONES=1 "$BIN/storectl" snapshot restore --repo "$W/repo" --at "$(rfc "$T")" --to "$W/r.sqlite"; B+=("$SECS")
    rm -f "$W"/r.sqlite*; settle
    timed r "$BIN/storectl" snapshot restore --repo "$W/repo" "$BASE" --to "$W/r.sqlite"; C+=("$SECS")
    rm -f "$W"/r.sqlite*; settle
    timed r "$BIN/storectl" snapshot restore --repo "$W/anchor" "$SAME" --to "$W/r.sqlite"; D+=("$SECS")
    rm -f "$W"/r.sqlite*; settle
    timed r "$BIN/storectl" snapshot restore --repo "$W/anchor" "$SAME" --to "$W/r.sqlite" --check; E+=("$SECS")
  done
  rm -f "$W"/r.sqlite*
  a=$(median "${A[@]}"); b=$(median "${B[@]}"); c=$(median "${C[@]}"); d=$(median "${D[@]}"); e=$(median "${E[@]}")
  printf '%-6s %-24s %8.2f %9s %11.2f %8.2f %8.2f %9.2f %8s %8s %9s %12s\n' "$at" "$(rfc "$T")" "$a" "$PEAK" "$b" "$c" "$d" "$e" "$(ratio "$a" "$c")" "$(ratio "$a" "$d")" "$(ratio "$a" "$e")" "$(ratio "$a" "$b")"
done
[ -n "${T:-}" ] && "$BIN/storectl" snapshot restore --repo "$W/repo" --at "$(rfc "$T")" --to "$W/r.sqlite" --json 2>/dev/null |
  python3 -c "import json,sys; r=json.load(sys.stdin)['pointReads']; print(f\"reading the last point: from {('milestone ' + r['milestone']) if r.get('milestone') else 'the base'}, {r['digests']} digests, {r['segments']} segments, {r['commits']} commits replayed\")"
rm -f "$W"/r.sqlite*
printf '(medians of %s alternating rounds; point: restore --at (from the latest milestone, then digests); from-base: the same point from the chain’s base, through digests (STORECTL_TEST_IGNORE_MILESTONES=1); plain: the base restored (recorded unchecked: quick_check when restored); same: a snapshot of the point’s own database restored (checked when taken: no quick_check again); checked: the same with --check, the checks a point gets)\n' "$ROUNDS"
