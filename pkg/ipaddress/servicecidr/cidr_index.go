package servicecidr

import (
	"net/netip"
	"slices"
)

// cidrIndex is every ServiceCIDR with its prefixes and lifecycle, sorted by
// name, and the names of those holding each prefix. The ServiceCIDRs that
// contain an address are then found with one map lookup per prefix length
// in use (a few: /24s, /112s, the default range's), whatever their number:
// every IPAddress event looks them up, so no event's cost grows with the
// ServiceCIDRs.
type cidrIndex struct {
	list     []namedCIDR
	byPrefix map[netip.Prefix][]string
	bits     [2][]int // the prefix lengths in use: [0] IPv4, [1] IPv6, longest first
}

func newCIDRIndex(list []namedCIDR) *cidrIndex {
	x := &cidrIndex{list: list, byPrefix: map[netip.Prefix][]string{}}
	for _, o := range list {
		for _, p := range o.prefixes {
			p = p.Masked()
			if !slices.Contains(x.byPrefix[p], o.name) {
				x.byPrefix[p] = append(x.byPrefix[p], o.name)
			}
			f := family(p.Addr())
			if !slices.Contains(x.bits[f], p.Bits()) {
				x.bits[f] = append(x.bits[f], p.Bits())
			}
		}
	}
	for f := range x.bits {
		slices.SortFunc(x.bits[f], func(a, b int) int { return b - a })
	}
	return x
}

// containing returns the names of the ServiceCIDRs with a prefix that
// contains addr; a name may come more than once.
func (x *cidrIndex) containing(addr netip.Addr) []string {
	var out []string
	for _, bits := range x.bits[family(addr)] {
		p, err := addr.Prefix(bits)
		if err != nil {
			continue
		}
		out = append(out, x.byPrefix[p]...)
	}
	return out
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}
