// Package dualwrite is the IPAddress model's allocator while bitmap-model
// writers may be live (see internal/transition): every address inside the
// bitmap's window is claimed in the bitmap (compare-and-swap on the
// RangeAllocation) before its IPAddress is created, and both are freed on
// release. Outside a transition it is the plain IPAddress allocator.
//
// Invariants and why:
//
//   - The bit is claimed first, as kube-apiserver 1.31–1.33 did. A bitmap
//     replica sees only the bitmap; if an IPAddress-model replica created
//     the IPAddress first and set the bit second, a bitmap replica could
//     take the address in between.
//   - Dynamic candidates inside the window come from the bitmap, which
//     knows the allocations of both models; the IPAddress index alone does
//     not know the bitmap replicas' allocations and would collide on every
//     one of them. An IPAddress that exists without its bit (written by a
//     writer that does not dual-write) is a collision: the bit stays set,
//     because the address is in use, and the next candidate is tried.
//   - Only once the window is full are addresses outside it (other
//     ServiceCIDRs, or IPv6 beyond the bitmap's 65,535 slots) handed out,
//     as IPAddresses only; never "range is full" while a ServiceCIDR has
//     room (kubernetes#129797).
//   - A release frees the bit unless the IPAddress belongs to another
//     Service that holds the address: the address is then that Service's,
//     and its bit stays. An IPAddress absent (a Service allocated by a
//     bitmap replica has none), the owner's, or naming a Service that does
//     not hold the address (the repair created it for a Service deleted
//     meanwhile) frees it.
//   - A failed claim frees what it took on a context detached from the
//     request, so a cancelled request leaks nothing; except a claim whose
//     IPAddress create has an unknown outcome (allocation.ErrOutcomeUnknown):
//     its IPAddress may still land, so its bit stays set and no bitmap
//     replica hands the address out beside it. The bitmap repair frees such
//     a bit as any leak: after its LeakGrace, and once every write lease
//     alive then has ended (repair.Options.InFlight). A claim carries no
//     lease, so one that lands after that makes an orphan IPAddress on a free
//     address, which the IPAddress repair deletes; never a duplicate, since a
//     claim is refused where the address is taken.
package dualwrite

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// Gate is the replica's transition membership (transition.Coordinator).
type Gate interface {
	// Begin is called before an allocation decides anything; done is
	// called when it is over. dual says whether to write the bitmap too.
	Begin(ctx context.Context) (dual bool, done func(), err error)
}

// undoTimeout bounds the release of a partial claim.
const undoTimeout = 30 * time.Second

// Allocator is one family's allocator of the IPAddress model with dual
// write. It implements allocation.Interface.
type Allocator struct {
	ip     *ipaddress.Allocator
	bits   *clusterip.EtcdAllocator
	window window
	gate   Gate
}

var _ allocation.Interface = (*Allocator)(nil)

// New returns the dual-writing allocator over ip (the IPAddress model) and
// bits (the bitmap of the same family, from --service-cluster-ip-range).
func New(ip *ipaddress.Allocator, bits *clusterip.EtcdAllocator, gate Gate) (*Allocator, error) {
	if ip == nil || bits == nil || gate == nil {
		return nil, errors.New("dualwrite: the IPAddress allocator, the bitmap and the gate are required")
	}
	if ip.IPv6() != bits.IPv6() {
		return nil, errors.New("dualwrite: the IPAddress allocator and the bitmap are of different families")
	}
	return &Allocator{ip: ip, bits: bits, window: window{bits.Range()}, gate: gate}, nil
}

// IPAddress returns the underlying IPAddress allocator.
func (a *Allocator) IPAddress() *ipaddress.Allocator { return a.ip }

// Bitmap returns the dual-written bitmap.
func (a *Allocator) Bitmap() *clusterip.EtcdAllocator { return a.bits }

// Allocate claims ip: the bit first when ip is in the bitmap's window and
// dual write is on, then the IPAddress.
func (a *Allocator) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	dual, done, err := a.gate.Begin(ctx)
	if err != nil {
		return fmt.Errorf("allocate %s: %w", ip, err)
	}
	defer done()
	if !dual || !a.window.Contains(ip) {
		return a.ip.Allocate(ctx, ip, owner)
	}
	if err := a.claimBit(ctx, func(ctx context.Context) error { return a.bits.Allocate(ctx, ip, owner) }); err != nil {
		return err
	}
	err = a.ip.Allocate(ctx, ip, owner)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, allocation.ErrAllocated):
		return err // in use by another Service: its bit stays
	default:
		a.undoBit(ctx, ip, err)
		return err
	}
}

