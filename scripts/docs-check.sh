#!/usr/bin/env bash
# Runs the nats CLI commands of the README and docs/ verbatim, with the nats
# CLI version the docs name (natscli v0.5.0), against a fresh `orderly serve`
# started in a temporary directory (so that data/credentials/... resolves as
# in the docs). The orderly command lines of the docs are checked by
# `go test ./cmd/orderly` (TestDocumentedCommandsParse).
#
#   scripts/docs-check.sh
#   scripts/docs-check.sh --build-only   # the builds alone, into Go's build cache (CI runs it early)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NATSCLI_VERSION=v0.5.0
work=$(mktemp -d)
cleanup() { [ -n "${serve:-}" ] && kill "$serve" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

echo "building orderly and the nats CLI $NATSCLI_VERSION" >&2
go build -o "$work/bin/orderly" ./cmd/orderly
GOBIN="$work/bin" GOFLAGS='' go install "github.com/nats-io/natscli/nats@$NATSCLI_VERSION"
[ "${1:-}" = "--build-only" ] && exit 0
export PATH="$work/bin:$PATH"

# The commands: lines starting with "nats " in ```sh blocks, with their
# backslash continuations.
extract() {
  awk '
    /^```/ { inblock = !inblock; sh = ($0 ~ /^```(sh|bash)$/); next }
    inblock && sh {
      line = $0
      if (cont != "") { cmd = cmd " " line } else if (line ~ /^nats /) { cmd = line } else { next }
      if (cmd ~ /\\$/) { sub(/\\$/, "", cmd); cont = 1; next }
      cont = ""; sub(/[ \t]+#.*$/, "", cmd); print FILENAME ": " cmd; cmd = ""
    }' "$@"
}
mapfile -t commands < <(cd "$ROOT" && extract README.md docs/*.md)
[ ${#commands[@]} -gt 0 ] || { echo "no nats commands found in the docs: the extraction is broken" >&2; exit 1; }

cd "$work"
orderly serve >serve.log 2>&1 &
serve=$!
for _ in $(seq 60); do orderly healthcheck >/dev/null 2>&1 && break; sleep 0.5; done
orderly healthcheck
curl -fsS -o /dev/null -X POST localhost:8080/v1/orders -H 'Content-Type: application/json' -H 'Idempotency-Key: docs-1' \
  -d '{"customer_id":"c-42","currency":"EUR","items":[{"sku":"SKU-1","quantity":2,"unit_price":2495}]}'

failed=0
for c in "${commands[@]}"; do
  where=${c%%: *}; cmd=${c#*: }
  if out=$(bash -c "$cmd" 2>&1); then
    echo "ok    $where: $cmd" >&2
  else
    echo "FAIL  $where: $cmd" >&2; echo "$out" | sed 's/^/      /' >&2; failed=$((failed + 1))
  fi
done
[ $failed -eq 0 ] || { echo "$failed documented nats commands failed" >&2; exit 1; }
echo "${#commands[@]} documented nats commands ran" >&2
