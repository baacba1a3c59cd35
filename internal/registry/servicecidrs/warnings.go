package servicecidrs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/subrange"
)

// Policy is what this server adds to upstream's ServiceCIDR rules.
type Policy struct {
	// Guardrails refuse CIDRs outside the operator's rules (422).
	Guardrails Guardrails
	// WarnOverlaps makes a create, or an update that adds a CIDR, warn of
	// each ServiceCIDR it overlaps. Off by default: kube-apiserver sends
	// no such warning, and the parity record holds its answers.
	WarnOverlaps bool
	// LifecycleIgnored says this server allocates in a model that ignores
	// the lifecycle annotations (the bitmap model serves one range per
	// family from its flag): a write that sets them gets a warning saying
	// so, as they take effect only on IPAddress-model servers.
	LifecycleIgnored bool
}

// maxOverlapWarnings bounds the overlap warnings of one request; the last
// one counts the rest.
const maxOverlapWarnings = 5

// overlapWarnings names, for each CIDR of sc not in kept, the other
// ServiceCIDRs whose CIDRs overlap it. Overlaps are allowed, as upstream
// allows them on purpose (a wider ServiceCIDR added to grow a range that
// a narrower one serves): the addresses they share are served once. With
// lifecycles, a ServiceCIDR of another lifecycle is left to
// closedOverlapWarnings, which says what the overlap closes.
func overlapWarnings(sc *networkingv1.ServiceCIDR, kept []string, others []*networkingv1.ServiceCIDR, lifecycles bool) []string {
	var out []string
	more := 0
	mine, _ := lifecycle.Parse(sc.Annotations)
	for _, text := range sc.Spec.CIDRs {
		p, err := subrange.ParsePrefix(text)
		if err != nil || slices.Contains(kept, text) {
			continue
		}
		for _, o := range others {
			if o.Name == sc.Name || (lifecycles && closesApart(mine, o)) {
				continue
			}
			for _, otext := range o.Spec.CIDRs {
				q, err := subrange.ParsePrefix(otext)
				if err != nil || !q.Overlaps(p) {
					continue
				}
				if len(out) == maxOverlapWarnings {
					more++
					continue
				}
				out = append(out, fmt.Sprintf("ServiceCIDR %q: %s %s ServiceCIDR %q (%s); overlapping ServiceCIDRs are allowed, as in Kubernetes, and share their addresses",
					sc.Name, p, relation(p, q), o.Name, q))
			}
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("ServiceCIDR %q overlaps %d more ServiceCIDR CIDRs", sc.Name, more))
	}
	return out
}

// relation says how p lies against q, which overlaps it.
func relation(p, q netip.Prefix) string {
	switch {
	case p == q:
		return "is the same prefix as"
	case p.Bits() > q.Bits():
		return "lies inside"
	default:
		return "contains"
	}
}

// lifecycleIgnoredWarning is the warning of a write that sets lifecycle
// annotations on a server whose model ignores them, "" otherwise.
func (p *Policy) lifecycleIgnoredWarning(sc *networkingv1.ServiceCIDR) string {
	if p == nil || !p.LifecycleIgnored || !lifecycle.Annotated(sc.Annotations) {
		return ""
	}
	return fmt.Sprintf("ServiceCIDR %q: this server allocates in the bitmap model (--allocator=bitmap), which serves --service-cluster-ip-range only and ignores the %s annotations; they take effect on servers in the ipaddress model",
		sc.Name, lifecycle.Prefix)
}

// lister lists every stored ServiceCIDR, for the overlap warnings while
// their Overlaps has not synced; NewREST sets it once the store exists.
type lister func(ctx context.Context) ([]*networkingv1.ServiceCIDR, error)

// closesApart reports whether other, not being deleted, has a lifecycle
// other than mine: then the addresses they share are closed for one of them.
func closesApart(mine lifecycle.Mode, other *networkingv1.ServiceCIDR) bool {
	theirs, _ := lifecycle.Parse(other.Annotations)
	return other.DeletionTimestamp == nil && theirs != mine
}

// closedOverlapWarnings names, for each CIDR of sc not in kept, the
// overlaps with another ServiceCIDR (not being deleted) of another
// lifecycle: where ServiceCIDRs overlap, the most closed lifecycle wins
// (pkg/ipaddress), so the addresses they share take no new allocation
// while either drains, and no dynamic pick while either is manual-only.
// Each warning says which addresses and how to reopen them.
func closedOverlapWarnings(sc *networkingv1.ServiceCIDR, kept []string, others []*networkingv1.ServiceCIDR) []string {
	mine, _ := lifecycle.Parse(sc.Annotations) // an invalid value reads as draining, as the allocators read it
	var out []string
	more := 0
	for _, text := range sc.Spec.CIDRs {
		p, err := subrange.ParsePrefix(text)
		if err != nil || slices.Contains(kept, text) {
			continue
		}
		for _, o := range others {
			if o.Name == sc.Name || !closesApart(mine, o) {
				continue
			}
			theirs, _ := lifecycle.Parse(o.Annotations)
			for _, otext := range o.Spec.CIDRs {
				q, err := subrange.ParsePrefix(otext)
				if err != nil || !q.Overlaps(p) {
					continue
				}
				if len(out) == maxOverlapWarnings {
					more++
					continue
				}
				out = append(out, closedOverlapWarning(sc.Name, mine, p, o.Name, theirs, q))
			}
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("ServiceCIDR %q overlaps %d more ServiceCIDR CIDRs of another lifecycle", sc.Name, more))
	}
	return out
}

// closedOverlapWarning is the warning of one overlap: p of ServiceCIDR name
// (mode mine) with q of other (mode theirs), which differ.
func closedOverlapWarning(name string, mine lifecycle.Mode, p netip.Prefix, other string, theirs lifecycle.Mode, q netip.Prefix) string {
	shared := p
	if q.Bits() > p.Bits() {
		shared = q
	}
	mode, effect, annotation := theirs, "no new allocation", lifecycle.DrainingAnnotation
	if max(mine, theirs) == lifecycle.Manual {
		effect, annotation = "no dynamic pick", lifecycle.ManualOnlyAnnotation
	}
	const rule = "from either ServiceCIDR (where ServiceCIDRs overlap, the most closed lifecycle wins)"
	if mine < theirs {
		all := ""
		if shared == p {
			all = ": " + effect + " lands in this ServiceCIDR at all"
		}
		return fmt.Sprintf("ServiceCIDR %q: %s %s ServiceCIDR %q (%s), which is %s: %s lands in %s while it is, %s%s; "+
			"to reopen those addresses, remove the %s annotation of ServiceCIDR %q",
			name, p, relation(p, q), other, q, mode, effect, shared, rule, all, annotation, other)
	}
	mode = mine
	all := ""
	if shared == q {
		all = fmt.Sprintf(": %s lands in ServiceCIDR %q at all", effect, other)
	}
	return fmt.Sprintf("ServiceCIDR %q is %s, and %s %s ServiceCIDR %q (%s): %s lands in %s while it is, %s%s",
		name, mode, p, relation(p, q), other, q, effect, shared, rule, all)
}
