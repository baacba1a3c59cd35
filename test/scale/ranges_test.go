package main

import (
	"net/netip"
	"testing"
)

func TestPlaceV4(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		defaultRange string
		v4CIDRs      int
		wantBase     string
		wantDefault  int
		wantCapacity int
		wantErr      bool
	}{
		{name: "flags as before", v4CIDRs: 392, wantBase: "10.100.0.0", wantDefault: 254, wantCapacity: 99821},
		{name: "a /24 default beside the /24s", defaultRange: "10.96.0.0/24", v4CIDRs: 392, wantBase: "10.100.0.0", wantDefault: 254, wantCapacity: 99821},
		{name: "a /12 holds 10.100", defaultRange: "10.96.0.0/12", v4CIDRs: 10, wantBase: "10.112.0.0", wantDefault: 1048574, wantCapacity: 1048574 + 2540 - 1},
		{name: "a /12 alone", defaultRange: "10.96.0.0/12", wantBase: "10.100.0.0", wantDefault: 1048574, wantCapacity: 1048573},
		{name: "a /26 inside the first /24", defaultRange: "10.100.0.0/26", v4CIDRs: 2, wantBase: "10.100.1.0", wantDefault: 62, wantCapacity: 62 + 508 - 1},
		{name: "the most /24s", v4CIDRs: 156 * 256, wantBase: "10.100.0.0", wantDefault: 254, wantCapacity: 156*256*254 + 253},
		{name: "past 10.255.255.255", v4CIDRs: 156*256 + 1, wantErr: true},
		{name: "a /12 leaves too little room", defaultRange: "10.96.0.0/12", v4CIDRs: 144*256 + 1, wantErr: true},
		{name: "not masked", defaultRange: "10.96.0.1/12", wantErr: true},
		{name: "IPv6", defaultRange: "fd00::/112", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := config{v4CIDRs: tc.v4CIDRs, defaultV4: 254}
			err := c.placeV4(tc.defaultRange)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("placeV4(%q) with %d /24s: no error, base %s", tc.defaultRange, tc.v4CIDRs, c.v4Base)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.v4Base.String(); got != tc.wantBase {
				t.Errorf("base %s, want %s", got, tc.wantBase)
			}
			if c.defaultV4 != tc.wantDefault || c.v4Capacity() != tc.wantCapacity {
				t.Errorf("default %d, capacity %d; want %d, %d", c.defaultV4, c.v4Capacity(), tc.wantDefault, tc.wantCapacity)
			}
			if tc.defaultRange != "" && tc.v4CIDRs > 0 {
				p := netip.MustParsePrefix(tc.defaultRange)
				for _, i := range []int{0, tc.v4CIDRs - 1} {
					if v4CIDR(c.v4Base, i).Overlaps(p) {
						t.Errorf("/24 %d (%s) overlaps the default range %s", i, v4CIDR(c.v4Base, i), p)
					}
				}
			}
		})
	}
}

func TestV4CIDR(t *testing.T) {
	t.Parallel()
	base := netip.MustParseAddr("10.100.0.0")
	for i, want := range map[int]string{0: "10.100.0.0/24", 255: "10.100.255.0/24", 256: "10.101.0.0/24", 391: "10.101.135.0/24"} {
		if got := v4CIDR(base, i).String(); got != want {
			t.Errorf("v4CIDR(%s, %d) = %s, want %s", base, i, got, want)
		}
	}
}
