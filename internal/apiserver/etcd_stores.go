package apiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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

	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/internal/listhold"
	"github.com/allocator/allocator/internal/rawlist"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// InProcessEtcd is an etcd member running in the server's own process
// (*embedetcd.Server): each call returns a new client calling it in process.
type InProcessEtcd interface {
	InProcessClient() *clientv3.Client
}

// etcdStores builds every resource's storage as k8s.io/apiserver's factory
// does (its etcd3 store with the same codec, transformer, decoder, latency
// tracking and compaction, below the same watch cache as
// genericregistry.StorageWithCacher), each on an etcd client of its own, so
// that two things the factory cannot do are possible:
//   - with an in-process etcd, the client calls the member directly: the
//     gRPC transport between two halves of one process (protobuf, HTTP/2
//     framing and TLS on both ends, their goroutines), for every request
//     and watch event, would cost about a quarter of the server's CPU per
//     Service write (hack/bench.sh).
//     What reaches etcd, and what it stores, is the same request as over
//     gRPC;
//   - the Services' store writes through fence.Guard, and the IPAddresses'
//     through fence.GuardClaims, so that a Service write, or a claim made
//     for it, whose outcome is unknown can be fenced before anything it
//     reserved is released (internal/fence, design.md §7).
type etcdStores struct {
	// newClient returns a new client of the etcd the stores use.
	newClient func() (*clientv3.Client, error)
	// endpoints is what the storage layer's feature check asks a client's
	// version through.
	endpoints func(*clientv3.Client) etcdEndpoints
	// guard wraps each store's KV, so that no write lands once etcd's
	// history went back under the server (etcdhistory.Marker.Guard); nil:
	// not wrapped.
	guard func(clientv3.KV) clientv3.KV
	// leases are the leases of the Services' and IPAddresses' fenced
	// writes; nil: each store grants its own (tests of the stores alone).
	leases *fence.Leases
	// uncached are the resources served without a watch cache
	// (Config.NoWatchCache).
	uncached map[schema.GroupResource]bool
	// holds take the revision of every list page whose answer continues;
	// holdCompaction wraps the compactor's KV so that it compacts no
	// further than the holds of every server (internal/listhold). nil:
	// neither (tests of the stores alone).
	holds          *listhold.Holds
	holdCompaction func(clientv3.KV) clientv3.KV
	// counts are the object counts the server's informers hold.
	counts informerCounts

	mu        sync.Mutex
	refs      int            // storages built and not destroyed; guarded by mu
	compactor *etcdCompactor // shared by every storage while refs > 0; guarded by mu
}

// etcdEndpoints is a client as the storage layer's feature check sees it.
type etcdEndpoints interface {
	Endpoints() []string
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
}

// inProcessStores are the stores of an in-process etcd member.
func inProcessStores(etcd InProcessEtcd) *etcdStores {
	return &etcdStores{
		newClient: func() (*clientv3.Client, error) { return etcd.InProcessClient(), nil },
		endpoints: func(c *clientv3.Client) etcdEndpoints { return inProcessEndpoint{c} },
	}
}

// grpcStores are the stores of the etcd at transport's servers, reached
// over gRPC with kube-apiserver's dial and keep-alive settings.
func grpcStores(transport storagebackend.TransportConfig, log *zap.Logger) *etcdStores {
	return &etcdStores{
		newClient: func() (*clientv3.Client, error) { return newGRPCClient(transport, log) },
		endpoints: func(c *clientv3.Client) etcdEndpoints { return c },
	}
}

// newGRPCClient is k8s.io/apiserver's etcd client of transport (the
// factory's dial timeout and keep-alive), reconnecting within 2 s of etcd
// answering again as the server's own client does (CompletedConfig.etcdClient).
func newGRPCClient(transport storagebackend.TransportConfig, log *zap.Logger) (*clientv3.Client, error) {
	tlsConfig, err := EtcdTLS{CAFile: transport.TrustedCAFile, CertFile: transport.CertFile, KeyFile: transport.KeyFile}.ClientConfig()
	if err != nil {
		return nil, err
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            transport.ServerList,
		DialTimeout:          20 * time.Second,
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		TLS:                  tlsConfig,
		Logger:               log,
		DialOptions:          []grpc.DialOption{grpc.WithConnectParams(reconnectParams)},
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", transport.ServerList, err)
	}
	return c, nil
}

// etcdCompactor is k8s.io/apiserver's compactor (the one the factory starts
// per etcd), with its client.
type etcdCompactor struct {
	client *clientv3.Client
	stop   func()
	etcd3.Compactor
}

