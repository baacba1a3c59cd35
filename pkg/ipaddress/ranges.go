package ipaddress

import (
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/prefixindex"
	"github.com/allocator/allocator/pkg/subrange"
)

// cidrRange is the per-CIDR allocator state: its range, order key and index.
type cidrRange struct {
	activeRange
	index *FreeIndex
	// mode is the lifecycle that governs the range's addresses: the most
	// closed of its carriers' and of those of every served range holding
	// it (lifecycle.go); closedBy names the ServiceCIDRs that set it when
	// it is not automatic.
	mode     lifecycle.Mode
	closedBy []string
	// holes are the addresses of the served ranges nested inside this one
	// that take no dynamic pick: a pick from this range passes over them.
	holes holes
	// own is the most closed of its carriers' lifecycles, ownBy the
	// carriers that set it when it is not automatic (ownMode).
	own   lifecycle.Mode
	ownBy []string
	// pos is the range's position in Allocator.ranges; -1 while it is
	// taken out of them (served.go). upos is its position in
	// Allocator.unscoped, -1 when it is not there.
	pos, upos int
}

// rangeLookup finds the served ranges whose prefix holds an address
// (prefixindex), not by looking at every range: an informer event or a
// claim marks its address in each, and with a thousand ServiceCIDRs a look
// at every range would cost about a thirtieth of a create's CPU
// (hack/scale.sh). It is kept with the ranges, a range added or removed at
// a time (served.go).
type rangeLookup struct {
	prefixes *prefixindex.Index[*cidrRange]
}

func newRangeLookup(ranges []*cidrRange) rangeLookup {
	entries := make([]prefixindex.Entry[*cidrRange], len(ranges))
	for i, r := range ranges {
		entries[i] = prefixindex.Entry[*cidrRange]{Prefix: r.rng.Prefix(), Value: r}
	}
	return rangeLookup{prefixes: prefixindex.New(entries)}
}

// appendHolding appends to dst the ranges whose prefix holds ip (its
// network and broadcast addresses included: the caller asks the range).
func (l rangeLookup) appendHolding(dst []*cidrRange, ip netip.Addr) []*cidrRange {
	return l.prefixes.AppendContaining(dst, ip)
}

// Ranges returns the served prefixes in allocation order.
func (a *Allocator) Ranges() []netip.Prefix {
	a.lock()
	defer a.mu.Unlock()
	out := make([]netip.Prefix, len(a.ranges))
	for i, r := range a.ranges {
		out[i] = r.rng.Prefix()
	}
	return out
}

// CIDROf returns the first served prefix, in allocation order, that
// contains ip, or the first served prefix when none does; false when no
// prefix is served. It copies nothing: the metrics name the CIDR of every
// allocation with it, and a copy of the ranges per call (Ranges) would be
// about a tenth of the bytes the server allocates at 1,000 ServiceCIDRs
// (hack/scale.sh).
func (a *Allocator) CIDROf(ip netip.Addr) (netip.Prefix, bool) {
	a.lock()
	defer a.mu.Unlock()
	if len(a.ranges) == 0 {
		return netip.Prefix{}, false
	}
	first := len(a.ranges) // none holds ip
	var buf [4]*cidrRange
	for _, r := range a.lookup.appendHolding(buf[:0], ip) {
		if r.pos < first && r.rng.Contains(ip) {
			first = r.pos
		}
	}
	if first == len(a.ranges) {
		first = 0
	}
	return a.ranges[first].rng.Prefix(), true
}

// Refused returns the CIDRs of ready ServiceCIDRs of this family that are not
// served, with the reason.
func (a *Allocator) Refused() []RefusedCIDR {
	a.lock()
	defer a.mu.Unlock()
	return slices.Clone(a.refused)
}

