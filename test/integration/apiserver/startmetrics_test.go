package apiserver_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/model"
)

// informerLag makes an IPAddress-model allocator see no ServiceCIDR for a
// while after it is built, as a slow informer does on a loaded machine: it
// serves no range and refuses static requests until then.
type informerLag struct {
	allocation.Interface
	until time.Time
}

type rangesReady interface {
	Ranges() []netip.Prefix
	CIDROf(netip.Addr) (netip.Prefix, bool)
	Ready() bool
}

func (l *informerLag) lagging() bool { return time.Now().Before(l.until) }

func (l *informerLag) Ranges() []netip.Prefix {
	if l.lagging() {
		return nil
	}
	return l.Interface.(rangesReady).Ranges()
}

func (l *informerLag) CIDROf(ip netip.Addr) (netip.Prefix, bool) {
	if l.lagging() {
		return netip.Prefix{}, false
	}
	return l.Interface.(rangesReady).CIDROf(ip)
}

func (l *informerLag) Ready() bool { return l.Interface.(rangesReady).Ready() }

func (l *informerLag) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	if l.lagging() {
		return allocation.ErrMismatchedNetwork
	}
	return l.Interface.Allocate(ctx, ip, owner)
}

// TestFreshServerMetricsHaveNoErrors starts servers on fresh data (both
// models, with bootstrap and the repair controller as in production) and
// checks that /metrics shows no allocation error and no empty cidr label,
// and that the kubernetes Service's allocation is counted under its CIDR.
// Every fresh install once showed allocation_errors_total{cidr="",scope="static"} 1
// (an alert on it fired on every install): bootstrap created the kubernetes
// Service before the IPAddress model's informer had seen the default
// ServiceCIDR. The "informer lag" case makes that window certain.
func TestFreshServerMetricsHaveNoErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		model string
		wrap  func(allocation.Interface) allocation.Interface
	}{
		{name: "ipaddress", model: string(model.IPAddress)},
		{name: "bitmap", model: string(model.Bitmap)},
		{name: "ipaddress with informer lag", model: string(model.IPAddress), wrap: func(a allocation.Interface) allocation.Interface {
			return &informerLag{Interface: a, until: time.Now().Add(2 * time.Second)}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testserver.Start(t, testserver.Options{Model: tt.model, WithRepair: true, WrapAllocator: tt.wrap})
			body, err := srv.Client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(string(body), "\n") {
				if !strings.HasPrefix(line, "kube_apiserver_clusterip_allocator_") {
					continue
				}
				if strings.HasPrefix(line, "kube_apiserver_clusterip_allocator_allocation_errors_total") {
					t.Errorf("fresh server counted an allocation error: %s", line)
				}
				if strings.Contains(line, `cidr=""`) {
					t.Errorf("metric with an empty cidr label: %s", line)
				}
			}
			if !strings.Contains(string(body), `kube_apiserver_clusterip_allocator_allocation_total{cidr="10.96.0.0/16",scope="static"} 1`) {
				t.Errorf("the kubernetes Service's static allocation is not counted under 10.96.0.0/16")
			}
		})
	}
}
