package subrange_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// A service CIDR is parsed strictly: only the spelling Kubernetes stores is
// accepted, and a refusal says what the canonical form would be.
func ExampleParsePrefix() {
	prefix, err := subrange.ParsePrefix("10.96.0.0/24")
	fmt.Println(prefix, err)

	_, err = subrange.ParsePrefix("10.96.0.1/24")
	fmt.Println(err)
	fmt.Println(errors.Is(err, subrange.ErrInvalid))

	_, err = subrange.ParsePrefix("fd00:0:0::/64")
	fmt.Println(err)
	// Output:
	// 10.96.0.0/24 <nil>
	// invalid CIDR "10.96.0.1/24": host bits are set, the network is 10.96.0.0/24
	// true
	// invalid CIDR "fd00:0:0::/64": not in canonical form, use fd00::/64
}

// A Range is the usable addresses of a prefix under one model, split into
// the static (lower) band and the dynamic (upper) band.
func ExampleNew() {
	r, err := subrange.New(netip.MustParsePrefix("10.96.0.0/24"), model.Bitmap)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r)
	fmt.Println("size:", r.Size(), "static band:", r.StaticSize())
	fmt.Println(r.InStaticBand(netip.MustParseAddr("10.96.0.16")), r.InStaticBand(netip.MustParseAddr("10.96.0.17")))
	fmt.Println(r.Contains(netip.MustParseAddr("10.96.0.255"))) // the broadcast address

	// The bitmap model caps IPv6 to the first 65,535 addresses; the
	// IPAddress model uses the whole prefix.
	v6 := netip.MustParsePrefix("fd00::/64")
	fmt.Println(subrange.MustNew(v6, model.Bitmap).Size(), subrange.MustNew(v6, model.IPAddress).Size())

	// The bitmap model refuses IPv4 prefixes shorter than /12.
	_, err = subrange.New(netip.MustParsePrefix("10.0.0.0/8"), model.Bitmap)
	fmt.Println(errors.Is(err, subrange.ErrPrefixTooLarge))
	// Output:
	// 10.96.0.0/24 (10.96.0.1-10.96.0.254)
	// size: 254 static band: 16
	// true false
	// false
	// 65535 18446744073709551615
	// true
}

// The static band is min(max(16, size/16), 256) addresses, where size is
// 2^(host bits), and empty when that is 16 or less.
func ExampleStaticBandSize() {
	for _, s := range []string{"10.96.0.0/28", "10.96.0.0/27", "10.96.0.0/24", "10.96.0.0/20", "10.96.0.0/16", "fd00::/108"} {
		fmt.Println(s, subrange.StaticBandSize(netip.MustParsePrefix(s)))
	}
	// Output:
	// 10.96.0.0/28 0
	// 10.96.0.0/27 16
	// 10.96.0.0/24 16
	// 10.96.0.0/20 256
	// 10.96.0.0/16 256
	// fd00::/108 256
}

// Index and Addr convert between an address and its offset from First,
// exactly over the whole 128-bit space.
func ExampleRange_Index() {
	r := subrange.MustNew(netip.MustParsePrefix("fd00::/64"), model.IPAddress)
	i, ok := r.Index(netip.MustParseAddr("fd00::1:0"))
	fmt.Println(i, ok)
	addr, ok := r.Addr(i)
	fmt.Println(addr, ok)
	fmt.Println(r.Last())

	_, ok = r.Index(netip.MustParseAddr("fd00::")) // the network address
	fmt.Println(ok)
	// Output:
	// 65535 true
	// fd00::1:0 true
	// fd00::ffff:ffff:ffff:ffff
	// false
}
