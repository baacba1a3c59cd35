package servicealloc

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/allocator/allocator/internal/holding"
)

// The functions in this file fill in and clear the linked fields of a
// Service the way kube-apiserver's Service registry does, in the same order
// (design.md §7): on a create normalizeClusterIPs, then initIPFamilies; on
// an update patchAllocatedValues, normalizeClusterIPs, initIPFamilies, then
// dropTypeDependentFields. A client that works against kube-apiserver (Helm
// re-applying a manifest without its allocated values, a cloud controller
// toggling allocateLoadBalancerNodePorts) must see the same result here.

// needsIPFields reports whether svc's type has the IP fields (clusterIP,
// clusterIPs, ipFamilies, ipFamilyPolicy): every type but ExternalName.
// Unlike NeedsClusterIP, headless counts: "None" is a value.
func needsIPFields(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName
}

// normalizeClusterIPs keeps spec.clusterIP and spec.clusterIPs in step: old
// clients set only the singular field, new ones must set both.
func normalizeClusterIPs(svc, old *corev1.Service) {
	spec := &svc.Spec
	if old == nil {
		if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
			spec.ClusterIPs = []string{spec.ClusterIP}
		}
		return
	}
	// An old client that patched something else left clusterIPs out.
	if len(old.Spec.ClusterIPs) > 0 && len(spec.ClusterIPs) == 0 && old.Spec.ClusterIP == spec.ClusterIP {
		spec.ClusterIPs = slices.Clone(old.Spec.ClusterIPs)
	}
	if old.Spec.ClusterIP == spec.ClusterIP {
		return
	}
	// The singular field changed. When the plural did not, the client only
	// knows the singular one: follow it (clearing it clears both).
	if !slices.Equal(old.Spec.ClusterIPs, spec.ClusterIPs) {
		return
	}
	if old.Spec.ClusterIP != "" && spec.ClusterIP == "" {
		spec.ClusterIPs = nil
	} else {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
}

// patchAllocatedValues keeps what was allocated when an update (kubectl
// replace or apply of a manifest without those fields) leaves it out: the
// cluster IPs (including "None"), the nodePorts by port name unless the
// update gave that nodePort to another port, and the healthCheckNodePort.
// NodePorts are kept only where the updated Service still allocates them:
// a LoadBalancer updated to allocateLoadBalancerNodePorts false with
// nodePort 0 drops its ports.
func patchAllocatedValues(svc, old *corev1.Service) {
	if needsIPFields(old) && needsIPFields(svc) {
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = old.Spec.ClusterIP
		}
		if len(svc.Spec.ClusterIPs) == 0 && len(old.Spec.ClusterIPs) > 0 {
			svc.Spec.ClusterIPs = slices.Clone(old.Spec.ClusterIPs)
		}
	}
	if shouldAllocateNodePorts(old) && shouldAllocateNodePorts(svc) {
		used := func(s *corev1.Service) sets.Set[int32] {
			out := sets.New[int32]()
			for _, p := range s.Spec.Ports {
				if p.NodePort != 0 {
					out.Insert(p.NodePort)
				}
			}
			return out
		}
		inBoth := used(old).Intersection(used(svc))
		byName := map[string]int32{}
		for _, p := range old.Spec.Ports {
			byName[p.Name] = p.NodePort
		}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort == 0 && !inBoth.Has(byName[p.Name]) {
				p.NodePort = byName[p.Name]
			}
		}
	}
	if holding.NeedsHealthCheckNodePort(old) && holding.NeedsHealthCheckNodePort(svc) && svc.Spec.HealthCheckNodePort == 0 {
		svc.Spec.HealthCheckNodePort = old.Spec.HealthCheckNodePort
	}
}

// dropTypeDependentFields clears, on an update that changes the type, the
// fields the new type cannot have, when the client left them as they were
// (a value the client changed is kept, and validation reports it): the IP
// fields off ExternalName, nodePorts off NodePort/LoadBalancer (unless the
// update adds one), healthCheckNodePort, allocateLoadBalancerNodePorts and
// loadBalancerClass off LoadBalancer, externalTrafficPolicy off the
// externally accessible types. A `kubectl patch -p '{"spec":{"type":...}}'`
// must not be refused for a field only the old type had.
func dropTypeDependentFields(svc, old *corev1.Service) {
	spec, oldSpec := &svc.Spec, &old.Spec
	if needsIPFields(old) && !needsIPFields(svc) {
		if spec.ClusterIP == oldSpec.ClusterIP && slices.Equal(spec.ClusterIPs, oldSpec.ClusterIPs) {
			spec.ClusterIP = ""
			spec.ClusterIPs = nil
		}
		if slices.Equal(spec.IPFamilies, oldSpec.IPFamilies) {
			spec.IPFamilies = nil
		}
		if ptrEqual(spec.IPFamilyPolicy, oldSpec.IPFamilyPolicy) {
			spec.IPFamilyPolicy = nil
		}
	}
	if needsNodePorts(old) && !needsNodePorts(svc) && addsNoNodePort(svc, old) {
		for i := range spec.Ports {
			spec.Ports[i].NodePort = 0
		}
	}
	if holding.NeedsHealthCheckNodePort(old) && !holding.NeedsHealthCheckNodePort(svc) && spec.HealthCheckNodePort == oldSpec.HealthCheckNodePort {
		spec.HealthCheckNodePort = 0
	}
	if oldSpec.Type == corev1.ServiceTypeLoadBalancer && spec.Type != corev1.ServiceTypeLoadBalancer {
		if spec.AllocateLoadBalancerNodePorts != nil && oldSpec.AllocateLoadBalancerNodePorts != nil &&
			*spec.AllocateLoadBalancerNodePorts == *oldSpec.AllocateLoadBalancerNodePorts {
			spec.AllocateLoadBalancerNodePorts = nil
		}
		if ptrEqual(spec.LoadBalancerClass, oldSpec.LoadBalancerClass) {
			spec.LoadBalancerClass = nil
		}
	}
	if externallyAccessible(old) && !externallyAccessible(svc) && spec.ExternalTrafficPolicy == oldSpec.ExternalTrafficPolicy {
		spec.ExternalTrafficPolicy = ""
	}
}

