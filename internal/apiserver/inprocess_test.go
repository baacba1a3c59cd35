package apiserver

import (
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
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

// TestOwnCopy: the informer gets its own copy of a shared object (the
// factory's transform then strips its managedFields, never the shared
// object's) and the object of its own as it is.
func TestOwnCopy(t *testing.T) {
	t.Parallel()
	cached := managedService()
	e, ok := ownCopy(watch.Event{Type: watch.Added, Object: shared{obj: cached}})
	got, isService := e.Object.(*corev1.Service)
	if !ok || !isService || got == cached || got.Name != "web" {
		t.Fatalf("shared object: got %T %v, want a copy of its own", e.Object, ok)
	}
	if _, err := stripManagedFields(got); err != nil || got.ManagedFields != nil {
		t.Fatalf("the transform left managedFields %v (%v)", got.ManagedFields, err)
	}
	if len(cached.ManagedFields) != 1 {
		t.Errorf("the shared object lost its managedFields: %v", cached.ManagedFields)
	}

	own := managedService()
	if e, ok := ownCopy(watch.Event{Type: watch.Modified, Object: own}); !ok || e.Object != own {
		t.Errorf("the informer's own object: %T %v, want it as it is", e.Object, ok)
	}
}

// TestInProcessInformerIndexes: no in-process informer keeps a namespace
// index (inProcessInformers says why); a lister's namespace still reads
// the Services of one namespace, from a scan.
func TestInProcessInformerIndexes(t *testing.T) {
	t.Parallel()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	inProcessInformers(factory, newInProcessSources())
	for _, tc := range []struct {
		name     string
		informer cache.SharedIndexInformer
		want     bool
	}{
		{"services", factory.Core().V1().Services().Informer(), false},
		{"namespaces", factory.Core().V1().Namespaces().Informer(), false},
		{"ipaddresses", factory.Networking().V1().IPAddresses().Informer(), false},
		{"servicecidrs", factory.Networking().V1().ServiceCIDRs().Informer(), false},
	} {
		if _, got := tc.informer.GetIndexer().GetIndexers()[cache.NamespaceIndex]; got != tc.want {
			t.Errorf("%s: namespace index %v, want %v", tc.name, got, tc.want)
		}
	}
	store := factory.Core().V1().Services().Informer().GetStore()
	for _, key := range []string{"a/one", "a/two", "b/one"} {
		ns, name, _ := strings.Cut(key, "/")
		if err := store.Add(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := factory.Core().V1().Services().Lister().Services("a").List(labels.Everything())
	if err != nil || len(got) != 2 {
		t.Errorf("the Services of namespace a: %d, %v; want 2", len(got), err)
	}
}
