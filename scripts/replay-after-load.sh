#!/usr/bin/env bash
# Where the replay p99 goes after a load (docs/performance.md, "Replays
# after a load: the garbage collector marks nats-server's state"): the
# collector's marks of the embedded server's state, window by window.
#
#   scripts/replay-after-load.sh [LOAD_SECONDS [serve flags...]]
#
# Builds orderly and starts a fresh orderly serve --nats-listen "" (its data
# in a temporary directory) with GODEBUG=gctrace=1. Loads it with
# LOAD_SECONDS (10; 0 skips the loads: a fresh process) of sync and then of
# async new orders, as the side-by-side harness does, then replays for 10 s
# with orderly bench --mix replay:100 --progress-every 250ms. Prints the
# replay's lines (the rate and the p99 of every 250 ms) and, beside them,
# the collections that ran during the replay: how many, their marks' time in
# all, and (up to 30) when each mark began, in seconds since the replay's
# start, and how long it took. Serve flags such as --nats-process child are
# passed on.
#
# WRK=1 loads and replays with wrk instead, as the side-by-side harness does
# (2 threads, 64 connections, LOAD_SECONDS each; a fresh Idempotency-Key per
# request, then the same with Prefer: respond-async; one order stored and
# decided; then that order's key and body in every request for 10 s), and prints
# wrk's rate and p99 of each load instead of the windows: the runs behind
# the replay p99 of the README.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/serve.sh
. scripts/serve.sh "$@"
LOAD=${1:-10}; shift $(( $# < 1 ? $# : 1 ))
HTTP=127.0.0.1:18571
ORDER='{"customer_id":"c-42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495},{"sku":"SKU-2","quantity":1,"unit_price":999},{"sku":"SKU-3","quantity":3,"unit_price":150}],"total":6439}'

# wrk's load: KEY, when set, in every request (replays), else a fresh key
# each; PREFER, when set, as the Prefer header.
cat >"$work/load.lua" <<LUA
local n, threads = 0, 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
function init() math.randomseed(os.time() + tid * 7919); run = math.random(1, 1e9) end
function request()
  n = n + 1
  local h = {["Content-Type"] = "application/json", ["Idempotency-Key"] = os.getenv("KEY") or ("k-" .. run .. "-" .. tid .. "-" .. n)}
  if os.getenv("PREFER") then h["Prefer"] = os.getenv("PREFER") end
  return wrk.format("POST", nil, h, '$ORDER')
end
function done(summary, latency)
  local e = summary.errors
  io.write(string.format("%.0f req/s, p50 %.2f ms, p99 %.2f ms, %d errors\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, e.status + e.connect + e.read + e.write + e.timeout))
end
LUA
# wrkload LABEL SECONDS [VAR=value...]
wrkload() { echo "$1: $(env "${@:3}" wrk -t2 -c64 -d"$2"s -s "$work/load.lua" "http://$HTTP/v1/orders" | tail -1)"; }

launched=$(date +%s.%N)
GODEBUG=gctrace=1 "$bin" serve --data-dir "$work/data" --http-addr "$HTTP" --nats-listen "" "$@" >"$work/serve.log" 2>&1 &
pid=$!
wait_ready "$HTTP"
if [ -n "${WRK:-}" ]; then
  if [ "$LOAD" != 0 ]; then wrkload "sync (201)" "$LOAD"; wrkload "async (202)" "$LOAD" PREFER=respond-async; fi
  for _ in $(seq 120); do # the replayed order decided first: the replays measure no backlog
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
      -H 'Idempotency-Key: replay-key-1' -H 'Prefer: wait=1' -d "$ORDER" "http://$HTTP/v1/orders")
    [ "$code" = 201 ] && break
    sleep 1
  done
  started=$(date +%s.%N)
  wrkload "replay" 10 KEY=replay-key-1
else
  if [ "$LOAD" != 0 ]; then
    echo "loading: ${LOAD} s sync, then ${LOAD} s async"
    "$bin" bench --url "http://$HTTP" -d "${LOAD}s" --warmup 0 2>/dev/null | tail -1
    "$bin" bench --url "http://$HTTP" -d "${LOAD}s" --warmup 0 --async 2>/dev/null | tail -1
  fi
  echo "replaying: 10 s, a line every 250 ms"
  "$bin" bench --url "http://$HTTP" -d 10s --warmup 0 --mix replay:100 --replay-keys 64 \
    --progress-every 250ms --json >"$work/replay.json" 2>"$work/replay.progress"
  cat "$work/replay.progress"
  started=$(date -d "$(sed -n 's/.*"started": *"\([^"]*\)".*/\1/p' "$work/replay.json" | head -1)" +%s.%N)
fi
offset=$(echo "$started - $launched" | bc)
# gctrace: "gc N @T s P%: STW1+MARK+STW2 ms clock, ..." with T since the process began.
awk -v o="$offset" '/^gc [0-9]+ @/ {
  t = substr($3, 2) + 0 - o; split($5, c, "+")
  if (t > -0.5 && t < 10.5) { n++; sum += c[2]; line[n] = sprintf("  %6.2fs  mark %s ms", t, c[2]) }
} END {
  printf "collections during the replay: %d, their marks %.0f ms in all (%.1f%% of the 10 s)\n", n, sum, sum / 100
  if (n <= 30) for (i = 1; i <= n; i++) print line[i]
  else print "  (more than 30: not listed; the heap is small and each mark short)"
}' "$work/serve.log"
