package allocation

import (
	"context"
	"net/netip"
)

// Owner is the Service an address is allocated for. The bitmap model does not
// record owners (its RangeAllocation has no room for them); the IPAddress model
// stores the owner as the IPAddress object's parentRef.
type Owner struct {
	Namespace string
	Name      string
	// UID is the Service's UID, when known. The IPAddress model records it
	// beside the parentRef, which has no room for it, and releases an
	// address only for the UID recorded (or when none is), so a late
	// release for a deleted Service never frees the address of a newer
	// Service of the same name.
	UID string
	// Scoped, when set, makes the allocation follow ServiceCIDR scopes
	// (IPAddress model, design.md §11) with the Service's labels, and marks
	// it a new allocation, which a draining ServiceCIDR refuses
	// (pkg/ipaddress/lifecycle). It is nil when an address a stored Service already
	// holds is marked again (at start-up, by the repair or a migration): a
	// scope or a lifecycle never refuses or moves such an address.
	Scoped *ScopedRequest
}

// ScopedRequest is what a ServiceCIDR scope matches a Service on, besides
// its namespace (whose labels the allocator looks up).
type ScopedRequest struct {
	Labels map[string]string
}

func (o Owner) String() string { return o.Namespace + "/" + o.Name }

// Interface is one IP family's ClusterIP allocator, whichever model backs it.
// Every method that may do I/O takes a context. Implementations are safe for
// concurrent use.
type Interface interface {
	// Allocate reserves ip for owner. It fails with ErrAllocated when ip is
	// taken, with a *NotInRangeError (bitmap) or ErrMismatchedNetwork
	// (IPAddress model) when ip is outside every range.
	Allocate(ctx context.Context, ip netip.Addr, owner Owner) error
	// AllocateNext reserves a free address for owner, preferring the upper
	// (dynamic) band, and fails with ErrFull when none is left.
	AllocateNext(ctx context.Context, owner Owner) (netip.Addr, error)
	// Release frees ip. Releasing an address that is not allocated, or that
	// is outside the range, is a silent no-op. In the IPAddress model the
	// address is only freed if it still belongs to owner.
	Release(ctx context.Context, ip netip.Addr, owner Owner) error
	// Has reports whether ip is allocated, from fresh state.
	Has(ctx context.Context, ip netip.Addr) (bool, error)
	// ForEach calls fn for every allocated address in ascending order.
	ForEach(ctx context.Context, fn func(netip.Addr)) error
	// Usage reports sizes and counts.
	Usage(ctx context.Context) (Usage, error)
	// IPv6 reports the family this allocator serves.
	IPv6() bool
	// DryRun returns a view that answers like this allocator (Allocate reports
	// conflicts, AllocateNext reports the address it would pick) but never
	// changes anything.
	DryRun() Interface
}

// Usage is a snapshot of an allocator's fill level. Counts are uint64 because an
// IPv6 /64 holds 2^64-1 usable addresses.
type Usage struct {
	// Size is the number of usable addresses.
	Size uint64
	// Used is the number of allocated addresses.
	Used uint64
	// StaticSize and StaticUsed describe the lower band, kept for user-chosen IPs.
	StaticSize uint64
	StaticUsed uint64
}

// Free is the number of usable addresses not allocated.
func (u Usage) Free() uint64 { return u.Size - u.Used }

// DynamicSize is the size of the upper band, which dynamic allocation prefers.
func (u Usage) DynamicSize() uint64 { return u.Size - u.StaticSize }

// DynamicUsed is the number of allocated addresses in the upper band.
func (u Usage) DynamicUsed() uint64 { return u.Used - u.StaticUsed }
