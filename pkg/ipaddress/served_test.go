package ipaddress

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

// TestApplyMatchesRebuild: after every batch of random ServiceCIDR changes
// (created, changed, deleted; nested, duplicated, refused and
// non-canonical CIDRs; lifecycles, scopes, readiness, creation times),
// the ranges applyLocked keeps equal those a rebuild from the cache
// computes, for both families: order, carriers, modes, holes, scopes and
// their index, lookups, refused CIDRs, the address counts of their
// indexes. It also reports as newly refused exactly what a rebuild would,
// keeps the index of every prefix served before and after, keeps
// fullBefore and unscopedFull sound, and routes as the whole route does
// (checkRoutes).
func TestApplyMatchesRebuild(t *testing.T) {
	t.Parallel()
	for seed := range uint64(25) {
		checkHistory(t, seed, 120)
	}
}

// FuzzApplyMatchesRebuild is TestApplyMatchesRebuild's check over the
// histories of any seed.
func FuzzApplyMatchesRebuild(f *testing.F) {
	f.Add(uint64(1), uint8(40))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) { checkHistory(t, seed, int(steps)) })
}

// historyPrefixes are the CIDRs a history's ServiceCIDRs carry: nested
// and disjoint IPv4 and IPv6 prefixes, one not canonical (refused by
// both families) and one IPv6 prefix shorter than /64 (refused by IPv6).
var historyPrefixes = []string{
	"10.0.0.0/16", "10.0.0.0/24", "10.0.1.0/24", "10.0.0.0/28", "10.0.0.16/28", "10.1.0.0/24", "10.0.0.1/24",
	"fd00::/112", "fd00::/120", "fd00::80/121", "fd00:1::/112", "fd00::/56",
}

// historyAddrs are the IPAddresses cached while a history runs, and the
// addresses whose holding ranges are compared.
var historyAddrs = []string{"10.0.0.5", "10.0.0.20", "10.0.1.7", "10.1.0.9", "fd00::5", "fd00::81", "fd00:1::9"}

func checkHistory(t *testing.T, seed uint64, steps int) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 7))
	cidrs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	ips := cache.NewSharedIndexInformer(&cache.ListWatch{}, &networkingv1.IPAddress{}, 0, cache.Indexers{})
	if err := addrindex.Add(ips); err != nil {
		t.Fatal(err)
	}
	for _, ip := range historyAddrs {
		if err := ips.GetIndexer().Add(&networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ip}}); err != nil {
			t.Fatal(err)
		}
	}
	fresh := func(ipv6 bool) *Allocator {
		a := &Allocator{ipv6: ipv6, logger: klog.Background(), ipIndexer: ips.GetIndexer(),
			cidrLister: networkinglisters.NewServiceCIDRLister(cidrs),
			inflight:   map[netip.Addr]*reservation{}, unobserved: map[netip.Addr]bool{}}
		a.rebuildLocked()
		return a
	}
	kept := []*Allocator{fresh(false), fresh(true)}
	names := []string{"a", "b", "c", "d", "e", "f", "g"}
	for step := range steps {
		batch := map[string]bool{}
		for range 1 + rnd.IntN(3) {
			name := names[rnd.IntN(len(names))]
			batch[name] = true
			var err error
			if rnd.IntN(4) == 0 {
				err = cidrs.Delete(&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}})
			} else {
				err = cidrs.Update(randomServiceCIDR(rnd, name))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range kept {
			// Picks move fullBefore and unscopedFull past the closed ranges in front.
			a.pickLocked(a.ranges, &a.fullBefore, nil)
			a.pickForLocked(true, labels.Set{"team": "b"}, nil, nil)
			before, indexes := slices.Clone(a.refused), map[netip.Prefix]*FreeIndex{}
			for p, r := range a.byPrefix {
				indexes[p] = r.index
			}
			got := a.applyLocked(slices.Sorted(maps.Keys(batch)))
			want := fresh(a.ipv6)
			if diff := cmp.Diff(viewOf(want), viewOf(a)); diff != "" {
				t.Fatalf("seed %d step %d, IPv6 %v: applied differs from rebuilt (-rebuilt +applied):\n%s", seed, step, a.ipv6, diff)
			}
			if diff := cmp.Diff(refusedKeys(notIn(want.refused, before)), refusedKeys(got), sorted); diff != "" {
				t.Fatalf("seed %d step %d, IPv6 %v: newly refused (-rebuilt +applied):\n%s", seed, step, a.ipv6, diff)
			}
			for p, r := range a.byPrefix {
				if idx := indexes[p]; idx != nil && idx != r.index {
					t.Fatalf("seed %d step %d: %s served before and after got a new index", seed, step, p)
				}
			}
			checkRoutes(t, a)
			checkFullBefore(t, a.ranges, a.fullBefore)
			checkFullBefore(t, a.unscoped, a.unscopedFull)
			for _, r := range a.ranges {
				if (r.upos < 0) != !slices.Contains(a.unscoped, r) || r.upos >= 0 && a.unscoped[r.upos] != r {
					t.Fatalf("seed %d step %d: range %s has upos %d, not its place in the unscoped ranges", seed, step, r.rng.Prefix(), r.upos)
				}
			}
		}
	}
}

