package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/allocator/allocator/pkg/servicealloc"
)

// addDefaultingFuncs registers the decode-time defaults upstream applies to
// the types we serve (k8s.io/kubernetes pkg/apis/core/v1/defaults.go). The
// IP-family defaults depend on the cluster's ranges, so they are not here:
// pkg/servicealloc applies them when a Service is created or updated.
func addDefaultingFuncs(s *runtime.Scheme) error {
	s.AddTypeDefaultingFunc(&corev1.Service{}, func(obj interface{}) { servicealloc.DefaultService(obj.(*corev1.Service)) })
	s.AddTypeDefaultingFunc(&corev1.ServiceList{}, func(obj interface{}) {
		list := obj.(*corev1.ServiceList)
		for i := range list.Items {
			servicealloc.DefaultService(&list.Items[i])
		}
	})
	s.AddTypeDefaultingFunc(&corev1.Namespace{}, func(obj interface{}) { defaultNamespace(obj.(*corev1.Namespace)) })
	return nil
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
