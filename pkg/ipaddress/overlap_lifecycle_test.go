package ipaddress

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// TestClosedLifecycleWinsWhereServiceCIDRsOverlap: an address inside a
// draining ServiceCIDR takes no new allocation, and one inside a draining or
// manual-only ServiceCIDR no dynamic pick, whether an open ServiceCIDR
// holding it is wider, narrower or the same prefix; the open one keeps
// every other address.
func TestClosedLifecycleWinsWhereServiceCIDRsOverlap(t *testing.T) {
	t.Parallel()
	a := allocatorOver(t,
		serviceCIDR("wide", 9*time.Hour, "10.0.0.0/27"),
		annotated(serviceCIDR("old2", 8*time.Hour, "10.0.0.8/29"), lifecycle.DrainingAnnotation, "true"),
		annotated(serviceCIDR("m", 7*time.Hour, "10.0.0.16/30"), lifecycle.ManualOnlyAnnotation, "true"),
		annotated(serviceCIDR("drain-wide", 6*time.Hour, "10.1.0.0/28"), lifecycle.DrainingAnnotation, "true"),
		serviceCIDR("keep", 5*time.Hour, "10.1.0.0/29"),
		annotated(serviceCIDR("shared-drain", 4*time.Hour, "10.2.0.0/29"), lifecycle.DrainingAnnotation, "true"),
		serviceCIDR("shared-open", 3*time.Hour, "10.2.0.0/29"),
	)
	closedInWide := []netip.Prefix{netip.MustParsePrefix("10.0.0.8/29"), netip.MustParsePrefix("10.0.0.16/30")}
	picked := 0
	for range 100 {
		ip, ok := a.pickLocked(a.ranges, &a.fullBefore, nil)
		if !ok {
			break
		}
		if !netip.MustParsePrefix("10.0.0.0/27").Contains(ip) || closedInWide[0].Contains(ip) || closedInWide[1].Contains(ip) {
			t.Fatalf("picked %s: inside a closed ServiceCIDR or outside the open one", ip)
		}
		a.markLocked(ip, true)
		picked++
	}
	if picked != 30-8-4 { // the /27's usable addresses but those of the /29 and the /30
		t.Fatalf("picked %d addresses, want 18", picked)
	}

	remark := allocation.Owner{Namespace: "ns", Name: "svc"}
	for _, tc := range []struct {
		ip    string
		owner allocation.Owner
		want  string // "" accepted; else the DrainingError's ServiceCIDRs
	}{
		{ip: "10.0.0.9", owner: newAllocation, want: `"old2"`},
		{ip: "10.0.0.8", owner: newAllocation, want: `"old2"`}, // old2's network address, usable in wide
		{ip: "10.0.0.9", owner: remark},
		{ip: "10.0.0.17", owner: newAllocation}, // manual-only takes user-chosen addresses
		{ip: "10.0.0.3", owner: newAllocation},
		{ip: "10.1.0.3", owner: newAllocation, want: `"drain-wide"`}, // keep lies inside it
		{ip: "10.1.0.12", owner: newAllocation, want: `"drain-wide"`},
		{ip: "10.2.0.3", owner: newAllocation, want: `"shared-drain"`},
	} {
		err := a.checkNewLocked(netip.MustParseAddr(tc.ip), tc.owner, false, nil, nil)
		var de *allocation.DrainingError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s for %+v: %v, want accepted", tc.ip, tc.owner, err)
		case tc.want != "" && (!errors.As(err, &de) || allocation.QuoteNames(de.ServiceCIDRs) != tc.want):
			t.Errorf("%s: %v, want a DrainingError naming %s", tc.ip, err, tc.want)
		}
	}
	for _, tc := range []struct {
		ip            string
		dynamic, hole bool
	}{
		{"10.0.0.3", true, false}, {"10.0.0.8", false, true}, {"10.0.0.9", false, true}, {"10.0.0.17", false, true},
		{"10.1.0.3", false, false}, {"10.2.0.3", false, false}, {"10.9.0.1", false, false},
	} {
		if got := a.TakesDynamic(netip.MustParseAddr(tc.ip)); got != tc.dynamic {
			t.Errorf("TakesDynamic(%s) = %v, want %v", tc.ip, got, tc.dynamic)
		}
		if got := a.InHole(netip.MustParseAddr(tc.ip)); got != tc.hole {
			t.Errorf("InHole(%s) = %v, want %v", tc.ip, got, tc.hole)
		}
	}
	hint := allocation.Hint(a.fullError())
	for _, want := range []string{
		`"wide" (10.0.0.0/27) full`,
		`"keep" (10.1.0.0/29) lies in ServiceCIDR "drain-wide", which is draining`,
		`"shared-open" (10.2.0.0/29) lies in ServiceCIDR "shared-drain", which is draining`,
		`"m" (10.0.0.16/30) is manual-only`,
	} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q lacks %q", hint, want)
		}
	}
}

