package ipaddress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/addrindex"
	"github.com/allocator/allocator/pkg/allocation"
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
// moves past before it gives up with ErrTooManyCollisions.
const DefaultMaxCollisions = 16

// releaseAttempts bounds Release's get/conditional-delete loop when the
// object keeps changing under it.
const releaseAttempts = 3

// ErrTooManyCollisions is returned by AllocateNext when more than the
// configured number of candidates turned out to be taken by others.
var ErrTooManyCollisions = errors.New("too many collisions allocating an IP address")

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
// API server's own storage (pkg/registry/ipaddresses.REST.InProcess), which
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

	ready     atomic.Bool
	readyCh   chan struct{}
	collided  atomic.Uint64
	readyOnce sync.Once

	mu sync.Mutex
	// ranges are the served ranges in allocation order, each with its index;
	// lookup, built with them, finds by position those that hold an address.
	ranges []*cidrRange
	lookup rangeLookup
	// fullBefore is a position in ranges before which every range is
	// full: a pick over all of them starts there. Ranges fill in order, and
	// at 90% fill of a thousand ServiceCIDRs asking each full one in turn
	// was the one cost of a create that grew with the fill. markLocked
	// lowers it when it frees an address of an earlier range;
	// setRangesLocked zeroes it.
	fullBefore int
	// unscoped and scopedRanges split ranges by their carriers' scopes
	// (splitScopesLocked).
	unscoped, scopedRanges []*cidrRange
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

// cidrRange is the per-CIDR allocator state: its range, order key and index.
type cidrRange struct {
	activeRange
	index *FreeIndex
}

// rangeLookup finds the served ranges whose prefix holds an address by the
// address's prefix at each length in use, not by looking at every range:
// an informer event or a claim marks its address in each, and with a
// thousand ServiceCIDRs that look was a thirtieth of a create's CPU.
type rangeLookup struct {
	byPrefix map[netip.Prefix][]int // positions in the ranges it was built from
	lengths  []int                  // the prefix lengths of the ranges, each once
}

func newRangeLookup(ranges []*cidrRange) rangeLookup {
	l := rangeLookup{byPrefix: make(map[netip.Prefix][]int, len(ranges))}
	for i, r := range ranges {
		p := r.rng.Prefix().Masked()
		l.byPrefix[p] = append(l.byPrefix[p], i)
		if !slices.Contains(l.lengths, p.Bits()) {
			l.lengths = append(l.lengths, p.Bits())
		}
	}
	return l
}

// appendHolding appends to dst the positions of the ranges whose prefix
// holds ip (its network and broadcast addresses included: the caller asks
// the range).
func (l rangeLookup) appendHolding(dst []int, ip netip.Addr) []int {
	for _, bits := range l.lengths {
		if p, err := ip.Prefix(bits); err == nil {
			dst = append(dst, l.byPrefix[p]...)
		}
	}
	return dst
}

// reservation records what the informer said about an in-flight address
// while it was being claimed.
type reservation struct {
	seen   bool // an informer event for the address arrived
	exists bool // the last such event was an add
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
		ipv6:          cfg.IPv6,
		maxCollisions: cfg.MaxCollisions,
		onRefused:     cfg.OnRefused,
		logger:        klog.FromContext(ctx).WithValues("allocator", "ipaddress", "family", familyOf(cfg.IPv6)),
		readyCh:       make(chan struct{}),
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
		AddFunc:    func(obj any) { a.observe(obj, true) },
		DeleteFunc: func(obj any) { a.observe(obj, false) },
	})
	if err != nil {
		return nil, fmt.Errorf("ipaddress allocator: watch IPAddresses: %w", err)
	}
	cidrReg, err := cidrInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if concerns(obj, a.ipv6) {
				a.cidrsChanged()
			}
		},
		UpdateFunc: func(old, obj any) {
			if changeConcerns(old, obj, a.ipv6) {
				a.cidrsChanged()
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if concerns(obj, a.ipv6) {
				a.cidrsChanged()
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ipaddress allocator: watch ServiceCIDRs: %w", err)
	}
	factory.Start(ctx.Done())
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), ipReg.HasSynced, cidrReg.HasSynced, nsSynced) {
			return
		}
		a.mu.Lock()
		a.ready.Store(true)
		newlyRefused := a.rebuildLocked()
		a.mu.Unlock()
		a.readyOnce.Do(func() { close(a.readyCh) })
		a.report(newlyRefused)
		a.logger.V(2).Info("IPAddress allocator ready", "ranges", a.Ranges())
	}()
	return a, nil
}

