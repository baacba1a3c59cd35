package servicecidrs

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
)

// Admission judges ServiceCIDR writes by this server's rules for another
// API server: the admission webhook in front of kube-apiserver
// (internal/webhook). It runs the store's own checks and warnings, so a
// ServiceCIDR is refused, and warned about, with the texts `allocator serve`
// gives.
type Admission struct{ s strategy }

// NewAdmission returns the checks of policy. With WarnOverlaps, the
// overlap warnings read the ServiceCIDRs of cidrs, whose informer is yet to
// start: those an Overlaps of it finds, or every one until it has synced.
func NewAdmission(policy Policy, cidrs networkinginformers.ServiceCIDRInformer) (Admission, error) {
	extra := &extras{policy: policy}
	if policy.WarnOverlaps {
		overlaps, err := NewOverlaps(cidrs.Informer())
		if err != nil {
			return Admission{}, err
		}
		lister := cidrs.Lister()
		extra.overlaps = overlaps
		extra.list = func(context.Context) ([]*networkingv1.ServiceCIDR, error) { return lister.List(labels.Everything()) }
	}
	return Admission{s: strategy{extra: extra}}, nil
}

// Create judges a new ServiceCIDR: the errors that refuse it, and the
// warnings to send with it.
func (a Admission) Create(ctx context.Context, sc *networkingv1.ServiceCIDR) (field.ErrorList, []string) {
	errs := a.s.Validate(ctx, sc)
	if len(errs) > 0 {
		return errs, nil
	}
	return nil, a.s.WarningsOnCreate(ctx, sc)
}

// Update judges the update of old into sc.
func (a Admission) Update(ctx context.Context, sc, old *networkingv1.ServiceCIDR) (field.ErrorList, []string) {
	errs := a.s.ValidateUpdate(ctx, sc, old)
	if len(errs) > 0 {
		return errs, nil
	}
	return nil, a.s.WarningsOnUpdate(ctx, sc, old)
}
