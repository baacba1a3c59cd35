package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/subrange"
)

// Finalizer keeps a ServiceCIDR until no IPAddress depends on it.
const Finalizer = "networking.k8s.io/service-cidr-finalizer"

// DefaultName is the name of the ServiceCIDR the API server creates from
// --service-cluster-ip-range, as kube-apiserver names it.
const DefaultName = "kubernetes"

// TerminatingMessage is upstream's message for a ServiceCIDR whose deletion
// waits for IPAddresses.
const TerminatingMessage = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"

// readyMessage is the message of Ready=True.
const readyMessage = "Kubernetes Service CIDR is ready"

// DefaultResyncPeriod is how often every ServiceCIDR is re-checked even
// without events.
const DefaultResyncPeriod = time.Minute

// DefaultDeletionGrace is how long a deleted ServiceCIDR keeps its finalizer
// at least, counted from its deletionTimestamp, as upstream (10 s).
const DefaultDeletionGrace = 10 * time.Second

// Option configures a Controller.
type Option func(*Controller)

// WithDeletionGrace sets the deletion grace period (default
// DefaultDeletionGrace). Tests shorten it; a server should not.
func WithDeletionGrace(d time.Duration) Option { return func(c *Controller) { c.deletionGrace = d } }

// LiveNames reads the names of the IPAddresses that may lie inside
// prefixes from the source of truth, at the moment of the call (a
// consistent read). It may return more (the controller checks each), never
// fewer.
type LiveNames interface {
	Names(ctx context.Context, prefixes []netip.Prefix) ([]string, error)
}

// WithLiveNames makes the live confirmation before a ServiceCIDR goes read
// from l instead of listing every IPAddress of the family through the
// client: a server passes one that reads etcd's keys of the ServiceCIDR's
// addresses only (at 100,000 Services, with a ServiceCIDR deleted every
// 2 s, listing the family's IPAddresses costs about a twentieth of the CPU:
// hack/scale.sh).
func WithLiveNames(l LiveNames) Option { return func(c *Controller) { c.live = l } }

// ListNames is the LiveNames of an IPAddress lister (the client's
// IPAddresses(), or a server's store): every IPAddress of the prefixes'
// family, listed.
type ListNames struct {
	Lister interface {
		List(ctx context.Context, opts metav1.ListOptions) (*networkingv1.IPAddressList, error)
	}
}

