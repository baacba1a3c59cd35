package renumber

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/allocator/allocator/internal/holding"
)

// Candidate is a Service holding at least one ClusterIP inside the drained
// prefixes.
type Candidate struct {
	Service *corev1.Service
	// Moved are its addresses inside the prefixes; Kept the others, which
	// the re-create asks for again.
	Moved, Kept []netip.Addr
}

// Key is namespace/name.
func (c Candidate) Key() string { return c.Service.Namespace + "/" + c.Service.Name }

// Select returns the Services holding a ClusterIP inside one of prefixes, in
// namespace and name order, whatever the family.
func Select(services []corev1.Service, prefixes []netip.Prefix) []Candidate {
	var out []Candidate
	for i := range services {
		svc := &services[i]
		var c Candidate
		for _, ip := range holding.IPs(svc) {
			if slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(ip) }) {
				c.Moved = append(c.Moved, ip)
			} else {
				c.Kept = append(c.Kept, ip)
			}
		}
		if len(c.Moved) > 0 {
			c.Service = svc
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Candidate) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

// Filter is the part of the cluster a run works on: a namespace ("" is
// every one) and a label selector on the Services.
type Filter struct {
	Namespace string
	Selector  labels.Selector
}

// Matches reports whether svc is inside the filter.
func (f Filter) Matches(svc *corev1.Service) bool {
	if f.Namespace != "" && svc.Namespace != f.Namespace {
		return false
	}
	return f.Selector == nil || f.Selector.Matches(labels.Set(svc.Labels))
}

// IsAPIServerService reports whether svc is the API server's own
// default/kubernetes, which the server re-creates at the first address of
// its --service-cluster-ip-range and renumber never moves.
func IsAPIServerService(svc *corev1.Service) bool {
	return svc.Namespace == metav1.NamespaceDefault && svc.Name == "kubernetes"
}

// Refusal says why a Service is left where it is before anything is tried,
// or "" when it may be moved.
func Refusal(svc *corev1.Service) string {
	switch {
	case IsAPIServerService(svc):
		return "the API server's own Service: it is re-created at the first address of --service-cluster-ip-range (see docs/operations.md, \"Replacing the default range\")"
	case svc.DeletionTimestamp != nil:
		return "being deleted"
	case len(svc.Finalizers) > 0:
		return "has finalizers " + strings.Join(svc.Finalizers, ", ") + ": a delete would wait for their controller; remove them or re-create it by hand"
	}
	return ""
}
