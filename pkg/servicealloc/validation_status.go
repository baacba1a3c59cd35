package servicealloc

import (
	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// supportedIPModes are the values of status.loadBalancer.ingress[].ipMode.
var supportedIPModes = sets.New(corev1.LoadBalancerIPModeVIP, corev1.LoadBalancerIPModeProxy)

// ValidateServiceStatusUpdate checks an update of the status subresource the
// way upstream does: metadata may change only as in any update, and
// status.loadBalancer must be valid for the Service's (unchanged) spec. A
// status update is allowed for every type of Service; only load-balancer
// ingress is reserved to type LoadBalancer.
//
// Like upstream, status.conditions and the ingress entries' ports (port,
// protocol, error) are stored as given: kube-apiserver does not validate
// them, and refusing what it accepts would make a Service it wrote
// unwritable here.
func ValidateServiceStatusUpdate(svc, old *corev1.Service) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&svc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, ValidateLoadBalancerStatus(&svc.Status.LoadBalancer, &old.Status.LoadBalancer,
		field.NewPath("status", "loadBalancer"), &svc.Spec)...)
}

// ValidateLoadBalancerStatus checks status against spec: ingress only for
// type LoadBalancer; each ingress IP valid (IPs the old status already had
// may stay as they are); ipMode required with an IP (requests are defaulted
// to VIP, so this only fails for objects built in code), forbidden without
// one, and VIP or Proxy; a hostname a DNS-1123 subdomain and not an IP.
func ValidateLoadBalancerStatus(status, old *corev1.LoadBalancerStatus, fldPath *field.Path, spec *corev1.ServiceSpec) field.ErrorList {
	ingressPath := fldPath.Child("ingress")
	if spec.Type != corev1.ServiceTypeLoadBalancer && len(status.Ingress) > 0 {
		return field.ErrorList{field.Forbidden(ingressPath, "may only be used when `spec.type` is 'LoadBalancer'")}
	}
	var existingIPs []string
	if old != nil {
		for _, ing := range old.Ingress {
			if ing.IP != "" {
				existingIPs = append(existingIPs, ing.IP)
			}
		}
	}
	var allErrs field.ErrorList
	for i, ing := range status.Ingress {
		p := ingressPath.Index(i)
		if ing.IP != "" {
			allErrs = append(allErrs, utilvalidation.IsValidIPForLegacyField(p.Child("ip"), ing.IP, strictIPCIDRValidation, existingIPs)...)
		}
		switch {
		case ing.IPMode == nil:
			if ing.IP != "" {
				allErrs = append(allErrs, field.Required(p.Child("ipMode"), "must be specified when `ip` is set"))
			}
		case ing.IP == "":
			allErrs = append(allErrs, field.Forbidden(p.Child("ipMode"), "may not be specified when `ip` is not set"))
		case !supportedIPModes.Has(*ing.IPMode):
			allErrs = append(allErrs, field.NotSupported(p.Child("ipMode"), *ing.IPMode, sets.List(supportedIPModes)))
		}
		if ing.Hostname != "" {
			for _, msg := range utilvalidation.IsDNS1123Subdomain(ing.Hostname) {
				allErrs = append(allErrs, field.Invalid(p.Child("hostname"), ing.Hostname, msg))
			}
			if netutils.ParseIPSloppy(ing.Hostname) != nil {
				allErrs = append(allErrs, field.Invalid(p.Child("hostname"), ing.Hostname, "must be a DNS name, not an IP address"))
			}
		}
	}
	return allErrs
}

// DefaultLoadBalancerIPMode sets ipMode to VIP on every ingress entry of a
// LoadBalancer Service that has an IP and no ipMode, as upstream's
// decode-time defaulting does since ipMode exists: clients that predate the
// field (older cloud controllers) keep working.
func DefaultLoadBalancerIPMode(svc *corev1.Service) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return
	}
	for i := range svc.Status.LoadBalancer.Ingress {
		ing := &svc.Status.LoadBalancer.Ingress[i]
		if ing.IP != "" && ing.IPMode == nil {
			vip := corev1.LoadBalancerIPModeVIP
			ing.IPMode = &vip
		}
	}
}
