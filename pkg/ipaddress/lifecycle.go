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

// ServiceCIDR lifecycles (pkg/ipaddress/lifecycle, design.md §11). Where
// ServiceCIDRs overlap, the most closed lifecycle wins: an address inside a
// draining ServiceCIDR takes no new allocation, and one inside a draining or
// manual-only ServiceCIDR no dynamic pick, whatever other ServiceCIDR also
// holds it (the same prefix, a wider one, a narrower one). Draining is the
// step before a ServiceCIDR is emptied (`allocator renumber`) and deleted: a
// wider open ServiceCIDR that went on handing out its addresses would put
// re-created Services back into the range being emptied, and its Draining
// condition would say "takes no new allocation" while it does. The open
// ServiceCIDR keeps every other address, and its conditions and the
// overlap's warnings name what is closed. Only new allocations are refused:
// a re-mark of a stored address (Owner.Scoped nil) and the server's own
// default/kubernetes never are, so no Service loses or is refused the
// address it holds.

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

// takes reports whether the range's lifecycle takes use u.
func (r *cidrRange) takes(u use) bool {
	switch u {
	case useDynamic:
		return r.mode.Dynamic()
	case useStatic:
		return r.mode.Static()
	default:
		return true
	}
}

// ownMode returns the most closed of carriers' lifecycles, and the
// carriers that set it when it is not automatic.
func ownMode(carriers []carrier) (lifecycle.Mode, []string) {
	mode, names := lifecycle.Automatic, []string(nil)
	for _, c := range carriers {
		switch {
		case c.mode > mode:
			mode, names = c.mode, []string{c.name}
		case c.mode == mode && c.mode != lifecycle.Automatic:
			names = append(names, c.name)
		}
	}
	return mode, names
}

// closeLocked sets r's mode (the most closed of its own and of those of
// the served ranges holding it), the ServiceCIDRs that set it, and its
// holes (the closed ranges nested inside it, when it takes dynamic picks
// itself). It asks only the closed ranges (a.closed) that hold r or lie
// in it: closed ranges are few, and a cluster without lifecycles asks
// none.
func (a *Allocator) closeLocked(r *cidrRange) {
	p := r.rng.Prefix()
	r.mode, r.closedBy, r.holes = r.own, slices.Clone(r.ownBy), nil
	var buf [4]*cidrRange
	for _, c := range a.closed.AppendContaining(buf[:0], p.Addr()) {
		if c.rng.Prefix().Bits() >= p.Bits() {
			continue // r itself, or a range inside it
		}
		if c.own > r.mode {
			r.mode, r.closedBy = c.own, nil
		}
		if c.own == r.mode {
			r.closedBy = append(r.closedBy, c.ownBy...)
		}
	}
	r.closedBy = sortedUnique(r.closedBy)
	if !r.mode.Dynamic() {
		return
	}
	var nested []netip.Prefix
	for _, c := range a.closed.Overlapping(p) {
		if q := c.rng.Prefix(); q.Bits() > p.Bits() {
			nested = append(nested, q)
		}
	}
	if len(nested) > 0 {
		r.holes = holesIn(r.rng, nested)
	}
}

// TakesDynamic reports whether ip lies in a served range and every served
// range whose prefix holds it takes dynamic picks. The dual write asks it
// of the candidate its bitmap picks, which knows nothing of lifecycles.
func (a *Allocator) TakesDynamic(ip netip.Addr) bool {
	a.lock()
	defer a.mu.Unlock()
	var buf [4]*cidrRange
	served := false
	for _, r := range a.lookup.appendHolding(buf[:0], ip) {
		if !r.mode.Dynamic() {
			return false
		}
		served = served || r.rng.Contains(ip)
	}
	return served
}

// InHole reports whether ip lies in a hole of a served range that takes
// dynamic picks: a draining or manual-only ServiceCIDR nested inside an
// open one closes ip, while the open one has other addresses. The dual
// write asks it when TakesDynamic refuses its bitmap's candidate: another
// candidate of the same window may be open.
func (a *Allocator) InHole(ip netip.Addr) bool {
	a.lock()
	defer a.mu.Unlock()
	var buf [4]*cidrRange
	for _, r := range a.lookup.appendHolding(buf[:0], ip) {
		if !r.mode.Dynamic() || len(r.holes) == 0 {
			continue
		}
		if off, ok := r.rng.Index(ip); ok {
			if _, in := r.holes.at(off); in {
				return true
			}
		}
	}
	return false
}

// checkDrainingLocked returns an *allocation.DrainingError when a draining
// ServiceCIDR governs ip (inside a served range): ip lies in a range whose
// mode is draining, its own or that of a range holding it.
func (a *Allocator) checkDrainingLocked(ip netip.Addr) error {
	var draining []string
	var buf [4]*cidrRange
	for _, r := range a.lookup.appendHolding(buf[:0], ip) {
		if r.mode == lifecycle.Draining {
			draining = append(draining, r.closedBy...)
		}
	}
	if len(draining) == 0 {
		return nil
	}
	return &allocation.DrainingError{IP: ip, ServiceCIDRs: sortedUnique(draining)}
}

// notesLocked describes the carriers of ranges that keep accepts, for a
// dynamic request that found nothing free: full lists those of automatic
// ranges (`"a" (10.0.0.0/24)`), closed the others with the mode that
// governs them (`"b" (10.1.0.0/24) is draining`, or `"c" (10.2.0.0/24)
// lies in ServiceCIDR "old", which is draining`). Both are sorted, each
// entry once.
func (a *Allocator) notesLocked(ranges []*cidrRange, keep func(carrier) bool) (full, closed []string) {
	for _, r := range ranges {
		for _, c := range r.carriers {
			if !keep(c) {
				continue
			}
			entry := fmt.Sprintf("%q (%s)", c.name, r.rng.Prefix())
			if c.mode < r.mode {
				entry += fmt.Sprintf(" lies in ServiceCIDR %s, which", allocation.QuoteNames(r.closedBy))
			}
			switch r.mode {
			case lifecycle.Automatic:
				full = append(full, entry)
			case lifecycle.Manual:
				closed = append(closed, entry+" is manual-only (user-chosen ClusterIPs only)")
			default:
				closed = append(closed, entry+" is "+r.mode.String())
			}
		}
	}
	return sortedUnique(full), sortedUnique(closed)
}

// closedError is the error of a routed dynamic request that found nothing
// free when some ServiceCIDR its scopes let it use is closed by its
// lifecycle; nil when none is (the scope errors then say it all).
func (a *Allocator) closedError(nsLabels, svcLabels labels.Set) error {
	a.lock()
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
