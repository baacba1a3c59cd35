package servicecidrs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/subrange"
)

// syncedOverlaps returns an Overlaps that answers at once, holding stored.
func syncedOverlaps(stored ...*networkingv1.ServiceCIDR) *Overlaps {
	o := newOverlaps()
	o.synced = func() bool { return true }
	for _, sc := range stored {
		o.addServiceCIDR(sc)
	}
	return o
}

// scanOverlapping is what Overlapping answers, by a look at every
// ServiceCIDR of stored.
func scanOverlapping(stored map[string]*networkingv1.ServiceCIDR, queries []netip.Prefix) []string {
	var names []string
	for name, sc := range stored {
		for _, text := range sc.Spec.CIDRs {
			p, err := subrange.ParsePrefix(text)
			if err == nil && slices.ContainsFunc(queries, p.Overlaps) && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names
}

func namesOf(cidrs []*networkingv1.ServiceCIDR) []string {
	var names []string
	for _, sc := range cidrs {
		names = append(names, sc.Name)
	}
	return names
}

// TestOverlaps: the ServiceCIDRs found after adds, updates (moving or
// growing the CIDRs, or keeping them), deletes and tombstones.
func TestOverlaps(t *testing.T) {
	t.Parallel()
	sc := func(name string, cidrs ...string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	}
	o := syncedOverlaps()
	steps := []struct {
		what  string
		do    func()
		query []netip.Prefix
		want  []string
	}{
		{what: "empty", do: func() {}, query: prefixes("10.0.0.0/8"), want: nil},
		{what: "adds", do: func() {
			o.addServiceCIDR(sc("wide", "10.0.0.0/16"))
			o.addServiceCIDR(sc("b", "10.0.1.0/24", "fd00::/112"))
			o.addServiceCIDR(sc("a", "10.0.2.0/24"))
			o.addServiceCIDR(sc("bad", "10.0.1.1/24", "junk"))
		}, query: prefixes("10.0.1.0/25"), want: []string{"b", "wide"}},
		{what: "both families find b once, by name", do: func() {}, query: prefixes("10.0.0.0/8", "fd00::/64"), want: []string{"a", "b", "wide"}},
		{what: "an update moving a's CIDR", do: func() {
			o.updateServiceCIDR(sc("a", "10.0.2.0/24"), sc("a", "10.1.0.0/24"))
		}, query: prefixes("10.0.2.0/24"), want: []string{"wide"}},
		{what: "a found where it moved", do: func() {}, query: prefixes("10.1.0.128/25"), want: []string{"a"}},
		{what: "an update adding a family", do: func() {
			o.updateServiceCIDR(sc("a", "10.1.0.0/24"), sc("a", "10.1.0.0/24", "fd00::/120"))
		}, query: prefixes("fd00::/64"), want: []string{"a", "b"}},
		{what: "a delete", do: func() { o.deleteServiceCIDR(sc("b", "10.0.1.0/24", "fd00::/112")) }, query: prefixes("10.0.1.0/24", "fd00::/64"), want: []string{"a", "wide"}},
		{what: "a tombstone of a stale state", do: func() {
			o.deleteServiceCIDR(cache.DeletedFinalStateUnknown{Key: "wide", Obj: sc("wide", "192.168.0.0/16")})
		}, query: prefixes("10.0.0.0/8"), want: []string{"a"}},
		{what: "a delete of one never added", do: func() { o.deleteServiceCIDR(sc("never", "10.1.0.0/24")) }, query: prefixes("10.0.0.0/8"), want: []string{"a"}},
	}
	for _, step := range steps {
		step.do()
		found, ok := o.Overlapping(context.Background(), step.query)
		if !ok {
			t.Fatalf("%s: not synced", step.what)
		}
		if diff := cmp.Diff(step.want, namesOf(found)); diff != "" {
			t.Errorf("%s: %v (-want +got):\n%s", step.what, step.query, diff)
		}
	}
	if found, ok := o.Overlapping(context.Background(), prefixes("10.1.0.0/24")); !ok || len(found) != 1 || found[0].Spec.CIDRs[1] != "fd00::/120" {
		t.Errorf("a after its update: %v, want its last state", found)
	}
}

// TestOverlapsAgainstScan: after each of random adds, updates, deletes and
// tombstones, Overlapping answers what a scan of every ServiceCIDR does.
func TestOverlapsAgainstScan(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	universe := []string{
		"10.0.0.0/8", "10.0.0.0/16", "10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "10.1.0.0/16", "10.1.2.0/24",
		"fd00::/64", "fd00::/112", "fd00::1:0/112", "fd00::/120", "fd01::/64", "10.0.0.1/24", "junk",
	}
	randomCIDRs := func() []string {
		cidrs := []string{universe[rng.IntN(len(universe))]}
		if rng.IntN(3) == 0 {
			cidrs = append(cidrs, universe[rng.IntN(len(universe))])
		}
		return cidrs
	}
	o := syncedOverlaps()
	stored := map[string]*networkingv1.ServiceCIDR{}
	for i := range 2000 {
		name := fmt.Sprintf("sc-%d", rng.IntN(20))
		old, exists := stored[name]
		switch op := rng.IntN(4); {
		case !exists || op == 0:
			sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: randomCIDRs()}}
			if exists {
				o.updateServiceCIDR(old, sc)
			} else {
				o.addServiceCIDR(sc)
			}
			stored[name] = sc
		case op == 1:
			o.deleteServiceCIDR(cache.DeletedFinalStateUnknown{Key: name, Obj: old})
			delete(stored, name)
		case op == 2:
			o.deleteServiceCIDR(old)
			delete(stored, name)
		default: // an update keeping the CIDRs
			sc := old.DeepCopy()
			sc.ResourceVersion = fmt.Sprint(i)
			o.updateServiceCIDR(old, sc)
			stored[name] = sc
		}
		query := prefixes(universe[rng.IntN(len(universe)-2)])
		if rng.IntN(2) == 0 {
			query = append(query, prefixes(universe[rng.IntN(len(universe)-2)])...)
		}
		found, _ := o.Overlapping(context.Background(), query)
		if diff := cmp.Diff(scanOverlapping(stored, query), namesOf(found)); diff != "" {
			t.Fatalf("step %d, %v (-scan +index):\n%s", i, query, diff)
		}
		for _, sc := range found {
			if sc != stored[sc.Name] {
				t.Fatalf("step %d: %s is not its last state", i, sc.Name)
			}
		}
	}
}

