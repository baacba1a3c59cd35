package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	networkingv1 "k8s.io/api/networking/v1"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/allocmetrics"
	"github.com/allocator/allocator/internal/embedetcd"
	"github.com/allocator/allocator/internal/etcdhistory"
	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/listhold"
	"github.com/allocator/allocator/internal/rawlist"
	"github.com/allocator/allocator/internal/registry/events"
	"github.com/allocator/allocator/internal/registry/ipaddresses"
	"github.com/allocator/allocator/internal/registry/namespaces"
	"github.com/allocator/allocator/internal/registry/servicecidrs"
	"github.com/allocator/allocator/internal/registry/services"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/servicealloc"
)

// Server is the allocator API server.
type Server struct {
	cfg     *Config
	generic *genericapiserver.GenericAPIServer
	// etcd is the server's own client; every write through it is guarded
	// by history.
	etcd *clientv3.Client
	// writeLeases are the leases of the fenced Service writes, registered
	// in etcd so that the repairs see the writes in flight (internal/fence).
	writeLeases *fence.Leases
	// listHolds hold etcd's compaction back for the paged lists the server
	// serves, and publish the hold to every server's compactor.
	listHolds *listhold.Shared
	// history is this process's restore marker: it ends Run when etcd's
	// history goes back under the server, and its Guard refuses every
	// write the server makes after that (internal/etcdhistory).
	history *etcdhistory.Marker
	// controllers are stopped, and their last requests waited for, before
	// the server stops serving (shutdown.go).
	controllers controllerGroup
	alloc       *servicealloc.Allocator
	nodePorts   *nodeport.EtcdAllocator
	backend     *ipallocator.Backend
	// informers is the server's one informer factory (allocators,
	// repairs, ServiceCIDR controller); see openBackend. Its informers read
	// the stores of sources in process.
	informers informers.SharedInformerFactory
	// serviceInformer is informers' Service informer, which the map-based
	// repairs read (repair_services.go); nil when the server runs none.
	serviceInformer cache.SharedIndexInformer
	sources         *inProcessSources
	// ipAddresses is the IPAddress store in process (the allocators'
	// claims, the ServiceCIDR controller's live list).
	ipAddresses ipaddresses.InProcess
	allocators  []allocation.Interface // the backend's, as wrapped by Config.WrapAllocator; primary first
	open        atomic.Bool            // set once bootstrap opened s.alloc
	// started is closed once bootstrap is done and the repair's first
	// pass with it: the start-up /readyz waits for is over (Started).
	started chan struct{}

	// registry holds this server's own metrics (allocators, repair), served
	// on /metrics together with the process-wide ones.
	registry      metrics.KubeRegistry
	allocMetrics  *allocmetrics.Metrics
	repairMetrics *report.Metrics
	// repairFirstPass is closed once the repair controller's first full
	// pass succeeded; /readyz waits for it.
	repairFirstPass chan struct{}
	// repairStart holds the IPAddress repair's first pass until bootstrap
	// closes it (awaitCarryOverPass, once), when the default ServiceCIDR it
	// wrote is in the informers: that pass carries the bitmap model's
	// allocations over before the allocators open.
	repairStart     chan struct{}
	repairStartOnce sync.Once
	// migrated is set once the start-up carry-over from the other model ran.
	migrated bool
	// transition is this replica's membership in the model transition; nil
	// for an InMemory server.
	transition *transition.Coordinator
	// recorder emits the bootstrap's events; warned remembers which were
	// emitted.
	recorder record.EventRecorder
	warnedMu sync.Mutex
	warned   map[string]bool
	// watches ends open watches when Run's context ends.
	watches *watchTerminator
}