func familyOf(ipv6 bool) string {
	if ipv6 {
		return "IPv6"
	}
	return "IPv4"
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

// Collisions is how many candidates AllocateNext found already taken (by
// another replica or a stale cache) since the allocator started.
func (a *Allocator) Collisions() uint64 { return a.collided.Load() }

// Ranges returns the served prefixes in allocation order.
func (a *Allocator) Ranges() []netip.Prefix {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]netip.Prefix, len(a.ranges))
	for i, r := range a.ranges {
		out[i] = r.rng.Prefix()
	}
	return out
}

// CIDROf returns the first served prefix, in allocation order, that
// contains ip, or the first served prefix when none does; false when no
// prefix is served. It copies nothing: the metrics name the CIDR of every
// allocation with it, and a copy of the ranges per call (Ranges) was a
// tenth of the bytes the server allocated at 1,000 ServiceCIDRs.
func (a *Allocator) CIDROf(ip netip.Addr) (netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ranges) == 0 {
		return netip.Prefix{}, false
	}
	first := len(a.ranges) // none holds ip
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		if i < first && a.ranges[i].rng.Contains(ip) {
			first = i
		}
	}
	if first == len(a.ranges) {
		first = 0
	}
	return a.ranges[first].rng.Prefix(), true
}

// Refused returns the CIDRs of ready ServiceCIDRs of this family that are not
// served, with the reason.
func (a *Allocator) Refused() []RefusedCIDR {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.refused)
}

// IPv6 reports the family this allocator serves.
func (a *Allocator) IPv6() bool { return a.ipv6 }

// --- informer side ---

func (a *Allocator) observe(obj any, exists bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ipObj, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	ip, err := subrange.ParseAddr(ipObj.Name)
	if err != nil || ip.Is6() != a.ipv6 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.inflight[ip]; r != nil {
		// The claim in progress keeps the address marked; finish applies
		// the last event seen.
		r.seen, r.exists = true, exists
		return
	}
	delete(a.unobserved, ip)
	a.markLocked(ip, exists)
}

func (a *Allocator) cidrsChanged() {
	if !a.ready.Load() {
		return // the first rebuild runs once everything has synced
	}
	a.mu.Lock()
	newlyRefused := a.rebuildLocked()
	a.mu.Unlock()
	a.report(newlyRefused)
}

func (a *Allocator) report(refused []RefusedCIDR) {
	for _, r := range refused {
		a.logger.Error(r.Err, "ServiceCIDR not served", "serviceCIDR", r.ServiceCIDR, "cidr", r.CIDR)
		if a.onRefused != nil {
			a.onRefused(r)
		}
	}
}

// rebuildLocked recomputes the served ranges from the ServiceCIDR cache. It
// keeps the index of every prefix still served and builds new ones from the
// IPAddress cache plus the in-flight claims. It returns the CIDRs refused now
// that were not refused before.
func (a *Allocator) rebuildLocked() []RefusedCIDR {
	cidrs, err := a.cidrLister.List(labels.Everything())
	if err != nil {
		a.logger.Error(err, "list ServiceCIDRs from cache")
		return nil
	}
	active, refused := selectRanges(cidrs, a.ipv6)
	old := make(map[netip.Prefix]*FreeIndex, len(a.ranges))
	for _, r := range a.ranges {
		old[r.rng.Prefix()] = r.index
	}
	ranges := make([]*cidrRange, 0, len(active))
	for _, ar := range active {
		idx := old[ar.rng.Prefix()]
		if idx == nil {
			if idx, err = NewFreeIndex(ar.rng); err != nil {
				a.logger.Error(err, "build free index", "cidr", ar.rng.Prefix())
				continue
			}
			for _, ip := range a.cachedAddrs(ar.rng.Prefix()) {
				idx.Set(ip)
			}
			for ip := range a.inflight {
				idx.Set(ip)
			}
			for ip := range a.unobserved {
				idx.Set(ip)
			}
		}
		ranges = append(ranges, &cidrRange{activeRange: ar, index: idx})
	}
	a.setRangesLocked(ranges)

	var fresh []RefusedCIDR
	for _, r := range refused {
		if !slices.ContainsFunc(a.refused, func(o RefusedCIDR) bool {
			return o.ServiceCIDR == r.ServiceCIDR && o.CIDR == r.CIDR
		}) {
			fresh = append(fresh, r)
		}
	}
	a.refused = refused
	return fresh
}

