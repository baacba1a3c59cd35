package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/etcd3"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// InProcessEtcd is an etcd member running in the server's own process
// (*embedetcd.Server): each call returns a new client calling it in process.
type InProcessEtcd interface {
	InProcessClient() *clientv3.Client
}

// The stores of an in-process etcd (issue 19). With the embedded etcd, a
// quarter of the server's CPU per Service create or delete was the gRPC
// transport between two halves of one process: protobuf, HTTP/2 framing and
// TLS on both ends, and their goroutines, for every etcd request and watch
// event. inProcessStores builds each resource's storage as
// k8s.io/apiserver's factory does (its etcd3 store with the same codec,
// transformer, decoder, latency tracking and compaction, below the same
// watch cache as genericregistry.StorageWithCacher), over a client that
// calls the member directly. What reaches etcd, and what it stores, is the
// same request as over gRPC.
type inProcessStores struct {
	etcd InProcessEtcd

	mu        sync.Mutex
	refs      int                 // storages built and not destroyed; guarded by mu
	compactor *inProcessCompactor // shared by every storage while refs > 0; guarded by mu
}

// inProcessCompactor is k8s.io/apiserver's compactor (the one factory.Create
// starts per etcd), with its client.
type inProcessCompactor struct {
	client *clientv3.Client
	stop   func()
	etcd3.Compactor
}

// decorator is the generic.StorageDecorator of every resource's store.
func (p *inProcessStores) decorator() generic.StorageDecorator {
	return func(config *storagebackend.ConfigForResource, resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object,
		getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		raw, destroyRaw, err := p.rawStorage(config, newFunc, newListFunc, resourcePrefix)
		if err != nil {
			return nil, nil, err
		}
		cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
			Storage:             raw,
			Versioner:           storage.APIObjectVersioner{},
			GroupResource:       config.GroupResource,
			EventsHistoryWindow: config.EventsHistoryWindow,
			ResourcePrefix:      resourcePrefix,
			KeyFunc:             keyFunc,
			NewFunc:             newFunc,
			NewListFunc:         newListFunc,
			GetAttrsFunc:        getAttrs,
			IndexerFuncs:        triggers,
			Indexers:            indexers,
			Codec:               config.Codec,
		})
		if err != nil {
			destroyRaw()
			return nil, nil, fmt.Errorf("watch cache of %s: %w", config.GroupResource, err)
		}
		delegator := cacherstorage.NewCacheDelegator(cacher, raw)
		var once sync.Once
		return delegator, func() {
			once.Do(func() {
				delegator.Stop()
				cacher.Stop()
				destroyRaw()
			})
		}, nil
	}
}

// rawStorage is factory.Create's etcd3 store on an in-process client of its
// own (as factory.Create gives each resource a client of its own). The
// factory's AllowUnsafeMalformedObjectDeletion wrappers are left out: the
// server has no --feature-gates to turn that alpha gate on.
func (p *inProcessStores) rawStorage(config *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	compactor := p.acquireCompactor(config.CompactionInterval)
	client := p.etcd.InProcessClient()
	client.KV = etcd3.NewETCDLatencyTracker(client.KV)
	kc := &kubernetes.Client{Client: client}
	kc.Kubernetes = kc
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	// The watch cache answers a consistent LIST (no resourceVersion) only
	// once the storage layer knows etcd supports progress requests, which
	// it learns from the version of each of the client's endpoints: an
	// in-process client has none, so every such LIST went to etcd, and the
	// ServiceCIDR controller's and the repairs' lists cost the server more
	// the more it stored (hack/scale.sh: 8.9 ms of CPU per create at 80% of
	// 100,000 Services, against 3.5 over gRPC).
	etcdfeature.DefaultFeatureSupportChecker.CheckClient(client.Ctx(), inProcessEndpoint{client}, storage.RequestWatchProgress)
	store, err := etcd3.New(kc, compactor, config.Codec, newFunc, newListFunc, config.Prefix, resourcePrefix,
		config.GroupResource, transformer, config.LeaseManagerConfig, etcd3.NewDefaultDecoder(config.Codec, versioner), versioner)
	if err != nil {
		_ = client.Close()
		p.releaseCompactor()
		return nil, nil, fmt.Errorf("etcd storage of %s: %w", config.GroupResource, err)
	}
	var once sync.Once
	return store, func() {
		once.Do(func() {
			store.Close()
			_ = client.Close()
			p.releaseCompactor()
		})
	}, nil
}

// inProcessEndpoint shows the storage layer's feature check an in-process
// client as the one endpoint it is, so that it asks its version (Status).
type inProcessEndpoint struct{ client *clientv3.Client }

// inProcessEndpointName names the member in the feature check.
const inProcessEndpointName = "in-process"

func (e inProcessEndpoint) Endpoints() []string { return []string{inProcessEndpointName} }

func (e inProcessEndpoint) Status(ctx context.Context, _ string) (*clientv3.StatusResponse, error) {
	return e.client.Status(ctx, inProcessEndpointName)
}

// acquireCompactor returns the compactor every storage shares, started by
// the first: etcd keeps every revision until someone compacts, and
// kube-apiserver compacts every 5 minutes (--etcd-compaction-interval).
// An interval of 0 compacts nothing, as in kube-apiserver.
func (p *inProcessStores) acquireCompactor(interval time.Duration) etcd3.Compactor {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refs++
	if interval == 0 {
		return nil
	}
	if p.compactor == nil {
		client := p.etcd.InProcessClient()
		c := etcd3.NewCompactor(client, interval, clock.RealClock{}, nil)
		p.compactor = &inProcessCompactor{client: client, stop: c.Stop, Compactor: c}
	}
	return p.compactor
}

func (p *inProcessStores) releaseCompactor() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refs--
	if p.refs == 0 && p.compactor != nil {
		p.compactor.stop()
		_ = p.compactor.client.Close()
		p.compactor = nil
	}
}