// Names lists the IPAddresses of the prefixes' family (of both when they
// are of both).
func (l ListNames) Names(ctx context.Context, prefixes []netip.Prefix) ([]string, error) {
	list, err := l.Lister.List(ctx, metav1.ListOptions{LabelSelector: familySelector(prefixes)})
	if err != nil {
		return nil, fmt.Errorf("list IPAddresses: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for i := range list.Items {
		names = append(names, list.Items[i].Name)
	}
	return names, nil
}

// WithResyncPeriod sets the periodic re-check (default DefaultResyncPeriod).
func WithResyncPeriod(d time.Duration) Option { return func(c *Controller) { c.resyncPeriod = d } }

// WithConditionsOnly makes the controller write our conditions only,
// leaving the finalizer and the Ready condition to another controller:
// kube-controller-manager's service-cidr-controller, beside a stock
// kube-apiserver. Ready is written there by server-side apply under that
// controller's field manager, and ours by an update of the whole status
// at the resourceVersion read, which keeps every condition it does not
// own: neither write removes the other's.
func WithConditionsOnly() Option { return func(c *Controller) { c.conditionsOnly = true } }

// Controller reconciles ServiceCIDRs. Build it with New, run it with Run.
type Controller struct {
	client        kubernetes.Interface
	cidrLister    networkinglisters.ServiceCIDRLister
	ipIndexer     cache.Indexer // with the addrindex index
	live          LiveNames
	synced        []cache.InformerSynced
	queue         workqueue.TypedRateLimitingInterface[string]
	now           func() time.Time
	deletionGrace time.Duration
	resyncPeriod  time.Duration
	syncs         atomic.Int64 // syncs run, for tests of the resync
	// conditionsOnly: the finalizer and Ready are another controller's
	// (WithConditionsOnly).
	conditionsOnly bool

	// Every ServiceCIDR with its prefixes parsed, kept by the ServiceCIDR
	// event handlers: every IPAddress event looks for those containing its
	// address (whose capacity it changes, and the terminating ones it may
	// unblock): at 100,000 Services, queueing every terminating ServiceCIDR
	// on every IPAddress event, each sync listing every IPAddress, would be
	// most of the server's CPU (hack/scale.sh).
	index cidrIndex

	conditionInterval time.Duration
	conditionWrites   atomic.Int64 // conditions writes made, for tests
	writesMu          sync.Mutex
	lastWrite         map[string]time.Time // guarded by writesMu: last conditions write seen per ServiceCIDR
	lastCompute       map[string]computed  // guarded by writesMu: last computation of the conditions per ServiceCIDR
}

// New builds a controller on the given informers (the caller starts them).
func New(client kubernetes.Interface, cidrs networkinginformers.ServiceCIDRInformer, ips networkinginformers.IPAddressInformer, opts ...Option) (*Controller, error) {
	c := &Controller{
		client:     client,
		cidrLister: cidrs.Lister(),
		ipIndexer:  ips.Informer().GetIndexer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "servicecidrs"}),
		now:           time.Now,
		deletionGrace: DefaultDeletionGrace,
		resyncPeriod:  DefaultResyncPeriod,

		conditionInterval: DefaultConditionInterval,
		lastWrite:         map[string]time.Time{},
		lastCompute:       map[string]computed{},
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.live == nil {
		c.live = ListNames{Lister: client.NetworkingV1().IPAddresses()}
	}
	if c.resyncPeriod <= 0 {
		c.resyncPeriod = DefaultResyncPeriod
	}
	// No resync from the informer: a shared informer factory built with
	// resync 0 ignores a handler's resync period ("resyncPeriod is invalid"),
	// so a handler resync never ran. Run re-queues everything itself.
	//
	// A ServiceCIDR being deleted waits for the IPAddresses that only it
	// covers: a new or widened ServiceCIDR may cover them (queue every
	// terminating one), an IPAddress deleted inside it may be the last
	// (queue those that contain it). A status change, or a deletion, of
	// another ServiceCIDR cannot unblock one.
	//
	// The conditions of ours change with a ServiceCIDR's own spec and
	// annotations (queued on its event), with any ServiceCIDR overlapping
	// it (queueOverlapping) and with the IPAddresses inside it
	// (queueCapacity).
	cidrReg, err := cidrs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.addServiceCIDR,
		UpdateFunc: c.updateServiceCIDR,
		DeleteFunc: c.deleteServiceCIDR,
	})
	if err != nil {
		return nil, fmt.Errorf("servicecidr controller: watch ServiceCIDRs: %w", err)
	}
	if err := addrindex.Add(ips.Informer()); err != nil {
		return nil, fmt.Errorf("servicecidr controller: %w", err)
	}
	ipReg, err := ips.Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    c.addIPAddress,
		DeleteFunc: c.deleteIPAddress,
	})
	if err != nil {
		return nil, fmt.Errorf("servicecidr controller: watch IPAddresses: %w", err)
	}
	c.synced = []cache.InformerSynced{cidrReg.HasSynced, ipReg.HasSynced}
	return c, nil
}

// addServiceCIDR queues a new ServiceCIDR, the terminating ones it may
// unblock and those it overlaps.
func (c *Controller) addServiceCIDR(obj any) {
	sc, ok := obj.(*networkingv1.ServiceCIDR)
	if !ok {
		return
	}
	c.index.set(namedCIDROf(sc))
	c.queue.Add(sc.Name)
	c.enqueueTerminating()
	c.queueOverlapping(sc.Name, prefixes(sc))
}

