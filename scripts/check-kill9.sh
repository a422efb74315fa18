#!/usr/bin/env bash
# kill -9 `orderly serve` in the middle of `orderly check`'s workload, restart it
# on the same data dir, and let the checker verify that every order answered
# 201 or 202 survived, once. Exits non-zero on any violation.
#
#   scripts/check-kill9.sh                      # one kill, ~1 minute
#   DURATION=60s KILLS=7 scripts/check-kill9.sh # a kill every 3-8 s while the load runs
#   SERVE_FLAGS="--decision-lag 8s" scripts/check-kill9.sh  # more flags for orderly serve
#
# KILLS (1) is how many times orderly serve is killed and restarted: the first
# 5 s into the load, each next one 3 to 8 s (at random) after the restart.
set -euo pipefail
case "${1:-}" in -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."

DURATION=${DURATION:-15s}
KILLS=${KILLS:-1}
[[ $KILLS =~ ^[1-9][0-9]*$ ]] || { echo "KILLS must be a positive whole number, not \"$KILLS\"" >&2; exit 2; }
HTTP=${HTTP:-127.0.0.1:18080}
NATS=${NATS:-127.0.0.1:14222}
WORK=$(mktemp -d)
BIN="$WORK/orderly"
go build -o "$BIN" ./cmd/orderly

PID=
start() {
  # shellcheck disable=SC2086 # SERVE_FLAGS is split into flags on purpose
  "$BIN" serve --data-dir "$WORK/data" --http-addr "$HTTP" --nats-listen "$NATS" --dedup-window 2s ${SERVE_FLAGS:-} >>"$WORK/serve.log" 2>&1 &
  PID=$!
  for _ in $(seq 1 150); do
    if curl -fsS "http://$HTTP/readyz" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "orderly serve did not get ready; log:"; tail -20 "$WORK/serve.log"; exit 1
}
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null || true; }
trap cleanup EXIT

start
echo "orderly serve (pid $PID) is up; starting the checker for $DURATION"
"$BIN" check --url "http://$HTTP" --nats-url "nats://$NATS" --nats-nkey "$WORK/data/credentials/operator.nk" --duration "$DURATION" \
  --retry-delay 3s --settle 40s --report "$WORK/report.json" &
CHECK=$!

for k in $(seq 1 "$KILLS"); do
  if [ "$k" = 1 ]; then sleep 5; else sleep $((3 + RANDOM % 6)); fi
  printf "\nkill -9 %s (%d of %d)\n" "$PID" "$k" "$KILLS"
  kill -9 "$PID"; wait "$PID" 2>/dev/null || true
  sleep 1
  start
  printf "restarted on the same data dir (pid %s)\n" "$PID"
done

status=0
wait "$CHECK" || status=$?
echo "report: $WORK/report.json"
exit $status
