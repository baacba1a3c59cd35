package ipaddress

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"

	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/subrange"
)

// Holes are the addresses of a range that a dynamic pick passes over: those
// of the served ranges nested inside it whose lifecycle takes no dynamic
// pick (lifecycle.go). A prefix maps to one interval of a FreeIndex's
// offsets, so a pick jumps over a hole in one step: the cost of a pick grows
// with the number of holes, never with their size.

// span is an inclusive interval of offsets of one FreeIndex.
type span struct{ lo, hi uint64 }

// holes are spans sorted by lo, disjoint and not adjacent.
type holes []span

// at returns the hole holding offset i.
func (h holes) at(i uint64) (span, bool) {
	k := sort.Search(len(h), func(k int) bool { return h[k].hi >= i })
	if k < len(h) && h[k].lo <= i {
		return h[k], true
	}
	return span{}, false
}

// holesIn returns the offsets of rng's usable addresses that prefixes
// cover, sorted and merged; nil when they cover none.
func holesIn(rng subrange.Range, prefixes []netip.Prefix) holes {
	if rng.Size() == 0 {
		return nil
	}
	var out holes
	for _, p := range prefixes {
		first, last := p.Masked().Addr(), lastAddr(p)
		if first.Less(rng.First()) {
			first = rng.First()
		}
		if rng.Last().Less(last) {
			last = rng.Last()
		}
		lo, okLo := rng.Index(first)
		hi, okHi := rng.Index(last)
		if okLo && okHi && lo <= hi {
			out = append(out, span{lo, hi})
		}
	}
	slices.SortFunc(out, func(a, b span) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	merged := out[:0]
	for _, s := range out {
		if n := len(merged); n > 0 && s.lo <= merged[n-1].hi+1 {
			merged[n-1].hi = max(merged[n-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	if len(merged) == 0 {
		return nil
	}
	return merged
}

// lastAddr is the last address of p (its broadcast address in IPv4).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// NextOutside is Next for a range with holes: the free address a dynamic
// allocation would take outside them, by the same band rules (a random
// start in the upper band, the lower band only when the upper band has no
// free address outside the holes), or false when there is none.
func (x *FreeIndex) NextOutside(h holes) (netip.Addr, bool) {
	if len(h) == 0 {
		return x.Next()
	}
	i, ok := x.used.nextOutside(h)
	if !ok {
		return netip.Addr{}, false
	}
	return x.rng.Addr(i)
}

func (d denseOffsets) nextOutside(h holes) (uint64, bool) {
	size, static := d.bm.Size(), d.bm.StaticSize()
	if i, ok := denseFreeOutside(d.bm, h, static, size); ok {
		return uint64(i), true
	}
	i, ok := denseFreeOutside(d.bm, h, 0, static)
	return uint64(i), ok
}

// denseFreeOutside returns a free slot of [lo, hi) outside the holes: the
// first at or after a random start, wrapping around.
func denseFreeOutside(bm *bitset.Set, h holes, lo, hi int) (int, bool) {
	if lo >= hi {
		return 0, false
	}
	start := lo + rand.IntN(hi-lo)
	if i, ok := denseScan(bm, h, start, hi); ok {
		return i, true
	}
	return denseScan(bm, h, lo, start)
}

// denseScan returns the first free slot of [from, to) outside the holes.
// Each step finds the next free slot or jumps past a hole.
func denseScan(bm *bitset.Set, h holes, from, to int) (int, bool) {
	for pos := from; pos < to; {
		i, ok := bm.NextFreeIn(pos, to, pos)
		if !ok {
			return 0, false
		}
		s, in := h.at(uint64(i))
		if !in {
			return i, true
		}
		pos = int(s.hi) + 1
	}
	return 0, false
}

func (s *sparseOffsets) nextOutside(h holes) (uint64, bool) {
	if i, ok := s.pickOutside(s.static, s.size, h); ok {
		return i, true
	}
	return s.pickOutside(0, s.static, h)
}

// pickOutside returns a free offset of [lo, hi) outside the holes: random
// probes first, then a walk from a random start with wrap-around, which
// steps past used offsets one at a time and past holes at once, so it ends
// after at most the used offsets and the holes of the interval.
func (s *sparseOffsets) pickOutside(lo, hi uint64, h holes) (uint64, bool) {
	if lo >= hi {
		return 0, false
	}
	n := hi - lo
	for range randomProbes {
		i := lo + s.rand.Uint64N(n)
		if _, used := s.used[i]; !used {
			if _, in := h.at(i); !in {
				return i, true
			}
		}
	}
	start := lo + s.rand.Uint64N(n)
	if i, ok := s.walkOutside(start, hi, h); ok {
		return i, true
	}
	return s.walkOutside(lo, start, h)
}

func (s *sparseOffsets) walkOutside(from, to uint64, h holes) (uint64, bool) {
	for i := from; i < to; {
		if sp, in := h.at(i); in {
			i = sp.hi + 1
			continue
		}
		if _, used := s.used[i]; !used {
			return i, true
		}
		i++
	}
	return 0, false
}
