package rangeusage

import (
	"math/big"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

func addrs(ns string, ips ...string) []Address {
	var out []Address
	for _, ip := range ips {
		out = append(out, Address{IP: netip.MustParseAddr(ip), Namespace: ns})
	}
	return out
}

// TestComputeBands: a /24 has a 16-address static band (.1–.16) and 238
// dynamic addresses; .16 is the last static one, .17 the first dynamic.
func TestComputeBands(t *testing.T) {
	t.Parallel()
	var in []Address
	in = append(in, addrs("a", "10.0.0.1", "10.0.0.16", "10.0.0.17", "10.0.0.254")...)
	in = append(in, addrs("b", "10.0.0.2", "10.0.0.200")...)
	in = append(in, addrs("", "10.0.0.100")...)
	in = append(in, addrs("c", "10.9.9.9")...) // outside every CIDR
	u, err := Compute(model.IPAddress, []Range{{Prefix: netip.MustParsePrefix("10.0.0.0/24"), Source: "ServiceCIDR/kubernetes", Ready: true, Lifecycle: "draining"}}, in)
	if err != nil {
		t.Fatal(err)
	}
	want := CIDR{
		Family: subrange.IPv4, Prefix: netip.MustParsePrefix("10.0.0.0/24"), Source: "ServiceCIDR/kubernetes", Ready: true,
		Lifecycle: "draining", Services: 6, // the address of no namespace is held by no Service
		First: netip.MustParseAddr("10.0.0.1"), Last: netip.MustParseAddr("10.0.0.254"),
		Static: Band{Size: 16, Used: 3}, Dynamic: Band{Size: 238, Used: 4},
		Namespaces: []NamespaceCount{{"a", 4}, {"b", 2}, {NoNamespace, 1}},
	}
	if diff := cmp.Diff([]CIDR{want}, u.CIDRs, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("CIDRs (-want +got):\n%s", diff)
	}
	if len(u.Families) != 1 || u.Families[0].Size.Uint64() != 254 || u.Families[0].Used != 7 || u.Families[0].Outside != 1 {
		t.Errorf("family: %+v", u.Families)
	}
	if got := u.CIDRs[0].Total(); got.Free() != 247 || Round2(got.Percent()) != 2.76 {
		t.Errorf("total %+v: free %d, percent %v", got, got.Free(), got.Percent())
	}
}

// TestComputeLargeIPv6: two /64s are sized exactly (2·(2^64−1) overflows a
// uint64) without iterating them, and a nested /120 is counted in its own
// row but not twice in the family.
func TestComputeLargeIPv6(t *testing.T) {
	t.Parallel()
	ranges := []Range{
		{Prefix: netip.MustParsePrefix("fd00:1::/64"), Source: "ServiceCIDR/a", Ready: true},
		{Prefix: netip.MustParsePrefix("fd00:2::/64"), Source: "ServiceCIDR/b", Ready: true},
		{Prefix: netip.MustParsePrefix("fd00:1::/120"), Source: "ServiceCIDR/inner", Ready: false},
	}
	u, err := Compute(model.IPAddress, ranges, addrs("x", "fd00:1::5", "fd00:1::1:0", "fd00:2::ffff"))
	if err != nil {
		t.Fatal(err)
	}
	want := new(big.Int).Lsh(big.NewInt(1), 65)
	want.Sub(want, big.NewInt(2))
	f := u.Families[0]
	if f.Size.Cmp(want) != 0 || f.Used != 3 || f.Outside != 0 {
		t.Fatalf("family %s: size %v used %d outside %d, want size %v used 3", f.Family, f.Size, f.Used, f.Outside, want)
	}
	got := map[string][2]uint64{}
	for _, c := range u.CIDRs {
		got[c.Prefix.String()] = [2]uint64{c.Static.Used, c.Dynamic.Used}
	}
	wantUsed := map[string][2]uint64{"fd00:1::/64": {1, 1}, "fd00:1::/120": {1, 0}, "fd00:2::/64": {0, 1}}
	if diff := cmp.Diff(wantUsed, got); diff != "" {
		t.Errorf("per CIDR (static, dynamic) used (-want +got):\n%s", diff)
	}
	if s := u.CIDRs[0].Total().Size; s != 1<<64-1 {
		t.Errorf("/64 size %d", s)
	}
}