// New builds the server: stores for every resource, the Service allocator
// from the configured factory, and the bootstrap hook. The allocators
// refuse work (503) until bootstrap has rebuilt their state.
func (c CompletedConfig) New(ctx context.Context) (*Server, error) {
	if len(c.ServiceCIDRs) == 0 {
		return nil, errors.New("no service CIDRs configured")
	}
	if err := setStorageFeatures(); err != nil {
		return nil, err
	}
	s, err := c.newServer(ctx)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.closeUnbuilt(ctx)
		}
	}()
	if err := c.probeAndJoin(ctx, s); err != nil {
		return nil, err
	}
	getter := newRESTOptionsGetter(c.EtcdServers, c.EtcdPrefix, c.EtcdTLS, c.InProcessEtcd,
		embedetcd.KlogLogger(logger(ctx).WithName("etcd-client")), s.history.Guard)
	s.writeLeases = fence.NewLeases(s.etcd, etcdlayout.Layout{Prefix: c.EtcdPrefix}, c.WriteLeaseTTL)
	getter.stores.leases = s.writeLeases
	getter.stores.uncached = c.NoWatchCache
	c.holdLists(s, getter)
	switch {
	case c.CountMetricPollPeriod > 0:
		getter.countPollPeriod = c.CountMetricPollPeriod
	case c.CountMetricPollPeriod < 0:
		getter.countPollPeriod = 0
	}
	ipREST, err := ipaddresses.NewREST(Scheme, getter)
	if err != nil {
		return nil, err
	}
	s.ipAddresses = ipREST.InProcess(s.fencer().ipAddressCreated)
	if err := c.openAllocators(ctx, s); err != nil {
		return nil, err
	}
	core, networking, err := c.newStores(s, getter, ipREST)
	if err != nil {
		return nil, err
	}
	if err := s.installAPIGroups(core, networking); err != nil {
		return nil, err
	}
	if err := s.addPostStartHooks(); err != nil {
		return nil, err
	}
	if err := s.addHealthChecks(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// newServer builds the generic server and the etcd client, and returns
// the Server holding them, with its handler chain and /metrics set up.
func (c CompletedConfig) newServer(ctx context.Context) (*Server, error) {
	generic, err := c.generic.New("allocator", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("create generic server: %w", err)
	}
	etcdClient, err := c.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	process := string(uuid.NewUUID())
	history := etcdhistory.NewMarker(etcdClient.KV, etcdClient.Lease,
		etcdlayout.Layout{Prefix: c.EtcdPrefix}.RestoreMarker(process), process)
	etcdClient.KV = history.Guard(etcdClient.KV)
	s := &Server{
		cfg: c.Config, generic: generic, etcd: etcdClient, history: history,
		registry: metrics.NewKubeRegistry(), allocMetrics: allocmetrics.New(), repairMetrics: report.NewMetrics(),
		repairFirstPass: make(chan struct{}), repairStart: make(chan struct{}), started: make(chan struct{}),
	}
	s.listHolds = listhold.NewShared(etcdClient, etcdlayout.Layout{Prefix: c.EtcdPrefix}, process,
		listhold.NewHolds(c.ListHoldLimits, nil), 0)
	s.watches = newWatchTerminator()
	s.sources = newInProcessSources()
	generic.Handler.FullHandlerChain = s.watches.wrap(rawlist.WithNegotiation(generic.Handler.FullHandlerChain, Codecs))
	s.allocMetrics.Register(s.registry)
	s.repairMetrics.Register(s.registry)
	if c.WarmStart != nil {
		c.WarmStart.attach(s, etcdClient.KV)
	}
	registerAPIServerMetrics()
	generic.Handler.NonGoRestfulMux.Handle("/metrics", metrics.HandlerFor(
		prometheus.Gatherers{legacyregistry.DefaultGatherer, s.registry}, metrics.HandlerOpts{}))
	return s, nil
}

// closeUnbuilt releases what New opened before it failed: the transition
// record, if joined, then the etcd client.
func (s *Server) closeUnbuilt(ctx context.Context) {
	if s.transition != nil {
		_ = s.transition.Close(context.WithoutCancel(ctx))
	}
	s.etcd.Close()
}

// probeAndJoin checks that etcd answers and, unless the server is InMemory,
// joins the model transition as s.transition.
func (c CompletedConfig) probeAndJoin(ctx context.Context, s *Server) error {
	if err := probeEtcd(ctx, s.etcd, c.EtcdServers, c.EtcdPrefix, c.EtcdTLS.Enabled()); err != nil {
		return err
	}
	if c.InMemory {
		return nil
	}
	joined, err := transition.Join(ctx, transition.Config{
		Client: s.etcd, Prefix: c.EtcdPrefix, Model: c.Model, TTL: c.TransitionTTL,
	})
	if err != nil {
		return fmt.Errorf("join the ClusterIP allocator model transition: %w", err)
	}
	s.transition = joined
	return nil
}

// openAllocators opens the ClusterIP backend on s.ipAddresses, the
// node-port allocator and the Service allocator over them; every allocator
// starts closed.
func (c CompletedConfig) openAllocators(ctx context.Context, s *Server) error {
	var err error
	if s.backend, err = s.openBackend(ctx, s.ipAddresses); err != nil {
		return err
	}
	var allocators []allocation.Interface
	for _, a := range s.backend.Allocators() {
		if c.WrapAllocator != nil {
			a = c.WrapAllocator(a)
		}
		s.allocators = append(s.allocators, a)
		allocators = append(allocators, s.allocMetrics.Wrap(a))
	}
	if s.nodePorts, err = openNodePorts(ctx, s.etcd, c.EtcdPrefix, c.NodePortRange); err != nil {
		return err
	}
	if s.alloc, err = servicealloc.New(servicealloc.Config{
		Allocators:  allocators,
		NodePorts:   s.allocMetrics.WrapPorts(s.nodePorts),
		StartClosed: true,
	}); err != nil {
		return err
	}
	return nil
}

// newStores builds the stores of the core/v1 and networking.k8s.io/v1
// resources, by resource, and makes them the in-process sources.
func (c CompletedConfig) newStores(s *Server, getter *restOptionsGetter, ipREST *ipaddresses.REST) (core, networking map[string]rest.Storage, err error) {
	nsREST, err := namespaces.NewREST(Scheme, getter)
	if err != nil {
		return nil, nil, err
	}
	svcREST, svcStatus, err := services.NewREST(Scheme, getter, s.alloc, nsREST.Check, s.fencer(), c.staticHint(s))
	if err != nil {
		return nil, nil, err
	}
	evREST, err := events.NewREST(Scheme, getter, nsREST.Check)
	if err != nil {
		return nil, nil, err
	}
	overlaps, err := c.serviceCIDROverlaps(s)
	if err != nil {
		return nil, nil, err
	}
	cidrREST, cidrStatus, err := servicecidrs.NewREST(Scheme, getter, servicecidrs.Policy{
		Guardrails:       c.ServiceCIDRGuardrails,
		WarnOverlaps:     c.ServiceCIDROverlapWarnings,
		LifecycleIgnored: !ipallocator.HonoursLifecycles(c.Model),
	}, overlaps)
	if err != nil {
		return nil, nil, err
	}

	if err := getter.setInformerSources(s, svcREST, ipREST); err != nil {
		return nil, nil, err
	}
	s.sources.namespaces.set(nsREST)
	s.sources.serviceCIDRs.set(cidrREST)

	nsREST.OnDelete(func(ctx context.Context, namespace string) error {
		ctx = request.WithNamespace(ctx, namespace)
		for _, store := range []rest.CollectionDeleter{svcREST, evREST} {
			if _, err := store.DeleteCollection(ctx, rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}, &metainternalversion.ListOptions{}); err != nil {
				return err
			}
		}
		return nil
	})

	core = map[string]rest.Storage{
		"services":        svcREST,
		"services/status": svcStatus,
		"namespaces":      nsREST,
		"events":          evREST,
	}
	networking = map[string]rest.Storage{
		"ipaddresses":         ipREST,
		"servicecidrs":        cidrREST,
		"servicecidrs/status": cidrStatus,
	}
	return core, networking, nil
}

