package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/allocator/allocator/internal/app"
)

// TestMain applies the commands' default logging configuration once, before
// any server of these tests runs: applying it swaps klog's global logger,
// which a running server's goroutines read. The in-process commands then
// find it unchanged and leave it alone (a process applies it once).
func TestMain(m *testing.M) {
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
	if err := logsapi.ValidateAndApply(logsapi.NewLoggingConfiguration(), nil); err != nil {
		fmt.Fprintf(os.Stderr, "logging: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// runApp runs the allocator command line args in-process and returns what
// it printed and its exit code.
func runApp(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = app.Run(context.Background(), args, app.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return out.String(), errOut.String(), code
}
