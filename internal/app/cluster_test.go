package app

import (
	"strings"
	"testing"
)

// TestEtcdServersNeedScheme: every command with --etcd-servers refuses an
// entry without a scheme at once, in one line, before it reaches anything.
func TestEtcdServersNeedScheme(t *testing.T) {
	t.Parallel()
	const want = "error: --etcd-servers 127.0.0.1:2379: missing scheme; use http://127.0.0.1:2379 or https://127.0.0.1:2379\n"
	for _, args := range [][]string{
		{"serve", "--data-dir", t.TempDir()},
		{"status", "--kubeconfig", "/nonexistent"},
		{"repair", "--kubeconfig", "/nonexistent"},
		{"migrate", "--to", "bitmap", "--kubeconfig", "/nonexistent"},
		{"transition", "status"},
		{"transition", "finish", "--kubeconfig", "/nonexistent"},
		{"transition", "resume", "--kubeconfig", "/nonexistent"},
	} {
		args = append(args, "--etcd-servers", "127.0.0.1:2379")
		if _, stderr, code := runApp(t, args...); code != 1 || stderr != want {
			t.Errorf("%s: exit %d, stderr %q; want %q", strings.Join(args, " "), code, stderr, want)
		}
	}
}
