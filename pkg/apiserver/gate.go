package apiserver

import (
	"context"
	"net/netip"
	"sync/atomic"

	"github.com/allocator/allocator/pkg/allocation"
)

// gatedAllocator answers allocation.ErrNotReady (a 503 with Retry-After to
// clients) until opened. The server opens it when bootstrap has rebuilt the
// allocations from stored Services, so no address is handed out twice after a
// restart.
type gatedAllocator struct {
	allocation.Interface
	open *atomic.Bool
}

func (g gatedAllocator) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	if !g.open.Load() {
		return allocation.ErrNotReady
	}
	return g.Interface.Allocate(ctx, ip, owner)
}

func (g gatedAllocator) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	if !g.open.Load() {
		return netip.Addr{}, allocation.ErrNotReady
	}
	return g.Interface.AllocateNext(ctx, owner)
}

func (g gatedAllocator) DryRun() allocation.Interface {
	return gatedAllocator{Interface: g.Interface.DryRun(), open: g.open}
}
