package webhook

import (
	"context"
	"encoding/json"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// admitServiceCIDR judges a ServiceCIDR CREATE or UPDATE by the rules of
// `allocator serve` (servicecidrs.Admission): the guardrails, the scope and
// lifecycle annotations; the overlap and lifecycle warnings go back as
// admission warnings. A refusal is serve's 422, with its field causes.
func (w *Webhook) admitServiceCIDR(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	sc := &networkingv1.ServiceCIDR{}
	if err := json.Unmarshal(req.Object.Raw, sc); err != nil {
		return errored(fmt.Errorf("decode the ServiceCIDR: %w", err))
	}
	var old *networkingv1.ServiceCIDR
	if req.Operation == admissionv1.Update {
		old = &networkingv1.ServiceCIDR{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return errored(fmt.Errorf("decode the old ServiceCIDR: %w", err))
		}
	}
	var errs field.ErrorList
	var warnings []string
	if old == nil {
		errs, warnings = w.cidrs.Create(ctx, sc)
	} else {
		errs, warnings = w.cidrs.Update(ctx, sc, old)
	}
	if len(errs) > 0 {
		kind := schema.GroupKind{Group: networkingv1.GroupName, Kind: "ServiceCIDR"}
		st := apierrors.NewInvalid(kind, sc.Name, errs).Status()
		return &admissionv1.AdmissionResponse{Allowed: false, Result: &st}
	}
	return allowed(warnings)
}
