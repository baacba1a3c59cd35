package ipaddress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

func annotated(sc *networkingv1.ServiceCIDR, kv ...string) *networkingv1.ServiceCIDR {
	sc.Annotations = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		sc.Annotations[kv[i]] = kv[i+1]
	}
	return sc
}

// allocatorOver builds an allocator over cidrs without informers, as the
// pick tests do.
func allocatorOver(t *testing.T, cidrs ...*networkingv1.ServiceCIDR) *Allocator {
	t.Helper()
	active, refused := selectRanges(cidrs, false)
	if len(refused) > 0 {
		t.Fatalf("selectRanges refused %v", refused)
	}
	a := &Allocator{}
	var ranges []*cidrRange
	for _, ar := range active {
		idx, err := NewFreeIndex(ar.rng)
		if err != nil {
			t.Fatal(err)
		}
		ranges = append(ranges, &cidrRange{activeRange: ar, index: idx})
	}
	a.setRangesLocked(ranges)
	return a
}

var newAllocation = allocation.Owner{Namespace: "ns", Name: "svc", Scoped: &allocation.ScopedRequest{}}

// TestLifecyclePicksAndStatics: dynamic picks come only from automatic
// ranges; a new static address is refused where a ServiceCIDR holding it
// drains; a re-mark never is; the hint of a dynamic request that found
// nothing names what is full and what is closed.
func TestLifecyclePicksAndStatics(t *testing.T) {
	t.Parallel()
	a := allocatorOver(t,
		serviceCIDR("open", 6*time.Hour, "10.0.0.0/29"),
		annotated(serviceCIDR("manual", 5*time.Hour, "10.0.1.0/29"), lifecycle.ManualOnlyAnnotation, "true"),
		annotated(serviceCIDR("old", 4*time.Hour, "10.0.2.0/29"), lifecycle.DrainingAnnotation, "true"),
		annotated(serviceCIDR("typo", 1*time.Hour, "10.0.4.0/29"), lifecycle.DrainingAnnotation, "yes"),
	)
	picked := 0
	for range 100 {
		ip, ok := a.pickLocked(a.ranges, &a.fullBefore, nil)
		if !ok {
			break
		}
		if !netip.MustParsePrefix("10.0.0.0/29").Contains(ip) {
			t.Fatalf("picked %s from a range no automatic ServiceCIDR carries", ip)
		}
		a.markLocked(ip, true)
		picked++
	}
	if picked != 6 { // a /29 has 6 usable addresses
		t.Fatalf("picked %d addresses, want 6", picked)
	}

	cases := []struct {
		ip    string
		owner allocation.Owner
		want  string // "" accepted; else the DrainingError's ServiceCIDRs
	}{
		{ip: "10.0.1.3", owner: newAllocation},
		{ip: "10.0.2.3", owner: newAllocation, want: `"old"`},
		{ip: "10.0.2.3", owner: allocation.Owner{Namespace: "ns", Name: "svc"}}, // a re-mark
		{ip: "10.0.4.3", owner: newAllocation, want: `"typo"`},                  // an invalid value reads as draining
	}
	for _, tc := range cases {
		err := a.checkNewLocked(netip.MustParseAddr(tc.ip), tc.owner, false, nil, nil)
		var de *allocation.DrainingError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s for %+v: %v, want accepted", tc.ip, tc.owner, err)
		case tc.want != "" && (!errors.As(err, &de) || allocation.QuoteNames(de.ServiceCIDRs) != tc.want):
			t.Errorf("%s: %v, want a DrainingError naming %s", tc.ip, err, tc.want)
		}
	}

	err := a.fullError()
	if !errors.Is(err, allocation.ErrFull) || err.Error() != "range is full" {
		t.Fatalf("fullError = %v, want range is full", err)
	}
	hint := allocation.Hint(err)
	for _, want := range []string{
		`"open" (10.0.0.0/29) full`,
		`"manual" (10.0.1.0/29) is manual-only (user-chosen ClusterIPs only)`,
		`"old" (10.0.2.0/29) is draining`,
		`"typo" (10.0.4.0/29) is draining`,
		lifecycle.Prefix,
	} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q lacks %q", hint, want)
		}
	}
	for _, tc := range []struct {
		ip   string
		want bool
	}{{"10.0.0.1", true}, {"10.0.1.1", false}, {"10.0.2.1", false}, {"10.9.0.1", false}} {
		if got := a.TakesDynamic(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("TakesDynamic(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

// TestLifecycleOfScopedServiceCIDRs: a Service whose only scope drains gets
// no address from it and does not spill into unscoped ranges (the scope
// does not fall back); the error says the scope's ServiceCIDR is draining.
func TestLifecycleOfScopedServiceCIDRs(t *testing.T) {
	t.Parallel()
	a := allocatorOver(t,
		serviceCIDR("open", 2*time.Hour, "10.0.0.0/29"),
		annotated(serviceCIDR("team-a", 1*time.Hour, "10.0.1.0/29"),
			scope.NamespaceSelectorAnnotation, "team=a", lifecycle.DrainingAnnotation, "true"),
	)
	teamA := labels.Set{"team": "a"}
	a.mu.Lock()
	_, ok, byScope := a.pickForLocked(true, teamA, nil, nil)
	staticErr := a.checkNewLocked(netip.MustParseAddr("10.0.1.2"), newAllocation, true, teamA, nil)
	otherErr := a.checkNewLocked(netip.MustParseAddr("10.0.0.2"), newAllocation, true, teamA, nil)
	a.mu.Unlock()
	if ok || !byScope {
		t.Fatalf("team a's dynamic pick: found %v, routed by scope %v; want nothing found by scope", ok, byScope)
	}
	err := a.nothingFree(byScope, teamA, nil)
	if !errors.Is(err, allocation.ErrFull) || !strings.Contains(allocation.Hint(err), `"team-a" (10.0.1.0/29) is draining`) {
		t.Errorf("nothingFree = %v (hint %q), want range is full naming team-a draining", err, allocation.Hint(err))
	}
	if !errors.As(staticErr, new(*allocation.DrainingError)) {
		t.Errorf("static in the draining scope: %v, want a DrainingError", staticErr)
	}
	if !errors.As(otherErr, new(*allocation.OutOfScopeError)) {
		t.Errorf("static outside the scope: %v, want an OutOfScopeError", otherErr)
	}
}
