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
set -euo pipefail
case "${1:-}" in -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."
LOAD=${1:-10}; shift $(( $# < 1 ? $# : 1 ))
HTTP=127.0.0.1:18571

work=$(mktemp -d)
go build -o "$work/orderly" ./cmd/orderly
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

launched=$(date +%s.%N)
GODEBUG=gctrace=1 "$work/orderly" serve --data-dir "$work/data" --http-addr "$HTTP" --nats-listen "" "$@" >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fs "http://$HTTP/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
if [ "$LOAD" != 0 ]; then
  echo "loading: ${LOAD} s sync, then ${LOAD} s async"
  "$work/orderly" bench --url "http://$HTTP" -d "${LOAD}s" --warmup 0 2>/dev/null | tail -1
  "$work/orderly" bench --url "http://$HTTP" -d "${LOAD}s" --warmup 0 --async 2>/dev/null | tail -1
fi
echo "replaying: 10 s, a line every 250 ms"
"$work/orderly" bench --url "http://$HTTP" -d 10s --warmup 0 --mix replay:100 --replay-keys 64 \
  --progress-every 250ms --json >"$work/replay.json" 2>"$work/replay.progress"
cat "$work/replay.progress"
started=$(sed -n 's/.*"started": *"\([^"]*\)".*/\1/p' "$work/replay.json" | head -1)
offset=$(echo "$(date -d "$started" +%s.%N) - $launched" | bc)
# gctrace: "gc N @T s P%: STW1+MARK+STW2 ms clock, ..." with T since the process began.
awk -v o="$offset" '/^gc [0-9]+ @/ {
  t = substr($3, 2) + 0 - o; split($5, c, "+")
  if (t > -0.5 && t < 10.5) { n++; sum += c[2]; line[n] = sprintf("  %6.2fs  mark %s ms", t, c[2]) }
} END {
  printf "collections during the replay: %d, their marks %.0f ms in all (%.1f%% of the 10 s)\n", n, sum, sum / 100
  if (n <= 30) for (i = 1; i <= n; i++) print line[i]
  else print "  (more than 30: not listed; the heap is small and each mark short)"
}' "$work/serve.log"
