package renumber

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func typesUID(s string) types.UID { return types.UID(s) }

// TestPicker: addresses come from the dynamic band up, skip taken ones,
// wrap into the static band, and run out.
func TestPicker(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	// A /27: 30 usable addresses, the first 16 the static band.
	p, err := NewPicker([]string{"10.2.0.0/27", "fd00:2::/120"}, []netip.Addr{a("10.2.0.17"), a("10.2.0.19")})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for range 4 {
		ip, ok := p.Next(false)
		if !ok {
			t.Fatal("ran out early")
		}
		got = append(got, ip.String())
	}
	p.Taken(a("10.2.0.24"))
	for range 2 {
		ip, _ := p.Next(false)
		got = append(got, ip.String())
	}
	if diff := cmp.Diff([]string{"10.2.0.18", "10.2.0.20", "10.2.0.21", "10.2.0.22", "10.2.0.23", "10.2.0.25"}, got); diff != "" {
		t.Errorf("picks (-want +got):\n%s", diff)
	}
	n := len(got)
	for ; n < 40; n++ {
		if _, ok := p.Next(false); !ok {
			break
		}
	}
	if n != 30-2-1 { // 30 usable, two taken at the start, one marked
		t.Errorf("%d picks before running out, want %d", n, 27)
	}
	if v6, ok := p.Next(true); !ok || v6 != a("fd00:2::11") {
		t.Errorf("first IPv6 pick %s %v, want fd00:2::11 (the dynamic band of a /120 starts after 16)", v6, ok)
	}
	if _, err := NewPicker([]string{"10.2.0.0/33"}, nil); err == nil {
		t.Error("NewPicker accepted a bad CIDR")
	}
	empty, _ := NewPicker([]string{"10.2.0.0/24"}, nil)
	if empty.Has(true) {
		t.Error("an IPv4-only Picker has IPv6")
	}
}