// cachedAddrs returns the addresses of the cached IPAddresses inside p:
// those of its blocks in the addrindex index, not a read of every
// IPAddress (a ServiceCIDR added at 100,000 IPAddresses); the whole
// family's (familyPrefix) is a scan.
func (a *Allocator) cachedAddrs(p netip.Prefix) []netip.Addr {
	objs, err := addrindex.In(a.ipIndexer, []netip.Prefix{p})
	if err != nil {
		a.logger.Error(err, "list IPAddresses from cache", "cidr", p)
		return nil
	}
	out := make([]netip.Addr, 0, len(objs))
	for _, o := range objs {
		if ip, err := subrange.ParseAddr(o.Name); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// familyPrefix is the prefix of every address of one family.
func familyPrefix(ipv6 bool) netip.Prefix {
	if ipv6 {
		return netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	return netip.PrefixFrom(netip.IPv4Unspecified(), 0)
}

// setRangesLocked makes ranges the served ones, with what is derived from
// them.
func (a *Allocator) setRangesLocked(ranges []*cidrRange) {
	a.ranges = ranges
	a.lookup = newRangeLookup(ranges)
	a.fullBefore = 0
	a.splitScopesLocked()
}

// markLocked sets or clears ip in every served index that contains it, so
// overlapping ranges agree.
func (a *Allocator) markLocked(ip netip.Addr, used bool) {
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		r := a.ranges[i]
		if used {
			r.index.Set(ip)
		} else if r.index.Clear(ip) && i < a.fullBefore {
			a.fullBefore = i
		}
	}
}

// pickLocked returns the first candidate of the first of ranges that has a
// free address. all says ranges are all the served ones (a.ranges), not a
// scope's: the pick then starts at fullBefore, and moves it past the full
// ranges it finds before any excluded one.
func (a *Allocator) pickLocked(ranges []*cidrRange, all bool, excluded Excluded) (netip.Addr, bool) {
	start := 0
	if all {
		start = a.fullBefore
	}
	for i := start; i < len(ranges); i++ {
		r := ranges[i]
		if excluded != nil && excluded.ContainsPrefix(r.rng.Prefix()) {
			all = false // not full, perhaps: the hint stops here
			continue
		}
		if ip, ok := r.index.Next(); ok {
			return ip, true
		}
		if all && r.index.Free() == 0 {
			a.fullBefore = i + 1
		} else {
			all = false
		}
	}
	return netip.Addr{}, false
}

func (a *Allocator) containsLocked(ip netip.Addr) bool {
	var buf [4]int
	for _, i := range a.lookup.appendHolding(buf[:0], ip) {
		if a.ranges[i].rng.Contains(ip) {
			return true
		}
	}
	return false
}

// reserveLocked marks ip used and in flight. The caller must not hold a
// reservation for ip already.
func (a *Allocator) reserveLocked(ip netip.Addr) {
	a.inflight[ip] = &reservation{}
	a.markLocked(ip, true)
}

// finish ends the claim of ip. If the informer reported on ip meanwhile, its
// last word wins; otherwise the address exists when the create succeeded or
// collided (its add event is still on the way), and does not otherwise.
func (a *Allocator) finish(ip netip.Addr, createErr error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.inflight[ip]
	delete(a.inflight, ip)
	exists := createErr == nil || apierrors.IsAlreadyExists(createErr)
	if r != nil && r.seen {
		exists = r.exists
	} else if exists {
		a.unobserved[ip] = true
	}
	a.markLocked(ip, exists)
}

// NoServiceCIDRError is returned by AllocateNext when no ready ServiceCIDR
// serves the family: every one is being deleted, or none exists. It is not
// "range is full": the fix is a ServiceCIDR, not fewer Services.
type NoServiceCIDRError struct {
	Family string
	// Terminating names the ServiceCIDRs of the family being deleted.
	Terminating []string
	// ScopedElsewhere names the scoped ServiceCIDRs of the family when
	// every served range is scoped to other Services than the requester.
	ScopedElsewhere []string
}

func (e *NoServiceCIDRError) Error() string {
	if len(e.ScopedElsewhere) > 0 {
		verb := "are"
		if len(e.ScopedElsewhere) == 1 {
			verb = "is"
		}
		return fmt.Sprintf("no ready ServiceCIDR serves %s addresses to this Service: ServiceCIDR %s %s scoped to other Services, and no unscoped one serves %s",
			e.Family, allocation.QuoteNames(e.ScopedElsewhere), verb, e.Family)
	}
	msg := "no ready ServiceCIDR serves " + e.Family + " addresses"
	if len(e.Terminating) > 0 {
		msg += fmt.Sprintf(" (ServiceCIDR %s is being deleted and serves no new allocations; "+
			"create another ServiceCIDR to allocate meanwhile)", strings.Join(e.Terminating, ", "))
	}
	return msg
}

func (a *Allocator) noServiceCIDR() error {
	e := &NoServiceCIDRError{Family: familyOf(a.ipv6)}
	cidrs, err := a.cidrLister.List(labels.Everything())
	if err != nil {
		return e
	}
	for _, sc := range cidrs {
		if sc.DeletionTimestamp == nil {
			continue
		}
		for _, text := range sc.Spec.CIDRs {
			if p, err := subrange.ParsePrefix(text); err == nil && p.Addr().Is6() == a.ipv6 {
				e.Terminating = append(e.Terminating, fmt.Sprintf("%q", sc.Name))
				break
			}
		}
	}
	slices.Sort(e.Terminating)
	return e
}

// --- allocation.Interface ---

// Allocate claims ip for owner by creating its IPAddress. It returns
// allocation.ErrMismatchedNetwork when ip is in no served range and
// allocation.ErrAllocated when the IPAddress exists or another call of this
// process is claiming it. The cache is not trusted to refuse: a static
// request always asks the API server.
func (a *Allocator) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	if !a.ready.Load() {
		return allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return fmt.Errorf("allocate %s for service %s: %w", ip, owner, err)
	}
	a.mu.Lock()
	if !ip.IsValid() || ip.Is6() != a.ipv6 || !a.containsLocked(ip) {
		a.mu.Unlock()
		return allocation.ErrMismatchedNetwork
	}
	if err := a.checkScopeLocked(ip, routed, nsLabels, svcLabels); err != nil {
		a.mu.Unlock()
		return err
	}
	if a.inflight[ip] != nil {
		a.mu.Unlock()
		return allocation.ErrAllocated
	}
	a.reserveLocked(ip)
	a.mu.Unlock()

	err = a.create(ctx, ip, owner)
	a.finish(ip, err)
	switch {
	case err == nil:
		return nil
	case apierrors.IsAlreadyExists(err):
		return allocation.ErrAllocated
	default:
		return fmt.Errorf("allocate %s for service %s: %w", ip, owner, err)
	}
}

// AllocateNext claims a free address for owner: candidates come from the
// first range, in allocation order, with a free address; a candidate taken
// meanwhile (AlreadyExists) is skipped, at most MaxCollisions times; any
// other API error aborts at once.
func (a *Allocator) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	return a.allocateNext(ctx, owner, nil)
}

