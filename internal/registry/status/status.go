// Package status is the storage of a "<resource>/status" subresource: a copy
// of the resource's store whose update strategy keeps the spec and takes the
// status, exposed through the few REST verbs a status subresource serves.
// Every resource with a status subresource uses this one implementation.
package status

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// REST serves get and update of the status subresource.
type REST struct {
	store *genericregistry.Store
}

// NewREST wraps store, which must carry the status update strategy.
func NewREST(store *genericregistry.Store) *REST { return &REST{store: store} }

var _ rest.Patcher = &REST{}

// New returns an empty object of the resource.
func (r *REST) New() runtime.Object { return r.store.NewFunc() }

// Destroy does nothing: the main store owns the shared storage.
func (r *REST) Destroy() {}

// Get retrieves the object, for status updates.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update changes only the status. Status updates never create.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields implements rest.ResetFieldsStrategy.
func (r *REST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints like the main resource.
func (r *REST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
