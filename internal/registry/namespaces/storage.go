package namespaces

import (
	"context"
	"fmt"
	"github.com/allocator/allocator/internal/registry/table"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
)

// REST is the Namespace storage served as "namespaces".
type REST struct {
	*genericregistry.Store
	deleteContents func(ctx context.Context, namespace string) error
}

// OnDelete sets what deletes a namespace's contents once the namespace is
// gone (this server has no namespace controller). Call it before serving.
func (r *REST) OnDelete(fn func(ctx context.Context, namespace string) error) { r.deleteContents = fn }

// NewREST builds the Namespace storage.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Namespace{} },
		NewListFunc:               func() runtime.Object { return &corev1.NamespaceList{} },
		DefaultQualifiedResource:  corev1.Resource("namespaces"),
		SingularQualifiedResource: corev1.Resource("namespace"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor: table.Convertor[*corev1.Namespace]{Kind: "Namespace", Columns: columns, Cells: func(ns *corev1.Namespace) []any {
			return []any{ns.Name, string(ns.Status.Phase), table.Age(ns.CreationTimestamp)}
		}},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("complete namespaces store: %w", err)
	}
	return &REST{Store: store}, nil
}

// immortal are the namespaces a control plane needs; as upstream, they may
// not be deleted.
var immortal = map[string]bool{metav1.NamespaceDefault: true, metav1.NamespaceSystem: true, metav1.NamespacePublic: true}

// Delete refuses to delete default, kube-system and kube-public.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	if immortal[name] {
		return nil, false, apierrors.NewForbidden(corev1.Resource("namespaces"), name, fmt.Errorf("this namespace may not be deleted"))
	}
	out, deleted, err := r.Store.Delete(ctx, name, deleteValidation, options)
	if err != nil || !deleted || r.deleteContents == nil || (options != nil && len(options.DryRun) > 0) {
		return out, deleted, err
	}
	// The namespace is gone, so nothing new can be created in it; now
	// delete what is left (Services release their IPs on the way).
	if err := r.deleteContents(ctx, name); err != nil {
		return nil, false, apierrors.NewInternalError(fmt.Errorf("namespace %s deleted, but deleting its contents failed: %w", name, err))
	}
	return out, deleted, nil
}

// ShortNames implements rest.ShortNamesProvider (kubectl get ns).
func (r *REST) ShortNames() []string { return []string{"ns"} }

// Check returns nil when new objects may be created in namespace: 404 when
// it does not exist, 403 when it is being deleted (upstream's
// NamespaceLifecycle texts). It reads the watch cache first and confirms a
// miss from etcd, so a namespace created a moment ago is found.
func (r *REST) Check(ctx context.Context, namespace string) error {
	obj, err := r.Store.Get(ctx, namespace, &metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		obj, err = r.Store.Get(ctx, namespace, &metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return apierrors.NewNotFound(corev1.Resource("namespaces"), namespace)
	}
	if err != nil {
		return err
	}
	if ns := obj.(*corev1.Namespace); ns.DeletionTimestamp != nil {
		return apierrors.NewForbidden(corev1.Resource("namespaces"), namespace,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", namespace))
	}
	return nil
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Status", Type: "string", Description: "The status of the namespace"},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}

var _ rest.ShortNamesProvider = &REST{}
