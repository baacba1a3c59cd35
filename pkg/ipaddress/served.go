package ipaddress

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/subrange"
)

// A ServiceCIDR event changes what that ServiceCIDR gives, not the other
// ranges: applyLocked takes back what it gave (Allocator.served) and adds
// what it gives now, range by range, in place. With 10,000 ServiceCIDRs a
// rebuild from all of them (rebuildLocked) lists, sorts and parses every
// one, for each burst of events. The invariant, checked by
// TestApplyMatchesRebuild on random histories: after any events, the
// ranges, their order, carriers, lifecycles, holes, scopes and refused
// CIDRs are those a rebuild from the cache computes.

// applyLocked brings the ranges up to date with the ServiceCIDRs named, as
// the cache holds them now. Its cost grows with the ranges those
// ServiceCIDRs carry and the closed ranges overlapping them, plus a move
// of the pointers after each place a range is added or removed; it reads
// no other ServiceCIDR. It returns the CIDRs refused now that were not
// refused before.
func (a *Allocator) applyLocked(names []string) []RefusedCIDR {
	c := change{a: a, kept: map[netip.Prefix]*FreeIndex{}, touched: map[*cidrRange]bool{}}
	var fresh []RefusedCIDR
	for _, name := range names {
		var now *served
		// The cache's lister fails only with NotFound: the ServiceCIDR is gone.
		if sc, err := a.cidrLister.Get(name); err == nil {
			now = servedBy(sc, a.ipv6)
		}
		before := a.served[name]
		if before != nil {
			c.withdraw(before)
		}
		if now != nil {
			c.contribute(now)
			fresh = append(fresh, newlyRefused(before, now)...)
		}
	}
	c.finish()
	return fresh
}

// newlyRefused returns the CIDRs now refuses that before did not.
func newlyRefused(before, now *served) []RefusedCIDR {
	var out []RefusedCIDR
	for _, r := range now.refused {
		if before == nil || !slices.ContainsFunc(before.refused, func(o RefusedCIDR) bool { return o.CIDR == r.CIDR }) {
			out = append(out, r)
		}
	}
	return out
}

// change is one applyLocked in progress.
type change struct {
	a *Allocator
	// kept are the indexes of the ranges no longer served, for a range
	// served again within the change (a ServiceCIDR replaced by another
	// carrying its prefix): its addresses are not read again.
	kept map[netip.Prefix]*FreeIndex
	// touched are the ranges whose mode or holes may have changed.
	touched map[*cidrRange]bool
}

// withdraw takes back what s gave: its refused CIDRs, and its carrier of
// each of its ranges; a range left with no carrier is no longer served.
func (c *change) withdraw(s *served) {
	a, name := c.a, s.carrier.name
	a.refused = slices.DeleteFunc(a.refused, func(r RefusedCIDR) bool { return r.ServiceCIDR == name })
	delete(a.served, name)
	ours := func(k carrier) bool { return k.name == name }
	for _, rng := range s.ranges {
		r := a.byPrefix[rng.Prefix()]
		if r == nil || !slices.ContainsFunc(r.carriers, ours) {
			continue // its index could not be built, or s carries it twice
		}
		c.detach(r)
		r.carriers = slices.DeleteFunc(r.carriers, ours)
		if len(r.carriers) == 0 {
			c.kept[rng.Prefix()] = r.index
			delete(a.byPrefix, rng.Prefix())
			continue
		}
		c.attach(r)
	}
}

// contribute adds what s gives: its refused CIDRs and its carrier of each
// of its ranges, each carrier in allocation order; a range it alone
// carries is served from now on.
func (c *change) contribute(s *served) {
	a := c.a
	a.served[s.carrier.name] = s
	after := func(name string) bool { return compareServed(a.served[name], s) > 0 }
	at := slices.IndexFunc(a.refused, func(r RefusedCIDR) bool { return after(r.ServiceCIDR) })
	if at < 0 {
		at = len(a.refused)
	}
	a.refused = slices.Insert(a.refused, at, s.refused...)
	for _, rng := range s.ranges {
		p := rng.Prefix()
		r := a.byPrefix[p]
		if r != nil {
			c.detach(r)
		} else {
			idx := c.kept[p]
			if idx == nil {
				var err error
				if idx, err = a.newIndexLocked(rng); err != nil {
					continue
				}
			}
			delete(c.kept, p)
			r = &cidrRange{activeRange: activeRange{rng: rng}, index: idx, pos: -1, upos: -1}
			a.byPrefix[p] = r
		}
		i := slices.IndexFunc(r.carriers, func(k carrier) bool { return after(k.name) })
		if i < 0 {
			i = len(r.carriers)
		}
		r.carriers = slices.Insert(r.carriers, i, s.carrier)
		c.attach(r)
	}
}

