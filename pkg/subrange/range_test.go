package subrange

import (
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/allocator/allocator/pkg/model"
)

func TestStaticBandSize(t *testing.T) {
	t.Parallel()
	// design.md §3 examples, plus the edges of every clamp.
	tests := []struct {
		prefix string
		want   uint64
	}{
		{"10.0.0.0/32", 0}, {"10.0.0.0/31", 0}, {"10.0.0.0/30", 0}, {"10.0.0.0/29", 0},
		{"10.0.0.0/28", 0}, {"10.0.0.0/27", 16}, {"10.0.0.0/26", 16}, {"10.0.0.0/25", 16},
		{"10.0.0.0/24", 16}, {"10.0.0.0/23", 32}, {"10.0.0.0/22", 64}, {"10.0.0.0/21", 128},
		{"10.0.0.0/20", 256}, {"10.0.0.0/16", 256}, {"10.0.0.0/12", 256}, {"10.0.0.0/8", 256},
		{"0.0.0.0/0", 256},
		{"fd00::/128", 0}, {"fd00::/127", 0}, {"fd00::/124", 0}, {"fd00::/123", 16},
		{"fd00::/122", 16}, {"fd00::/120", 16}, {"fd00::/119", 32}, {"fd00::/118", 64},
		{"fd00::/117", 128}, {"fd00::/116", 256}, {"fd00::/112", 256}, {"fd00::/108", 256},
		{"fd00::/65", 256}, {"fd00::/64", 256}, {"fd00::/1", 256}, {"::/0", 256},
	}
	for _, tt := range tests {
		if got := StaticBandSize(netip.MustParsePrefix(tt.prefix)); got != tt.want {
			t.Errorf("StaticBandSize(%s) = %d, want %d", tt.prefix, got, tt.want)
		}
	}
}

func TestNewUsableRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prefix      string
		model       model.Name
		first, last string // empty when the range has no usable address
		size        uint64
		static      uint64
	}{
		// IPv4 is the same in both models.
		{"10.0.0.0/24", model.Bitmap, "10.0.0.1", "10.0.0.254", 254, 16},
		{"10.0.0.0/24", model.IPAddress, "10.0.0.1", "10.0.0.254", 254, 16},
		{"10.96.0.0/16", model.Bitmap, "10.96.0.1", "10.96.255.254", 65534, 256},
		{"10.0.0.0/12", model.Bitmap, "10.0.0.1", "10.15.255.254", 1048574, 256},
		{"10.0.0.0/8", model.IPAddress, "10.0.0.1", "10.255.255.254", 1<<24 - 2, 256},
		{"0.0.0.0/0", model.IPAddress, "0.0.0.1", "255.255.255.254", 1<<32 - 2, 256},
		{"10.0.0.0/27", model.Bitmap, "10.0.0.1", "10.0.0.30", 30, 16},
		{"10.0.0.0/28", model.Bitmap, "10.0.0.1", "10.0.0.14", 14, 0},
		{"10.0.0.0/30", model.IPAddress, "10.0.0.1", "10.0.0.2", 2, 0},
		{"10.0.0.0/31", model.Bitmap, "", "", 0, 0},
		{"10.0.0.0/31", model.IPAddress, "", "", 0, 0},
		{"10.0.0.0/32", model.IPAddress, "", "", 0, 0},
		// IPv6: the last address is usable.
		{"fd00::/120", model.Bitmap, "fd00::1", "fd00::ff", 255, 16},
		{"fd00::/120", model.IPAddress, "fd00::1", "fd00::ff", 255, 16},
		{"fd00:10:96::/112", model.Bitmap, "fd00:10:96::1", "fd00:10:96::ffff", 65535, 256},
		{"fd00::/126", model.IPAddress, "fd00::1", "fd00::3", 3, 0},
		{"fd00::/127", model.IPAddress, "fd00::1", "fd00::1", 1, 0},
		{"fd00::/127", model.Bitmap, "fd00::1", "fd00::1", 1, 0}, // kube-apiserver: 2^1 − 1 slots
		{"fd00::/128", model.IPAddress, "", "", 0, 0},
		{"fd00::/128", model.Bitmap, "", "", 0, 0},
		// The bitmap model caps IPv6 to 65,535 addresses after the network address.
		{"fd00::/108", model.Bitmap, "fd00::1", "fd00::ffff", 65535, 256},
		{"fd00::/64", model.Bitmap, "fd00::1", "fd00::ffff", 65535, 256},
		// The IPAddress model uses the whole /64.
		{"fd00::/64", model.IPAddress, "fd00::1", "fd00::ffff:ffff:ffff:ffff", math.MaxUint64, 256},
		{"fd00::/65", model.IPAddress, "fd00::1", "fd00::7fff:ffff:ffff:ffff", 1<<63 - 1, 256},
	}
	for _, tt := range tests {
		t.Run(tt.prefix+"/"+tt.model.String(), func(t *testing.T) {
			r, err := New(netip.MustParsePrefix(tt.prefix), tt.model)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if r.Size() != tt.size || r.StaticSize() != tt.static {
				t.Errorf("size/static = %d/%d, want %d/%d", r.Size(), r.StaticSize(), tt.size, tt.static)
			}
			if tt.first == "" {
				if r.First().IsValid() || r.Last().IsValid() {
					t.Errorf("empty range has First %v Last %v", r.First(), r.Last())
				}
				if r.Contains(netip.MustParsePrefix(tt.prefix).Addr()) {
					t.Errorf("empty range contains its network address")
				}
				return
			}
			if got := r.First().String(); got != tt.first {
				t.Errorf("First = %s, want %s", got, tt.first)
			}
			if got := r.Last().String(); got != tt.last {
				t.Errorf("Last = %s, want %s", got, tt.last)
			}
			if !r.Contains(r.First()) || !r.Contains(r.Last()) {
				t.Errorf("range does not contain its own first/last")
			}
			network := r.Prefix().Addr()
			if r.Contains(network) {
				t.Errorf("network address %s is usable", network)
			}
			if after := r.Last().Next(); after.IsValid() && r.Contains(after) {
				t.Errorf("address after Last (%s) is usable", after)
			}
			if before := network.Prev(); before.IsValid() && r.Contains(before) {
				t.Errorf("address before the network (%s) is usable", before)
			}
		})
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		prefix  netip.Prefix
		model   model.Name
		wantErr string
	}{
		{netip.MustParsePrefix("fd00::/63"), model.IPAddress, "shortest allowed prefix length for service CIDR is 64, got 63"},
		{netip.MustParsePrefix("fd00::/48"), model.IPAddress, "shortest allowed prefix length for service CIDR is 64, got 48"},
		{netip.MustParsePrefix("10.0.0.0/11"), model.Bitmap, "needs an IPv4 prefix of /12 or longer"},
		{netip.MustParsePrefix("10.0.0.1/24"), model.Bitmap, "host bits set"},
		{netip.MustParsePrefix("::ffff:10.0.0.0/120"), model.IPAddress, "IPv4-mapped"},
		{netip.Prefix{}, model.Bitmap, "invalid prefix"},
		{netip.MustParsePrefix("10.0.0.0/24"), model.Name("nine"), "unknown allocator model"},
	}
	for _, tt := range tests {
		_, err := New(tt.prefix, tt.model)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("New(%s, %v) error = %v, want it to contain %q", tt.prefix, tt.model, err, tt.wantErr)
		}
	}
	_, err := New(netip.MustParsePrefix("fd00::/48"), model.IPAddress)
	if !errors.Is(err, ErrPrefixTooLarge) {
		t.Errorf("errors.Is(%v, ErrPrefixTooLarge) = false", err)
	}
}

// TestIndexEdges128 checks 128-bit arithmetic at the edges of a /64.
func TestIndexEdges128(t *testing.T) {
	t.Parallel()
	r := MustNew(netip.MustParsePrefix("fd00::/64"), model.IPAddress)
	tests := []struct {
		index uint64
		addr  string
	}{
		{0, "fd00::1"},
		{1, "fd00::2"},
		{1<<63 - 1, "fd00::8000:0:0:0"},
		{1 << 63, "fd00::8000:0:0:1"},
		{math.MaxUint64 - 1, "fd00::ffff:ffff:ffff:ffff"},
	}
	for _, tt := range tests {
		addr, ok := r.Addr(tt.index)
		if !ok || addr.String() != tt.addr {
			t.Errorf("Addr(%d) = %v, %v; want %s", tt.index, addr, ok, tt.addr)
		}
		back, ok := r.Index(addr)
		if !ok || back != tt.index {
			t.Errorf("Index(%s) = %d, %v; want %d", addr, back, ok, tt.index)
		}
	}
	// Offset 2^64−1 is one past the last usable index: refused, never wrapped
	// into the next /64.
	if addr, ok := r.Addr(math.MaxUint64); ok {
		t.Errorf("Addr(2^64-1) = %s, want refused", addr)
	}
	if r.Last().String() != "fd00::ffff:ffff:ffff:ffff" || !r.Contains(r.Last()) {
		t.Errorf("last address of fd00::/64 not usable: %s", r.Last())
	}
	for _, outside := range []string{"fd00:0:0:1::", "fcff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fd00::", "10.0.0.1", "::ffff:10.0.0.1"} {
		if i, ok := r.Index(netip.MustParseAddr(outside)); ok {
			t.Errorf("Index(%s) = %d, want not contained", outside, i)
		}
	}
	zoned := netip.MustParseAddr("fd00::5%eth0")
	if r.Contains(zoned) {
		t.Errorf("zoned address %s is contained", zoned)
	}
}

