// Package ipaddresses is the storage of networking.k8s.io/v1 IPAddresses.
// Names are IPs in canonical form (so etcd's create-if-absent is the
// allocation claim of the IPAddress model); spec.parentRef is required and
// immutable.
package ipaddresses

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/allocator/allocator/pkg/subrange"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (strategy) NamespaceScoped() bool                                         { return false }
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object)      {}
func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {}

func validateName(name string, prefix bool) []string {
	if prefix {
		return []string{"generateName is not supported: the name must be the IP address"}
	}
	if _, err := subrange.ParseAddr(name); err != nil {
		return []string{"must be a valid IP address in canonical form: " + reasonOf(err)}
	}
	return nil
}

func reasonOf(err error) string {
	if pe, ok := err.(*subrange.ParseError); ok {
		return pe.Reason
	}
	return err.Error()
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	ip := obj.(*networkingv1.IPAddress)
	errs := apimachineryvalidation.ValidateObjectMeta(&ip.ObjectMeta, false, validateName, field.NewPath("metadata"))
	refPath := field.NewPath("spec", "parentRef")
	ref := ip.Spec.ParentRef
	if ref == nil {
		return append(errs, field.Required(refPath, ""))
	}
	if ref.Group != "" {
		for _, msg := range validation.IsDNS1123Subdomain(ref.Group) {
			errs = append(errs, field.Invalid(refPath.Child("group"), ref.Group, msg))
		}
	}
	if ref.Resource == "" {
		errs = append(errs, field.Required(refPath.Child("resource"), ""))
	} else {
		for _, msg := range validation.IsDNS1123Label(ref.Resource) {
			errs = append(errs, field.Invalid(refPath.Child("resource"), ref.Resource, msg))
		}
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(refPath.Child("name"), ""))
	} else {
		for _, msg := range validation.IsDNS1123Subdomain(ref.Name) {
			errs = append(errs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
	}
	if ref.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(ref.Namespace) {
			errs = append(errs, field.Invalid(refPath.Child("namespace"), ref.Namespace, msg))
		}
	}
	return errs
}

func (s strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	ip, oldIP := obj.(*networkingv1.IPAddress), old.(*networkingv1.IPAddress)
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&ip.ObjectMeta, &oldIP.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, s.Validate(ctx, obj)...)
	return append(errs, apimachineryvalidation.ValidateImmutableField(ip.Spec.ParentRef, oldIP.Spec.ParentRef, field.NewPath("spec", "parentRef"))...)
}

func (strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string      { return nil }
func (strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }
func (strategy) Canonicalize(obj runtime.Object)                                        {}
func (strategy) AllowCreateOnUpdate(context.Context) bool                               { return true }
func (strategy) AllowUnconditionalUpdate(context.Context) bool                          { return true }

// GetAttrs returns labels and the selectable fields (metadata.name).
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ip, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return nil, nil, fmt.Errorf("not an IPAddress: %T", obj)
	}
	return ip.Labels, generic.ObjectMetaFieldsSet(&ip.ObjectMeta, false), nil
}
