#!/usr/bin/env bash
# Sourced by the measurement scripts that run their own orderly serve
# (memory-after-burst.sh, replay-after-load.sh), from the repository's
# root:
#
#   . scripts/serve.sh "$@"
#
# Answers -h and --help with the calling script's leading comment and exits.
# Otherwise makes a fresh temporary directory, $work, and $bin, the orderly
# to run: ORDERLY_BIN when it is set (a build of another commit, to compare),
# else one built from this checkout into $work/orderly. On exit it stops the
# process whose ID the script keeps in $pid (its orderly serve) and removes
# $work. wait_ready ADDR waits up to
# 20 s for that serve's /readyz on ADDR, and fails with its log
# ($work/serve.log) when it does not come.

case "${1:-}" in -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;; esac

work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
bin=${ORDERLY_BIN:-$work/orderly}
[ -n "${ORDERLY_BIN:-}" ] || go build -o "$bin" ./cmd/orderly

wait_ready() {
  for _ in $(seq 100); do
    curl -fs "http://$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "orderly serve did not become ready on $1:" >&2
  cat "$work/serve.log" >&2
  return 1
}
