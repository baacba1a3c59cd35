package servicecidrs

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

func lifecycleCIDR(name, mode string, cidrs ...string) *networkingv1.ServiceCIDR {
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	switch mode {
	case "draining":
		sc.Annotations = map[string]string{lifecycle.DrainingAnnotation: "true"}
	case "manual":
		sc.Annotations = map[string]string{lifecycle.ManualOnlyAnnotation: "true"}
	}
	return sc
}

// TestClosedOverlapWarnings: creating or updating either of two overlapping
// ServiceCIDRs of different lifecycles warns which addresses the more
// closed one closes for both, and how to reopen them; a ServiceCIDR being
// deleted closes nothing, and the plain overlap warning is not repeated.
func TestClosedOverlapWarnings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gone := lifecycleCIDR("gone", "draining", "10.5.0.0/24")
	gone.DeletionTimestamp = &metav1.Time{}
	stored := []*networkingv1.ServiceCIDR{
		lifecycleCIDR("old2", "draining", "10.5.1.0/24"),
		lifecycleCIDR("new", "", "10.5.0.0/16"),
		lifecycleCIDR("dns", "manual", "10.5.2.0/28"),
		gone,
	}
	list := func(context.Context) ([]*networkingv1.ServiceCIDR, error) { return stored, nil }
	s := strategy{extra: &extras{list: list, policy: Policy{WarnOverlaps: true}}}
	const rule = "from either ServiceCIDR (where ServiceCIDRs overlap, the most closed lifecycle wins)"

	got := s.WarningsOnCreate(ctx, lifecycleCIDR("new", "", "10.5.0.0/16"))
	want := []string{
		`ServiceCIDR "new": 10.5.0.0/16 contains ServiceCIDR "gone" (10.5.0.0/24); overlapping ServiceCIDRs are allowed, as in Kubernetes, and share their addresses`,
		`ServiceCIDR "new": 10.5.0.0/16 contains ServiceCIDR "old2" (10.5.1.0/24), which is draining: no new allocation lands in 10.5.1.0/24 while it is, ` + rule +
			`; to reopen those addresses, remove the lifecycle.allocator.github.io/draining annotation of ServiceCIDR "old2"`,
		`ServiceCIDR "new": 10.5.0.0/16 contains ServiceCIDR "dns" (10.5.2.0/28), which is manual-only: no dynamic pick lands in 10.5.2.0/28 while it is, ` + rule +
			`; to reopen those addresses, remove the lifecycle.allocator.github.io/manual-only annotation of ServiceCIDR "dns"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create of the open one (-want +got):\n%s", diff)
	}

	open2 := lifecycleCIDR("old2", "", "10.5.1.0/24")
	got = s.WarningsOnUpdate(ctx, lifecycleCIDR("old2", "draining", "10.5.1.0/24"), open2)
	want = []string{`ServiceCIDR "old2" is draining, and 10.5.1.0/24 lies inside ServiceCIDR "new" (10.5.0.0/16): no new allocation lands in 10.5.1.0/24 while it is, ` + rule}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("draining an overlapped one (-want +got):\n%s", diff)
	}
	if got := s.WarningsOnUpdate(ctx, stored[0].DeepCopy(), stored[0]); len(got) != 0 {
		t.Errorf("an update keeping the lifecycle warns %q", got)
	}

	got = s.WarningsOnCreate(ctx, lifecycleCIDR("inner", "", "10.5.1.0/25"))
	want = []string{
		`ServiceCIDR "inner": 10.5.1.0/25 lies inside ServiceCIDR "new" (10.5.0.0/16); overlapping ServiceCIDRs are allowed, as in Kubernetes, and share their addresses`,
		`ServiceCIDR "inner": 10.5.1.0/25 lies inside ServiceCIDR "old2" (10.5.1.0/24), which is draining: no new allocation lands in 10.5.1.0/25 while it is, ` + rule +
			`: no new allocation lands in this ServiceCIDR at all; to reopen those addresses, remove the lifecycle.allocator.github.io/draining annotation of ServiceCIDR "old2"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create inside a draining one (-want +got):\n%s", diff)
	}

	bitmap := strategy{extra: &extras{list: list, policy: Policy{WarnOverlaps: true, LifecycleIgnored: true}}}
	if got := bitmap.WarningsOnUpdate(ctx, lifecycleCIDR("x", "draining", "10.9.0.0/24"), lifecycleCIDR("x", "", "10.9.0.0/24")); len(got) != 1 {
		t.Errorf("the bitmap model warns %q, want only that it ignores lifecycles", got)
	}
}