// TestOverlapsInformer: an Overlaps does not answer before its informer has
// synced, then follows the ServiceCIDRs the informer delivers.
func TestOverlapsInformer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	first := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "first"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}}
	client := fake.NewClientset(first)
	factory := informers.NewSharedInformerFactory(client, 0)
	o, err := NewOverlaps(factory.Networking().V1().ServiceCIDRs().Informer())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := o.Overlapping(ctx, prefixes("10.0.0.0/8")); ok {
		t.Fatal("answers before its informer started")
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel() // before Shutdown, which waits for the informers to stop
		factory.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), o.synced) {
		t.Fatal("never synced")
	}
	if found, ok := o.Overlapping(ctx, prefixes("10.0.0.0/8")); !ok || len(found) != 1 || found[0].Name != "first" {
		t.Fatalf("after the sync: %v, %v", found, ok)
	}
	second := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "second"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.128/25"}}}
	if _, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.NetworkingV1().ServiceCIDRs().Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		found, _ := o.Overlapping(ctx, prefixes("10.0.0.0/8"))
		return slices.Equal(namesOf(found), []string{"second"}), nil
	})
	if err != nil {
		t.Errorf("the create and delete never showed: %v", err)
	}
}

// TestOverlapsWaitsForItsWrites: after a write of this process, Overlapping
// answers once the informer delivered it, and does not answer (the
// warnings then list every ServiceCIDR) when that takes longer than maxLag.
func TestOverlapsWaitsForItsWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sc := func(name, rv string) *networkingv1.ServiceCIDR {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24"}}}
	}
	o := syncedOverlaps(sc("old", "5"))
	o.Wrote(sc("dry-run", ""))
	if found, ok := o.Overlapping(ctx, prefixes("10.0.0.0/8")); !ok || len(found) != 1 {
		t.Fatalf("after a dry run: %v, %v; want old at once", found, ok)
	}

	o.maxLag = 20 * time.Millisecond
	o.Wrote(sc("new", "7"))
	if _, ok := o.Overlapping(ctx, prefixes("10.0.0.0/8")); ok {
		t.Error("answered before the informer delivered the write")
	}

	o.maxLag = time.Minute
	go func() {
		time.Sleep(10 * time.Millisecond)
		o.addServiceCIDR(sc("other", "6"))
		o.addServiceCIDR(sc("new", "7"))
	}()
	found, ok := o.Overlapping(ctx, prefixes("10.0.0.0/8"))
	if diff := cmp.Diff([]string{"new", "old", "other"}, namesOf(found)); !ok || diff != "" {
		t.Errorf("once delivered: %v (-want +got):\n%s", ok, diff)
	}

	o.Wrote(sc("never", "9"))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := o.Overlapping(canceled, prefixes("10.0.0.0/8")); ok {
		t.Error("answered for a canceled request before the informer delivered the write")
	}
}
