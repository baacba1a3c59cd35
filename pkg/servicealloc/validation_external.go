package servicealloc

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"

	"github.com/allocator/allocator/internal/holding"
)

// The checks in this file are upstream's (k8s.io/kubernetes
// pkg/apis/core/validation, ValidateService and ValidateServiceUpdate) for
// the fields that expose a Service outside the cluster: externalIPs,
// loadBalancerSourceRanges (and its annotation), loadBalancerClass,
// allocateLoadBalancerNodePorts, the traffic policies, trafficDistribution
// and session affinity. Texts are upstream's, word for word, because
// clients and people match on them.
//
// Invariant: a value that was stored before may stay as upstream lets it
// stay. New externalIPs and source ranges are parsed strictly, the ones the
// old object already had are not (an older, looser release may have
// accepted them; a Service written by kube-apiserver must stay editable
// through this server); an old external IP still has to be an
// address traffic can reach (not loopback, link-local or unspecified), as
// upstream checks that on every update.

// strictIPCIDRValidation is upstream's StrictIPCIDRValidation feature gate,
// on by default from 1.36 (our API level is 1.37): IPs with leading zeros,
// IPv4-mapped IPv6 addresses and CIDRs with host bits are refused in the
// legacy fields (cluster IPs, externalIPs, loadBalancerSourceRanges and its
// annotation, load-balancer ingress IPs), unless the stored object already
// had the value.
const strictIPCIDRValidation = true

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

// validateExternalFields checks allocateLoadBalancerNodePorts,
// loadBalancerClass, the traffic policies (with healthCheckNodePort) and
// trafficDistribution of svc, in upstream's order.
func validateExternalFields(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &svc.Spec

	if spec.AllocateLoadBalancerNodePorts != nil && spec.Type != corev1.ServiceTypeLoadBalancer {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		// Upstream's path has no "spec." here.
		allErrs = append(allErrs, field.Required(field.NewPath("allocateLoadBalancerNodePorts"), ""))
	}

	allErrs = append(allErrs, validateLoadBalancerClass(svc, nil)...)

	etpPath := specPath.Child("externalTrafficPolicy")
	switch {
	case !externallyAccessible(svc):
		if spec.ExternalTrafficPolicy != "" {
			allErrs = append(allErrs, field.Invalid(etpPath, spec.ExternalTrafficPolicy, "may only be set for externally-accessible services"))
		}
	case spec.ExternalTrafficPolicy == "":
		allErrs = append(allErrs, field.Required(etpPath, ""))
	case !supportedExternalTrafficPolicies.Has(spec.ExternalTrafficPolicy):
		allErrs = append(allErrs, field.NotSupported(etpPath, spec.ExternalTrafficPolicy, sets.List(supportedExternalTrafficPolicies)))
	}
	// A needed healthCheckNodePort left at 0 is not an error here: node-port
	// allocation picks one before the Service is stored.
	hcPath := specPath.Child("healthCheckNodePort")
	if !holding.NeedsHealthCheckNodePort(svc) {
		if spec.HealthCheckNodePort != 0 {
			allErrs = append(allErrs, field.Invalid(hcPath, spec.HealthCheckNodePort,
				"may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
		}
	} else if spec.HealthCheckNodePort != 0 {
		for _, msg := range utilvalidation.IsValidPortNum(int(spec.HealthCheckNodePort)) {
			allErrs = append(allErrs, field.Invalid(hcPath, spec.HealthCheckNodePort, msg))
		}
	}

	itpPath := specPath.Child("internalTrafficPolicy")
	switch {
	case spec.InternalTrafficPolicy == nil:
		// Not required on ExternalName: it was never checked there, and
		// stored objects must stay valid.
		if spec.Type == corev1.ServiceTypeClusterIP || spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer {
			allErrs = append(allErrs, field.Required(itpPath, ""))
		}
	case !supportedInternalTrafficPolicies.Has(*spec.InternalTrafficPolicy):
		allErrs = append(allErrs, field.NotSupported(itpPath, *spec.InternalTrafficPolicy, sets.List(supportedInternalTrafficPolicies)))
	}

	if td := spec.TrafficDistribution; td != nil && !contains(supportedTrafficDistributions, *td) {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("trafficDistribution"), *td, supportedTrafficDistributions))
	}
	return allErrs
}

// validateLoadBalancerClass checks loadBalancerClass: a qualified name, only
// on a LoadBalancer, and (old non-nil: an update) unchanged while the
// Service stays a LoadBalancer.
func validateLoadBalancerClass(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	p := specPath.Child("loadBalancerClass")
	class := svc.Spec.LoadBalancerClass
	if old != nil && old.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		!ptrEqual(old.Spec.LoadBalancerClass, class) {
		allErrs = append(allErrs, field.Invalid(p, class, "may not change once set"))
	}
	if class != nil {
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, msg := range utilvalidation.IsQualifiedName(*class) {
				allErrs = append(allErrs, field.Invalid(p, *class, msg))
			}
		} else {
			allErrs = append(allErrs, field.Forbidden(p, "may only be used when `type` is 'LoadBalancer'"))
		}
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

// validateExternalIPs checks every external IP: a valid address (parsed
// strictly unless old had it) that is not unspecified, loopback or
// link-local (upstream uses its endpoint-IP rules here, for historical
// reasons).
func validateExternalIPs(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	var existing []string
	if old != nil {
		existing = old.Spec.ExternalIPs
	}
	for i, ip := range svc.Spec.ExternalIPs {
		p := specPath.Child("externalIPs").Index(i)
		if errs := utilvalidation.IsValidIPForLegacyField(p, ip, strictIPCIDRValidation, existing); len(errs) > 0 {
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
