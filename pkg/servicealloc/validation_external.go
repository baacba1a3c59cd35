package servicealloc

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// The checks in this file are upstream's (k8s.io/kubernetes
// pkg/apis/core/validation, ValidateService and ValidateServiceUpdate) for
// the fields that expose a Service outside the cluster: externalIPs,
// loadBalancerSourceRanges (and its annotation), loadBalancerClass,
// allocateLoadBalancerNodePorts, the traffic policies, trafficDistribution
// and session affinity. Texts are upstream's, word for word, because
// clients and people match on them.
//
// Invariant: a value that was stored before may stay. Upstream validates new
// externalIPs and source ranges strictly but accepts the ones the old object
// already had (they may have been accepted by an older, looser release);
// a Service written by kube-apiserver must stay editable through this
// server (issue 10: labelling such a Service failed because of a field the
// request did not touch).
//
// The "Required" checks upstream makes for defaulted fields
// (sessionAffinity, internalTrafficPolicy, externalTrafficPolicy,
// allocateLoadBalancerNodePorts) are not here: every request body is
// defaulted on decode (pkg/apiserver's defaulting, like upstream's), so
// they cannot fail through the API, and an embedding server with other
// defaults should not be refused for them. healthCheckNodePort and
// nodePort belong to node-port allocation and are validated there.

// strictIPCIDRValidation is upstream's StrictIPCIDRValidation feature gate,
// which is off by default: IPs with leading zeros and CIDRs with host bits
// are accepted in the legacy fields (with a warning).
const strictIPCIDRValidation = false

// maxClientIPAffinitySeconds is the longest ClientIP session affinity
// timeout, one day (upstream's core.MaxClientIPServiceAffinitySeconds).
const maxClientIPAffinitySeconds = 86400

// annotationLoadBalancerSourceRanges is the annotation older clients used
// for spec.loadBalancerSourceRanges (upstream's
// core.AnnotationLoadBalancerSourceRangesKey).
const annotationLoadBalancerSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"

var (
	supportedExternalTrafficPolicies = sets.New(corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal)
	supportedInternalTrafficPolicies = sets.New(corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal)
	supportedTrafficDistributions    = []string{corev1.ServiceTrafficDistributionPreferClose,
		corev1.ServiceTrafficDistributionPreferSameZone, corev1.ServiceTrafficDistributionPreferSameNode}
)

// externallyAccessible reports whether traffic can reach svc from outside
// the cluster: NodePort and LoadBalancer, and ClusterIP with externalIPs
// (upstream's service.ExternallyAccessible).
func externallyAccessible(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer || svc.Spec.Type == corev1.ServiceTypeNodePort ||
		(svc.Spec.Type == corev1.ServiceTypeClusterIP && len(svc.Spec.ExternalIPs) > 0)
}

// validateExternalFields checks the fields above for svc; old is the stored
// Service of an update, nil for a create.
func validateExternalFields(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &svc.Spec

	if spec.ClusterIP == corev1.ClusterIPNone && len(spec.ClusterIPs) <= 1 {
		switch spec.Type {
		case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
			allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(0), corev1.ClusterIPNone,
				fmt.Sprintf("may not be set to 'None' for %s services", spec.Type)))
		}
	}

	allErrs = append(allErrs, validateSessionAffinityConfig(svc)...)
	allErrs = append(allErrs, validateExternalIPs(svc, old)...)
	allErrs = append(allErrs, validateSourceRanges(svc, old)...)

	if spec.AllocateLoadBalancerNodePorts != nil && spec.Type != corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}

	lbClassPath := specPath.Child("loadBalancerClass")
	if old != nil && old.Spec.Type == corev1.ServiceTypeLoadBalancer && spec.Type == corev1.ServiceTypeLoadBalancer &&
		!ptrEqual(old.Spec.LoadBalancerClass, spec.LoadBalancerClass) {
		allErrs = append(allErrs, field.Invalid(lbClassPath, spec.LoadBalancerClass, "may not change once set"))
	}
	if spec.LoadBalancerClass != nil {
		if spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, msg := range utilvalidation.IsQualifiedName(*spec.LoadBalancerClass) {
				allErrs = append(allErrs, field.Invalid(lbClassPath, *spec.LoadBalancerClass, msg))
			}
		} else {
			allErrs = append(allErrs, field.Forbidden(lbClassPath, "may only be used when `type` is 'LoadBalancer'"))
		}
	}

	etpPath := specPath.Child("externalTrafficPolicy")
	if !externallyAccessible(svc) {
		if spec.ExternalTrafficPolicy != "" {
			allErrs = append(allErrs, field.Invalid(etpPath, spec.ExternalTrafficPolicy, "may only be set for externally-accessible services"))
		}
	} else if spec.ExternalTrafficPolicy != "" && !supportedExternalTrafficPolicies.Has(spec.ExternalTrafficPolicy) {
		allErrs = append(allErrs, field.NotSupported(etpPath, spec.ExternalTrafficPolicy, sets.List(supportedExternalTrafficPolicies)))
	}
	if spec.InternalTrafficPolicy != nil && !supportedInternalTrafficPolicies.Has(*spec.InternalTrafficPolicy) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("internalTrafficPolicy"), *spec.InternalTrafficPolicy, sets.List(supportedInternalTrafficPolicies)))
	}
	if td := spec.TrafficDistribution; td != nil && !contains(supportedTrafficDistributions, *td) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("trafficDistribution"), *td, supportedTrafficDistributions))
	}
	return allErrs
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// validateSessionAffinityConfig checks sessionAffinityConfig against
// sessionAffinity (the value itself is checked in ValidateService).
func validateSessionAffinityConfig(svc *corev1.Service) field.ErrorList {
	cfgPath := specPath.Child("sessionAffinityConfig")
	cfg := svc.Spec.SessionAffinityConfig
	switch svc.Spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		if cfg != nil {
			return field.ErrorList{field.Forbidden(cfgPath, fmt.Sprintf("must not be set when session affinity is %s", corev1.ServiceAffinityNone))}
		}
	case corev1.ServiceAffinityClientIP:
		when := fmt.Sprintf("when session affinity type is %s", corev1.ServiceAffinityClientIP)
		switch {
		case cfg == nil:
			return field.ErrorList{field.Required(cfgPath, when)}
		case cfg.ClientIP == nil:
			return field.ErrorList{field.Required(cfgPath.Child("clientIP"), when)}
		case cfg.ClientIP.TimeoutSeconds == nil:
			return field.ErrorList{field.Required(cfgPath.Child("clientIP", "timeoutSeconds"), when)}
		}
		if t := *cfg.ClientIP.TimeoutSeconds; t <= 0 || t > maxClientIPAffinitySeconds {
			return field.ErrorList{field.Invalid(cfgPath.Child("clientIP", "timeoutSeconds"), t,
				fmt.Sprintf("must be greater than 0 and less than %d", maxClientIPAffinitySeconds))}
		}
	}
	return nil
}

