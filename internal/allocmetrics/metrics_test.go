package allocmetrics

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	registry := metrics.NewKubeRegistry()
	m := New()
	m.Register(registry)
	inner, err := clusterip.NewAllocator(subrange.MustNew(netip.MustParsePrefix("10.0.0.0/28"), model.Bitmap))
	if err != nil {
		t.Fatal(err)
	}
	a := m.Wrap(inner)

	// Present from the start, before any allocation.
	if err := testutil.GatherAndCompare(registry, strings.NewReader(`
# HELP kube_apiserver_clusterip_allocator_allocated_ips [ALPHA] Gauge measuring the number of allocated IPs for Services
# TYPE kube_apiserver_clusterip_allocator_allocated_ips gauge
kube_apiserver_clusterip_allocator_allocated_ips{cidr="10.0.0.0/28"} 0
# HELP kube_apiserver_clusterip_allocator_available_ips [ALPHA] Gauge measuring the number of available IPs for Services
# TYPE kube_apiserver_clusterip_allocator_available_ips gauge
kube_apiserver_clusterip_allocator_available_ips{cidr="10.0.0.0/28"} 14
`), "kube_apiserver_clusterip_allocator_allocated_ips", "kube_apiserver_clusterip_allocator_available_ips"); err != nil {
		t.Fatal(err)
	}

	owner := allocation.Owner{Namespace: "default", Name: "a"}
	picked, err := a.AllocateNext(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	// A static address the dynamic pick did not take (a /28 is one band:
	// the pick may be any address, 10.0.0.5 once in 14 runs).
	static := netip.MustParseAddr("10.0.0.5")
	if picked == static {
		static = static.Next()
	}
	if err := a.Allocate(ctx, static, owner); err != nil {
		t.Fatal(err)
	}
	_ = a.Allocate(ctx, netip.MustParseAddr("10.9.0.5"), owner) // out of range: an error
	if _, err := a.DryRun().AllocateNext(ctx, owner); err != nil {
		t.Fatal(err)
	}
	used := inner.Used()
	want := `
# HELP kube_apiserver_clusterip_allocator_allocation_errors_total [ALPHA] Number of errors trying to allocate Cluster IPs
# TYPE kube_apiserver_clusterip_allocator_allocation_errors_total counter
kube_apiserver_clusterip_allocator_allocation_errors_total{cidr="10.0.0.0/28",scope="static"} 1
# HELP kube_apiserver_clusterip_allocator_allocation_total [ALPHA] Number of Cluster IPs allocations
# TYPE kube_apiserver_clusterip_allocator_allocation_total counter
kube_apiserver_clusterip_allocator_allocation_total{cidr="10.0.0.0/28",scope="dynamic"} 1
kube_apiserver_clusterip_allocator_allocation_total{cidr="10.0.0.0/28",scope="static"} 1
`
	if used != 2 {
		t.Fatalf("inner allocator used %d, want 2 (the dry run must not allocate)", used)
	}
	if err := testutil.GatherAndCompare(registry, strings.NewReader(want),
		"kube_apiserver_clusterip_allocator_allocation_total", "kube_apiserver_clusterip_allocator_allocation_errors_total"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(registry, strings.NewReader(`
# HELP kube_apiserver_clusterip_allocator_allocated_ips [ALPHA] Gauge measuring the number of allocated IPs for Services
# TYPE kube_apiserver_clusterip_allocator_allocated_ips gauge
kube_apiserver_clusterip_allocator_allocated_ips{cidr="10.0.0.0/28"} 2
`), "kube_apiserver_clusterip_allocator_allocated_ips"); err != nil {
		t.Fatal(err)
	}
	count, err := testutil.GetHistogramMetricCount(m.duration.WithLabelValues("10.0.0.0/28"))
	if err != nil || count != 2 {
		t.Fatalf("duration histogram count = %d, %v; want 2", count, err)
	}
}

// noRanges is an IPAddress-model allocator that has not seen any ServiceCIDR
// yet: it serves no CIDR and refuses every address.
type noRanges struct{ allocation.Interface }

func (noRanges) CIDROf(netip.Addr) (netip.Prefix, bool) { return netip.Prefix{}, false }
func (noRanges) Allocate(context.Context, netip.Addr, allocation.Owner) error {
	return allocation.ErrMismatchedNetwork
}

// TestNoEmptyCIDRLabel: a call refused because the allocator serves no CIDR
// yet is not counted under cidr="" (it once showed as
// allocation_errors_total{cidr="",scope="static"} 1 on every fresh install).
func TestNoEmptyCIDRLabel(t *testing.T) {
	t.Parallel()
	registry := metrics.NewKubeRegistry()
	m := New()
	m.Register(registry)
	inner, err := clusterip.NewAllocator(subrange.MustNew(netip.MustParsePrefix("10.0.0.0/28"), model.Bitmap))
	if err != nil {
		t.Fatal(err)
	}
	a := m.Wrap(noRanges{inner})
	if err := a.Allocate(context.Background(), netip.MustParseAddr("10.96.0.1"), allocation.Owner{Namespace: "default", Name: "kubernetes"}); err == nil {
		t.Fatal("allocation succeeded")
	}
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "cidr" && l.GetValue() == "" {
					t.Errorf("%s has a series with an empty cidr label", f.GetName())
				}
			}
		}
	}
}
