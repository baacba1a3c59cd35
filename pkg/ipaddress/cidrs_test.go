package ipaddress

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

func serviceCIDR(name string, age time.Duration, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}
}

func withReady(sc *networkingv1.ServiceCIDR, status metav1.ConditionStatus) *networkingv1.ServiceCIDR {
	sc.Status.Conditions = []metav1.Condition{{Type: networkingv1.ServiceCIDRConditionReady, Status: status}}
	return sc
}

func TestSelectRanges(t *testing.T) {
	t.Parallel()
	now := metav1.Now()
	terminating := serviceCIDR("terminating", 5*time.Hour, "10.9.0.0/24")
	terminating.DeletionTimestamp = &now
	cidrs := []*networkingv1.ServiceCIDR{
		serviceCIDR("b-young", time.Hour, "10.1.0.0/24", "fd00:1::/120"),
		serviceCIDR("old", 3*time.Hour, "10.0.0.0/28"),
		serviceCIDR("a-young", time.Hour, "10.2.0.0/24"),
		serviceCIDR("dup", 30*time.Minute, "10.0.0.0/28"),
		terminating,
		withReady(serviceCIDR("notready", 4*time.Hour, "10.8.0.0/24"), metav1.ConditionFalse),
		withReady(serviceCIDR("ready", 10*time.Minute, "10.3.0.0/24"), metav1.ConditionTrue),
		serviceCIDR("too-big", 2*time.Hour, "fd00:2::/48"),
	}
	prefixes := func(rs []activeRange) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.rng.Prefix().String())
		}
		return out
	}
	v4, refused4 := selectRanges(cidrs, false)
	if diff := cmp.Diff([]string{"10.0.0.0/28", "10.2.0.0/24", "10.1.0.0/24", "10.3.0.0/24"}, prefixes(v4)); diff != "" {
		t.Errorf("IPv4 order (-want +got):\n%s", diff)
	}
	if len(refused4) != 0 { // the IPv6 allocator reports IPv6 refusals
		t.Errorf("IPv4 refused: %v", refused4)
	}
	v6, refused6 := selectRanges(cidrs, true)
	if diff := cmp.Diff([]string{"fd00:1::/120"}, prefixes(v6)); diff != "" {
		t.Errorf("IPv6 (-want +got):\n%s", diff)
	}
	if len(refused6) != 1 || refused6[0].ServiceCIDR != "too-big" || !errors.Is(refused6[0], subrange.ErrPrefixTooLarge) ||
		refused6[0].Err.Error() != "prefix too large: shortest allowed prefix length for service CIDR is 64, got 48" {
		t.Errorf("IPv6 refused: %v", refused6)
	}
}

// TestSelectRangesScopes: a prefix carried by a scoped and an unscoped
// ServiceCIDR is one range with both carriers; a ServiceCIDR whose scope
// does not parse (stored by a server that does not validate it) is refused,
// never served unscoped.
func TestSelectRangesScopes(t *testing.T) {
	t.Parallel()
	scopedCIDR := serviceCIDR("scoped", 2*time.Hour, "10.0.0.0/28")
	scopedCIDR.Annotations = map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}
	bad := serviceCIDR("bad", time.Hour, "10.1.0.0/28", "fd00::/120")
	bad.Annotations = map[string]string{scope.NamespaceSelectorAnnotation: "team in (a"}
	cidrs := []*networkingv1.ServiceCIDR{scopedCIDR, serviceCIDR("plain", time.Hour, "10.0.0.0/28"), bad}
	v4, refused := selectRanges(cidrs, false)
	if len(v4) != 1 || len(v4[0].carriers) != 2 || v4[0].carriers[0].scope == nil || v4[0].carriers[1].scope != nil {
		t.Fatalf("ranges %+v, want one range carried by scoped (with its scope) and plain (none)", v4)
	}
	if len(refused) != 1 || refused[0].ServiceCIDR != "bad" || refused[0].CIDR != "10.1.0.0/28" ||
		!strings.Contains(refused[0].Error(), "invalid scope") {
		t.Fatalf("refused %v, want bad's IPv4 CIDR with its scope error", refused)
	}
	if v6, refused6 := selectRanges(cidrs, true); len(v6) != 0 || len(refused6) != 1 {
		t.Fatalf("IPv6: %v refused %v, want bad's IPv6 CIDR refused", v6, refused6)
	}
}