// claimBit runs claim, creating the map first if it is missing (a
// transition resumed on a cluster whose map was never created).
func (a *Allocator) claimBit(ctx context.Context, claim func(context.Context) error) error {
	err := claim(ctx)
	if !errors.Is(err, allocation.ErrAllocationDisabled) {
		return err
	}
	if _, ierr := a.bits.Initialize(ctx); ierr != nil {
		return fmt.Errorf("create the bitmap %s for dual write: %w", a.bits.Key(), ierr)
	}
	return claim(ctx)
}

// undoBit frees the bit of a claim whose IPAddress create failed with
// cause, unless that create's outcome is unknown (allocation.ErrOutcomeUnknown):
// its IPAddress may still land, and a freed bit would let a bitmap-model
// replica hand the address out beside it. Such a bit stays set until the
// bitmap repair frees it as a leak (LeakPasses passes, LeakGrace) when no
// Service holds the address; see the package doc for the window that
// leaves.
func (a *Allocator) undoBit(ctx context.Context, ip netip.Addr, cause error) {
	if errors.Is(cause, allocation.ErrOutcomeUnknown) {
		klog.FromContext(ctx).Info("Keeping the bit of a claim whose outcome is unknown; the bitmap repair frees it once the address is held by nothing", "ip", ip)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if err := a.bits.Release(ctx, ip, allocation.Owner{}); err != nil {
		klog.FromContext(ctx).Error(err, "Freeing the bit of a failed claim failed; bitmap repair frees it", "ip", ip)
	}
}

// AllocateNext takes a free address: from the bitmap while dual write is on
// and its window has room, else from the IPAddress model outside the window.
func (a *Allocator) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	dual, done, err := a.gate.Begin(ctx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate next: %w", err)
	}
	defer done()
	if !dual {
		return a.ip.AllocateNext(ctx, owner)
	}
	holeHits := 0
	for collisions := 0; collisions <= ipaddress.DefaultMaxCollisions; {
		var ip netip.Addr
		err := a.claimBit(ctx, func(ctx context.Context) error {
			var err error
			ip, err = a.bits.AllocateNext(ctx, owner)
			return err
		})
		switch {
		case errors.Is(err, allocation.ErrFull):
			return a.ip.AllocateNextOutside(ctx, owner, a.window)
		case err != nil:
			return netip.Addr{}, err
		}
		if !a.ip.TakesDynamic(ip) {
			a.undoBit(ctx, ip, nil)
			if a.ip.InHole(ip) && holeHits < ipaddress.DefaultMaxCollisions {
				// A manual-only or draining ServiceCIDR nested in the
				// window's closes this address only: the bitmap picks again.
				holeHits++
				continue
			}
			// The window's ServiceCIDR is manual-only or draining
			// (pkg/ipaddress/lifecycle), which the bitmap does not know, or
			// mostly closed by nested ones: the address comes from the
			// ServiceCIDRs outside it.
			return a.ip.AllocateNextOutside(ctx, owner, a.window)
		}
		err = a.ip.Allocate(ctx, ip, owner)
		switch {
		case err == nil:
			return ip, nil
		case errors.Is(err, allocation.ErrAllocated):
			collisions++ // an IPAddress without its bit: the bit now records it
		case errors.Is(err, allocation.ErrMismatchedNetwork):
			// The window is in no served ServiceCIDR (the default one is
			// being deleted): allocate from the ServiceCIDRs that are.
			a.undoBit(ctx, ip, nil)
			return a.ip.AllocateNextOutside(ctx, owner, a.window)
		case errors.As(err, new(*allocation.OutOfScopeError)), errors.As(err, new(*allocation.DrainingError)):
			// The Service's scope keeps it out of the window's ServiceCIDR,
			// or the ServiceCIDR began draining since TakesDynamic: the
			// address comes from the ServiceCIDRs outside it.
			a.undoBit(ctx, ip, nil)
			return a.ip.AllocateNextOutside(ctx, owner, a.window)
		default:
			a.undoBit(ctx, ip, err)
			return netip.Addr{}, err
		}
	}
	return netip.Addr{}, fmt.Errorf("allocate next for service %s: %d bitmap candidates held IPAddresses: %w",
		owner, ipaddress.DefaultMaxCollisions+1, ipaddress.ErrTooManyCollisions)
}

