#!/usr/bin/env bash
# Repository benchmark (not a test): storectl's page-level repository against restic, borg and a
# whole compressed copy per snapshot (sqlite3 .backup + bsdtar --zstd -3: what format 1 stored), in one
# run, on a copy of the ~1 GiB store of bench/common.sh (idle and checkpointed, so every tool may
# read the file as it is):
#   1. first snapshot:      time, bytes added, peak memory (storectl encrypted and plain, the copy,
#                           restic, borg with its default chunker, borg with fixed 4 KiB chunks)
#   2. 5,000 scattered row updates (UPDATE … WHERE Z_PK % k = 0), checkpointed: the pages that
#      changed, their zstd-compressed size (the floor for anyone), and what each tool then adds
#   3. an unchanged store: what each tool adds
#   4. a chain of 10 snapshots (8 more rounds of updates): restore of the 10th, storectl vs restic vs borg
# Every repository is encrypted except "storectl (plain)" and the copies.
#
#   bash bench/repository.sh            # ITEMS=4000000
#   ITEMS=400000 bash bench/repository.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc; need restic restic; need borg borgbackup; need zstd zstd; need python3 python3
need bsdtar libarchive-tools
build_release || exit 1
ensure_store
W=$PWD/$OUT/repository; rm -rf "$W"; mkdir -p "$W"
DB=$W/Tasks.sqlite
cp "$STORE" "$DB"; cat "$DB" > /dev/null
export RESTIC_PASSWORD_FILE=$PWD/$PASSWORD_FILE BORG_PASSPHRASE=$(cat "$PASSWORD_FILE") BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes
export RESTIC_CACHE_DIR=$W/restic-cache BORG_BASE_DIR=$W/borg-base
ROWS=$(sqlite3 "$DB" "SELECT count(*) FROM ZITEM")
STEP=$((ROWS / 5000))
printf '\nstore: %s (%s, %s items); 5,000 updates = every %s-th row\n' "$DB" "$(du -h "$DB" | cut -f1)" "$ROWS" "$STEP"

size() { du -sb "$1" | cut -f1; }
mib() { echo "scale=1; $1 / 1048576" | bc -l; }

"$BIN/storectl" repo init --repo "$W/s2" >/dev/null
"$BIN/storectl" repo init --repo "$W/s2plain" --insecure-no-encryption >/dev/null 2>&1
mkdir -p "$W/copy"
restic init -q --repo "$W/restic" >/dev/null
borg init -e repokey "$W/borg" >/dev/null 2>&1
borg init -e repokey "$W/borg4k" >/dev/null 2>&1

TOOLS="s2 s2plain copy restic borg borg4k"
declare -A NAME=([s2]="storectl (encrypted)" [s2plain]="storectl (plain)" [copy]=".backup + bsdtar --zstd -3"
                 [restic]="restic backup" [borg]="borg create (default chunker)" [borg4k]="borg create (fixed 4 KiB chunks)")
snap() {   # snap TOOL: one snapshot of $DB; sets SECS, RSS_MB, ADDED
  local before; before=$(size "$W/$1"); settle
  case $1 in
    s2|s2plain) timed s "$BIN/storectl" snapshot create "$DB" --repo "$W/$1" ;;
    copy) timed s sh -c "sqlite3 '$DB' \".backup '$W/copy.sqlite'\" && bsdtar --zstd --options zstd:compression-level=3 -cf '$W/copy/$(date +%s%N).tar.zst' -C '$W' copy.sqlite && rm '$W/copy.sqlite'" ;;
    restic) timed s restic -q --repo "$W/restic" backup "$DB" ;;
    borg) timed s borg create "$W/borg::s$(date +%s%N)" "$DB" ;;
    borg4k) timed s borg create --chunker-params fixed,4096 "$W/borg4k::s$(date +%s%N)" "$DB" ;;
  esac
  ADDED=$(( $(size "$W/$1") - before ))
}
declare -A T1 A1 M1 T2 A2 T3 A3
report() { printf '%-38s %8.2f s %10s MiB %8s MiB peak\n' "${NAME[$1]}" "$SECS" "$(mib "$ADDED")" "$RSS_MB"; }
PAGES=$(sqlite3 "$DB" "PRAGMA page_count")

