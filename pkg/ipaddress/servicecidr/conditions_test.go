package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/subrange"
)

func testCIDR(name string, annotations map[string]string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}
}

// testIPs are IPAddresses for addresses, each held by a Service of its own
// ("svc-<i>") unless held is false.
func testIPs(held bool, addrs ...string) []*networkingv1.IPAddress {
	var out []*networkingv1.IPAddress
	for i, a := range addrs {
		ipa := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: a}}
		if held {
			ipa.Spec.ParentRef = &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}
		}
		out = append(out, ipa)
	}
	return out
}

// inputOf is the conditions' input of sc from ips, the IPAddresses inside
// its prefixes, as conditionsFromCache reads it from an informer.
func inputOf(sc *networkingv1.ServiceCIDR, ips []*networkingv1.IPAddress, others []namedCIDR) conditionInput {
	in := conditionInput{sc: sc, others: others,
		services: func(ranges []subrange.Range) int { return servicesHolding(ips, ranges) }}
	for _, ipa := range ips {
		if addr, err := netip.ParseAddr(ipa.Name); err == nil {
			in.addrs = append(in.addrs, addr)
		}
	}
	return in
}

// manyIPs is n IPAddresses inside prefix, from its second address on.
func manyIPs(prefix string, n int) []string {
	a := netip.MustParsePrefix(prefix).Addr().Next()
	var out []string
	for range n {
		out = append(out, a.String())
		a = a.Next()
	}
	return out
}

func cond(kind string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: kind, Status: status, Reason: reason, Message: message}
}

var (
	openDraining = cond(ConditionDraining, metav1.ConditionFalse, ReasonOpen, "takes new allocations")
	openManual   = cond(ConditionManualOnly, metav1.ConditionFalse, ReasonOpen, "takes dynamic picks and user-chosen ClusterIPs")
	noOverlap    = cond(ConditionOverlapping, metav1.ConditionFalse, ReasonNoOverlap, "no other ServiceCIDR overlaps it")
)

