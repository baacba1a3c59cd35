// Package faultproxy is a TCP proxy for fault-injection tests: it sits
// between an etcd client and one etcd member on loopback and delays, holds or
// drops the bytes of chosen connections, directions and keys, cuts open
// connections and refuses new ones. Start it in front of a member, give the
// client its URL instead of the member's, and change the fault with Set while
// the test runs.
//
// Each accepted connection is forwarded to the target over a connection of
// its own. Each direction of it (ToTarget: requests, FromTarget: responses) is
// a stream of chunks, one per read of up to 32 KiB; the fault in force when a
// chunk is read decides what happens to it:
//
//	fault            chunk it affects                  what the peers see
//	(zero Fault)     forwarded at once                 a plain TCP connection
//	Delay d          forwarded d after it was read     a slow (lagging) network
//	Hold             kept until a Set changes fault    a stalled network
//	Drop             discarded with all after it       a black hole: no data, no FIN, no reset
//	RefuseNew        (new connections)                 accepted, then reset at once
//	Cut()            (open connections)                reset on both sides
//
// A fault affects the chunks of its Direction (Both when zero) that contain
// one of its Match strings, or all of them when Match is empty. A key can
// straddle two reads, so a chunk is also matched together with the last bytes
// of the chunk before it (one byte fewer than the longest Match string).
// Matching is on raw bytes: an etcd client's gRPC stream is plaintext HTTP/2 in
// our tests, so keys are visible in its DATA frames.
//
// Invariants:
//   - Bytes are forwarded in order per connection and direction, because TCP
//     is a stream: a chunk waits for every chunk read before it on its
//     connection and direction, so a delayed or held chunk delays everything
//     after it there, and an end of stream (FIN) is forwarded only after all
//     data before it. Other connections and the other direction are not
//     affected.
//   - A delayed chunk keeps its distance to the chunks behind it: until it is
//     forwarded, a chunk read after it under the same fault is delayed as
//     long, matched or not. So when a gRPC client gives up on a delayed
//     request, etcd receives the cancellation (RST_STREAM) as much after the
//     request as it was sent after it, not at once behind it, and has that
//     long to propose the write: the write lands after its caller gave up.
//     Once the fault changes, chunks read afterwards only wait for order.
//   - Matching sees bytes, not requests. A gRPC request is a HEADERS frame
//     (method, and the caller's deadline as grpc-timeout, but no key) and a
//     DATA frame (the key), which the client sometimes writes apart. A delay
//     matching a key then lets the HEADERS frame through at once; etcd counts
//     the deadline from it, so the deadline can run out in etcd before the
//     delayed DATA frame arrives, and the write does not land. A write that
//     must land after its caller's deadline needs a delay without Match, or
//     a caller that cancels rather than sets a deadline.
//   - A held chunk is judged again, as if just read, by the fault in force
//     after each Set: a Set that no longer holds it releases it at once, or
//     after the new Delay counted from the Set, or drops it. Delayed chunks
//     keep the release time they were given when read.
//   - Drop lasts until the connection ends, whatever Set says afterwards: a
//     black hole does not give back what it swallowed, and a peer must never
//     receive bytes after a gap.
//   - Memory is bounded per connection and direction: a reader that has
//     queued 4 MiB waits for the writer, so a held connection pushes back on
//     its sender as a stalled network does.
//   - Only loopback addresses are listened on or dialled (ErrNotLoopback).
//   - Every goroutine belongs to the Proxy and is stopped and waited for by
//     Close; a connection's goroutines end with the connection, so Stats
//     shows none left once every connection has ended.
package faultproxy
