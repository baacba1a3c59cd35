package dualwrite_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// TestDualWritePassesOverNestedDrainingServiceCIDR: a draining ServiceCIDR
// nested in the bitmap's window closes its addresses only: dynamic picks
// keep coming from the rest of the window (the bitmap picks again when its
// candidate lies in the draining one), none lands in the draining one, and
// once the window's open addresses run low they come from the ServiceCIDR
// outside the window.
func TestDualWritePassesOverNestedDrainingServiceCIDR(t *testing.T) {
	t.Parallel()
	e := startEnv(t, "10.0.0.0/24")
	ctx := testContext(t)
	b := e.bits(t, "10.0.0.0/27") // .1–.30
	a := e.dual(t, b, gate{dual: true})
	old := &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "old", Annotations: map[string]string{lifecycle.DrainingAnnotation: "true"}},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.8/29"}},
	}
	if _, err := e.srv.Client.NetworkingV1().ServiceCIDRs().Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hole := netip.MustParsePrefix("10.0.0.8/29")
	deadline := time.Now().Add(30 * time.Second)
	for !e.ip.InHole(netip.MustParseAddr("10.0.0.9")) {
		if time.Now().After(deadline) {
			t.Fatal("the allocator did not see the draining ServiceCIDR within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	window := b.Range()
	for i := range 30 {
		ip, err := a.AllocateNext(ctx, svc(fmt.Sprintf("s-%d", i)))
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if hole.Contains(ip) {
			t.Fatalf("allocation %d: %s, inside the draining ServiceCIDR", i, ip)
		}
		// With 22 open addresses in the window, the first ten stay in it
		// (each bitmap candidate lies in the draining /29 with a chance of
		// at most 8 in 20, and 16 of them in a row are needed to leave).
		if i < 10 && !window.Contains(ip) {
			t.Errorf("allocation %d: %s, outside the window while it has room", i, ip)
		}
	}
}
