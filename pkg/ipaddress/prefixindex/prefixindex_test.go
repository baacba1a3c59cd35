package prefixindex

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func entries(prefixes ...string) []Entry[string] {
	var out []Entry[string]
	for _, p := range prefixes {
		out = append(out, Entry[string]{Prefix: netip.MustParsePrefix(p), Value: p})
	}
	return out
}

func TestContaining(t *testing.T) {
	x := New(entries("10.0.0.0/8", "10.0.0.0/24", "10.0.1.0/24", "10.0.0.0/24", "fd00::/112", "fd00::/64", "10.0.0.7/32"))
	for _, tc := range []struct {
		addr string
		want []string
	}{
		{"10.0.0.7", []string{"10.0.0.7/32", "10.0.0.0/24", "10.0.0.0/24", "10.0.0.0/8"}},
		{"10.0.0.0", []string{"10.0.0.0/24", "10.0.0.0/24", "10.0.0.0/8"}},
		{"10.0.1.255", []string{"10.0.1.0/24", "10.0.0.0/8"}},
		{"10.1.0.1", []string{"10.0.0.0/8"}},
		{"11.0.0.1", nil},
		{"fd00::1", []string{"fd00::/112", "fd00::/64"}},
		{"fd00::1:0", []string{"fd00::/64"}},
		{"::ffff:10.0.0.7", nil}, // an IPv4-mapped address is IPv6, as for netip.Prefix.Contains
	} {
		if diff := cmp.Diff(tc.want, x.Containing(netip.MustParseAddr(tc.addr))); diff != "" {
			t.Errorf("Containing(%s) (-want +got):\n%s", tc.addr, diff)
		}
	}
	if got := x.Containing(netip.Addr{}); got != nil {
		t.Errorf("Containing(invalid) = %v", got)
	}
	if got := (*Index[string])(nil).Containing(netip.MustParseAddr("10.0.0.1")); got != nil {
		t.Errorf("nil index: %v", got)
	}
}

func TestOverlapping(t *testing.T) {
	x := New(entries("10.0.0.0/8", "10.0.0.0/24", "10.0.1.0/24", "10.0.0.128/25", "10.1.0.0/16", "192.168.0.0/16", "fd00::/112", "fd00::/64"))
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"10.0.0.0/24", []string{"10.0.0.0/24", "10.0.0.0/8", "10.0.0.128/25"}},
		{"10.0.0.0/16", []string{"10.0.0.0/8", "10.0.0.0/24", "10.0.0.128/25", "10.0.1.0/24"}},
		{"10.0.0.5/16", []string{"10.0.0.0/8", "10.0.0.0/24", "10.0.0.128/25", "10.0.1.0/24"}}, // masked
		{"0.0.0.0/0", []string{"10.0.0.0/8", "10.0.0.0/24", "10.0.0.128/25", "10.0.1.0/24", "10.1.0.0/16", "192.168.0.0/16"}},
		{"10.2.0.0/16", []string{"10.0.0.0/8"}},
		{"11.0.0.0/8", nil},
		{"fd00::/48", []string{"fd00::/64", "fd00::/112"}},
		{"fd00::1:0/112", []string{"fd00::/64"}},
	} {
		if diff := cmp.Diff(tc.want, x.Overlapping(netip.MustParsePrefix(tc.prefix))); diff != "" {
			t.Errorf("Overlapping(%s) (-want +got):\n%s", tc.prefix, diff)
		}
	}
}

// scan is what the index must answer: every entry checked.
func scan(es []Entry[int], match func(netip.Prefix) bool) []int {
	var out []int
	for _, e := range es {
		if e.Prefix.IsValid() && match(e.Prefix.Masked()) {
			out = append(out, e.Value)
		}
	}
	slices.Sort(out)
	return out
}

func sorted(v []int) []int { slices.Sort(v); return v }

