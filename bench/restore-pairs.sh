#!/usr/bin/env bash
# Restore of the 10th snapshot of a chain against unpacking its exported archive (bsdtar -x +
# PRAGMA quick_check: what a format-1 restore was), in alternating pairs (a
# single run of bench/repository.sh is within the machine's noise). Each restore starts after a
# sync and a pause, so that one run's writeback does not slow the next. OLD=/path/to/storectl adds
# a third column: another build restoring the same snapshot (before/after a change).
#
#   bash bench/restore-pairs.sh            # PAIRS=6 by default
#   OLD=/tmp/old/storectl bash bench/restore-pairs.sh
set -u
cd "$(dirname "$0")/.."
source bench/common.sh
PAIRS=${PAIRS:-6}
OLD=${OLD:-}
build_release || exit 1
ensure_store
W=$PWD/$OUT/restore-pairs; rm -rf "$W"; mkdir -p "$W/out"
DB=$W/Tasks.sqlite
cp "$STORE" "$DB"
ROWS=$(sqlite3 "$DB" "SELECT count(*) FROM ZITEM"); STEP=$((ROWS / 5000))
"$BIN/storectl" repo init --repo "$W/s2" >/dev/null
update() { sqlite3 "$DB" "UPDATE ZITEM SET ZTITLE = ZTITLE || '$1' WHERE Z_PK % $STEP = 0; PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null; }
"$BIN/storectl" snapshot create "$DB" --repo "$W/s2" >/dev/null
for round in a b c d e f g h i; do update $round; "$BIN/storectl" snapshot create "$DB" --repo "$W/s2" >/dev/null; done
newest() { "$BIN/storectl" snapshot list --repo "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])"; }
ID2=$(newest "$W/s2")
"$BIN/storectl" snapshot export --repo "$W/s2" "$ID2" --output "$W/export.tar.zst" >/dev/null
quiet() { rm -f "$W/out/"*; sync; sleep 2; warm_memory; }
restore() { quiet; timed r "$1" snapshot restore --repo "$W/$2" "$3" --to "$W/out/restored.sqlite"; }
printf '\nrestore of the 10th (%s pages), each after a sync\n' "$(sqlite3 "$DB" "PRAGMA page_count")"
F1=(); F2=(); F0=()
for i in $(seq "$PAIRS"); do
  quiet; timed r sh -c "bsdtar -xf '$W/export.tar.zst' -C '$W/out' && sqlite3 '$W/out/store/Tasks.sqlite' 'PRAGMA quick_check' >/dev/null"; F1+=("$SECS"); rm -rf "$W/out/store"
  if [ -n "$OLD" ] && [ $((i % 2)) -eq 1 ]; then restore "$OLD" s2 "$ID2"; F0+=("$SECS"); fi
  restore "$BIN/storectl" s2 "$ID2"; F2+=("$SECS"); M=$RSS_MB
  if [ -n "$OLD" ] && [ $((i % 2)) -eq 0 ]; then restore "$OLD" s2 "$ID2"; F0+=("$SECS"); fi
  printf 'pair %d: archive %6.2f s   storectl %6.2f s (%s MiB peak)%s\n' "$i" "${F1[-1]}" "${F2[-1]}" "$M" \
    "$([ -n "$OLD" ] && printf '   OLD %6.2f s' "${F0[-1]}")"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
A=$(median "${F1[@]}"); B=$(median "${F2[@]}")
printf 'medians: bsdtar -x + quick_check %.2f s, storectl restore %.2f s: %.2f  <= 1.00\n' "$A" "$B" "$(echo "$B / $A" | bc -l)"
if [ -n "$OLD" ]; then C=$(median "${F0[@]}"); printf 'OLD %.2f s: this build / OLD %.2f\n' "$C" "$(echo "$B / $C" | bc -l)"; fi