// Release frees ip's IPAddress if it is owner's, and then its bit unless the
// IPAddress belongs to another Service that holds the address.
func (a *Allocator) Release(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	dual, done, err := a.gate.Begin(ctx)
	if err != nil {
		return fmt.Errorf("release %s: %w", ip, err)
	}
	defer done()
	outcome, err := a.ip.ReleaseOwned(ctx, ip, owner)
	if err != nil {
		return err
	}
	if !dual || outcome == ipaddress.OtherOwner || !a.window.Contains(ip) {
		return nil
	}
	return a.bits.Release(ctx, ip, owner)
}

// Has reports whether ip is allocated in either record.
func (a *Allocator) Has(ctx context.Context, ip netip.Addr) (bool, error) {
	has, err := a.ip.Has(ctx, ip)
	if err != nil || has {
		return has, err
	}
	dual, done, err := a.gate.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("has %s: %w", ip, err)
	}
	defer done()
	if !dual || !a.window.Contains(ip) {
		return false, nil
	}
	return a.bits.Has(ctx, ip)
}

// ForEach, Usage, UsageByCIDR, Ready and Collisions report the IPAddress
// model, which holds every allocation of this replica.
func (a *Allocator) ForEach(ctx context.Context, fn func(netip.Addr)) error {
	return a.ip.ForEach(ctx, fn)
}

// Usage reports the IPAddress model's fill level.
func (a *Allocator) Usage(ctx context.Context) (allocation.Usage, error) { return a.ip.Usage(ctx) }

// UsageByCIDR reports each served range's fill level.
func (a *Allocator) UsageByCIDR(ctx context.Context) (map[netip.Prefix]allocation.Usage, error) {
	return a.ip.UsageByCIDR(ctx)
}

// Ranges returns the IPAddress model's served prefixes (for per-CIDR
// metrics).
func (a *Allocator) Ranges() []netip.Prefix { return a.ip.Ranges() }

// CIDROf names the IPAddress model's served prefix of ip (ipaddress.Allocator.CIDROf).
func (a *Allocator) CIDROf(ip netip.Addr) (netip.Prefix, bool) { return a.ip.CIDROf(ip) }

// Ready reports whether the IPAddress model's caches are synced.
func (a *Allocator) Ready() bool { return a.ip.Ready() }

// Collisions counts the IPAddress model's collisions.
func (a *Allocator) Collisions() uint64 { return a.ip.Collisions() }

// IPv6 reports the family.
func (a *Allocator) IPv6() bool { return a.ip.IPv6() }

// DryRun returns a view that checks both records and changes nothing.
func (a *Allocator) DryRun() allocation.Interface { return dryRun{a} }

type dryRun struct{ a *Allocator }

func (d dryRun) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	dual, done, err := d.a.gate.Begin(ctx)
	if err != nil {
		return fmt.Errorf("dry-run allocate %s: %w", ip, err)
	}
	defer done()
	if dual && d.a.window.Contains(ip) {
		if err := d.a.bits.DryRun().Allocate(ctx, ip, owner); err != nil {
			return err
		}
	}
	return d.a.ip.DryRun().Allocate(ctx, ip, owner)
}

func (d dryRun) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	dual, done, err := d.a.gate.Begin(ctx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dry-run allocate next: %w", err)
	}
	defer done()
	if dual {
		if ip, err := d.a.bits.DryRun().AllocateNext(ctx, owner); err == nil {
			return ip, nil
		}
	}
	return d.a.ip.DryRun().AllocateNext(ctx, owner)
}

func (dryRun) Release(context.Context, netip.Addr, allocation.Owner) error { return nil }
func (d dryRun) Has(ctx context.Context, ip netip.Addr) (bool, error)      { return d.a.Has(ctx, ip) }
func (d dryRun) ForEach(ctx context.Context, fn func(netip.Addr)) error    { return d.a.ForEach(ctx, fn) }
func (d dryRun) Usage(ctx context.Context) (allocation.Usage, error)       { return d.a.Usage(ctx) }
func (d dryRun) IPv6() bool                                                { return d.a.IPv6() }
func (d dryRun) DryRun() allocation.Interface                              { return d }

// window is the bitmap's usable range as an ipaddress.Excluded set.
type window struct{ rng subrange.Range }

func (w window) Contains(ip netip.Addr) bool { return w.rng.Contains(ip) }

func (w window) ContainsPrefix(p netip.Prefix) bool {
	r, err := subrange.New(p, model.IPAddress)
	if err != nil || r.Size() == 0 {
		return false
	}
	return w.rng.Contains(r.First()) && w.rng.Contains(r.Last())
}
