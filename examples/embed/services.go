package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/allocator/allocator/pkg/servicealloc"
)

// This file is the Service part an embedding server writes itself: the
// scheme, the decode-time defaults, the strategy and the store. Everything
// about cluster IPs comes from pkg/servicealloc.

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

// serviceStrategy is the create, update and delete behaviour of Services.
// Validation is servicealloc's, with upstream's messages; the checks that
// need the cluster's ranges run later, in servicealloc's store hooks.
type serviceStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

func (serviceStrategy) NamespaceScoped() bool { return true }

// PrepareForCreate and PrepareForUpdate keep status out of spec writes.
func (serviceStrategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*corev1.Service).Status = corev1.ServiceStatus{}
}

func (serviceStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.Service).Status = old.(*corev1.Service).Status
}

func (serviceStrategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return servicealloc.ValidateService(obj.(*corev1.Service))
}

func (serviceStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return servicealloc.ValidateServiceUpdate(obj.(*corev1.Service), old.(*corev1.Service))
}

func (serviceStrategy) WarningsOnCreate(_ context.Context, obj runtime.Object) []string {
	return servicealloc.WarningsForService(obj.(*corev1.Service), nil)
}

func (serviceStrategy) WarningsOnUpdate(_ context.Context, obj, old runtime.Object) []string {
	return servicealloc.WarningsForService(obj.(*corev1.Service), old.(*corev1.Service))
}

func (serviceStrategy) Canonicalize(runtime.Object)                   {}
func (serviceStrategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (serviceStrategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// newServiceStorage returns the storage to serve as "services": a generic
// registry store of *corev1.Service whose writes reserve and release cluster
// IPs through alloc.
func newServiceStorage(scheme *runtime.Scheme, getter generic.RESTOptionsGetter, alloc *servicealloc.Allocator) (rest.Storage, error) {
	strategy := serviceStrategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Service{} },
		NewListFunc:               func() runtime.Object { return &corev1.ServiceList{} },
		DefaultQualifiedResource:  corev1.Resource("services"),
		SingularQualifiedResource: corev1.Resource("service"),
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
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