// AllocateNextOutside is AllocateNext restricted to addresses that excluded
// does not contain: a served range lying wholly inside excluded is passed
// over, and a candidate inside it counts as a collision. The dual write uses
// it once the bitmap's window is full, so that an address the bitmap
// governs is never claimed without its bit.
func (a *Allocator) AllocateNextOutside(ctx context.Context, owner allocation.Owner, excluded Excluded) (netip.Addr, error) {
	return a.allocateNext(ctx, owner, excluded)
}

// Excluded is a set of addresses AllocateNextOutside must not hand out.
type Excluded interface {
	Contains(netip.Addr) bool
	// ContainsPrefix reports whether every usable address of p is in the set.
	ContainsPrefix(p netip.Prefix) bool
}

func (a *Allocator) allocateNext(ctx context.Context, owner allocation.Owner, excluded Excluded) (netip.Addr, error) {
	if !a.ready.Load() {
		return netip.Addr{}, allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("allocate next for service %s: %w", owner, err)
	}
	for collisions := 0; ; {
		a.mu.Lock()
		candidates, rt := a.candidatesLocked(routed, nsLabels, svcLabels)
		ip, ok := a.pickLocked(candidates, rt == nil, excluded)
		if ok && excluded != nil && excluded.Contains(ip) {
			a.mu.Unlock()
			if collisions++; collisions > a.maxCollisions {
				return netip.Addr{}, fmt.Errorf("allocate next for service %s: %d candidates excluded: %w",
					owner, collisions, ErrTooManyCollisions)
			}
			continue
		}
		if ok {
			a.reserveLocked(ip)
		}
		a.mu.Unlock()
		if !ok {
			return netip.Addr{}, a.nothingFree(rt)
		}
		err := a.create(ctx, ip, owner)
		a.finish(ip, err)
		switch {
		case err == nil:
			return ip, nil
		case apierrors.IsAlreadyExists(err):
			a.collided.Add(1)
			if collisions++; collisions > a.maxCollisions {
				return netip.Addr{}, fmt.Errorf("allocate next for service %s: %d candidates taken: %w",
					owner, collisions, ErrTooManyCollisions)
			}
			a.logger.V(4).Info("candidate taken, trying another", "ip", ip, "collisions", collisions)
		default:
			return netip.Addr{}, fmt.Errorf("allocate %s for service %s: %w", ip, owner, err)
		}
	}
}

