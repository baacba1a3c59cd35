package servicealloc

import corev1 "k8s.io/api/core/v1"

// dropExternalFields clears, on an update that changes the type, the fields
// of the external exposure the new type cannot have, when the client left
// them as they were (upstream's dropTypeDependentFields for these fields):
// a `kubectl patch -p '{"spec":{"type":"ClusterIP"}}'` of a LoadBalancer
// must not be refused because of its loadBalancerClass or traffic policy.
// A value the client changed is kept, and validation reports it.
func dropExternalFields(svc, old *corev1.Service) {
	if old.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		if svc.Spec.AllocateLoadBalancerNodePorts != nil && old.Spec.AllocateLoadBalancerNodePorts != nil &&
			*svc.Spec.AllocateLoadBalancerNodePorts == *old.Spec.AllocateLoadBalancerNodePorts {
			svc.Spec.AllocateLoadBalancerNodePorts = nil
		}
		if ptrEqual(svc.Spec.LoadBalancerClass, old.Spec.LoadBalancerClass) {
			svc.Spec.LoadBalancerClass = nil
		}
	}
	if externallyAccessible(old) && !externallyAccessible(svc) && svc.Spec.ExternalTrafficPolicy == old.Spec.ExternalTrafficPolicy {
		svc.Spec.ExternalTrafficPolicy = ""
	}
}

// DropLoadBalancerStatus clears status.loadBalancer of a Service that is no
// longer of type LoadBalancer, as upstream does on a spec update: the load
// balancer is being torn down, and its addresses must not stay published.
func DropLoadBalancerStatus(svc *corev1.Service) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	}
}
