package webhook_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestWebhookKube runs the webhook's rules through a real kube-apiserver
// and kube-controller-manager, the webhook registered by URL on loopback
// TLS in front of two replicas: scoped placement, draining, manual-only,
// guardrails, dry run, 32 clients filling a scope without fallback until
// it refuses (conflicts counted), and the webhook down (failurePolicy
// Ignore: kube-apiserver places the Service, and the repair reports it).
func TestWebhookKube(t *testing.T) {
	k := startKube(t, "10.96.0.0/16")
	ctx := context.Background()
	policy := servicecidrs.Policy{Guardrails: servicecidrs.Guardrails{Forbidden: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}}}
	f, replicas := startWebhookOn(t, k, 2, policy)
	mustCreateCIDR(t, k.client, "team-a", "10.210.0.0/20", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"})
	mustCreateCIDR(t, k.client, "old", "10.200.0.0/24", map[string]string{lifecycle.DrainingAnnotation: "true"})
	mustCreateCIDR(t, k.client, "manual", "10.201.0.0/24", map[string]string{lifecycle.ManualOnlyAnnotation: "true"})
	for _, r := range replicas {
		for _, p := range []string{"10.210.0.0/20", "10.200.0.0/24", "10.201.0.0/24"} {
			waitServed(t, r, p)
		}
		waitUntilT(t, 30*time.Second, "the replicas count each other", func() bool { n := r.w.Stripe().Of; return n == len(replicas) })
	}
	if _, err := k.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "a", Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(svc *corev1.Service, opts metav1.CreateOptions) (*corev1.Service, error) {
		return k.client.CoreV1().Services(svc.Namespace).Create(ctx, svc, opts)
	}
	static := func(namespace, name, ip string) *corev1.Service {
		s := service(namespace, name)
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
		return s
	}

	if got, err := create(service("a", "scoped"), metav1.CreateOptions{}); err != nil || !inPrefix(t, got.Spec.ClusterIP, "10.210.0.0/20") {
		t.Errorf("a Service of a namespace the scope selects: %v, %v; want an address of 10.210.0.0/24", got.Spec.ClusterIP, err)
	}
	for i := range 20 {
		got, err := create(service("default", fmt.Sprintf("plain-%d", i)), metav1.CreateOptions{})
		if err != nil || !inPrefix(t, got.Spec.ClusterIP, "10.96.0.0/16") {
			t.Fatalf("an unscoped Service: %v, %v; want an address of the default range, never a scoped, draining or manual-only one", got.Spec.ClusterIP, err)
		}
	}
	if _, err := create(static("default", "in-draining", "10.200.0.5"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "draining") {
		t.Errorf("a requested address in a draining range: %v, want refused naming it draining", err)
	}
	if got, err := create(static("default", "in-manual", "10.201.0.5"), metav1.CreateOptions{}); err != nil || got.Spec.ClusterIP != "10.201.0.5" {
		t.Errorf("a requested address in a manual-only range: %v, %v; want it stored", got, err)
	}
	_, err := k.client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.250.1.0/24"}}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "10.250.0.0/16") {
		t.Errorf("a ServiceCIDR in a forbidden prefix: %v, want refused naming it", err)
	}
	// kube-apiserver's dry run checks a requested address against one of
	// its ServiceCIDRs only: the webhook lets dry runs through for it to
	// pick, with a warning naming the address the create would get.
	for _, ns := range []string{"default", "a"} {
		if _, err := create(service(ns, "dry"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("a dry run in namespace %s: %v", ns, err)
		}
	}

	withRoom, conflicts, created := fillScope(t, k, "a", 32, 4094*9/10)
	t.Logf("32 clients filled the scope 10.210.0.0/20: %d created, %d refused as already allocated (%d of them while it was under 90%% full)",
		created, conflicts, withRoom)
	if withRoom*1000 > created {
		t.Errorf("%d of %d creates refused as already allocated while the scope had room: want fewer than 1 in 1,000", withRoom, created)
	}

	// The webhook down: kube-apiserver places the Service by its own rules
	// (failurePolicy Ignore), and the repair reports where.
	f.down.Store(true)
	if err := k.client.CoreV1().Services("a").Delete(ctx, "scoped", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	placed, err := create(service("default", "while-down"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a create while the webhook is down: %v, want kube-apiserver to place it", err)
	}
	f.down.Store(false)
	t.Logf("while the webhook was down kube-apiserver placed default/while-down at %s", placed.Spec.ClusterIP)
	if inPrefix(t, placed.Spec.ClusterIP, "10.210.0.0/20") {
		rep := repairReport(t, k)
		found := false
		for _, p := range rep.Problems {
			found = found || (p.Type == report.TypeOutOfScope && p.Service == "default/while-down")
		}
		if !found {
			t.Errorf("kube-apiserver placed default/while-down at %s, in a scope it is not in, and the repair does not report it: %+v", placed.Spec.ClusterIP, rep.Problems)
		}
	}
}

// fillScope creates Services in namespace until the scope answers full,
// from clients goroutines; it returns the creates refused as already
// allocated while fewer than room had been created, all of them, and the
// Services created.
func fillScope(t *testing.T, k kube, namespace string, clients int, room int64) (withRoom, conflicts, created int64) {
	t.Helper()
	var next, nConflicts, nCreated, nWithRoom atomic.Int64
	var full atomic.Bool
	var wg sync.WaitGroup
	deadline := time.Now().Add(2 * time.Minute)
	for range clients {
		wg.Go(func() {
			for !full.Load() && time.Now().Before(deadline) {
				name := fmt.Sprintf("fill-%d", next.Add(1))
				_, err := k.client.CoreV1().Services(namespace).Create(context.Background(), service(namespace, name), metav1.CreateOptions{})
				switch {
				case err == nil:
					nCreated.Add(1)
				case strings.Contains(err.Error(), "provided IP is already allocated"):
					nConflicts.Add(1)
					if nCreated.Load() < room {
						nWithRoom.Add(1)
					}
				case strings.Contains(err.Error(), "range is full"):
					full.Store(true)
				default:
					t.Errorf("create %s: %v", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if !full.Load() {
		t.Errorf("the scope was not refused as full within 2 minutes (%d created)", nCreated.Load())
	}
	return nWithRoom.Load(), nConflicts.Load(), nCreated.Load()
}

// waitUntilT waits for cond, failing the test after limit with what and
// the details last seen.
func waitUntilT(t *testing.T, limit time.Duration, what string, cond func() bool, details ...func() string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			var seen []string
			for _, d := range details {
				seen = append(seen, d())
			}
			t.Fatalf("%s: not within %v %s", what, limit, strings.Join(seen, "; "))
		}
	}
}

// repairReport is a dry-run IPAddress repair pass through kube-apiserver.
func repairReport(t *testing.T, k kube) *report.Report {
	t.Helper()
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: k.client, DryRun: true}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
