package servicealloc

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/allocator/allocator/internal/holding"
)

// Service validation answers what kube-apiserver (at the API level we serve,
// design.md §7) answers: the same checks, the same texts and the same order
// of causes, because clients and people match on the message of a 422 and
// the message lists the causes in the order they were found. The order is
// that of upstream's validateService: topology annotations, ports, the
// type's own rules, each port, selector, session affinity, the IP fields,
// externalIPs, type, node ports, duplicate ports, source ranges,
// allocateLoadBalancerNodePorts, loadBalancerClass, traffic policies and
// trafficDistribution.

var (
	specPath           = field.NewPath("spec")
	clusterIPsPath     = specPath.Child("clusterIPs")
	ipFamiliesPath     = specPath.Child("ipFamilies")
	ipFamilyPolicyPath = specPath.Child("ipFamilyPolicy")
	typePath           = specPath.Child("type")
	portsPath          = specPath.Child("ports")
)

// The topology annotations: the current one and the one it replaced. When
// both are set they must agree.
const (
	annotationTopologyMode       = "service.kubernetes.io/topology-mode"
	annotationTopologyAwareHints = "service.kubernetes.io/topology-aware-hints"
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

// ValidateService checks a Service being created the way kube-apiserver
// does: its metadata (the name is a DNS-1123 label, so it may start with a
// digit: the relaxed Service name rule is GA at our API level) and its spec
// (validateService). It does not look at the cluster's configuration;
// Allocator.PrepareCreate does that.
func ValidateService(svc *corev1.Service) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&svc.ObjectMeta, true,
		apimachineryvalidation.NameIsDNSLabel, field.NewPath("metadata"))
	return append(allErrs, validateService(svc, nil)...)
}

// ValidateServiceUpdate checks an update from old to svc: metadata, what may
// change between the two (validateSpecUpdate), then the spec as on a create,
// except that values old already had are accepted as they are.
func ValidateServiceUpdate(svc, old *corev1.Service) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&svc.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateSpecUpdate(svc, old)...)
	return append(allErrs, validateService(svc, old)...)
}

// validateSpecUpdate is what an update may not change: the cluster IPs and
// families (except adding or releasing the secondary, or a change to or from
// ExternalName or headless), the loadBalancerClass of a LoadBalancer, and
// the healthCheckNodePort while one is needed.
func validateSpecUpdate(svc, old *corev1.Service) field.ErrorList {
	allErrs := validateClusterIPsUpdate(svc, old)
	allErrs = append(allErrs, validateIPFamiliesUpdate(svc, old)...)
	allErrs = append(allErrs, validateLoadBalancerClass(svc, old)...)
	if holding.NeedsHealthCheckNodePort(old) && holding.NeedsHealthCheckNodePort(svc) && svc.Spec.HealthCheckNodePort != old.Spec.HealthCheckNodePort {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("healthCheckNodePort"), "field is immutable"))
	}
	return allErrs
}