func TestMaximalRanges(t *testing.T) {
	t.Parallel()
	var ranges []*cidrRange
	for _, p := range []string{"10.0.0.0/28", "10.0.0.0/24", "10.1.0.0/24", "10.0.0.240/28", "10.0.0.16/28"} {
		ranges = append(ranges, &cidrRange{activeRange: activeRange{rng: subrange.MustNew(netip.MustParsePrefix(p), model.IPAddress)}})
	}
	a := &Allocator{}
	a.setRangesLocked(ranges)
	var got []int
	for i, r := range a.ranges {
		if a.maximalLocked(r) {
			got = append(got, i)
		}
	}
	if diff := cmp.Diff([]int{1, 2}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestChangeConcerns(t *testing.T) {
	t.Parallel()
	sc := func(cidrs ...string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: "extra", CreationTimestamp: metav1.NewTime(time.Unix(100, 0))},
			Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
		}
	}
	v4, v6, dual := sc("10.0.0.0/24"), sc("fd00::/112"), sc("10.0.0.0/24", "fd00::/112")
	with := func(base *networkingv1.ServiceCIDR, f func(*networkingv1.ServiceCIDR)) *networkingv1.ServiceCIDR {
		c := base.DeepCopy()
		f(c)
		return c
	}
	ready := func(status metav1.ConditionStatus) func(*networkingv1.ServiceCIDR) {
		return func(c *networkingv1.ServiceCIDR) {
			c.Status.Conditions = []metav1.Condition{{Type: networkingv1.ServiceCIDRConditionReady, Status: status}}
		}
	}
	cases := []struct {
		name     string
		old, new *networkingv1.ServiceCIDR
		v4, v6   bool // whether the IPv4 and the IPv6 allocator rebuild
	}{
		{"finalizer added", v4, with(v4, func(c *networkingv1.ServiceCIDR) { c.Finalizers = []string{"f"} }), false, false},
		{"Ready=True set", v4, with(v4, ready(metav1.ConditionTrue)), false, false},
		{"Ready=False set", v4, with(v4, ready(metav1.ConditionFalse)), true, false},
		{"being deleted", dual, with(dual, func(c *networkingv1.ServiceCIDR) { c.DeletionTimestamp = &metav1.Time{Time: time.Unix(200, 0)} }), true, true},
		{"IPv6 one being deleted", v6, with(v6, func(c *networkingv1.ServiceCIDR) { c.DeletionTimestamp = &metav1.Time{Time: time.Unix(200, 0)} }), false, true},
		{"scope annotation", v4, with(v4, func(c *networkingv1.ServiceCIDR) { c.Annotations = map[string]string{"a": "b"} }), true, false},
		{"CIDRs widened to dual stack", v4, dual, true, true},
		{"an unparsable CIDR", v6, with(v6, func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = append(c.Spec.CIDRs, "10.0.0.1/24") }), true, true},
		{"labels only", dual, with(dual, func(c *networkingv1.ServiceCIDR) { c.Labels = map[string]string{"a": "b"} }), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := changeConcerns(tc.old, tc.new, false); got != tc.v4 {
				t.Errorf("IPv4: changeConcerns = %v, want %v", got, tc.v4)
			}
			if got := changeConcerns(tc.old, tc.new, true); got != tc.v6 {
				t.Errorf("IPv6: changeConcerns = %v, want %v", got, tc.v6)
			}
		})
	}
	if concerns(v6, false) || !concerns(v6, true) || !concerns(v4, false) || concerns(v4, true) {
		t.Error("concerns: a single-family ServiceCIDR concerns only its family")
	}
	if !concerns(sc("bad"), false) || !concerns(sc("bad"), true) {
		t.Error("concerns: an unparsable CIDR concerns both families (both refuse it)")
	}
	if !concerns(cache.DeletedFinalStateUnknown{Key: "x"}, false) {
		t.Error("concerns: an unknown object must count")
	}
}

// TestRangeLookup: the ranges a lookup finds for an address are those of a
// look at every range whose prefix holds it, over overlapping prefixes of
// several lengths, for addresses inside, at the edges and outside.
func TestRangeLookup(t *testing.T) {
	t.Parallel()
	var ranges []*cidrRange
	for _, text := range []string{"10.0.0.0/24", "10.0.0.0/16", "10.0.1.0/24", "10.0.0.0/28", "10.1.0.0/24", "fd00::/112", "fd00::/64"} {
		ranges = append(ranges, &cidrRange{activeRange: activeRange{rng: subrange.MustNew(netip.MustParsePrefix(text), model.IPAddress)}})
	}
	l := newRangeLookup(ranges)
	for _, text := range []string{"10.0.0.0", "10.0.0.5", "10.0.0.16", "10.0.0.255", "10.0.1.1", "10.0.255.255", "10.1.0.9", "10.2.0.1", "192.168.0.1", "fd00::5", "fd00::1:5", "fd01::1"} {
		ip := netip.MustParseAddr(text)
		var want, got []int
		for i, r := range ranges {
			if r.rng.Prefix().Contains(ip) {
				want = append(want, i)
			}
		}
		for _, r := range l.appendHolding(nil, ip) {
			got = append(got, slices.Index(ranges, r))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("ranges holding %s: %v, want %v", ip, got, want)
		}
	}
}
