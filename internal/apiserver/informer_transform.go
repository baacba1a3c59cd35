package apiserver

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/allocator/allocator/internal/slim"
)

// informerTransform is the transform of the server's informer factory
// (sharedInformers): what its caches keep of each object. A Service becomes
// its slim copy (slim.Service); every other object keeps all its fields but
// managedFields, which none of their readers reads (slim.IPAddress: an
// IPAddress keeps the rest, its labels shared).
func informerTransform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		return slim.Service(o), nil
	case *networkingv1.IPAddress:
		return slim.IPAddress(o), nil
	}
	return stripManagedFields(obj)
}

// stripManagedFields drops an object's managedFields before an informer
// stores it.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
