package clusterip

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/subrange"
)

// EtcdAllocator is the bitmap model of ClusterIPs on etcd: a bitmap.Store
// whose slots are the addresses of a subrange.Range (slot i =
// network+1+i). It implements allocation.Interface.
type EtcdAllocator struct {
	*bitmap.Store
	rng subrange.Range

	// rerangeBeforeWrite, when set (tests only), runs between the re-range's
	// read and its CAS write, so a test can slip a concurrent write in.
	rerangeBeforeWrite func()
}

var _ allocation.Interface = (*EtcdAllocator)(nil)

// ipSpace is a subrange.Range of the bitmap model as a bitmap.Space.
type ipSpace struct{ rng subrange.Range }

func (s ipSpace) Spec() string     { return s.rng.Prefix().String() }
func (s ipSpace) Slots() int       { return int(min(s.rng.Size(), bitmap.MaxSlots+1)) }
func (s ipSpace) StaticSlots() int { return int(min(s.rng.StaticSize(), bitmap.MaxSlots+1)) }
func (s ipSpace) Matches(stored string) bool {
	p, err := netip.ParsePrefix(stored)
	return err == nil && p == s.rng.Prefix()
}

// NewEtcdAllocator returns an allocator over r whose map lives at key. It does
// no I/O: the first call loads the map; Initialize creates it.
func NewEtcdAllocator(client *clientv3.Client, key string, r subrange.Range, opts bitmap.EtcdOptions) (*EtcdAllocator, error) {
	if r.Size() > bitmap.MaxSlots {
		return nil, fmt.Errorf("range %s has %d addresses, more than the %d a bitmap holds", r.Prefix(), r.Size(), bitmap.MaxSlots)
	}
	store, err := bitmap.NewStore(client, key, ipSpace{r}, opts)
	if err != nil {
		return nil, err
	}
	return &EtcdAllocator{Store: store, rng: r}, nil
}

// Range is the usable range the allocator serves.
func (a *EtcdAllocator) Range() subrange.Range { return a.rng }

// IPv6 reports whether the allocator serves IPv6.
func (a *EtcdAllocator) IPv6() bool { return a.rng.IPv6() }

// Initialize creates the empty RangeAllocation if the key is absent, in one
// create-if-absent transaction, so two initialisers cannot both win. It
// reports whether this call created it. A stored map for another range of the
// same family is re-ranged (see Open); one of the other family is an error
// (bitmap.ErrStoredRangeMismatch), never overwritten.
func (a *EtcdAllocator) Initialize(ctx context.Context) (bool, error) {
	res, err := a.Open(ctx)
	return res.Created, err
}

// OpenResult is what Open did to the stored map.
type OpenResult struct {
	// Created reports that the key was absent and Open created it empty.
	Created bool
	// Rerange is set when the stored map was for another range and Open
	// rewrote it for the configured one.
	Rerange *Rerange
}

// Open is Initialize with a report: it creates the empty map if the key is
// absent, or re-ranges a stored map of another range of the same family in
// one CAS transaction (keeping every allocation inside the configured range,
// adding the Service IPs it contains, dropping and logging the rest).
func (a *EtcdAllocator) Open(ctx context.Context) (OpenResult, error) {
	created, err := a.Create(ctx)
	if err == nil {
		return OpenResult{Created: created}, nil
	}
	if !errors.Is(err, bitmap.ErrStoredRangeMismatch) {
		return OpenResult{}, err
	}
	rr, err := a.rerange(ctx)
	if err != nil {
		return OpenResult{}, fmt.Errorf("initialize: %w", err)
	}
	return OpenResult{Rerange: rr}, nil
}

// Allocate reserves ip. The store's own answer (allocation.ErrAllocated) is
// returned as it is; a failure of the batch that carried the call says which
// address.
func (a *EtcdAllocator) Allocate(ctx context.Context, ip netip.Addr, _ allocation.Owner) error {
	slot, err := indexOf(a.rng, ip)
	if err != nil {
		return err
	}
	err = a.AllocateSlot(ctx, slot)
	if err == nil || errors.Is(err, allocation.ErrAllocated) {
		return err
	}
	return fmt.Errorf("allocate %s: %w", ip, err)
}

// AllocateNext reserves a free address, upper band first.
func (a *EtcdAllocator) AllocateNext(ctx context.Context, _ allocation.Owner) (netip.Addr, error) {
	slot, err := a.AllocateNextSlot(ctx)
	if errors.Is(err, allocation.ErrFull) {
		return netip.Addr{}, fullError(a.rng)
	}
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate next: %w", err)
	}
	return addrOf(a.rng, slot), nil
}

// Release frees ip; it is a no-op when ip is not allocated or out of range.
func (a *EtcdAllocator) Release(ctx context.Context, ip netip.Addr, _ allocation.Owner) error {
	slot, ok := a.rng.Index(ip)
	if !ok {
		return nil
	}
	if err := a.ReleaseSlot(ctx, int(slot)); err != nil {
		return fmt.Errorf("release %s: %w", ip, err)
	}
	return nil
}

// Has reports whether ip is allocated, confirmed against etcd.
func (a *EtcdAllocator) Has(ctx context.Context, ip netip.Addr) (bool, error) {
	slot, ok := a.rng.Index(ip)
	if !ok {
		return false, nil
	}
	var has bool
	if err := a.Read(ctx, func(b *bitset.Set) { has = b.Has(int(slot)) }); err != nil {
		return false, fmt.Errorf("has %s: %w", ip, err)
	}
	return has, nil
}

// ForEach calls fn for every allocated address in ascending order, from a
// state confirmed against etcd.
func (a *EtcdAllocator) ForEach(ctx context.Context, fn func(netip.Addr)) error {
	var snapshot *bitset.Set
	if err := a.Read(ctx, func(b *bitset.Set) { snapshot = b.Clone() }); err != nil {
		return fmt.Errorf("list allocated IPs: %w", err)
	}
	snapshot.ForEach(func(i int) { fn(addrOf(a.rng, i)) })
	return nil
}

// Snapshot returns the stored RangeAllocation's range and data, confirmed
// against etcd.
func (a *EtcdAllocator) Snapshot(ctx context.Context) (rangeSpec string, data []byte, err error) {
	if err := a.Read(ctx, func(b *bitset.Set) { data = b.Bytes() }); err != nil {
		return "", nil, fmt.Errorf("snapshot: %w", err)
	}
	return a.rng.Prefix().String(), data, nil
}

// DryRun returns a view that answers from confirmed state and never writes.
func (a *EtcdAllocator) DryRun() allocation.Interface { return dryRun{a} }