// validateService checks the spec of svc (and the annotations that stand for
// spec fields); old is the stored Service of an update, nil for a create.
func validateService(svc, old *corev1.Service) field.ErrorList {
	var allErrs field.ErrorList
	spec := &svc.Spec

	hints, hintsSet := svc.Annotations[annotationTopologyAwareHints]
	mode, modeSet := svc.Annotations[annotationTopologyMode]
	if modeSet && hintsSet && mode != hints {
		allErrs = append(allErrs, field.Invalid(field.NewPath("metadata", "annotations").Key(annotationTopologyMode), mode,
			fmt.Sprintf("must match annotations[%s] when both are specified", annotationTopologyAwareHints)))
	}

	headless := isHeadless(svc)
	if len(spec.Ports) == 0 && !headless && spec.Type != corev1.ServiceTypeExternalName {
		allErrs = append(allErrs, field.Required(portsPath, ""))
	}
	switch spec.Type {
	case corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeNodePort:
		if headless {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(0), spec.ClusterIPs[0],
				fmt.Sprintf("may not be set to 'None' for %s services", spec.Type)))
		}
	case corev1.ServiceTypeExternalName:
		if len(spec.ClusterIPs) > 0 {
			allErrs = append(allErrs, field.Forbidden(clusterIPsPath, "may not be set for ExternalName services"))
		}
		if len(spec.IPFamilies) > 0 {
			allErrs = append(allErrs, field.Forbidden(ipFamiliesPath, "may not be set for ExternalName services"))
		}
		if spec.IPFamilyPolicy != nil {
			allErrs = append(allErrs, field.Forbidden(ipFamilyPolicyPath, "may not be set for ExternalName services"))
		}
		// A trailing dot marks the name as fully qualified.
		if name := strings.TrimSuffix(spec.ExternalName, "."); name != "" {
			for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
				allErrs = append(allErrs, field.Invalid(specPath.Child("externalName"), name, msg))
			}
		} else {
			allErrs = append(allErrs, field.Required(specPath.Child("externalName"), ""))
		}
	}

	names := sets.New[string]()
	for i := range spec.Ports {
		allErrs = append(allErrs, validatePort(&spec.Ports[i], len(spec.Ports) > 1, names, portsPath.Index(i))...)
	}

	if spec.Selector != nil {
		allErrs = append(allErrs, metav1validation.ValidateLabels(spec.Selector, specPath.Child("selector"))...)
	}

	switch {
	case spec.SessionAffinity == "":
		allErrs = append(allErrs, field.Required(specPath.Child("sessionAffinity"), ""))
	case !supportedAffinity.Has(spec.SessionAffinity):
		allErrs = append(allErrs, field.NotSupported(specPath.Child("sessionAffinity"), spec.SessionAffinity, sets.List(supportedAffinity)))
	}
	allErrs = append(allErrs, validateSessionAffinityConfig(svc)...)

	allErrs = append(allErrs, ValidateClusterIPFields(svc, old)...)
	allErrs = append(allErrs, validateExternalIPs(svc, old)...)

	switch {
	case spec.Type == "":
		allErrs = append(allErrs, field.Required(typePath, ""))
	case !supportedTypes.Has(spec.Type):
		allErrs = append(allErrs, field.NotSupported(typePath, spec.Type, sets.List(supportedTypes)))
	}

	allErrs = append(allErrs, validateNodePortFields(svc)...)

	type portKey struct {
		protocol corev1.Protocol
		port     int32
	}
	seen := map[portKey]bool{}
	for i, p := range spec.Ports {
		k := portKey{p.Protocol, p.Port}
		if seen[k] {
			allErrs = append(allErrs, field.Duplicate(portsPath.Index(i), duplicatePortValue{p.Protocol, p.Port}))
		}
		seen[k] = true
	}

	allErrs = append(allErrs, validateSourceRanges(svc, old)...)
	allErrs = append(allErrs, validateExternalFields(svc)...)
	return allErrs
}

// duplicatePortValue is the value a Duplicate error on spec.ports[i] shows.
// kube-apiserver shows its internal key, a ServicePort with only protocol
// and port set, marshalled to JSON with Go's field names (the internal type
// has no JSON tags), as recorded in testdata/parity.
type duplicatePortValue struct {
	protocol corev1.Protocol
	port     int32
}

