package servicecidrs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWarningsFromOverlaps: the warnings read from an Overlaps are those
// read from the list of every stored ServiceCIDR, which the store gives by
// name, for creates and updates (adding a family, changing or keeping the
// lifecycle), on both models.
func TestWarningsFromOverlaps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gone := lifecycleCIDR("gone", "draining", "10.5.0.0/24")
	gone.DeletionTimestamp = &metav1.Time{}
	stored := []*networkingv1.ServiceCIDR{
		lifecycleCIDR("a-many", "", "10.6.0.0/16", "fd00:6::/112"),
		lifecycleCIDR("bad", "", "10.5.3.1/24", "not-a-cidr"),
		lifecycleCIDR("default", "", "10.96.0.0/12", "fd00::/108"),
		lifecycleCIDR("dns", "manual", "10.5.2.0/28"),
		gone,
		lifecycleCIDR("new", "", "10.5.0.0/16"),
		lifecycleCIDR("old2", "draining", "10.5.1.0/24"),
		lifecycleCIDR("v6", "draining", "fd00:5::/112"),
	}
	for i := range 8 { // more overlaps of 10.6.0.0/16 than one request names
		stored = append(stored, lifecycleCIDR(fmt.Sprintf("z-%d", i), []string{"", "draining"}[i%2], fmt.Sprintf("10.6.%d.0/24", i)))
	}
	if !slices.IsSortedFunc(stored, func(a, b *networkingv1.ServiceCIDR) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatal("stored is not by name, as the store lists it")
	}
	list := func(context.Context) ([]*networkingv1.ServiceCIDR, error) { return stored, nil }
	overlaps := syncedOverlaps(stored...)

	writes := []struct {
		name    string
		sc, old *networkingv1.ServiceCIDR // old nil: a create
	}{
		{name: "create inside two", sc: lifecycleCIDR("inner", "", "10.5.1.0/25")},
		{name: "create around many", sc: lifecycleCIDR("outer", "", "10.0.0.0/8", "fd00::/64")},
		{name: "create draining around many", sc: lifecycleCIDR("outer", "draining", "10.6.0.0/16")},
		{name: "create manual, dual-stack", sc: lifecycleCIDR("m", "manual", "10.5.2.0/24", "fd00:5::/120")},
		{name: "create overlapping nothing", sc: lifecycleCIDR("alone", "", "192.168.0.0/24")},
		{name: "create over the unparsable one", sc: lifecycleCIDR("over", "", "10.5.3.0/24")},
		{name: "create of an invalid CIDR", sc: lifecycleCIDR("invalid", "", "10.5.1.1/24")},
		{name: "drain a stored one", sc: lifecycleCIDR("old2", "", "10.5.1.0/24"), old: stored[6]},
		{name: "drain new", sc: lifecycleCIDR("new", "draining", "10.5.0.0/16"), old: stored[5]},
		{name: "add a family", sc: lifecycleCIDR("dns", "manual", "10.5.2.0/28", "fd00:5::/64"), old: stored[3]},
		{name: "add a family and drain", sc: lifecycleCIDR("dns", "draining", "10.5.2.0/28", "fd00:5::/64"), old: stored[3]},
		{name: "add a family to a new one", sc: lifecycleCIDR("x", "", "10.6.1.0/24", "fd00:6::/120"), old: lifecycleCIDR("x", "", "10.6.1.0/24")},
		{name: "keep everything", sc: stored[0].DeepCopy(), old: stored[0]},
	}
	for _, policy := range []Policy{{WarnOverlaps: true}, {WarnOverlaps: true, LifecycleIgnored: true}} {
		fromList := strategy{extra: &extras{policy: policy, list: list}}
		fromIndex := strategy{extra: &extras{policy: policy, overlaps: overlaps}}
		for _, w := range writes {
			var want, got []string
			if w.old == nil {
				want, got = fromList.WarningsOnCreate(ctx, w.sc), fromIndex.WarningsOnCreate(ctx, w.sc)
			} else {
				want, got = fromList.WarningsOnUpdate(ctx, w.sc, w.old), fromIndex.WarningsOnUpdate(ctx, w.sc, w.old)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%+v, %s (-list +index):\n%s", policy, w.name, diff)
			}
		}
	}
	// The table reaches the bounds of both kinds of warning.
	w := (strategy{extra: &extras{policy: Policy{WarnOverlaps: true}, overlaps: overlaps}}).WarningsOnCreate(ctx, writes[1].sc)
	if !slices.Contains(w, `ServiceCIDR "outer" overlaps 4 more ServiceCIDR CIDRs`) ||
		!slices.Contains(w, `ServiceCIDR "outer" overlaps 1 more ServiceCIDR CIDRs of another lifecycle`) {
		t.Errorf("the table warns too little to compare: %q", w)
	}
}

// TestWarningsBeforeSync: until its Overlaps has synced, a strategy reads
// the list, so no warning is lost while the server starts.
func TestWarningsBeforeSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stored := []*networkingv1.ServiceCIDR{lifecycleCIDR("a", "", "10.0.0.0/16")}
	listed := 0
	list := func(context.Context) ([]*networkingv1.ServiceCIDR, error) {
		listed++
		return stored, nil
	}
	unsynced := newOverlaps()
	s := strategy{extra: &extras{policy: Policy{WarnOverlaps: true}, overlaps: unsynced, list: list}}
	sc := lifecycleCIDR("b", "", "10.0.1.0/24")
	if w := s.WarningsOnCreate(ctx, sc); len(w) != 1 || listed != 1 {
		t.Errorf("before the sync: warnings %q, %d lists", w, listed)
	}
	unsynced.synced = func() bool { return true }
	if w := s.WarningsOnCreate(ctx, sc); len(w) != 0 || listed != 1 {
		t.Errorf("after the sync of an empty index: warnings %q, %d lists", w, listed)
	}
}

// BenchmarkWarningsOnCreate is the warnings of a create among 10,000 stored
// ServiceCIDRs (test/scale's IPv6 /112s), read from the list of every one
// and from an Overlaps.
//
//	go test -run '^$' -bench BenchmarkWarningsOnCreate -benchmem ./internal/registry/servicecidrs/
func BenchmarkWarningsOnCreate(b *testing.B) {
	stored := make([]*networkingv1.ServiceCIDR, 10_000)
	for i := range stored {
		stored[i] = lifecycleCIDR(fmt.Sprintf("scale-%05d", i), "", fmt.Sprintf("fd00:1::%x:0/112", i))
	}
	list := func(context.Context) ([]*networkingv1.ServiceCIDR, error) { return stored, nil }
	sc := lifecycleCIDR("new", "", "fd00:1::1:0/112")
	for _, bc := range []struct {
		name  string
		extra *extras
	}{
		{"list", &extras{policy: Policy{WarnOverlaps: true}, list: list}},
		{"overlaps", &extras{policy: Policy{WarnOverlaps: true}, overlaps: syncedOverlaps(stored...)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := strategy{extra: bc.extra}
			b.ReportAllocs()
			for b.Loop() {
				if w := s.WarningsOnCreate(context.Background(), sc); len(w) != 1 {
					b.Fatalf("warnings %q, want the one overlap", w)
				}
			}
		})
	}
}