func (a *Allocator) create(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	_, err := a.objects.Create(ctx, NewObject(ip, owner), metav1.CreateOptions{})
	return err
}

// Release deletes ip's IPAddress if it still belongs to owner. The delete is
// conditional on the UID and resourceVersion just read, so an object that
// was re-created or re-assigned in between is never removed. Releasing an
// address that is not allocated, belongs to another Service or is of the
// other family is a silent no-op. Release does not need the caches.
func (a *Allocator) Release(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	_, err := a.ReleaseOwned(ctx, ip, owner)
	return err
}

// ReleaseOutcome says what ReleaseOwned found.
type ReleaseOutcome int

const (
	// Released: the IPAddress belonged to the owner and was deleted.
	Released ReleaseOutcome = iota
	// Absent: no IPAddress exists for the address (or it is of the other
	// family).
	Absent
	// OtherOwner: the IPAddress belongs to someone else and was kept.
	OtherOwner
)

// ReleaseOwned is Release reporting what it found, so that a caller keeping
// a second record of the address (the dual-written bitmap) frees that one
// only when the address was the owner's.
func (a *Allocator) ReleaseOwned(ctx context.Context, ip netip.Addr, owner allocation.Owner) (ReleaseOutcome, error) {
	if !ip.IsValid() || ip.Is6() != a.ipv6 {
		return Absent, nil
	}
	var cached *networkingv1.IPAddress
	if a.ready.Load() {
		cached, _ = a.ipLister.Get(ip.String()) // a miss is nil: read live
	}
	outcome, err := deleteOwned(ctx, a.objects, ip, owner, cached)
	if err == nil && outcome == Released {
		a.mu.Lock()
		if a.inflight[ip] == nil {
			delete(a.unobserved, ip)
			a.markLocked(ip, false) // free for reuse before the watch event arrives
		}
		a.mu.Unlock()
	}
	return outcome, err
}

