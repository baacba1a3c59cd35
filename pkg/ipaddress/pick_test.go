package ipaddress

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
)

// excludedPrefix excludes every address of one prefix.
type excludedPrefix netip.Prefix

func (e excludedPrefix) Contains(ip netip.Addr) bool { return netip.Prefix(e).Contains(ip) }
func (e excludedPrefix) ContainsPrefix(p netip.Prefix) bool {
	return netip.Prefix(e).Bits() <= p.Bits() && netip.Prefix(e).Contains(p.Addr())
}

// TestPickSkipsFullRanges holds the pick that starts at fullBefore to the
// plain one: over random claims and releases, some with a range excluded,
// every pick comes from the first range (in allocation order) that has a
// free address and is not excluded, and it fails only when there is none.
// The ranges nest (a release frees the address in both) and fill and empty
// many times, and their order changes now and then (a rebuild), which
// must start the pick from the first range again.
func TestPickSkipsFullRanges(t *testing.T) {
	t.Parallel()
	cidrs := []*networkingv1.ServiceCIDR{
		serviceCIDR("a", 5*time.Hour, "10.0.0.0/28"),
		serviceCIDR("b", 4*time.Hour, "10.0.1.0/29"),
		serviceCIDR("c", 3*time.Hour, "10.0.0.0/29"), // inside a
		serviceCIDR("d", 2*time.Hour, "10.0.2.0/29"),
		serviceCIDR("e", 1*time.Hour, "10.0.3.0/30"),
	}
	active, refused := selectRanges(cidrs, false)
	if len(refused) > 0 || len(active) != len(cidrs) {
		t.Fatalf("selectRanges: %d ranges, refused %v", len(active), refused)
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

	rnd := rand.New(rand.NewPCG(1, 2))
	var used []netip.Addr
	picks, fails, mostSkipped := 0, 0, 0
	for step := range 20000 {
		if step%3000 == 2999 {
			// The oldest range goes last: every position changes.
			a.setRangesLocked(append(slices.Clone(a.ranges[1:]), a.ranges[0]))
		}
		// Claims outnumber releases, then releases claims, in waves, so
		// the ranges fill up and empty again.
		claim := rnd.IntN(100) < 70
		if (step/2000)%2 == 1 {
			claim = rnd.IntN(100) < 30
		}
		if !claim && len(used) > 0 {
			k := rnd.IntN(len(used))
			a.markLocked(used[k], false)
			used[k] = used[len(used)-1]
			used = used[:len(used)-1]
			continue
		}
		var excluded Excluded
		var ex netip.Prefix
		if rnd.IntN(4) == 0 {
			ex = a.ranges[rnd.IntN(len(a.ranges))].rng.Prefix()
			excluded = excludedPrefix(ex)
		}
		want := -1
		for i, r := range a.ranges {
			if ex.IsValid() && excludedPrefix(ex).ContainsPrefix(r.rng.Prefix()) {
				continue
			}
			if r.index.Free() > 0 {
				want = i
				break
			}
		}
		ip, ok := a.pickLocked(a.ranges, &a.fullBefore, excluded)
		mostSkipped = max(mostSkipped, a.fullBefore)
		for i := range a.fullBefore {
			if a.ranges[i].index.Free() != 0 {
				t.Fatalf("step %d: range %s before fullBefore %d has %d free", step, a.ranges[i].rng.Prefix(), a.fullBefore, a.ranges[i].index.Free())
			}
		}
		if !ok {
			if want >= 0 {
				t.Fatalf("step %d: no pick, but %s has %d free", step, a.ranges[want].rng.Prefix(), a.ranges[want].index.Free())
			}
			fails++
			continue
		}
		if want < 0 || !a.ranges[want].rng.Contains(ip) || a.ranges[want].index.Has(ip) {
			t.Fatalf("step %d: picked %s, want a free address of range %d", step, ip, want)
		}
		a.markLocked(ip, true)
		used = append(used, ip)
		picks++
	}
	if picks < 1000 || fails < 100 {
		t.Fatalf("%d picks and %d picks finding every range full: the waves did not fill the ranges", picks, fails)
	}
	if mostSkipped < 2 {
		t.Fatalf("fullBefore reached %d at most: the picks never skipped full ranges", mostSkipped)
	}
}
