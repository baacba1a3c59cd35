package servicecidrs

import (
	"context"
	"fmt"
	"github.com/allocator/allocator/pkg/registry/table"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// REST is the ServiceCIDR storage served as "servicecidrs".
type REST struct {
	*genericregistry.Store
}

// StatusREST is the storage of "servicecidrs/status".
type StatusREST struct {
	store *genericregistry.Store
}

// NewREST builds the ServiceCIDR storages.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, *StatusREST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &networkingv1.ServiceCIDR{} },
		NewListFunc:               func() runtime.Object { return &networkingv1.ServiceCIDRList{} },
		DefaultQualifiedResource:  networkingv1.Resource("servicecidrs"),
		SingularQualifiedResource: networkingv1.Resource("servicecidr"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		ResetFieldsStrategy:       s,
		TableConvertor: table.Convertor[*networkingv1.ServiceCIDR]{Kind: "ServiceCIDR", Columns: columns, Cells: func(sc *networkingv1.ServiceCIDR) []any {
			return []any{sc.Name, strings.Join(sc.Spec.CIDRs, ","), table.Age(sc.CreationTimestamp)}
		}},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, nil, fmt.Errorf("complete servicecidrs store: %w", err)
	}
	statusStore := *store
	statusStore.UpdateStrategy = statusStrategy{s}
	statusStore.ResetFieldsStrategy = statusStrategy{s}
	return &REST{Store: store}, &StatusREST{store: &statusStore}, nil
}

// New returns an empty ServiceCIDR.
func (r *StatusREST) New() runtime.Object { return &networkingv1.ServiceCIDR{} }

// Destroy does nothing: the main store owns the shared storage.
func (r *StatusREST) Destroy() {}

// Get retrieves the ServiceCIDR, for status updates.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update changes only the status.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields implements rest.ResetFieldsStrategy.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints like the main resource.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "CIDRs", Type: "string", Description: "The CIDRs of the ServiceCIDR"},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}

var _ rest.Patcher = &StatusREST{}
