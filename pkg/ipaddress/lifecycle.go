package ipaddress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/subrange"
)

// ServiceCIDR lifecycles (pkg/ipaddress/lifecycle, design.md §11). A range takes a
// dynamic pick when some ServiceCIDR carrying it is automatic, and a new
// user-chosen address when some ServiceCIDR carrying it is not draining: a
// prefix carried by several ServiceCIDRs is served as the most open of
// them, as a prefix carried by a scoped and an unscoped one serves both
// audiences. Only new allocations are refused: a re-mark of a stored
// address (Owner.Scoped nil) and the server's own default/kubernetes are
// never refused, so no Service loses or is refused the address it holds.

// use is what a request wants of a range.
type use int

const (
	// useAny is either use (for messages about what a route would hold).
	useAny use = iota
	// useDynamic is a dynamic pick.
	useDynamic
	// useStatic is a user-chosen address.
	useStatic
)

// takes reports whether the carrier's lifecycle takes use u.
func (c carrier) takes(u use) bool {
	switch u {
	case useDynamic:
		return c.mode.Dynamic()
	case useStatic:
		return c.mode.Static()
	default:
		return true
	}
}

// TakesDynamic reports whether some served range holding ip takes dynamic
// picks. The dual write asks it of the candidate its bitmap picks, which
// knows nothing of lifecycles.
func (a *Allocator) TakesDynamic(ip netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		if r := a.ranges[i]; r.dynamic && r.rng.Contains(ip) {
			return true
		}
	}
	return false
}

// checkDrainingLocked returns an *allocation.DrainingError when ip (inside
// a served range) lies only in ranges whose every carrier is draining.
func (a *Allocator) checkDrainingLocked(ip netip.Addr) error {
	var draining []string
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		r := a.ranges[i]
		if !r.rng.Contains(ip) {
			continue
		}
		for _, c := range r.carriers {
			if c.mode.Static() {
				return nil
			}
			draining = append(draining, c.name)
		}
	}
	if len(draining) == 0 {
		return nil
	}
	return &allocation.DrainingError{IP: ip, ServiceCIDRs: sortedUnique(draining)}
}

// notesLocked describes the carriers of ranges that keep accepts, for a
// dynamic request that found nothing free: full lists the automatic ones
// (`"a" (10.0.0.0/24)`), closed the others with their mode
// (`"b" (10.1.0.0/24) is draining`). Both are sorted, each entry once.
func (a *Allocator) notesLocked(ranges []*cidrRange, keep func(carrier) bool) (full, closed []string) {
	for _, r := range ranges {
		for _, c := range r.carriers {
			if !keep(c) {
				continue
			}
			entry := fmt.Sprintf("%q (%s)", c.name, r.rng.Prefix())
			switch c.mode {
			case lifecycle.Automatic:
				full = append(full, entry)
			case lifecycle.Manual:
				closed = append(closed, entry+" is manual-only (user-chosen ClusterIPs only)")
			default:
				closed = append(closed, entry+" is "+c.mode.String())
			}
		}
	}
	return sortedUnique(full), sortedUnique(closed)
}

// closedError is the error of a routed dynamic request that found nothing
// free when some ServiceCIDR its scopes let it use is closed by its
// lifecycle; nil when none is (the scope errors then say it all).
func (a *Allocator) closedError(nsLabels, svcLabels labels.Set) error {
	a.mu.Lock()
	rt := a.routeLocked(nsLabels, svcLabels, useAny)
	full, closed := a.notesLocked(rt.ranges, func(c carrier) bool { return slices.Contains(rt.allowed, c.name) })
	a.mu.Unlock()
	if len(closed) == 0 {
		return nil
	}
	return a.closedHint(full, closed)
}

// closedHint is ErrFull, kube-apiserver's text, with a hint naming the full
// and the closed ServiceCIDRs and what makes room.
func (a *Allocator) closedHint(full, closed []string) error {
	parts := []string{strings.Join(closed, "; ")}
	if len(full) > 0 {
		parts = append([]string{strings.Join(full, ", ") + " full"}, parts...)
	}
	return allocation.NewFullError(fmt.Sprintf("no %s ServiceCIDR that serves this Service takes a dynamic pick: %s; "+
		"add a ServiceCIDR, reopen one (remove its %s annotations), or choose spec.clusterIP in a manual-only one; "+
		"`kubectl allocator status` shows each range's state and fill",
		subrange.FamilyName(a.ipv6), strings.Join(parts, "; "), lifecycle.Prefix))
}
