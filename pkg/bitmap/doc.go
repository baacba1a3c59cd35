// Package bitmap is the bitmap model's engine: the RangeAllocation store on
// etcd (design.md §5, §6), one map of slots at one key, cached in memory,
// changed only by compare-and-swap, with concurrent calls on one Store
// committed together. The ClusterIP map (clusterip), the node-port map
// (nodeport) and the bit set they share (bitset) are its subpackages.
//
// The store is generic over what a slot means: a Space names the range a
// RangeAllocation covers. pkg/bitmap/clusterip maps ClusterIPs to its slots
// (slot i = network+1+i) and pkg/bitmap/nodeport node ports (slot i = base+i).
// The slots live in a bitset.Set (pkg/bitmap/bitset: word-at-a-time search, the
// static/dynamic bands, kube-apiserver's byte format). Code that reasons
// about the whole map (repair, migration) reads and writes it with
// ReadStored and CompareAndWrite; pkg/repair is the repair
// core built on them.
//
// # Invariants and why
//
// A Store keeps the map in one key and caches it in memory with the
// ModRevision it was read at.
//
//   - Every change is one transaction
//     If(ModRevision(key) == seen && stamp == seen's).Then(Put(new), Put(new
//     stamp)).Else(Get(key), Get(stamp)). Never a Get followed by a Put:
//     another replica's allocation between the two would be overwritten and
//     its slot handed out twice. The stamp (stamp.go) keeps a cache from
//     before an etcd restore from being written back when the restored
//     history reaches its revision again.
//   - A lost compare restores the cache from the Else branch and re-applies the
//     whole batch to it at once (no back-off: that state is the freshest there
//     is, and waiting only lets it go stale). Attempts are bounded (and a long
//     losing streak pauses for a random moment and re-reads, so colliding
//     replicas fall out of step) and the batch honours its callers' deadlines.
//   - Answers that do not write (allocation.ErrAllocated, allocation.ErrFull,
//     Read, Usage) are confirmed by the same compare, with an empty Then: a
//     stale cache never answers "taken" for a slot another replica has freed.
//   - A missing key fails with allocation.ErrAllocationDisabled; Create
//     makes it with create-if-absent, so two initialisers cannot both win. A
//     stored map for another range is ErrStoredRangeMismatch for every call;
//     only a re-range (RerangeWith, RerangeSlots: the allocators' Open)
//     rewrites it, with one CAS write that keeps every in-range allocation
//     (rerange.go).
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
//     allocation is never applied without its caller learning the slot.
//   - If etcd fails ambiguously (the write may have landed), the leader
//     resolves it on a fresh context: a fence CAS on the base revision makes
//     a write that did not land unable to land later; otherwise the first
//     change after the base revision (from etcd's history) is ours iff its
//     value and its stamp are ours, since only one CAS on a revision can
//     succeed. Members learn what really happened. If that cannot tell within
//     MinBatchTime, the members fail with the outcome unknown (a release so
//     failed is not sent again) and the store goes on resolving in the
//     background for up to 30 s, then undoes what its members were told did
//     not happen: the allocations of a write that landed, the releases of one
//     that did not (resolve.go). An address leaks only if etcd stays
//     unreachable that long, until repair frees it; it is never handed out
//     twice.
package bitmap
