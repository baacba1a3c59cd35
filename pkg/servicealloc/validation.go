package servicealloc

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/allocator/allocator/pkg/subrange"
)

var (
	specPath           = field.NewPath("spec")
	clusterIPPath      = specPath.Child("clusterIP")
	clusterIPsPath     = specPath.Child("clusterIPs")
	ipFamiliesPath     = specPath.Child("ipFamilies")
	ipFamilyPolicyPath = specPath.Child("ipFamilyPolicy")
	typePath           = specPath.Child("type")
)

var (
	supportedTypes = sets.New(corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort,
		corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName)
	supportedPolicies = sets.New(corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyPreferDualStack,
		corev1.IPFamilyPolicyRequireDualStack)
	supportedFamilies  = sets.New(corev1.IPv4Protocol, corev1.IPv6Protocol)
	supportedProtocols = sets.New(corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP)
	supportedAffinity  = sets.New(corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone)
)

// ValidateService checks a Service being created the way upstream's
// ValidateService does: metadata name, type, ports, session affinity,
// externalName, the IP fields (clusterIP, clusterIPs, ipFamilies,
// ipFamilyPolicy; their texts must be canonical: no leading zeros, no
// IPv4-mapped IPv6, lower-case RFC 5952) and the fields of external exposure
// (externalIPs, load balancer fields, traffic policies; see
// validation_external.go). It does not look at the cluster's configuration;
// Allocator.PrepareCreate does that.
func ValidateService(svc *corev1.Service) field.ErrorList {
	return validateService(svc, nil)
}

// validateService is ValidateService for a create (old nil) or an update
// from old: values old already had are accepted as they are.
func validateService(svc, old *corev1.Service) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&svc.ObjectMeta, true,
		apimachineryvalidation.NameIsDNS1035Label, field.NewPath("metadata"))

	if !supportedTypes.Has(svc.Spec.Type) {
		allErrs = append(allErrs, field.NotSupported(typePath, svc.Spec.Type, sets.List(supportedTypes)))
	}
	if !supportedAffinity.Has(svc.Spec.SessionAffinity) && svc.Spec.SessionAffinity != "" {
		allErrs = append(allErrs, field.NotSupported(specPath.Child("sessionAffinity"), svc.Spec.SessionAffinity, sets.List(supportedAffinity)))
	}

	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		name := strings.TrimSuffix(svc.Spec.ExternalName, ".")
		if name == "" {
			allErrs = append(allErrs, field.Required(specPath.Child("externalName"), ""))
		} else {
			for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
				allErrs = append(allErrs, field.Invalid(specPath.Child("externalName"), svc.Spec.ExternalName, msg))
			}
		}
	}

	headless := svc.Spec.ClusterIP == corev1.ClusterIPNone
	if len(svc.Spec.Ports) == 0 && !headless && svc.Spec.Type != corev1.ServiceTypeExternalName {
		allErrs = append(allErrs, field.Required(specPath.Child("ports"), ""))
	}
	allErrs = append(allErrs, metav1validation.ValidateLabels(svc.Spec.Selector, specPath.Child("selector"))...)
	allErrs = append(allErrs, validateExternalFields(svc, old)...)
	allErrs = append(allErrs, validatePorts(svc)...)
	allErrs = append(allErrs, ValidateClusterIPFields(svc)...)
	return allErrs
}

