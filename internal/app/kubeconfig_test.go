package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeKubeconfig writes a kubeconfig whose only cluster is server.
func writeKubeconfig(t *testing.T, path, server string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKubeconfigLoadingRules: every command that reaches the Kubernetes API
// finds its cluster as kubectl does: --kubeconfig, else $KUBECONFIG, else
// ~/.kube/config, else the in-cluster config; when none gives one, the error
// names each place in one line. Each kubeconfig names a server on a closed
// port of its own, so the address in the error says which file was read.
func TestKubeconfigLoadingRules(t *testing.T) {
	home, emptyHome := t.TempDir(), t.TempDir()
	writeKubeconfig(t, filepath.Join(home, ".kube", "config"), "https://127.0.0.1:1")
	fromEnv := filepath.Join(t.TempDir(), "env.kubeconfig")
	writeKubeconfig(t, fromEnv, "https://127.0.0.1:2")
	fromFlag := filepath.Join(t.TempDir(), "flag.kubeconfig")
	writeKubeconfig(t, fromFlag, "https://127.0.0.1:3")
	missing := filepath.Join(emptyHome, "missing.kubeconfig")

	tests := []struct {
		name       string
		home, env  string
		kubeconfig string
		want       string
	}{
		{name: "~/.kube/config", home: home, want: "127.0.0.1:1"},
		{name: "$KUBECONFIG before ~/.kube/config", home: home, env: fromEnv, want: "127.0.0.1:2"},
		{name: "--kubeconfig before $KUBECONFIG", home: home, env: fromEnv, kubeconfig: fromFlag, want: "127.0.0.1:3"},
		{name: "none", home: emptyHome,
			want: "error: no Kubernetes cluster found: --kubeconfig not given; $KUBECONFIG not set; " +
				filepath.Join(emptyHome, ".kube", "config") + " not found; in-cluster config: KUBERNETES_SERVICE_HOST not set\n"},
		{name: "$KUBECONFIG names no file", home: home, env: missing,
			want: "error: no Kubernetes cluster found: --kubeconfig not given; $KUBECONFIG: " + missing +
				" not found; in-cluster config: KUBERNETES_SERVICE_HOST not set\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", tt.home)
			t.Setenv("KUBECONFIG", tt.env)
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			for _, command := range [][]string{{"status"}, {"repair", "--dry-run"}, {"migrate", "--to", "ipaddress"}} {
				args := command
				if tt.kubeconfig != "" {
					args = append(args, "--kubeconfig", tt.kubeconfig)
				}
				_, stderr, code := runApp(t, args...)
				if code != 1 || !strings.Contains(stderr, tt.want) {
					t.Errorf("%v: exit %d, stderr %q; want %q", args, code, stderr, tt.want)
				}
				if strings.Contains(stderr, "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined") {
					t.Errorf("%v fell through to the in-cluster config: %q", args, stderr)
				}
			}
		})
	}
}

// TestKubectlConnectionFlags: `allocator` takes kubectl's connection flags
// as `kubectl allocator` does: -s and --server pick the server, --context
// the kubeconfig's context (an unknown one is named), and the commands that
// work on the whole cluster refuse -n when they run. Each server is a
// closed loopback port of its own, so the address in the error says which
// flag won.
func TestKubectlConnectionFlags(t *testing.T) {
	home := t.TempDir()
	writeKubeconfig(t, filepath.Join(home, ".kube", "config"), "https://127.0.0.1:1")
	t.Setenv("HOME", home)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"status", "-s", "https://127.0.0.1:4"}, "127.0.0.1:4"},
		{[]string{"repair", "--dry-run", "--server", "https://127.0.0.1:5"}, "127.0.0.1:5"},
		{[]string{"renumber", "--from", "old", "--context", "nope"}, `context "nope" does not exist`},
		{[]string{"status", "--context", "c", "--user", "u", "-n", "team-a"}, "127.0.0.1:1"},
		{[]string{"repair", "--dry-run", "-n", "team-a"}, "-n/--namespace team-a: this command works on the whole cluster"},
	}
	for _, tt := range tests {
		_, stderr, code := runApp(t, tt.args...)
		if code == 0 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "unknown flag") || strings.Contains(stderr, "unknown shorthand") {
			t.Errorf("allocator %v: exit %d, stderr %q; want it to take the flags and fail naming %q", tt.args, code, stderr, tt.want)
		}
	}
}
