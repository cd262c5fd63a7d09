#!/usr/bin/env bash
# Every benchmark script at a tiny size, so none can rot unnoticed: run by CI after the install
# test, with the static binary users install. Figures are printed, not judged; a command that
# fails fails the run (BENCH_STRICT=1). About 3 minutes on 2 cores, most of it fixed sleeps.
#
#   bash bench/smoke.sh            # all of them
#   bash bench/smoke.sh purge s3   # some of them
set -uo pipefail
cd "$(dirname "$0")/.."
export ITEMS=${ITEMS:-20000} BENCH_STRICT=1
mkdir -p bench/out   # a fresh clone has none (common.sh makes it too, but the logs go there first)
declare -A KNOBS=(
  [backup]="LIMIT=30"
  [snapshot]="REPEAT=1"
  [purge]=""
  [migrate]="REPEAT=1"
  [memory]="BIG_ITEMS=0"
  [repository]=""
  [restore-pairs]="PAIRS=1"
  [s3]="RUNS=1 RESTORES=1 LITESTREAM_SETTLE=5"
  [replicate]="DURATION=5"
  [pace]="ROUNDS=1"
  [replicate-s3]="DURATION=5 ROUNDS=2"
  [diff]="UPDATES=200 REPEAT=1"
  [point-history]="DURATION=5 AT=0.5 ROUNDS=1"
  [point-history:reuse]="REUSE=1 AT=0.9 ROUNDS=1"   # the history point-history followed, timed again
  [idle]="DURATION=5"
  [restore-live]="ROUNDS=1"
)
ORDER=(backup snapshot purge migrate memory repository restore-pairs s3 replicate pace replicate-s3 diff point-history point-history:reuse idle restore-live)
[ $# -gt 0 ] && ORDER=("$@")
failed=()
for name in "${ORDER[@]}"; do
  script=${name%%:*}   # NAME:VARIANT runs bench/NAME.sh with the variant's knobs
  [ -f "bench/$script.sh" ] || { echo "bench/smoke.sh: no bench/$script.sh" >&2; exit 64; }
  echo "== bench/$script.sh (ITEMS=$ITEMS ${KNOBS[$name]:-})"
  started=$(date +%s)
  # shellcheck disable=SC2086
  if env ${KNOBS[$name]:-} bash "bench/$script.sh" > "bench/out/smoke-$name.log" 2>&1; then
    echo "   ok in $(( $(date +%s) - started )) s"
  else
    echo "   FAILED (exit $?) in $(( $(date +%s) - started )) s; the last lines of bench/out/smoke-$name.log:"
    tail -n 15 "bench/out/smoke-$name.log" | sed 's/^/   | /'
    failed+=("$name")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "bench smoke run: ${failed[*]} failed"; exit 1; }
echo "bench smoke run: all ${#ORDER[@]} ran"
