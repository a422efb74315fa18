#!/usr/bin/env bash
# Known vulnerabilities that orderly's code reaches, and whether what is
# deployed has them fixed: govulncheck (symbol level: only calls count)
# over ./..., judged by scripts/vulngate. It fails when a module the code
# calls into is vulnerable (bump it), or when the Go release of the
# Dockerfile's build image still has a standard library vulnerability the
# code reaches (raise the image's Go).
#
#   scripts/vulncheck.sh                          # the pinned database below
#   VULNDB=https://vuln.go.dev scripts/vulncheck.sh   # today's database, where it can be reached
#
# The database is golang.org/x/vulndb's OSV entries, taken from the Go module
# proxy at a pinned version, so that the result does not change between two
# runs of the same commit and needs nothing but the proxy. Move the pin to
# `go list -m golang.org/x/vulndb@latest` to check against newer advisories.
set -euo pipefail
cd "$(dirname "$0")/.."
GOVULNCHECK_VERSION=v1.9.0
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018

db=${VULNDB:-}
if [ -z "$db" ]; then
  echo "downloading the vulnerability database golang.org/x/vulndb@$VULNDB_VERSION" >&2
  dir=$(go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir/data/osv" ] || { echo "no data/osv in golang.org/x/vulndb@$VULNDB_VERSION ($dir)" >&2; exit 2; }
  db="file://$dir/data/osv"
fi

echo "govulncheck $GOVULNCHECK_VERSION ./... against $db" >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
GOFLAGS="${GOFLAGS:-} -buildvcs=false" go run "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION" -db "$db" -format json ./... >"$out"
go run ./scripts/vulngate -dockerfile Dockerfile <"$out"
