package ipaddress

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/subrange"
)

// Scoped ServiceCIDRs (design.md §11). A request carrying
// allocation.Owner.Scoped is routed over the ranges its Service may use; a
// request without it (a re-mark of a stored address) and every request
// while no served range is scoped use all ranges, as before scopes existed.

// NamespaceGetter reads a namespace; client-go's typed client satisfies it.
// The allocator reads live only what its namespace cache does not hold yet
// (a namespace created a moment before its first Service).
type NamespaceGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Namespace, error)
}

// route is where one scoped request may take addresses, in the order it
// tries them.
type route struct {
	ranges []*cidrRange
	// matched are the scoped ServiceCIDRs whose scope the Service is in.
	matched []string
	// fallback: matched is not empty and every one of them falls back to
	// the unscoped ranges, which follow in ranges.
	fallback bool
	// allowed names every ServiceCIDR behind ranges that takes the use,
	// for messages.
	allowed []string
}

// scopeLabels returns the labels a scope matches the request on, and false
// when the request is not routed by scope.
func (a *Allocator) scopeLabels(ctx context.Context, owner allocation.Owner) (ns, svc labels.Set, routed bool, err error) {
	if owner.Scoped == nil || !a.hasScopes.Load() {
		return nil, nil, false, nil
	}
	if obj, err := a.nsLister.Get(owner.Namespace); err == nil {
		return obj.Labels, owner.Scoped.Labels, true, nil
	}
	obj, err := a.namespaces.Get(ctx, owner.Namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		// The label every namespace carries is all a missing one can match.
		return labels.Set{corev1.LabelMetadataName: owner.Namespace}, owner.Scoped.Labels, true, nil
	case err != nil:
		return nil, nil, false, fmt.Errorf("read namespace %q for ServiceCIDR scopes: %w", owner.Namespace, err)
	}
	return obj.Labels, owner.Scoped.Labels, true, nil
}

// routeLocked computes the route of a Service in a namespace with nsLabels
// and its own svcLabels for use u: the ranges of the scoped ServiceCIDRs it
// is in, highest priority first (then in allocation order); after them the
// unscoped ranges, when it is in no scope or every scope it is in falls
// back. A Service in no scope never takes a scoped range's address. A
// range whose lifecycle refuses u (lifecycle.go: the most closed of the
// ServiceCIDRs holding it) is not on the route; its ServiceCIDRs still
// count for the scopes the Service is in, so closing a scope's
// ServiceCIDRs never lets its Services spill elsewhere.
func (a *Allocator) routeLocked(nsLabels, svcLabels labels.Set, u use) route {
	type hit struct {
		r        *cidrRange
		priority int
	}
	var hits []hit
	var rt route
	var verdict scope.Verdict
	for _, r := range a.scopedRanges {
		best, in := 0, false
		for _, c := range r.carriers {
			if c.scope == nil {
				continue
			}
			matches := c.scope.Matches(nsLabels, svcLabels)
			verdict.Note(c.scope, matches)
			if !matches {
				continue
			}
			rt.matched = append(rt.matched, c.name)
			if !r.takes(u) {
				continue
			}
			rt.allowed = append(rt.allowed, c.name)
			if !in || c.scope.Priority > best {
				best, in = c.scope.Priority, true
			}
		}
		if in {
			hits = append(hits, hit{r, best})
		}
	}
	slices.SortStableFunc(hits, func(x, y hit) int { return cmp.Compare(y.priority, x.priority) })
	taken := make(map[*cidrRange]bool, len(hits))
	for _, h := range hits {
		rt.ranges = append(rt.ranges, h.r)
		taken[h.r] = true
	}
	if verdict.Unscoped() {
		rt.fallback = verdict.In
		for _, r := range a.unscoped {
			open := false
			for _, c := range r.carriers {
				if c.scope == nil && r.takes(u) {
					rt.allowed = append(rt.allowed, c.name)
					open = true
				}
			}
			if open && !taken[r] {
				rt.ranges = append(rt.ranges, r)
			}
		}
	}
	rt.matched = sortedUnique(rt.matched)
	rt.allowed = sortedUnique(rt.allowed)
	return rt
}

func sortedUnique(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}

