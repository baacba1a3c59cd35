package ipaddress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
	"github.com/allocator/allocator/pkg/ipaddress/prefixindex"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/subrange"
)

// Labels and values every IPAddress created by this allocator carries, as
// kube-apiserver writes them.
const (
	LabelIPFamily  = "ipaddress.kubernetes.io/ip-family"
	LabelManagedBy = "ipaddress.kubernetes.io/managed-by"
	ManagedBy      = "ipallocator.k8s.io"
)

// DefaultMaxCollisions bounds how many taken candidates one AllocateNext call
// moves past before it gives up with ErrTooManyCollisions: an Allocator's
// candidates (Config.MaxCollisions overrides it), and dual write's bitmap
// candidates that an IPAddress already held (package dualwrite).
const DefaultMaxCollisions = 16

// Config is what New needs.
type Config struct {
	// Client talks to the API server that stores IPAddresses and ServiceCIDRs.
	Client kubernetes.Interface
	// IPv6 selects the family this allocator serves.
	IPv6 bool
	// Informers is an optional shared factory on Client (so that the two
	// families of a dual-stack server share one watch). Nil: New makes one.
	// New registers its informers and calls Start, which only starts
	// informers not yet running.
	Informers informers.SharedInformerFactory
	// MaxCollisions: see DefaultMaxCollisions; zero means the default.
	MaxCollisions int
	// Objects is where IPAddress objects are read, created and deleted
	// (the claims and releases); nil: Client's. The server passes its own
	// storage, so a claim is no second API request over loopback.
	Objects Objects
	// Namespaces reads a namespace the cache does not hold yet, for scoped
	// ServiceCIDRs; nil: Client's.
	Namespaces NamespaceGetter
	// OnRefused, if set, is called (without any lock held) once for every
	// ServiceCIDR CIDR that becomes refused, e.g. an IPv6 prefix shorter than
	// /64, so the server can record a condition or an event.
	OnRefused func(RefusedCIDR)
}

