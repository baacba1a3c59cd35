package main

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// defaultV4Base is where the IPv4 ServiceCIDRs start unless the default
// range holds some of them.
var defaultV4Base = netip.MustParseAddr("10.100.0.0")

// tenNet is the space the IPv4 ServiceCIDRs stay in.
var tenNet = netip.MustParsePrefix("10.0.0.0/8")

// placeV4 sets, from the default ServiceCIDR's IPv4 range (empty: keep
// --default-v4 and the /24s at 10.100.0.0), how many addresses that range
// counts in the fill and where the IPv4 ServiceCIDRs start: at
// 10.100.0.0, or right after the default range when it would hold some of
// them, so that no address is counted twice.
func (c *config) placeV4(defaultRange string) error {
	c.v4Base = defaultV4Base
	if defaultRange != "" {
		p, err := netip.ParsePrefix(defaultRange)
		if err != nil || !p.Addr().Is4() || p.Masked() != p || p.Bits() > 30 {
			return fmt.Errorf("--default-v4-range %q: want a masked IPv4 prefix of /30 or shorter", defaultRange)
		}
		c.defaultV4 = 1<<(32-p.Bits()) - 2 // network and broadcast are not handed out
		if c.v4CIDRs > 0 && overlaps(p, c.v4Base, lastV4(c.v4Base, c.v4CIDRs)) {
			// The first /24 after p's last address.
			c.v4Base = netip.PrefixFrom(addV4(lastOf(p), 256), 24).Masked().Addr()
		}
	}
	if c.v4CIDRs == 0 {
		return nil
	}
	last := lastV4(c.v4Base, c.v4CIDRs)
	if last.Less(c.v4Base) || !tenNet.Contains(c.v4Base) || !tenNet.Contains(last) {
		return fmt.Errorf("%d IPv4 /24s from %s leave 10.0.0.0/8", c.v4CIDRs, c.v4Base)
	}
	return nil
}

// v4Capacity is the IPv4 addresses the Services can take: the /24s' and
// the default range's, less the one the default/kubernetes Service holds.
func (c config) v4Capacity() int { return c.v4CIDRs*254 + c.defaultV4 - 1 }

// v4CIDR is the i-th IPv4 ServiceCIDR: the i-th /24 from base.
func v4CIDR(base netip.Addr, i int) netip.Prefix {
	return netip.PrefixFrom(addV4(base, uint32(i)<<8), 24)
}

// lastV4 is the last address of the n > 0 /24s from base.
func lastV4(base netip.Addr, n int) netip.Addr { return addV4(base, uint32(n)<<8-1) }

// overlaps reports whether p holds an address of [first, last].
func overlaps(p netip.Prefix, first, last netip.Addr) bool {
	return !lastOf(p).Less(first) && !last.Less(p.Addr())
}

// lastOf is the last address of the IPv4 prefix p.
func lastOf(p netip.Prefix) netip.Addr { return addV4(p.Addr(), uint32(1)<<(32-p.Bits())-1) }

// addV4 is a + n, wrapping around the IPv4 space.
func addV4(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(b[:])+n)))
}
