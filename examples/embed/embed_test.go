package main

import (
	"context"
	"go/build"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

const (
	startTimeout   = 60 * time.Second
	requestTimeout = 30 * time.Second
)

var (
	v4Range = netip.MustParsePrefix("10.100.0.0/24")
	v6Range = netip.MustParsePrefix("fd00:100::/120")
)

// TestEmbeddedServiceAllocation runs the example server in-process against a
// real etcd and drives it with client-go: what the README promises an
// embedding server gets from pkg/servicealloc.
func TestEmbeddedServiceAllocation(t *testing.T) {
	etcd := etcdtest.New(t)
	opts := options{
		BindAddress:  "127.0.0.1",
		Port:         0,
		EtcdServers:  etcd.Endpoints(),
		EtcdPrefix:   "/embed-test",
		ServiceCIDRs: []netip.Prefix{v4Range, v6Range},
		Token:        "embed-test-token",
	}
	client := startServer(t, opts)
	svcs := client.CoreV1().Services("default")
	bits := bitmapOf(t, etcd, etcdlayout.Layout{Prefix: opts.EtcdPrefix}.PrimaryServiceIPRange(), v4Range)

	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()

	// A Service gets a cluster IP from the primary range, recorded in the
	// RangeAllocation on etcd.
	first, err := svcs.Create(ctx, service("first", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create first: %v", err)
	}
	ip := clusterIP(t, first)
	if !v4Range.Contains(ip) {
		t.Fatalf("first got %s, want an address in %s", ip, v4Range)
	}
	if !bits.has(t, ip) {
		t.Errorf("%s is not marked in the etcd bitmap after create", ip)
	}

	// A second Service asking for the same address is refused.
	_, err = svcs.Create(ctx, service("second", ip.String()), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "provided IP is already allocated") {
		t.Fatalf("create second with %s: got %v, want 422 Invalid \"provided IP is already allocated\"", ip, err)
	}

	// An update keeps the address.
	first.Labels = map[string]string{"updated": "true"}
	updated, err := svcs.Update(ctx, first, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update first: %v", err)
	}
	if got := clusterIP(t, updated); got != ip {
		t.Errorf("update changed the cluster IP from %s to %s", ip, got)
	}

	// A delete releases it, so the second Service can take it now.
	if err := svcs.Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete first: %v", err)
	}
	if bits.has(t, ip) {
		t.Errorf("%s is still marked in the etcd bitmap after delete", ip)
	}
	second, err := svcs.Create(ctx, service("second", ip.String()), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create second with the released %s: %v", ip, err)
	}
	if got := clusterIP(t, second); got != ip {
		t.Errorf("second got %s, want %s", got, ip)
	}

	// The second allocator serves the other family.
	dual := service("dual", "")
	prefer := corev1.IPFamilyPolicyPreferDualStack
	dual.Spec.IPFamilyPolicy = &prefer
	dual, err = svcs.Create(ctx, dual, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create dual: %v", err)
	}
	if n := len(dual.Spec.ClusterIPs); n != 2 {
		t.Fatalf("dual got cluster IPs %v, want one per family", dual.Spec.ClusterIPs)
	}
	if v6, err := netip.ParseAddr(dual.Spec.ClusterIPs[1]); err != nil || !v6Range.Contains(v6) {
		t.Errorf("dual's secondary cluster IP %q is not in %s", dual.Spec.ClusterIPs[1], v6Range)
	}
}

// TestUsesOnlyThePublicAPI keeps the example honest: it may use pkg/... but
// none of internal/ (our server's wiring, internal/apiserver and
// internal/registry, among them), which another module could not import.
func TestUsesOnlyThePublicAPI(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/allocator/allocator/"
	for _, imp := range pkg.Imports {
		for _, banned := range []string{module + "internal"} {
			if imp == banned || strings.HasPrefix(imp, banned+"/") {
				t.Errorf("the example imports %s: an embedding server cannot rely on it", imp)
			}
		}
	}
}

// startServer starts the example server on a free loopback port, waits until
// it is ready and returns a client with full rights. The server stops, and
// its stop is awaited, when the test ends.
func startServer(t *testing.T, opts options) kubernetes.Interface {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	startCtx, startCancel := context.WithTimeout(ctx, startTimeout)
	defer startCancel()
	srv, err := newServer(startCtx, opts)
	if err != nil {
		cancel()
		t.Fatalf("new server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("server: %v", err)
			}
		case <-time.After(startTimeout):
			t.Errorf("server did not stop within %v", startTimeout)
		}
	})

	client, err := kubernetes.NewForConfig(srv.clientConfig())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	// Poll /readyz: bounded in time, and in count by the interval.
	var last error
	for deadline := time.Now().Add(startTimeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var status int
		last = client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(startCtx).StatusCode(&status).Error()
		if last == nil && status == http.StatusOK {
			return client
		}
		select {
		case err := <-done:
			t.Fatalf("server stopped while starting: %v", err)
		default:
		}
	}
	t.Fatalf("server not ready within %v: %v", startTimeout, last)
	return nil
}

// etcdBitmap reads the RangeAllocation the server's allocator writes.
type etcdBitmap struct{ a *clusterip.EtcdAllocator }

func bitmapOf(t *testing.T, etcd *etcdtest.Etcd, key string, prefix netip.Prefix) etcdBitmap {
	t.Helper()
	rng, err := subrange.New(prefix, model.Bitmap)
	if err != nil {
		t.Fatal(err)
	}
	a, err := clusterip.NewEtcdAllocator(etcd.Client(), key, rng, bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return etcdBitmap{a}
}

func (b etcdBitmap) has(t *testing.T, ip netip.Addr) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	has, err := b.a.Has(ctx, ip)
	if err != nil {
		t.Fatalf("read the etcd bitmap: %v", err)
	}
	return has
}

func service(name, clusterIP string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterIP,
			Ports:     []corev1.ServicePort{{Port: 80}},
		},
	}
}

func clusterIP(t *testing.T, svc *corev1.Service) netip.Addr {
	t.Helper()
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		t.Fatalf("%s: cluster IP %q: %v", svc.Name, svc.Spec.ClusterIP, err)
	}
	return ip
}
