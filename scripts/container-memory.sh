#!/usr/bin/env bash
# orderly serve inside a memory cgroup, as a container runtime would put it,
# under a burst of async orders: does it stay alive, and at what RSS?
# (ADR 0018; needs root and a cgroup v1 or v2 file system with the memory
# controller.)
#
#   scripts/container-memory.sh [ORDERS [LIMIT [serve flags...]]]
#
# ORDERS (300000) async orders with orderly bench -n ORDERS -d 0 --async,
# LIMIT (600M) the cgroup's memory limit; serve flags such as
# --memory-limit off (the behaviour before ADR 0018) or --nats-process child.
# Prints the bench report, then orderly's RSS (and its NATS server child's) and the cgroup's peak usage,
# failure and OOM-kill counts every 15 s for a minute; exits 1 when serve
# was killed.
set -euo pipefail
cd "$(dirname "$0")/.."
ORDERS=${1:-300000}; LIMIT=${2:-600M}; shift $(( $# < 2 ? $# : 2 ))
HTTP=127.0.0.1:18560 NATS=127.0.0.1:14560

work=$(mktemp -d)
go build -o "$work/orderly" ./cmd/orderly
name=orderly-container-memory-$$
if [ -d /sys/fs/cgroup/memory ]; then # v1
  cg=/sys/fs/cgroup/memory/$name; mkdir "$cg"; echo "$LIMIT" > "$cg/memory.limit_in_bytes"
  peak() { echo $(( $(cat "$cg/memory.max_usage_in_bytes") >> 20 ))MiB; }
  fails() { cat "$cg/memory.failcnt"; }
else # v2
  cg=/sys/fs/cgroup/$name; mkdir "$cg"; echo "$LIMIT" > "$cg/memory.max"
  peak() { echo $(( $(cat "$cg/memory.peak" 2>/dev/null || cat "$cg/memory.current") >> 20 ))MiB; }
  fails() { awk '/^max /{print $2}' "$cg/memory.events"; }
fi
rss() { echo "$(awk '/VmRSS/{print int($2/1024)}' "/proc/$1/status")MiB"; }
oom() { awk '/^oom_kill /{print $2}' "$cg/memory.oom_control" 2>/dev/null || awk '/^oom_kill /{print $2}' "$cg/memory.events"; }
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  wait 2>/dev/null || true
  for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done # the kernel empties it a moment later
  rm -rf "$work"
}
trap cleanup EXIT

sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$work/orderly" serve \
  --http-addr "$HTTP" --nats-listen "$NATS" --data-dir "$work/data" "$@" > "$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://$HTTP/readyz" && break; sleep 0.1; done
curl -s -o /dev/null "http://$HTTP/readyz" || { echo "orderly serve did not start:"; cat "$work/serve.log"; exit 1; }
grep -m1 'orderly starting' "$work/serve.log" || true
"$work/orderly" bench --url "http://$HTTP" -n "$ORDERS" -d 0 --async 2>&1 | tail -3
for t in 0 15 30 45 60; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "orderly serve is gone (killed: the cgroup's OOM kills: $(oom))"; exit 1
  fi
  child=$(pgrep -P "$pid" | head -1 || true) # --nats-process child's server
  echo "t=${t}s rss=$(rss "$pid")${child:+ nats_server_rss=$(rss "$child")} cgroup_peak=$(peak) failures=$(fails) oom_kills=$(oom)"
  [ "$t" = 60 ] || sleep 15
done
