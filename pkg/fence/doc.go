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
// A Fence closes that window:
//   - Guard wraps a store's etcd writes: every OptimisticPut and
//     OptimisticDelete made with a context that carries a Fence also
//     requires the fence's key to be absent, one compare more in the same
//     transaction.
//   - Close, for a write whose outcome is unknown, creates the fence key and
//     reads the written object in one transaction. From that revision on,
//     no write of the request can be applied, wherever and whenever it
//     arrives: its compare fails. So what Close reads is final for the
//     request: absent means never written (or deleted since), a value is
//     what the request's writes and anyone's after them left.
//   - A write that meets its closed fence is answered ErrFenced, never a
//     lost compare-and-swap, so a store's retry loop cannot spin on it.
//
// The fence key lives under <prefix>/clusterip-allocator/fences/ with a
// lease of Lifetime, far longer than a request can wait in a socket (TCP
// gives up retransmitting after about 15 minutes) or in etcd (its own
// request timeout). Closing costs a lease grant and one transaction, on the
// path of an unknown outcome only; a write that is answered costs one
// compare on a key that does not exist.
package fence
