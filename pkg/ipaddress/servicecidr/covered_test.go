package servicecidr

import (
	"net/netip"
	"testing"
)

func TestCovered(t *testing.T) {
	t.Parallel()
	prefixes := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range s {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	tests := []struct {
		prefixes []netip.Prefix
		addr     string
		want     bool
	}{
		{prefixes("10.0.0.128/25"), "10.0.0.129", true},
		{prefixes("10.0.0.128/25"), "10.0.0.128", false}, // network address
		{prefixes("10.0.0.128/25"), "10.0.0.255", false}, // broadcast address
		{prefixes("10.0.0.128/25"), "10.0.0.254", true},
		{prefixes("10.0.0.128/25", "10.0.0.0/24"), "10.0.0.128", true}, // served by the /24
		{prefixes("fd00::/120"), "fd00::", false},
		{prefixes("fd00::/120"), "fd00::ff", true}, // the last IPv6 address is usable
		{prefixes("10.0.0.0/24"), "10.0.1.1", false},
	}
	for _, tt := range tests {
		if got := covered(tt.prefixes, netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("covered(%v, %s) = %v, want %v", tt.prefixes, tt.addr, got, tt.want)
		}
	}
}

// TestFamilySelector: the live confirmation lists only the IPAddresses of a
// single-family ServiceCIDR's family.
func TestFamilySelector(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cidrs []string
		want  string
	}{
		{[]string{"10.0.0.0/24"}, "ipaddress.kubernetes.io/ip-family=IPv4"},
		{[]string{"fd00::/112"}, "ipaddress.kubernetes.io/ip-family=IPv6"},
		{[]string{"10.0.0.0/24", "fd00::/112"}, ""},
		{nil, ""},
	} {
		var ps []netip.Prefix
		for _, c := range tt.cidrs {
			ps = append(ps, netip.MustParsePrefix(c))
		}
		if got := familySelector(ps); got != tt.want {
			t.Errorf("familySelector(%v) = %q, want %q", tt.cidrs, got, tt.want)
		}
	}
}
