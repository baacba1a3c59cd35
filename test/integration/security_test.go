package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/embedetcd"
	"github.com/allocator/allocator/internal/testpki"
	"github.com/allocator/allocator/internal/testserver"
)

// clientAs returns a clientset for srv that authenticates with the given
// client certificate or bearer token instead of the admin token.
func clientAs(t *testing.T, base *rest.Config, cert testpki.Pair, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(base)
	cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = cert.CertFile, cert.KeyFile
	cfg.BearerToken = token
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func clusterIPService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
}

// TestClientCertificatesAndTokenFile: with --client-ca-file, a client
// certificate signed by that CA is a user; one of another CA is 401, as is
// a request without credentials. With --token-auth-file, its tokens are
// users and an unknown token is 401. The admin kubeconfig keeps working.
func TestClientCertificatesAndTokenFile(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	trusted := testpki.NewCA(t, "trusted client CA")
	stranger := testpki.NewCA(t, "other CA")
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("s3cret-token,dave,uid-dave,\"devs,ops\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.Options{Flags: func(o *apiserver.Options) {
		o.Security.Authentication.ClientCert.ClientCA = trusted.CertFile
		o.Security.TokenAuthFile = tokens
	}})

	for _, tt := range []struct {
		name   string
		client kubernetes.Interface
		want   string // "" for success, else "401"
	}{
		{"admin token", srv.Client, ""},
		{"certificate of the client CA", clientAs(t, srv.RESTConfig, trusted.Client(t, "carol", "devs"), ""), ""},
		{"certificate of another CA", clientAs(t, srv.RESTConfig, stranger.Client(t, "mallory", "system:masters"), ""), "401"},
		{"token from the token file", clientAs(t, srv.RESTConfig, testpki.Pair{}, "s3cret-token"), ""},
		{"unknown token", clientAs(t, srv.RESTConfig, testpki.Pair{}, "guessed-token"), "401"},
		{"no credentials", clientAs(t, srv.RESTConfig, testpki.Pair{}, ""), "401"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.client.CoreV1().Services("default").List(ctx, metav1.ListOptions{})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("list services: %v", err)
			case tt.want == "401" && !apierrors.IsUnauthorized(err):
				t.Fatalf("want 401, got %v", err)
			}
		})
	}
	// The identity is the certificate's: a Service created with it is
	// attributed in managedFields to the client, and anonymous probes
	// still answer.
	carol := clientAs(t, srv.RESTConfig, trusted.Client(t, "carol", "devs"), "")
	if _, err := carol.CoreV1().Services("default").Create(ctx, clusterIPService("by-cert"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create as certificate user: %v", err)
	}
	if body, err := clientAs(t, srv.RESTConfig, testpki.Pair{}, "").Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		t.Fatalf("anonymous /readyz: %v %s", err, body)
	}
}

// TestServingCertificateFromFiles: --tls-cert-file/--tls-private-key-file
// replace the self-signed certificate; a client trusting only the issuing
// CA connects, and the admin kubeconfig trusts the served bundle.
func TestServingCertificateFromFiles(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	ca := testpki.NewCA(t, "serving CA")
	pair := ca.Server(t, "allocator")
	srv := testserver.Start(t, testserver.Options{Flags: func(o *apiserver.Options) {
		o.Security.TLSCertFile, o.Security.TLSPrivateKeyFile = pair.CertFile, pair.KeyFile
	}})
	if _, err := os.Stat(filepath.Join(srv.DataDir, "certs", "apiserver.crt")); err == nil {
		t.Errorf("a self-signed certificate was generated although --tls-cert-file was given")
	}
	cfg := rest.CopyConfig(srv.RESTConfig)
	cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, ca.CertFile
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		t.Fatalf("client trusting the CA: %v", err)
	}
	other := testpki.NewCA(t, "unrelated CA")
	cfg.TLSClientConfig.CAFile = other.CertFile
	client, _ = kubernetes.NewForConfig(cfg)
	if _, err := client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client trusting another CA: want a certificate error, got %v", err)
	}
}

