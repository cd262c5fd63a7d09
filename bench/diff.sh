#!/usr/bin/env bash
# storectl diff against sqldiff (Debian's sqlite3-tools), in one run, on the ~1 GiB bench store:
#   - two format-2 snapshots that differ by $UPDATES scattered row updates: `storectl diff --repo`
#     (compares the maps' content ids, decodes only the leaves that differ) against sqldiff on the
#     two restored files (which reads both whole);
#   - the two restored files: `storectl diff A B` against sqldiff A B.
# Checks that storectl reports exactly $UPDATES changed objects. Prints seconds, peak RSS, peak
# anonymous memory (what the command allocated, without the executable's code mapped from the page
# cache: bench/peakmem.py says why both), ratios.
#
#   bash bench/diff.sh              # 1 GiB store, 5,000 updates
#   ITEMS=20000 UPDATES=200 bash bench/diff.sh
#   REPEAT=1 bash bench/diff.sh     # one round (default 3, medians)
#   KEEP=1 bash bench/diff.sh       # keep bench/out/diff (the repository, both files, the diffs) to look at after
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
UPDATES=${UPDATES:-5000}
REPEAT=${REPEAT:-3}
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || { echo "bench/diff.sh: REPEAT must be a whole number of rounds, 1 or more (got '$REPEAT')" >&2; exit 64; }
need sqldiff sqlite3-tools
need bc bc
build_release || exit 1
ensure_store

