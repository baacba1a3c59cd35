package ipaddress

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// RefusedCIDR is a CIDR of a ServiceCIDR that the allocator does not serve,
// with the reason (for IPv6 prefixes shorter than /64, upstream's
// "shortest allowed prefix length for service CIDR is 64, got N").
type RefusedCIDR struct {
	ServiceCIDR string
	CIDR        string
	Err         error
}

func (r RefusedCIDR) Error() string {
	return fmt.Sprintf("ServiceCIDR %s: CIDR %s: %v", r.ServiceCIDR, r.CIDR, r.Err)
}

// Unwrap returns the reason.
func (r RefusedCIDR) Unwrap() error { return r.Err }

// activeRange is one distinct prefix the allocator serves, with the order key
// of the oldest ready ServiceCIDR that carries it, and every ready
// ServiceCIDR that carries it with its scope.
type activeRange struct {
	rng     subrange.Range
	created metav1.Time
	name    string
	// spec is the range's position among the ranges its first carrier
	// gives (served.ranges): the last part of its allocation order.
	spec     int
	carriers []carrier
}

// carrier is a ready ServiceCIDR carrying a range; scope is nil when the
// ServiceCIDR is unscoped; mode is its lifecycle (pkg/ipaddress/lifecycle), which
// new allocations it takes.
type carrier struct {
	name  string
	scope *scope.Scope
	mode  lifecycle.Mode
}

// IsReady reports whether cidr may serve new allocations: it is not being
// deleted and its Ready condition is not False. A ServiceCIDR without a Ready
// condition counts as ready (design.md §5), because nothing may ever set it
// on a cluster without the ServiceCIDR controller.
func IsReady(cidr *networkingv1.ServiceCIDR) bool {
	if cidr.DeletionTimestamp != nil {
		return false
	}
	for _, c := range cidr.Status.Conditions {
		if c.Type == networkingv1.ServiceCIDRConditionReady {
			return c.Status != metav1.ConditionFalse
		}
	}
	return true
}

// DeletedHolders returns the names of the ServiceCIDRs being deleted whose
// usable range holds ip, sorted, when no ready ServiceCIDR's does; nil
// otherwise. A new request for ip is then refused with upstream's
// ErrMismatchedNetwork ("the provided network does not match the current
// range"), kube-apiserver's text for an address of a ServiceCIDR being
// deleted, which does not say why: the API server adds a warning naming
// them (DeletedWarning).
func DeletedHolders(cidrs []*networkingv1.ServiceCIDR, ip netip.Addr) []string {
	var deleted []string
	for _, sc := range cidrs {
		holds := false
		for _, s := range sc.Spec.CIDRs {
			p, err := subrange.ParsePrefix(s)
			if err != nil || p.Addr().Is6() != ip.Is6() {
				continue
			}
			if r, err := subrange.New(p, model.IPAddress); err == nil && r.Contains(ip) {
				holds = true
			}
		}
		switch {
		case !holds:
		case IsReady(sc):
			return nil
		case sc.DeletionTimestamp != nil:
			deleted = append(deleted, sc.Name)
		}
	}
	return sortedUnique(deleted)
}

// DeletedWarning is the warning of a request for ip, which only the
// ServiceCIDRs names, being deleted, hold (DeletedHolders).
func DeletedWarning(ip netip.Addr, names []string) string {
	verb := "is"
	if len(names) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("spec.clusterIPs: %s is in ServiceCIDR %s, which %s being deleted and takes no new allocation; "+
		"choose an address of another ServiceCIDR, or leave spec.clusterIP empty", ip, allocation.QuoteNames(names), verb)
}

// concerns reports whether a ServiceCIDR added or deleted can change what
// selectRanges returns for one family: it carries a CIDR of that family,
// or one that does not parse (refused by both). Anything else (a tombstone
// of an unknown object) concerns it.
func concerns(obj any, ipv6 bool) bool {
	sc, ok := obj.(*networkingv1.ServiceCIDR)
	if !ok {
		return true
	}
	for _, s := range sc.Spec.CIDRs {
		prefix, err := subrange.ParsePrefix(s)
		if err != nil || prefix.Addr().Is6() == ipv6 {
			return true
		}
	}
	return false
}

// changeConcerns reports whether an update of a ServiceCIDR can change what
// servedBy returns for one family: only what servedBy reads
// matters (its CIDRs, whether it is ready, its annotations, its creation
// time). The ServiceCIDR controller's finalizer and its Ready=True
// condition on a new ServiceCIDR change none of it, and the allocator
// passes them by.
func changeConcerns(old, obj any, ipv6 bool) bool {
	o, ok1 := old.(*networkingv1.ServiceCIDR)
	n, ok2 := obj.(*networkingv1.ServiceCIDR)
	if !ok1 || !ok2 {
		return true
	}
	if !concerns(o, ipv6) && !concerns(n, ipv6) {
		return false
	}
	return IsReady(o) != IsReady(n) || !slices.Equal(o.Spec.CIDRs, n.Spec.CIDRs) ||
		!maps.Equal(o.Annotations, n.Annotations) || !o.CreationTimestamp.Equal(&n.CreationTimestamp)
}

