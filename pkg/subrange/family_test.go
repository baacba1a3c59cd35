package subrange

import (
	"net/netip"
	"testing"

	"github.com/allocator/allocator/pkg/model"
)

func TestFamilyName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr string
		want string
	}{
		{"10.0.0.1", IPv4},
		{"0.0.0.0", IPv4},
		{"255.255.255.255", IPv4},
		{"fd00::1", IPv6},
		{"::", IPv6},
		{"2001:db8::ffff:ffff", IPv6},
		{"::ffff:10.0.0.1", IPv6}, // IPv4-mapped: an IPv6 address
	} {
		addr := netip.MustParseAddr(tt.addr)
		if got := FamilyName(addr.Is6()); got != tt.want {
			t.Errorf("FamilyName(%s.Is6()) = %q, want %q", tt.addr, got, tt.want)
		}
		if rng, err := New(netip.PrefixFrom(addr, addr.BitLen()-4).Masked(), model.IPAddress); err == nil {
			if got := FamilyName(rng.IPv6()); got != tt.want {
				t.Errorf("FamilyName(Range(%s).IPv6()) = %q, want %q", rng.Prefix(), got, tt.want)
			}
		}
	}
}
