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
//   - Every client and peer URL is on a loopback address; Start refuses
//     other hosts.
//   - With Config.PKI the member serves https only and requires a client
//     certificate signed by the PKI's CA, on the client and the peer port.
//     Loopback alone is not a boundary: a plain-http member on 127.0.0.1 let
//     every local user read and rewrite every key (Services, allocation maps)
//     around the API server's authentication. `allocator serve` always sets
//     a PKI kept in its 0700 data directory (keys 0600); plain http is for
//     tests.
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