func validatePorts(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	portsPath := specPath.Child("ports")
	names := sets.New[string]()
	keys := sets.New[string]()
	for i, port := range svc.Spec.Ports {
		p := portsPath.Index(i)
		if len(svc.Spec.Ports) > 1 && port.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), ""))
		} else if port.Name != "" {
			for _, msg := range utilvalidation.IsDNS1123Label(port.Name) {
				allErrs = append(allErrs, field.Invalid(p.Child("name"), port.Name, msg))
			}
			if names.Has(port.Name) {
				allErrs = append(allErrs, field.Duplicate(p.Child("name"), port.Name))
			}
			names.Insert(port.Name)
		}
		for _, msg := range utilvalidation.IsValidPortNum(int(port.Port)) {
			allErrs = append(allErrs, field.Invalid(p.Child("port"), port.Port, msg))
		}
		if port.Protocol == "" {
			allErrs = append(allErrs, field.Required(p.Child("protocol"), ""))
		} else if !supportedProtocols.Has(port.Protocol) {
			allErrs = append(allErrs, field.NotSupported(p.Child("protocol"), port.Protocol, sets.List(supportedProtocols)))
		}
		switch port.TargetPort.Type {
		case intstr.Int:
			if port.TargetPort.IntVal != 0 {
				for _, msg := range utilvalidation.IsValidPortNum(int(port.TargetPort.IntVal)) {
					allErrs = append(allErrs, field.Invalid(p.Child("targetPort"), port.TargetPort.IntVal, msg))
				}
			}
		case intstr.String:
			if port.TargetPort.StrVal != "" {
				for _, msg := range utilvalidation.IsValidPortName(port.TargetPort.StrVal) {
					allErrs = append(allErrs, field.Invalid(p.Child("targetPort"), port.TargetPort.StrVal, msg))
				}
			}
		}
		if port.NodePort != 0 {
			for _, msg := range utilvalidation.IsValidPortNum(int(port.NodePort)) {
				allErrs = append(allErrs, field.Invalid(p.Child("nodePort"), port.NodePort, msg))
			}
		}
		key := fmt.Sprintf("%d/%s", port.Port, port.Protocol)
		if keys.Has(key) {
			allErrs = append(allErrs, field.Duplicate(p, key))
		}
		keys.Insert(key)
	}
	return allErrs
}

// ValidateClusterIPFields checks clusterIP, clusterIPs, ipFamilies and
// ipFamilyPolicy against each other, without looking at the cluster's ranges
// (upstream's ValidateServiceClusterIPsRelatedFields).
func ValidateClusterIPFields(svc *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &svc.Spec

	if len(spec.ClusterIPs) > 0 && spec.ClusterIP != spec.ClusterIPs[0] {
		allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "first value must match `clusterIP`"))
	}
	if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
		allErrs = append(allErrs, field.Required(clusterIPPath, "must be set when `clusterIPs` is set"))
	}

	if spec.Type == corev1.ServiceTypeExternalName {
		if len(spec.ClusterIPs) > 0 || spec.ClusterIP != "" {
			allErrs = append(allErrs, field.Forbidden(clusterIPsPath, "may not be set for ExternalName services"))
		}
		if spec.IPFamilyPolicy != nil {
			allErrs = append(allErrs, field.Forbidden(ipFamilyPolicyPath, "may not be set for ExternalName services"))
		}
		if len(spec.IPFamilies) > 0 {
			allErrs = append(allErrs, field.Forbidden(ipFamiliesPath, "may not be set for ExternalName services"))
		}
		return allErrs
	}

	if spec.IPFamilyPolicy != nil && !supportedPolicies.Has(*spec.IPFamilyPolicy) {
		allErrs = append(allErrs, field.NotSupported(ipFamilyPolicyPath, *spec.IPFamilyPolicy, sets.List(supportedPolicies)))
	}

	if len(spec.IPFamilies) > 2 {
		allErrs = append(allErrs, field.TooMany(ipFamiliesPath, len(spec.IPFamilies), 2))
	}
	seenFamilies := sets.New[corev1.IPFamily]()
	for i, fam := range spec.IPFamilies {
		switch {
		case !supportedFamilies.Has(fam):
			allErrs = append(allErrs, field.NotSupported(ipFamiliesPath.Index(i), fam, sets.List(supportedFamilies)))
		case seenFamilies.Has(fam):
			allErrs = append(allErrs, field.Duplicate(ipFamiliesPath.Index(i), fam))
		}
		seenFamilies.Insert(fam)
	}

	if len(spec.ClusterIPs) > 2 {
		allErrs = append(allErrs, field.TooMany(clusterIPsPath, len(spec.ClusterIPs), 2))
	}
	var ipFamilies []corev1.IPFamily
	for i, text := range spec.ClusterIPs {
		p := clusterIPsPath.Index(i)
		if text == corev1.ClusterIPNone {
			if i != 0 || len(spec.ClusterIPs) > 1 {
				allErrs = append(allErrs, field.Invalid(p, text, "'None' must be the first and only value"))
			}
			continue
		}
		addr, err := subrange.ParseAddr(text)
		if err != nil {
			allErrs = append(allErrs, field.Invalid(p, text, invalidIPMessage(err)))
			continue
		}
		fam := FamilyOf(addr)
		ipFamilies = append(ipFamilies, fam)
		if i < len(spec.IPFamilies) && spec.IPFamilies[i] != fam {
			allErrs = append(allErrs, field.Invalid(p, text,
				fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", spec.IPFamilies[i], i)))
		}
	}
	if len(ipFamilies) == 2 && ipFamilies[0] == ipFamilies[1] {
		allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "may specify no more than one IP for each IP family"))
	}

	if spec.IPFamilyPolicy != nil && *spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack {
		if len(spec.ClusterIPs) > 1 {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "must be at most one entry when `ipFamilyPolicy` is `SingleStack`"))
		}
		if len(spec.IPFamilies) > 1 {
			allErrs = append(allErrs, field.Invalid(ipFamiliesPath, spec.IPFamilies, "must be at most one entry when `ipFamilyPolicy` is `SingleStack`"))
		}
	}
	if len(spec.ClusterIPs) == 2 && len(spec.IPFamilies) == 1 {
		allErrs = append(allErrs, field.Invalid(ipFamiliesPath, spec.IPFamilies, "must list a family for every entry of `clusterIPs`"))
	}
	return allErrs
}