// selectRanges turns ServiceCIDRs into the ordered, de-duplicated ranges of
// one family, plus the CIDRs it refuses (servedBy, assemble).
func selectRanges(cidrs []*networkingv1.ServiceCIDR, ipv6 bool) ([]activeRange, []RefusedCIDR) {
	return assemble(servedByAll(cidrs, ipv6))
}

// served is what one ready ServiceCIDR gives one family: its carrier entry,
// the ranges of its CIDRs of the family that are served, in the order of
// its spec, and its CIDRs that are refused. A ServiceCIDR whose scope
// annotations do not parse (written by a server that does not validate
// them) is refused whole: serving it unscoped would hand its addresses to
// Services it was meant to keep out. One whose lifecycle annotations do not
// parse is served as draining (lifecycle.Parse): its Services keep their
// addresses, and it hands out no new one. A CIDR that does not parse is
// refused by both families.
type served struct {
	created metav1.Time
	carrier carrier
	ranges  []subrange.Range
	refused []RefusedCIDR
}

// servedBy returns what sc gives the family, nil when it is not ready or
// gives nothing.
func servedBy(sc *networkingv1.ServiceCIDR, ipv6 bool) *served {
	if !IsReady(sc) {
		return nil
	}
	sco, scopeErr := scope.Parse(sc.Annotations)
	mode, _ := lifecycle.Parse(sc.Annotations) // an invalid value reads as Draining
	s := &served{created: sc.CreationTimestamp, carrier: carrier{name: sc.Name, scope: sco, mode: mode}}
	for _, text := range sc.Spec.CIDRs {
		prefix, err := subrange.ParsePrefix(text)
		if err != nil {
			s.refused = append(s.refused, RefusedCIDR{ServiceCIDR: sc.Name, CIDR: text, Err: err})
			continue
		}
		if prefix.Addr().Is6() != ipv6 {
			continue
		}
		if scopeErr != nil {
			s.refused = append(s.refused, RefusedCIDR{ServiceCIDR: sc.Name, CIDR: text, Err: fmt.Errorf("invalid scope: %w", scopeErr)})
			continue
		}
		rng, err := subrange.New(prefix, model.IPAddress)
		if err != nil {
			s.refused = append(s.refused, RefusedCIDR{ServiceCIDR: sc.Name, CIDR: text, Err: err})
			continue
		}
		s.ranges = append(s.ranges, rng)
	}
	if len(s.ranges) == 0 && len(s.refused) == 0 {
		return nil
	}
	return s
}

// servedByAll returns what each of cidrs gives the family, in allocation
// order (compareServed).
func servedByAll(cidrs []*networkingv1.ServiceCIDR, ipv6 bool) []*served {
	out := make([]*served, 0, len(cidrs))
	for _, sc := range cidrs {
		if s := servedBy(sc, ipv6); s != nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, compareServed)
	return out
}

// compareServed orders ServiceCIDRs for allocation: oldest
// creationTimestamp first, then by name.
func compareServed(x, y *served) int {
	if c := x.created.Compare(y.created.Time); c != 0 {
		return c
	}
	return cmp.Compare(x.carrier.name, y.carrier.name)
}

// assemble turns what ServiceCIDRs give, in allocation order, into the
// ordered, de-duplicated ranges, plus the refused CIDRs. A prefix carried
// by several ServiceCIDRs takes the position of the first of them and
// appears once, with each of them as a carrier.
func assemble(all []*served) ([]activeRange, []RefusedCIDR) {
	out := make([]activeRange, 0, len(all))
	var refused []RefusedCIDR
	seen := make(map[netip.Prefix]int, len(all))
	// firsts holds each range's first carrier: one allocation, not one per
	// range. A range gets it as a slice of capacity 1, so that a second
	// carrier (the same prefix in another ServiceCIDR) copies it out
	// rather than overwrite the next range's.
	firsts := make([]carrier, 0, len(all))
	for _, s := range all {
		refused = append(refused, s.refused...)
		for k, rng := range s.ranges {
			if i, ok := seen[rng.Prefix()]; ok {
				out[i].carriers = append(out[i].carriers, s.carrier)
				continue
			}
			seen[rng.Prefix()] = len(out)
			firsts = append(firsts, s.carrier)
			out = append(out, activeRange{rng: rng, created: s.created, name: s.carrier.name, spec: k,
				carriers: firsts[len(firsts)-1 : len(firsts) : len(firsts)]})
		}
	}
	return out, refused
}

// maximalLocked reports whether r lies inside no other served range.
// Prefixes either nest or are disjoint, and the usable addresses of a
// nested prefix are usable in its parent, so the union of all ranges is
// the disjoint union of the maximal ones: counting only those never
// double-counts. The ranges holding r's first address are the only ones
// that can hold r.
func (a *Allocator) maximalLocked(r *cidrRange) bool {
	p := r.rng.Prefix()
	var buf [4]*cidrRange
	for _, o := range a.lookup.appendHolding(buf[:0], p.Addr()) {
		if o.rng.Prefix().Bits() < p.Bits() {
			return false
		}
	}
	return true
}
