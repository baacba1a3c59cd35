// Package ipaddress is the IPAddress-model ClusterIP allocator
// (MultiCIDRServiceAllocator, design.md §1 and §6): one networking.k8s.io/v1
// IPAddress object per allocated address, named after the address in
// canonical form, over the ranges of every ready ServiceCIDR. It works
// through client-go against any Kubernetes API server, ours or a real
// kube-apiserver 1.33+.
//
// # Pieces
//
// FreeIndex is the per-CIDR set of used addresses. Ranges of up to
// MaxBitmapSize addresses use a bitset.Set (word-at-a-time search with
// summary levels); larger ones (IPv4 shorter than /12, IPv6 up to a /64)
// probe random offsets against a hashed set of used offsets. Both follow the
// band rules of design.md §3: a random start in the upper band, wrap-around,
// and the lower (static) band only when the upper band is full. Picking is
// O(1) expected at any fill for bitmaps, and for the hashed set while the
// range is not nearly full (64 random probes, then a walk bounded by the
// number of used addresses).
//
// Allocator is one family's meta-allocator over the per-CIDR indexes. It
// implements allocation.Interface; internal/ipallocator's Open builds one per
// family for the API server and the jobs alike.
//
// # Order of ServiceCIDRs
//
// Ranges are tried oldest ServiceCIDR first (creationTimestamp), then by
// name. A prefix carried by several ServiceCIDRs is served once, at the
// position of the first of them. AllocateNext takes its candidate from the
// first range in that order that has a free address, so a cluster grows
// into a newly added ServiceCIDR once the older ones are full. A static
// Allocate may take any free address of any served range.
//
// # Invariants and why they exist
//
//   - The claim is the create of the IPAddress object; AlreadyExists means
//     taken. The name is the address, so etcd's create-if-absent makes two
//     replicas (or a replica and an operator) unable to both win, whatever
//     their caches say. The local index is only a hint for picking.
//   - On the dynamic path a collision moves on to another candidate at most
//     MaxCollisions times (counted by Collisions); any other API error aborts
//     the call at once. Upstream once retried every free address after a
//     validation error and burned the CPU of the API server.
//   - Only ServiceCIDRs that are ready and not being deleted are served; one
//     without a Ready condition counts as ready (design.md §5). A terminating
//     ServiceCIDR must stop receiving addresses so that it can drain.
//   - IPv6 prefixes shorter than /64 are refused with upstream's message
//     ("shortest allowed prefix length for service CIDR is 64, got N"); the
//     refusal is logged, listed by Refused and passed to Config.OnRefused so
//     the server can surface it. A /64 is fully usable, including its last
//     address: offsets are uint64 and become addresses only through
//     subrange.Range.Addr, so no address outside the prefix can be produced
//     (upstream once did, through an int64 cast).
//   - Overlapping ServiceCIDRs share addresses: an informer event or a claim
//     marks the address in every index that contains it, so no address is
//     handed out twice in one process, and Usage sums only the ranges inside
//     no other range, so nothing is counted twice.
//   - The allocator answers allocation.ErrNotReady until the informers on
//     IPAddresses and ServiceCIDRs have synced and delivered their initial
//     lists: an empty cache would make every address look free and every
//     static address look out of range.
//   - No lock is held across an API call. Addresses being claimed are marked
//     used and recorded as in flight, so concurrent calls of one process pick
//     different candidates; when the claim ends, an informer event seen in
//     the meantime decides whether the address stays marked, so a late add or
//     delete event is never lost.
//   - Release deletes the IPAddress only if its parentRef is still the given
//     Service, and the delete carries the UID and resourceVersion it saw as
//     preconditions, so an address re-created or re-assigned in between is
//     never freed under its new owner; a recorded Service UID must be the
//     owner's. It starts from the informer's copy (the server's storage
//     deletes that copy without another read, or, when the copy records no
//     UID, judges the UID on the object as stored at that revision); a
//     miss, another owner or a conflict falls back to a fresh read.
//   - Scoped ServiceCIDRs (scopes.go, design.md §11): a request carrying
//     allocation.Owner.Scoped takes addresses only from the ranges its
//     Service may use, in their order; a re-mark of a stored address
//     carries no scope and is never refused.
//   - ServiceCIDR lifecycles (lifecycle.go, pkg/ipaddress/lifecycle): where
//     ServiceCIDRs overlap, the most closed lifecycle wins. No dynamic pick
//     ever lands inside a manual-only or draining ServiceCIDR, whatever
//     other ServiceCIDR also holds the address (a pick from a wider range
//     passes over the nested closed ones, holes.go), and a new static
//     request (Owner.Scoped) for an address inside a draining ServiceCIDR
//     gets *allocation.DrainingError. A re-mark of a stored address is never
//     refused, so draining a range leaves every Service its address. A
//     replica applies a lifecycle change once its ServiceCIDR informer
//     delivers it: the handler marks the ranges stale, and the next pick
//     applies the change under the lock every pick takes (served.go).
//   - Dry-run never writes: Allocate answers from a fresh read and
//     AllocateNext reports the candidate it would try first.
//   - The user-facing sentinels (ErrFull, ErrAllocated, ErrMismatchedNetwork,
//     ErrNotReady) are returned unwrapped so the API server's messages keep
//     upstream's texts; API errors are wrapped with the address and Service.
//   - Every goroutine (informers, the readiness waiter) is owned by the
//     context given to New.
package ipaddress
