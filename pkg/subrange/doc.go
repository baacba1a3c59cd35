// Package subrange is the ClusterIP address math: which addresses of a service
// CIDR are usable under each allocator model, how they split into the static
// (lower) and dynamic (upper) bands, and how an address maps to an index.
//
// It works on net/netip values only and imports nothing outside the standard
// library but pkg/model (itself standard library only, the models' names), so
// every other package can depend on it.
//
// # Invariants
//
//   - A Range's addresses are exactly First() … Last(): index i is First()+i for
//     0 ≤ i < Size(). Index ↔ address conversion is 128-bit exact: an IPv6 /64
//     has Size() = 2^64−1 and its last address is usable. No arithmetic goes
//     through int64, because upstream once handed out addresses outside a /64
//     after such a cast.
//   - The network address is never usable. The IPv4 broadcast address is never
//     usable; the last IPv6 address is. IPv4 /31 and /32 and IPv6 /128 have no
//     usable address.
//   - model.Bitmap (one RangeAllocation bitmap per family) covers the window
//     network+1 … network+Size(). IPv4 is not capped, but prefixes shorter than
//     /12 are refused: their bitmap (2 MiB and more) would not fit in one etcd
//     value. IPv6 is capped to the first 65,535 addresses after the network
//     address, as upstream's bitmap allocator does (2^hostbits − 1 slots): an
//     IPv6 /127 has one usable address, its last, in this model too.
//   - model.IPAddress (one IPAddress object per allocated IP) uses the whole
//     prefix. IPv6 prefixes shorter than /64 are refused with upstream's message.
//   - The static band is the first StaticBandSize(prefix) usable addresses
//     (KEP-3070): min(max(16, raw/16), 256), or 0 when the raw size 2^(host bits)
//     is 16 or less. It depends on the prefix only, not on the model.
//
// # Canonical text
//
// ParseAddr and ParsePrefix accept only the canonical spelling that
// Kubernetes stores in IPAddress names and ServiceCIDR specs: no leading zeros,
// no IPv4-mapped IPv6, no zones, lower-case RFC 5952 IPv6, no host bits set.
// Anything else is refused with an error that says what is wrong and what the
// canonical form would be, so that an object name can never alias another.
package subrange
