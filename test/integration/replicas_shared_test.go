package integration

import (
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testpki"
	"github.com/allocator/allocator/internal/testserver"
)

// TestReplicasShareCredentials: replicas behind one endpoint, as docs/operations.md
// sets them up: one etcd, one serving certificate (--tls-cert-file) and one
// token file (--token-auth-file). A single client configuration (the CA,
// the token) works against each of them, so a load balancer may send a
// client to either, and what one replica stored the other serves.
func TestReplicasShareCredentials(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ca := testpki.NewCA(t, "serving CA")
	serving := ca.Server(t, "allocator")
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("shared-token,ops,uid-ops,\"system:masters\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.New(t)
	replicas := make([]*testserver.Server, 2)
	for i := range replicas {
		replicas[i] = testserver.Start(t, testserver.Options{Etcd: etcd, Flags: func(o *apiserver.Options) {
			o.Security.TLSCertFile, o.Security.TLSPrivateKeyFile = serving.CertFile, serving.KeyFile
			o.Security.TokenAuthFile = tokens
		}})
	}
	clientOf := func(srv *testserver.Server) kubernetes.Interface {
		cfg := &rest.Config{Host: srv.RESTConfig.Host, BearerToken: "shared-token",
			TLSClientConfig: rest.TLSClientConfig{CAFile: ca.CertFile}}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	created, err := clientOf(replicas[0]).CoreV1().Services("default").Create(ctx, clusterIPService("shared"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create through the first replica: %v", err)
	}
	got, err := clientOf(replicas[1]).CoreV1().Services("default").Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read through the second replica with the same credentials: %v", err)
	}
	if got.Spec.ClusterIP != created.Spec.ClusterIP {
		t.Fatalf("second replica serves ClusterIP %s, first stored %s", got.Spec.ClusterIP, created.Spec.ClusterIP)
	}
}
