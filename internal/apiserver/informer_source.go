package apiserver

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// storageSource lists and watches a resource's etcd store as the resource's
// registry store does for its whole collection, with no selector: the
// same requests to etcd, the same errors (a resourceVersion too old is 410
// Gone, so that the informer lists again).
type storageSource struct {
	store    storage.Interface
	key      string // the collection's key, the registry's KeyRootFunc
	newList  func() runtime.Object
	resource schema.GroupResource
}

var errSelector = errors.New("an in-process informer's source takes no label or field selector")

func (s storageSource) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	if hasSelector(opts) {
		return nil, errSelector
	}
	p := storage.Everything
	p.Limit, p.Continue = opts.Limit, opts.Continue
	list := s.newList()
	err := s.store.GetList(ctx, s.key, storage.ListOptions{
		ResourceVersion: opts.ResourceVersion, ResourceVersionMatch: opts.ResourceVersionMatch,
		Predicate: p, Recursive: true,
	}, list)
	if err != nil {
		return nil, storeerr.InterpretListError(err, s.resource)
	}
	return list, nil
}

func (s storageSource) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	if hasSelector(opts) {
		return nil, errSelector
	}
	p := storage.Everything
	p.AllowWatchBookmarks = opts.AllowWatchBookmarks
	// With bookmarks asked for, etcd's progress notifications (requestProgress)
	// reach the informer as bookmarks, as the watch cache asks for them.
	w, err := s.store.Watch(ctx, s.key, storage.ListOptions{
		ResourceVersion: opts.ResourceVersion, Predicate: p, Recursive: true,
		SendInitialEvents: opts.SendInitialEvents, ProgressNotify: opts.AllowWatchBookmarks,
	})
	if err != nil {
		return nil, storeerr.InterpretWatchError(err, s.resource, "")
	}
	return w, nil
}

func hasSelector(opts *metainternalversion.ListOptions) bool {
	return opts.LabelSelector != nil && !opts.LabelSelector.Empty() ||
		opts.FieldSelector != nil && !opts.FieldSelector.Empty()
}

// informerSource is the source of a resource's in-process informer when
// the resource has no watch cache: its etcd store, on a client of its own,
// with codec (an informerCodec) in place of the storage codec, so that the
// informer gets each object decoded into what it keeps of it rather than
// decoded whole and then trimmed. The registry store keeps the storage
// codec: API clients read whole objects.
func (g *restOptionsGetter) informerSource(resource schema.GroupResource, codec func(full runtime.Codec) runtime.Codec,
	newFunc, newList func() runtime.Object,
) (storageSource, factory.DestroyFunc, error) {
	opts, err := g.GetRESTOptions(resource, nil)
	if err != nil {
		return storageSource{}, nil, err
	}
	cfg := *opts.StorageConfig
	cfg.Codec = codec(cfg.Codec)
	store, destroy, err := g.stores.rawStorage(&cfg, newFunc, newList, opts.ResourcePrefix)
	if err != nil {
		return storageSource{}, nil, fmt.Errorf("the %s informer's store: %w", resource, err)
	}
	return storageSource{store: store, key: opts.ResourcePrefix, newList: newList, resource: resource}, destroy, nil
}

// setInformerSources makes s's stores the sources of the Service and
// IPAddress informers: the registry stores when they have a watch cache
// (it holds whole objects, already decoded), else their etcd stores with
// the informers' codecs.
func (g *restOptionsGetter) setInformerSources(s *Server, svcREST, ipREST registryStore) error {
	for _, r := range []struct {
		resource schema.GroupResource
		src      *storeSource
		registry registryStore
		codec    func(runtime.Codec) runtime.Codec
		newFunc  func() runtime.Object
		newList  func() runtime.Object
		// informer is the server's informer of the resource, whose count
		// its store reports (informerCounts); nil: none.
		informer func() cache.SharedIndexInformer
	}{
		{corev1.Resource("services"), s.sources.services, svcREST, slimServiceCodec,
			func() runtime.Object { return &corev1.Service{} }, func() runtime.Object { return &corev1.ServiceList{} },
			func() cache.SharedIndexInformer { return s.serviceInformer }},
		{networkingv1.Resource("ipaddresses"), s.sources.ipAddresses, ipREST, compactIPAddressCodec,
			func() runtime.Object { return &networkingv1.IPAddress{} }, func() runtime.Object { return &networkingv1.IPAddressList{} },
			func() cache.SharedIndexInformer { return s.informers.Networking().V1().IPAddresses().Informer() }},
	} {
		if !g.stores.uncached[r.resource] {
			r.src.set(r.registry)
			continue
		}
		if inf := r.informer(); inf != nil {
			g.stores.counts.of(r.resource).set(inf)
		}
		src, destroy, err := g.informerSource(r.resource, r.codec, r.newFunc, r.newList)
		if err != nil {
			return err
		}
		s.generic.RegisterDestroyFunc(destroy)
		r.src.set(src)
	}
	return nil
}
