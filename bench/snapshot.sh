#!/usr/bin/env bash
# Snapshot benchmark (not a test), on the ~1 GiB store of bench/common.sh, side by side in one run:
#   create:  storectl snapshot create (a first snapshot, zstd 3)  vs  sqlite3 .backup + bsdtar --zstd level 3
#   restore: storectl snapshot restore --to     vs  bsdtar -x of that archive + PRAGMA quick_check
# Each is run REPEAT times (default 3), alternating, after a sync; the medians are compared.
# Peak memory comes from GNU time; the compression ratio from the repository's packs and the archive.
#
#   bash bench/snapshot.sh             # ITEMS=4000000 REPEAT=3
#   ITEMS=400000 REPEAT=1 bash bench/snapshot.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc; need bsdtar libarchive-tools; need python3 python3
build_release || exit 1
ensure_store
LEVEL=${LEVEL:-3}
REPEAT=${REPEAT:-3}
REPO=$OUT/repo
printf '\nstore: %s, %s; %s runs each, medians\n' "$STORE" "$(du -h "$STORE" | cut -f1)" "$REPEAT"

C=(); CR=(); B=(); T=(); R=(); RR=(); A=()
for i in $(seq "$REPEAT"); do
  rm -rf "$REPO" "$OUT"/anchor*; mkdir -p "$OUT/anchor"
  "$BIN/storectl" repo init --repo "$REPO" >/dev/null; settle
  timed storectl "$BIN/storectl" snapshot create "$STORE" --repo "$REPO" --level "$LEVEL"; C+=("$SECS"); CR+=("$RSS_MB")
  settle
  timed backup sqlite3 "$STORE" ".backup '$OUT/anchor/bench.sqlite'"; B+=("$SECS")
  timed bsdtar bsdtar --zstd --options "zstd:compression-level=$LEVEL" -cf "$OUT/anchor.tar.zst" -C "$OUT/anchor" bench.sqlite; T+=("$SECS")
done
ID=$("$BIN/storectl" snapshot list --repo "$REPO" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")
RAW=$(stat -c %s "$STORE"); PACKED=$(du -sb "$REPO" | cut -f1); APACKED=$(stat -c %s "$OUT/anchor.tar.zst")
for i in $(seq "$REPEAT"); do
  rm -rf "$OUT"/restore*; mkdir -p "$OUT/restore" "$OUT/restore-anchor"; settle
  timed restore "$BIN/storectl" snapshot restore --repo "$REPO" "$ID" --to "$OUT/restore/bench.sqlite"; R+=("$SECS"); RR+=("$RSS_MB")
  settle
  t0=$(now)
  bsdtar -xf "$OUT/anchor.tar.zst" -C "$OUT/restore-anchor" && sqlite3 "$OUT/restore-anchor/bench.sqlite" "PRAGMA quick_check" >/dev/null
  A+=("$(echo "$(now) - $t0" | bc -l)")
done

c=$(median "${C[@]}"); b=$(median "${B[@]}"); t=$(median "${T[@]}"); r=$(median "${R[@]}"); a=$(median "${A[@]}")
printf '\n== create (zstd level %s)              median s   runs\n' "$LEVEL"
printf '%-40s %8.2f   %s\n' "storectl snapshot create" "$c" "${C[*]}"
printf '%-40s %8.2f   %s\n' "sqlite3 .backup" "$b" "${B[*]}"
printf '%-40s %8.2f   %s\n' "bsdtar --zstd (its default: 1 thread)" "$t" "${T[*]}"
printf '%-40s %8.2f\n' "anchor: .backup + bsdtar" "$(echo "$b + $t" | bc -l)"
printf '%-40s %8.2f\n' "ratio storectl / anchor" "$(echo "$c / ($b + $t)" | bc -l)"
printf '%-40s %8s MiB\n' "storectl peak memory (max of runs)" "$(printf '%s\n' "${CR[@]}" | sort -g | tail -n 1)"
printf 'compression: storectl %.2fx (%s -> %s), bsdtar %.2fx\n' "$(echo "$RAW / $PACKED" | bc -l)" \
  "$(numfmt --to=iec "$RAW")" "$(numfmt --to=iec "$PACKED")" "$(echo "$RAW / $APACKED" | bc -l)"
printf '\n== restore                             median s   runs\n'
printf '%-40s %8.2f   %s\n' "storectl snapshot restore --to" "$r" "${R[*]}"
printf '%-40s %8.2f   %s\n' "anchor: bsdtar -x + PRAGMA quick_check" "$a" "${A[*]}"
printf '%-40s %8.2f\n' "ratio storectl / anchor" "$(echo "$r / $a" | bc -l)"
printf '%-40s %8s MiB\n' "storectl peak memory (max of runs)" "$(printf '%s\n' "${RR[@]}" | sort -g | tail -n 1)"
printf '\n(storectl restore also checks every page against its content id and fsyncs before the rename.)\n'
rm -rf "$OUT"/anchor* "$OUT"/restore*
