#!/usr/bin/env bash
# The topology of docker-compose.yml on one machine, without Docker, from the
# same config files (deploy/nats/node.conf and run.sh, deploy/haproxy/haproxy.cfg):
# three nats-server processes built from the pinned Go module (their routes
# authenticated with the route password of orderly credentials init, and every
# connection TLS with its CA), orderly setup
# (R3), two APIs, two processors, and HAProxy (Debian's package)
# in front of the APIs.
#
#   scripts/cluster.sh up       start it; prints the URLs (idempotent: a running cluster is kept)
#   scripts/cluster.sh check    up, then orderly check through the balancer while the
#                               ORDER_COMMANDS leader and one API are killed with SIGKILL;
#                               prints the checker's verdict and exits with its status
#   scripts/cluster.sh bench    up, then orderly bench through the balancer (sync, async) and
#                               each process's CPU per 1,000 orders and memory
#   scripts/cluster.sh status   the processes and orderly status
#   scripts/cluster.sh down     stop everything and delete .cluster/
#
# Everything lives in .cluster/ (binaries, keys, data, logs). Ports are
# CLUSTER_BASE (19000) plus: 80 balancer, 81-82 APIs, 83-84 processors,
# 221-223 NATS clients, 621-623 routes, 821-823 NATS monitoring,
# 404 balancer stats. CHECK_DURATION (60s) sets the length of the check.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=.cluster
BASE=${CLUSTER_BASE:-19000}
LB=127.0.0.1:$((BASE + 80))
NATS_URLS="nats://127.0.0.1:$((BASE + 221)),nats://127.0.0.1:$((BASE + 222)),nats://127.0.0.1:$((BASE + 223))"
CREDS=$DIR/nats/credentials
ORDERLY=$DIR/bin/orderly
# The nodes speak TLS only (node.conf, ADR 0025): every orderly command
# below trusts the CA of orderly credentials init.
export ORDERLY_NATS_CA=$PWD/$CREDS/tls-ca.pem

say() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }

running() { [ -f "$DIR/pids/$1" ] && kill -0 "$(cat "$DIR/pids/$1")" 2>/dev/null; }

# start NAME CMD...: runs CMD in the background, output in logs/NAME.log.
start() {
  local name=$1; shift
  running "$name" && return 0
  "$@" >>"$DIR/logs/$name.log" 2>&1 &
  echo $! >"$DIR/pids/$name"
}

# wait_for WHAT SECONDS CMD...: retries CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "$what not ready after ${secs}s (logs in $DIR/logs)"
    sleep 0.5
  done
}

build() {
  mkdir -p "$DIR/bin" "$DIR/logs" "$DIR/pids"
  say "building orderly and nats-server (the pinned module) into $DIR/bin"
  go build -o "$DIR/bin/orderly" ./cmd/orderly
  go build -o "$DIR/bin/nats-server" github.com/nats-io/nats-server/v2
  if ! command -v haproxy >/dev/null; then
    say "installing haproxy (Debian)"
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq haproxy >/dev/null
    else die "haproxy is missing: sudo apt-get install haproxy"; fi
  fi
}

start_nats() {
  local i=$1
  mkdir -p "$DIR/nats/data-$i"
  start "nats-$i" env NATS_NAME="nats-$i" NATS_LISTEN="127.0.0.1:$((BASE + 220 + i))" NATS_HTTP="127.0.0.1:$((BASE + 820 + i))" \
    NATS_CLUSTER_LISTEN="127.0.0.1:$((BASE + 620 + i))" NATS_STORE_DIR="$PWD/$DIR/nats/data-$i" \
    NATS_ROUTE_1="127.0.0.1:$((BASE + 621))" NATS_ROUTE_2="127.0.0.1:$((BASE + 622))" NATS_ROUTE_3="127.0.0.1:$((BASE + 623))" \
    NATS_SERVER="$DIR/bin/nats-server" sh "$DIR/nats/run.sh"
}

nats_healthy() { curl -fsS "http://127.0.0.1:$((BASE + 820 + $1))/healthz?js-enabled-only=true"; }

# role NAME ROLE USER PORT
start_role() {
  start "$1" env ORDERLY_NATS_URL="$NATS_URLS" ORDERLY_NATS_NKEY="$CREDS/$3.nk" ORDERLY_HTTP_ADDR="127.0.0.1:$4" \
    ORDERLY_LOG_FORMAT=json "$ORDERLY" "$2"
}

up() {
  build
  mkdir -p "$DIR/nats"
  "$ORDERLY" credentials init "$CREDS" >/dev/null
  # The includes are relative to the config file, and run.sh finds both beside it.
  cp deploy/nats/node.conf deploy/nats/run.sh "$DIR/nats/"
  for i in 1 2 3; do start_nats "$i"; done
  for i in 1 2 3; do wait_for "nats-$i" 60 nats_healthy "$i"; done
  say "NATS cluster healthy; orderly setup --replicas 3"
  ORDERLY_NATS_URL="$NATS_URLS" ORDERLY_NATS_NKEY="$CREDS/operator.nk" "$ORDERLY" setup --replicas 3 >>"$DIR/logs/setup.log" 2>&1 \
    || die "orderly setup failed: $(tail -3 "$DIR/logs/setup.log")"
  start_role api-1 api api $((BASE + 81))
  start_role api-2 api api $((BASE + 82))
  start_role processor-1 processor processor $((BASE + 83))
  start_role processor-2 processor processor $((BASE + 84))
  for p in 81 82 83 84; do
    wait_for "the orderly process on :$((BASE + p))" 60 "$ORDERLY" healthcheck --url "http://127.0.0.1:$((BASE + p))/readyz"
  done
  start lb env LB_BIND="$LB" LB_STATS_BIND="127.0.0.1:$((BASE + 404))" API_1="127.0.0.1:$((BASE + 81))" API_2="127.0.0.1:$((BASE + 82))" \
    haproxy -f deploy/haproxy/haproxy.cfg
  wait_for "the balancer" 30 "$ORDERLY" healthcheck --url "http://$LB/readyz"
  cat >&2 <<EOF
$(date +%H:%M:%S) cluster up:
  API (through HAProxy)  http://$LB          stats http://127.0.0.1:$((BASE + 404))/stats
  NATS                   $NATS_URLS
  operator key           $CREDS/operator.nk   (orderly status --nats-url $NATS_URLS --nats-nkey $CREDS/operator.nk --nats-ca $CREDS/tls-ca.pem)
  logs                   $DIR/logs/
EOF
}

