package ipaddress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/subrange"
)

// ErrTooManyCollisions is returned by AllocateNext when more than the
// configured number of candidates turned out to be taken by others.
var ErrTooManyCollisions = errors.New("too many collisions allocating an IP address")

// Collisions is how many candidates AllocateNext found already taken (by
// another replica or a stale cache) since the allocator started.
func (a *Allocator) Collisions() uint64 { return a.collided.Load() }

// reservation records what the informer said about an in-flight address
// while it was being claimed.
type reservation struct {
	seen   bool // an informer event for the address arrived
	exists bool // the last such event was an add
}

// Allocate claims ip for owner by creating its IPAddress. It returns
// allocation.ErrMismatchedNetwork when ip is in no served range and
// allocation.ErrAllocated when the IPAddress exists or another call of this
// process is claiming it. The cache is not trusted to refuse: a static
// request always asks the API server.
func (a *Allocator) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	if !a.ready.Load() {
		return allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return fmt.Errorf("allocate %s for service %s: %w", ip, owner, err)
	}
	a.lock()
	if !ip.IsValid() || ip.Is6() != a.ipv6 || !a.containsLocked(ip) {
		a.mu.Unlock()
		return allocation.ErrMismatchedNetwork
	}
	if err := a.checkNewLocked(ip, owner, routed, nsLabels, svcLabels); err != nil {
		a.mu.Unlock()
		return err
	}
	if a.inflight[ip] != nil {
		a.mu.Unlock()
		return allocation.ErrAllocated
	}
	a.reserveLocked(ip)
	a.mu.Unlock()

	err = a.create(ctx, ip, owner)
	a.finish(ip, err)
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		return allocation.ErrAllocated
	default:
		return fmt.Errorf("allocate %s for service %s: %w", ip, owner, err)
	}
}

// AllocateNext claims a free address for owner: candidates come from the
// first range, in allocation order, with a free address; a candidate taken
// meanwhile (AlreadyExists) is skipped, at most MaxCollisions times; any
// other API error aborts at once.
func (a *Allocator) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	return a.allocateNext(ctx, owner, nil)
}

// AllocateNextOutside is AllocateNext restricted to addresses that excluded
// does not contain: a served range lying wholly inside excluded is passed
// over, and a candidate inside it counts as a collision. The dual write uses
// it once the bitmap's window is full, so that an address the bitmap
// governs is never claimed without its bit.
func (a *Allocator) AllocateNextOutside(ctx context.Context, owner allocation.Owner, excluded Excluded) (netip.Addr, error) {
	return a.allocateNext(ctx, owner, excluded)
}

// Excluded is a set of addresses AllocateNextOutside must not hand out.
type Excluded interface {
	Contains(netip.Addr) bool
	// ContainsPrefix reports whether every usable address of p is in the set.
	ContainsPrefix(p netip.Prefix) bool
}

func (a *Allocator) allocateNext(ctx context.Context, owner allocation.Owner, excluded Excluded) (netip.Addr, error) {
	if !a.ready.Load() {
		return netip.Addr{}, allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate next for service %s: %w", owner, err)
	}
	for collisions := 0; ; {
		a.lock()
		ip, ok, byScope := a.pickForLocked(routed, nsLabels, svcLabels, excluded)
		if ok && excluded != nil && excluded.Contains(ip) {
			a.mu.Unlock()
			if collisions++; collisions > a.maxCollisions {
				return netip.Addr{}, fmt.Errorf("allocate next for service %s: %d candidates excluded: %w",
					owner, collisions, ErrTooManyCollisions)
			}
			continue
		}
		if ok {
			a.reserveLocked(ip)
		}
		a.mu.Unlock()
		if !ok {
			return netip.Addr{}, a.nothingFree(byScope, nsLabels, svcLabels)
		}
		err := a.create(ctx, ip, owner)
		a.finish(ip, err)
		switch {
		case err == nil:
			return ip, nil
		case apierrors.IsAlreadyExists(err):
			a.collided.Add(1)
			if collisions++; collisions > a.maxCollisions {
				return netip.Addr{}, fmt.Errorf("allocate next for service %s: %d candidates taken: %w",
					owner, collisions, ErrTooManyCollisions)
			}
			a.logger.V(4).Info("candidate taken, trying another", "ip", ip, "collisions", collisions)
		default:
			return netip.Addr{}, fmt.Errorf("allocate %s for service %s: %w", ip, owner, err)
		}
	}
}