// ValidateServiceUpdate checks what may change between old and svc: the
// primary cluster IP and family are immutable while the Service keeps a
// cluster IP; the secondary may be added or removed, not changed; the
// loadBalancerClass of a LoadBalancer is immutable. Values old already had
// (external IPs, source ranges) are not checked again.
func ValidateServiceUpdate(svc, old *corev1.Service) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&svc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateService(svc, old)...)
	return append(allErrs, validateIPFieldsUpdate(svc, old)...)
}

// validateIPFieldsUpdate is the IP part of ValidateServiceUpdate. It leaves
// metadata alone: the store's update hooks run before the store fills in
// system fields (uid, creationTimestamp) a client may omit, and the
// strategy checks metadata afterwards.
func validateIPFieldsUpdate(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	// Changing to or from ExternalName is how a cluster IP is dropped or
	// first obtained; every other change must keep it.
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return allErrs
	}
	if len(old.Spec.ClusterIPs) > 0 {
		if len(svc.Spec.ClusterIPs) == 0 || svc.Spec.ClusterIPs[0] != old.Spec.ClusterIPs[0] {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(0), svc.Spec.ClusterIPs, "may not change once set"))
		} else if len(old.Spec.ClusterIPs) > 1 && len(svc.Spec.ClusterIPs) > 1 && svc.Spec.ClusterIPs[1] != old.Spec.ClusterIPs[1] {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(1), svc.Spec.ClusterIPs, "may not change once set"))
		}
	}
	if len(old.Spec.IPFamilies) > 0 {
		if len(svc.Spec.IPFamilies) == 0 || svc.Spec.IPFamilies[0] != old.Spec.IPFamilies[0] {
			allErrs = append(allErrs, field.Invalid(ipFamiliesPath.Index(0), svc.Spec.IPFamilies, "may not change once set"))
		} else if len(old.Spec.IPFamilies) > 1 && len(svc.Spec.IPFamilies) > 1 && svc.Spec.IPFamilies[1] != old.Spec.IPFamilies[1] {
			allErrs = append(allErrs, field.Invalid(ipFamiliesPath.Index(1), svc.Spec.IPFamilies, "may not change once set"))
		}
	}
	return allErrs
}

// FamilyOf returns the IP family of addr.
func FamilyOf(addr netip.Addr) corev1.IPFamily {
	if addr.Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func invalidIPMessage(err error) string {
	var perr *subrange.ParseError
	if pe, ok := err.(*subrange.ParseError); ok {
		perr = pe
	}
	if perr != nil && perr.Reason != "not an IP address" && perr.Reason != "empty" {
		return "must be a valid IP address in canonical form: " + perr.Reason
	}
	return "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
}
