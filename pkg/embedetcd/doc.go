// Package embedetcd runs an etcd member inside the current process.
//
// It is what `allocator serve` uses when no external etcd is given (the
// member keeps its data in the server's data directory), and what tests use
// to get a real etcd without starting a separate binary.
//
// Invariants:
//   - Start returns only once the member is ready to serve requests (it has
//     joined its cluster and a leader exists), or with an error and nothing
//     left running.
//   - Every client and peer URL is plain http on a loopback address. The
//     embedded member has no TLS and no authentication, so anything that can
//     reach it can rewrite the registry; binding it to a network interface
//     would be a security hole, hence Start refuses non-loopback hosts.
//   - A URL with port 0 (or an empty URL) gets a free port picked before
//     etcd starts, so the resolved URLs in Server.Config are concrete and can
//     be reused to restart the member on the same address. Picking a port is
//     racy (another process may bind it before etcd does); Start retries with
//     fresh ports when the conflict hits a port it picked itself.
//   - Close is idempotent and returns only when the member has stopped and
//     released its listeners and data directory.
//   - The logger defaults to a no-op: embed.Etcd logs errors that are expected
//     during a normal shutdown (closed connections, cancelled streams), which
//     would only be noise.
package embedetcd
