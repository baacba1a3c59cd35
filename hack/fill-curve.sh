#!/usr/bin/env bash
# Fill curve: starts `allocator serve` (embedded etcd, temporary data dir) on a
# service range, fills it with one client through the API, and prints the
# create latency per 10% of fill.
#
#   hack/fill-curve.sh                                  IPAddress model, a /18 (16,381 Services)
#   ALLOCATOR=bitmap RANGE=10.0.0.0/20 COUNT=4093 hack/fill-curve.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ALLOCATOR=${ALLOCATOR:-ipaddress}
RANGE=${RANGE:-10.0.0.0/18}
COUNT=${COUNT:-16381}

. hack/lib/serve.sh
go build -o "$work/fillcurve" ./test/fillcurve
serve_start --service-cluster-ip-range "$RANGE" --allocator "$ALLOCATOR"
echo "allocator=$ALLOCATOR range=$RANGE services=$COUNT"
"$work/fillcurve" --kubeconfig "$kc" --count "$COUNT"