// TestHolesKeepTheBandRules: a pick from a range with holes never lands in
// one, takes the lower (static) band only once the upper band has no free
// address outside them, and fails only when every address outside them is
// used; for both representations of the used set.
func TestHolesKeepTheBandRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		size, static uint64
		holes        holes
	}{
		{"one hole", 64, 16, holes{{20, 27}}},
		{"holes at both ends", 64, 16, holes{{0, 3}, {60, 63}}},
		{"the whole upper band", 64, 16, holes{{16, 63}}},
		{"across the bands", 40, 16, holes{{10, 30}, {35, 36}}},
		{"everything", 32, 16, holes{{0, 31}}},
	} {
		bm, err := bitset.New(int(tc.size), int(tc.static))
		if err != nil {
			t.Fatal(err)
		}
		sets := map[string]offsets{"sparse": newSparseOffsets(tc.size, tc.static), "dense": denseOffsets{bm}}
		for kind, o := range sets {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				outside := tc.size
				for _, h := range tc.holes {
					outside -= h.hi - h.lo + 1
				}
				outsideUpper := uint64(0)
				for i := tc.static; i < tc.size; i++ {
					if _, in := tc.holes.at(i); !in {
						outsideUpper++
					}
				}
				usedUpper := uint64(0)
				for n := uint64(0); ; n++ {
					i, ok := o.nextOutside(tc.holes)
					if !ok {
						if n != outside {
							t.Fatalf("no pick after %d, want %d", n, outside)
						}
						return
					}
					if _, in := tc.holes.at(i); in || o.has(i) || i >= tc.size {
						t.Fatalf("picked offset %d: in a hole, used or beyond the size", i)
					}
					if i < tc.static && usedUpper != outsideUpper {
						t.Fatalf("static offset %d picked with %d of %d upper-band offsets used", i, usedUpper, outsideUpper)
					}
					if i >= tc.static {
						usedUpper++
					}
					o.set(i)
				}
			})
		}
	}
}

// TestHolesIn: the offsets of nested prefixes, clipped to the usable range,
// sorted and merged.
func TestHolesIn(t *testing.T) {
	t.Parallel()
	rng := subrange.MustNew(netip.MustParsePrefix("10.0.0.0/24"), model.IPAddress) // offsets 0..253 are .1 to .254
	got := holesIn(rng, []netip.Prefix{
		netip.MustParsePrefix("10.0.0.64/27"),
		netip.MustParsePrefix("10.0.0.0/30"),  // the network address is not usable
		netip.MustParsePrefix("10.0.0.72/29"), // inside the /27
		netip.MustParsePrefix("10.0.0.96/28"), // adjacent to the /27
		netip.MustParsePrefix("10.0.0.252/30"),
	})
	want := holes{{0, 2}, {63, 110}, {251, 253}}
	if len(got) != len(want) {
		t.Fatalf("holesIn = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("holesIn = %v, want %v", got, want)
		}
	}
}

// TestDeletedHolders: an address that only ServiceCIDRs being deleted hold
// is named with them (and the warning says so); one a ready ServiceCIDR
// also holds, or none holds, is not. The allocator still answers upstream's
// error for it.
func TestDeletedHolders(t *testing.T) {
	t.Parallel()
	now := metav1.Now()
	deleted := func(sc *networkingv1.ServiceCIDR) *networkingv1.ServiceCIDR {
		sc.DeletionTimestamp, sc.Finalizers = &now, []string{"x"}
		return sc
	}
	cidrs := []*networkingv1.ServiceCIDR{
		serviceCIDR("kubernetes", 3*time.Hour, "10.96.0.0/24"),
		deleted(serviceCIDR("old", 2*time.Hour, "10.97.0.0/24", "fd00:97::/112")),
		deleted(serviceCIDR("older", 2*time.Hour, "10.97.0.0/25")),
		deleted(serviceCIDR("covered", time.Hour, "10.96.0.0/25")),
	}
	for _, tc := range []struct {
		ip   string
		want string // QuoteNames of the result
	}{
		{"10.97.0.5", `"old", "older"`},
		{"10.97.0.200", `"old"`},
		{"fd00:97::5", `"old"`},
		{"10.97.0.0", ""}, // the network address: in no usable range
		{"10.96.0.5", ""}, // kubernetes serves it
		{"10.98.0.5", ""},
	} {
		if got := allocation.QuoteNames(DeletedHolders(cidrs, netip.MustParseAddr(tc.ip))); got != tc.want {
			t.Errorf("DeletedHolders(%s) = %s, want %s", tc.ip, got, tc.want)
		}
	}
	want := `spec.clusterIPs: 10.97.0.5 is in ServiceCIDR "old", which is being deleted and takes no new allocation; choose an address of another ServiceCIDR, or leave spec.clusterIP empty`
	if got := DeletedWarning(netip.MustParseAddr("10.97.0.5"), []string{"old"}); got != want {
		t.Errorf("DeletedWarning = %q, want %q", got, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var objs []runtime.Object
	for _, sc := range cidrs {
		objs = append(objs, sc)
	}
	a, err := New(ctx, Config{Client: fake.NewClientset(objs...)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Allocate(ctx, netip.MustParseAddr("10.97.0.5"), newAllocation); !errors.Is(err, allocation.ErrMismatchedNetwork) {
		t.Errorf("Allocate in a ServiceCIDR being deleted: %v, want upstream's %v", err, allocation.ErrMismatchedNetwork)
	}
}
