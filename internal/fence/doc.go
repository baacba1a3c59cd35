// Package fence makes the outcome of an etcd write known before anything the
// write reserved is released.
//
// A write whose answer is lost (the caller's context ended, a member was
// slow, a connection broke) may still be applied later: the request can sit
// in a socket or in a member's proposal queue after its caller gave up, and
// with several --etcd-servers a read sent to another member does not see it
// yet. Releasing what such a Service write reserved because a read found
// the Service absent hands its addresses and node ports to the next Service;
// when the write lands, two Services share them.
//
// A Fence names the writes of one request and makes each one's fate known:
//   - Guard wraps a store's etcd writes. Every OptimisticPut and
//     OptimisticDelete made with a context that carries a Fence is the
//     store's own transaction with one compare and one put more: the fence
//     key must be absent, and the write, when applied, also creates a
//     marker key of its own. Both keys carry the request's lease.
//   - Close, for a write whose outcome is unknown, creates the fence key and
//     reads the write's marker and the written key in one transaction. From
//     that revision on no write of the request can be applied, wherever and
//     whenever it arrives (its compare fails), and the marker tells exactly
//     whether the write was applied before: no guess from the key's value,
//     which another request may have changed since.
//   - A write that meets its closed fence is answered ErrFenced, never a
//     lost compare-and-swap, so a store's retry loop cannot spin on it.
//   - GuardClaims guards a store whose objects are claims (IPAddresses):
//     a create there has the compare but no marker. Its value carries a
//     UID generated for it, so the key Close reads says whether it holds
//     what the create wrote; a claim is held only while its object is
//     there, so one applied and since deleted or replaced is not held.
//
// The lease bounds the whole scheme. A write can be applied only while its
// lease lives (etcd refuses a put to a lease it no longer has, and the
// transaction with it), the marker and the fence key live exactly as long,
// and Close puts the fence with that lease: when Close succeeds the lease
// was alive at its revision, so a marker that was written is still there
// to read; when the lease is gone, Close answers ErrOutcomeLost and nothing
// is decided, but nothing marked can land any more either. Leases hands
// the leases out: each lives allocation.WriteLease, is given to the
// requests that start within a few seconds of its grant, and is revoked
// once the last of them is Done. Before any request gets it, a lease is
// registered by a key that carries it (etcdlayout's WriteLease), so the
// registered keys are exactly the leases a write of ours may still be
// applied with: the repair reads them (InFlight) and frees no reservation
// while a write that was in flight when its grace ended may still land.
// That is read from etcd, not assumed from a clock: etcd renews every lease
// when a new leader is elected, so a lease can outlive its TTL.
//
// Close fences only when a write of the request lost its answer; when every
// answer came back, the record says each outcome and the request may go on
// writing. etcd answers "database space exceeded" once it has applied or
// refused a write, so the guard reads the marker (a claim's key) then; a
// delete refused for space is sent again without a marker (a put costs
// space; deletes are how an operator makes room), and its outcome, if that
// answer is lost, cannot be learned.
//
// Cost on the path of an answered write: one compare on a key that does not
// exist and one put of an empty key, in the same transaction; for a claim,
// the compare alone. The put is most of it, and etcd deletes the marker again
// when the lease expires (BenchmarkGuardedCreate, docs/performance.md).
package fence
