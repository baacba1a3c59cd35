// Package portallocator allocates node ports on the bitmap engine: the same
// RangeAllocation store as ClusterIPs (pkg/rangealloc's Store: one key, CAS
// on its ModRevision, group commit), over a portrange.Range instead of an IP
// range.
// The map lives at <prefix>/ranges/servicenodeports with range "30000-32767"
// and bit i = port base+i, byte-compatible with kube-apiserver's.
//
// # Invariants
//
//   - Errors carry upstream's texts, because clients and kubectl users match
//     them: ErrAllocated "provided port is already allocated", a
//     *NotInRangeError "provided port is not in the valid range. The range of
//     valid ports is 30000-32767", allocation.ErrFull "range is full".
//   - Dynamic allocation takes the upper band first (portrange.StaticBandSize
//     at the bottom is kept for user-chosen ports), like kube-apiserver.
//   - Release of a port outside the range or not allocated is a no-op, so a
//     release repeated after a retry cannot fail a request that succeeded.
//   - DryRun answers from state confirmed against etcd and writes nothing.
//   - Node ports do not depend on the IP model: both models use this map,
//     as kube-apiserver always does for node ports.
package portallocator
