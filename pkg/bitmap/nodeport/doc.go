// Package nodeport allocates node ports on the bitmap engine: the same
// RangeAllocation store as ClusterIPs (pkg/bitmap's Store: one key, CAS on
// its ModRevision, group commit), over a Range of ports instead of an IP
// range. Range is kube-apiserver's --service-node-port-range: its parsing,
// the static/dynamic band split, and the mapping between ports and the
// slots of the map (slot i is port Base+i).
// The map lives at <prefix>/ranges/servicenodeports with range "30000-32767"
// and bit i = port base+i, byte-compatible with kube-apiserver's.
//
// # Invariants
//
//   - Errors carry upstream's texts, because clients and kubectl users match
//     them: ErrAllocated "provided port is already allocated", a
//     *NotInRangeError "provided port is not in the valid range. The range of
//     valid ports is 30000-32767", allocation.ErrFull "range is full".
//   - Dynamic allocation takes the upper band first (StaticBandSize at the
//     bottom is kept for user-chosen ports), like kube-apiserver.
//   - A Range holds ports 1..65535 only, Size ≥ 2. Why: port 0 is never a
//     valid nodePort (validation refuses it, so slot 0 of a range starting at
//     0 would be a slot nobody can hold), and a single-port range has no
//     dynamic band worth the name. Upstream's utilnet.PortRange accepts
//     "30000" and "0-10" for the flag; we refuse them at start-up with a clear
//     error instead of serving a range that cannot work.
//   - Range.String() is "base-last", the format kube-apiserver writes into the
//     RangeAllocation's range field ("30000-32767"); ranges compare by
//     value, so a stored "30000-32767" matches a flag given as "30000+2767".
//   - StaticBandSize is upstream's node-port band: min(max(16, size/32), 128)
//     ports at the bottom of the range, 0 when the range has 16 ports or
//     fewer. Why the same numbers as upstream: a replica of kube-apiserver and
//     ours share the map, and a user choosing a port in the lower band must
//     find it free on both.
//   - Release of a port outside the range or not allocated is a no-op, so a
//     release repeated after a retry cannot fail a request that succeeded.
//   - DryRun answers from state confirmed against etcd and writes nothing.
//   - Node ports do not depend on the IP model: both models use this map,
//     as kube-apiserver always does for node ports.
package nodeport
