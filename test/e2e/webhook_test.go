package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/allocator/allocator/internal/etcdtest"
)

// TestWebhookBinary runs `allocator webhook` as a process in front of our
// server (which serves IPAddresses and ServiceCIDRs as kube-apiserver
// does): it becomes ready, answers a Service's AdmissionReview over HTTPS
// with a patch picking an address of the range, counts it in /metrics, and
// serves a rotated certificate without a restart.
func TestWebhookBinary(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	kubeconfig, _ := startServe(t, bin, etcdtest.New(t), "--allocator", "ipaddress", "--service-cluster-ip-range", "10.96.0.0/16")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	pool := x509.NewCertPool()
	writeServingCert(t, certFile, keyFile, pool, 1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	logFile, err := os.Create(filepath.Join(dir, "webhook.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "webhook", "--kubeconfig", kubeconfig, "--bind-address", "127.0.0.1", "--secure-port", port,
		"--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--lease-namespace", "")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("webhook log:\n%s", tail(string(log), 40))
		}
	})
	base := "https://127.0.0.1:" + port
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	waitUntil(t, 60*time.Second, "the webhook ready", func() bool {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	raw, _ := json.Marshal(svc)
	review, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "1", Operation: admissionv1.Create, Namespace: "default", Object: runtime.RawExtension{Raw: raw}}})
	resp, err := client.Post(base+"/mutate-services", "application/json", bytes.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || out.Response == nil || !out.Response.Allowed {
		t.Fatalf("the Service's review: %+v, %v", out.Response, err)
	}
	var ops []struct {
		Path  string
		Value any
	}
	if err := json.Unmarshal(out.Response.Patch, &ops); err != nil || len(ops) == 0 || ops[0].Path != "/spec/clusterIP" {
		t.Fatalf("patch %s: %v", out.Response.Patch, err)
	}
	if ip, err := netip.ParseAddr(ops[0].Value.(string)); err != nil || !netip.MustParsePrefix("10.96.0.0/16").Contains(ip) {
		t.Errorf("picked %v, want an address of 10.96.0.0/16", ops[0].Value)
	}
	metrics := get(t, client, base+"/metrics")
	if !strings.Contains(metrics, `allocator_webhook_admission_requests_total{resource="services",result="patched"} 1`) {
		t.Errorf("/metrics does not count the patched review:\n%s", metrics)
	}

	// A rotated certificate is served without a restart.
	rotated := x509.NewCertPool()
	writeServingCert(t, certFile, keyFile, rotated, 2)
	rotatedClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: rotated}}}
	waitUntil(t, 30*time.Second, "the rotated certificate served", func() bool {
		resp, err := rotatedClient.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
}

// writeServingCert writes a self-signed certificate for 127.0.0.1 (serial
// n) and its key, and adds it to pool.
func writeServingCert(t *testing.T, certFile, keyFile string, pool *x509.CertPool, n int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "allocator-webhook"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool.AddCert(cert)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Key first, then the certificate: the pair on disk is complete once
	// the certificate is written.
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v", what, limit)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
