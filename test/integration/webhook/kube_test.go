package webhook_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/internal/webhook"
)

// kube is a real kube-apiserver (KUBE_APISERVER_BIN) with the ServiceCIDR
// controller of a real kube-controller-manager (KUBE_CONTROLLER_MANAGER_BIN)
// on an etcd of its own, both built by hack/lib/kube-apiserver-build.sh;
// hack/webhook-e2e.sh builds them and runs these tests.
type kube struct {
	client     kubernetes.Interface
	config     *rest.Config
	kubeconfig string // an admin kubeconfig's path
}

// startKube starts kube-apiserver with serviceRange, or skips the test
// without the binaries.
func startKube(t testing.TB, serviceRange string) kube {
	t.Helper()
	kasBin, kcmBin := os.Getenv("KUBE_APISERVER_BIN"), os.Getenv("KUBE_CONTROLLER_MANAGER_BIN")
	if kasBin == "" || kcmBin == "" {
		t.Skip("KUBE_APISERVER_BIN and KUBE_CONTROLLER_MANAGER_BIN are not set (hack/webhook-e2e.sh builds and sets them)")
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	tokens := write("tokens.csv", token+",admin,admin,system:masters\n")
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey := write("sa.key", string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})))
	saPub := write("sa.pub", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})))
	etcd := etcdtest.New(t)
	port := freePort(t)
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	run(t, dir, "kube-apiserver", kasBin, "--etcd-servers", etcd.Endpoints()[0], "--authorization-mode", "RBAC",
		"--token-auth-file", tokens, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--endpoint-reconciler-type", "none", "--secure-port", strconv.Itoa(port), "--cert-dir", filepath.Join(dir, "kas-certs"),
		"--service-cluster-ip-range", serviceRange, "--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey)
	cfg := &rest.Config{Host: host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 500, Burst: 1000}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("kube-apiserver not ready: %v (log in %s)", err, dir)
	}
	kubeconfig := write("admin.kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: kas, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: kas, context: {cluster: kas, user: admin}}]
current-context: kas
`, host, token))
	run(t, dir, "kube-controller-manager", kcmBin, "--kubeconfig", kubeconfig, "--controllers=service-cidr-controller",
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0")
	return kube{client: client, config: cfg, kubeconfig: kubeconfig}
}

// run starts a process until the test ends, its output in dir/<name>.log.
func run(t testing.TB, dir, name, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.WaitDelay = log, log, 10*time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { stop(); _ = cmd.Wait(); log.Close() })
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// front is one loopback TLS endpoint spreading kube-apiserver's calls over
// the webhook replicas, as their Service does; down makes it answer 503,
// as when every replica is gone.
type front struct {
	srv  *httptest.Server
	down atomic.Bool

	mu    sync.Mutex
	calls []time.Duration // how long each call through the front took; guarded by mu
}

// took returns the durations of the calls through the front so far.
func (f *front) took() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func startFront(t testing.TB, replicas ...replica) *front {
	t.Helper()
	var next atomic.Int64
	f := &front{}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		target, _ := url.Parse(replicas[int(next.Add(1))%len(replicas)].srv.URL)
		r.SetURL(target)
	}, Transport: replicas[0].srv.Client().Transport}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.down.Load() {
			http.Error(w, "no webhook replica", http.StatusServiceUnavailable)
			return
		}
		start := time.Now()
		proxy.ServeHTTP(w, r)
		f.mu.Lock()
		f.calls = append(f.calls, time.Since(start))
		f.mu.Unlock()
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// register makes kube-apiserver call f for Services and ServiceCIDRs, as
// deploy/webhook configures it, by URL.
func (f *front) register(t testing.TB, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	ignore, none := admissionregistrationv1.Ignore, admissionregistrationv1.SideEffectClassNone
	ifNeeded, timeout := admissionregistrationv1.IfNeededReinvocationPolicy, int32(5)
	rule := func(group, resource string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}}}}
	}
	endpoint := func(path string) admissionregistrationv1.WebhookClientConfig {
		u := f.srv.URL + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: ca}
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "allocator"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "services.allocator.github.io", ClientConfig: endpoint(webhook.ServicesPath),
			Rules: rule("", "services"), FailurePolicy: &ignore, SideEffects: &none, TimeoutSeconds: &timeout,
			ReinvocationPolicy: &ifNeeded, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "allocator"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "servicecidrs.allocator.github.io", ClientConfig: endpoint(webhook.ServiceCIDRsPath),
			Rules: rule("networking.k8s.io", "servicecidrs"), FailurePolicy: &ignore, SideEffects: &none, TimeoutSeconds: &timeout,
			AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startWebhookOn starts n replicas on k behind one front, registered;
// each option changes every replica's configuration.
func startWebhookOn(t testing.TB, k kube, n int, policy servicecidrs.Policy, options ...func(*webhook.Config)) (*front, []replica) {
	t.Helper()
	var replicas []replica
	for i := range n {
		cfg := webhook.Config{Client: k.client, Policy: policy, Namespace: "default", Identity: fmt.Sprintf("replica-%d", i)}
		for _, o := range options {
			o(&cfg)
		}
		replicas = append(replicas, startReplicaWith(t, cfg))
	}
	f := startFront(t, replicas...)
	f.register(t, k.client)
	return f, replicas
}