// Objects reads, creates and deletes IPAddress objects. client-go's typed
// client satisfies it (the standalone job, a remote API server); so does the
// API server's own storage (internal/registry/ipaddresses.REST.InProcess), which
// claims without a loopback request: no authentication, encoding, HTTP or
// admission, the same strategy, validation and etcd write.
type Objects interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*networkingv1.IPAddress, error)
	Create(ctx context.Context, obj *networkingv1.IPAddress, opts metav1.CreateOptions) (*networkingv1.IPAddress, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Allocator is one family's meta-allocator over every ready ServiceCIDR. It
// implements allocation.Interface. See the package doc for its invariants.
type Allocator struct {
	objects       Objects
	services      Services
	ipv6          bool
	maxCollisions int
	onRefused     func(RefusedCIDR)
	logger        klog.Logger

	ipLister   networkinglisters.IPAddressLister
	ipIndexer  cache.Indexer // ipLister's, with the addrindex index
	cidrLister networkinglisters.ServiceCIDRLister
	nsLister   corelisters.NamespaceLister
	namespaces NamespaceGetter
	// hasScopes: some served range is carried by a scoped ServiceCIDR, so
	// requests with Owner.Scoped are routed (scopes.go).
	hasScopes atomic.Bool

	ready   atomic.Bool
	readyCh chan struct{}
	// stale: a ServiceCIDR event came since the ranges were built
	// (changed); dirty names the ServiceCIDRs it came for, dirtyAll says
	// one could not be named; rebuildCh wakes the rebuild loop.
	stale     atomic.Bool
	dirtyMu   sync.Mutex
	dirty     map[string]bool
	dirtyAll  bool
	rebuildCh chan struct{}
	collided  atomic.Uint64
	readyOnce sync.Once

	mu sync.Mutex
	// ranges are the served ranges in allocation order, each with its index;
	// lookup, kept with them, finds those that hold an address, byPrefix
	// the one of a prefix, closed those whose own mode is not automatic
	// (lifecycle.go). served is what each ServiceCIDR gives them, by name
	// (served.go).
	ranges   []*cidrRange
	lookup   rangeLookup
	byPrefix map[netip.Prefix]*cidrRange
	closed   *prefixindex.Index[*cidrRange]
	served   map[string]*served
	// fullBefore is a position in ranges before which every range is
	// full or takes no dynamic pick (its lifecycle): a pick over all of
	// them starts there. Ranges fill in order, so a pick that asked each
	// full one in turn would make every create cost more the fuller the
	// cluster; with it, no step of a create grows with the fill (the
	// paired runs of hack/scale.sh, docs/performance.md). markLocked
	// lowers it when it frees an address of an earlier range, and a
	// change of the ranges to the first place it touches (served.go).
	fullBefore int
	// unscoped and scopedRanges split ranges by their carriers' scopes
	// (splitScopesLocked); unscopedFull is fullBefore's place in unscoped,
	// where a routed pick that may use them starts.
	unscoped, scopedRanges []*cidrRange
	unscopedFull           int
	// scopeIdx files the scoped ranges' carriers by the namespace labels
	// they select (scopeindex.go).
	scopeIdx scopeIndex
	// inflight are the addresses this process is claiming right now; they
	// are marked used in every index that contains them.
	inflight map[netip.Addr]*reservation
	// unobserved are addresses this process claimed whose add event the
	// informer has not delivered yet. A range index built from the cache in
	// that window (a ServiceCIDR added) marks them too, or it would offer
	// an address that is taken.
	unobserved map[netip.Addr]bool
	// refused are the CIDRs of ready ServiceCIDRs that are not served.
	refused []RefusedCIDR
}

var _ allocation.Interface = (*Allocator)(nil)

// New registers informers on cfg.Client, starts them with ctx as their owner
// and returns at once. The allocator answers ErrNotReady until the informers
// have synced; cancel ctx to stop it.
func New(ctx context.Context, cfg Config) (*Allocator, error) {
	if cfg.Client == nil {
		return nil, errors.New("ipaddress allocator: no client")
	}
	factory := cfg.Informers
	if factory == nil {
		factory = informers.NewSharedInformerFactory(cfg.Client, 0)
	}
	objects := cfg.Objects
	if objects == nil {
		objects = cfg.Client.NetworkingV1().IPAddresses()
	}
	namespaces := cfg.Namespaces
	if namespaces == nil {
		namespaces = cfg.Client.CoreV1().Namespaces()
	}
	a := &Allocator{
		objects:       objects,
		namespaces:    namespaces,
		services:      ServicesOf(cfg.Client), // a release asks it of an IPAddress not the owner's
		ipv6:          cfg.IPv6,
		maxCollisions: cfg.MaxCollisions,
		onRefused:     cfg.OnRefused,
		logger:        klog.FromContext(ctx).WithValues("allocator", model.IPAddress.String(), "family", subrange.FamilyName(cfg.IPv6)),
		readyCh:       make(chan struct{}),
		rebuildCh:     make(chan struct{}, 1),
		inflight:      map[netip.Addr]*reservation{},
		unobserved:    map[netip.Addr]bool{},
	}
	if a.maxCollisions <= 0 {
		a.maxCollisions = DefaultMaxCollisions
	}
	ipInf := factory.Networking().V1().IPAddresses()
	cidrInf := factory.Networking().V1().ServiceCIDRs()
	nsInf := factory.Core().V1().Namespaces()
	a.ipLister, a.cidrLister, a.nsLister = ipInf.Lister(), cidrInf.Lister(), nsInf.Lister()
	a.ipIndexer = ipInf.Informer().GetIndexer()
	if err := addrindex.Add(ipInf.Informer()); err != nil {
		return nil, fmt.Errorf("ipaddress allocator: %w", err)
	}
	nsSynced := nsInf.Informer().HasSynced

	ipReg, err := ipInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.addIPAddress,
		DeleteFunc: a.deleteIPAddress,
	})
	if err != nil {
		return nil, fmt.Errorf("ipaddress allocator: watch IPAddresses: %w", err)
	}
	cidrReg, err := cidrInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.addServiceCIDR,
		UpdateFunc: a.updateServiceCIDR,
		DeleteFunc: a.deleteServiceCIDR,
	})
	if err != nil {
		return nil, fmt.Errorf("ipaddress allocator: watch ServiceCIDRs: %w", err)
	}
	factory.Start(ctx.Done())
	go a.becomeReady(ctx, ipReg.HasSynced, cidrReg.HasSynced, nsSynced)
	go a.rebuildLoop(ctx)
	return a, nil
}

// maxLoggedRanges is how many of its ranges the ready line names.
const maxLoggedRanges = 4

// becomeReady waits until every synced reports true, then builds the ranges
// from the caches and marks the allocator ready. It gives up when ctx ends.
func (a *Allocator) becomeReady(ctx context.Context, synced ...cache.InformerSynced) {
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	a.mu.Lock()
	a.ready.Store(true)
	newlyRefused := a.rebuildLocked()
	a.mu.Unlock()
	a.readyOnce.Do(func() { close(a.readyCh) })
	a.report(newlyRefused)
	// The count and the first few: a server of 10,000 ServiceCIDRs would log
	// every one of them on one line.
	ranges := a.Ranges()
	a.logger.V(2).Info("IPAddress allocator ready", "ranges", len(ranges), "first", ranges[:min(len(ranges), maxLoggedRanges)])
}

// Ready reports whether the informers have synced.
func (a *Allocator) Ready() bool { return a.ready.Load() }

// WaitReady blocks until the allocator is ready or ctx ends.
func (a *Allocator) WaitReady(ctx context.Context) error {
	select {
	case <-a.readyCh:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for IPAddress allocator: %w", ctx.Err())
	}
}

// IPv6 reports the family this allocator serves.
func (a *Allocator) IPv6() bool { return a.ipv6 }
