# unit_packages prints the packages of the unit tier: every package under
# pkg/, internal/ and hack/. Their tests use a real etcd where storage is the
# point and client-go's fake clientset where a client is all they need.
# Tests that start the API server (internal/testserver) are the integration
# tier and live under test/ (a package's own in test/integration/<package>);
# the full hack/test.sh runs both tiers.
#
# It fails, naming the packages, when the test binary of one of them depends
# on internal/testserver, directly or through a helper such as
# internal/repairtest, rather than leave that package out of the tier.
unit_packages() {
  local roots=(./pkg/... ./internal/... ./hack/...) listing offenders
  # One line per test binary ("<package>.test") with every package it links.
  listing=$(go list -test -f '{{.ImportPath}}|{{join .Deps ","}}' "${roots[@]}") || return
  offenders=$(awk -F'|' '
    $1 ~ /\.test$/ && $2 ~ /(^|,)github\.com\/allocator\/allocator\/internal\/testserver( \[[^],]*\])?(,|$)/ {
      sub(/\.test$/, "", $1); print "  " $1
    }' <<<"$listing")
  if [ -n "$offenders" ]; then
    cat >&2 <<MSG
unit tier: the tests of these packages start the API server (they depend on internal/testserver):
$offenders
Tests that start the server belong to the integration tier: move them to test/integration/<package>
as external tests of the package's exported API (git grep -l internal/testserver -- '*_test.go').
MSG
    return 1
  fi
  go list "${roots[@]}"
}
