package servicealloc

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// WarningsForService returns the warnings upstream sends with a create or
// update of svc (old is nil for a create), in upstream's order: deprecated
// annotations and fields, non-canonical IPs and CIDRs (accepted in the
// legacy fields, but ambiguous to other parsers), and fields its type
// ignores.
func WarningsForService(svc, old *corev1.Service) []string {
	if svc == nil {
		return nil
	}
	var warnings []string
	if _, ok := svc.Annotations[annotationTopologyAwareHints]; ok {
		warnings = append(warnings, fmt.Sprintf("annotation %s is deprecated, please use %s instead", annotationTopologyAwareHints, annotationTopologyMode))
	}
	if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		for i, ip := range svc.Spec.ClusterIPs {
			warnings = append(warnings, ipWarnings(specPath.Child("clusterIPs").Index(i), ip)...)
		}
	}
	headless := svc.Spec.Type == corev1.ServiceTypeClusterIP && svc.Spec.ClusterIP == corev1.ClusterIPNone
	if headless {
		if svc.Spec.LoadBalancerIP != "" {
			warnings = append(warnings, "spec.loadBalancerIP is ignored for headless services")
		}
		if len(svc.Spec.ExternalIPs) > 0 {
			warnings = append(warnings, "spec.externalIPs is ignored for headless services")
		}
		if svc.Spec.SessionAffinity != corev1.ServiceAffinityNone {
			warnings = append(warnings, "spec.SessionAffinity is ignored for headless services")
		}
	}
	for i, ip := range svc.Spec.ExternalIPs {
		warnings = append(warnings, ipWarnings(specPath.Child("externalIPs").Index(i), ip)...)
	}
	if len(svc.Spec.ExternalIPs) > 0 && !headless && svc.Spec.Type != corev1.ServiceTypeExternalName {
		warnings = append(warnings, "spec.externalIPs is deprecated and may no longer be implemented in some clusters")
	}
	if svc.Spec.LoadBalancerIP != "" {
		warnings = append(warnings, ipWarnings(specPath.Child("loadBalancerIP"), svc.Spec.LoadBalancerIP)...)
	}
	for i, cidr := range svc.Spec.LoadBalancerSourceRanges {
		warnings = append(warnings, cidrWarnings(specPath.Child("loadBalancerSourceRanges").Index(i), cidr)...)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName && len(svc.Spec.ExternalIPs) > 0 {
		warnings = append(warnings, fmt.Sprintf("spec.externalIPs is ignored when spec.type is %q", corev1.ServiceTypeExternalName))
	}
	if svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ExternalName != "" {
		warnings = append(warnings, fmt.Sprintf("spec.externalName is ignored when spec.type is not %q", corev1.ServiceTypeExternalName))
	}
	if td := svc.Spec.TrafficDistribution; td != nil && *td == corev1.ServiceTrafficDistributionPreferClose {
		warnings = append(warnings, fmt.Sprintf("spec.trafficDistribution: %q is deprecated; use %q", corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone))
	}
	return warnings
}

// WarningsForServiceStatus returns the warnings of a status update: the
// ingress IPs written in a non-canonical form (named by the entry, as
// upstream names them).
func WarningsForServiceStatus(svc *corev1.Service) []string {
	var warnings []string
	p := field.NewPath("status", "loadBalancer", "ingress")
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			warnings = append(warnings, ipWarnings(p.Index(i), ing.IP)...)
		}
	}
	return warnings
}

// ipWarnings and cidrWarnings guard apimachinery's warning helpers, which
// expect a value that already passed validation (a strategy may be asked
// for warnings on an object that failed it).
func ipWarnings(p *field.Path, ip string) []string {
	if netutils.ParseIPSloppy(ip) == nil {
		return nil
	}
	return utilvalidation.GetWarningsForIP(p, ip)
}

func cidrWarnings(p *field.Path, cidr string) []string {
	if _, _, err := netutils.ParseCIDRSloppy(cidr); err != nil {
		return nil
	}
	return utilvalidation.GetWarningsForCIDR(p, cidr)
}
