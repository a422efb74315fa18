#!/usr/bin/env bash
# How fast the processor decides on its own: the API alone (serve --roles api)
# accepts DURATION of async orders, with nothing decided; then orderly serve
# (API and processor) starts on the same data directory and decides the
# backlog, with nothing else loading the machine. Prints the backlog, the
# orders decided, the seconds until the backlog is empty, and the rate.
#
#   scripts/drain-rate.sh [serve flags for the draining process...]
#
# ORDERLY_BIN (a binary to measure instead of one built from this checkout),
# DURATION (10s), HTTP (127.0.0.1:18080), NATS (127.0.0.1:14222: the
# embedded server listens, as by default, and the components connect over
# loopback TCP) and DIR (a new temporary
# directory, deleted at the end) change the defaults. Extra flags go to the
# draining serve, for instance --pprof-addr 127.0.0.1:6060 to profile it
# (curl -o proc.prof '127.0.0.1:6060/debug/pprof/profile?seconds=8' while it
# drains) or --processor-concurrency 64.
set -euo pipefail
case "${1:-}" in -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
HTTP=${HTTP:-127.0.0.1:18080}
NATS=${NATS:-127.0.0.1:14222}
DIR=${DIR:-$(mktemp -d)}
BIN=${ORDERLY_BIN:-}
pid=

say() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$DIR"
}
trap cleanup EXIT

# serve ARGS...: starts orderly serve on $DIR/data and waits until it is ready.
serve() {
  "$BIN" serve --http-addr "$HTTP" --data-dir "$DIR/data" --nats-listen "$NATS" --log-level warn "$@" >>"$DIR/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    curl -sf -o /dev/null "http://$HTTP/readyz" && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$DIR/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "orderly serve did not become ready" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
metric() { curl -s "http://$HTTP/metrics" | awk -v m="$1" '$1 ~ "^"m {s += $2} END {print s + 0}'; }

if [ -z "$BIN" ]; then
  BIN=$DIR/orderly
  go build -o "$BIN" ./cmd/orderly
fi
say "the API alone accepts $DURATION of async orders"
serve --roles api
"$BIN" bench --url "http://$HTTP" --async --duration "$DURATION" --warmup 0s 2>&1 >/dev/null | tail -1 | tr '\r' '\n' | tail -1 >&2
stop

say "orderly serve $* decides the backlog"
serve "$@"
backlog=$(metric orderly_pipeline_backlog)
t0=$(date +%s.%N)
before=$(metric orderly_commands_decided_total)
while [ "$(metric orderly_pipeline_backlog)" != 0 ]; do sleep 0.1; done
t1=$(date +%s.%N)
decided=$(metric orderly_commands_decided_total)
batches=$(metric 'orderly_pipeline_batch_size_count[{]pipeline="processor"')
batched=$(metric 'orderly_pipeline_batch_size_sum[{]pipeline="processor"')
stop
awk -v b="$backlog" -v n="$decided" -v m="$before" -v t0="$t0" -v t1="$t1" -v bc="$batches" -v bs="$batched" \
  'BEGIN {printf "backlog %d, decided %d (%d of them in %.2f s after the first reading: %d decisions/s), %.0f commands a batch\n", b, n, n - m, t1 - t0, (n - m) / (t1 - t0), bc ? bs / bc : 0}'
