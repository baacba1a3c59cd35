package subrange

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/allocator/allocator/pkg/model"
)

const (
	// BitmapIPv6Cap is the most addresses the bitmap model serves from an IPv6
	// prefix: the first 65,535 after the network address.
	BitmapIPv6Cap = 65535
	// BitmapMinIPv4Bits is the shortest IPv4 prefix the bitmap model accepts.
	BitmapMinIPv4Bits = 12
	// MinIPv6Bits is the shortest IPv6 prefix the IPAddress model accepts.
	MinIPv6Bits = 64

	minStaticBand = 16
	maxStaticBand = 256
)

// ErrPrefixTooLarge matches the errors New returns for prefixes a model refuses.
var ErrPrefixTooLarge = errors.New("prefix too large")

// Range is the set of usable addresses of a prefix under one model, split
// into a static (lower) band and a dynamic (upper) band. The zero Range is
// empty and contains nothing. Range is a small comparable value.
type Range struct {
	prefix netip.Prefix
	model  model.Name
	first  netip.Addr // network+1
	size   uint64
	static uint64
}

// New returns the usable range of prefix under model. The prefix must be
// valid and masked (no host bits set).
func New(prefix netip.Prefix, m model.Name) (Range, error) {
	if !prefix.IsValid() {
		return Range{}, fmt.Errorf("invalid prefix %s", prefix)
	}
	if prefix.Addr().Is4In6() || prefix.Addr().Zone() != "" {
		return Range{}, fmt.Errorf("prefix %s: IPv4-mapped IPv6 and zones are not allowed", prefix)
	}
	if prefix.Masked() != prefix {
		return Range{}, fmt.Errorf("prefix %s has host bits set, the network is %s", prefix, prefix.Masked())
	}
	hostBits := prefix.Addr().BitLen() - prefix.Bits()
	r := Range{prefix: prefix, model: m}
	switch m {
	case model.Bitmap:
		if prefix.Addr().Is4() && prefix.Bits() < BitmapMinIPv4Bits {
			return Range{}, fmt.Errorf("%w: the bitmap model needs an IPv4 prefix of /%d or longer, got %s",
				ErrPrefixTooLarge, BitmapMinIPv4Bits, prefix)
		}
		r.size = bitmapSize(prefix.Addr().Is4(), hostBits)
	case model.IPAddress:
		if prefix.Addr().Is6() && prefix.Bits() < MinIPv6Bits {
			return Range{}, fmt.Errorf("%w: shortest allowed prefix length for service CIDR is %d, got %d",
				ErrPrefixTooLarge, MinIPv6Bits, prefix.Bits())
		}
		r.size = ipAddressSize(prefix.Addr().Is4(), hostBits)
	default:
		return Range{}, fmt.Errorf("unknown allocator model %q", m)
	}
	if r.size > 0 {
		r.first = prefix.Addr().Next()
	}
	r.static = min(StaticBandSize(prefix), r.size)
	return r, nil
}

// MustNew is New for constants in tests and examples; it panics on error.
func MustNew(prefix netip.Prefix, m model.Name) Range {
	r, err := New(prefix, m)
	if err != nil {
		panic(err)
	}
	return r
}

// bitmapSize counts the bitmap window: IPv4 drops network and broadcast; IPv6
// drops the network address and is capped to BitmapIPv6Cap: 2^hostBits − 1
// slots, so an IPv6 /127 has one (its last address) and a /128 none, exactly
// as kube-apiserver's bitmap (design.md §3): zero slots for a /127 would
// refuse a range kube-apiserver serves.
func bitmapSize(ipv4 bool, hostBits int) uint64 {
	if ipv4 {
		if hostBits < 2 {
			return 0
		}
		return 1<<hostBits - 2
	}
	if hostBits < 1 {
		return 0
	}
	if hostBits >= 16 {
		return BitmapIPv6Cap
	}
	return 1<<hostBits - 1
}

// ipAddressSize counts the IPAddress model's usable addresses: everything but
// the network address (and the IPv4 broadcast address). hostBits ≤ 64 here.
func ipAddressSize(ipv4 bool, hostBits int) uint64 {
	if ipv4 {
		if hostBits < 2 {
			return 0
		}
		return 1<<hostBits - 2
	}
	if hostBits == 64 {
		return 1<<64 - 1
	}
	return 1<<hostBits - 1
}

