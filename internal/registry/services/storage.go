package services

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/allocator/allocator/internal/rawlist"
	statusrest "github.com/allocator/allocator/internal/registry/status"
	"github.com/allocator/allocator/pkg/servicealloc"
)

// NamespaceCheck returns an API error when new objects may not be created in
// namespace (it does not exist, or is being deleted).
type NamespaceCheck func(ctx context.Context, namespace string) error

// StaticHint returns a warning for a user-chosen ClusterIP that the
// allocators refuse with kube-apiserver's text, which does not say why (its
// ServiceCIDR is being deleted), or "".
type StaticHint func(ip netip.Addr) string

// REST is the Service storage served as "services".
type REST struct {
	*servicealloc.REST
	namespaceCheck NamespaceCheck
	hint           StaticHint
}

// NewREST builds the Service storages. alloc reserves and releases cluster
// IPs; check refuses Services in namespaces that do not exist; fencer
// fences the writes of optsGetter's storage (servicealloc.Fencer); hint,
// if not nil, warns of the ClusterIPs a write asks for (hints.go).
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, alloc *servicealloc.Allocator, check NamespaceCheck,
	fencer servicealloc.Fencer, hint StaticHint) (*REST, *statusrest.REST, error) {
	main, status := servicealloc.NewStrategies(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Service{} },
		NewListFunc:               func() runtime.Object { return &corev1.ServiceList{} },
		PredicateFunc:             nil,
		DefaultQualifiedResource:  corev1.Resource("services"),
		SingularQualifiedResource: corev1.Resource("service"),
		// kube-apiserver answers a Service DELETE with the deleted object.
		ReturnDeletedObject: true,
		CreateStrategy:      main,
		UpdateStrategy:      main,
		DeleteStrategy:      main,
		ResetFieldsStrategy: main,
		TableConvertor:      tableConvertor,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: servicealloc.TrackDeletes(optsGetter), AttrFunc: GetAttrs}); err != nil {
		return nil, nil, fmt.Errorf("complete services store: %w", err)
	}
	statusStore := *store
	statusStore.UpdateStrategy = status
	statusStore.ResetFieldsStrategy = status
	rest, err := servicealloc.NewREST(store, alloc, fencer)
	if err != nil {
		return nil, nil, err
	}
	// A status update that removes a deleting Service's last finalizer
	// deletes it too: it must release (exactly once) like any other delete.
	statusStore.AfterDelete = store.AfterDelete
	return &REST{REST: rest, namespaceCheck: check, hint: hint}, statusrest.NewREST(&statusStore), nil
}

// Create refuses Services in namespaces that do not exist before anything
// is reserved.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if ns, ok := request.NamespaceFrom(ctx); ok {
		if err := r.namespaceCheck(ctx, ns); err != nil {
			return nil, err
		}
	}
	if svc, ok := obj.(*corev1.Service); ok {
		r.warnRequested(ctx, svc, nil)
	}
	return r.REST.Create(ctx, obj, createValidation, options)
}

// Update checks the namespace when the update creates the Service (PUT or
// server-side apply of a new object).
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	checked := func(ctx context.Context, obj runtime.Object) error {
		if ns, ok := request.NamespaceFrom(ctx); ok {
			if err := r.namespaceCheck(ctx, ns); err != nil {
				return err
			}
		}
		if createValidation != nil {
			return createValidation(ctx, obj)
		}
		return nil
	}
	if r.hint != nil {
		objInfo = hintedInfo{UpdatedObjectInfo: objInfo, r: r}
	}
	return r.REST.Update(ctx, name, objInfo, checked, updateValidation, forceAllowCreate, options)
}

// List serves a list from the stored bytes when the client reads plain
// protobuf (internal/rawlist), else as the store does.
func (r *REST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if out, handled, err := rawlist.Serve(ctx, r.Store, opts, corev1.SchemeGroupVersion.WithKind("ServiceList")); handled {
		return out, err
	}
	return r.Store.List(ctx, opts)
}

// ShortNames implements rest.ShortNamesProvider (kubectl get svc).
func (r *REST) ShortNames() []string { return []string{"svc"} }

// Categories implements rest.CategoriesProvider (kubectl get all).
func (r *REST) Categories() []string { return []string{"all"} }

var (
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)
