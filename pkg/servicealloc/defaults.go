package servicealloc

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/allocator/allocator/pkg/subrange"
)

// normalizeClusterIPs keeps spec.clusterIP and spec.clusterIPs in step, as
// upstream does: old clients set only the singular field.
func normalizeClusterIPs(svc, old *corev1.Service) {
	spec := &svc.Spec
	if old == nil {
		if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
			spec.ClusterIPs = []string{spec.ClusterIP}
		}
		return
	}
	if spec.ClusterIP == "" && len(spec.ClusterIPs) == 0 {
		return
	}
	if spec.ClusterIP == old.Spec.ClusterIP {
		return
	}
	// The singular field changed; when the plural did not, the client only
	// knows the singular one: follow it.
	if slices.Equal(spec.ClusterIPs, old.Spec.ClusterIPs) {
		if spec.ClusterIP != "" {
			spec.ClusterIPs = []string{spec.ClusterIP}
		} else {
			spec.ClusterIPs = nil
		}
	}
}

// dropTypeDependentFields clears the IP fields when an update turns a Service
// into an ExternalName one and the client left them as they were.
func dropTypeDependentFields(svc, old *corev1.Service) {
	if svc.Spec.Type != corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	if svc.Spec.ClusterIP == old.Spec.ClusterIP && slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) {
		svc.Spec.ClusterIP = ""
		svc.Spec.ClusterIPs = nil
	}
	if slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies) {
		svc.Spec.IPFamilies = nil
	}
	if ptrEqual(svc.Spec.IPFamilyPolicy, old.Spec.IPFamilyPolicy) {
		svc.Spec.IPFamilyPolicy = nil
	}
	svc.Spec.InternalTrafficPolicy = nil
}

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// patchAllocatedValues keeps the allocated addresses and families when an
// update (e.g. kubectl replace of a manifest without them) leaves them out.
func patchAllocatedValues(svc, old *corev1.Service) {
	if !NeedsClusterIP(old) || !NeedsClusterIP(svc) {
		return
	}
	if svc.Spec.ClusterIP == "" {
		svc.Spec.ClusterIP = old.Spec.ClusterIP
	}
	if len(svc.Spec.ClusterIPs) == 0 && len(old.Spec.ClusterIPs) > 0 {
		svc.Spec.ClusterIPs = append([]string(nil), old.Spec.ClusterIPs...)
	}
	if len(svc.Spec.IPFamilies) == 0 && len(old.Spec.IPFamilies) > 0 {
		svc.Spec.IPFamilies = append([]corev1.IPFamily(nil), old.Spec.IPFamilies...)
	}
}

