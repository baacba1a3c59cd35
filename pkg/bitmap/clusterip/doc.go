// Package clusterip is the bitmap model of ClusterIP allocation (design.md §1,
// §6): one RangeAllocation per IP family, slot i the address network+1+i.
//
// Allocator (in memory) and EtcdAllocator (on etcd, a pkg/bitmap Store
// whose slots are the addresses of a subrange.Range of the bitmap model) map
// addresses to slots and implement allocation.Interface. Out-of-range
// addresses give *allocation.NotInRangeError on Allocate and are a silent
// no-op on Release. The store's invariants (compare-and-swap, stamp, group
// commit, ambiguous writes) are pkg/bitmap's; this package adds what is
// particular to addresses: the dry-run view (dryrun.go), re-ranging a stored
// map of another CIDR with the Services read beside it (rerange.go), and the
// read-only look at the stored maps (read_maps.go).
package clusterip