// addsNoNodePort reports whether every nodePort of svc was one of old's:
// ports may be added, removed or changed, as long as no new nodePort
// appears.
func addsNoNodePort(svc, old *corev1.Service) bool {
	oldPorts := sets.New[int32]()
	for _, p := range old.Spec.Ports {
		if p.NodePort != 0 {
			oldPorts.Insert(p.NodePort)
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 && !oldPorts.Has(p.NodePort) {
			return false
		}
	}
	return true
}

// DropLoadBalancerStatus clears status.loadBalancer of a Service that is no
// longer of type LoadBalancer, as upstream does on a spec update: the load
// balancer is being torn down, and its addresses must not stay published.
func DropLoadBalancerStatus(svc *corev1.Service) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	}
}

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// initIPFamilies fills ipFamilyPolicy and ipFamilies from the request, the
// old object and the cluster's families, and refuses the combinations the
// cluster cannot serve (upstream's initIPFamilyFields; its causes come
// before those of validation). It runs a loose validation of the IP fields
// first, so what follows can trust their shape.
func (a *Allocator) initIPFamilies(svc, old *corev1.Service) field.ErrorList {
	spec := &svc.Spec
	if spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	// A PreferDualStack Service is not moved to or from dual-stack by a
	// change of the cluster's families: only an update that asks for it.
	if unchangedPreferDualStack(svc, old) {
		return nil
	}
	defaultIPFamilyPolicy(spec, old)
	if errs := ValidateClusterIPFields(svc, old); len(errs) > 0 {
		return errs
	}
	policy := *spec.IPFamilyPolicy

	errs := checkIPFamilyPolicy(spec, old, policy)
	errs = append(errs, a.addClusterIPFamilies(spec)...)
	if len(errs) > 0 {
		return errs
	}

	if spec.ClusterIP == corev1.ClusterIPNone && len(spec.Selector) == 0 {
		// Headless and selectorless: any policy and families are accepted,
		// even two families on a single-stack cluster.
		if len(spec.IPFamilies) == 0 {
			spec.IPFamilies = []corev1.IPFamily{a.families[0]}
		}
		if len(spec.IPFamilies) < 2 && policy != corev1.IPFamilyPolicySingleStack {
			spec.IPFamilies = append(spec.IPFamilies, otherFamily(spec.IPFamilies[0]))
		}
		return nil
	}

	if policy == corev1.IPFamilyPolicyRequireDualStack && !a.DualStack() {
		errs = append(errs, field.Invalid(ipFamilyPolicyPath, spec.IPFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, fam := range spec.IPFamilies {
		if _, ok := a.byFamily[fam]; !ok {
			errs = append(errs, field.Invalid(ipFamiliesPath.Index(i), fam, "not configured on this cluster"))
		}
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

// defaultIPFamilyPolicy sets an unset ipFamilyPolicy: the old object's,
// RequireDualStack for a headless Service without selector, else
// SingleStack.
func defaultIPFamilyPolicy(spec *corev1.ServiceSpec, old *corev1.Service) {
	if spec.IPFamilyPolicy == nil {
		var policy corev1.IPFamilyPolicy
		switch {
		case old != nil && old.Spec.IPFamilyPolicy != nil:
			policy = *old.Spec.IPFamilyPolicy
		case spec.ClusterIP == corev1.ClusterIPNone && len(spec.Selector) == 0:
			// Headless without selector: its endpoints are the user's, of
			// any family.
			policy = corev1.IPFamilyPolicyRequireDualStack
		default:
			policy = corev1.IPFamilyPolicySingleStack
		}
		spec.IPFamilyPolicy = &policy
	}
}

// checkIPFamilyPolicy refuses addresses and families that policy does not
// allow, given what old had; on an update to SingleStack that keeps them as
// they were, it drops the secondary address and family.
func checkIPFamilyPolicy(spec *corev1.ServiceSpec, old *corev1.Service, policy corev1.IPFamilyPolicy) field.ErrorList {
	var errs field.ErrorList
	if old != nil {
		if policy == corev1.IPFamilyPolicySingleStack {
			// Setting SingleStack with the addresses and families as they
			// were is the intent to release the secondary.
			if slices.Equal(spec.ClusterIPs, old.Spec.ClusterIPs) && len(spec.ClusterIPs) > 1 {
				spec.ClusterIPs = spec.ClusterIPs[:1]
			}
			if slices.Equal(spec.IPFamilies, old.Spec.IPFamilies) && len(spec.IPFamilies) > 1 {
				spec.IPFamilies = spec.IPFamilies[:1]
			}
		} else {
			if len(spec.ClusterIPs) > 0 && len(spec.ClusterIPs) < len(old.Spec.ClusterIPs) {
				errs = append(errs, field.Invalid(ipFamilyPolicyPath, spec.IPFamilyPolicy, "must be 'SingleStack' to release the secondary cluster IP"))
			}
			if len(spec.IPFamilies) > 0 && len(spec.IPFamilies) < len(old.Spec.IPFamilies) {
				errs = append(errs, field.Invalid(ipFamilyPolicyPath, spec.IPFamilyPolicy, "must be 'SingleStack' to release the secondary IP family"))
			}
		}
	}
	if policy == corev1.IPFamilyPolicySingleStack {
		if len(spec.ClusterIPs) == 2 {
			errs = append(errs, field.Invalid(ipFamilyPolicyPath, spec.IPFamilyPolicy,
				"must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
		}
		if len(spec.IPFamilies) == 2 {
			errs = append(errs, field.Invalid(ipFamilyPolicyPath, spec.IPFamilyPolicy,
				"must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
		}
	}
	return errs
}

// addClusterIPFamilies appends to ipFamilies the family of each requested
// address beyond those given, and refuses a family the cluster does not
// serve. The addresses were validated: a family given for an index was
// checked against its address there.
func (a *Allocator) addClusterIPFamilies(spec *corev1.ServiceSpec) field.ErrorList {
	var errs field.ErrorList
	for i, text := range spec.ClusterIPs {
		if text == corev1.ClusterIPNone {
			break
		}
		if i < len(spec.IPFamilies) {
			continue
		}
		fam := familyOfText(text)
		if _, ok := a.byFamily[fam]; !ok {
			errs = append(errs, field.Invalid(clusterIPsPath.Index(i), spec.ClusterIPs, fmt.Sprintf("%s is not configured on this cluster", fam)))
			continue
		}
		spec.IPFamilies = append(spec.IPFamilies, fam)
	}
	return errs
}

// unchangedPreferDualStack reports whether an update keeps a
// PreferDualStack Service's type, policy, addresses and families as they
// were: then nothing about its families is to be decided again.
func unchangedPreferDualStack(svc, old *corev1.Service) bool {
	if old == nil || svc.Spec.IPFamilyPolicy == nil || old.Spec.Type != svc.Spec.Type {
		return false
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return false
	}
	prefer := corev1.IPFamilyPolicyPreferDualStack
	return *svc.Spec.IPFamilyPolicy == prefer &&
		(old.Spec.IPFamilyPolicy == nil || *old.Spec.IPFamilyPolicy == prefer) &&
		slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) &&
		slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies)
}

func otherFamily(fam corev1.IPFamily) corev1.IPFamily {
	if fam == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// DefaultOnRead fills in, on every Service the storage returns (a get, a
// list, a watch event, the answer to a write), what Services stored by older
// releases may lack, and hides what was stored by mistake, as kube-apiserver
// does on read: clusterIPs from clusterIP, ipFamilies and ipFamilyPolicy
// from the addresses (a headless Service without selector gets both
// families and RequireDualStack, with a selector the cluster's primary
// family), and no internalTrafficPolicy on an ExternalName Service (older
// releases defaulted it there). It is the store's Decorator; other objects
// are left alone.
func (a *Allocator) DefaultOnRead(obj runtime.Object) {
	switch o := obj.(type) {
	case *corev1.Service:
		a.defaultServiceOnRead(o)
	case *corev1.ServiceList:
		for i := range o.Items {
			a.defaultServiceOnRead(&o.Items[i])
		}
	}
}

func (a *Allocator) defaultServiceOnRead(svc *corev1.Service) {
	if svc == nil {
		return
	}
	normalizeClusterIPs(svc, nil)
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.InternalTrafficPolicy = nil
		return
	}
	if len(svc.Spec.IPFamilies) > 0 {
		return // written with the families, and so with the policy
	}
	single, require := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyRequireDualStack
	switch {
	case svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0:
		svc.Spec.IPFamilyPolicy = &require
		svc.Spec.IPFamilies = []corev1.IPFamily{a.families[0], otherFamily(a.families[0])}
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		svc.Spec.IPFamilyPolicy = &single
		svc.Spec.IPFamilies = []corev1.IPFamily{a.families[0]}
	default:
		for _, text := range svc.Spec.ClusterIPs {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, familyOfText(text))
		}
		switch len(svc.Spec.IPFamilies) {
		case 1:
			svc.Spec.IPFamilyPolicy = &single
		case 2:
			svc.Spec.IPFamilyPolicy = &require
		}
	}
}