func TestComputeConditions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		sc     *networkingv1.ServiceCIDR
		ips    []*networkingv1.IPAddress
		others []namedCIDR
		want   []metav1.Condition
	}{{
		name: "IPv4 /24 with three addresses, one outside",
		sc:   testCIDR("a", nil, "10.0.0.0/24"),
		ips:  testIPs(true, "10.0.0.1", "10.0.0.2", "10.0.0.0" /* network address: not usable */),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "10.0.0.0/24: size 254, used 2, free 252"),
			openDraining, openManual, noOverlap,
		},
	}, {
		name: "IPv6 /64: the size is beyond int64",
		sc:   testCIDR("v6", nil, "fd00::/64"),
		ips:  testIPs(true, "fd00::1"),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv6, metav1.ConditionTrue, ReasonAvailable, "fd00::/64: size 18446744073709551615, used 1, free 18446744073709551614"),
			openDraining, openManual, noOverlap,
		},
	}, {
		name: "dual stack: a condition per family",
		sc:   testCIDR("dual", nil, "10.1.0.0/30", "fd00:1::/120"),
		ips:  testIPs(true, "10.1.0.1", "fd00:1::1"),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "10.1.0.0/30: size 2, used 1, free 1"),
			cond(ConditionCapacityIPv6, metav1.ConditionTrue, ReasonAvailable, "fd00:1::/120: size 255, used 1, free 254"),
			openDraining, openManual, noOverlap,
		},
	}, {
		name: "full /28",
		sc:   testCIDR("full", nil, "10.2.0.0/28"),
		ips:  testIPs(false, manyIPs("10.2.0.0/28", 14)...),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionFalse, ReasonFull, "10.2.0.0/28: size 14, used 14, free 0"),
			openDraining, openManual, noOverlap,
		},
	}, {
		name: "draining with Services left; addresses without a Service, or with another parent, are not counted",
		sc:   testCIDR("old", map[string]string{lifecycle.DrainingAnnotation: "true"}, "10.3.0.0/24"),
		ips: append(testIPs(true, "10.3.0.1", "10.3.0.2"), append(testIPs(false, "10.3.0.3"), &networkingv1.IPAddress{
			ObjectMeta: metav1.ObjectMeta{Name: "10.3.0.4"},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
				Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "default", Name: "svc-9"}},
		})...),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "10.3.0.0/24: size 254, used 4, free 250"),
			cond(ConditionDraining, metav1.ConditionTrue, ReasonDraining, "takes no new allocation; 2 Services still hold addresses in it"),
			cond(ConditionManualOnly, metav1.ConditionFalse, ReasonDraining, "draining: takes no new allocation"),
			noOverlap,
		},
	}, {
		name: "drained",
		sc:   testCIDR("old", map[string]string{lifecycle.DrainingAnnotation: "true"}, "10.3.0.0/24"),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "10.3.0.0/24: size 254, used 0, free 254"),
			cond(ConditionDraining, metav1.ConditionTrue, ReasonDrained, "takes no new allocation; no Service holds an address in it, it can be deleted"),
			cond(ConditionManualOnly, metav1.ConditionFalse, ReasonDraining, "draining: takes no new allocation"),
			noOverlap,
		},
	}, {
		name: "invalid lifecycle value reads as draining",
		sc:   testCIDR("bad", map[string]string{lifecycle.DrainingAnnotation: "yes"}, "10.3.0.0/24"),
		ips:  testIPs(true, "10.3.0.1"),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "10.3.0.0/24: size 254, used 1, free 253"),
			cond(ConditionDraining, metav1.ConditionTrue, ReasonInvalid,
				`invalid lifecycle annotation, read as draining: lifecycle.allocator.github.io/draining: "yes" is not "true" or "false"; 1 Service still holds an address in it`),
			cond(ConditionManualOnly, metav1.ConditionFalse, ReasonDraining, "draining: takes no new allocation"),
			noOverlap,
		},
	}, {
		name: "manual-only",
		sc:   testCIDR("dns", map[string]string{lifecycle.ManualOnlyAnnotation: "true"}, "10.4.0.0/24"),
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "10.4.0.0/24: size 254, used 0, free 254"),
			openDraining,
			cond(ConditionManualOnly, metav1.ConditionTrue, ReasonManualOnly, "takes user-chosen ClusterIPs only, never a dynamic pick"),
			noOverlap,
		},
	}, {
		name: "overlaps, sorted by name; itself and disjoint ones are not named",
		sc:   testCIDR("grow", nil, "10.5.0.0/16"),
		others: []namedCIDR{
			{name: "grow", prefixes: []netip.Prefix{netip.MustParsePrefix("10.5.0.0/16")}},
			{name: "z-inner", prefixes: []netip.Prefix{netip.MustParsePrefix("10.5.1.0/24")}},
			{name: "a-outer", prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/64")}},
			{name: "apart", prefixes: []netip.Prefix{netip.MustParsePrefix("10.6.0.0/16")}},
		},
		want: []metav1.Condition{
			cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "10.5.0.0/16: size 65534, used 0, free 65534"),
			openDraining, openManual,
			cond(ConditionOverlapping, metav1.ConditionTrue, ReasonOverlaps, `overlaps ServiceCIDR "a-outer" (10.0.0.0/8), "z-inner" (10.5.1.0/24)`),
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := computeConditions(inputOf(tt.sc, tt.ips, tt.others))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOverlapMessageBounded(t *testing.T) {
	t.Parallel()
	var others []namedCIDR
	for i := range 25 {
		others = append(others, namedCIDR{name: fmt.Sprintf("n%02d", i), prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	}
	c := overlapCondition("me", []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}, others)
	want := `overlaps ServiceCIDR "n00" (10.0.0.0/8), "n01" (10.0.0.0/8), "n02" (10.0.0.0/8), "n03" (10.0.0.0/8), "n04" (10.0.0.0/8), "n05" (10.0.0.0/8), "n06" (10.0.0.0/8), "n07" (10.0.0.0/8), "n08" (10.0.0.0/8), "n09" (10.0.0.0/8) and 15 more`
	if c.Message != want {
		t.Errorf("message %q, want %q", c.Message, want)
	}
}

// TestApplyConditionsKeepsOthers: conditions of other owners (upstream's
// Ready, another controller's) are kept; ours no longer computed are
// dropped; an unchanged status keeps its LastTransitionTime.
func TestApplyConditionsKeepsOthers(t *testing.T) {
	t.Parallel()
	then, now := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	stored := []metav1.Condition{
		{Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue, LastTransitionTime: then},
		{Type: "example.com/Other", Status: metav1.ConditionFalse, Reason: "X", LastTransitionTime: then},
		{Type: ConditionCapacityIPv6, Status: metav1.ConditionTrue, Reason: ReasonAvailable, LastTransitionTime: then},
		{Type: ConditionCapacityIPv4, Status: metav1.ConditionTrue, Reason: ReasonAvailable, Message: "old", LastTransitionTime: then},
	}
	want := []metav1.Condition{
		cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "new"),
		openDraining,
	}
	if conditionsStored(stored, want) {
		t.Fatal("conditionsStored: true before the write")
	}
	applyConditions(&stored, want, now)
	if !conditionsStored(stored, want) {
		t.Fatal("conditionsStored: false after the write")
	}
	for _, kind := range []string{networkingv1.ServiceCIDRConditionReady, "example.com/Other"} {
		if meta.FindStatusCondition(stored, kind) == nil {
			t.Errorf("%s dropped", kind)
		}
	}
	if meta.FindStatusCondition(stored, ConditionCapacityIPv6) != nil {
		t.Error("our IPv6 capacity, no longer computed, kept")
	}
	if got := meta.FindStatusCondition(stored, ConditionCapacityIPv4).LastTransitionTime; !got.Equal(&then) {
		t.Errorf("unchanged status: LastTransitionTime %v, want %v", got, then)
	}
	if got := meta.FindStatusCondition(stored, ConditionDraining).LastTransitionTime; !got.Equal(&now) {
		t.Errorf("new condition: LastTransitionTime %v, want %v", got, now)
	}
}

// boundedController is a controller on a fake clientset whose informers
// run, with a clock the test moves and a count of status writes.
type boundedController struct {
	*Controller
	client *fake.Clientset
	clock  atomic.Pointer[time.Time]
	writes atomic.Int64
}

func newBoundedController(t *testing.T, interval time.Duration, objs ...runtime.Object) *boundedController {
	t.Helper()
	b := &boundedController{client: fake.NewClientset(objs...)}
	start := time.Unix(1_000_000, 0)
	b.clock.Store(&start)
	b.client.PrependReactor("update", "servicecidrs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			b.writes.Add(1)
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(b.client, 0)
	c, err := New(b.client, factory.Networking().V1().ServiceCIDRs(), factory.Networking().V1().IPAddresses(), WithConditionInterval(interval))
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return *b.clock.Load() }
	b.Controller = c
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return b
}

func (b *boundedController) advance(d time.Duration) {
	next := b.clock.Load().Add(d)
	b.clock.Store(&next)
}

// waitCache polls the informer cache until ok holds, at most 5 s.
func (b *boundedController) waitCache(t *testing.T, what string, ok func(*networkingv1.ServiceCIDR) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if sc, err := b.cidrLister.Get("a"); err == nil && ok(sc) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("cache: %s not within 5 s", what)
}

func capacityMessage(sc *networkingv1.ServiceCIDR) string {
	if c := meta.FindStatusCondition(sc.Status.Conditions, ConditionCapacityIPv4); c != nil {
		return c.Message
	}
	return ""
}

// TestConditionWritesBounded: a ServiceCIDR's conditions are written at
// most once per interval however many IPAddresses come and go, the change
// is written when the interval ends, nothing is written when what is
// stored is current, a write seen from another replica starts the interval
// too, and a conflict is retried without an error.
func TestConditionWritesBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const interval = 5 * time.Second
	b := newBoundedController(t, interval, testCIDR("a", nil, "10.0.0.0/24"))
	b.waitCache(t, "ServiceCIDR a", func(*networkingv1.ServiceCIDR) bool { return true })

	sync := func(wantWrites int64, wantRequeue bool) {
		t.Helper()
		requeue, err := b.syncConditions(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if got := b.writes.Load(); got != wantWrites {
			t.Fatalf("%d status writes, want %d", got, wantWrites)
		}
		if (requeue > 0) != wantRequeue || requeue > interval {
			t.Fatalf("requeue %v, want one: %v (at most %v)", requeue, wantRequeue, interval)
		}
	}
	sync(1, false) // the first computation is written at once
	b.waitCache(t, "first write", func(sc *networkingv1.ServiceCIDR) bool { return capacityMessage(sc) != "" })
	sync(1, false) // stored and current: no write

	for i, ip := range manyIPs("10.0.0.0/24", 50) {
		if _, err := b.client.NetworkingV1().IPAddresses().Create(ctx, testIPs(true, ip)[0], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			b.waitCache(t, "the IPAddress", func(*networkingv1.ServiceCIDR) bool { return len(b.ipIndexer.List()) == i+1 })
			b.advance(interval / 10)
			sync(1, true) // changed inside the interval: requeued, not written
		}
	}
	b.advance(interval / 2)
	b.waitCache(t, "50 IPAddresses", func(*networkingv1.ServiceCIDR) bool { return len(b.ipIndexer.List()) == 50 })
	sync(2, false) // the interval ended: one write with the final count
	b.waitCache(t, "second write", func(sc *networkingv1.ServiceCIDR) bool {
		return capacityMessage(sc) == "10.0.0.0/24: size 254, used 50, free 204"
	})
	sync(2, false)

	// Another replica writes our conditions: the interval counts from it.
	sc, _ := b.cidrLister.Get("a")
	other := sc.DeepCopy()
	meta.SetStatusCondition(&other.Status.Conditions, cond(ConditionCapacityIPv4, metav1.ConditionTrue, ReasonAvailable, "stale"))
	b.advance(interval)
	if _, err := b.client.NetworkingV1().ServiceCIDRs().UpdateStatus(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitCache(t, "the other replica's write", func(sc *networkingv1.ServiceCIDR) bool { return capacityMessage(sc) == "stale" })
	sync(3, true) // its write counted (3); ours waits
	b.advance(interval)

	// A conflict is retried soon, without an error and without a count.
	b.client.PrependReactor("update", "servicecidrs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "networking.k8s.io", Resource: "servicecidrs"}, "a", fmt.Errorf("stale"))
	})
	requeue, err := b.syncConditions(ctx, "a")
	if err != nil || requeue != conflictRetry {
		t.Fatalf("conflict: requeue %v, err %v; want %v, nil", requeue, err, conflictRetry)
	}
	if got := b.ConditionWrites(); got != 2 {
		t.Fatalf("ConditionWrites %d, want 2 (the conflict is not a write)", got)
	}
}

// TestConditionComputeBounded: after a computation of a ServiceCIDR's
// conditions that took a second, they are not computed again, nor
// written, for computeCostFactor seconds from its start; a change is then
// written.
func TestConditionComputeBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBoundedController(t, time.Millisecond, testCIDR("a", nil, "10.0.0.0/24"))
	b.waitCache(t, "ServiceCIDR a", func(*networkingv1.ServiceCIDR) bool { return true })
	b.noteCompute("a", time.Second)
	if _, err := b.client.NetworkingV1().IPAddresses().Create(ctx, testIPs(true, "10.0.0.7")[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitCache(t, "the IPAddress", func(*networkingv1.ServiceCIDR) bool { return len(b.ipIndexer.List()) == 1 })
	requeue, err := b.syncConditions(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := (computeCostFactor - 1) * time.Second; requeue != want || b.writes.Load() != 0 {
		t.Fatalf("right after a computation of 1 s: requeue %v, %d writes; want %v, none", requeue, b.writes.Load(), want)
	}
	b.advance(computeCostFactor * time.Second)
	if requeue, err := b.syncConditions(ctx, "a"); err != nil || requeue > 0 || b.writes.Load() != 1 {
		t.Fatalf("after the wait: requeue %v, err %v, %d writes; want a write", requeue, err, b.writes.Load())
	}
}
