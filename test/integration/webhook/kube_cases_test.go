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
// guardrails and dry run. TestWebhookKubeConflicts fills a scope from 32
// clients; TestWebhookKubeStoppedMidLoad stops the webhook under load.
func TestWebhookKube(t *testing.T) {
	k := startKube(t, "10.96.0.0/16")
	ctx := context.Background()
	policy := servicecidrs.Policy{Guardrails: servicecidrs.Guardrails{Forbidden: []netip.Prefix{netip.MustParsePrefix("10.250.0.0/16")}}}
	_, replicas := startWebhookOn(t, k, 2, policy)
	mustCreateCIDR(t, k.client, "team-a", "10.210.0.0/20", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"})
	mustCreateCIDR(t, k.client, "old", "10.200.0.0/24", map[string]string{lifecycle.DrainingAnnotation: "true"})
	mustCreateCIDR(t, k.client, "manual", "10.201.0.0/24", map[string]string{lifecycle.ManualOnlyAnnotation: "true"})
	for _, r := range replicas {
		for _, p := range []string{"10.210.0.0/20", "10.200.0.0/24", "10.201.0.0/24"} {
			waitServed(t, r, p)
		}
		waitUntilT(t, 30*time.Second, "the replicas count each other", func() bool { n := r.w.Stripe().Of; return n == len(replicas) })
	}
	mustCreateTeamA(t, k.client)
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
}

// fillCounts is what fillScope saw, by the fill of the scope when each
// create was answered: below 10%, from 10% to 90%, above 90% of room.
type fillCounts struct {
	created, conflicts [3]int64
}

func (c *fillCounts) bucket(created, room int64) int {
	switch {
	case created*10 < room:
		return 0
	case created*10 < room*9:
		return 1
	}
	return 2
}

// perThousand is the conflicts per 1,000 creates answered in bucket b.
func (c *fillCounts) perThousand(b int) float64 {
	n := c.created[b] + c.conflicts[b]
	if n == 0 {
		return 0
	}
	return float64(c.conflicts[b]) * 1000 / float64(n)
}

// fillScope creates Services in namespace from clients goroutines until
// the scope answers full, and counts creates and conflicts (refused as
// already allocated) by the fill of the scope, of room addresses.
func fillScope(t *testing.T, k kube, namespace string, clients int, room int64) *fillCounts {
	t.Helper()
	var next, nCreated atomic.Int64
	var full atomic.Bool
	var mu sync.Mutex
	counts := &fillCounts{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Minute)
	for range clients {
		wg.Go(func() {
			for !full.Load() && time.Now().Before(deadline) {
				name := fmt.Sprintf("fill-%d", next.Add(1))
				_, err := k.client.CoreV1().Services(namespace).Create(context.Background(), service(namespace, name), metav1.CreateOptions{})
				b := counts.bucket(nCreated.Load(), room)
				switch {
				case err == nil:
					nCreated.Add(1)
					mu.Lock()
					counts.created[b]++
					mu.Unlock()
				case strings.Contains(err.Error(), "provided IP is already allocated"):
					mu.Lock()
					counts.conflicts[b]++
					mu.Unlock()
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
		t.Errorf("the scope was not refused as full within 3 minutes (%d created)", nCreated.Load())
	}
	return counts
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
