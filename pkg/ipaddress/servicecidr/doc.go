// Package servicecidr is the ServiceCIDR controller of the allocator API
// server: it keeps the finalizer and the Ready condition of every
// ServiceCIDR, lets a ServiceCIDR go away only when no IPAddress depends
// on it, and keeps conditions of our own in its status (capacity per
// family, draining, manual-only, overlapping; conditions.go).
//
// Invariants, each with the failure it prevents:
//   - Every ServiceCIDR that is not being deleted carries the finalizer
//     networking.k8s.io/service-cidr-finalizer, so a delete cannot remove it
//     before the check below ran (otherwise Services would keep addresses in
//     a range nobody serves any more, and the range could be handed out again
//     by a re-created ServiceCIDR while they are still in use).
//   - A ServiceCIDR being deleted keeps its finalizer, and has Ready=False
//     with reason Terminating and upstream's message, while some IPAddress
//     lies in one of its CIDRs and in no CIDR of another ServiceCIDR that is
//     not being deleted. The check reads the informers' caches and is re-run
//     whenever an IPAddress or a ServiceCIDR changes, and periodically.
//   - When the caches show no such IPAddress, a consistent list from the API
//     confirms it before the finalizer is removed (a cache may lag behind an
//     IPAddress created a moment ago), and the finalizer stays until
//     DefaultDeletionGrace (10 s, as upstream) has passed since the
//     deletionTimestamp, so every replica's allocator,
//     including this process's own through its informer, has stopped
//     allocating from it (without it the finalizer would go within about
//     130 ms of the delete, and an allocation in flight could land in a
//     CIDR that no longer exists); then the storage deletes the object.
//   - An IPAddress counts as covered by another CIDR only if that CIDR would
//     hand it out: not its network address nor its IPv4 broadcast address.
//   - Every ServiceCIDR is re-checked every DefaultResyncPeriod by Run itself:
//     the server's shared informer factory has resync 0, which silently
//     disabled a handler resync.
//   - A ServiceCIDR that is not being deleted is Ready=True. A ServiceCIDR
//     without a Ready condition also counts as ready for allocation (design
//     §5), so a slow controller never blocks allocation.
//   - The conditions of our own have types under ConditionPrefix
//     (allocator.github.io/); every other condition (upstream's Ready,
//     whatever kube-apiserver or kube-controller-manager keep) is written
//     back as read, never dropped.
//   - They are computed from the informers' caches only (the IPAddresses
//     inside the ServiceCIDR through addrindex, every ServiceCIDR's
//     prefixes), so every replica computing them from the same state
//     computes the same conditions and writes nothing when they are stored
//     already; a write that conflicts is retried from the fresher cache.
//   - At most one write of them per ServiceCIDR per conditionInterval
//     (DefaultConditionInterval, 5 s), counted from the last change of them
//     seen from any replica: the messages carry exact counts, which change
//     with every allocation, and a status write per allocation would double
//     the writes of a create. A change inside the interval is written when
//     it ends, so the conditions lag at most an interval and a watch delay
//     behind etcd, and an idle cluster writes none.
//
// In the bitmap model Services hold addresses without IPAddress objects; the
// bitmap covers only --service-cluster-ip-range, whose default ServiceCIDR
// the server re-creates when it is deleted.
package servicecidr
