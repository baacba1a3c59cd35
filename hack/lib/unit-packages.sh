# unit_packages prints the packages of the unit tier: those under pkg/,
# internal/ and hack/ whose tests do not start the API server
# (internal/testserver). Their tests use a real etcd where storage is the
# point and client-go's fake clientset where a client is all they need; the
# packages whose tests start the server, and everything under test/, are
# the integration tier that the full hack/test.sh runs as well.
unit_packages() {
  go list -f '{{.ImportPath}}|{{join .TestImports " "}} {{join .XTestImports " "}}' ./pkg/... ./internal/... ./hack/... |
    awk -F'|' '$2 !~ /internal\/testserver/ {print $1}'
}
