package app

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestServePortTaken: serve on a port something else listens on exits at
// once with one line that names the address once and says what to do.
func TestServePortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	addr := l.Addr().(*net.TCPAddr)
	// The listener is made before etcd is reached; no etcd is needed.
	_, stderr, code := runApp(t, "serve", "--secure-port", strconv.Itoa(addr.Port), "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--etcd-servers", "http://127.0.0.1:1")
	want := "error: listen on " + addr.String() + ": address already in use; stop what listens there, or pick another --secure-port (0 picks a free one)\n"
	if code != 1 || stderr != want {
		t.Errorf("exit %d, stderr %q; want %q", code, stderr, want)
	}
	if n := strings.Count(stderr, addr.String()); n != 1 {
		t.Errorf("the address appears %d times: %q", n, stderr)
	}
}