// FuzzIndex checks both lookups against a scan, after a build and after
// adds and removes: entries are built from the fuzzer's bytes, four bytes
// an entry (an address in a small space, so that prefixes meet, and a
// length); half of them are built with New, the rest added one by one, and
// those whose length byte is odd are then removed.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{10, 0, 0, 24, 10, 0, 1, 16, 10, 0, 0, 32, 10, 0, 0, 25}, []byte{10, 0, 0, 7}, uint8(20), false)
	f.Add([]byte{0xfd, 0, 1, 112, 0xfd, 0, 0, 64, 0xfd, 0, 0, 128, 0xfd, 0, 1, 113}, []byte{0xfd, 0, 1, 9}, uint8(100), true)
	f.Fuzz(func(t *testing.T, raw, probe []byte, bits uint8, v6 bool) {
		addr := func(b []byte) netip.Addr {
			var a4 [4]byte
			copy(a4[:], b)
			if !v6 {
				return netip.AddrFrom4(a4)
			}
			var a16 [16]byte
			a16[0], a16[2] = 0xfd, a4[0] // let high bits differ too
			copy(a16[12:], a4[:])
			return netip.AddrFrom16(a16)
		}
		var es []Entry[int]
		for i := 0; i+4 <= len(raw) && len(es) < 64; i += 4 {
			a := addr(raw[i : i+3])
			width := a.BitLen()
			es = append(es, Entry[int]{Prefix: netip.PrefixFrom(a, int(raw[i+3])%(width+2)-1), Value: len(es) % 5}) // -1..width: some invalid
		}
		x := New(es[:len(es)/2])
		for _, e := range es[len(es)/2:] {
			x.Add(e.Prefix, e.Value)
		}
		var live []Entry[int]
		for i, e := range es {
			if raw[4*i+3]%2 == 1 {
				x.Remove(e.Prefix, e.Value)
				continue
			}
			live = append(live, e)
		}
		if x.Len() > len(live) {
			t.Fatalf("Len() = %d, more than the %d entries left", x.Len(), len(live))
		}
		ip := addr(probe)
		if diff := cmp.Diff(scan(live, func(p netip.Prefix) bool { return p.Contains(ip) }), sorted(x.Containing(ip))); diff != "" {
			t.Fatalf("Containing(%s) against a scan (-scan +index):\n%s", ip, diff)
		}
		p := netip.PrefixFrom(ip, int(bits)%(ip.BitLen()+1))
		if diff := cmp.Diff(scan(live, p.Masked().Overlaps), sorted(x.Overlapping(p))); diff != "" {
			t.Fatalf("Overlapping(%s) against a scan (-scan +index):\n%s", p, diff)
		}
	})
}

func TestAddRemove(t *testing.T) {
	var x Index[string]
	x.Add(netip.MustParsePrefix("10.0.0.0/24"), "a")
	x.Add(netip.MustParsePrefix("10.0.0.0/24"), "b")
	x.Add(netip.MustParsePrefix("10.0.0.0/16"), "c")
	x.Add(netip.Prefix{}, "invalid")
	x.Remove(netip.MustParsePrefix("10.0.0.0/24"), "a")
	x.Remove(netip.MustParsePrefix("10.0.0.0/24"), "missing")
	x.Remove(netip.MustParsePrefix("10.9.0.0/24"), "b")
	if diff := cmp.Diff([]string{"b", "c"}, x.Containing(netip.MustParseAddr("10.0.0.1"))); diff != "" {
		t.Errorf("after removing a (-want +got):\n%s", diff)
	}
	x.Remove(netip.MustParsePrefix("10.0.0.0/24"), "b")
	if diff := cmp.Diff([]string{"c"}, x.Overlapping(netip.MustParsePrefix("10.0.0.0/25"))); diff != "" {
		t.Errorf("after removing b (-want +got):\n%s", diff)
	}
	if x.Len() != 1 || len(x.bits[0]) != 1 || len(x.sorted[0]) != 1 {
		t.Errorf("Len %d, bits %v, sorted %v: the /24 is still filed", x.Len(), x.bits[0], x.sorted[0])
	}
}

func TestOverlappingAny(t *testing.T) {
	x := New([]Entry[string]{
		{netip.MustParsePrefix("10.0.0.0/24"), "b"},
		{netip.MustParsePrefix("fd00::/112"), "b"},
		{netip.MustParsePrefix("10.0.0.0/16"), "a"},
		{netip.MustParsePrefix("10.9.0.0/16"), "c"},
	})
	got := OverlappingAny(x, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/25"), netip.MustParsePrefix("fd00::/64")})
	if diff := cmp.Diff([]string{"a", "b"}, got); diff != "" {
		t.Errorf("OverlappingAny (-want +got):\n%s", diff)
	}
}
