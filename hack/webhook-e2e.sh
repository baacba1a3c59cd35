#!/usr/bin/env bash
# Runs the admission webhook's tests against a real kube-apiserver and
# kube-controller-manager (test/integration/webhook's TestWebhookKube*, then
# test/e2e's TestWebhookInstallOnKubeAPIServer): builds both of KUBE (default v1.37.2) with
# hack/lib/kube-apiserver-build.sh the first time (about 40 minutes, then
# cached), and runs the tests. `.ci/run` does not run it: the build does not
# fit CI's time; `go test ./test/integration/webhook/` runs the rest (our server as
# the API server) and skips these.
#
# Extra arguments go to `go test` (e.g. -run TestWebhookKube -v; -run '^$'
# -bench KubeCreate -benchtime 300x for the create latency with and without it).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBE=${KUBE:-v1.37.2}
KUBE_APISERVER_BIN=$(hack/lib/kube-apiserver-build.sh "$KUBE" kube-apiserver)
KUBE_CONTROLLER_MANAGER_BIN=$(hack/lib/kube-apiserver-build.sh "$KUBE" kube-controller-manager)
export KUBE_APISERVER_BIN KUBE_CONTROLLER_MANAGER_BIN
go test -count=1 -timeout 20m -run 'Kube' ./test/integration/webhook/ "$@"
# The install (deploy/webhook) on kube-apiserver, as its ServiceAccount.
exec go test -count=1 -timeout 10m -run 'OnKubeAPIServer' ./test/e2e/ "$@"
