package cli_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/allocator/allocator/internal/app"
)

// TestMain lets the in-process commands of these tests apply the same
// logging configuration more than once (a process applies it once).
func TestMain(m *testing.M) {
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
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