// ExactDeleter is implemented by Objects that can delete an object as the
// caller read it without reading it again (the server's own storage,
// pkg/registry/ipaddresses.InProcess): the delete happens only if the
// object is still that one (same UID and resourceVersion).
type ExactDeleter interface {
	DeleteExact(ctx context.Context, seen *networkingv1.IPAddress) error
}

// deleteExact deletes seen only if it is still that object: its UID and
// resourceVersion are the preconditions.
func deleteExact(ctx context.Context, api Objects, seen *networkingv1.IPAddress) error {
	if d, ok := api.(ExactDeleter); ok {
		return d.DeleteExact(ctx, seen)
	}
	return api.Delete(ctx, seen.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
		UID: &seen.UID, ResourceVersion: &seen.ResourceVersion,
	}})
}

// DeleteOwned deletes ip's IPAddress if it belongs to owner. The delete is
// conditional on the UID and resourceVersion just read, so an object that
// was re-created or re-assigned in between is never removed. It needs no
// allocator: the bitmap model uses it to keep IPAddresses true during a
// transition.
func DeleteOwned(ctx context.Context, api Objects, ip netip.Addr, owner allocation.Owner) (ReleaseOutcome, error) {
	return deleteOwned(ctx, api, ip, owner, nil)
}

// deleteOwned is DeleteOwned trying cached, an informer's copy, first: its
// preconditions make a stale copy harmless, and it saves the read. Any
// failure of that attempt (another owner, a conflict, gone, an error) is
// settled by the reads that follow.
func deleteOwned(ctx context.Context, api Objects, ip netip.Addr, owner allocation.Owner, cached *networkingv1.IPAddress) (ReleaseOutcome, error) {
	if cached != nil && OwnedBy(cached, owner) && deleteExact(ctx, api, cached) == nil {
		return Released, nil
	}
	for range releaseAttempts {
		obj, err := api.Get(ctx, ip.String(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return Absent, nil
		}
		if err != nil {
			return Absent, fmt.Errorf("release %s of service %s: %w", ip, owner, err)
		}
		if !OwnedBy(obj, owner) {
			klog.FromContext(ctx).V(2).Info("Not releasing an IPAddress owned by another parent", "ip", ip, "service", owner.String(), "parentRef", obj.Spec.ParentRef)
			return OtherOwner, nil
		}
		err = deleteExact(ctx, api, obj)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return Released, nil
		case apierrors.IsConflict(err):
			continue // changed since the read: look again
		default:
			return Absent, fmt.Errorf("release %s of service %s: %w", ip, owner, err)
		}
	}
	return Absent, fmt.Errorf("release %s of service %s: the IPAddress kept changing", ip, owner)
}

// Has reports whether ip's IPAddress exists, asking the API server.
func (a *Allocator) Has(ctx context.Context, ip netip.Addr) (bool, error) {
	if !ip.IsValid() || ip.Is6() != a.ipv6 {
		return false, nil
	}
	_, err := a.objects.Get(ctx, ip.String(), metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("has %s: %w", ip, err)
	}
}

// ForEach calls fn, in ascending order, for every address of this family
// that has an IPAddress in the cache and lies in a served range.
func (a *Allocator) ForEach(ctx context.Context, fn func(netip.Addr)) error {
	if !a.ready.Load() {
		return allocation.ErrNotReady
	}
	addrs := a.cachedAddrs(familyPrefix(a.ipv6))
	a.mu.Lock()
	addrs = slices.DeleteFunc(addrs, func(ip netip.Addr) bool { return !a.containsLocked(ip) })
	a.mu.Unlock()
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, ip := range addrs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("for each: %w", err)
		}
		fn(ip)
	}
	return nil
}

// UsageByCIDR reports each served range's own fill level (an address in two
// overlapping ranges counts in both), for per-CIDR metrics. It does no I/O.
func (a *Allocator) UsageByCIDR(context.Context) (map[netip.Prefix]allocation.Usage, error) {
	if !a.ready.Load() {
		return nil, allocation.ErrNotReady
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[netip.Prefix]allocation.Usage, len(a.ranges))
	for _, r := range a.ranges {
		out[r.rng.Prefix()] = allocation.Usage{
			Size: r.rng.Size(), StaticSize: r.rng.StaticSize(),
			Used: r.index.Used(), StaticUsed: r.index.UsedStatic(),
		}
	}
	return out, nil
}