// updateServiceCIDR queues a changed ServiceCIDR; a widened one may
// unblock terminating ones and changes its overlaps; a changed lifecycle
// or a deletion changes the lifecycle conditions of those it overlaps.
func (c *Controller) updateServiceCIDR(oldObj, obj any) {
	old, ok1 := oldObj.(*networkingv1.ServiceCIDR)
	cur, ok2 := obj.(*networkingv1.ServiceCIDR)
	if !ok1 || !ok2 {
		return
	}
	c.index.set(namedCIDROf(cur))
	c.queue.Add(cur.Name)
	c.noteConditionsChanged(old, cur)
	switch {
	case !slices.Equal(old.Spec.CIDRs, cur.Spec.CIDRs):
		c.enqueueTerminating()
		c.queueOverlapping(cur.Name, append(prefixes(old), prefixes(cur)...))
	case !lifecycle.Same(old.Annotations, cur.Annotations) || (old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil):
		// The lifecycle conditions of those it overlaps name it.
		c.queueOverlapping(cur.Name, prefixes(cur))
	}
}

// deleteServiceCIDR drops a deleted ServiceCIDR from the caches of parsed
// prefixes and queues those it overlapped. Its deletion cannot unblock
// another terminating one.
func (c *Controller) deleteServiceCIDR(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
		c.index.remove(sc.Name)
		c.forgetWrites(sc.Name)
		c.queueOverlapping(sc.Name, prefixes(sc))
	}
}

// addIPAddress queues the ServiceCIDRs whose capacity or deletion an
// IPAddress added changes. An add of the informer's initial list queues
// nothing: Run queues every ServiceCIDR once the caches have synced, and a
// start delivers a million of them.
func (c *Controller) addIPAddress(obj any, isInInitialList bool) {
	if isInInitialList {
		return
	}
	c.enqueueContaining(obj)
	c.queueCapacity(obj)
}

// deleteIPAddress queues the ServiceCIDRs whose capacity or deletion an
// IPAddress deleted changes.
func (c *Controller) deleteIPAddress(obj any) {
	c.enqueueContaining(obj)
	c.queueCapacity(obj)
}

// enqueueAll queues every ServiceCIDR: the periodic re-check.
func (c *Controller) enqueueAll(context.Context) {
	all, err := c.cidrLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, sc := range all {
		c.queue.Add(sc.Name)
	}
}

// enqueueTerminating queues every ServiceCIDR being deleted: a new or
// widened ServiceCIDR may unblock it.
func (c *Controller) enqueueTerminating() {
	for _, t := range c.index.terminating() {
		c.queue.Add(t.name)
	}
}

// enqueueContaining queues the ServiceCIDRs being deleted that contain the
// address of an IPAddress added or deleted.
func (c *Controller) enqueueContaining(obj any) {
	terminating := c.index.terminating()
	if len(terminating) == 0 {
		return // most events: no address to read
	}
	addr, ok := ipAddressAddr(obj)
	if !ok {
		return
	}
	for _, t := range terminating {
		if slices.ContainsFunc(t.prefixes, func(p netip.Prefix) bool { return p.Contains(addr) }) {
			c.queue.Add(t.name)
		}
	}
}

// ipAddressAddr is the address an IPAddress (or its tombstone) names.
func ipAddressAddr(obj any) (netip.Addr, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	ipa, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(ipa.Name)
	return addr, err == nil
}

// Run waits for the caches and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	log := klog.FromContext(ctx).WithName("servicecidr-controller")
	ctx = klog.NewContext(ctx, log)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("servicecidr controller: caches did not sync: %w", ctx.Err())
	}
	log.V(2).Info("Started")
	for range workers {
		go wait.UntilWithContext(ctx, c.worker, time.Second)
	}
	go wait.UntilWithContext(ctx, c.enqueueAll, c.resyncPeriod)
	<-ctx.Done()
	return nil
}