// splitScopesLocked sorts the served ranges into the unscoped ones (some
// carrier is unscoped) and the scoped ones (some carrier is scoped), in
// allocation order; a range carried both ways is in both.
func (a *Allocator) splitScopesLocked() {
	a.unscoped, a.scopedRanges = a.unscoped[:0], a.scopedRanges[:0]
	for _, r := range a.ranges {
		scoped, unscoped := r.scopedWays()
		if unscoped {
			a.unscoped = append(a.unscoped, r)
		}
		if scoped {
			a.scopedRanges = append(a.scopedRanges, r)
		}
	}
	a.hasScopes.Store(len(a.scopedRanges) > 0)
}

// scopedWays reports whether some carrier of r is scoped, and whether
// some is not.
func (r *cidrRange) scopedWays() (scoped, unscoped bool) {
	for _, c := range r.carriers {
		if c.scope == nil {
			unscoped = true
		} else {
			scoped = true
		}
	}
	return scoped, unscoped
}

// candidatesLocked returns the ranges a request for use u may take
// addresses from: its route when routed, every served range otherwise
// (which pickLocked narrows to those that take dynamic picks).
func (a *Allocator) candidatesLocked(routed bool, nsLabels, svcLabels labels.Set, u use) ([]*cidrRange, *route) {
	if !routed || len(a.scopedRanges) == 0 {
		return a.ranges, nil
	}
	rt := a.routeLocked(nsLabels, svcLabels, u)
	return rt.ranges, &rt
}

// nothingFree is the error of a dynamic request that found no candidate;
// rt is its route (nil when not routed), nsLabels and svcLabels what it
// was routed on.
func (a *Allocator) nothingFree(rt *route, nsLabels, svcLabels labels.Set) error {
	if rt != nil {
		if err := a.closedError(nsLabels, svcLabels); err != nil {
			return err
		}
	}
	a.lock()
	served := len(a.ranges)
	var scoped []string
	for _, r := range a.scopedRanges {
		for _, c := range r.carriers {
			if c.scope != nil {
				scoped = append(scoped, c.name)
			}
		}
	}
	a.mu.Unlock()
	switch {
	case served == 0:
		return a.noServiceCIDR()
	case rt == nil:
		return a.fullError()
	case len(rt.ranges) == 0:
		return &NoServiceCIDRError{Family: subrange.FamilyName(a.ipv6), ScopedElsewhere: sortedUnique(scoped)}
	case len(rt.matched) > 0 && !rt.fallback:
		return &allocation.ScopeFullError{ServiceCIDRs: rt.matched}
	default:
		return a.fullError()
	}
}

// fullError is ErrFull when no unscoped range of the family has an address
// for a dynamic pick, with a hint naming their ServiceCIDRs, which are full
// and which are closed by their lifecycle, and what makes room (none when no
// unscoped range is served).
func (a *Allocator) fullError() error {
	a.lock()
	full, closed := a.notesLocked(a.ranges, func(c carrier) bool { return c.scope == nil })
	a.mu.Unlock()
	if len(closed) > 0 {
		return a.closedHint(full, closed)
	}
	if len(full) == 0 {
		return allocation.ErrFull
	}
	return allocation.NewFullError(fmt.Sprintf("the %s ServiceCIDRs that serve this Service have no free address: %s; "+
		"add a ServiceCIDR for more addresses, or delete Services no longer needed; `kubectl allocator status` shows how full each range is",
		subrange.FamilyName(a.ipv6), strings.Join(slices.Compact(full), ", ")))
}

// checkNewLocked checks a static request for ip (inside a served range)
// against the lifecycles and then the scopes of its ServiceCIDRs, when it
// is a new allocation (owner.Scoped): a re-mark of a stored address is never
// refused.
func (a *Allocator) checkNewLocked(ip netip.Addr, owner allocation.Owner, routed bool, nsLabels, svcLabels labels.Set) error {
	if owner.Scoped == nil {
		return nil
	}
	if err := a.checkDrainingLocked(ip); err != nil {
		return err
	}
	return a.checkScopeLocked(ip, routed, nsLabels, svcLabels)
}

// checkScopeLocked returns an *allocation.OutOfScopeError when a routed
// static request asks for ip (inside a served range) outside its route.
func (a *Allocator) checkScopeLocked(ip netip.Addr, routed bool, nsLabels, svcLabels labels.Set) error {
	ranges, rt := a.candidatesLocked(routed, nsLabels, svcLabels, useStatic)
	if rt == nil {
		return nil
	}
	for _, r := range ranges {
		if r.rng.Contains(ip) {
			return nil
		}
	}
	return &allocation.OutOfScopeError{IP: ip, Allowed: rt.allowed}
}
