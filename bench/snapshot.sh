#!/usr/bin/env bash
# Snapshot benchmark (not a test), on the ~1 GiB store of bench/common.sh, side by side in one run:
#   create:  storectl snapshot create (zstd 3)  vs  sqlite3 .backup + bsdtar --zstd level 3, one after the other
#   restore: storectl snapshot restore --to     vs  bsdtar -x + PRAGMA quick_check
# with peak memory (GNU time) and the compression ratio.
#
#   bash bench/snapshot.sh             # ITEMS=4000000
#   ITEMS=400000 bash bench/snapshot.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc; need bsdtar libarchive-tools
build_release || exit 1
ensure_store
LEVEL=${LEVEL:-3}
REPO=$OUT/repo
rm -rf "$REPO" "$OUT"/anchor* "$OUT"/restore*; mkdir -p "$OUT/anchor" "$OUT/restore" "$OUT/restore-anchor"

printf '\nstore: %s, %s\n' "$STORE" "$(du -h "$STORE" | cut -f1)"

timed storectl "$BIN/storectl" snapshot create "$STORE" --repo "$REPO" --level "$LEVEL"
C_SECS=$SECS; C_RSS=$RSS_MB
ARCHIVE=$(ls "$REPO"/snapshots/*.tar.zst); ID=$(basename "$ARCHIVE" .tar.zst)
timed backup sqlite3 "$STORE" ".backup '$OUT/anchor/bench.sqlite'"
B_SECS=$SECS; B_RSS=$RSS_MB
timed bsdtar bsdtar --zstd --options "zstd:compression-level=$LEVEL" -cf "$OUT/anchor.tar.zst" -C "$OUT/anchor" bench.sqlite
T_SECS=$SECS; T_RSS=$RSS_MB
timed bsdtar2 bsdtar --zstd --options "zstd:compression-level=$LEVEL,zstd:threads=2" -cf "$OUT/anchor2.tar.zst" -C "$OUT/anchor" bench.sqlite
T2_SECS=$SECS
RAW=$(stat -c %s "$STORE"); PACKED=$(stat -c %s "$ARCHIVE"); APACKED=$(stat -c %s "$OUT/anchor.tar.zst")

printf '\n== create (zstd level %s)\n%-44s %9s %9s\n' "$LEVEL" "" "seconds" "peak MiB"
printf '%-44s %9.2f %9s\n' "storectl snapshot create" "$C_SECS" "$C_RSS"
printf '%-44s %9.2f %9s\n' "sqlite3 .backup" "$B_SECS" "$B_RSS"
printf '%-44s %9.2f %9s\n' "bsdtar --zstd (1 thread, its default)" "$T_SECS" "$T_RSS"
printf '%-44s %9.2f\n' "anchor: .backup + bsdtar" "$(echo "$B_SECS + $T_SECS" | bc -l)"
printf '%-44s %9.2f\n' "ratio storectl / anchor" "$(echo "$C_SECS / ($B_SECS + $T_SECS)" | bc -l)"
printf '%-44s %9.2f\n' "(bsdtar --zstd with zstd:threads=2)" "$T2_SECS"
printf 'compression: storectl %.2fx (%s -> %s), bsdtar %.2fx\n' "$(echo "$RAW / $PACKED" | bc -l)" \
  "$(numfmt --to=iec "$RAW")" "$(numfmt --to=iec "$PACKED")" "$(echo "$RAW / $APACKED" | bc -l)"

timed restore "$BIN/storectl" snapshot restore --repo "$REPO" "$ID" --to "$OUT/restore/bench.sqlite"
R_SECS=$SECS; R_RSS=$RSS_MB
t0=$(now)
/usr/bin/time -f "%M" -o "$OUT/rss" bsdtar -xf "$ARCHIVE" -C "$OUT/restore-anchor" 2>"$OUT/err"
X_RSS=$(awk '{ printf "%.1f", $1 / 1024 }' "$OUT/rss")
sqlite3 "$OUT/restore-anchor/store/bench.sqlite" "PRAGMA quick_check" >/dev/null
A_SECS=$(echo "$(now) - $t0" | bc -l)

printf '\n== restore\n%-44s %9s %9s\n' "" "seconds" "peak MiB"
printf '%-44s %9.2f %9s\n' "storectl snapshot restore --to" "$R_SECS" "$R_RSS"
printf '%-44s %9.2f %9s\n' "anchor: bsdtar -x + PRAGMA quick_check" "$A_SECS" "$X_RSS"
printf '%-44s %9.2f\n' "ratio storectl / anchor" "$(echo "$R_SECS / $A_SECS" | bc -l)"
printf '\n(storectl restore also checks the archive and every file checksum and fsyncs before the rename.)\n'
rm -rf "$OUT"/anchor* "$OUT"/restore*
