// Package bitset is the allocation bit set under both bitmap RangeAllocations
// (pkg/bitmap's store: ClusterIPs in pkg/bitmap/clusterip, node ports
// in pkg/bitmap/nodeport) and the IPAddress model's free index
// (pkg/ipaddress). It knows nothing of what a slot means:
// mapping slots to addresses or ports is its users' job.
//
// A Set is a fixed set of slots with no notion of addresses or ports. Slots
// [0, StaticSize()) are the lower (static) band, kept for user-chosen values,
// and [StaticSize(), Size()) the upper (dynamic) band (KEP-3070).
//
// # Invariants
//
//   - The slots live in 64-bit words, and above them in summary levels: a bit
//     of level k+1 is set if and only if the corresponding word of level k is
//     full (a partial last word is full when all its valid bits are set). The
//     top level is a single word. Why: finding a free slot climbs and descends
//     the levels one word at a time with bits.TrailingZeros64, a handful of
//     word operations whatever the fill, so NextDynamic stays well under a
//     microsecond with no allocation even on a 2^20-slot IPv4 /12 at 99.99%
//     fill. A bit-by-bit scan, as upstream's big.Int bitmap does, costs up to
//     a million bit tests per allocation on a nearly full /12.
//   - No bit at an index ≥ Size() is ever set, in any level. Why: Bytes can then
//     copy whole words, and counters computed with bits.OnesCount64 are exact.
//   - Used() and UsedStatic() are exact after every Set, Clear, SetBytes and
//     Reset. Why: the upper band's free count decides, in O(1), whether dynamic
//     allocation must fall back to the lower band, and the counters feed the
//     allocated/available metrics without a scan.
//   - SetBytes either replaces the whole content or, on error, changes nothing.
//     Why: the bitmap is a cache of the etcd RangeAllocation; a half-loaded
//     object would hand out addresses that are already taken.
//
// # Dynamic allocation
//
// NextDynamic follows upstream: a uniformly random start in the upper band, a
// forward scan with wrap-around within that band, and only when it is full the
// lower band, the same way from a random start of its own. NextDynamic only
// reports the slot; the caller marks it with Set. Each Set owns a
// math/rand/v2 source seeded at random (SetRand replaces it in tests).
//
// # Byte format
//
// Bytes and SetBytes use kube-apiserver's RangeAllocation.data format
// (design.md §5), so what we store is what a real kube-apiserver reads and
// writes: the bitmap as a big-endian unsigned integer in minimal form, that is
// slot i is bit i%8 (bit 0 = least significant) of byte len-1-i/8, with no
// leading zero bytes, and an empty slice when nothing is set. Slots 0 and 9
// set encode as [0x02, 0x01]. Both directions work a word (8 bytes) at a time.
//
// A Set is not safe for concurrent use; its owner holds the lock.
package bitset
