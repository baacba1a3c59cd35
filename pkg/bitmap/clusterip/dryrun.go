package clusterip

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/subrange"
)

// bitsReader is a ClusterIP bitmap whose set can be read consistently: the
// in-memory Allocator under its lock, the EtcdAllocator from confirmed
// state (what etcd holds, never a reservation still in a batch).
type bitsReader interface {
	allocation.Interface
	Range() subrange.Range
	Read(ctx context.Context, fn func(*bitset.Set)) error
}

// dryRun is the one dry-run view of both ClusterIP bitmaps: it answers as
// the allocator would, from a read of its set, and never writes.
type dryRun struct{ a bitsReader }

func (d dryRun) Allocate(ctx context.Context, ip netip.Addr, _ allocation.Owner) error {
	slot, err := indexOf(d.a.Range(), ip)
	if err != nil {
		return err
	}
	var taken bool
	if err := d.a.Read(ctx, func(b *bitset.Set) { taken = b.Has(slot) }); err != nil {
		return fmt.Errorf("dry-run allocate %s: %w", ip, err)
	}
	if taken {
		return allocation.ErrAllocated
	}
	return nil
}

func (d dryRun) AllocateNext(ctx context.Context, _ allocation.Owner) (netip.Addr, error) {
	slot, found := 0, false
	if err := d.a.Read(ctx, func(b *bitset.Set) { slot, found = b.NextDynamic() }); err != nil {
		return netip.Addr{}, fmt.Errorf("dry-run allocate next: %w", err)
	}
	if !found {
		return netip.Addr{}, fullError(d.a.Range())
	}
	return addrOf(d.a.Range(), slot), nil
}

func (d dryRun) Release(context.Context, netip.Addr, allocation.Owner) error { return nil }
func (d dryRun) Has(ctx context.Context, ip netip.Addr) (bool, error)        { return d.a.Has(ctx, ip) }
func (d dryRun) ForEach(ctx context.Context, fn func(netip.Addr)) error      { return d.a.ForEach(ctx, fn) }
func (d dryRun) Usage(ctx context.Context) (allocation.Usage, error)         { return d.a.Usage(ctx) }
func (d dryRun) IPv6() bool                                                  { return d.a.IPv6() }
func (d dryRun) DryRun() allocation.Interface                                { return d }
