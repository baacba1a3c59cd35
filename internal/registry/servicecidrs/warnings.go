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
// a narrower one serves): the addresses they share are served once.
func overlapWarnings(sc *networkingv1.ServiceCIDR, kept []string, others []*networkingv1.ServiceCIDR) []string {
	var out []string
	more := 0
	for _, text := range sc.Spec.CIDRs {
		p, err := subrange.ParsePrefix(text)
		if err != nil || slices.Contains(kept, text) {
			continue
		}
		for _, o := range others {
			if o.Name == sc.Name {
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

// lister lists the stored ServiceCIDRs, for the overlap warnings; NewREST
// sets it once the store exists.
type lister func(ctx context.Context) ([]*networkingv1.ServiceCIDR, error)