// serviceCIDROverlaps is the index of the ServiceCIDR store's overlap
// warnings, kept from the server's ServiceCIDR informer (openBackend
// started it; it syncs once the store exists and serves): nil when the
// server sends no such warning.
func (c CompletedConfig) serviceCIDROverlaps(s *Server) (*servicecidrs.Overlaps, error) {
	if !c.ServiceCIDROverlapWarnings || s.informers == nil {
		return nil, nil
	}
	return servicecidrs.NewOverlaps(s.informers.Networking().V1().ServiceCIDRs().Informer())
}

// installAPIGroups serves the core and networking stores, by resource, as
// core/v1 and networking.k8s.io/v1.
func (s *Server) installAPIGroups(coreStores, networkingStores map[string]rest.Storage) error {
	core := genericapiserver.NewDefaultAPIGroupInfo("", Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	core.VersionedResourcesStorageMap["v1"] = coreStores
	if err := s.generic.InstallLegacyAPIGroup(genericapiserver.DefaultLegacyAPIPrefix, &core); err != nil {
		return fmt.Errorf("install core/v1: %w", err)
	}
	networking := genericapiserver.NewDefaultAPIGroupInfo(networkingv1.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	// Only v1 is served; v1beta1 is in Scheme for decoding what
	// kube-apiserver 1.33 stored (internal/storageversion).
	networking.PrioritizedVersions = []schema.GroupVersion{networkingv1.SchemeGroupVersion}
	networking.VersionedResourcesStorageMap["v1"] = networkingStores
	if err := s.generic.InstallAPIGroup(&networking); err != nil {
		return fmt.Errorf("install networking.k8s.io/v1: %w", err)
	}
	return nil
}

// addPostStartHooks adds the hooks that run once the server serves: the
// bootstrap, the ServiceCIDR and repair controllers and the scope check.
func (s *Server) addPostStartHooks() error {
	if err := s.generic.AddPostStartHook("allocator-bootstrap", func(hc genericapiserver.PostStartHookContext) error {
		return s.runBootstrap(hc.Context, hc.LoopbackClientConfig)
	}); err != nil {
		return err
	}
	if err := s.generic.AddPostStartHook("allocator-servicecidr-controller", s.startServiceCIDRController); err != nil {
		return err
	}
	if err := s.generic.AddPostStartHook("allocator-repair-controller", s.startRepairController); err != nil {
		return err
	}
	if err := s.generic.AddPostStartHook("allocator-scope-check", s.checkScopes); err != nil {
		return err
	}
	return nil
}

// healthTimeout and readyTimeout bound the etcd reads of the etcd and
// etcd-readiness checks, as kube-apiserver's --etcd-healthcheck-timeout and
// --etcd-readycheck-timeout defaults do.
const (
	healthTimeout = 2 * time.Second
	readyTimeout  = 2 * time.Second
)

// readiness is implemented by allocators that load state asynchronously
// (the IPAddress model's informers).
type readiness interface{ Ready() bool }

// addHealthChecks adds etcd to /healthz, /livez and /readyz, and the
// allocators to /readyz: not ready until bootstrap opened them and their
// caches are synced. The etcd checks run until ctx ends.
func (s *Server) addHealthChecks(ctx context.Context) error {
	health := etcdlayout.Layout{Prefix: s.cfg.EtcdPrefix}.Root() + "/health"
	if s.cfg.InProcessEtcd == nil {
		go newEtcdReach(s.etcd, s.cfg.EtcdServers, logger(ctx).WithName("etcd")).run(ctx)
	}
	if err := s.generic.AddHealthChecks(&etcdGetCheck{name: "etcd", kv: s.etcd.KV, key: health, timeout: healthTimeout}); err != nil {
		return err
	}
	return s.generic.AddReadyzChecks(
		&etcdGetCheck{name: "etcd-readiness", kv: s.etcd.KV, key: health, timeout: readyTimeout},
		newEtcdAlarmCheck(s.etcd, logger(ctx)), // etcd-alarms: NOSPACE and other alarms (health_etcd.go)
		healthz.NamedCheck("clusterip-repair", func(*http.Request) error {
			select {
			case <-s.repairFirstPass:
				return nil
			default:
				return errors.New("the ClusterIP repair controller has not completed a pass yet")
			}
		}),
		healthz.NamedCheck("allocators", func(*http.Request) error {
			if !s.open.Load() {
				return errors.New("allocations not rebuilt yet")
			}
			for _, a := range s.allocators {
				if r, ok := a.(readiness); ok && !r.Ready() {
					return fmt.Errorf("allocator (IPv6=%v) not ready", a.IPv6())
				}
			}
			return nil
		}),
	)
}

// startServiceCIDRController runs the ServiceCIDR controller until the
// server stops. The hook returns at once; a failure to build the controller
// is logged and not fatal (ServiceCIDRs then keep no finalizer). Its work
// starts after the ClusterIP repair's first pass (afterFirstRepairPass),
// as the node-port repair's does: readiness does not wait for it (a
// ServiceCIDR without a Ready condition is served), and at 100,000
// Services its start-up checks of the ServiceCIDRs being deleted would take
// CPU from the work readiness waits for. Until then its queue only collects
// ServiceCIDR names.
func (s *Server) startServiceCIDRController(hc genericapiserver.PostStartHookContext) error {
	ctx := hc.Context
	client, err := controllerClient(hc.LoopbackClientConfig)
	if err != nil {
		logger(ctx).Error(err, "ServiceCIDR controller cannot build a client")
		return nil
	}
	// The controller's ServiceCIDR handler asks for a one-minute resync; an
	// informer built without a resync period ignores that (and warns "the
	// specified resyncPeriod is invalid" at every start). IPAddresses need none.
	factory := s.informers
	ctrl, err := servicecidr.New(client, factory.Networking().V1().ServiceCIDRs(), factory.Networking().V1().IPAddresses(),
		servicecidr.WithLiveNames(etcdLiveNames{
			etcd: s.etcd, layout: etcdlayout.Layout{Prefix: s.cfg.EtcdPrefix},
			list: servicecidr.ListNames{Lister: s.ipAddresses},
		}))
	if err != nil {
		logger(ctx).Error(err, "ServiceCIDR controller not started")
		return nil
	}
	s.controllers.run(ctx, func(ctx context.Context) {
		if !s.afterFirstRepairPass(ctx, firstPassWait) {
			return
		}
		if err := ctrl.Run(ctx, 2); err != nil && ctx.Err() == nil {
			logger(ctx).Error(err, "ServiceCIDR controller stopped")
		}
	})
	return nil
}

// ErrEtcdRestored ends Run when etcd's history went back under the server:
// etcd was restored from a backup, or replaced (internal/etcdhistory).
var ErrEtcdRestored = etcdhistory.ErrRestored

// Run serves until ctx is cancelled, then shuts down cleanly. It also stops,
// returning an error wrapping ErrEtcdRestored, when etcd's history goes
// backwards under it (internal/etcdhistory).
func (s *Server) Run(ctx context.Context) (runErr error) {
	defer s.etcd.Close()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go s.history.Watch(ctx, s.cfg.RestoreCheckInterval)
	go s.listHolds.Run(ctx)
	go s.sources.requestProgress(ctx, progressEvery(compactsEvery(s.cfg.CompactionInterval)))
	go func() {
		select {
		case <-ctx.Done():
		case <-s.history.Restored():
			err := s.history.Err()
			logger(ctx).Error(err, "Stopping: every cache describes a state etcd no longer has; restart the server (a supervisor does) so it starts from what etcd holds now")
			stop(err)
		}
	}()
	defer func() {
		// Reached after the generic server stopped, on any path.
		if cause := context.Cause(ctx); errors.Is(cause, ErrEtcdRestored) && runErr == nil {
			runErr = cause
		}
	}()
	if s.transition != nil {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := s.transition.Close(cctx); err != nil {
				logger(ctx).Info("Removing this replica's transition record failed; it expires with its lease", "err", err)
			}
		}()
	}
	defer context.AfterFunc(ctx, s.watches.stop)()
	// On shutdown, the controllers stop first and their last requests
	// finish; then Service writes in progress finish, with their releases,
	// while the server still serves (the IPAddress model releases through
	// its own API); new ones are refused with 503 meanwhile. Only then does
	// the generic server stop: a SIGTERM during deletes would otherwise
	// leave addresses held without a Service.
	serving, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	go func() {
		select {
		case <-ctx.Done():
		case <-serving.Done():
			return
		}
		dctx, cancel := context.WithTimeout(serving, drainTimeout)
		defer cancel()
		cctx, cancelStop := context.WithTimeout(dctx, controllerStopTimeout)
		if err := s.controllers.stop(cctx); err != nil {
			logger(ctx).Info("Stopping with a controller's request in progress", "err", err)
		}
		cancelStop()
		if err := s.alloc.Drain(dctx); err != nil {
			logger(ctx).Info("Stopping with Service writes in progress; repair frees what they leave", "err", err)
		}
		stopServing()
	}()
	if err := s.generic.PrepareRun().RunWithContext(serving); err != nil {
		return err
	}
	s.saveWarmStart(ctx)
	return nil
}

// controllerStopTimeout bounds how long a shutdown waits for the
// controllers' last requests, out of drainTimeout.
const controllerStopTimeout = 10 * time.Second

// drainTimeout bounds how long a shutdown waits for Service writes in
// progress (each release is bounded by 30 s on its own).
const drainTimeout = 30 * time.Second

// Allocator returns the Service allocator the registry uses.
func (s *Server) Allocator() *servicealloc.Allocator { return s.alloc }

// Started is closed once the start-up /readyz waits for is over: bootstrap
// done, and the ClusterIP repair's first pass (at once when no repair runs).
func (s *Server) Started() <-chan struct{} { return s.started }

// LoopbackClientConfig returns a client config with full rights, for
// in-process callers.
func (s *Server) LoopbackClientConfig() *restclient.Config {
	return restclient.CopyConfig(s.generic.LoopbackClientConfig)
}

// logger returns the logger of ctx with the server's name.
func logger(ctx context.Context) klog.Logger { return klog.FromContext(ctx).WithName("allocator") }

// reconnectParams make an etcd client reconnect within 2 s of etcd answering
// again: gRPC's default backoff grows to two minutes while etcd is down,
// which kept the allocators and the restore check (internal/etcdhistory) blind long
// after a restarted or restored etcd was back.
var reconnectParams = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// etcdClient is the server's own etcd client (allocation maps, transition
// records, the restore check): in process for an etcd in this process, else
// gRPC to EtcdServers.
func (c CompletedConfig) etcdClient(ctx context.Context) (*clientv3.Client, error) {
	if c.InProcessEtcd != nil {
		return c.InProcessEtcd.InProcessClient(), nil
	}
	etcdTLS, err := c.EtcdTLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	etcdClient, err := clientv3.New(clientv3.Config{
		Endpoints:   c.EtcdServers,
		DialTimeout: 10 * time.Second,
		TLS:         etcdTLS,
		Logger:      embedetcd.KlogLogger(logger(ctx).WithName("etcd-client")),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(reconnectParams)},
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd %v: %w", c.EtcdServers, err)
	}
	return etcdClient, nil
}
