package dualwrite

import (
	"context"
	"fmt"
	"net/netip"

	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// BitmapReplica is the bitmap model's allocator on a cluster that may be in
// transition. It allocates only through the gate, so a replica whose
// membership lapsed (frozen, cut off) registers again first and one that
// finds the bitmap retired stops; and a release also deletes the Service's
// IPAddress, if it has one, so `kubectl get ipaddresses` stays true and an
// IPAddress-model replica does not meet a stale one. (The IPAddress repair
// creates the IPAddresses of its allocations.) It embeds the etcd bitmap,
// so the bitmap repair and migration see it as a stored map.
type BitmapReplica struct {
	*clusterip.EtcdAllocator
	gate     Gate
	objects  ipaddress.Objects
	services ipaddress.Services
}

// NewBitmapReplica wraps bits; objects (may be nil) deletes IPAddresses on
// release, and services reads the Service an IPAddress that is not the
// releasing owner's names.
func NewBitmapReplica(bits *clusterip.EtcdAllocator, gate Gate, objects ipaddress.Objects, services ipaddress.Services) *BitmapReplica {
	return &BitmapReplica{EtcdAllocator: bits, gate: gate, objects: objects, services: services}
}

// Allocate claims ip in the bitmap.
func (b *BitmapReplica) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	_, done, err := b.gate.Begin(ctx)
	if err != nil {
		return fmt.Errorf("allocate %s: %w", ip, err)
	}
	defer done()
	return b.EtcdAllocator.Allocate(ctx, ip, owner)
}

// AllocateNext takes a free address from the bitmap.
func (b *BitmapReplica) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	_, done, err := b.gate.Begin(ctx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate next: %w", err)
	}
	defer done()
	return b.EtcdAllocator.AllocateNext(ctx, owner)
}

// Release frees the bit and deletes the owner's IPAddress of ip, if any. The
// IPAddress goes first: while it exists the address is not free for an
// IPAddress-model replica anyway, and a failure leaves the bit set (a leak
// for repair, never a duplicate). The bit stays when the IPAddress is
// another Service's that holds the address; one naming a Service that does
// not (NotHeld: the repair created it for a Service deleted meanwhile)
// does not keep it, or the address would be refused until the repair ran.
func (b *BitmapReplica) Release(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	if b.objects != nil && b.Range().Contains(ip) {
		outcome, err := ipaddress.DeleteOwned(ctx, b.objects, b.services, ip, owner)
		if err != nil {
			return err
		}
		if outcome == ipaddress.OtherOwner {
			klog.FromContext(ctx).V(2).Info("Keeping the bit of an address whose IPAddress belongs to another Service", "ip", ip, "service", owner)
			return nil
		}
	}
	return b.EtcdAllocator.Release(ctx, ip, owner)
}