printf '\n== 1. first snapshot                         time      added      memory\n'
for t in $TOOLS; do snap "$t"; report "$t"; T1[$t]=$SECS; A1[$t]=$ADDED; M1[$t]=$RSS_MB; done

update() {   # update ROUND: 5,000 scattered rows, checkpointed into the file
  sqlite3 "$DB" "UPDATE ZITEM SET ZTITLE = ZTITLE || '$1' WHERE Z_PK % $STEP = 0; PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
}
cp "$DB" "$W/before.sqlite"
update a
python3 - "$W/before.sqlite" "$DB" "$W/changed.bin" <<'PY'
import sys
a, b, out = open(sys.argv[1], 'rb'), open(sys.argv[2], 'rb'), open(sys.argv[3], 'wb')
page = 4096; changed = runs = 0; last = -2; n = 0
while True:
    x, y = a.read(page), b.read(page)
    if not y: break
    if x != y:
        changed += 1; out.write(y)
        if n != last + 1: runs += 1
        last = n
    n += 1
print(f"changed pages: {changed} of {n} ({changed * page / 1048576:.1f} MiB) in {runs} runs (a run: adjacent changed pages)")
PY
FLOOR=$(zstd -3 -c -q "$W/changed.bin" | wc -c)
printf 'the floor: the changed pages zstd -3 compressed: %s MiB\n' "$(mib "$FLOOR")"
settle; timed b sqlite3 "$DB" ".backup '$W/backup.sqlite'"; BACKUP=$SECS; rm -f "$W/backup.sqlite"
printf 'sqlite3 .backup (what borg needs first for a consistent file of a live store): %.2f s\n' "$BACKUP"
rm -f "$W/before.sqlite" "$W/changed.bin"
printf '\n== 2. after 5,000 scattered updates           time      added      memory\n'
for t in $TOOLS; do snap "$t"; report "$t"; T2[$t]=$SECS; A2[$t]=$ADDED; done

printf '\n== 3. unchanged store                         time      added      memory\n'
for t in $TOOLS; do snap "$t"; report "$t"; T3[$t]=$SECS; A3[$t]=$ADDED; done

printf '\n== 4. a chain of 10 snapshots, restore of the 10th\n'
for round in b c d e f g h; do
  update "$round"
  for t in s2 copy restic borg; do snap "$t"; done
done
printf 'after 10 snapshots (8 rounds of 5,000 updates): storectl %s MiB, restic %s MiB, borg %s MiB, borg 4 KiB %s MiB (3 snapshots), whole copies %s MiB\n' \
  "$(mib "$(size "$W/s2")")" "$(mib "$(size "$W/restic")")" "$(mib "$(size "$W/borg")")" "$(mib "$(size "$W/borg4k")")" "$(mib "$(size "$W/copy")")"