// TestSmallRangesExhaustive walks every index of small ranges in both models
// and checks the round trip, containment and band boundaries.
func TestSmallRangesExhaustive(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"10.1.2.0/24", "10.1.2.128/25", "10.1.2.32/27", "10.1.2.16/28", "10.1.2.4/30",
		"10.1.2.2/31", "10.1.2.3/32", "fd00::100/120", "fd00::10/124", "fd00::4/126", "fd00::2/127", "fd00::1/128"} {
		prefix := netip.MustParsePrefix(p)
		for _, m := range []model.Name{model.Bitmap, model.IPAddress} {
			r := MustNew(prefix, m)
			seen := map[netip.Addr]bool{}
			for i := uint64(0); i < r.Size(); i++ {
				addr, ok := r.Addr(i)
				if !ok || !prefix.Contains(addr) || addr == prefix.Addr() || seen[addr] {
					t.Fatalf("%s %v: Addr(%d) = %s %v (seen %v)", p, m, i, addr, ok, seen[addr])
				}
				seen[addr] = true
				if back, ok := r.Index(addr); !ok || back != i {
					t.Fatalf("%s %v: Index(%s) = %d %v, want %d", p, m, addr, back, ok, i)
				}
				if got, want := r.InStaticBand(addr), i < r.StaticSize(); got != want {
					t.Fatalf("%s %v: InStaticBand(%s) = %v, want %v", p, m, addr, got, want)
				}
			}
			// Every other address of the prefix is unusable.
			usable := 0
			for addr := prefix.Addr(); prefix.Contains(addr); addr = addr.Next() {
				if r.Contains(addr) {
					usable++
				}
			}
			if uint64(usable) != r.Size() {
				t.Fatalf("%s %v: %d usable addresses found by scanning, Size() = %d", p, m, usable, r.Size())
			}
		}
	}
}

func TestZeroRange(t *testing.T) {
	t.Parallel()
	var r Range
	if r.Contains(netip.MustParseAddr("10.0.0.1")) || r.Size() != 0 {
		t.Fatalf("zero Range is not empty")
	}
	if _, ok := r.Addr(0); ok {
		t.Fatalf("zero Range returned an address")
	}
}

func FuzzIndexRoundTrip(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0}, uint8(24), uint64(5), true)
	f.Add([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(64), uint64(math.MaxUint64-1), false)
	f.Add([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(100), uint64(1<<27), true)
	f.Fuzz(func(t *testing.T, raw []byte, bitsLen uint8, index uint64, bitmap bool) {
		var addr netip.Addr
		switch len(raw) {
		case 4:
			addr = netip.AddrFrom4([4]byte(raw))
		case 16:
			addr = netip.AddrFrom16([16]byte(raw))
		default:
			return
		}
		if addr.Is4In6() {
			return
		}
		prefix, err := addr.Prefix(int(bitsLen) % (addr.BitLen() + 1))
		if err != nil {
			t.Fatal(err)
		}
		m := model.IPAddress
		if bitmap {
			m = model.Bitmap
		}
		r, err := New(prefix, m)
		if err != nil {
			return
		}
		got, ok := r.Addr(index)
		if ok != (index < r.Size()) {
			t.Fatalf("%s: Addr(%d) ok=%v with size %d", r, index, ok, r.Size())
		}
		if !ok {
			return
		}
		if !prefix.Contains(got) || got == prefix.Addr() {
			t.Fatalf("%s: Addr(%d) = %s is outside the usable prefix", r, index, got)
		}
		if back, ok := r.Index(got); !ok || back != index {
			t.Fatalf("%s: Index(Addr(%d) = %s) = %d, %v", r, index, got, back, ok)
		}
		if r.InStaticBand(got) != (index < r.StaticSize()) {
			t.Fatalf("%s: band of index %d wrong", r, index)
		}
	})
}