func (v duplicatePortValue) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"Name":"","Protocol":%q,"AppProtocol":null,"Port":%d,"TargetPort":0,"NodePort":0}`,
		string(v.protocol), v.port), nil
}

// validatePort checks one entry of spec.ports; names collects the names seen.
func validatePort(p *corev1.ServicePort, requireName bool, names sets.Set[string], path *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	switch {
	case requireName && p.Name == "":
		allErrs = append(allErrs, field.Required(path.Child("name"), ""))
	case p.Name != "":
		for _, msg := range utilvalidation.IsDNS1123Label(p.Name) {
			allErrs = append(allErrs, field.Invalid(path.Child("name"), p.Name, msg))
		}
		if names.Has(p.Name) {
			allErrs = append(allErrs, field.Duplicate(path.Child("name"), p.Name))
		} else {
			names.Insert(p.Name)
		}
	}
	for _, msg := range utilvalidation.IsValidPortNum(int(p.Port)) {
		allErrs = append(allErrs, field.Invalid(path.Child("port"), p.Port, msg))
	}
	switch {
	case p.Protocol == "":
		allErrs = append(allErrs, field.Required(path.Child("protocol"), ""))
	case !supportedProtocols.Has(p.Protocol):
		allErrs = append(allErrs, field.NotSupported(path.Child("protocol"), p.Protocol, sets.List(supportedProtocols)))
	}
	targetPath := path.Child("targetPort")
	switch p.TargetPort.Type {
	case intstr.Int:
		for _, msg := range utilvalidation.IsValidPortNum(p.TargetPort.IntValue()) {
			allErrs = append(allErrs, field.Invalid(targetPath, p.TargetPort.IntValue(), msg))
		}
	case intstr.String:
		for _, msg := range utilvalidation.IsValidPortName(p.TargetPort.StrVal) {
			allErrs = append(allErrs, field.Invalid(targetPath, p.TargetPort.StrVal, msg))
		}
	default:
		allErrs = append(allErrs, field.InternalError(targetPath, fmt.Errorf("unknown type: %v", p.TargetPort.Type)))
	}
	if p.AppProtocol != nil {
		for _, msg := range utilvalidation.IsQualifiedName(*p.AppProtocol) {
			allErrs = append(allErrs, field.Invalid(path.Child("appProtocol"), *p.AppProtocol, msg))
		}
	}
	return allErrs
}

// isHeadless reports whether svc is headless: clusterIPs is exactly ["None"].
func isHeadless(svc *corev1.Service) bool {
	return svc != nil && len(svc.Spec.ClusterIPs) == 1 && svc.Spec.ClusterIPs[0] == corev1.ClusterIPNone
}

// ValidateClusterIPFields checks clusterIP, clusterIPs, ipFamilies and
// ipFamilyPolicy against each other, without looking at the cluster's
// ranges (upstream's ValidateServiceClusterIPsRelatedFields). old is the
// stored Service of an update (its cluster IPs are accepted as they are),
// nil for a create. Once an address is malformed, the checks that compare
// addresses are skipped: they would only add confusing causes.
func ValidateClusterIPFields(svc, old *corev1.Service) field.ErrorList {
	spec := &svc.Spec
	if spec.Type == corev1.ServiceTypeExternalName {
		return nil // validateService refuses every IP field there
	}
	var allErrs field.ErrorList

	switch {
	case spec.ClusterIP != "" && len(spec.ClusterIPs) == 0:
		allErrs = append(allErrs, field.Required(clusterIPsPath, ""))
	case spec.ClusterIP != "" && spec.ClusterIPs[0] != spec.ClusterIP:
		allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "first value must match `clusterIP`"))
	case spec.ClusterIP == "" && len(spec.ClusterIPs) != 0:
		allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "must be empty when `clusterIP` is not specified"))
	}

	seen := sets.New[corev1.IPFamily]()
	for i, fam := range spec.IPFamilies {
		if !supportedFamilies.Has(fam) {
			allErrs = append(allErrs, field.NotSupported(ipFamiliesPath.Index(i), fam, sets.List(supportedFamilies)))
		}
		if seen.Has(fam) {
			allErrs = append(allErrs, field.Duplicate(ipFamiliesPath.Index(i), fam))
		}
		seen.Insert(fam)
	}

	if spec.IPFamilyPolicy != nil && !supportedPolicies.Has(*spec.IPFamilyPolicy) {
		allErrs = append(allErrs, field.NotSupported(ipFamilyPolicyPath, spec.IPFamilyPolicy, sets.List(supportedPolicies)))
	}

	var existing []string
	if old != nil {
		existing = old.Spec.ClusterIPs
	}
	invalidIPs := false
	for i, text := range spec.ClusterIPs {
		if i == 0 && text == corev1.ClusterIPNone {
			if len(spec.ClusterIPs) > 1 {
				invalidIPs = true
				allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "'None' must be the first and only value"))
			}
			continue
		}
		if errs := utilvalidation.IsValidIPForLegacyField(clusterIPsPath.Index(i), text, strictIPCIDRValidation, existing); len(errs) > 0 {
			invalidIPs = true
			allErrs = append(allErrs, errs...)
		}
	}
	if len(spec.ClusterIPs) > 2 {
		allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "may only hold up to 2 values"))
	}
	if invalidIPs {
		return allErrs
	}

	// Upstream asks only that both families appear: three values of two
	// families get the "up to 2 values" error above and nothing here.
	if len(spec.ClusterIPs) > 1 {
		fams := sets.New[corev1.IPFamily]()
		for _, text := range spec.ClusterIPs {
			fams.Insert(familyOfText(text))
		}
		if len(fams) < 2 {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath, spec.ClusterIPs, "may specify no more than one IP for each IP family"))
		}
	}

	if !isHeadless(svc) {
		for i, text := range spec.ClusterIPs {
			if i >= len(spec.IPFamilies) {
				break
			}
			want := spec.IPFamilies[i]
			if got := familyOfText(text); (want == corev1.IPv4Protocol || want == corev1.IPv6Protocol) && got != want {
				allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(i), text,
					fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", want, i)))
			}
		}
	}
	return allErrs
}

// validateClusterIPsUpdate refuses a change of a cluster IP already set: the
// secondary may be added, or released together with ipFamilyPolicy
// SingleStack; nothing else may change unless the Service becomes or stops
// being ExternalName, or is headless before and after.
func validateClusterIPsUpdate(svc, old *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isHeadless(old) && isHeadless(svc) {
		return nil
	}
	newIPs, oldIPs := svc.Spec.ClusterIPs, old.Spec.ClusterIPs
	var allErrs field.ErrorList
	switch {
	case len(oldIPs) == len(newIPs):
		for i := range oldIPs {
			if oldIPs[i] != newIPs[i] {
				allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(i), newIPs, "may not change once set"))
			}
		}
	case len(oldIPs) > len(newIPs):
		if len(newIPs) == 0 {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(0), newIPs, "primary clusterIP can not be unset"))
		}
		if len(oldIPs) > 0 && len(newIPs) > 0 && newIPs[0] != oldIPs[0] {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(0), newIPs, "may not change once set"))
		}
		if len(newIPs) == 1 && !isSingleStack(svc) {
			allErrs = append(allErrs, field.Invalid(ipFamilyPolicyPath, svc.Spec.IPFamilyPolicy,
				"must be set to 'SingleStack' when releasing the secondary clusterIP"))
		}
	default:
		if len(oldIPs) > 0 && newIPs[0] != oldIPs[0] {
			allErrs = append(allErrs, field.Invalid(clusterIPsPath.Index(0), newIPs, "may not change once set"))
		}
	}
	return allErrs
}

// validateIPFamiliesUpdate is validateClusterIPsUpdate for ipFamilies; a
// headless Service may change its families.
func validateIPFamiliesUpdate(svc, old *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	if isHeadless(svc) || isHeadless(old) {
		return nil
	}
	newFams, oldFams := svc.Spec.IPFamilies, old.Spec.IPFamilies
	first := ipFamiliesPath.Index(0)
	var allErrs field.ErrorList
	switch {
	case len(oldFams) == len(newFams):
		for i := range oldFams {
			if oldFams[i] != newFams[i] {
				// Upstream names index 0 whichever entry changed.
				allErrs = append(allErrs, field.Invalid(first, newFams, "may not change once set"))
			}
		}
	case len(oldFams) > len(newFams):
		if len(svc.Spec.ClusterIPs) == 0 {
			allErrs = append(allErrs, field.Invalid(first, newFams, "primary ipFamily can not be unset"))
		}
		if len(newFams) > 0 && newFams[0] != oldFams[0] {
			allErrs = append(allErrs, field.Invalid(first, svc.Spec.ClusterIPs, "may not change once set"))
		}
		if len(newFams) == 1 && !isSingleStack(svc) {
			allErrs = append(allErrs, field.Invalid(ipFamilyPolicyPath, svc.Spec.IPFamilyPolicy,
				"must be set to 'SingleStack' when releasing the secondary ipFamily"))
		}
	default:
		if len(oldFams) > 0 && len(newFams) > 0 && newFams[0] != oldFams[0] {
			allErrs = append(allErrs, field.Invalid(first, svc.Spec.ClusterIPs, "may not change once set"))
		}
	}
	return allErrs
}

func isSingleStack(svc *corev1.Service) bool {
	return svc.Spec.IPFamilyPolicy != nil && *svc.Spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack
}

// familyOfText is the family of an address that passed
// IsValidIPForLegacyField (which accepts upper-case IPv6): IPv6 when it has
// a colon.
func familyOfText(text string) corev1.IPFamily {
	if strings.Contains(text, ":") {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}
