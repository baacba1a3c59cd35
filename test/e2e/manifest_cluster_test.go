package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/allocator/allocator/internal/embedetcd"
	"github.com/allocator/allocator/internal/testpki"
)

// testCluster is the control plane a node of manifest_node_test.go belongs
// to: an etcd that serves TLS and requires a client certificate (kubeadm's
// etcd does), and our own server on it standing in for kube-apiserver (it
// serves the Services, IPAddresses, ServiceCIDRs and events the repair job
// reads and writes), with bearer tokens for the identities the manifests
// use and a serving certificate of the cluster CA for 127.0.0.1. It serves
// no ConfigMaps: the static pod's server finds no
// kube-system/extension-apiserver-authentication (404), goes on without
// the front-proxy settings it holds, and logs that its watch fails.
type testCluster struct {
	etcd      *embedetcd.Server
	etcdPKI   embedetcd.PKI
	ca        *testpki.CA  // the cluster CA, kubeadm's pki/ca.crt
	apiserver testpki.Pair // kube-apiserver's serving certificate, pki/apiserver.crt
	url       string       // https://127.0.0.1:port of the API
	tokens    map[string]string
}

// startTestCluster starts the etcd and the API server (bin serve, with
// serveArgs added) and waits until the API is ready. users are the
// identities given a bearer token; the server authorizes every
// authenticated identity (it has no --authorization-kubeconfig), so RBAC is
// not what these tests look at (hack/deploy-check.sh does).
func startTestCluster(t *testing.T, bin string, serveArgs, users []string) *testCluster {
	t.Helper()
	pki, err := embedetcd.EnsurePKI(filepath.Join(t.TempDir(), "etcd-pki"))
	if err != nil {
		t.Fatal(err)
	}
	return startTestClusterWithPKI(t, bin, pki, serveArgs, users)
}

// startTestClusterWithPKI is startTestCluster with the etcd's certificates
// given: the API server is etcd's client with pki's client certificate.
func startTestClusterWithPKI(t *testing.T, bin string, pki embedetcd.PKI, serveArgs, users []string) *testCluster {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: filepath.Join(dir, "etcd"), PKI: &pki, UnsafeNoFsync: true})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	c := &testCluster{etcd: etcd, etcdPKI: pki, ca: testpki.NewCA(t, "kubernetes"), tokens: map[string]string{}}
	c.apiserver = c.ca.Server(t, "kube-apiserver")

	var tokenFile strings.Builder
	for _, user := range users {
		c.tokens[user] = randomToken(t)
		fmt.Fprintf(&tokenFile, "%s,%s,%s\n", c.tokens[user], user, user)
	}
	tokenPath := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokenPath, []byte(tokenFile.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "apiserver")
	log := newSyncBuffer()
	cmd := exec.Command(bin, append([]string{"serve", "--data-dir", dataDir, "--secure-port", "0", "--bind-address", "127.0.0.1",
		"--etcd-servers", etcd.Endpoints()[0], "--etcd-cafile", pki.CAFile, "--etcd-certfile", pki.ClientCertFile, "--etcd-keyfile", pki.ClientKeyFile,
		"--tls-cert-file", c.apiserver.CertFile, "--tls-private-key-file", c.apiserver.KeyFile, "--token-auth-file", tokenPath}, serveArgs...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := startDyingWithTest(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("the cluster's API server (last lines):\n%s", tail(log.String(), 30))
		}
	})
	kubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("exited: %v", err)
		default:
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return false, nil
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return false, nil
		}
		if _, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
			return false, nil
		}
		c.url = cfg.Host
		return true, nil
	})
	if err != nil {
		t.Fatalf("the cluster's API server is not ready: %v\n%s", err, tail(log.String(), 30))
	}
	return c
}

// kubeconfig is a kubeconfig for user's token, trusting the cluster CA, as
// an operator writes one (and kubeadm its own) for a component.
func (c *testCluster) kubeconfig(t *testing.T, user string) []byte {
	t.Helper()
	ca, err := os.ReadFile(c.ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: c.url, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: c.tokens[user]}
	cfg.Contexts[user+"@kubernetes"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: user}
	cfg.CurrentContext = user + "@kubernetes"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// buildImageBinary is the binary the image holds: buildBinary builds it as
// the Dockerfile does, with cgo off, so that it runs in a root directory
// without a libc (the distroless image has none).
func buildImageBinary(t *testing.T) string {
	t.Helper()
	return buildBinary(t)
}
