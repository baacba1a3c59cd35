package embedetcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestTLSMemberRefusesClientsWithoutCertificate starts a member with a PKI
// and checks that a client without the client certificate cannot read a key
// (plain http, and TLS that trusts the CA but presents no certificate), while
// a client with it can. A plain-http member once let every local user read
// and rewrite the registry.
func TestTLSMemberRefusesClientsWithoutCertificate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	pki, err := EnsurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(ctx, Config{DataDir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true, PKI: &pki})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	endpoint := s.Endpoints()[0]
	if !strings.HasPrefix(endpoint, "https://127.0.0.1:") || !strings.HasPrefix(s.Config().PeerURL, "https://") {
		t.Fatalf("URLs are not https: %+v", s.Config())
	}

	good, err := s.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	authed := newClient(t, endpoint, good)
	if _, err := authed.Put(ctx, "/registry/secret", "v"); err != nil {
		t.Fatalf("client with certificate: %v", err)
	}

	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(pki.CAFile)
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("read CA: %v", err)
	}
	plainEndpoint := "http://" + strings.TrimPrefix(endpoint, "https://")
	var refused sync.WaitGroup
	for name, c := range map[string]*clientv3.Client{
		"plain http":          newClient(t, plainEndpoint, nil),
		"TLS, no certificate": newClient(t, endpoint, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
	} {
		// Each waits out its deadline: both at once.
		refused.Go(func() {
			getCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if resp, err := c.Get(getCtx, "/registry/secret"); err == nil {
				t.Errorf("%s: read a key without a client certificate: %v", name, resp.Kvs)
			}
		})
	}
	refused.Wait()

	// The files are private: directory 0700, every file 0600, no CA key.
	if st, err := os.Stat(pki.Dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("PKI dir mode %v, %v; want 0700", st.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(pki.Dir)
	for _, e := range entries {
		info, _ := e.Info()
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
		if strings.HasPrefix(e.Name(), "ca.key") {
			t.Errorf("the CA key was written: %s", e.Name())
		}
	}
	// EnsurePKI keeps a complete PKI (a restart reuses the certificates).
	before, _ := os.ReadFile(pki.ClientCertFile)
	if _, err := EnsurePKI(pki.Dir); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(pki.ClientCertFile); string(after) != string(before) {
		t.Error("EnsurePKI regenerated a complete PKI")
	}
}

func newClient(t *testing.T, endpoint string, tlsConfig *tls.Config) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
