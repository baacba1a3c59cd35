package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/allocator/allocator/internal/etcdtest"
)

// TestWebhookInstallOnKubeAPIServer installs deploy/webhook on a real
// kube-apiserver with RBAC (KUBE_APISERVER_BIN; hack/lib/kube-apiserver-build.sh
// builds one) and runs the Deployment's command, as two replicas, with the
// install's ServiceAccount and nothing more: the self-signed certificate
// is created once, both replicas serve it, and it verifies for the
// Service's name with the caBundle written into both webhook
// configurations; they write the ServiceCIDR conditions. Every variant's objects, kustomized and templated, pass
// a server-side dry run (the cert-manager and Prometheus Operator objects
// aside: no CRDs here), and the ServiceAccount may do nothing beyond its
// rules' names.
func TestWebhookInstallOnKubeAPIServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: starts kube-apiserver")
	}
	kasBin := os.Getenv("KUBE_APISERVER_BIN")
	if kasBin == "" {
		t.Skip("KUBE_APISERVER_BIN is not set (hack/lib/kube-apiserver-build.sh v1.37.2 builds one)")
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	helm := helmBinary(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	admin := startKubeAPIServer(t, kasBin, dir)
	kubectl := func(stdin []byte, args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", admin}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	applied := time.Now()
	if out, err := kubectl(nil, "apply", "-k", filepath.Join(deployDir, "webhook")); err != nil {
		t.Fatalf("kubectl apply -k deploy/webhook: %v\n%s", err, out)
	}
	sa := "system:serviceaccount:allocator-system:allocator-webhook"
	asSA := filepath.Join(dir, "webhook.kubeconfig")
	writeImpersonating(t, admin, asSA, sa)
	args := deploymentArgs(t)
	var addrs []string
	for i := range 2 {
		addrs = append(addrs, startWebhookReplica(t, bin, args, asSA, fmt.Sprintf("allocator-webhook-%d", i), dir))
	}

	secret, err := kubectl(nil, "-n", "allocator-system", "get", "secret", "allocator-webhook-tls", "-o", "jsonpath={.data.ca\\.crt}")
	if err != nil {
		t.Fatalf("the self-signed Secret: %v\n%s", err, secret)
	}
	for _, kind := range []string{"mutatingwebhookconfiguration", "validatingwebhookconfiguration"} {
		out, err := kubectl(nil, "get", kind, "allocator-webhook", "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}")
		if err != nil {
			t.Fatalf("%s: %v\n%s", kind, err, out)
		}
		if out != secret {
			t.Errorf("%s allocator-webhook: caBundle is not the Secret's ca.crt", kind)
		}
	}
	var leaves [][]byte
	for _, addr := range addrs {
		leaves = append(leaves, handshake(t, addr, secret))
	}
	if !bytes.Equal(leaves[0], leaves[1]) {
		t.Error("the two replicas serve different certificates")
	}
	t.Logf("from kubectl apply -k to both replicas ready (started one after the other, as processes: no image pull, no kubelet) "+
		"and the caBundle set: %s", time.Since(applied).Round(10*time.Millisecond))
	checkServiceAccountRights(t, admin, sa)

	for _, v := range installVariants {
		for _, r := range []struct {
			how  string
			data []byte
		}{
			{"kubectl kustomize", kubectlKustomize(t, filepath.Join(deployDir, v.kustomize))},
			{"helm template", helmTemplate(t, helm, v.helmArgs...)},
		} {
			if out, err := kubectl(withoutCRDObjects(t, r.data), "apply", "--dry-run=server", "-f", "-"); err != nil {
				t.Errorf("%s (%s): kubectl apply --dry-run=server: %v\n%s", r.how, v.name, err, out)
			}
		}
	}

	// The conditions the replicas write into servicecidrs/status as the
	// install's ServiceAccount (no kube-controller-manager here, so no
	// Ready beside them).
	if out, err := kubectl([]byte(`{"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": "extra"}, "spec": {"cidrs": ["10.97.0.0/24"]}}`),
		"create", "-f", "-"); err != nil {
		t.Fatalf("create a ServiceCIDR: %v\n%s", err, out)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		out, err := kubectl(nil, "get", "servicecidr", "extra", "-o", `jsonpath={.status.conditions[?(@.type=="allocator.github.io/CapacityIPv4")].status}`)
		return err == nil && out == "True", nil
	})
	if err != nil {
		t.Errorf("the replicas did not write the capacity condition of ServiceCIDR extra within a minute: %v", err)
	}
	// The finalizer and Ready are kube-controller-manager's, absent here.
	if out, err := kubectl(nil, "get", "servicecidr", "extra", "-o", `jsonpath={.metadata.finalizers}{.status.conditions[?(@.type=="Ready")]}`); err != nil || out != "" {
		t.Errorf("ServiceCIDR extra's finalizers and Ready: %q, %v; want none: the webhook writes only its conditions", out, err)
	}
}

// startKubeAPIServer starts kube-apiserver with RBAC on an etcd of its own
// and returns the path of an admin kubeconfig once it is ready.
func startKubeAPIServer(t *testing.T, bin, dir string) string {
	t.Helper()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "--etcd-servers", etcdtest.New(t).Endpoints()[0], "--authorization-mode", "RBAC",
		"--token-auth-file", write("tokens.csv", []byte(token+",admin,admin,system:masters\n")),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--endpoint-reconciler-type", "none",
		"--secure-port", strconv.Itoa(port), "--cert-dir", filepath.Join(dir, "kas-certs"),
		"--service-cluster-ip-range", "10.96.0.0/16", "--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
		"--service-account-signing-key-file", write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})))
	runUntilTestEnds(t, cmd, filepath.Join(dir, "kube-apiserver.log"))
	kubeconfig := write("admin.kubeconfig", fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: kas, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: kas, context: {cluster: kas, user: admin}}]
