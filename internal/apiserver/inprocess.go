package apiserver

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/streaminformer"
)

// listWatchStore is what an in-process informer reads: a resource's registry
// store, whose lists and watches its watch cache serves, or etcd for a
// resource without one (Config.NoWatchCache: by default the Services and
// IPAddresses, which these informers hold instead): for those two, an etcd
// store of their own whose codec decodes each object into what the
// informer keeps of it (informerSource).
type listWatchStore interface {
	List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error)
	Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error)
}

// registryStore is a registry store as an informer reads it.
type registryStore interface {
	rest.Lister
	rest.Watcher
}

var _ listWatchStore = registryStore(nil)

// storeSource is one resource's store for its in-process informer. The
// informers are built (and started) before the stores exist, so a list or
// watch waits until set is called.
type storeSource struct {
	ready chan struct{}
	store listWatchStore
}

func newStoreSource() *storeSource { return &storeSource{ready: make(chan struct{})} }

func (s *storeSource) set(store listWatchStore) {
	s.store = store
	close(s.ready)
}

func (s *storeSource) wait(ctx context.Context) error {
	select {
	case <-s.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// inProcessSources are the stores of the four resources the server's own
// informers read (Services, Namespaces, IPAddresses, ServiceCIDRs).
type inProcessSources struct {
	services, namespaces, ipAddresses, serviceCIDRs *storeSource
	// warm seeds the streaming informer of src from its warm-start file
	// (file), if any (WarmStart); nil: none is seeded.
	warm func(inf *streaminformer.Informer, file string, src *storeSource)
	// streaming are the streaming informers inProcessInformers made, by
	// their warm-start file.
	streaming map[string]*streaminformer.Informer
}

func newInProcessSources() *inProcessSources {
	return &inProcessSources{
		services: newStoreSource(), namespaces: newStoreSource(),
		ipAddresses: newStoreSource(), serviceCIDRs: newStoreSource(),
		streaming: map[string]*streaminformer.Informer{},
	}
}

// storeListWatch lists and watches a store in process: the informer gets
// the store's events without the loopback request (authentication,
// protobuf encoding, HTTP/2 and TLS on the server's side, the same again
// to decode them on the informer's), which would cost every create and
// delete a few percent of its CPU per informer (hack/bench.sh).
type storeListWatch struct{ src *storeSource }

var _ cache.ListerWatcherWithContext = storeListWatch{}

func (lw storeListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw storeListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

func (lw storeListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	in, err := lw.prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	// The list's items are copies of the cached objects (a typed list
	// holds values), so the informer's transform may change them.
	return whileInitializing(ctx, func() (runtime.Object, error) { return lw.src.store.List(ctx, in) })
}

func (lw storeListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	in, err := lw.prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	w, err := whileInitializing(ctx, func() (watch.Interface, error) { return lw.src.store.Watch(ctx, in) })
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, ownCopy), nil
}

func (lw storeListWatch) prepare(ctx context.Context, opts metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	if err := lw.src.wait(ctx); err != nil {
		return nil, err
	}
	in := &metainternalversion.ListOptions{}
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&opts, in, nil); err != nil {
		return nil, fmt.Errorf("list options: %w", err)
	}
	return in, nil
}

// initializingRetry bounds how long a list or watch waits out a watch cache
// that is not ready; after it, the informer's own backoff takes over.
const initializingRetry = 10 * time.Second

// whileInitializing calls f again while the store answers 429, "storage is
// (re)initializing": its watch cache lists etcd when the server starts, a
// few milliseconds after the informers do, and the informer's own backoff
// would wait a second or more before trying again (the IPAddress repair's
// first pass, which waits for every informer, with it).
func whileInitializing[T any](ctx context.Context, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(initializingRetry)
	for {
		v, err := f()
		if !apierrors.IsTooManyRequests(err) || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ownCopy gives the informer an object of its own: the factory's transform
// (stripManagedFields) changes what it stores. An event of a store without
// a watch cache is decoded for its watcher alone, and is the informer's.
// An event of a watch cache carries either its shared object wrapped for
// the encoders (a CacheableObject, shared with every other watcher and
// with the cache itself), which is copied here, or an object the watch
// already copied for this watcher alone (the cacher's getMutableObject;
// the initial events of a watch list, 100,000 per resource at a start with
// 100,000 Services), which is the informer's as it is: copying it again
// would cost about a tenth of the start-up's CPU (hack/scale.sh).
func ownCopy(e watch.Event) (watch.Event, bool) {
	if o, ok := e.Object.(runtime.CacheableObject); ok {
		e.Object = o.GetObject() // a deep copy
	}
	return e, true
}

// inProcessInformers registers, in factory, informers of the four resources
// that read srcs in process; the factory's own constructors (on its
// client) are then never used for them. None has the namespace index the
// factory's own would have. The cluster-scoped resources' would file every
// object under the one empty namespace, and their listers never read it.
// The Services' would file every Service once more, a set entry each, at
// every start before readiness (about a second of a start at a million
// Services); its one reader, a lister's namespace, which the IPAddress
// repair reads when a namespace is relabelled while a ServiceCIDR is
// scoped, scans the cache instead.
//
// The Services and IPAddresses, a million each at the most, fill their
// stores from the watch's initial events as they arrive
// (internal/streaminformer); client-go's informer would collect the whole
// list first and then store, index and hand it to the handlers on one
// goroutine, each stage after the one before.
func inProcessInformers(factory informers.SharedInformerFactory, srcs *inProcessSources) {
	for _, r := range []struct {
		obj       runtime.Object
		src       *storeSource
		streaming string // the description of a streaming informer, "" for client-go's
		warmFile  string // its warm-start file
	}{
		{&corev1.Service{}, srcs.services, "Service", warmServices},
		{&corev1.Namespace{}, srcs.namespaces, "", ""},
		{&networkingv1.IPAddress{}, srcs.ipAddresses, "IPAddress", warmIPAddresses},
		{&networkingv1.ServiceCIDR{}, srcs.serviceCIDRs, "", ""},
	} {
		factory.InformerFor(r.obj, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			if r.streaming != "" {
				inf := streaminformer.New(storeListWatch{src: r.src}, r.streaming, cache.Indexers{})
				if srcs.warm != nil {
					srcs.warm(inf, r.warmFile, r.src)
				}
				srcs.streaming[r.warmFile] = inf
				return inf
			}
			return cache.NewSharedIndexInformer(storeListWatch{src: r.src}, r.obj, resync, cache.Indexers{})
		})
	}
}
