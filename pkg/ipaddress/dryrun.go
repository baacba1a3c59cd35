package ipaddress

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/allocator/allocator/pkg/allocation"
)

// DryRun returns a view that answers like a but never writes.
func (a *Allocator) DryRun() allocation.Interface { return dryRun{a} }

type dryRun struct{ a *Allocator }

// Allocate reports what Allocate would: a *NotInRangeError (or
// ErrMismatchedNetwork with no range served), ErrAllocated (from a fresh
// read) or nil.
func (d dryRun) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	a := d.a
	if !a.ready.Load() {
		return allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return fmt.Errorf("dry-run allocate %s: %w", ip, err)
	}
	a.lock()
	inRange := ip.IsValid() && ip.Is6() == a.ipv6 && a.containsLocked(ip)
	var scopeErr error
	if inRange {
		scopeErr = a.checkNewLocked(ip, owner, routed, nsLabels, svcLabels)
	}
	busy := a.inflight[ip] != nil
	var first string
	if len(a.ranges) > 0 {
		first = a.ranges[0].rng.Prefix().String()
	}
	a.mu.Unlock()
	if !inRange {
		// Upstream's dry run asks one range's allocator (its
		// MetaAllocator.DryRun), which answers "not in the valid range".
		if first != "" {
			return &allocation.NotInRangeError{IP: ip, ValidRange: first}
		}
		return allocation.ErrMismatchedNetwork
	}
	if scopeErr != nil {
		return scopeErr
	}
	if busy {
		return allocation.ErrAllocated
	}
	has, err := a.Has(ctx, ip)
	if err != nil {
		return fmt.Errorf("dry-run allocate %s: %w", ip, err)
	}
	if has {
		return allocation.ErrAllocated
	}
	return nil
}

// AllocateNext reports the address AllocateNext would try first.
func (d dryRun) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	a := d.a
	if !a.ready.Load() {
		return netip.Addr{}, allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dry-run allocate next: %w", err)
	}
	a.lock()
	ip, ok, byScope := a.pickForLocked(routed, nsLabels, svcLabels, nil)
	a.mu.Unlock()
	switch {
	case ok:
		return ip, nil
	case !byScope:
		return netip.Addr{}, a.fullError()
	default:
		return netip.Addr{}, a.nothingFree(byScope, nsLabels, svcLabels)
	}
}

func (dryRun) Release(context.Context, netip.Addr, allocation.Owner) error { return nil }
func (d dryRun) Has(ctx context.Context, ip netip.Addr) (bool, error)      { return d.a.Has(ctx, ip) }
func (d dryRun) ForEach(ctx context.Context, fn func(netip.Addr)) error    { return d.a.ForEach(ctx, fn) }
func (d dryRun) Usage(ctx context.Context) (allocation.Usage, error)       { return d.a.Usage(ctx) }
func (d dryRun) IPv6() bool                                                { return d.a.ipv6 }
func (d dryRun) DryRun() allocation.Interface                              { return d }
