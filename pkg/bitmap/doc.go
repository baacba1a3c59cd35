// Package bitmap is the bitmap model of ClusterIP allocation (design.md §1, §6).
//
// The type Bitmap is its in-memory core: a fixed set of slots with no notion
// of addresses. Slot i stands for the address network+1+i; mapping between the
// two is the IP-level allocator's job. Slots [0, StaticSize()) are the lower
// (static) band, kept for user-chosen addresses, and [StaticSize(), Size()) the
// upper (dynamic) band (KEP-3070).
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
// reports the slot; the caller marks it with Set. Each Bitmap owns a
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
// A Bitmap is not safe for concurrent use; its owner holds the lock.
//
// # IP-level allocators
//
// Allocator (in memory) and EtcdAllocator (on etcd) map addresses to slots
// with a subrange.Range of the bitmap model and implement
// allocation.Interface. Out-of-range addresses give *allocation.NotInRangeError
// on Allocate and are a silent no-op on Release.
//
// # The RangeAllocation on etcd
//
// EtcdAllocator keeps the map in one key (design.md §5) and caches it in
// memory with the ModRevision it was read at. Invariants and why:
//
//   - Every change is one transaction
//     If(ModRevision(key) == seen).Then(Put(new)).Else(Get(key)). Never a Get
//     followed by a Put: another replica's allocation between the two would
//     be overwritten and its address handed out twice.
//   - A lost compare restores the cache from the Else branch and re-applies the
//     whole batch to it at once (no back-off: that state is the freshest there
//     is, and waiting only lets it go stale). Attempts are bounded (and a long
//     losing streak pauses for a random moment and re-reads, so colliding
//     replicas fall out of step) and the batch honours its callers' deadlines.
//   - Decisions that do not write (ErrAllocated, ErrFull, Has, Usage, dry-run)
//     are confirmed by the same compare, with an empty Then: a stale cache
//     never answers "taken" for an address another replica has freed.
//   - A missing key fails with allocation.ErrAllocationDisabled; Initialize
//     creates it with create-if-absent, so two initialisers cannot both win. A
//     stored map for another range is ErrStoredRangeMismatch for every call;
//     only Initialize (at open) re-ranges it, with one CAS write that keeps
//     every in-range allocation (rerange.go).
//   - Group commit: concurrent calls on one instance are queued; the first
//     caller that finds no batch in flight leads: it applies every queued call
//     to the cache and commits them in one transaction, then hands leadership
//     to the oldest waiter. Each caller gets its own result; a batch that fails
//     as a whole fails every member and is reverted from the cache. So
//     throughput grows with concurrency (one CAS per batch) instead of
//     collapsing into conflicts, with no background goroutine to own.
//   - A call whose context ends while queued leaves the queue; once in a batch
//     it waits for the batch (bounded by the latest member deadline, but never
//     less than MinBatchTime, so callers with millisecond deadlines do not
//     turn every write into a timeout that may have landed), so an
//     allocation is never applied without its caller learning the address.
//   - If etcd fails ambiguously (the write may have landed), the leader
//     resolves it on a fresh context: a fence CAS on the base revision makes
//     a write that did not land unable to land later; otherwise the first
//     change after the base revision (from etcd's history) is ours iff its
//     value is ours, since only one CAS on a revision can succeed. Members
//     learn what really happened. A successful static allocation in a write
//     identified only by its value is reported failed, because another
//     instance may have written the identical map; if resolving fails, the
//     members fail. Either way at worst an address leaks until repair frees
//     it; it is never handed out twice.
package bitmap
