package ipaddresses

import (
	"fmt"
	"github.com/allocator/allocator/internal/registry/table"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
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
