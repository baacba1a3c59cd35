// Package prefixindex finds, among many prefixes, those that contain an
// address or overlap a prefix, without looking at every prefix.
//
// The prefixes containing an address are found with one map lookup per
// prefix length in use (the address's prefix at that length), and those
// inside a prefix by a binary search of the prefixes sorted by address. A
// cluster's ServiceCIDRs use a few lengths (IPv4 /24s, IPv6 /112s, the
// default range's), so the cost of a lookup grows with those lengths and
// the answer, not with the ServiceCIDRs: every IPAddress and Service event
// looks up its address, so a look at each ServiceCIDR would make every
// create cost in proportion to them. Adding or removing an entry costs a
// map update and a move of the sorted prefixes.
//
// Invariant: Containing and Overlapping answer the values a scan of every
// entry would (netip.Prefix.Contains, Overlaps; fuzzed against one), each
// once per entry, in an order fixed by the entries.
package prefixindex

import (
	"cmp"
	"net/netip"
	"slices"
)

// Entry is a prefix and the value filed under it.
type Entry[V comparable] struct {
	Prefix netip.Prefix
	Value  V
}

// Index is a set of entries. It is not safe for concurrent use, except for
// concurrent reads while nothing is added or removed.
type Index[V comparable] struct {
	byPrefix map[netip.Prefix][]V
	// lengths counts the distinct prefixes of each length, by family: [0]
	// IPv4, [1] IPv6; bits lists those lengths, longest first.
	lengths [2]map[int]int
	bits    [2][]int
	// sorted are the distinct prefixes by family, by address, then by length.
	sorted [2][]netip.Prefix
}

// New builds an index of entries.
func New[V comparable](entries []Entry[V]) *Index[V] {
	x := &Index[V]{byPrefix: make(map[netip.Prefix][]V, len(entries))}
	// The values of the distinct prefixes share one array: the allocator
	// builds an index of every served range when it builds them all.
	// Each gets a slice of capacity 1, so that a second value filed under
	// its prefix copies it out rather than overwrite another's.
	firsts := make([]V, len(entries))
	fresh := make([]netip.Prefix, 0, len(entries))
	for i, e := range entries {
		if p, ok := x.file(e, firsts[i:i:i+1]); ok {
			fresh = append(fresh, p)
		}
	}
	for _, p := range fresh {
		f := family(p.Addr())
		x.sorted[f] = append(x.sorted[f], p)
	}
	for f := range x.sorted {
		slices.SortFunc(x.sorted[f], comparePrefixes)
	}
	return x
}

// file files e's value under its masked prefix (10.0.0.1/24 as
// 10.0.0.0/24), appending it to first when the prefix is new to the index,
// and reports whether it was; an invalid prefix is left out.
func (x *Index[V]) file(e Entry[V], first []V) (netip.Prefix, bool) {
	if !e.Prefix.IsValid() {
		return netip.Prefix{}, false
	}
	p := e.Prefix.Masked()
	vs, seen := x.byPrefix[p]
	if !seen {
		vs = first
	}
	x.byPrefix[p] = append(vs, e.Value)
	if seen {
		return p, false
	}
	f := family(p.Addr())
	if x.lengths[f] == nil {
		x.lengths[f] = map[int]int{}
	}
	if x.lengths[f][p.Bits()]++; x.lengths[f][p.Bits()] == 1 {
		x.bits[f] = append(x.bits[f], p.Bits())
		slices.SortFunc(x.bits[f], func(a, b int) int { return b - a })
	}
	return p, true
}

// Add files v under p (masked); an invalid prefix is left out.
func (x *Index[V]) Add(p netip.Prefix, v V) {
	if x.byPrefix == nil {
		x.byPrefix = map[netip.Prefix][]V{}
	}
	if p, fresh := x.file(Entry[V]{Prefix: p, Value: v}, nil); fresh {
		f := family(p.Addr())
		i, _ := slices.BinarySearchFunc(x.sorted[f], p, comparePrefixes)
		x.sorted[f] = slices.Insert(x.sorted[f], i, p)
	}
}

// Remove removes one entry of v under p (masked), if there is one.
func (x *Index[V]) Remove(p netip.Prefix, v V) {
	if !p.IsValid() {
		return
	}
	p = p.Masked()
	vs := x.byPrefix[p]
	i := slices.Index(vs, v)
	if i < 0 {
		return
	}
	if len(vs) > 1 {
		x.byPrefix[p] = slices.Delete(vs, i, i+1)
		return
	}
	delete(x.byPrefix, p)
	f := family(p.Addr())
	if x.lengths[f][p.Bits()]--; x.lengths[f][p.Bits()] == 0 {
		delete(x.lengths[f], p.Bits())
		x.bits[f] = slices.DeleteFunc(x.bits[f], func(b int) bool { return b == p.Bits() })
	}
	if j, found := slices.BinarySearchFunc(x.sorted[f], p, comparePrefixes); found {
		x.sorted[f] = slices.Delete(x.sorted[f], j, j+1)
	}
}

// Len returns the number of distinct prefixes filed.
func (x *Index[V]) Len() int {
	if x == nil {
		return 0
	}
	return len(x.byPrefix)
}

// AppendContaining appends to dst the values of the prefixes that contain
// addr (its network and broadcast addresses included) and returns it.
func (x *Index[V]) AppendContaining(dst []V, addr netip.Addr) []V {
	if x == nil || !addr.IsValid() {
		return dst
	}
	for _, bits := range x.bits[family(addr)] {
		if p, err := addr.Prefix(bits); err == nil {
			dst = append(dst, x.byPrefix[p]...)
		}
	}
	return dst
}

// Containing returns the values of the prefixes that contain addr.
func (x *Index[V]) Containing(addr netip.Addr) []V { return x.AppendContaining(nil, addr) }

// Overlapping returns the values of the prefixes that overlap p: those that
// contain it (p itself included), then those inside it, by address.
func (x *Index[V]) Overlapping(p netip.Prefix) []V {
	if x == nil || !p.IsValid() {
		return nil
	}
	p = p.Masked()
	f := family(p.Addr())
	var out []V
	for _, bits := range x.bits[f] {
		if bits <= p.Bits() {
			q, _ := p.Addr().Prefix(bits) // bits is within the family's length
			out = append(out, x.byPrefix[q]...)
		}
	}
	sorted := x.sorted[f]
	i, _ := slices.BinarySearchFunc(sorted, p.Addr(), func(q netip.Prefix, a netip.Addr) int { return q.Addr().Compare(a) })
	for ; i < len(sorted) && p.Contains(sorted[i].Addr()); i++ {
		if sorted[i].Bits() > p.Bits() {
			out = append(out, x.byPrefix[sorted[i]]...)
		}
	}
	return out
}

// OverlappingAny returns the values of the prefixes that overlap one of
// ps, each once, sorted: a value filed under several prefixes (a
// ServiceCIDR's two CIDRs) is found once per prefix it overlaps.
func OverlappingAny[V cmp.Ordered](x *Index[V], ps []netip.Prefix) []V {
	var out []V
	for _, p := range ps {
		out = append(out, x.Overlapping(p)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}