EXPECT=$(sha256sum "$DB" | cut -d' ' -f1)
ID=$("$BIN/storectl" snapshot list --repo "$W/s2" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")
rm -rf "$W/out"
# RESTORES rounds (default 3), the four in turn each round, each into an emptied folder; medians
# (the first restore after writing the chain pays for the page cache the chain left dirty).
NEWEST=$(ls "$W/copy"/*.tar.zst | sort | tail -n 1)
LAST=$(borg list --last 1 --short "$W/borg")
declare -A RT RM
for round in $(seq "${RESTORES:-3}"); do
  for t in copy s2 restic borg; do
    rm -rf "${W:?}/out/$t"; mkdir -p "$W/out/$t"; settle
    case $t in
      copy) timed r sh -c "bsdtar -xf '$NEWEST' -C '$W/out/copy' && sqlite3 '$W/out/copy/copy.sqlite' 'PRAGMA quick_check' >/dev/null" ;;
      s2) timed r "$BIN/storectl" snapshot restore --repo "$W/s2" "$ID" --to "$W/out/s2/Tasks.sqlite" ;;
      restic) timed r restic -q --repo "$W/restic" restore latest --target "$W/out/restic" ;;
      borg) timed r sh -c "cd '$W/out/borg' && exec borg extract '$W/borg::$LAST'" ;;
    esac
    RT[$t]+="$SECS "; RM[$t]=$RSS_MB
  done
done
med() { read -r -a v <<< "$1"; median "${v[@]}"; }
S1R=$(med "${RT[copy]}"); S2R=$(med "${RT[s2]}"); RR=$(med "${RT[restic]}"); BR=$(med "${RT[borg]}")
printf '%-38s %8.2f s %10s MiB peak  (quick_check included; runs: %s)\n' "the copy: bsdtar -x + quick_check" "$S1R" "${RM[copy]}" "${RT[copy]}"
printf '%-38s %8.2f s %10s MiB peak  (every page against its id, fsync; quick_check passed when taken; runs: %s)\n' "storectl snapshot restore --to" "$S2R" "${RM[s2]}" "${RT[s2]}"
printf '%-38s %8.2f s %10s MiB peak  (runs: %s)\n' "restic restore latest" "$RR" "${RM[restic]}" "${RT[restic]}"
printf '%-38s %8.2f s %10s MiB peak  (runs: %s)\n' "borg extract" "$BR" "${RM[borg]}" "${RT[borg]}"
printf 'ratio storectl / restic %.2f, storectl / borg %.2f\n' "$(echo "$S2R / $RR" | bc -l)" "$(echo "$S2R / $BR" | bc -l)"

r() { echo "$1 / $2" | bc -l; }
printf '\n== the targets of the repository issue (ratio, target; the copy stands for format 1)\n'
printf '%-62s %6.2f  <= 1.00\n' "first snapshot: time, storectl / the copy" "$(r "${T1[s2]}" "${T1[copy]}")"
printf '%-62s %6.2f  <= 1.05\n' "first snapshot: stored bytes, storectl / the copy" "$(r "${A1[s2]}" "${A1[copy]}")"
printf '%-62s %6.2f  <= 1.20\n' "5,000 updates: added / the changed pages compressed" "$(r "${A2[s2]}" "$FLOOR")"
printf '%-62s %6.2f  <= 0.50\n' "5,000 updates: time / (.backup + borg fixed 4 KiB)" "$(r "${T2[s2]}" "($BACKUP + ${T2[borg4k]})")"
printf '%-62s %6s  <  1 MiB\n' "unchanged store: added" "$(mib "${A3[s2]}") MiB"
printf '%-62s %6.2f  <= 0.50\n' "unchanged store: time / first snapshot's" "$(r "${T3[s2]}" "${T1[s2]}")"
printf '%-62s %6.2f  <= 1.00\n' "restore of the 10th: storectl / the copy's" "$(r "$S2R" "$S1R")"
printf '%-62s %6.2f  <= 1.00\n' "restore of the 10th: storectl (verified, fsynced) / restic" "$(r "$S2R" "$RR")"
printf '%-62s %6s  <= %s MiB (64 MiB + 48 B x %s pages)\n' "peak memory, first snapshot" "${M1[s2]}" "$(echo "scale=1; 64 + 48 * $PAGES / 1048576" | bc)" "$PAGES"
printf '%-62s %6.2f  <= 1.10\n' "encryption on / off (first snapshot)" "$(r "${T1[s2]}" "${T1[s2plain]}")"
GOT=$(find "$W/out/restic" -name Tasks.sqlite -exec sha256sum {} \; | cut -d' ' -f1)
[ "$GOT" = "$EXPECT" ] || echo "  (restic restored other bytes?)"
Q="SELECT count(*), sum(length(ZTITLE)) FROM ZITEM"
printf 'storectl restored the same rows: %s\n' "$([ "$(sqlite3 "$W/out/s2/Tasks.sqlite" "$Q")" = "$(sqlite3 "$DB" "$Q")" ] && echo yes || echo NO)"
rm -rf "$W/out"
