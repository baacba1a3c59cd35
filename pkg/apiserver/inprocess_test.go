package apiserver

import (
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// shared stands for the watch cache's cachingObject: an object shared with
// the cache and every watcher, handed out as deep copies.
type shared struct{ obj *corev1.Service }

func (s shared) GetObject() runtime.Object { return s.obj.DeepCopy() }
func (s shared) CacheEncode(_ runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	return encode(s.obj, w)
}
func (s shared) GetObjectKind() schema.ObjectKind { return s.obj.GetObjectKind() }
func (s shared) DeepCopyObject() runtime.Object   { return s.obj.DeepCopyObject() }

func managedService() *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}}}
}

// TestForInformer: the informer gets its own copy of a shared object and
// the object of its own as it is, both without managedFields; the shared
// object keeps them.
func TestForInformer(t *testing.T) {
	cached := managedService()
	e, ok := forInformer(watch.Event{Type: watch.Added, Object: shared{obj: cached}})
	got, isService := e.Object.(*corev1.Service)
	if !ok || !isService || got == cached {
		t.Fatalf("shared object: got %T (%v), want a copy of its own", e.Object, ok)
	}
	if got.ManagedFields != nil || got.Name != "web" {
		t.Errorf("shared object's copy: %+v, want web without managedFields", got.ObjectMeta)
	}
	if len(cached.ManagedFields) != 1 {
		t.Errorf("the shared object lost its managedFields: %v", cached.ManagedFields)
	}

	own := managedService()
	e, ok = forInformer(watch.Event{Type: watch.Modified, Object: own})
	if !ok || e.Object != own || own.ManagedFields != nil {
		t.Errorf("the informer's own object: %T %v, managedFields %v; want it as it is, trimmed", e.Object, ok, own.ManagedFields)
	}

	// A bookmark or an error carries no ObjectMeta to trim.
	status := &metav1.Status{Message: "too old"}
	if e, ok := forInformer(watch.Event{Type: watch.Error, Object: status}); !ok || e.Object != status {
		t.Errorf("error event: %v %v", e, ok)
	}
}