// checkRoutes fails t unless, while some range is scoped, for a Service
// in scope team=a and one in none, a routed dynamic pick lands in the first range of its route (the
// whole route, as its error messages compute it) with room, or finds
// nothing when none has room, and a routed static request is refused
// exactly when no range of its route holds the address.
func checkRoutes(t *testing.T, a *Allocator) {
	t.Helper()
	if len(a.scopedRanges) == 0 {
		return // nothing is routed by scope
	}
	for _, who := range []struct{ ns, svc labels.Set }{
		{labels.Set{"team": "a"}, nil}, {labels.Set{"team": "b"}, nil},
		{labels.Set{"team": "c", "env": "prod"}, labels.Set{"app": "x"}}, {labels.Set{"team": "a"}, labels.Set{"app": "x"}},
	} {
		ns, svc := who.ns, who.svc
		rt := a.routeLocked(ns, svc, useDynamic)
		var want *cidrRange
		for _, r := range rt.ranges {
			if _, ok := r.index.NextOutside(r.holes); ok && r.mode.Dynamic() {
				want = r
				break
			}
		}
		ip, ok, _ := a.pickForLocked(true, ns, svc, nil)
		if ok != (want != nil) || ok && !want.rng.Contains(ip) {
			t.Fatalf("%v: picked %v (%v), want a pick from %v", ns, ip, ok, want)
		}
		static := a.routeLocked(ns, svc, useStatic)
		for _, text := range historyAddrs {
			addr := netip.MustParseAddr(text)
			if !a.containsLocked(addr) {
				continue
			}
			onRoute := slices.ContainsFunc(static.ranges, func(r *cidrRange) bool { return r.rng.Contains(addr) })
			if err := a.checkScopeLocked(addr, true, ns, svc); (err == nil) != onRoute {
				t.Fatalf("%v: static %s: %v, want refused %v", ns, addr, err, !onRoute)
			}
		}
	}
}

// checkFullBefore fails t unless every range before fullBefore is full
// or takes no dynamic pick.
func checkFullBefore(t *testing.T, ranges []*cidrRange, fullBefore int) {
	t.Helper()
	for _, r := range ranges[:fullBefore] {
		if r.mode.Dynamic() && r.index.Free() > 0 {
			t.Fatalf("range %s before place %d takes dynamic picks and has room", r.rng.Prefix(), fullBefore)
		}
	}
}

// randomServiceCIDR is a ServiceCIDR named name with one or two of
// historyPrefixes (perhaps the same twice), one of three creation times,
// and perhaps a lifecycle, a scope, a Ready condition and a deletion.
func randomServiceCIDR(rnd *rand.Rand, name string) *networkingv1.ServiceCIDR {
	sc := serviceCIDR(name, time.Duration(rnd.IntN(3))*time.Hour)
	for range 1 + rnd.IntN(2) {
		sc.Spec.CIDRs = append(sc.Spec.CIDRs, historyPrefixes[rnd.IntN(len(historyPrefixes))])
	}
	sc.Annotations = map[string]string{}
	switch rnd.IntN(5) {
	case 0:
		sc.Annotations[lifecycle.ManualOnlyAnnotation] = "true"
	case 1:
		sc.Annotations[lifecycle.DrainingAnnotation] = "true"
	case 2:
		sc.Annotations[lifecycle.DrainingAnnotation] = "soon" // invalid: read as draining
	}
	selectors := []string{"team=a", "team in (a,c)", "team!=b", "team", "env=prod,team=c"}
	switch rnd.IntN(5) {
	case 0, 1:
		sc.Annotations[scope.NamespaceSelectorAnnotation] = selectors[rnd.IntN(len(selectors))]
		sc.Annotations[scope.PriorityAnnotation] = fmt.Sprint(rnd.IntN(3))
		if rnd.IntN(2) == 0 {
			sc.Annotations[scope.FallbackAnnotation] = "true"
		}
		if rnd.IntN(3) == 0 {
			sc.Annotations[scope.ServiceSelectorAnnotation] = "app=x"
		}
	case 2:
		sc.Annotations[scope.NamespaceSelectorAnnotation] = "team in (" // invalid: refused
	}
	switch rnd.IntN(6) {
	case 0:
		withReady(sc, metav1.ConditionFalse)
	case 1:
		withReady(sc, metav1.ConditionTrue)
	case 2:
		now := metav1.Now()
		sc.DeletionTimestamp = &now
	}
	return sc
}

