package renumber

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestKeepOffset: a static-band address of the source range maps to the
// address at the same offset from the target's network address, in either
// family and between ranges of different sizes; an address of the dynamic
// band has no offset to keep; an offset beyond the target's static band is
// kept, one beyond its usable addresses (or of another family) is refused.
func TestKeepOffset(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name     string
		from, to string
		ip       string
		want     string // "" when the offset cannot be kept
		n        uint64
		static   bool
		beyond   bool // the error is ErrOffsetBeyond
	}{
		{name: "kube-dns, /16 to /16", from: "10.96.0.0/16", to: "10.100.0.0/16", ip: "10.96.0.10", want: "10.100.0.10", n: 10, static: true},
		{name: "first address", from: "10.96.0.0/16", to: "10.100.0.0/16", ip: "10.96.0.1", want: "10.100.0.1", n: 1, static: true},
		{name: "last of a /16's static band (256)", from: "10.96.0.0/16", to: "10.100.0.0/16", ip: "10.96.1.0", want: "10.100.1.0", n: 256, static: true},
		{name: "first of a /16's dynamic band", from: "10.96.0.0/16", to: "10.100.0.0/16", ip: "10.96.1.1"},
		{name: "kubeadm's /12 to a /16", from: "10.96.0.0/12", to: "10.100.0.0/16", ip: "10.96.0.10", want: "10.100.0.10", n: 10, static: true},
		{name: "/24 (band 16) to a /16", from: "10.1.0.0/24", to: "10.100.0.0/16", ip: "10.1.0.16", want: "10.100.0.16", n: 16, static: true},
		{name: "/24 dynamic band", from: "10.1.0.0/24", to: "10.100.0.0/16", ip: "10.1.0.17"},
		{name: "/28 has no static band", from: "10.1.0.0/28", to: "10.100.0.0/16", ip: "10.1.0.2"},
		{name: "beyond the target's static band, inside it", from: "10.96.0.0/16", to: "10.100.0.0/24", ip: "10.96.0.200", want: "10.100.0.200", n: 200, static: true},
		{name: "beyond the target's usable addresses", from: "10.96.0.0/16", to: "10.100.0.0/28", ip: "10.96.0.20", n: 20, static: true, beyond: true},
		{name: "the target's broadcast address", from: "10.96.0.0/16", to: "10.100.0.0/28", ip: "10.96.0.15", n: 15, static: true, beyond: true},
		{name: "the target's last usable address", from: "10.96.0.0/16", to: "10.100.0.0/28", ip: "10.96.0.14", want: "10.100.0.14", n: 14, static: true},
		{name: "a target without usable addresses", from: "10.96.0.0/16", to: "10.100.0.0/31", ip: "10.96.0.1", n: 1, static: true, beyond: true},
		{name: "outside the source", from: "10.96.0.0/16", to: "10.100.0.0/16", ip: "10.97.0.10"},
		{name: "the source's network address", from: "10.96.0.0/16", to: "10.100.0.0/16", ip: "10.96.0.0"},
		{name: "IPv6 /112 to /64", from: "fd00:96::/112", to: "fd00:100::/64", ip: "fd00:96::a", want: "fd00:100::a", n: 10, static: true},
		{name: "IPv6 /64 band edge", from: "fd00:96::/64", to: "fd00:100::/108", ip: "fd00:96::100", want: "fd00:100::100", n: 256, static: true},
		{name: "IPv6 /64 dynamic band", from: "fd00:96::/64", to: "fd00:100::/108", ip: "fd00:96::101"},
		{name: "IPv6 target's last address is usable", from: "fd00:96::/112", to: "fd00:100::/124", ip: "fd00:96::f", want: "fd00:100::f", n: 15, static: true},
		{name: "IPv6 beyond a /124", from: "fd00:96::/112", to: "fd00:100::/124", ip: "fd00:96::10", n: 16, static: true, beyond: true},
		{name: "another family", from: "10.96.0.0/16", to: "fd00:100::/64", ip: "10.96.0.10", n: 10, static: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			off, static, err := KeepOffset(p(tc.from), p(tc.to), a(tc.ip))
			if static != tc.static {
				t.Fatalf("static %v, want %v", static, tc.static)
			}
			if tc.want == "" {
				if static && err == nil {
					t.Fatalf("kept as %s, want an error", off.New)
				}
				if errors.Is(err, ErrOffsetBeyond) != tc.beyond {
					t.Errorf("error %v: ErrOffsetBeyond %v, want %v", err, !tc.beyond, tc.beyond)
				}
				if static && off.N != tc.n {
					t.Errorf("offset %d, want %d", off.N, tc.n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Offset{Old: a(tc.ip), New: a(tc.want), N: tc.n}, off, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" {
				t.Errorf("offset (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOffsetChanges: a created Service that holds the offset's address keeps
// it; one that holds another address of the family reports it.
func TestOffsetChanges(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	offsets := []Offset{{Old: a("10.96.0.10"), New: a("10.100.0.10"), N: 10}, {Old: a("fd00:96::a"), New: a("fd00:100::a"), N: 10}}
	created := []netip.Addr{a("10.100.0.10"), a("fd00:100::1:2")}
	want := []string{"static-band address fd00:96::a was to keep its offset 10 as fd00:100::a, is now fd00:100::1:2"}
	if diff := cmp.Diff(want, offsetChanges(offsets, created)); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if kept := keptOffsets(offsets, created); len(kept) != 1 || kept[0] != offsets[0] {
		t.Errorf("kept %v, want the IPv4 offset only", kept)
	}
	if off, ok := takenOffset(errors.New(`Service "x" is invalid: spec.clusterIPs: Invalid value: []string{"fd00:100::a"}: failed to allocate IP fd00:100::a: provided IP is already allocated`), offsets); !ok || off != offsets[1] {
		t.Errorf("takenOffset: %v %v, want the IPv6 offset", off, ok)
	}
	if _, ok := takenOffset(errors.New("failed to allocate IP 10.100.0.1: provided IP is already allocated"), offsets); ok {
		t.Error("takenOffset took 10.100.0.1 for 10.100.0.10")
	}
}

// TestChooseWithTo: with --to, each moved static-band address is pinned at
// its offset in --to's CIDR of its family, the other moved addresses come
// from the Picker, which never hands out a reserved offset; a held offset
// address, one beyond --to and one inside --from leave the Service.
func TestChooseWithTo(t *testing.T) {
	t.Parallel()
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	// --to: an IPv4 /27 (30 usable, static band 16) and an IPv6 /120 (255
	// usable); --from's IPv6 /112 has a static band of 256.
	picker, err := NewPicker([]string{"10.2.0.0/27", "fd00:2::/120"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: Config{From: "old", To: "new"}, prefixes: []netip.Prefix{p("10.1.0.0/24"), p("fd00:1::/112")}, picker: picker,
		holders: map[netip.Addr]string{a("10.2.0.11"): "Service a/x"}}
	picker.Taken(a("10.2.0.11")) // as plan marks what holders lists
	cand := func(moved ...string) Candidate {
		c := Candidate{}
		for _, m := range moved {
			c.Moved = append(c.Moved, a(m))
		}
		return c
	}
	r.reserveOffsets([]Candidate{cand("10.1.0.10"), cand("10.1.0.12", "fd00:1::c")})
	for _, tc := range []struct {
		name    string
		moved   []string
		want    Pins
		offsets int
		err     string
	}{
		{name: "static", moved: []string{"10.1.0.10"}, want: Pins{false: a("10.2.0.10")}, offsets: 1},
		{name: "dual-stack static", moved: []string{"10.1.0.12", "fd00:1::c"}, want: Pins{false: a("10.2.0.12"), true: a("fd00:2::c")}, offsets: 2},
		{name: "static and dynamic", moved: []string{"10.1.0.13", "fd00:1::1:0"}, want: Pins{false: a("10.2.0.13"), true: a("fd00:2::11")}, offsets: 1},
		{name: "dynamic", moved: []string{"10.1.0.100"}, want: Pins{false: a("10.2.0.17")}},
		{name: "held", moved: []string{"10.1.0.11"}, err: "10.1.0.11 is in the static band and keeps its offset 11 as 10.2.0.11, which Service a/x holds"},
		{name: "beyond --to", moved: []string{"fd00:1::100"}, err: "offset 256 is beyond the usable addresses of fd00:2::/120 (255)"},
	} {
		pins, offsets, err := r.choose(t.Context(), cand(tc.moved...), true)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--keep-static-offsets=false") {
				t.Errorf("%s: error %v, want %q and the advice", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, pins, cmp.Comparer(func(x, y netip.Addr) bool { return x == y })); diff != "" || len(offsets) != tc.offsets {
			t.Errorf("%s: pins (-want +got):\n%s; %d offsets, want %d", tc.name, diff, len(offsets), tc.offsets)
		}
	}
	// The Picker hands out every other address of the /27 and none of the
	// reserved or held offsets.
	for range 40 {
		ip, ok := picker.Next(false)
		if !ok {
			break
		}
		if ip == a("10.2.0.10") || ip == a("10.2.0.11") || ip == a("10.2.0.12") {
			t.Errorf("the Picker handed out %s, a kept offset's address", ip)
		}
	}
	// An offset inside --from: --to overlaps it.
	overlap, _ := NewPicker([]string{"10.1.0.0/23"}, nil)
	r2 := &runner{cfg: Config{From: "old", To: "wide"}, prefixes: []netip.Prefix{p("10.1.0.0/24")}, picker: overlap}
	if _, _, err := r2.choose(t.Context(), cand("10.1.0.10"), true); err == nil || !strings.Contains(err.Error(), "10.1.0.10 of 10.1.0.0/23 is inside --from old") {
		t.Errorf("an offset inside --from: %v", err)
	}
	if pins, offsets, err := r2.choose(t.Context(), cand("10.1.0.10"), false); err != nil || len(offsets) != 0 || pins[false] == a("10.1.0.10") {
		t.Errorf("offsets not kept: pins %v offsets %v err %v, want a Picker's address", pins, offsets, err)
	}
}
