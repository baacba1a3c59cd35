package webhook

import (
	"context"
	"net/netip"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
)

// TestMembersCount: replicas renewing their Leases count each other and
// take distinct indexes in name order; a replica whose Leases cannot be
// read picks anywhere. (Against a real kube-apiserver: TestWebhookKube.)
func TestMembersCount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := fake.NewClientset()
	a := newMembers(client, "allocator-system", "a", klog.Background())
	b := newMembers(client, "allocator-system", "b", klog.Background())
	for _, m := range []*members{a, b, a} {
		if err := m.renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if k, n := a.stripe(); k != 0 || n != 2 {
		t.Errorf("a: stripe %d of %d, want 0 of 2", k, n)
	}
	if k, n := b.stripe(); k != 1 || n != 2 {
		t.Errorf("b: stripe %d of %d, want 1 of 2", k, n)
	}
	if k, n := (*members)(nil).stripe(); k != 0 || n != 1 {
		t.Errorf("no members: stripe %d of %d, want 0 of 1", k, n)
	}
}

// TestOtherStripes: each address is in exactly one of n stripes, the same
// for both families' addressing, and consecutive addresses alternate.
func TestOtherStripes(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"10.96.0.0", "fd00::"} {
		ip := netip.MustParseAddr(base)
		for range 12 {
			in := 0
			for k := range 3 {
				if !(otherStripes{k: k, n: 3}).Contains(ip) {
					in++
				}
			}
			if in != 1 {
				t.Errorf("%s is in %d of 3 stripes, want 1", ip, in)
			}
			next := ip.Next()
			if (otherStripes{k: 0, n: 2}).Contains(ip) == (otherStripes{k: 0, n: 2}).Contains(next) {
				t.Errorf("%s and %s are in one of 2 stripes", ip, next)
			}
			ip = next
		}
	}
}