// validateExternalIPs checks every new external IP: a valid address that is
// not unspecified, loopback or link-local (upstream uses its endpoint-IP
// rules here, for historical reasons).
func validateExternalIPs(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	var existing []string
	if old != nil {
		existing = old.Spec.ExternalIPs
	}
	for i, ip := range svc.Spec.ExternalIPs {
		p := specPath.Child("externalIPs").Index(i)
		if contains(existing, ip) {
			continue
		}
		if errs := utilvalidation.IsValidIPForLegacyField(p, ip, strictIPCIDRValidation, nil); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			continue
		}
		allErrs = append(allErrs, validateNonSpecialIP(p, ip)...)
	}
	return allErrs
}

// validateNonSpecialIP refuses addresses no external traffic can be sent to
// (upstream's ValidateEndpointIP, past its parse check).
func validateNonSpecialIP(p *field.Path, text string) field.ErrorList {
	ip := netutils.ParseIPSloppy(text)
	if ip == nil {
		return field.ErrorList{field.Invalid(p, text, "must be a valid IP address")}
	}
	var allErrs field.ErrorList
	if ip.IsUnspecified() {
		allErrs = append(allErrs, field.Invalid(p, text, fmt.Sprintf("may not be unspecified (%v)", text)))
	}
	if ip.IsLoopback() {
		allErrs = append(allErrs, field.Invalid(p, text, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if ip.IsLinkLocalUnicast() {
		allErrs = append(allErrs, field.Invalid(p, text, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if ip.IsLinkLocalMulticast() {
		allErrs = append(allErrs, field.Invalid(p, text, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return allErrs
}

// validateSourceRanges checks spec.loadBalancerSourceRanges or, when that is
// empty, its annotation. Upstream names the field path
// "spec.LoadBalancerSourceRanges" (capital L) in these errors; so do we.
// Values may be padded with spaces: that is part of the API since the
// annotation days.
func validateSourceRanges(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	if ranges := svc.Spec.LoadBalancerSourceRanges; len(ranges) > 0 {
		p := specPath.Child("LoadBalancerSourceRanges")
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
		}
		var existing []string
		if old != nil {
			for _, v := range old.Spec.LoadBalancerSourceRanges {
				existing = append(existing, strings.TrimSpace(v))
			}
		}
		for i, v := range ranges {
			allErrs = append(allErrs, utilvalidation.IsValidCIDRForLegacyField(p.Index(i), strings.TrimSpace(v), strictIPCIDRValidation, existing)...)
		}
		return allErrs
	}
	val, ok := svc.Annotations[annotationLoadBalancerSourceRanges]
	if !ok {
		return nil
	}
	p := field.NewPath("metadata", "annotations").Key(annotationLoadBalancerSourceRanges)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
	}
	if old != nil && old.Annotations[annotationLoadBalancerSourceRanges] == val {
		return allErrs
	}
	if val = strings.TrimSpace(val); val != "" {
		for _, v := range strings.Split(val, ",") {
			allErrs = append(allErrs, utilvalidation.IsValidCIDRForLegacyField(p, strings.TrimSpace(v), strictIPCIDRValidation, nil)...)
		}
	}
	return allErrs
}
