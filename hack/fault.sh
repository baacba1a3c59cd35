#!/usr/bin/env bash
# Runs the full fault-injection matrix of test/fault: a 3-member
# etcd with member 0 slow, stalled and cut off behind a fault proxy, three
# replicas of the server given every member (--etcd-servers), clients that
# give up after one second, and then the ranges filled; for both models ×
# {ClusterIP, NodePort} workloads × {IPv4, dual-stack} × {3 endpoints,
# 3 endpoints with the repair every 3 s, 1 endpoint as the control}.
# Each configuration asserts no duplicate ClusterIP or node port, every stored
# Service's addresses and ports reserved, and no acknowledged write lost;
# the test logs one line of figures per configuration and a table at the
# end (grep for CONFIGURATION). The package's other tests run too: lost
# answers, and Service writes delayed past another replica's repair grace. Without the race detector, because the
# timings of the faults are part of what is tested; about twenty minutes on
# two cores. `go test ./test/fault/` alone runs CI's bounded subset.
#
# Extra arguments go to `go test` (e.g. -run 'TestFault/bitmap-.*-1ep').
set -euo pipefail
cd "$(dirname "$0")/.."

FAULT_FULL=1 exec go test -race=false -count=1 -timeout 60m -v ./test/fault/ "$@"