stop_one() {
  local name=$1 sig=${2:-TERM}
  running "$name" || return 0
  local pid; pid=$(cat "$DIR/pids/$name")
  kill -"$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$DIR/pids/$name"
}

down() {
  [ -d "$DIR/pids" ] || { say "no cluster"; return 0; }
  for n in lb api-1 api-2 processor-1 processor-2 nats-1 nats-2 nats-3; do stop_one "$n"; done
  rm -rf "$DIR"
  say "cluster down"
}

status() {
  for n in nats-1 nats-2 nats-3 api-1 api-2 processor-1 processor-2 lb; do
    if running "$n"; then echo "$n running (pid $(cat "$DIR/pids/$n"))"; else echo "$n stopped"; fi
  done
  "$ORDERLY" status --nats-url "$NATS_URLS" --nats-nkey "$CREDS/operator.nk"
}

check() {
  up
  local report=$DIR/check-report.json duration=${CHECK_DURATION:-60s}
  say "orderly check through the balancer for $duration; faults: SIGKILL of the ORDER_COMMANDS leader at +15s (back at +30s), of api-1 at +35s (back at +40s)"
  "$ORDERLY" check --url "http://$LB" --nats-url "$NATS_URLS" --nats-nkey "$CREDS/operator.nk" \
    --duration "$duration" --report "$report" >"$DIR/logs/check.log" 2>&1 &
  local checker=$!
  sleep 15
  local leader
  leader=$("$ORDERLY" status --nats-url "$NATS_URLS" --nats-nkey "$CREDS/operator.nk" --leader ORDER_COMMANDS)
  say "SIGKILL $leader (the ORDER_COMMANDS leader)"
  stop_one "$leader" KILL
  sleep 15
  say "restarting $leader"
  start_nats "${leader#nats-}"
  sleep 5
  say "SIGKILL api-1"
  stop_one api-1 KILL
  sleep 5
  say "restarting api-1"
  start_role api-1 api api $((BASE + 81))
  local rc=0
  wait "$checker" || rc=$?
  tr '\r' '\n' <"$DIR/logs/check.log" | grep -vE '^\s*\[' | sed -n '/logical orders/,$p' >&2 || true
  if [ $rc -eq 0 ]; then say "verdict: no violation"; else say "verdict: the checker failed (exit $rc); report in $report"; fi
  return $rc
}

# cpu_ticks PID: user+system CPU time of PID in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_mib() { awk '/^VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

# bench: orderly bench through the balancer (sync, then async), and what each
# process spent: CPU per 1,000 orders and resident memory after the run.
bench() {
  up
  local procs="nats-1 nats-2 nats-3 api-1 api-2 processor-1 processor-2 lb" hz
  hz=$(getconf CLK_TCK)
  for mode in sync async; do
    local flag="" before=() n
    [ $mode = async ] && flag=--async
    for p in $procs; do before+=("$(cpu_ticks "$(cat "$DIR/pids/$p")")"); done
    local json=$DIR/bench-$mode.json
    "$ORDERLY" bench --url "http://$LB" -c 64 -d "${BENCH_DURATION:-20s}" --warmup 0s $flag --json >"$json" 2>/dev/null
    # The backlog (async) is part of the work: wait until the consumers are idle.
    while "$ORDERLY" status --nats-url "$NATS_URLS" --nats-nkey "$CREDS/operator.nk" --json | grep -qE '"(pending|in_flight)": [1-9]'; do sleep 0.5; done
    n=$(grep -o '"requests": [0-9]*' "$json" | head -1 | grep -o '[0-9]*$')
    printf '%s: %s orders, %s orders/s
' "$mode" "$n" "$(grep -o '"per_second": [0-9.]*' "$json" | head -1 | grep -o '[0-9.]*$' | cut -d. -f1)"
    printf '  %-12s %18s %10s
' process "CPU s/1,000 orders" "RSS MiB"
    local i=0
    for p in $procs; do
      local pid; pid=$(cat "$DIR/pids/$p")
      local used=$(( $(cpu_ticks "$pid") - before[i] ))
      printf '  %-12s %18s %10s
' "$p" "$(awk -v t="$used" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.2f", t / hz / n * 1000}')" "$(rss_mib "$pid")"
      i=$((i + 1))
    done
  done
}

# usage prints the comment at the top of this file.
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

case "${1:-}" in
  up) up ;;
  bench) bench ;;
  check) check ;;
  status) status ;;
  down) down ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