// defaultIPFamilies fills ipFamilyPolicy and ipFamilies from the request and
// the cluster's configuration, as upstream's initIPFamilyFields does, and
// reports the combinations the cluster cannot serve.
func (a *Allocator) defaultIPFamilies(svc, old *corev1.Service) field.ErrorList {
	spec := &svc.Spec
	if spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if spec.IPFamilyPolicy == nil {
		var policy corev1.IPFamilyPolicy
		switch {
		case old != nil && old.Spec.IPFamilyPolicy != nil:
			policy = *old.Spec.IPFamilyPolicy
		case spec.ClusterIP == corev1.ClusterIPNone && len(spec.Selector) == 0:
			// Headless without selector: its endpoints are managed by the
			// user, so it serves every family the cluster has.
			policy = corev1.IPFamilyPolicyRequireDualStack
		default:
			policy = corev1.IPFamilyPolicySingleStack
		}
		spec.IPFamilyPolicy = &policy
	}
	policy := *spec.IPFamilyPolicy

	if old != nil && NeedsClusterIP(old) {
		if errs := shrinkToSingleStack(svc, old, policy); len(errs) > 0 {
			return errs
		}
	}

	// Infer families from the requested addresses.
	for i, text := range spec.ClusterIPs {
		if text == corev1.ClusterIPNone {
			break
		}
		addr, err := subrange.ParseAddr(text)
		if err != nil {
			break // validation reports it
		}
		fam := FamilyOf(addr)
		if i >= len(spec.IPFamilies) {
			if _, ok := a.byFamily[fam]; !ok {
				return field.ErrorList{field.Invalid(clusterIPsPath.Index(i), spec.ClusterIPs,
					fmt.Sprintf("%s is not configured on this cluster", fam))}
			}
			spec.IPFamilies = append(spec.IPFamilies, fam)
		}
	}

	// Loose pre-validation, so what follows can trust the fields' shape.
	if errs := ValidateClusterIPFields(svc); len(errs) > 0 {
		return errs
	}

	if spec.ClusterIP == corev1.ClusterIPNone && len(spec.Selector) == 0 {
		// Headless and selectorless: any policy is accepted; take the
		// families the cluster has.
		if len(spec.IPFamilies) == 0 {
			spec.IPFamilies = []corev1.IPFamily{a.families[0]}
		}
		if len(spec.IPFamilies) < 2 && policy != corev1.IPFamilyPolicySingleStack && a.DualStack() {
			spec.IPFamilies = append(spec.IPFamilies, otherFamily(spec.IPFamilies[0]))
		}
		return nil
	}

	var errs field.ErrorList
	if policy == corev1.IPFamilyPolicyRequireDualStack && !a.DualStack() {
		errs = append(errs, field.Invalid(ipFamilyPolicyPath, policy, "this cluster is not configured for dual-stack services"))
	}
	for i, fam := range spec.IPFamilies {
		if _, ok := a.byFamily[fam]; !ok {
			errs = append(errs, field.Invalid(ipFamiliesPath.Index(i), fam, "not configured on this cluster"))
		}
	}
	if len(spec.IPFamilies) > 1 && policy == corev1.IPFamilyPolicySingleStack {
		errs = append(errs, field.Invalid(ipFamiliesPath, spec.IPFamilies, "must be at most one entry when `ipFamilyPolicy` is `SingleStack`"))
	}
	if len(errs) > 0 {
		return errs
	}

	if len(spec.IPFamilies) == 0 {
		spec.IPFamilies = []corev1.IPFamily{a.families[0]}
	}
	if policy != corev1.IPFamilyPolicySingleStack && len(spec.IPFamilies) == 1 && a.DualStack() {
		spec.IPFamilies = append(spec.IPFamilies, otherFamily(spec.IPFamilies[0]))
	}
	return nil
}

func otherFamily(fam corev1.IPFamily) corev1.IPFamily {
	if fam == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// shrinkToSingleStack applies upstream's update rule for dual- to
// single-stack: setting the policy to SingleStack is the intent, so
// unchanged clusterIPs and ipFamilies are cut to their primary entry; cutting
// them under any other policy is refused.
func shrinkToSingleStack(svc, old *corev1.Service, policy corev1.IPFamilyPolicy) field.ErrorList {
	spec := &svc.Spec
	if policy == corev1.IPFamilyPolicySingleStack {
		if slices.Equal(spec.ClusterIPs, old.Spec.ClusterIPs) && len(spec.ClusterIPs) > 1 {
			spec.ClusterIPs = spec.ClusterIPs[:1]
		}
		if slices.Equal(spec.IPFamilies, old.Spec.IPFamilies) && len(spec.IPFamilies) > 1 {
			spec.IPFamilies = spec.IPFamilies[:1]
		}
		return nil
	}
	var errs field.ErrorList
	if len(spec.ClusterIPs) < len(old.Spec.ClusterIPs) && len(spec.ClusterIPs) > 0 {
		errs = append(errs, field.Invalid(ipFamilyPolicyPath, policy, "must be 'SingleStack' to release the secondary cluster IP"))
	}
	if len(spec.IPFamilies) < len(old.Spec.IPFamilies) && len(spec.IPFamilies) > 0 {
		errs = append(errs, field.Invalid(ipFamilyPolicyPath, policy, "must be 'SingleStack' to release the secondary IP family"))
	}
	return errs
}
