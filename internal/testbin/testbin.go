// Package testbin is what tests that run the allocator's command line share:
// cmd/allocator built once per test binary, for tests that run it as a
// process, and the logging configuration applied once, for tests that run
// its commands in-process beside an in-process server.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"
)

var build struct {
	once     sync.Once
	dir, bin string
	err      error
}

// Allocator returns the path of cmd/allocator, built on the first call of
// the test binary as the Dockerfile builds it: with cgo off, a static
// binary that also runs in the manifest tests' container-like root
// directories. TestMain removes it with Cleanup.
func Allocator(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "allocator-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.dir = dir
		bin := filepath.Join(dir, "allocator")
		cmd := exec.Command("go", "build", "-o", bin, "github.com/allocator/allocator/cmd/allocator")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		build.bin = bin
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// Cleanup removes what Allocator built; TestMain calls it after m.Run.
func Cleanup() {
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
}

// ApplyLogging applies the commands' default logging configuration, to be
// called by TestMain before any server runs: applying it swaps klog's
// global logger, which a running server's goroutines read. Commands run
// in-process afterwards find it unchanged and leave it alone.
func ApplyLogging() error {
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	if err := logsapi.ValidateAndApply(logsapi.NewLoggingConfiguration(), nil); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	return nil
}
