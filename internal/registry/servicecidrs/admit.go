package servicecidrs

import (
	"context"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Admission judges ServiceCIDR writes by this server's rules for another
// API server: the admission webhook in front of kube-apiserver
// (internal/webhook). It runs the store's own checks and warnings, so a
// ServiceCIDR is refused, and warned about, with the texts `allocator serve`
// gives.
type Admission struct{ s strategy }

// NewAdmission returns the checks of policy; list reads the ServiceCIDRs for
// the overlap warnings (nil: none).
func NewAdmission(policy Policy, list func(context.Context) ([]*networkingv1.ServiceCIDR, error)) Admission {
	return Admission{s: strategy{extra: &extras{policy: policy, list: list}}}
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
