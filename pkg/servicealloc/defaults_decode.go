package servicealloc

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DefaultService applies the decode-time defaults upstream gives a v1
// Service (k8s.io/kubernetes pkg/apis/core/v1 SetDefaults_Service, which a
// module cannot import): type, session affinity and its timeout, a port's
// protocol and targetPort, the traffic policies, allocateLoadBalancerNodePorts
// and the ingress ipMode. Register it on your scheme
// (scheme.AddTypeDefaultingFunc) so every decoded Service gets it. The
// IP-family fields are not defaulted here: they depend on the cluster's
// ranges, and the Allocator sets them on create and update.
func DefaultService(svc *corev1.Service) {
	if svc.Spec.SessionAffinity == "" {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityNone {
		svc.Spec.SessionAffinityConfig = nil
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		if svc.Spec.SessionAffinityConfig == nil {
			svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}
		if svc.Spec.SessionAffinityConfig.ClientIP == nil {
			svc.Spec.SessionAffinityConfig.ClientIP = &corev1.ClientIPConfig{}
		}
		if svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			timeout := corev1.DefaultClientIPServiceAffinitySeconds
			svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = &timeout
		}
	}
	if svc.Spec.Type == "" {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	for i := range svc.Spec.Ports {
		port := &svc.Spec.Ports[i]
		if port.Protocol == "" {
			port.Protocol = corev1.ProtocolTCP
		}
		if port.TargetPort == intstr.FromInt32(0) || port.TargetPort == intstr.FromString("") {
			port.TargetPort = intstr.FromInt32(port.Port)
		}
	}
	// Every externally-accessible Service, including a ClusterIP one with
	// externalIPs, gets the policy (validation allows it only on those).
	externallyAccessible := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer ||
		(svc.Spec.Type == corev1.ServiceTypeClusterIP && len(svc.Spec.ExternalIPs) > 0)
	if externallyAccessible && svc.Spec.ExternalTrafficPolicy == "" {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if svc.Spec.InternalTrafficPolicy == nil && (svc.Spec.Type == corev1.ServiceTypeClusterIP ||
		svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) {
		cluster := corev1.ServiceInternalTrafficPolicyCluster
		svc.Spec.InternalTrafficPolicy = &cluster
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.AllocateLoadBalancerNodePorts == nil {
		allocate := true
		svc.Spec.AllocateLoadBalancerNodePorts = &allocate
	}
	DefaultLoadBalancerIPMode(svc)
}
