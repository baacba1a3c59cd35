// Package portrange is the node-port range of kube-apiserver's
// --service-node-port-range: parsing, the static/dynamic band split, and the
// mapping between ports and the slots of the node-port RangeAllocation
// (slot i is port Base+i). It imports nothing outside the standard library.
//
// # Invariants
//
//   - A Range holds ports 1..65535 only, Size ≥ 2. Why: port 0 is never a
//     valid nodePort (validation refuses it, so slot 0 of a range starting at
//     0 would be a slot nobody can hold), and a single-port range has no
//     dynamic band worth the name. Upstream's utilnet.PortRange accepts
//     "30000" and "0-10" for the flag; we refuse them at start-up with a clear
//     error instead of serving a range that cannot work.
//   - String() is "base-last", the format kube-apiserver writes into the
//     RangeAllocation's range field ("30000-32767"); ranges compare by
//     value, so a stored "30000-32767" matches a flag given as "30000+2767".
//   - StaticSize is upstream's node-port band: min(max(16, size/32), 128)
//     ports at the bottom of the range, 0 when the range has 16 ports or
//     fewer. Why the same numbers as upstream: a replica of kube-apiserver and
//     ours share the map, and a user choosing a port in the lower band must
//     find it free on both.
package portrange
