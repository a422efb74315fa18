#!/usr/bin/env bash
# What requests that orderly refuses cost it in memory: orderly serve (a
# fresh data directory) under wrk, whose every request is a 400 made as
# large as a request may be. Prints wrk's rate, serve's RSS before the load
# and its peak (VmHWM), and the largest live heap the collector saw
# (GODEBUG=gctrace=1). docs/security.md ("A refused body costs little")
# has its figures.
#
#   scripts/refused-load.sh body     # POSTs of 64 KiB of unknown fields
#   scripts/refused-load.sh query    # GETs with 29 KiB of unknown query parameters
#
# ORDERLY_BIN (a binary to measure instead of one built from this checkout,
# such as a build of an older commit), CONNS (1000), DURATION (15s) and HTTP
# (127.0.0.1:18080) change the defaults. Needs wrk (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
case $kind in
  body | query | -h | --help) ;;
  *) echo "usage: scripts/refused-load.sh body|query (--help says more)" >&2; exit 1 ;;
esac
# shellcheck source=scripts/serve.sh
. scripts/serve.sh "$@"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
CONNS=${CONNS:-1000}
DURATION=${DURATION:-15s}
HTTP=${HTTP:-127.0.0.1:18080}

# The requests, as wrk's Lua script, and one sent first with curl: the load
# is of refusals, 400s, or it measures nothing.
case $kind in
  body)
    awk 'BEGIN {
      s = "{\"customer_id\":\"c\",\"currency\":\"EUR\",\"items\":[{\"sku\":\"x\",\"quantity\":1,\"unit_price\":1}]"
      for (i = 0; length(s) < 65536 - 16; i++) s = s ",\"f" i "\":1"
      printf "%s}", s
    }' >"$work/body.json"
    cat >"$work/load.lua" <<EOF
local f = io.open("$work/body.json", "rb")
wrk.body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.path = "/v1/orders"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Idempotency-Key"] = "refused"
EOF
    probe=(-H 'Content-Type: application/json' -H 'Idempotency-Key: refused' --data-binary "@$work/body.json" "http://$HTTP/v1/orders")
    ;;
  query)
    path="/v1/orders/ord_0000000000001WWZAD2XPDAXP2?$(awk 'BEGIN { for (i = 0; i < 4400; i++) printf "%sp%d=", (i ? "&" : ""), i }')"
    printf 'wrk.method = "GET"\nwrk.path = "%s"\n' "$path" >"$work/load.lua"
    probe=("http://$HTTP$path")
    ;;
esac

GODEBUG=gctrace=1 "$bin" serve --data-dir "$work/data" --http-addr "$HTTP" --nats-listen "" >"$work/serve.log" 2>&1 &
pid=$!
wait_ready "$HTTP"
code=$(curl -s -o /dev/null -w '%{http_code}' "${probe[@]}")
[ "$code" = 400 ] || { echo "the $kind request is answered $code, not 400" >&2; exit 1; }

kb() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$pid/status"; }
before=$(kb VmRSS)
wrk -t2 -c"$CONNS" -d"$DURATION" -s "$work/load.lua" "http://$HTTP" | grep -E 'Requests/sec|Non-2xx|Socket errors'
peak=$(kb VmHWM)
# gctrace: "gc N @T s P%: ..., START->END->LIVE MB, ...": the largest LIVE.
live=$(awk '$1 == "gc" { split($11, h, "->"); if (h[3] + 0 > m) m = h[3] + 0 } END { print m + 0 }' "$work/serve.log")
printf '%s: RSS %d MiB before, peak %d MiB; largest live heap %d MiB\n' "$kind" $((before / 1024)) $((peak / 1024)) "$live"