func (a *Allocator) create(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	_, err := a.objects.Create(ctx, NewObject(ip, owner), metav1.CreateOptions{})
	return err
}

// pickLocked returns the first candidate of the first of ranges that takes
// dynamic picks and has a free address outside its holes. fullBefore, when
// not nil, is the list's place before which every range is full or closed
// (Allocator.fullBefore for a.ranges, unscopedFull for a.unscoped): the
// pick starts there, and moves it past the full or closed ranges it finds
// before any excluded one.
func (a *Allocator) pickLocked(ranges []*cidrRange, fullBefore *int, excluded Excluded) (netip.Addr, bool) {
	start, advance := 0, fullBefore != nil
	if advance {
		start = *fullBefore
	}
	for i := start; i < len(ranges); i++ {
		r := ranges[i]
		if !r.mode.Dynamic() {
			if advance {
				*fullBefore = i + 1
			}
			continue
		}
		if excluded != nil && excluded.ContainsPrefix(r.rng.Prefix()) {
			advance = false // not full, perhaps: the hint stops here
			continue
		}
		if ip, ok := r.index.NextOutside(r.holes); ok {
			return ip, true
		}
		if advance && r.index.Free() == 0 {
			*fullBefore = i + 1
		} else {
			advance = false
		}
	}
	return netip.Addr{}, false
}

// reserveLocked marks ip used and in flight. The caller must not hold a
// reservation for ip already.
func (a *Allocator) reserveLocked(ip netip.Addr) {
	a.inflight[ip] = &reservation{}
	a.markLocked(ip, true)
}

// finish ends the claim of ip. If the informer reported on ip meanwhile, its
// last word wins; otherwise the address exists when the create succeeded or
// collided (its add event is still on the way), and does not otherwise.
func (a *Allocator) finish(ip netip.Addr, createErr error) {
	a.lock()
	defer a.mu.Unlock()
	r := a.inflight[ip]
	delete(a.inflight, ip)
	exists := createErr == nil || apierrors.IsAlreadyExists(createErr)
	if r != nil && r.seen {
		exists = r.exists
	} else if exists {
		a.unobserved[ip] = true
	}
	a.markLocked(ip, exists)
}

// NoServiceCIDRError is returned by AllocateNext when no ready ServiceCIDR
// serves the family: every one is being deleted, or none exists. It is not
// "range is full": the fix is a ServiceCIDR, not fewer Services.
type NoServiceCIDRError struct {
	Family string
	// Terminating names the ServiceCIDRs of the family being deleted.
	Terminating []string
	// ScopedElsewhere names the scoped ServiceCIDRs of the family when
	// every served range is scoped to other Services than the requester.
	ScopedElsewhere []string
}

func (e *NoServiceCIDRError) Error() string {
	if len(e.ScopedElsewhere) > 0 {
		verb := "are"
		if len(e.ScopedElsewhere) == 1 {
			verb = "is"
		}
		return fmt.Sprintf("no ready ServiceCIDR serves %s addresses to this Service: ServiceCIDR %s %s scoped to other Services, and no unscoped one serves %s",
			e.Family, allocation.QuoteNames(e.ScopedElsewhere), verb, e.Family)
	}
	msg := "no ready ServiceCIDR serves " + e.Family + " addresses"
	if len(e.Terminating) > 0 {
		msg += fmt.Sprintf(" (ServiceCIDR %s is being deleted and serves no new allocations; "+
			"create another ServiceCIDR to allocate meanwhile)", strings.Join(e.Terminating, ", "))
	}
	return msg
}

func (a *Allocator) noServiceCIDR() error {
	e := &NoServiceCIDRError{Family: subrange.FamilyName(a.ipv6)}
	cidrs, err := a.cidrLister.List(labels.Everything())
	if err != nil {
		return e
	}
	for _, sc := range cidrs {
		if sc.DeletionTimestamp == nil {
			continue
		}
		for _, text := range sc.Spec.CIDRs {
			if p, err := subrange.ParsePrefix(text); err == nil && p.Addr().Is6() == a.ipv6 {
				e.Terminating = append(e.Terminating, fmt.Sprintf("%q", sc.Name))
				break
			}
		}
	}
	slices.Sort(e.Terminating)
	return e
}
