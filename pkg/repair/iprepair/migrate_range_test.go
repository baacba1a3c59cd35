package iprepair

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/allocator/allocator/pkg/allocation"
)

// TestClaimsInRange: a claim is carried over when some ServiceCIDR prefix
// contains its address other than as the prefix's own (network) address,
// as a scan of every prefix decides; the others are reported out of range.
func TestClaimsInRange(t *testing.T) {
	t.Parallel()
	var prefixes []netip.Prefix
	for _, s := range []string{"10.0.0.0/24", "10.0.0.0/15", "10.1.0.0/24", "10.2.0.0/31", "fd00::/112", "fd00::100/120"} {
		prefixes = append(prefixes, netip.MustParsePrefix(s))
	}
	for i := range 1000 { // many more ServiceCIDRs, none of them containing the addresses below
		prefixes = append(prefixes, netip.MustParsePrefix(fmt.Sprintf("fd01::%x:0/112", i)))
	}
	scan := func(ip netip.Addr) bool {
		return slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(ip) && p.Addr() != ip })
	}
	tests := []struct {
		ip   string
		want bool
	}{
		{"10.0.0.5", true},
		{"10.0.0.0", false},    // the network address of both prefixes that contain it
		{"10.1.0.0", true},     // the /24's own address, inside the /15
		{"10.1.1.0", true},     // inside the /15 only
		{"10.2.0.0", false},    // a /31's own address, inside nothing else
		{"10.2.0.1", true},     // the /31's other address
		{"10.3.0.1", false},    // inside nothing
		{"fd00::100", true},    // the /120's own address, inside the /112
		{"fd00::1:1", false},   // past the /112
		{"fd01::3e7:5", true},  // inside the last of the many
		{"fd01::3e8:5", false}, // just past them
		{"192.168.0.1", false},
	}
	var claims []claim
	for i, tt := range tests {
		claims = append(claims, claim{ip: netip.MustParseAddr(tt.ip), owner: allocation.Owner{Namespace: "ns", Name: fmt.Sprint(i)}})
	}
	rep := &MigrationReport{}
	todo := claimsInRange(rep, claims, prefixes)
	var got []string
	for _, c := range todo {
		got = append(got, c.ip.String())
	}
	var want, reported []string
	for _, tt := range tests {
		if scan(netip.MustParseAddr(tt.ip)) != tt.want {
			t.Fatalf("the table disagrees with the scan on %s", tt.ip)
		}
		if tt.want {
			want = append(want, tt.ip)
		}
	}
	for _, p := range rep.Problems {
		reported = append(reported, p.IP)
	}
	if !slices.Equal(got, want) {
		t.Errorf("carried over %v, want %v", got, want)
	}
	if len(reported)+len(got) != len(tests) {
		t.Errorf("reported %v out of range, carried %v: %d claims in all, want %d", reported, got, len(reported)+len(got), len(tests))
	}
}

// BenchmarkClaimsInRange: the carry-over's range check of 100,000 claims
// over 10,000 ServiceCIDRs (IPv6 /112s), the claims in the last of them.
//
//	go test ./pkg/repair/iprepair/ -run '^$' -bench BenchmarkClaimsInRange -benchmem
func BenchmarkClaimsInRange(b *testing.B) {
	var prefixes []netip.Prefix
	for i := range 10_000 {
		prefixes = append(prefixes, netip.MustParsePrefix(fmt.Sprintf("fd00::%x:0/112", i)))
	}
	claims := make([]claim, 100_000)
	for i := range claims {
		claims[i] = claim{ip: netip.MustParseAddr(fmt.Sprintf("fd00::270f:%x", i%65535+1))}
	}
	b.ReportAllocs()
	for b.Loop() {
		if todo := claimsInRange(&MigrationReport{}, claims, prefixes); len(todo) != len(claims) {
			b.Fatalf("%d of %d claims in range", len(todo), len(claims))
		}
	}
}