// attach puts r, with at least one carrier, in its place among the served
// ranges: its order key and own mode are those of its carriers now.
func (c *change) attach(r *cidrRange) {
	a, p := c.a, r.rng.Prefix()
	first := a.served[r.carriers[0].name]
	r.created, r.name = first.created, first.carrier.name
	r.spec = slices.IndexFunc(first.ranges, func(o subrange.Range) bool { return o.Prefix() == p })
	r.own, r.ownBy = ownMode(r.carriers)
	i, _ := slices.BinarySearchFunc(a.ranges, r, compareRanges)
	a.ranges = slices.Insert(a.ranges, i, r)
	a.renumberFrom(i)
	a.lookup.prefixes.Add(p, r)
	if r.own != lifecycle.Automatic {
		a.closed.Add(p, r)
	}
	scoped, unscoped := r.scopedWays()
	if unscoped {
		i, _ := slices.BinarySearchFunc(a.unscoped, r, compareRanges)
		a.unscoped = slices.Insert(a.unscoped, i, r)
		a.renumberUnscopedFrom(i)
	}
	if scoped {
		a.scopedRanges = insertRange(a.scopedRanges, r)
		a.scopeIdx.add(r)
	}
	c.touch(r)
}

// detach takes r out of the served ranges, to change its carriers.
func (c *change) detach(r *cidrRange) {
	a, p := c.a, r.rng.Prefix()
	c.touch(r)
	a.ranges = slices.Delete(a.ranges, r.pos, r.pos+1)
	a.renumberFrom(r.pos)
	a.lookup.prefixes.Remove(p, r)
	if r.own != lifecycle.Automatic {
		a.closed.Remove(p, r)
	}
	if r.upos >= 0 {
		a.unscoped = slices.Delete(a.unscoped, r.upos, r.upos+1)
		a.renumberUnscopedFrom(r.upos)
	}
	if scoped, _ := r.scopedWays(); scoped {
		a.scopedRanges = removeRange(a.scopedRanges, r)
		a.scopeIdx.remove(r)
	}
	r.pos, r.upos = -1, -1
}

// touch notes that r's mode or holes may change, and when r closes
// addresses by its own mode, those of every range overlapping it.
func (c *change) touch(r *cidrRange) {
	c.touched[r] = true
	if r.own != lifecycle.Automatic {
		for _, o := range c.a.lookup.prefixes.Overlapping(r.rng.Prefix()) {
			c.touched[o] = true
		}
	}
}

// finish sets the mode and holes of every range touched that is still
// served, and lets the next dynamic pick look at each of them again.
func (c *change) finish() {
	a := c.a
	for r := range c.touched {
		if r.pos >= 0 {
			a.closeLocked(r)
			a.lowerFullLocked(r)
		}
	}
	a.hasScopes.Store(len(a.scopedRanges) > 0)
}

// renumberFrom sets the positions of the ranges from i on, which moved;
// the next dynamic pick starts no later than i.
func (a *Allocator) renumberFrom(i int) {
	a.fullBefore = min(a.fullBefore, i)
	for ; i < len(a.ranges); i++ {
		a.ranges[i].pos = i
	}
}

// renumberUnscopedFrom is renumberFrom for Allocator.unscoped.
func (a *Allocator) renumberUnscopedFrom(i int) {
	a.unscopedFull = min(a.unscopedFull, i)
	for ; i < len(a.unscoped); i++ {
		a.unscoped[i].upos = i
	}
}

// compareRanges is allocation order: that of the ranges' first carriers
// (compareServed), then the order of their CIDRs in its spec.
func compareRanges(x, y *cidrRange) int {
	if c := x.created.Compare(y.created.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(x.name, y.name); c != 0 {
		return c
	}
	return cmp.Compare(x.spec, y.spec)
}

// insertRange inserts r in ranges, kept in allocation order.
func insertRange(ranges []*cidrRange, r *cidrRange) []*cidrRange {
	i, _ := slices.BinarySearchFunc(ranges, r, compareRanges)
	return slices.Insert(ranges, i, r)
}

// removeRange removes r from ranges, kept in allocation order, if it is
// there.
func removeRange(ranges []*cidrRange, r *cidrRange) []*cidrRange {
	if i, found := slices.BinarySearchFunc(ranges, r, compareRanges); found && ranges[i] == r {
		return slices.Delete(ranges, i, i+1)
	}
	return ranges
}