// decorator is the generic.StorageDecorator of every resource's store: the
// etcd3 store below a watch cache, or alone for a resource in uncached.
func (p *etcdStores) decorator() generic.StorageDecorator {
	return func(config *storagebackend.ConfigForResource, resourcePrefix string,
		keyFunc func(obj runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object,
		getAttrs storage.AttrFunc, triggers storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		raw, destroyRaw, err := p.rawStorage(config, newFunc, newListFunc, resourcePrefix)
		if err != nil {
			return nil, nil, err
		}
		if p.uncached[config.GroupResource] {
			return raw, destroyRaw, nil
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

// rawStorage is factory.Create's etcd3 store on a client of its own (as
// factory.Create gives each resource a client of its own); the Services'
// and IPAddresses' writes are guarded by their request's fence. The factory's
// AllowUnsafeMalformedObjectDeletion wrappers are left out: the server has
// no --feature-gates to turn that alpha gate on.
func (p *etcdStores) rawStorage(config *storagebackend.ConfigForResource, newFunc, newListFunc func() runtime.Object, resourcePrefix string) (storage.Interface, factory.DestroyFunc, error) {
	compactor, err := p.acquireCompactor(config.CompactionInterval)
	if err != nil {
		return nil, nil, err
	}
	client, err := p.newClient()
	if err != nil {
		p.releaseCompactor()
		return nil, nil, err
	}
	client.KV = etcd3.NewETCDLatencyTracker(client.KV)
	if p.guard != nil {
		client.KV = p.guard(client.KV)
	}
	kc := &kubernetes.Client{Client: client}
	kc.Kubernetes = kc
	leases := p.leases
	if leases == nil {
		leases = fence.NewLeases(client, etcdlayout.Layout{Prefix: config.Prefix}, 0)
	}
	switch config.GroupResource {
	case corev1.Resource("services"):
		kc.Kubernetes = fence.Guard(kc, leases)
	case networkingv1.Resource("ipaddresses"):
		// An IPAddress is the address's claim, and its create writes a
		// UID of its own: a claim is known by its value, unmarked.
		kc.Kubernetes = fence.GuardClaims(kc, leases)
	}
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	// The watch cache answers a consistent LIST (no resourceVersion) only
	// once the storage layer knows etcd supports progress requests, which
	// it learns from the version of each of the client's endpoints: an
	// in-process client has none of its own (inProcessEndpoint names it),
	// and without it every such LIST went to etcd.
	etcdfeature.DefaultFeatureSupportChecker.CheckClient(client.Ctx(), p.endpoints(client), storage.RequestWatchProgress)
	decoder := rawlist.NewDecoder(etcd3.NewDefaultDecoder(config.Codec, versioner), servedKind(newFunc), newFunc)
	store, err := etcd3.New(kc, compactor, config.Codec, newFunc, newListFunc, config.Prefix, resourcePrefix,
		config.GroupResource, transformer, config.LeaseManagerConfig, decoder, versioner)
	if err != nil {
		_ = client.Close()
		p.releaseCompactor()
		return nil, nil, fmt.Errorf("etcd storage of %s: %w", config.GroupResource, err)
	}
	var once sync.Once
	presized := newPresizedLists(store, resourcePrefix)
	presized.informer = p.counts.of(config.GroupResource)
	var lists storage.Interface = presized
	if p.holds != nil {
		lists = heldLists{presizedLists: presized, holds: p.holds}
	}
	return lists, func() {
		once.Do(func() {
			store.Close()
			_ = client.Close()
			p.releaseCompactor()
		})
	}, nil
}

// servedKind is the v1 kind of the objects newFunc makes; the zero kind
// when there is none, whose lists are always decoded (rawlist.Decoder).
func servedKind(newFunc func() runtime.Object) schema.GroupVersionKind {
	kinds, _, _ := Scheme.ObjectKinds(newFunc())
	for _, k := range kinds {
		if k.Version == "v1" {
			return k
		}
	}
	return schema.GroupVersionKind{}
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
func (p *etcdStores) acquireCompactor(interval time.Duration) (etcd3.Compactor, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if interval == 0 {
		p.refs++
		return nil, nil
	}
	if p.compactor == nil {
		client, err := p.newClient()
		if err != nil {
			return nil, err
		}
		if p.holdCompaction != nil {
			client.KV = p.holdCompaction(client.KV)
		}
		c := etcd3.NewCompactor(client, interval, clock.RealClock{}, nil)
		p.compactor = &etcdCompactor{client: client, stop: c.Stop, Compactor: c}
	}
	p.refs++
	return p.compactor, nil
}

func (p *etcdStores) releaseCompactor() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refs--
	if p.refs == 0 && p.compactor != nil {
		p.compactor.stop()
		_ = p.compactor.client.Close()
		p.compactor = nil
	}
}
