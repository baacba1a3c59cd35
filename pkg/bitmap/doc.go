// Package bitmap is the bitmap model of ClusterIP allocation (design.md §1, §6).
//
// The slots live in a bitset.Set (pkg/bitset: word-at-a-time search, the
// static/dynamic bands, kube-apiserver's byte format); slot i is the address
// network+1+i. The etcd store (the CAS and group-commit protocol below) is
// generic over what a slot means: a Space names the range a RangeAllocation
// covers, and pkg/portallocator builds node-port allocation on the same store.
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
//     If(ModRevision(key) == seen && stamp == seen's).Then(Put(new), Put(new
//     stamp)).Else(Get(key), Get(stamp)). Never a Get followed by a Put:
//     another replica's allocation between the two would be overwritten and
//     its address handed out twice. The stamp (stamp.go) keeps a cache from
//     before an etcd restore from being written back when the restored
//     history reaches its revision again.
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
