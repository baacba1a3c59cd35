// Package rangeusage measures how full a cluster's service IP ranges are: per
// family, per CIDR (a ServiceCIDR, or a bitmap model's RangeAllocation), and
// per band (the static lower band kept for user-chosen addresses, KEP-3070's
// min(max(16, size/16), 256), and the dynamic upper band): size, used, free,
// and which namespaces hold the most addresses.
//
// Invariants, and why:
//
//   - Strictly read-only. It lists ServiceCIDRs, IPAddresses and Services
//     through the API and reads the RangeAllocation keys from etcd with plain
//     Gets; it never goes through an allocator (whose constructors and
//     refreshes may write) and never writes a key. An operator must be able
//     to run it against a production cluster at any time.
//   - Sizes come from address math, counts from the objects. An IPv6 /64
//     ServiceCIDR holds 2^64−1 addresses: iterating it, or building a bitmap
//     of it, would never finish. Only the allocated addresses are visited,
//     each once per CIDR that contains it.
//   - Counts are uint64 (a /64 does not fit an int64-sized count on its
//     own edge) and a family's size, which can sum several /64s, is a
//     big.Int.
//   - ServiceCIDRs may nest (a /24 inside a /16; prefixes never overlap
//     partially). An address is counted in every CIDR that contains it, as
//     each CIDR's own fill; the family total counts it once and sizes only
//     the outermost prefixes, so nesting never double counts.
//   - Addresses in no CIDR (an IPAddress left behind when a ServiceCIDR was
//     deleted, a bit beyond a shrunk range) are counted per family as
//     "outside" rather than dropped: they are what repair reports.
package rangeusage
