#!/usr/bin/env bash
# Migration benchmark (not a test), on the ~1 GiB store of bench/common.sh, side by side in one run.
# The migration adds a column and an index to ZITEM (4M rows by default).
#   migrate:  storectl migrate, the time of each stage (lock, preflight, snapshot, apply, verify)
#   rollback: the same migration, then one with a failing .verify.sql, with --rollback-on-failure; its rollback
#             time against the anchor, a plain `storectl snapshot restore --to` of the same snapshot
#             (target: within 1.2x). `storectl rollback` (in place, safety snapshot first) for information.
# Each store is a fresh copy of the bench store; REPEAT runs (default 3), medians.
#
#   bash bench/migrate.sh              # ITEMS=4000000 REPEAT=3
#   PRIOR=1 bash bench/migrate.sh      # the store has a snapshot already (scheduled snapshots)
#   ITEMS=400000 REPEAT=1 bash bench/migrate.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc; need jq jq
build_release || exit 1
ensure_store
REPEAT=${REPEAT:-3}
WORK=$OUT/migrate
printf '\nstore: %s, %s; %s runs each, medians\n' "$STORE" "$(du -h "$STORE" | cut -f1)" "$REPEAT"

# fresh NAME: a copy of the bench store, a migrations folder with the one migration, an empty repository.
fresh() {
  rm -rf "$WORK"; mkdir -p "$WORK/migrations"
  cp "$STORE" "$WORK/store.sqlite"
  "$BIN/storectl" repo init --repo "$WORK/repo" >/dev/null
  # PRIOR=1: the store already has a snapshot in the repository, as scheduled snapshots give it
  # (the safety snapshot then stores only what changed since).
  if [ "${PRIOR:-0}" = 1 ]; then "$BIN/storectl" snapshot create "$WORK/store.sqlite" --repo "$WORK/repo" >/dev/null; fi
  cat > "$WORK/migrations/0001_add_archived.sql" <<'SQL'
-- Items can be archived; the app lists the non-archived ones by this index.
ALTER TABLE ZITEM ADD COLUMN ZARCHIVED INTEGER NOT NULL DEFAULT 0;
CREATE INDEX ZITEM_ZARCHIVED_INDEX ON ZITEM (ZARCHIVED, ZCREATEDAT);
SQL
  if [ "$1" = failing ]; then
    # The migration commits, then a second one fails its verify query: there is something to roll
    # back (a failure before any commit rolls nothing back and exits 1).
    echo "UPDATE ZITEM SET ZARCHIVED = 0 WHERE Z_PK = 1;" > "$WORK/migrations/0002_check.sql"
    echo "SELECT count(*) = -1 FROM ZITEM;" > "$WORK/migrations/0002_check.verify.sql"
  fi
  cat "$WORK/store.sqlite" > /dev/null
  settle
}

stage() { jq -r --arg s "$2" '.stages[] | select(.name == $s) | .seconds' "$1"; }

declare -A S; TOTAL=(); RB=(); RBR=(); ANCHOR=(); LATER=(); STAGES="lock preflight snapshot apply verify"
for i in $(seq "$REPEAT"); do
  # 1. The migration succeeds: its stage times.
  fresh ok
  t0=$(now)
  /usr/bin/time -f "%M" -o "$OUT/migrate.rss" "$BIN/storectl" migrate "$WORK/store.sqlite" --migrations "$WORK/migrations" \
      --repo "$WORK/repo" --json > "$OUT/migrate-ok.json" 2>"$OUT/err" || { echo "  (migrate failed: $(head -c 300 "$OUT/err"))" >&2; exit 1; }
  TOTAL+=("$(echo "$(now) - $t0" | bc -l)")
  for s in $STAGES; do S[$s]+="$(stage "$OUT/migrate-ok.json" "$s") "; done
  # 2. The same migration, then one that fails its verify query: rolled back.
  fresh failing
  t0=$(now)
  "$BIN/storectl" migrate "$WORK/store.sqlite" --migrations "$WORK/migrations" --repo "$WORK/repo" \
      --rollback-on-failure --json > "$OUT/migrate-failing.json" 2>"$OUT/err"
  st=$?
  [ "$st" -eq 3 ] || { echo "  (expected exit 3, got $st: $(head -c 300 "$OUT/err"))" >&2; exit 1; }
  RB+=("$(jq -r '.rollback.seconds' "$OUT/migrate-failing.json")")
  [ "$(jq -r '.rollback.verified' "$OUT/migrate-failing.json")" = true ] || { echo "  (rollback not verified)" >&2; exit 1; }
  ID=$(jq -r '.snapshot' "$OUT/migrate-failing.json")
  # 3. The anchor: a plain restore of the same snapshot to a new file.
  rm -f "$WORK"/store.sqlite.failed-migration-*; settle
  timed restore "$BIN/storectl" snapshot restore --repo "$WORK/repo" "$ID" --to "$WORK/restored.sqlite"; ANCHOR+=("$SECS"); RBR+=("$RSS_MB")
  # 4. For information: storectl rollback later (a safety snapshot of the current store first).
  rm -f "$WORK/restored.sqlite"; settle
  timed rollback "$BIN/storectl" rollback "$WORK/store.sqlite" --repo "$WORK/repo" --to "$ID"; LATER+=("$SECS")
done

printf '\n== migrate (add a column and an index)          median s   runs\n'
for s in $STAGES; do
  read -r -a v <<< "${S[$s]}"
  printf '%-46s %8.2f   %s\n' "  $s" "$(median "${v[@]}")" "${v[*]}"
done
printf '%-46s %8.2f   %s\n' "storectl migrate, end to end" "$(median "${TOTAL[@]}")" "${TOTAL[*]}"
printf '%-46s %8s MiB\n' "peak memory" "$(awk '{ printf "%.1f", $1 / 1024 }' "$OUT/migrate.rss")"
rb=$(median "${RB[@]}"); an=$(median "${ANCHOR[@]}")
printf '\n== rollback                                     median s   runs\n'
printf '%-46s %8.2f   %s\n' "migrate --rollback-on-failure: the rollback" "$rb" "${RB[*]}"
printf '%-46s %8.2f   %s\n' "anchor: storectl snapshot restore --to" "$an" "${ANCHOR[*]}"
printf '%-46s %8.2f\n' "ratio rollback / anchor (target <= 1.2)" "$(echo "$rb / $an" | bc -l)"
printf '%-46s %8.2f   %s\n' "storectl rollback (safety snapshot first)" "$(median "${LATER[@]}")" "${LATER[*]}"
printf '\n(the rollback restores in place, checks the SHA-256 of the restored store against the snapshot,\n and renames the failed state aside; the anchor writes a new file and checks the same checksums.)\n'
rm -rf "$WORK"