// StaticBandSize is the size of the static (lower) band of prefix (KEP-3070):
// min(max(16, raw/16), 256) where raw = 2^(host bits) saturated at 2^63−1, and 0
// when raw ≤ 16. It is the same in both models.
func StaticBandSize(prefix netip.Prefix) uint64 {
	hostBits := prefix.Addr().BitLen() - prefix.Bits()
	if hostBits <= 4 { // raw size ≤ 16
		return 0
	}
	raw := uint64(1<<63 - 1)
	if hostBits < 63 {
		raw = 1 << hostBits
	}
	return min(max(minStaticBand, raw/16), maxStaticBand)
}

// Prefix is the service CIDR this range was built from.
func (r Range) Prefix() netip.Prefix { return r.prefix }

// Model is the allocator model whose rules built this range.
func (r Range) Model() model.Name { return r.model }

// Size is the number of usable addresses.
func (r Range) Size() uint64 { return r.size }

// StaticSize is the number of addresses in the static (lower) band.
func (r Range) StaticSize() uint64 { return r.static }

// IPv6 reports whether the range is IPv6.
func (r Range) IPv6() bool { return r.prefix.Addr().Is6() }

// First is the first usable address; invalid when the range is empty.
func (r Range) First() netip.Addr { return r.first }

// Last is the last usable address; invalid when the range is empty.
func (r Range) Last() netip.Addr {
	if r.size == 0 {
		return netip.Addr{}
	}
	addr, _ := r.Addr(r.size - 1)
	return addr
}

// String names the range for messages: the prefix and the usable window.
func (r Range) String() string {
	if r.size == 0 {
		return r.prefix.String() + " (no usable address)"
	}
	return fmt.Sprintf("%s (%s-%s)", r.prefix, r.first, r.Last())
}

// Contains reports whether addr is a usable address of the range.
func (r Range) Contains(addr netip.Addr) bool {
	_, ok := r.Index(addr)
	return ok
}

// InStaticBand reports whether addr is a usable address of the static band.
func (r Range) InStaticBand(addr netip.Addr) bool {
	i, ok := r.Index(addr)
	return ok && i < r.static
}

// Index returns the offset of addr from First, and false when addr is not a
// usable address of the range (outside the prefix, network, broadcast, beyond
// the bitmap window, another family, or not canonical: mapped or zoned).
func (r Range) Index(addr netip.Addr) (uint64, bool) {
	if r.size == 0 || !addr.IsValid() || addr.Zone() != "" || addr.BitLen() != r.first.BitLen() {
		return 0, false
	}
	if !r.prefix.Contains(addr) {
		return 0, false
	}
	hi, lo := split(addr)
	fhi, flo := split(r.first)
	lo, borrow := bits.Sub64(lo, flo, 0)
	hi, _ = bits.Sub64(hi, fhi, borrow)
	if hi != 0 || lo >= r.size {
		return 0, false
	}
	return lo, true
}

// Addr returns First()+i, and false when i ≥ Size().
func (r Range) Addr(i uint64) (netip.Addr, bool) {
	if i >= r.size {
		return netip.Addr{}, false
	}
	hi, lo := split(r.first)
	lo, carry := bits.Add64(lo, i, 0)
	hi += carry
	return join(hi, lo, r.first.Is4()), true
}

// split returns the address as a 128-bit number (IPv4 in the low 32 bits).
func split(addr netip.Addr) (hi, lo uint64) {
	if addr.Is4() {
		b := addr.As4()
		return 0, uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	}
	b := addr.As16()
	for i := 0; i < 8; i++ {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[i+8])
	}
	return hi, lo
}

// join is the inverse of split.
func join(hi, lo uint64, ipv4 bool) netip.Addr {
	if ipv4 {
		return netip.AddrFrom4([4]byte{byte(lo >> 24), byte(lo >> 16), byte(lo >> 8), byte(lo)})
	}
	var b [16]byte
	for i := 7; i >= 0; i-- {
		b[i] = byte(hi)
		b[i+8] = byte(lo)
		hi >>= 8
		lo >>= 8
	}
	return netip.AddrFrom16(b)
}
