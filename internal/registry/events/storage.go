package events

import (
	"context"
	"fmt"
	"github.com/allocator/allocator/internal/registry/table"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
)

// ttl is how long an Event lives after its last write.
const ttl = time.Hour

// NamespaceCheck returns an API error when new objects may not be created in
// namespace.
type NamespaceCheck func(ctx context.Context, namespace string) error

// REST is the Event storage served as "events".
type REST struct {
	*genericregistry.Store
	namespaceCheck NamespaceCheck
}

// NewREST builds the Event storage.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, check NamespaceCheck) (*REST, error) {
	s := strategy{ObjectTyper: scheme, NameGenerator: names.SimpleNameGenerator}
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &corev1.Event{} },
		NewListFunc:               func() runtime.Object { return &corev1.EventList{} },
		DefaultQualifiedResource:  corev1.Resource("events"),
		SingularQualifiedResource: corev1.Resource("event"),
		TTLFunc: func(runtime.Object, uint64, bool) (uint64, error) {
			return uint64(ttl.Seconds()), nil
		},
		CreateStrategy: s,
		UpdateStrategy: s,
		DeleteStrategy: s,
		TableConvertor: table.Convertor[*corev1.Event]{Kind: "Event", Columns: columns, Cells: eventRow},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, fmt.Errorf("complete events store: %w", err)
	}
	return &REST{Store: store, namespaceCheck: check}, nil
}

// Create refuses Events in namespaces that do not exist.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if ns, ok := request.NamespaceFrom(ctx); ok {
		if err := r.namespaceCheck(ctx, ns); err != nil {
			return nil, err
		}
	}
	return r.Store.Create(ctx, obj, createValidation, options)
}

// ShortNames implements rest.ShortNamesProvider.
func (r *REST) ShortNames() []string { return []string{"ev"} }

var columns = []metav1.TableColumnDefinition{
	{Name: "Last Seen", Type: "string", Description: "Time of the last occurrence"},
	{Name: "Type", Type: "string", Description: "Type of this event (Normal, Warning)"},
	{Name: "Reason", Type: "string", Description: "Why the action was taken"},
	{Name: "Object", Type: "string", Description: "The object this Event is about"},
	{Name: "Message", Type: "string", Description: "A human-readable description"},
	{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
}

// eventRow is an Event's row: LAST SEEN is the latest of its timestamps.
func eventRow(ev *corev1.Event) []any {
	last := ev.LastTimestamp
	if last.IsZero() {
		last = metav1.Time{Time: ev.EventTime.Time}
	}
	if last.IsZero() {
		last = ev.CreationTimestamp
	}
	object := fmt.Sprintf("%s/%s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name)
	return []any{table.Age(last), ev.Type, ev.Reason, object, ev.Message, ev.Name}
}