// Usage sums the maximal ranges (those inside no other served range), so
// overlapping ServiceCIDRs are counted once. Addresses being claimed count as
// used.
func (a *Allocator) Usage(context.Context) (allocation.Usage, error) {
	if !a.ready.Load() {
		return allocation.Usage{}, allocation.ErrNotReady
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	active := make([]activeRange, len(a.ranges))
	for i, r := range a.ranges {
		active[i] = r.activeRange
	}
	var u allocation.Usage
	for _, i := range maximalRanges(active) {
		r := a.ranges[i]
		u.Size += r.rng.Size()
		u.StaticSize += r.rng.StaticSize()
		u.Used += r.index.Used()
		u.StaticUsed += r.index.UsedStatic()
	}
	return u, nil
}

// DryRun returns a view that answers like a but never writes.
func (a *Allocator) DryRun() allocation.Interface { return dryRun{a} }

type dryRun struct{ a *Allocator }

// Allocate reports what Allocate would: a *NotInRangeError (or
// ErrMismatchedNetwork with no range served), ErrAllocated (from a fresh
// read) or nil.
func (d dryRun) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	a := d.a
	if !a.ready.Load() {
		return allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return fmt.Errorf("dry-run allocate %s: %w", ip, err)
	}
	a.mu.Lock()
	inRange := ip.IsValid() && ip.Is6() == a.ipv6 && a.containsLocked(ip)
	var scopeErr error
	if inRange {
		scopeErr = a.checkScopeLocked(ip, routed, nsLabels, svcLabels)
	}
	busy := a.inflight[ip] != nil
	var first string
	if len(a.ranges) > 0 {
		first = a.ranges[0].rng.Prefix().String()
	}
	a.mu.Unlock()
	if !inRange {
		// Upstream's dry run asks one range's allocator (its
		// MetaAllocator.DryRun), which answers "not in the valid range".
		if first != "" {
			return &allocation.NotInRangeError{IP: ip, ValidRange: first}
		}
		return allocation.ErrMismatchedNetwork
	}
	if scopeErr != nil {
		return scopeErr
	}
	if busy {
		return allocation.ErrAllocated
	}
	has, err := a.Has(ctx, ip)
	if err != nil {
		return fmt.Errorf("dry-run allocate %s: %w", ip, err)
	}
	if has {
		return allocation.ErrAllocated
	}
	return nil
}

// AllocateNext reports the address AllocateNext would try first.
func (d dryRun) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	a := d.a
	if !a.ready.Load() {
		return netip.Addr{}, allocation.ErrNotReady
	}
	nsLabels, svcLabels, routed, err := a.scopeLabels(ctx, owner)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("dry-run allocate next: %w", err)
	}
	a.mu.Lock()
	candidates, rt := a.candidatesLocked(routed, nsLabels, svcLabels)
	ip, ok := a.pickLocked(candidates, rt == nil, nil)
	a.mu.Unlock()
	switch {
	case ok:
		return ip, nil
	case rt == nil:
		return netip.Addr{}, allocation.ErrFull
	default:
		return netip.Addr{}, a.nothingFree(rt)
	}
}

func (dryRun) Release(context.Context, netip.Addr, allocation.Owner) error { return nil }
func (d dryRun) Has(ctx context.Context, ip netip.Addr) (bool, error)      { return d.a.Has(ctx, ip) }
func (d dryRun) ForEach(ctx context.Context, fn func(netip.Addr)) error    { return d.a.ForEach(ctx, fn) }
func (d dryRun) Usage(ctx context.Context) (allocation.Usage, error)       { return d.a.Usage(ctx) }
func (d dryRun) IPv6() bool                                                { return d.a.ipv6 }
func (d dryRun) DryRun() allocation.Interface                              { return d }