current-context: kas
`, port, token))
	err = wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		// The default ServiceCIDR, which kube-apiserver creates, is what
		// the webhook reads first.
		return exec.Command("kubectl", "--kubeconfig", kubeconfig, "get", "servicecidr", "kubernetes").Run() == nil, nil
	})
	if err != nil {
		t.Fatalf("kube-apiserver not ready: %v\n%s", err, tailFile(filepath.Join(dir, "kube-apiserver.log"), 20))
	}
	return kubeconfig
}

// runUntilTestEnds starts cmd with its output in logPath and stops it when
// the test ends.
func runUntilTestEnds(t *testing.T, cmd *exec.Cmd, logPath string) {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr, cmd.WaitDelay = log, log, 10*time.Second
	if err := startDyingWithTest(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
}

func tailFile(path string, lines int) string {
	data, _ := os.ReadFile(path)
	return tail(string(data), lines)
}

// withoutCRDObjects drops the objects of CRDs the test cluster lacks.
func withoutCRDObjects(t *testing.T, data []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	for _, obj := range parseObjects(t, data) {
		group, _, _ := strings.Cut(obj["apiVersion"].(string), "/")
		if group == "cert-manager.io" || group == "monitoring.coreos.com" {
			continue
		}
		doc, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	return out.Bytes()
}

// writeImpersonating writes a kubeconfig that is admin's, acting as user:
// every request is authorized as user alone.
func writeImpersonating(t *testing.T, admin, path, user string) {
	t.Helper()
	data, err := os.ReadFile(admin)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "user: {token:", fmt.Sprintf("user: {as: %q, token:", user), 1)
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// deploymentArgs are the webhook container's arguments in deploy/webhook.
func deploymentArgs(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, "webhook", "base", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Spec.Containers[0].Args
}

// startWebhookReplica runs the container's command on loopback, as the
// pod named identity would, and returns its address once /readyz answers
// (as the kubelet probes it: HTTPS, not verified).
func startWebhookReplica(t *testing.T, bin string, args []string, kubeconfig, identity, dir string) string {
	t.Helper()
	port := freePort(t)
	args = replaceFlag(args, "--bind-address", func(string) string { return "127.0.0.1" })
	args = replaceFlag(args, "--secure-port", func(string) string { return strconv.Itoa(port) })
	args = append(args, "--kubeconfig", kubeconfig, "--lease-namespace", "allocator-system", "--identity", identity)
	logPath := filepath.Join(dir, identity+".log")
	started := time.Now()
	runUntilTestEnds(t, exec.Command(bin, args...), logPath)
	ports := map[int]int{9443: port}
	ready := &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(9443), Host: "127.0.0.1", Scheme: corev1.URISchemeHTTPS}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return probe(ctx, ready, ports) == nil, nil
	})
	if err != nil {
		t.Fatalf("%s not ready: %v\n%s", identity, err, tailFile(logPath, 20))
	}
	t.Logf("%s ready %s after its start", identity, time.Since(started).Round(10*time.Millisecond))
	t.Cleanup(func() {
		if log := tailFile(logPath, 200); strings.Contains(strings.ToLower(log), "forbidden") {
			t.Errorf("%s was refused a request:\n%s", identity, log)
		}
	})
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// handshake connects to addr as kube-apiserver calls the Service, trusting
// only the base64 caBundle, and returns the certificate served.
func handshake(t *testing.T, addr, caBundle string) []byte {
	t.Helper()
	pemData, err := base64.StdEncoding.DecodeString(caBundle)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemData) {
		t.Fatal("the caBundle holds no certificate")
	}
	var leaf []byte
	for _, name := range []string{"allocator-webhook.allocator-system.svc", "allocator-webhook.allocator-system.svc.cluster.local"} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("TLS to %s as %s with the caBundle: %v", addr, name, err)
			continue
		}
		leaf = conn.ConnectionState().PeerCertificates[0].Raw
		conn.Close()
	}
	return leaf
}

// checkServiceAccountRights asks kube-apiserver what user may do.
func checkServiceAccountRights(t *testing.T, admin, user string) {
	t.Helper()
	for _, c := range []struct {
		want bool
		args []string
	}{
		{true, []string{"get", "servicecidrs.networking.k8s.io/kubernetes"}},
		{true, []string{"watch", "ipaddresses.networking.k8s.io"}},
		{true, []string{"list", "namespaces"}},
		{true, []string{"create", "leases.coordination.k8s.io", "-n", "allocator-system"}},
		{true, []string{"create", "secrets", "-n", "allocator-system"}},
		{true, []string{"update", "secrets/allocator-webhook-tls", "-n", "allocator-system"}},
		{true, []string{"update", "mutatingwebhookconfigurations/allocator-webhook"}},
		{false, []string{"get", "secrets/other", "-n", "allocator-system"}},
		{false, []string{"list", "secrets", "-n", "allocator-system"}},
		{false, []string{"create", "secrets", "-n", "default"}},
		{false, []string{"update", "mutatingwebhookconfigurations/other"}},
		{false, []string{"update", "validatingwebhookconfigurations/other"}},
		{false, []string{"create", "services", "-n", "default"}},
		{false, []string{"create", "ipaddresses.networking.k8s.io"}},
		{true, []string{"update", "servicecidrs.networking.k8s.io/kubernetes", "--subresource", "status"}},
		{false, []string{"update", "servicecidrs.networking.k8s.io/kubernetes"}},
		{false, []string{"patch", "servicecidrs.networking.k8s.io/kubernetes", "--subresource", "status"}},
		{false, []string{"create", "leases.coordination.k8s.io", "-n", "kube-system"}},
	} {
		out, _ := exec.Command("kubectl", append([]string{"--kubeconfig", admin, "auth", "can-i", "--as", user}, c.args...)...).Output()
		if got := strings.TrimSpace(string(out)) == "yes"; got != c.want {
			t.Errorf("%s may %s: %v, want %v", user, strings.Join(c.args, " "), got, c.want)
		}
	}
}
