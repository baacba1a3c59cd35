// Package servicecidrs is the storage of networking.k8s.io/v1 ServiceCIDRs:
// one or two canonical CIDRs (one per IP family) that may only grow from
// single- to dual-stack, and a status subresource for the Ready condition.
package servicecidrs

import (
	"context"
	"fmt"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/allocator/allocator/pkg/servicecidr"
	"github.com/allocator/allocator/pkg/subrange"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

type statusStrategy struct{ strategy }

func (strategy) NamespaceScoped() bool { return false }

// PrepareForCreate clears the status and adds the ServiceCIDR finalizer
// right away, instead of waiting for the ServiceCIDR controller to add it:
// otherwise a ServiceCIDR deleted before the controller got to it would go
// at once, stranding the addresses allocated from it in the meantime.
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	sc := obj.(*networkingv1.ServiceCIDR)
	sc.Status = networkingv1.ServiceCIDRStatus{}
	if !slices.Contains(sc.Finalizers, servicecidr.Finalizer) {
		sc.Finalizers = append(sc.Finalizers, servicecidr.Finalizer)
	}
}

func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	obj.(*networkingv1.ServiceCIDR).Status = old.(*networkingv1.ServiceCIDR).Status
}

var cidrsPath = field.NewPath("spec", "cidrs")

// ValidateCIDRs checks a ServiceCIDR's spec.cidrs: one or two canonical
// CIDRs, at most one per IP family.
func ValidateCIDRs(cidrs []string) field.ErrorList {
	var errs field.ErrorList
	switch {
	case len(cidrs) == 0:
		return field.ErrorList{field.Required(cidrsPath, "at least one CIDR is required")}
	case len(cidrs) > 2:
		return field.ErrorList{field.Invalid(cidrsPath, cidrs, "may only hold up to 2 values")}
	}
	var v4, v6 int
	for i, text := range cidrs {
		prefix, err := subrange.ParsePrefix(text)
		if err != nil {
			reason := err.Error()
			if pe, ok := err.(*subrange.ParseError); ok {
				reason = pe.Reason
			}
			errs = append(errs, field.Invalid(cidrsPath.Index(i), text, "must be a valid CIDR in canonical form: "+reason))
			continue
		}
		if prefix.Addr().Is4() {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		errs = append(errs, field.Invalid(cidrsPath, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
	}
	return errs
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	sc := obj.(*networkingv1.ServiceCIDR)
	errs := apimachineryvalidation.ValidateObjectMeta(&sc.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, ValidateCIDRs(sc.Spec.CIDRs)...)
}

func (s strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	sc, oldSC := obj.(*networkingv1.ServiceCIDR), old.(*networkingv1.ServiceCIDR)
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&sc.ObjectMeta, &oldSC.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, s.Validate(ctx, obj)...)
	// The only change allowed: a single-stack ServiceCIDR gains the other family.
	grows := len(oldSC.Spec.CIDRs) == 1 && len(sc.Spec.CIDRs) == 2 && sc.Spec.CIDRs[0] == oldSC.Spec.CIDRs[0]
	if !grows {
		errs = append(errs, apimachineryvalidation.ValidateImmutableField(sc.Spec.CIDRs, oldSC.Spec.CIDRs, cidrsPath)...)
	}
	return errs
}

func (strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string      { return nil }
func (strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }
func (strategy) Canonicalize(obj runtime.Object)                                        {}
func (strategy) AllowCreateOnUpdate(context.Context) bool                               { return true }
func (strategy) AllowUnconditionalUpdate(context.Context) bool                          { return true }

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"networking.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	obj.(*networkingv1.ServiceCIDR).Spec = old.(*networkingv1.ServiceCIDR).Spec
}

func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	sc, oldSC := obj.(*networkingv1.ServiceCIDR), old.(*networkingv1.ServiceCIDR)
	return apimachineryvalidation.ValidateObjectMetaUpdate(&sc.ObjectMeta, &oldSC.ObjectMeta, field.NewPath("metadata"))
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"networking.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

// GetAttrs returns labels and the selectable fields (metadata.name).
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	sc, ok := obj.(*networkingv1.ServiceCIDR)
	if !ok {
		return nil, nil, fmt.Errorf("not a ServiceCIDR: %T", obj)
	}
	return sc.Labels, generic.ObjectMetaFieldsSet(&sc.ObjectMeta, false), nil
}
