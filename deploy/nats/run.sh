#!/bin/sh
# Starts nats-server with node.conf beside this file, after putting the route
# password (credentials/route.password, written by `orderly credentials init`)
# into the three route URLs: nats-server takes a route's credentials from its
# URL only (ADR 0024). docker-compose.yml and scripts/cluster.sh both start
# their nodes with it.
#   NATS_ROUTE_1..3  the nodes' route addresses, host:port
#   NATS_SERVER      the nats-server binary (default: nats-server on PATH)
# It also gives node.conf the paths of the TLS files beside it
# (credentials/tls-*.pem, tls-*.key, from the same init; ADR 0025) as
# NATS_TLS_CA, NATS_TLS_CERT and NATS_TLS_KEY.
# The rest of the environment is node.conf's.
set -eu
dir=$(dirname "$0")
password=$(cat "$dir/credentials/route.password")
# The test orderly's credentials check makes: at least 32 hex digits.
case $password in
  *[!0-9a-f]* | "") short=yes ;;
  *) if [ "${#password}" -lt 32 ]; then short=yes; else short=no; fi ;;
esac
if [ "$short" = yes ]; then
  echo "run.sh: $dir/credentials/route.password is not a route password (at least 32 hex digits): delete it and run orderly credentials init" >&2
  exit 1
fi
# route NAME VALUE: VALUE (host:port) as a route URL with the password.
route() {
  case $2 in
    "") echo "run.sh: $1 is not set: give a route address, host:port" >&2; exit 1 ;;
    *://* | *@*) echo "run.sh: $1=$2: give host:port only; the scheme and the credentials are added here" >&2; exit 1 ;;
  esac
  echo "nats://route:$password@$2"
}
NATS_ROUTE_1=$(route NATS_ROUTE_1 "${NATS_ROUTE_1:-}")
NATS_ROUTE_2=$(route NATS_ROUTE_2 "${NATS_ROUTE_2:-}")
NATS_ROUTE_3=$(route NATS_ROUTE_3 "${NATS_ROUTE_3:-}")
export NATS_ROUTE_1 NATS_ROUTE_2 NATS_ROUTE_3
# nats-server reads a TLS file from the path as given, relative to its
# working directory: hand it absolute ones.
abs=$(cd "$dir" && pwd)
NATS_TLS_CA=$abs/credentials/tls-ca.pem
NATS_TLS_CERT=$abs/credentials/tls-node.pem
NATS_TLS_KEY=$abs/credentials/tls-node.key
for f in "$NATS_TLS_CA" "$NATS_TLS_CERT" "$NATS_TLS_KEY"; do
  [ -r "$f" ] || { echo "run.sh: $f is missing: run orderly credentials init (this version writes the cluster's TLS files)" >&2; exit 1; }
done
export NATS_TLS_CA NATS_TLS_CERT NATS_TLS_KEY
exec "${NATS_SERVER:-nats-server}" -c "$dir/node.conf"
