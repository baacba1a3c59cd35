package ipaddress

import (
	"cmp"
	"context"
	"fmt"
	"maps"
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
	var rt route
	var verdict scope.Verdict
	rt.ranges, verdict = a.matchScopesLocked(nsLabels, svcLabels, u, &rt)
	taken := make(map[*cidrRange]bool, len(rt.ranges))
	for _, r := range rt.ranges {
		taken[r] = true
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

// matchScopesLocked returns the scoped ranges a Service in a namespace
// with nsLabels and its own svcLabels may use for use u, highest priority
// first (then in allocation order), and how its scopes treat it. It asks
// the carriers the scope index finds for nsLabels; names, when not nil
// (an error's message), gets the ServiceCIDRs it matched and those
// allowed, from every scoped carrier.
func (a *Allocator) matchScopesLocked(nsLabels, svcLabels labels.Set, u use, names *route) ([]*cidrRange, scope.Verdict) {
	var verdict scope.Verdict
	best := map[*cidrRange]int{}
	visit := func(r *cidrRange, c carrier) {
		matches := c.scope.Matches(nsLabels, svcLabels)
		verdict.Note(c.scope, matches)
		if !matches {
			return
		}
		if names != nil {
			names.matched = append(names.matched, c.name)
		}
		if !r.takes(u) {
			return
		}
		if names != nil {
			names.allowed = append(names.allowed, c.name)
		}
		if p, in := best[r]; !in || c.scope.Priority > p {
			best[r] = c.scope.Priority
		}
	}
	if names == nil {
		a.scopeIdx.each(nsLabels, visit)
	} else {
		for _, r := range a.scopedRanges {
			for _, c := range r.carriers {
				if c.scope != nil {
					visit(r, c)
				}
			}
		}
	}
	hits := slices.Collect(maps.Keys(best))
	slices.SortFunc(hits, func(x, y *cidrRange) int {
		if c := cmp.Compare(best[y], best[x]); c != 0 {
			return c
		}
		return cmp.Compare(x.pos, y.pos)
	})
	return hits, verdict
}

func sortedUnique(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}

// splitScopesLocked sorts the served ranges into the unscoped ones (some
// carrier is unscoped) and the scoped ones (some carrier is scoped), in
// allocation order; a range carried both ways is in both.
func (a *Allocator) splitScopesLocked() {
	a.unscoped, a.scopedRanges, a.unscopedFull = a.unscoped[:0], a.scopedRanges[:0], 0
	a.scopeIdx = scopeIndex{}
	for _, r := range a.ranges {
		scoped, unscoped := r.scopedWays()
		r.upos = -1
		if unscoped {
			r.upos = len(a.unscoped)
			a.unscoped = append(a.unscoped, r)
		}
		if scoped {
			a.scopedRanges = append(a.scopedRanges, r)
			a.scopeIdx.add(r)
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

// pickForLocked picks a candidate for a dynamic request: from every served
// range when the request is not routed by scope (byScope false), else
// from the scoped ranges its Service may use, then, when its scopes let
// it, from the unscoped ones. Neither pick looks at a range before its
// list's fullBefore, so its cost does not grow with the ranges that are
// full.
func (a *Allocator) pickForLocked(routed bool, nsLabels, svcLabels labels.Set, excluded Excluded) (ip netip.Addr, ok, byScope bool) {
	if !routed || len(a.scopedRanges) == 0 {
		ip, ok = a.pickLocked(a.ranges, &a.fullBefore, excluded)
		return ip, ok, false
	}
	hits, verdict := a.matchScopesLocked(nsLabels, svcLabels, useDynamic, nil)
	if ip, ok = a.pickLocked(hits, nil, excluded); ok || !verdict.Unscoped() {
		return ip, ok, true
	}
	ip, ok = a.pickLocked(a.unscoped, &a.unscopedFull, excluded)
	return ip, ok, true
}

// nothingFree is the error of a dynamic request that found no candidate;
// byScope says it was routed by scope, on nsLabels and svcLabels. Its
// route is computed again, names and all: this is the only path that
// needs them.
func (a *Allocator) nothingFree(byScope bool, nsLabels, svcLabels labels.Set) error {
	var rt *route
	if byScope {
		if err := a.closedError(nsLabels, svcLabels); err != nil {
			return err
		}
		a.lock()
		r := a.routeLocked(nsLabels, svcLabels, useDynamic)
		a.mu.Unlock()
		rt = &r
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
// static request asks for ip (inside a served range) outside its route:
// in none of the scoped ranges its Service may use, nor, when its scopes
// let it, in an unscoped range that takes it. Only the ranges holding ip
// are asked.
func (a *Allocator) checkScopeLocked(ip netip.Addr, routed bool, nsLabels, svcLabels labels.Set) error {
	if !routed || len(a.scopedRanges) == 0 {
		return nil
	}
	hits, verdict := a.matchScopesLocked(nsLabels, svcLabels, useStatic, nil)
	for _, r := range hits {
		if r.rng.Contains(ip) {
			return nil
		}
	}
	if verdict.Unscoped() {
		var buf [4]*cidrRange
		for _, r := range a.lookup.appendHolding(buf[:0], ip) {
			if _, unscoped := r.scopedWays(); unscoped && r.takes(useStatic) && r.rng.Contains(ip) {
				return nil
			}
		}
	}
	rt := a.routeLocked(nsLabels, svcLabels, useStatic)
	return &allocation.OutOfScopeError{IP: ip, Allowed: rt.allowed}
}
