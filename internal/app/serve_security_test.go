package app

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allocator/allocator/internal/testpki"
)

// TestServeBadSecurityFiles runs serve with each kind of wrong file for the
// options of running beside a control plane: each is refused at start with
// exit 1 and one line naming the flag, before anything listens or starts.
func TestServeBadSecurityFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "test CA")
	server := ca.Server(t, "allocator")
	other := ca.Server(t, "other")
	missing := filepath.Join(dir, "missing")
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notPEM := write("not.pem", "this is not a certificate\n")
	shortTokens := write("tokens.csv", "token-only,user\n")
	badKubeconfig := write("bad.kubeconfig", "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: ':::'}}]\ncontexts: [{name: x, context: {cluster: x}}]\ncurrent-context: x\n")
	badPolicy := write("policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n")
	// A closed port: listen, note the port, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	l.Close()
	etcdCA := testpki.NewCA(t, "etcd CA")
	etcdClient := etcdCA.Client(t, "allocator")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serving cert missing", []string{"--tls-cert-file", missing, "--tls-private-key-file", server.KeyFile}, "--tls-cert-file " + missing},
		{"serving cert without key", []string{"--tls-cert-file", server.CertFile}, "--tls-cert-file and --tls-private-key-file must be given together"},
		{"serving cert and key do not match", []string{"--tls-cert-file", server.CertFile, "--tls-private-key-file", other.KeyFile}, "private key does not match public key"},
		{"serving key not PEM", []string{"--tls-cert-file", server.CertFile, "--tls-private-key-file", notPEM}, "--tls-private-key-file " + notPEM},
		{"client CA missing", []string{"--client-ca-file", missing}, "--client-ca-file: open " + missing},
		{"client CA not PEM", []string{"--client-ca-file", notPEM}, "--client-ca-file " + notPEM},
		{"token file missing", []string{"--token-auth-file", missing}, "--token-auth-file: open " + missing},
		{"token file malformed", []string{"--token-auth-file", shortTokens}, "at least 3 columns"},
		{"authentication kubeconfig missing", []string{"--authentication-kubeconfig", missing}, "--authentication-kubeconfig " + missing},
		{"authorization kubeconfig invalid", []string{"--authorization-kubeconfig", badKubeconfig}, "--authorization-kubeconfig " + badKubeconfig},
		{"audit policy missing", []string{"--audit-policy-file", missing}, "--audit-policy-file:"},
		{"audit policy invalid", []string{"--audit-policy-file", badPolicy}, "--audit-policy-file:"},
		{"etcd TLS without etcd servers", []string{"--etcd-cafile", etcdCA.CertFile}, "need --etcd-servers"},
		{"etcd cert without key", []string{"--etcd-servers", closed, "--etcd-certfile", etcdClient.CertFile}, "--etcd-certfile and --etcd-keyfile must be given together"},
		{"etcd cert and key do not match", []string{"--etcd-servers", closed, "--etcd-certfile", etcdClient.CertFile, "--etcd-keyfile", server.KeyFile}, "private key does not match public key"},
		{"etcd CA not PEM", []string{"--etcd-servers", closed, "--etcd-cafile", notPEM}, "--etcd-cafile " + notPEM},
		{"etcd with TLS unreachable", []string{"--etcd-servers", closed, "--etcd-cafile", etcdCA.CertFile,
			"--etcd-certfile", etcdClient.CertFile, "--etcd-keyfile", etcdClient.KeyFile}, "did not answer within 10s (is it running, and do --etcd-cafile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"serve", "--secure-port", "0", "--data-dir", filepath.Join(t.TempDir(), "data")}, tt.args...)
			_, stderr, code := runApp(t, args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stderr %q", stderr)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "error: ") {
				t.Errorf("want exactly one error line, got %q", stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tt.want)
			}
			for _, bad := range []string{"goroutine ", "panic"} {
				if strings.Contains(stderr, bad) {
					t.Errorf("stderr has %q: %q", bad, stderr)
				}
			}
		})
	}
}
