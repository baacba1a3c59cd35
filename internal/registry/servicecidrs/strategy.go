// Package servicecidrs is the storage of networking.k8s.io/v1 ServiceCIDRs:
// one or two canonical CIDRs (one per IP family) that may only grow from
// single- to dual-stack, and a status subresource for the Ready condition.
package servicecidrs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
	"github.com/allocator/allocator/pkg/subrange"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
	// extra is this server's policy and the sources of the overlap
	// warnings; nil applies upstream's rules alone.
	extra *extras
}

// extras is what a strategy adds to upstream's rules.
type extras struct {
	policy Policy
	// overlaps finds the ServiceCIDRs the warnings read; list lists every
	// ServiceCIDR instead while overlaps is nil or has not synced. Neither:
	// no overlap warnings.
	overlaps *Overlaps
	list     lister
}

// overlapping returns the stored ServiceCIDRs the warnings of prefixes read:
// those overlapping prefixes, or more (every one, from list); the warnings
// check each overlap themselves.
func (e *extras) overlapping(ctx context.Context, prefixes []netip.Prefix) ([]*networkingv1.ServiceCIDR, error) {
	if found, ok := e.overlaps.Overlapping(ctx, prefixes); ok {
		return found, nil
	}
	if e.list == nil {
		return nil, nil
	}
	return e.list(ctx)
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

// ValidateCIDRs checks a ServiceCIDR's spec.cidrs, with upstream's texts
// and in its order: one or two CIDRs, each valid and canonical, and two of
// different families.
func ValidateCIDRs(cidrs []string) field.ErrorList {
	switch {
	case len(cidrs) == 0:
		return field.ErrorList{field.Required(cidrsPath, "at least one CIDR required")}
	case len(cidrs) > 2:
		return field.ErrorList{field.Invalid(cidrsPath, specValue{cidrs}, "may only hold up to 2 values")}
	}
	var errs field.ErrorList
	for i, text := range cidrs {
		errs = append(errs, utilvalidation.IsValidCIDR(cidrsPath.Index(i), text)...)
	}
	if len(cidrs) == 2 {
		first, second := familyOfCIDR(cidrs[0]), familyOfCIDR(cidrs[1])
		if first != "" && first == second {
			errs = append(errs, field.Invalid(cidrsPath, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
		}
	}
	return errs
}

// specValue is the value upstream shows for a spec.cidrs of more than two:
// its internal spec, marshalled with Go's field names (it has no JSON tags).
type specValue struct {
	CIDRs []string
}

// familyOfCIDR is the family of a CIDR that parses (leniently, as
// upstream's family check does), "" otherwise.
func familyOfCIDR(text string) string {
	_, ipnet, err := netutils.ParseCIDRSloppy(text)
	if err != nil {
		return ""
	}
	return subrange.FamilyName(ipnet.IP.To4() == nil)
}

func (s strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	sc := obj.(*networkingv1.ServiceCIDR)
	errs := apimachineryvalidation.ValidateObjectMeta(&sc.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, ValidateCIDRs(sc.Spec.CIDRs)...)
	errs = append(errs, s.guardrails().check(sc.Spec.CIDRs, nil)...)
	errs = append(errs, validateScope(sc)...)
	return append(errs, lifecycle.Validate(sc.Annotations, annotationsPath)...)
}

// guardrails returns the server's guardrails (none without a policy).
func (s strategy) guardrails() Guardrails {
	if s.extra == nil {
		return Guardrails{}
	}
	return s.extra.policy.Guardrails
}

var annotationsPath = field.NewPath("metadata", "annotations")

// validateScope checks the scope annotations (pkg/ipaddress/scope, design.md §11)
// and the bounds of their selectors.
// The default ServiceCIDR stays unscoped: the API server's own Service and
// every Service of a cluster without other ServiceCIDRs live in it.
func validateScope(sc *networkingv1.ServiceCIDR) field.ErrorList {
	errs := append(scope.Validate(sc.Annotations, annotationsPath), scope.ValidateBounds(sc.Annotations, annotationsPath)...)
	if sc.Name == servicecidr.DefaultName && scope.Scoped(sc.Annotations) {
		errs = append(errs, field.Forbidden(annotationsPath.Key(scope.NamespaceSelectorAnnotation),
			fmt.Sprintf("the default ServiceCIDR %q cannot be scoped; scope another ServiceCIDR", servicecidr.DefaultName)))
	}
	return errs
}

// ValidateUpdate allows one change of spec.cidrs only: a single-stack
// ServiceCIDR gaining the other family (then validated as a new spec).
func (s strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	sc, oldSC := obj.(*networkingv1.ServiceCIDR), old.(*networkingv1.ServiceCIDR)
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&sc.ObjectMeta, &oldSC.ObjectMeta, field.NewPath("metadata"))
	switch {
	case len(oldSC.Spec.CIDRs) == len(sc.Spec.CIDRs):
		for i, text := range oldSC.Spec.CIDRs {
			if text != sc.Spec.CIDRs[i] {
				errs = append(errs, field.Invalid(cidrsPath.Index(i), sc.Spec.CIDRs[i], apimachineryvalidation.FieldImmutableErrorMsg))
			}
		}
	case len(oldSC.Spec.CIDRs) == 1 && len(sc.Spec.CIDRs) == 2:
		if sc.Spec.CIDRs[0] != oldSC.Spec.CIDRs[0] {
			errs = append(errs, field.Invalid(cidrsPath.Index(0), sc.Spec.CIDRs[0], apimachineryvalidation.FieldImmutableErrorMsg))
		}
		errs = append(errs, ValidateCIDRs(sc.Spec.CIDRs)...)
	default:
		errs = append(errs, field.Invalid(cidrsPath, sc.Spec.CIDRs, apimachineryvalidation.FieldImmutableErrorMsg))
	}
	errs = append(errs, s.guardrails().check(sc.Spec.CIDRs, oldSC.Spec.CIDRs)...)
	annotationErrs := append(validateScope(sc), lifecycle.Validate(sc.Annotations, annotationsPath)...)
	return append(errs, unchangedAllowed(annotationErrs, sc.Annotations, oldSC.Annotations)...)
}

// unchangedAllowed drops the errors on annotations an update keeps as they
// were: one stored before a rule existed, or by a writer that does not
// validate scopes (kube-apiserver), must not block every later update, the
// removal of the ServiceCIDR's finalizer included.
func unchangedAllowed(errs field.ErrorList, annotations, old map[string]string) field.ErrorList {
	var kept field.ErrorList
	for _, e := range errs {
		if !keptAsItWas(e.Field, annotations, old) {
			kept = append(kept, e)
		}
	}
	return kept
}

// keptAsItWas reports whether fieldPath is an annotation present in both
// annotation sets with one value.
func keptAsItWas(fieldPath string, annotations, old map[string]string) bool {
	for k, v := range old {
		if nv, ok := annotations[k]; ok && nv == v && fieldPath == annotationsPath.Key(k).String() {
			return true
		}
	}
	return false
}

// WarningsOnCreate names the ServiceCIDRs the new one overlaps, and says
// when its lifecycle annotations have no effect on this server.
func (s strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	return s.warnings(ctx, obj.(*networkingv1.ServiceCIDR), nil, false)
}

// WarningsOnUpdate is WarningsOnCreate for the CIDRs and the lifecycle
// annotations an update adds or changes: the controllers' updates (the
// finalizer) warn of nothing.
func (s strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	sc, oldSC := obj.(*networkingv1.ServiceCIDR), old.(*networkingv1.ServiceCIDR)
	return s.warnings(ctx, sc, oldSC.Spec.CIDRs, lifecycle.Same(sc.Annotations, oldSC.Annotations))
}

// warnings are those of a write of sc; kept are the CIDRs stored before it
// (none on a create), sameLifecycle says it keeps the lifecycle
// annotations as stored. With WarnOverlaps, a new CIDR warns of its
// overlaps, and a new CIDR or a changed lifecycle of the overlaps whose
// addresses a draining or manual-only ServiceCIDR closes (on a server
// whose model applies lifecycles).
func (s strategy) warnings(ctx context.Context, sc *networkingv1.ServiceCIDR, kept []string, sameLifecycle bool) []string {
	if s.extra == nil {
		return nil
	}
	p := s.extra.policy
	var out []string
	if w := p.lifecycleIgnoredWarning(sc); w != "" && !sameLifecycle {
		out = append(out, w)
	}
	added := len(kept) != len(sc.Spec.CIDRs)
	overlaps := p.WarnOverlaps && added
	lifecycles := p.WarnOverlaps && !p.LifecycleIgnored && (added || !sameLifecycle)
	if (s.extra.list == nil && s.extra.overlaps == nil) || (!overlaps && !lifecycles) {
		return out
	}
	closedKept := kept
	if !sameLifecycle {
		closedKept = nil // a changed lifecycle concerns every CIDR
	}
	read := kept
	if lifecycles {
		read = closedKept // the closed-overlap warnings read every CIDR the overlap warnings read, or more
	}
	others, err := s.extra.overlapping(ctx, newPrefixes(sc.Spec.CIDRs, read))
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot list ServiceCIDRs for the overlap warning", "err", err)
		return out
	}
	if overlaps {
		out = append(out, overlapWarnings(sc, kept, others, lifecycles)...)
	}
	if lifecycles {
		out = append(out, closedOverlapWarnings(sc, closedKept, others)...)
	}
	return out
}

// newPrefixes are the CIDRs of cidrs not in kept that parse, as the
// warnings parse them.
func newPrefixes(cidrs, kept []string) []netip.Prefix {
	var out []netip.Prefix
	for _, text := range cidrs {
		if p, err := subrange.ParsePrefix(text); err == nil && !slices.Contains(kept, text) {
			out = append(out, p)
		}
	}
	return out
}

func (strategy) Canonicalize(obj runtime.Object)               {}
func (strategy) AllowCreateOnUpdate(context.Context) bool      { return true }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"networking.k8s.io/v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	obj.(*networkingv1.ServiceCIDR).Spec = old.(*networkingv1.ServiceCIDR).Spec
}

// WarningsOnUpdate: a status write changes neither CIDRs nor annotations.
func (statusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
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
