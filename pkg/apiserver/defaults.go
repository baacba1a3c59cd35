package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/pkg/servicealloc"
)

// addDefaultingFuncs registers the decode-time defaults upstream applies to
// the types we serve (k8s.io/kubernetes pkg/apis/core/v1/defaults.go). The
// IP-family defaults depend on the cluster's ranges, so they are not here:
// pkg/servicealloc applies them when a Service is created or updated.
func addDefaultingFuncs(s *runtime.Scheme) error {
	s.AddTypeDefaultingFunc(&corev1.Service{}, func(obj interface{}) { defaultService(obj.(*corev1.Service)) })
	s.AddTypeDefaultingFunc(&corev1.ServiceList{}, func(obj interface{}) {
		list := obj.(*corev1.ServiceList)
		for i := range list.Items {
			defaultService(&list.Items[i])
		}
	})
	s.AddTypeDefaultingFunc(&corev1.Namespace{}, func(obj interface{}) { defaultNamespace(obj.(*corev1.Namespace)) })
	return nil
}

func defaultService(svc *corev1.Service) {
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
	servicealloc.DefaultLoadBalancerIPMode(svc)
}

func defaultNamespace(ns *corev1.Namespace) {
	if ns.Name != "" {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
	if ns.Status.Phase == "" {
		ns.Status.Phase = corev1.NamespaceActive
	}
}

// addFieldLabelConversions declares the field selectors each kind accepts, as
// upstream does. The registries' AttrFuncs produce the same field names.
func addFieldLabelConversions(s *runtime.Scheme) error {
	allowed := map[string][]string{
		"Service":   {"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"},
		"Namespace": {"metadata.name", "status.phase"},
		"Event": {"metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
			"involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
			"involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
			"source", "type"},
	}
	for kind, fields := range allowed {
		set := map[string]bool{}
		for _, f := range fields {
			set[f] = true
		}
		err := s.AddFieldLabelConversionFunc(corev1.SchemeGroupVersion.WithKind(kind), func(label, value string) (string, string, error) {
			if !set[label] {
				return "", "", fmt.Errorf("field label not supported: %s", label)
			}
			return label, value, nil
		})
		if err != nil {
			return fmt.Errorf("register field labels for %s: %w", kind, err)
		}
	}
	return nil
}
