package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/allocator/allocator/internal/app"
	"github.com/allocator/allocator/internal/testbin"
)

// TestMain applies the commands' logging configuration before any server
// of these tests runs (testbin.ApplyLogging).
func TestMain(m *testing.M) {
	if err := testbin.ApplyLogging(); err != nil {
		fmt.Fprintln(os.Stderr, err)
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
