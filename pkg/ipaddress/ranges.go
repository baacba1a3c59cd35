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
}

// rangeLookup finds the served ranges whose prefix holds an address
// (prefixindex), not by looking at every range: an informer event or a
// claim marks its address in each, and with a thousand ServiceCIDRs a look
// at every range would cost about a thirtieth of a create's CPU
// (hack/scale.sh).
type rangeLookup struct {
	prefixes *prefixindex.Index[int] // positions in the ranges it was built from
}

func newRangeLookup(ranges []*cidrRange) rangeLookup {
	entries := make([]prefixindex.Entry[int], len(ranges))
	for i, r := range ranges {
		entries[i] = prefixindex.Entry[int]{Prefix: r.rng.Prefix(), Value: i}
	}
	return rangeLookup{prefixes: prefixindex.New(entries)}
}

// appendHolding appends to dst the positions of the ranges whose prefix
// holds ip (its network and broadcast addresses included: the caller asks
// the range).
func (l rangeLookup) appendHolding(dst []int, ip netip.Addr) []int {
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
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		if i < first && a.ranges[i].rng.Contains(ip) {
			first = i
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

// rebuildLocked recomputes the served ranges from the ServiceCIDR cache. It
// keeps the index of every prefix still served and builds new ones from the
// IPAddress cache plus the in-flight claims. It returns the CIDRs refused now
// that were not refused before.
func (a *Allocator) rebuildLocked() []RefusedCIDR {
	cidrs, err := a.cidrLister.List(labels.Everything())
	if err != nil {
		a.logger.Error(err, "list ServiceCIDRs from cache")
		return nil
	}
	active, refused := selectRanges(cidrs, a.ipv6)
	old := make(map[netip.Prefix]*FreeIndex, len(a.ranges))
	for _, r := range a.ranges {
		old[r.rng.Prefix()] = r.index
	}
	ranges := make([]*cidrRange, 0, len(active))
	built := make([]cidrRange, len(active)) // one allocation for the ranges, not one each
	for i, ar := range active {
		idx := old[ar.rng.Prefix()]
		if idx == nil {
			if idx, err = NewFreeIndex(ar.rng); err != nil {
				a.logger.Error(err, "build free index", "cidr", ar.rng.Prefix())
				continue
			}
			for _, ip := range a.cachedAddrs(ar.rng.Prefix()) {
				idx.Set(ip)
			}
			for ip := range a.inflight {
				idx.Set(ip)
			}
			for ip := range a.unobserved {
				idx.Set(ip)
			}
		}
		built[i] = cidrRange{activeRange: ar, index: idx}
		ranges = append(ranges, &built[i])
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

// setRangesLocked makes ranges the served ones, with what is derived from
// them.
func (a *Allocator) setRangesLocked(ranges []*cidrRange) {
	a.ranges = ranges
	a.lookup = newRangeLookup(ranges)
	a.fullBefore = 0
	a.closeRangesLocked()
	a.splitScopesLocked()
}

// markLocked sets or clears ip in every served index that contains it, so
// overlapping ranges agree.
func (a *Allocator) markLocked(ip netip.Addr, used bool) {
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		r := a.ranges[i]
		if used {
			r.index.Set(ip)
		} else if r.index.Clear(ip) && i < a.fullBefore {
			a.fullBefore = i
		}
	}
}

func (a *Allocator) containsLocked(ip netip.Addr) bool {
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		if a.ranges[i].rng.Contains(ip) {
			return true
		}
	}
	return false
}
