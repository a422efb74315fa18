#!/usr/bin/env bash
# How much memory orderly serve keeps after a burst of async orders, and
# for how long (ADR 0019).
#
#   scripts/memory-after-burst.sh [ORDERS [serve flags...]]
#
# Builds orderly, starts a fresh orderly serve (its data in a temporary
# directory), sends ORDERS (300000) async orders with
# orderly bench -n ORDERS -d 0 --async, then prints the RSS of serve and of
# its child process (with --nats-process child) at the end of the load and
# 15 s, 30 s, 1, 2, 2.5 and 3 minutes after. Serve flags such as
# --nats-process child or --order-ids nonce are passed on.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/serve.sh
. scripts/serve.sh "$@"
ORDERS=${1:-300000}; shift $(( $# < 1 ? $# : 1 ))
HTTP=127.0.0.1:18570

"$bin" serve --data-dir "$work/data" --http-addr "$HTTP" --nats-listen "" --log-level debug "$@" >"$work/serve.log" 2>&1 &
pid=$!
wait_ready "$HTTP"
rss() {
  local kib=0
  for p in $pid $(pgrep -P "$pid" || true); do kib=$(( kib + $(awk '/^VmRSS/{print $2}' "/proc/$p/status") )); done
  echo "$(( kib >> 10 )) MiB"
}
"$bin" bench --url "http://$HTTP" -n "$ORDERS" -d 0 -c 64 --async 2>/dev/null
echo "RSS at the end of the load: $(rss)"
prev=0
for t in 15 30 60 120 150 180; do
  sleep $(( t - prev )); prev=$t
  echo "RSS ${t} s after: $(rss)"
done
grep -o 'msg="quiet after a burst[^"]*" returned_bytes=[0-9]* took=[^ ]*' "$work/serve.log" || echo "(no release logged)"
