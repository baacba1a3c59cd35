package allocation

import "time"

// The clocks of a reservation's life all derive from RequestTimeout, the
// one bound the API server enforces on every request (design.md §7):
//
//	bound           value                 why
//	RequestTimeout  60 s                  a request's writes are sent before its deadline
//	WriteLease      5 × RequestTimeout    a fenced write can be applied only while its lease lives
//	LeakGrace       RequestTimeout + 30 s a reservation with no Service is a leak only after this
//
// A reservation is freed by the repair only when both hold: it has had no
// Service for LeakGrace, so the request that made it has ended and every
// write lease it used was granted before the repair looked; and every write
// lease alive then has ended since, so none of its writes can still land.
// The second is read from etcd (the leases' registration keys), not assumed
// from the clock: etcd renews every lease when a new leader is elected.
const (
	// RequestTimeout is the longest a request of the API server runs:
	// kube-apiserver's default --request-timeout, and the deadline our
	// server's handler chain puts on every request that is not a watch. A
	// request reserves, then writes its Service; both happen before its
	// deadline, and what is in flight then is bounded by its write lease.
	RequestTimeout = 60 * time.Second
	// WriteLease is the life of the etcd lease a request's fenced writes
	// carry: the time it has, from its first write, to learn their outcome
	// by closing its fence. After it, none of them can be applied.
	WriteLease = 5 * RequestTimeout
	// LeakGrace is the least time a repair sees a reservation held by no
	// Service before it may free it: the request timeout and a margin for
	// the clock skew between the replica that reserved and the repair, and
	// for the time between a pass's read of the reservations and its list
	// of the Services.
	LeakGrace = RequestTimeout + 30*time.Second
)
