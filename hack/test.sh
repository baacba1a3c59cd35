#!/usr/bin/env bash
# The project's test command: what CI runs and what the README tells a newcomer to run.
# It installs nothing by hand; the Go toolchain fetches whatever the module needs.
#
#   hack/test.sh        everything (what CI runs), in a fresh copy of the working
#                       tree (hack/fresh-clone.sh: nothing beside it)
#   hack/test.sh unit   the unit tier only: every package under pkg/, internal/ and hack/
#                       (hack/lib/unit-packages.sh, which fails if one of their tests starts
#                       the API server), in parallel, no race detector
#   hack/test.sh go     both tiers' go tests as the full run runs them: the unit tier
#                       under the race detector, then the integration tier (everything
#                       else) without it; RACE=1 puts the integration tier under it too
set -euo pipefail
cd "$(dirname "$0")/.."
. hack/lib/unit-packages.sh

# phase NAME: prints the wall and CPU time (this script's children, user +
# system) the previous phase took, then NAME, so the log says where a run's
# time went.
phase_start=$SECONDS
phase_cpu=0
ticks=$(getconf CLK_TCK)
phase() {
  local stat cpu
  # This shell's waited-for children's user and system time (fields 16 and
  # 17 of /proc/PID/stat, after the command name), read without a subshell.
  read -r stat </proc/$$/stat
  read -ra stat <<<"${stat##*) }"
  cpu=$(( (stat[13] + stat[14]) / ticks ))
  if [ -n "${phase_name:-}" ]; then
    echo "-- ${phase_name}: $((SECONDS - phase_start)) s, $((cpu - phase_cpu)) CPU-s"
  fi
  phase_name=$1 phase_start=$SECONDS phase_cpu=$cpu
  [ "$1" = end ] || echo "== $1"
}

case "${1:-}" in
unit)
  packages=$(unit_packages)
  # The unit tests mostly wait on etcd and timers, not the CPU: four
  # packages, and eight of a package's parallel tests, run at once, where
  # go test's default (GOMAXPROCS, two here) ran two of each.
  # shellcheck disable=SC2086 # one argument per package
  go test -count=1 -p 4 -parallel 8 $packages
  exit
  ;;
go)
  unit=$(unit_packages)
  integration=$(go list ./... | grep -vxF "$unit")
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # -json through hack/tools/testtimes: go test's own output, then the
  # slowest packages and tests, so the log says where the run's time went.
  go build -o "$tmp/testtimes" ./hack/tools/testtimes
  # The race detector costs about four times the CPU of a test that runs
  # the API server in-process (docs/performance.md), and the integration
  # tier is most of the run's CPU; the unit tier exercises each package's concurrency directly, so it
  # runs under the detector in every run, the integration tier when asked.
  race=()
  if [ "${RACE:-0}" = 1 ]; then race=(-race); fi
  phase "go test -race: the unit tier"
  # A failing tier does not stop the other: one run reports every failure.
  failed=0
  # shellcheck disable=SC2086 # one argument per package
  go test -race -count=1 -p 4 -parallel 8 -timeout 20m -json $unit 2>&1 | "$tmp/testtimes" -top 10 || failed=1
  phase "go test${race[*]:+ ${race[*]}}: the integration tier"
  # The integration tests mostly wait on servers, timers and etcd: three
  # packages, and four of a package's parallel tests, at once.
  # shellcheck disable=SC2086 # one argument per package
  go test "${race[@]}" -count=1 -p 3 -parallel 4 -timeout 30m -json $integration 2>&1 | "$tmp/testtimes" -top 20 || failed=1
  phase end
  exit "$failed"
  ;;
"")
  # Every phase runs in the copy, so that the repository proves
  # self-contained and the copy's fixed path lets the build cache keep
  # what an earlier run compiled.
  exec hack/fresh-clone.sh hack/test.sh all
  ;;
all) ;; # the phases below, here
*)
  echo "usage: hack/test.sh [unit|go]" >&2
  exit 2
  ;;
esac

# The files a commit would hold: tracked, and untracked but not ignored.
files() { git ls-files --cached --others --exclude-standard "$@"; }

phase "gofmt"
unformatted=$(gofmt -l $(files '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

phase "files under 1 MB (build outputs belong in .gitignore)"
big=$(files -z | xargs -0 -r stat -c '%s %n' 2>/dev/null | awk '$1 > 1048576 {print $2 " (" $1 " bytes)"}')
if [ -n "$big" ]; then
  echo "files over 1 MB:"; echo "$big"; exit 1
fi

phase "go vet"
go vet ./...

# go vet has checked every package with its test files: go test need not
# check them again (its vet step is a subset of go vet's analyzers).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-vet=off"

phase "staticcheck"
# hack/tools.mod pins staticcheck (a tool directive), so `go tool` builds
# it from the module proxy: nothing is installed by hand. It is a modfile of
# its own because staticcheck's requirements would otherwise raise the
# golang.org/x modules the server is built with. pkg/generated is
# openapi-gen's output, which names the deprecated Endpoints types the API
# still serves.
checked=$(go list ./... | grep -v '/pkg/generated/')
# shellcheck disable=SC2086 # one argument per package
go tool -modfile=hack/tools.mod staticcheck $checked

phase "file and function sizes"
hack/verify-size.sh

phase "go test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
hack/test.sh go 2>&1 | tee "$log"
passed=$(grep -c '^ok ' "$log" || true)

phase "fuzz (short runs of every fuzz target)"
# Each target's seed corpus already ran in go test; this is a short search.
hack/fuzz.sh "${FUZZTIME:-5s}"

phase "verify generated code"
hack/verify-codegen.sh

phase "e2e (allocator serve + kubectl)"
hack/e2e.sh

phase "scale smoke (10,000 Services on 100 ServiceCIDRs: a check, not a timing)"
# hack/scale.sh fails on a refused create, a ClusterIP handed out twice, a
# server not ready after its restart, or a repair that finds a problem.
CIDRS=100 V4_CIDRS=40 SERVICES=10000 hack/scale.sh >"$log" 2>&1 || { tail -40 "$log"; exit 1; }
sed -n '/^=== summary/,$p' "$log"

phase end
echo "packages: ${passed} passed, 0 failed"
