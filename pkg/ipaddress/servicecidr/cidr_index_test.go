package servicecidr

import (
	"net/netip"
	"slices"
	"testing"
)

// scan is what the index answers, by a scan of every ServiceCIDR.
func scan(list []namedCIDR, addr netip.Addr) []string {
	var out []string
	for _, o := range list {
		if slices.ContainsFunc(o.prefixes, func(p netip.Prefix) bool { return p.Contains(addr) }) {
			out = append(out, o.name)
		}
	}
	return out
}

func sortedSet(names []string) []string {
	names = slices.Clone(names)
	slices.Sort(names)
	return slices.Compact(names)
}

func testList() []namedCIDR {
	mp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	return []namedCIDR{
		{name: "default", prefixes: mp("10.96.0.0/12", "fd00::/108")},
		{name: "a", prefixes: mp("10.100.0.0/24")},
		{name: "b", prefixes: mp("10.100.0.0/24", "fd00:100::/112")},
		{name: "nested", prefixes: mp("10.100.0.128/25")},
		{name: "unmasked", prefixes: mp("10.200.0.7/24")}, // as parsed: prefixes() keeps what is stored
		{name: "v6wide", prefixes: mp("fd00::/64")},
		{name: "host", prefixes: mp("10.250.0.1/32")},
	}
}

// newCIDRIndex is an index of list, filed as the event handlers file them.
func newCIDRIndex(list []namedCIDR) *cidrIndex {
	x := &cidrIndex{}
	for _, o := range list {
		x.set(o)
	}
	return x
}

func TestCIDRIndexContaining(t *testing.T) {
	list := testList()
	x := newCIDRIndex(list)
	for _, c := range []struct {
		addr string
		want []string
	}{
		{"10.96.0.10", []string{"default"}},
		{"10.100.0.5", []string{"a", "b", "default"}},
		{"10.100.0.200", []string{"a", "b", "default", "nested"}},
		{"10.200.0.1", []string{"unmasked"}},
		{"10.250.0.1", []string{"host"}},
		{"10.250.0.2", nil},
		{"fd00::5", []string{"default", "v6wide"}},
		{"fd00:100::5", []string{"b"}},
		{"::ffff:10.96.0.10", nil}, // an IPv4-mapped IPv6 address is IPv6: no IPv4 range holds it
		{"192.168.0.1", nil},
	} {
		addr := netip.MustParseAddr(c.addr)
		got := sortedSet(x.containing(addr))
		if !slices.Equal(got, c.want) || !slices.Equal(got, sortedSet(scan(list, addr))) {
			t.Errorf("containing(%s) = %v, want %v (a scan: %v)", addr, got, c.want, sortedSet(scan(list, addr)))
		}
	}
	if got := newCIDRIndex(nil).containing(netip.MustParseAddr("10.0.0.1")); got != nil {
		t.Errorf("an empty index: %v", got)
	}
}

// FuzzCIDRIndex: the index answers as a scan of every ServiceCIDR.
func FuzzCIDRIndex(f *testing.F) {
	f.Add([]byte{10, 100, 0, 200}, uint8(24))
	f.Add([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, uint8(112))
	f.Fuzz(func(t *testing.T, raw []byte, bits uint8) {
		addr, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		list := testList()
		if p, err := addr.Prefix(int(bits) % (addr.BitLen() + 1)); err == nil {
			list = append(list, namedCIDR{name: "fuzzed", prefixes: []netip.Prefix{p}})
		}
		x := newCIDRIndex(list)
		if got, want := sortedSet(x.containing(addr)), sortedSet(scan(list, addr)); !slices.Equal(got, want) {
			t.Fatalf("containing(%s) = %v, a scan %v", addr, got, want)
		}
	})
}

func TestCIDRIndexOverlapping(t *testing.T) {
	x := newCIDRIndex(testList())
	names := func(os []namedCIDR) []string {
		var out []string
		for _, o := range os {
			out = append(out, o.name)
		}
		return out
	}
	for _, c := range []struct {
		prefixes []string
		want     []string
	}{
		{[]string{"10.100.0.0/24"}, []string{"a", "b", "default", "nested"}},
		{[]string{"10.100.0.0/25"}, []string{"a", "b", "default"}},
		{[]string{"10.200.0.0/16", "fd00:100::/64"}, []string{"b", "unmasked"}},
		{[]string{"fd00::/120"}, []string{"default", "v6wide"}},
		{[]string{"192.168.0.0/16"}, nil},
	} {
		var ps []netip.Prefix
		for _, p := range c.prefixes {
			ps = append(ps, netip.MustParsePrefix(p))
		}
		if got := names(x.overlapping(ps)); !slices.Equal(got, c.want) {
			t.Errorf("overlapping(%v) = %v, want %v", c.prefixes, got, c.want)
		}
	}
	// A record set again replaces the old one; a removed one is gone.
	x.set(namedCIDR{name: "a", prefixes: []netip.Prefix{netip.MustParsePrefix("10.101.0.0/24")}, deleting: true})
	x.remove("b")
	if got := names(x.overlapping([]netip.Prefix{netip.MustParsePrefix("10.100.0.0/24")})); !slices.Equal(got, []string{"default", "nested"}) {
		t.Errorf("after a moved and b removed: %v", got)
	}
	if got := names(x.terminating()); !slices.Equal(got, []string{"a"}) {
		t.Errorf("terminating() = %v, want [a]", got)
	}
}