WORK=$OUT/diff
rm -rf "$WORK"; mkdir -p "$WORK"
cp "$STORE" "$WORK/store.sqlite"
"$BIN/storectl" repo init --repo "$WORK/repo" >/dev/null || exit 1
snap() { "$BIN/storectl" snapshot create "$WORK/store.sqlite" --repo "$WORK/repo" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
A=$(snap) || exit 1
sqlite3 "$WORK/store.sqlite" "UPDATE ZITEM SET ZTITLE = ZTITLE || ' (edited)', Z_OPT = Z_OPT + 1
  WHERE Z_PK IN (SELECT Z_PK FROM ZITEM ORDER BY random() LIMIT $UPDATES); PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
B=$(snap) || exit 1
"$BIN/storectl" snapshot restore --repo "$WORK/repo" "$A" --to "$WORK/a.sqlite" >/dev/null || exit 1
"$BIN/storectl" snapshot restore --repo "$WORK/repo" "$B" --to "$WORK/b.sqlite" >/dev/null || exit 1
echo "store: $(du -h "$WORK/a.sqlite" | cut -f1), $UPDATES scattered updates between snapshots $A and $B"

count_changed() {   # the number of changed objects in a diff's JSON
  python3 -c 'import json,sys; r=json.load(sys.stdin); print(sum(e["changed"] for e in r["entities"]))' < "$1"
}

# REPEAT rounds, the three commands alternating; medians (sqldiff's time alone moved 3.5-6 s between runs).
# The times are taken without the memory sampler: bench/peakmem.py reads /proc every 2 ms, and on a
# 2-core machine that polling took CPU from storectl's two lanes (a median of 1.24 s under it against
# 0.95-0.99 s by hand, stop 80). Peak memory is measured in one more run of each, sampled.
SNAP_T=(); FILE_T=(); SQLDIFF_T=()
rss() { awk '{ printf "%.1f", $1 / 1024 }' "$OUT/rss"; }    # peak RSS, MiB
anon() { awk '{ printf "%.1f", $2 / 1024 }' "$OUT/rss"; }   # peak anonymous memory, MiB
for round in $(seq "$REPEAT"); do
  settle
  t0=$(now); "$BIN/storectl" diff --repo "$WORK/repo" "$A" "$B" --json > "$WORK/snapshots.json"; st=$?
  SNAP_T+=("$(echo "$(now) - $t0" | bc -l)")
  [ "$st" = 2 ] || { echo "storectl diff of the snapshots exited $st" >&2; strict_fail diff; }

  settle
  t0=$(now); "$BIN/storectl" diff "$WORK/a.sqlite" "$WORK/b.sqlite" --json > "$WORK/files.json"; st=$?
  FILE_T+=("$(echo "$(now) - $t0" | bc -l)")
  [ "$st" = 2 ] || { echo "storectl diff of the files exited $st" >&2; strict_fail diff; }

  settle
  t0=$(now); sqldiff "$WORK/a.sqlite" "$WORK/b.sqlite" > "$WORK/sqldiff.sql"; st=$?
  SQLDIFF_T+=("$(echo "$(now) - $t0" | bc -l)")
  [ "$st" = 0 ] || { echo "sqldiff exited $st" >&2; strict_fail diff; }
done
settle; python3 bench/peakmem.py "$OUT/rss" "$BIN/storectl" diff --repo "$WORK/repo" "$A" "$B" --json > /dev/null; SNAP_RSS=$(rss); SNAP_ANON=$(anon)
settle; python3 bench/peakmem.py "$OUT/rss" "$BIN/storectl" diff "$WORK/a.sqlite" "$WORK/b.sqlite" --json > /dev/null; FILE_RSS=$(rss); FILE_ANON=$(anon)
settle; python3 bench/peakmem.py "$OUT/rss" sqldiff "$WORK/a.sqlite" "$WORK/b.sqlite" > /dev/null; SQLDIFF_RSS=$(rss); SQLDIFF_ANON=$(anon)
SNAP_S=$(median "${SNAP_T[@]}"); FILE_S=$(median "${FILE_T[@]}"); SQLDIFF_S=$(median "${SQLDIFF_T[@]}")
SNAP_CHANGED=$(count_changed "$WORK/snapshots.json")
FILE_CHANGED=$(count_changed "$WORK/files.json")
SQLDIFF_LINES=$(grep -c '^UPDATE "ZITEM"\|^UPDATE ZITEM' "$WORK/sqldiff.sql")
echo "$REPEAT rounds, medians; seconds per round: snapshots ${SNAP_T[*]}; files ${FILE_T[*]}; sqldiff ${SQLDIFF_T[*]}" | sed -E 's/([0-9]*\.[0-9]{2})[0-9]*/\1/g'

printf '%-44s %8s %9s %9s %s\n' "" seconds "peak MiB" "anon MiB" "changed objects"   # memory: one sampled run each
printf '%-44s %8.2f %9s %9s %s\n' "storectl diff, two snapshots (content ids)" "$SNAP_S" "$SNAP_RSS" "$SNAP_ANON" "$SNAP_CHANGED"
printf '%-44s %8.2f %9s %9s %s\n' "storectl diff, the two restored files" "$FILE_S" "$FILE_RSS" "$FILE_ANON" "$FILE_CHANGED"
printf '%-44s %8.2f %9s %9s %s\n' "sqldiff, the two restored files" "$SQLDIFF_S" "$SQLDIFF_RSS" "$SQLDIFF_ANON" "$SQLDIFF_LINES UPDATE statements"
echo "ratios: snapshots $(echo "$SNAP_S / $SQLDIFF_S" | bc -l | cut -c1-5)x sqldiff; files $(echo "$FILE_S / $SQLDIFF_S" | bc -l | cut -c1-5)x sqldiff"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["stats"]; print("snapshots: %d leaf pages decoded, %d skipped; files: " % (s["leavesDecoded"], s["leavesSkipped"]), end="")' "$WORK/snapshots.json"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["stats"]; print("%d decoded, %d skipped" % (s["leavesDecoded"], s["leavesSkipped"]))' "$WORK/files.json"
if [ "$SNAP_CHANGED" != "$UPDATES" ] || [ "$FILE_CHANGED" != "$UPDATES" ]; then
  echo "bench/diff.sh: storectl reported $SNAP_CHANGED and $FILE_CHANGED changed objects, $UPDATES were made" >&2
  strict_fail diff
fi
[ "${KEEP:-0}" = 1 ] && echo "kept: $WORK" || rm -rf "$WORK"
