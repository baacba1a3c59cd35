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
	a.allRanges().insert(r)
	a.lookup.prefixes.Add(p, r)
	if r.own != lifecycle.Automatic {
		a.closed.Add(p, r)
	}
	scoped, unscoped := r.scopedWays()
	if unscoped {
		a.unscopedRanges().insert(r)
	}
	if scoped {
		a.scopedRanges, _ = insertRange(a.scopedRanges, r)
		a.scopeIdx.add(r)
	}
	c.touch(r)
}

// detach takes r out of the served ranges, to change its carriers.
func (c *change) detach(r *cidrRange) {
	a, p := c.a, r.rng.Prefix()
	c.touch(r)
	a.allRanges().remove(r)
	a.lookup.prefixes.Remove(p, r)
	if r.own != lifecycle.Automatic {
		a.closed.Remove(p, r)
	}
	if r.upos >= 0 {
		a.unscopedRanges().remove(r)
	}
	if scoped, _ := r.scopedWays(); scoped {
		a.scopedRanges = removeRange(a.scopedRanges, r)
		a.scopeIdx.remove(r)
	}
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

// numbered is a list of ranges in allocation order whose ranges know
// their place in it, with the place before which each is full or closed:
// Allocator.ranges (pos, fullBefore) or Allocator.unscoped (upos,
// unscopedFull).
type numbered struct {
	ranges   *[]*cidrRange
	full     *int
	unscoped bool // the place is upos, not pos
}

func (a *Allocator) allRanges() numbered { return numbered{&a.ranges, &a.fullBefore, false} }

func (a *Allocator) unscopedRanges() numbered { return numbered{&a.unscoped, &a.unscopedFull, true} }

// place is r's place in the list.
func (l numbered) place(r *cidrRange) *int {
	if l.unscoped {
		return &r.upos
	}
	return &r.pos
}

// insert puts r in its place.
func (l numbered) insert(r *cidrRange) {
	var i int
	*l.ranges, i = insertRange(*l.ranges, r)
	l.renumberFrom(i)
}

// remove takes r out; its place becomes -1.
func (l numbered) remove(r *cidrRange) {
	i := *l.place(r)
	*l.ranges = slices.Delete(*l.ranges, i, i+1)
	l.renumberFrom(i)
	*l.place(r) = -1
}

// renumberFrom sets the places of the ranges from i on, which moved; the
// next dynamic pick over the list starts no later than i.
func (l numbered) renumberFrom(i int) {
	*l.full = min(*l.full, i)
	ranges := *l.ranges
	if l.unscoped { // the choice made once, not per range: a list is 10,000 long
		for ; i < len(ranges); i++ {
			ranges[i].upos = i
		}
		return
	}
	for ; i < len(ranges); i++ {
		ranges[i].pos = i
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

// insertRange inserts r in ranges, kept in allocation order, and returns
// its place.
func insertRange(ranges []*cidrRange, r *cidrRange) ([]*cidrRange, int) {
	i, _ := slices.BinarySearchFunc(ranges, r, compareRanges)
	return slices.Insert(ranges, i, r), i
}

// removeRange removes r from ranges, kept in allocation order, if it is
// there.
func removeRange(ranges []*cidrRange, r *cidrRange) []*cidrRange {
	if i, found := slices.BinarySearchFunc(ranges, r, compareRanges); found && ranges[i] == r {
		return slices.Delete(ranges, i, i+1)
	}
	return ranges
}