func (c *Controller) worker(ctx context.Context) {
	for c.next(ctx) {
	}
}

func (c *Controller) next(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	c.syncs.Add(1)
	var requeue time.Duration
	var err error
	if !c.conditionsOnly {
		requeue, err = c.sync(ctx, name)
	}
	if err == nil {
		var again time.Duration
		again, err = c.syncConditions(ctx, name)
		if again > 0 && (requeue <= 0 || again < requeue) {
			requeue = again
		}
	}
	switch {
	case err != nil:
		klog.FromContext(ctx).Info("Sync failed, retrying", "servicecidr", name, "err", err)
		c.queue.AddRateLimited(name)
	case requeue > 0:
		c.queue.AddAfter(name, requeue)
		c.queue.Forget(name)
	default:
		c.queue.Forget(name)
	}
	return true
}

// blocked keeps a terminating ServiceCIDR that IPAddresses still depend on,
// with Ready=False. It is checked again when an IPAddress inside it is
// deleted or a ServiceCIDR is added or widened (see New), and at the
// periodic re-check; no polling: each check lists every IPAddress.
func (c *Controller) blocked(ctx context.Context, sc *networkingv1.ServiceCIDR, blocking int) (time.Duration, error) {
	klog.FromContext(ctx).V(2).Info("ServiceCIDR deletion waits for IPAddresses", "servicecidr", sc.Name, "ipaddresses", blocking)
	return 0, c.setReady(ctx, sc, metav1.ConditionFalse, networkingv1.ServiceCIDRReasonTerminating, TerminatingMessage)
}

// sync reconciles one ServiceCIDR; a positive requeue asks for a re-check
// after that long.
func (c *Controller) sync(ctx context.Context, name string) (requeue time.Duration, err error) {
	sc, err := c.cidrLister.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if sc.DeletionTimestamp == nil {
		if !slices.Contains(sc.Finalizers, Finalizer) {
			sc = sc.DeepCopy()
			sc.Finalizers = append(sc.Finalizers, Finalizer)
			if sc, err = c.client.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
				return 0, fmt.Errorf("add finalizer: %w", err)
			}
		}
		return 0, c.setReady(ctx, sc, metav1.ConditionTrue, "", readyMessage)
	}
	if !slices.Contains(sc.Finalizers, Finalizer) {
		return 0, nil
	}
	mine := prefixes(sc)
	ips, err := addrindex.In(c.ipIndexer, mine)
	if err != nil {
		return 0, err
	}
	names := make([]string, 0, len(ips))
	for _, ip := range ips {
		names = append(names, ip.Name)
	}
	blocking, err := c.orphanedIPs(sc.Name, mine, names)
	if err != nil {
		return 0, err
	}
	if blocking > 0 {
		return c.blocked(ctx, sc, blocking)
	}
	// Nothing depends on it, but allocators (every replica's, and this
	// process's own through its informer) may not have seen the deletion
	// yet and could still allocate from it: wait out the grace period from
	// the deletionTimestamp before letting it go, or an allocation in flight
	// lands in a CIDR that no longer exists.
	if remaining := c.deletionGrace - c.now().Sub(sc.DeletionTimestamp.Time); remaining > 0 {
		return remaining, nil
	}
	// The cache may lag behind an IPAddress created a moment ago: confirm
	// from the source of truth before letting the ServiceCIDR go, once,
	// after the grace. It is the costliest step: at 100,000 Services with
	// a ServiceCIDR deleted every 2 s (hack/scale.sh), encoding a list of
	// every IPAddress would cost about a fifth of the server's CPU. So the
	// client's read lists only
	// the family's (allocators label what they create with it; one without
	// the label is still in the cache check above), and a server's reads
	// only the etcd keys of the ServiceCIDR's addresses (WithLiveNames).
	names, err = c.live.Names(ctx, mine)
	if err != nil {
		return 0, fmt.Errorf("live IPAddresses: %w", err)
	}
	if blocking, err = c.orphanedIPs(sc.Name, mine, names); err != nil {
		return 0, err
	}
	if blocking > 0 {
		return c.blocked(ctx, sc, blocking)
	}
	sc = sc.DeepCopy()
	sc.Finalizers = slices.DeleteFunc(sc.Finalizers, func(f string) bool { return f == Finalizer })
	if _, err := c.client.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("remove finalizer: %w", err)
	}
	return 0, nil
}