// rebuildLocked recomputes the served ranges from every ServiceCIDR in the
// cache: the first build, and the one after an event it cannot name. It
// keeps the index of every prefix still served and builds new ones
// (newIndexLocked). It returns the CIDRs refused now that were not refused
// before. An event that names its ServiceCIDR costs an applyLocked of it
// instead (served.go).
func (a *Allocator) rebuildLocked() []RefusedCIDR {
	cidrs, err := a.cidrLister.List(labels.Everything())
	if err != nil {
		a.logger.Error(err, "list ServiceCIDRs from cache")
		return nil
	}
	all := servedByAll(cidrs, a.ipv6)
	active, refused := assemble(all)
	ranges := make([]*cidrRange, 0, len(active))
	built := make([]cidrRange, len(active)) // one allocation for the ranges, not one each
	for i, ar := range active {
		idx := a.indexOf(ar.rng.Prefix())
		if idx == nil {
			if idx, err = a.newIndexLocked(ar.rng); err != nil {
				continue
			}
		}
		built[i] = cidrRange{activeRange: ar, index: idx}
		ranges = append(ranges, &built[i])
	}
	a.served = make(map[string]*served, len(all))
	for _, s := range all {
		a.served[s.carrier.name] = s
	}
	a.setRangesLocked(ranges)

	var fresh []RefusedCIDR
	for _, r := range refused {
		if !slices.ContainsFunc(a.refused, func(o RefusedCIDR) bool {
			return o.ServiceCIDR == r.ServiceCIDR && o.CIDR == r.CIDR
		}) {
			fresh = append(fresh, r)
		}
	}
	a.refused = refused
	return fresh
}

// indexOf returns the index of the served range of prefix p, nil when none
// is served.
func (a *Allocator) indexOf(p netip.Prefix) *FreeIndex {
	if r := a.byPrefix[p]; r != nil {
		return r.index
	}
	return nil
}

// newIndexLocked builds the index of a range newly served: the cached
// IPAddresses inside it, plus the claims in flight and those not yet seen
// by the informer.
func (a *Allocator) newIndexLocked(rng subrange.Range) (*FreeIndex, error) {
	idx, err := NewFreeIndex(rng)
	if err != nil {
		a.logger.Error(err, "build free index", "cidr", rng.Prefix())
		return nil, err
	}
	for _, ip := range a.cachedAddrs(rng.Prefix()) {
		idx.Set(ip)
	}
	for ip := range a.inflight {
		idx.Set(ip)
	}
	for ip := range a.unobserved {
		idx.Set(ip)
	}
	return idx, nil
}

// cachedAddrs returns the addresses of the cached IPAddresses inside p,
// named canonically: those of its blocks in the addrindex index, not a
// read of every IPAddress (a ServiceCIDR added at 100,000 IPAddresses);
// the whole family's (familyPrefix) is a scan of the cache's keys.
func (a *Allocator) cachedAddrs(p netip.Prefix) []netip.Addr {
	addrs, err := addrindex.Addresses(a.ipIndexer, []netip.Prefix{p}, subrange.ParseAddr)
	if err != nil {
		a.logger.Error(err, "list IPAddresses from cache", "cidr", p)
		return nil
	}
	return addrs
}

// familyPrefix is the prefix of every address of one family.
func familyPrefix(ipv6 bool) netip.Prefix {
	if ipv6 {
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
}

// setRangesLocked makes ranges, in allocation order, the served ones, with
// what is derived from them.
func (a *Allocator) setRangesLocked(ranges []*cidrRange) {
	a.ranges = ranges
	a.byPrefix = make(map[netip.Prefix]*cidrRange, len(ranges))
	var closed []prefixindex.Entry[*cidrRange]
	for i, r := range ranges {
		r.pos = i
		r.own, r.ownBy = ownMode(r.carriers)
		a.byPrefix[r.rng.Prefix()] = r
		if r.own != lifecycle.Automatic {
			closed = append(closed, prefixindex.Entry[*cidrRange]{Prefix: r.rng.Prefix(), Value: r})
		}
	}
	a.lookup = newRangeLookup(ranges)
	a.closed = prefixindex.New(closed)
	a.fullBefore = 0
	for _, r := range ranges {
		a.closeLocked(r)
	}
	a.splitScopesLocked()
}

// markLocked sets or clears ip in every served index that contains it, so
// overlapping ranges agree.
func (a *Allocator) markLocked(ip netip.Addr, used bool) {
	var buf [4]*cidrRange
	for _, r := range a.lookup.appendHolding(buf[:0], ip) {
		if used {
			r.index.Set(ip)
		} else if r.index.Clear(ip) {
			a.lowerFullLocked(r)
		}
	}
}

// lowerFullLocked moves the places before which every range is full or
// closed (fullBefore, unscopedFull) back to r, which may not be.
func (a *Allocator) lowerFullLocked(r *cidrRange) {
	a.fullBefore = min(a.fullBefore, r.pos)
	if r.upos >= 0 {
		a.unscopedFull = min(a.unscopedFull, r.upos)
	}
}

func (a *Allocator) containsLocked(ip netip.Addr) bool {
	var buf [4]*cidrRange
	for _, r := range a.lookup.appendHolding(buf[:0], ip) {
		if r.rng.Contains(ip) {
			return true
		}
	}
	return false
}
