// Package services is the storage of core/v1 Services as this server serves
// them: field selectors, the kubectl table, the namespace check and the REST
// storage. The strategies and cluster IP allocation are pkg/servicealloc's,
// shared with every embedder.
package services

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
)

// GetAttrs returns the labels and the selectable fields of a Service:
// metadata.name, metadata.namespace, spec.clusterIP and spec.type.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil, fmt.Errorf("not a Service: %T", obj)
	}
	fs := generic.ObjectMetaFieldsSet(&svc.ObjectMeta, true)
	fs["spec.clusterIP"] = svc.Spec.ClusterIP
	fs["spec.type"] = string(svc.Spec.Type)
	return svc.Labels, fs, nil
}
