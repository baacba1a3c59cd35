package ipaddresses

import (
	"context"
	"fmt"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/allocator/allocator/internal/rawlist"
	"github.com/allocator/allocator/internal/registry/table"
)

// REST is the IPAddress storage served as "ipaddresses".
type REST struct {
	*genericregistry.Store
}

// NewREST builds the IPAddress storage.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &networkingv1.IPAddress{} },
		NewListFunc:               func() runtime.Object { return &networkingv1.IPAddressList{} },
		DefaultQualifiedResource:  networkingv1.Resource("ipaddresses"),
		SingularQualifiedResource: networkingv1.Resource("ipaddress"),
		CreateStrategy:            s,
		UpdateStrategy:            s,
		DeleteStrategy:            s,
		TableConvertor: table.Convertor[*networkingv1.IPAddress]{Kind: "IPAddress", Columns: columns, Cells: func(ip *networkingv1.IPAddress) []any {
			return []any{ip.Name, ParentRef(ip.Spec.ParentRef)}
		}},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("complete ipaddresses store: %w", err)
	}
	return &REST{Store: store}, nil
}

// List serves a list from the stored bytes when the client reads plain
// protobuf (internal/rawlist), else as the store does.
func (r *REST) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if out, handled, err := rawlist.Serve(ctx, r.Store, opts, networkingv1.SchemeGroupVersion.WithKind("IPAddressList")); handled {
		return out, err
	}
	return r.Store.List(ctx, opts)
}

// ShortNames implements rest.ShortNamesProvider (kubectl get ip).
func (r *REST) ShortNames() []string { return []string{"ip"} }

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "ParentRef", Type: "string", Description: "The object this IP address is allocated to"},
}

// ParentRef formats a parent reference as upstream's printer does:
// "<resource>[.<group>]/<namespace>/<name>", e.g. services/default/kubernetes.
func ParentRef(ref *networkingv1.ParentReference) string {
	if ref == nil {
		return "<none>"
	}
	out := strings.ToLower(schema.GroupResource{Group: ref.Group, Resource: ref.Resource}.String())
	if ref.Namespace != "" {
		out += "/" + ref.Namespace
	}
	return out + "/" + ref.Name
}

var _ rest.ShortNamesProvider = &REST{}
