package servicecidrs

import (
	"context"
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage/names"

	statusrest "github.com/allocator/allocator/internal/registry/status"
	"github.com/allocator/allocator/internal/registry/table"
)

// REST is the ServiceCIDR storage served as "servicecidrs".
type REST struct {
	*genericregistry.Store
}

// NewREST builds the ServiceCIDR storages, with policy added to
// upstream's rules. Its overlap warnings read the ServiceCIDRs overlaps
// finds, or, while overlaps is nil or has not synced, list every stored
// one.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, policy Policy, overlaps *Overlaps) (*REST, *statusrest.REST, error) {
	extra := &extras{policy: policy, overlaps: overlaps}
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator, extra: extra}
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
	if overlaps != nil {
		// The warnings of a client's next write wait for the informer to
		// deliver these (Overlaps).
		store.AfterCreate = func(obj runtime.Object, _ *metav1.CreateOptions) { overlaps.Wrote(obj) }
		store.AfterUpdate = func(obj runtime.Object, _ *metav1.UpdateOptions) { overlaps.Wrote(obj) }
		store.AfterDelete = func(obj runtime.Object, _ *metav1.DeleteOptions) { overlaps.Wrote(obj) }
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, nil, fmt.Errorf("complete servicecidrs store: %w", err)
	}
	extra.list = func(ctx context.Context) ([]*networkingv1.ServiceCIDR, error) {
		obj, err := store.List(ctx, &metainternalversion.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list servicecidrs: %w", err)
		}
		list := obj.(*networkingv1.ServiceCIDRList)
		out := make([]*networkingv1.ServiceCIDR, len(list.Items))
		for i := range list.Items {
			out[i] = &list.Items[i]
		}
		return out, nil
	}
	statusStore := *store
	statusStore.UpdateStrategy = statusStrategy{s}
	statusStore.ResetFieldsStrategy = statusStrategy{s}
	return &REST{Store: store}, statusrest.NewREST(&statusStore), nil
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "CIDRs", Type: "string", Description: "The CIDRs of the ServiceCIDR"},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}