var sorted = cmpopts.SortSlices(func(x, y string) bool { return x < y })

// allocatorView is what TestApplyMatchesRebuild compares.
type allocatorView struct {
	Ranges           []rangeView
	Unscoped, Scoped []string
	HasScopes        bool
	Refused          []string
	Served           []string
	Holding          map[string][]string
	ScopeIndex       map[string][]string
}

type rangeView struct {
	Prefix, Name    string
	Created         time.Time
	Spec, Pos       int
	Carriers        []string
	Mode            lifecycle.Mode
	ClosedBy, Holes string
	Used            uint64
}

func viewOf(a *Allocator) allocatorView {
	v := allocatorView{HasScopes: a.hasScopes.Load(), Refused: refusedKeys(a.refused), Holding: map[string][]string{}}
	for i, r := range a.ranges {
		rv := rangeView{Prefix: r.rng.Prefix().String(), Name: r.name, Created: r.created.Time, Spec: r.spec, Pos: r.pos - i,
			Mode: r.mode, ClosedBy: fmt.Sprint(r.closedBy), Holes: fmt.Sprint(r.holes), Used: r.index.Used()}
		for _, c := range r.carriers {
			rv.Carriers = append(rv.Carriers, fmt.Sprintf("%s %d %s", c.name, c.mode, scopeText(c.scope)))
		}
		v.Ranges = append(v.Ranges, rv)
	}
	for _, r := range a.unscoped {
		v.Unscoped = append(v.Unscoped, r.rng.Prefix().String())
	}
	for _, r := range a.scopedRanges {
		v.Scoped = append(v.Scoped, r.rng.Prefix().String())
	}
	v.Served = slices.Sorted(maps.Keys(a.served))
	v.ScopeIndex = map[string][]string{}
	file := func(key string, s scopedCarrier) {
		v.ScopeIndex[key] = append(v.ScopeIndex[key], s.r.rng.Prefix().String()+" "+s.c.name)
		slices.Sort(v.ScopeIndex[key])
	}
	for p, ss := range a.scopeIdx.byLabel {
		for _, s := range ss {
			file(p.key+"="+p.value, s)
		}
	}
	for _, s := range a.scopeIdx.always {
		file("always", s)
	}
	for _, text := range append(slices.Clone(historyAddrs), "10.0.0.130", "fd00::1", "fd00::ff") {
		var held []string
		for _, r := range a.lookup.appendHolding(nil, netip.MustParseAddr(text)) {
			held = append(held, r.rng.Prefix().String())
		}
		slices.Sort(held)
		v.Holding[text] = held
	}
	return v
}

func scopeText(s *scope.Scope) string {
	if s == nil {
		return "unscoped"
	}
	return fmt.Sprintf("%v/%v/%d/%v", s.Namespaces, s.Services, s.Priority, s.Fallback)
}

func refusedKeys(refused []RefusedCIDR) []string {
	var out []string
	for _, r := range refused {
		out = append(out, fmt.Sprintf("%s %s: %v", r.ServiceCIDR, r.CIDR, r.Err))
	}
	return out
}

// notIn returns the entries of refused that are not in before.
func notIn(refused, before []RefusedCIDR) []RefusedCIDR {
	var out []RefusedCIDR
	for _, r := range refused {
		if !slices.ContainsFunc(before, func(o RefusedCIDR) bool { return o.ServiceCIDR == r.ServiceCIDR && o.CIDR == r.CIDR }) {
			out = append(out, r)
		}
	}
	return out
}
