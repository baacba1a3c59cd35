package main

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/allocator/allocator/pkg/servicealloc"
)

// This file is the Service part an embedding server writes itself: the
// scheme, the decode-time defaults and the store. The strategy and
// everything about cluster IPs come from pkg/servicealloc.

// newSchemes returns the scheme the server serves from and a second one,
// with the external version only, for naming OpenAPI definitions.
//
// corev1.Service is registered as v1 and as the internal version: the
// generic server converts every request to the internal version, and with
// the same Go type on both sides that conversion is the identity, so no
// internal types have to be written. The OpenAPI namer gets the versioned
// scheme, or "__internal" kinds appear in the published definitions.
func newSchemes() (served, openAPI *runtime.Scheme, err error) {
	served = runtime.NewScheme()
	if err := corev1.AddToScheme(served); err != nil {
		return nil, nil, err
	}
	served.AddKnownTypes(schema.GroupVersion{Version: runtime.APIVersionInternal}, &corev1.Service{}, &corev1.ServiceList{})
	// The decode-time defaults upstream gives a v1 Service (servicealloc
	// has them; upstream's live in k8s.io/kubernetes).
	served.AddTypeDefaultingFunc(&corev1.Service{}, func(obj any) { servicealloc.DefaultService(obj.(*corev1.Service)) })
	// The generic server needs the option and status types in an
	// unversioned v1.
	metav1.AddToGroupVersion(served, schema.GroupVersion{Version: "v1"})
	served.AddUnversionedTypes(schema.GroupVersion{Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})

	openAPI = runtime.NewScheme()
	if err := corev1.AddToScheme(openAPI); err != nil {
		return nil, nil, err
	}
	metav1.AddToGroupVersion(openAPI, schema.GroupVersion{Version: "v1"})
	return served, openAPI, nil
}

// newServiceStorage returns the storage to serve as "services": a generic
// registry store of *corev1.Service whose writes reserve and release cluster
// IPs through alloc.
func newServiceStorage(scheme *runtime.Scheme, getter generic.RESTOptionsGetter, alloc *servicealloc.Allocator) (rest.Storage, error) {
	// Validation is servicealloc's, with upstream's messages; the checks
	// that need the cluster's ranges run later, in its store hooks.
	strategy, _ := servicealloc.NewStrategies(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Service{} },
		NewListFunc:               func() runtime.Object { return &corev1.ServiceList{} },
		DefaultQualifiedResource:  corev1.Resource("services"),
		SingularQualifiedResource: corev1.Resource("service"),
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		ResetFieldsStrategy:       strategy,
		TableConvertor:            rest.NewDefaultTableConvertor(corev1.Resource("services")),
	}
	// TrackDeletes lets servicealloc release a deleted Service's addresses
	// exactly once; NewREST refuses a store completed without it.
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: servicealloc.TrackDeletes(getter)}); err != nil {
		return nil, fmt.Errorf("complete the services store: %w", err)
	}
	// Serve the returned REST, not store: its Create and Update do what the
	// store's hooks cannot do alone.
	storage, err := servicealloc.NewREST(store, alloc, nil)
	if err != nil {
		return nil, err
	}
	return storage, nil
}