// orphanedIPs counts the IPAddresses (by name) in the prefixes mine of the
// ServiceCIDR sc that no other ServiceCIDR (not being deleted) covers.
func (c *Controller) orphanedIPs(sc string, mine []netip.Prefix, names []string) (int, error) {
	// Only a prefix that overlaps sc's can cover one of its addresses; the
	// index finds those, and the cache, which the index's handlers may
	// trail by a moment, says which are not being deleted.
	var others []netip.Prefix
	for _, o := range c.index.overlapping(mine) {
		if o.name == sc {
			continue
		}
		other, err := c.cidrLister.Get(o.name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if other.DeletionTimestamp != nil {
			continue
		}
		for _, p := range prefixes(other) {
			if slices.ContainsFunc(mine, p.Overlaps) {
				others = append(others, p)
			}
		}
	}
	n := 0
	for _, name := range names {
		addr, err := netip.ParseAddr(name)
		if err != nil {
			continue
		}
		if covered(mine, addr) && !covered(others, addr) {
			n++
		}
	}
	return n, nil
}

// familySelector selects the IPAddresses of the prefixes' family, or every
// one when they are of both (a dual-stack ServiceCIDR) or none.
func familySelector(ps []netip.Prefix) string {
	v4 := slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is4() })
	v6 := slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is6() })
	switch {
	case v4 && !v6:
		return networkingv1.LabelIPAddressFamily + "=" + string(corev1.IPv4Protocol)
	case v6 && !v4:
		return networkingv1.LabelIPAddressFamily + "=" + string(corev1.IPv6Protocol)
	}
	return ""
}

func prefixes(sc *networkingv1.ServiceCIDR) []netip.Prefix {
	var out []netip.Prefix
	for _, text := range sc.Spec.CIDRs {
		if p, err := subrange.ParsePrefix(text); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// covered reports whether some prefix serves addr: contains it and it is
// neither the prefix's network address nor, for IPv4, its broadcast address,
// which no allocator hands out (upstream's rule). Counting them as covered
// let a ServiceCIDR go while an IPAddress equal to the remaining CIDR's
// network or broadcast address still depended on it.
func covered(prefixes []netip.Prefix, addr netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(addr) && addr != p.Addr() && !(addr.Is4() && addr == lastAddr(p)) {
			return true
		}
	}
	return false
}

// lastAddr is the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(b)
	return last
}

// setReady writes the Ready condition when it differs from what is stored.
func (c *Controller) setReady(ctx context.Context, sc *networkingv1.ServiceCIDR, status metav1.ConditionStatus, reason, message string) error {
	cur := meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)
	if cur != nil && cur.Status == status && cur.Reason == reason && cur.Message == message {
		return nil
	}
	sc = sc.DeepCopy()
	meta.SetStatusCondition(&sc.Status.Conditions, metav1.Condition{
		Type:               networkingv1.ServiceCIDRConditionReady,
		Status:             status,
		Reason:             reason,
		Message:            message,
		LastTransitionTime: metav1.NewTime(c.now()),
	})
	if _, err := c.client.NetworkingV1().ServiceCIDRs().UpdateStatus(ctx, sc, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set Ready=%s: %w", status, err)
	}
	return nil
}