// TestAuditLogRecordsServiceCreate: with --audit-policy-file and
// --audit-log-path, creating a Service writes a JSON audit event naming
// the user, the verb and the object.
func TestAuditLogRecordsServiceCreate(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create"]
  resources:
  - group: ""
    resources: ["services"]
- level: None
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	srv := testserver.Start(t, testserver.Options{Flags: func(o *apiserver.Options) {
		o.Security.Audit.PolicyFile = policy
		o.Security.Audit.LogOptions.Path = logPath
	}})
	if _, err := srv.Client.CoreV1().Services("default").Create(ctx, clusterIPService("audited"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	type event struct {
		Verb  string `json:"verb"`
		Stage string `json:"stage"`
		User  struct {
			Username string `json:"username"`
		} `json:"user"`
		ObjectRef struct {
			Resource, Namespace, Name string
		} `json:"objectRef"`
		ResponseStatus struct {
			Code int `json:"code"`
		} `json:"responseStatus"`
	}
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		f, err := os.Open(logPath)
		if err != nil {
			return false, nil
		}
		defer f.Close()
		seen = seen[:0]
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			seen = append(seen, sc.Text())
			var ev event
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			if ev.Verb == "create" && ev.Stage == "ResponseComplete" && ev.ObjectRef.Resource == "services" &&
				ev.ObjectRef.Namespace == "default" && ev.ObjectRef.Name == "audited" && ev.User.Username == "admin" &&
				ev.ResponseStatus.Code == 201 {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no audit event for the Service create in %s: %v; lines: %q", logPath, err, seen)
	}
	for _, line := range seen {
		if strings.Contains(line, `"resource":"namespaces"`) {
			t.Errorf("the policy's level None was not applied: %s", line)
		}
	}
}

// TestEtcdWithClientCertificates: an etcd that requires TLS client
// certificates (the embedded etcd with its PKI) serves the server given
// --etcd-cafile/--etcd-certfile/--etcd-keyfile; a certificate from another
// CA is refused at start with one line naming the endpoint.
func TestEtcdWithClientCertificates(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	pki, err := embedetcd.EnsurePKI(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	etcd, err := embedetcd.Start(startCtx, embedetcd.Config{DataDir: filepath.Join(t.TempDir(), "etcd"), PKI: &pki, UnsafeNoFsync: true})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	if !strings.HasPrefix(etcd.Endpoints()[0], "https://") {
		t.Fatalf("etcd is not serving TLS: %v", etcd.Endpoints())
	}

	srv := testserver.Start(t, testserver.Options{Flags: func(o *apiserver.Options) {
		o.EtcdServers = etcd.Endpoints()
		o.EtcdCAFile, o.EtcdCertFile, o.EtcdKeyFile = pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile
	}})
	created, err := srv.Client.CoreV1().Services("default").Create(ctx, clusterIPService("over-tls"), metav1.CreateOptions{})
	if err != nil || created.Spec.ClusterIP == "" {
		t.Fatalf("create over TLS etcd: %v %v", created, err)
	}
	// The Service is in the TLS etcd, read with the client certificate.
	tlsCfg, err := pki.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	direct, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	got, err := direct.Get(ctx, "/registry/services/specs/default/over-tls")
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("the Service is not in the TLS etcd: %v %v", got, err)
	}
	srv.Stop()

	stranger := testpki.NewCA(t, "not etcd's CA")
	wrong := stranger.Client(t, "intruder")
	o := apiserver.NewOptions()
	o.SecurePort, o.DataDir = 0, filepath.Join(t.TempDir(), "data")
	o.EtcdServers = etcd.Endpoints()
	o.EtcdCAFile, o.EtcdCertFile, o.EtcdKeyFile = pki.CAFile, wrong.CertFile, wrong.KeyFile
	cfg, err := o.Config(nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	serverCtx, stop := context.WithCancel(ctx)
	defer stop()
	_, err = cfg.Complete().New(serverCtx)
	if err == nil {
		t.Fatal("server started with a client certificate etcd does not accept")
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, etcd.Endpoints()[0]) || !strings.Contains(msg, "--etcd-certfile") {
		t.Fatalf("want one line naming the endpoint and the TLS flags, got %q", msg)
	}
}
