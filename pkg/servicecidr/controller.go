package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

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

	"github.com/allocator/allocator/pkg/subrange"
)

// Finalizer keeps a ServiceCIDR until no IPAddress depends on it.
const Finalizer = "networking.k8s.io/service-cidr-finalizer"

// TerminatingMessage is upstream's message for a ServiceCIDR whose deletion
// waits for IPAddresses.
const TerminatingMessage = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"

// readyMessage is the message of Ready=True.
const readyMessage = "Kubernetes Service CIDR is ready"

// resyncPeriod re-checks every ServiceCIDR even without events.
const resyncPeriod = time.Minute

// Controller reconciles ServiceCIDRs. Build it with New, run it with Run.
type Controller struct {
	client     kubernetes.Interface
	cidrLister networkinglisters.ServiceCIDRLister
	ipLister   networkinglisters.IPAddressLister
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]
	now        func() time.Time
}

// New builds a controller on the given informers (the caller starts them).
func New(client kubernetes.Interface, cidrs networkinginformers.ServiceCIDRInformer, ips networkinginformers.IPAddressInformer) (*Controller, error) {
	c := &Controller{
		client:     client,
		cidrLister: cidrs.Lister(),
		ipLister:   ips.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "servicecidrs"}),
		now: time.Now,
	}
	cidrReg, err := cidrs.Informer().AddEventHandlerWithResyncPeriod(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueueCIDR(obj); c.enqueueTerminating() },
		UpdateFunc: func(_, obj any) { c.enqueueCIDR(obj); c.enqueueTerminating() },
		DeleteFunc: func(any) { c.enqueueTerminating() },
	}, resyncPeriod)
	if err != nil {
		return nil, fmt.Errorf("servicecidr controller: watch ServiceCIDRs: %w", err)
	}
	ipReg, err := ips.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(any) { c.enqueueTerminating() },
		UpdateFunc: func(any, any) { c.enqueueTerminating() },
	})
	if err != nil {
		return nil, fmt.Errorf("servicecidr controller: watch IPAddresses: %w", err)
	}
	c.synced = []cache.InformerSynced{cidrReg.HasSynced, ipReg.HasSynced}
	return c, nil
}

func (c *Controller) enqueueCIDR(obj any) {
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
		c.queue.Add(sc.Name)
	}
}

// enqueueTerminating queues every ServiceCIDR being deleted: a change of
// IPAddresses or of other ServiceCIDRs may unblock it.
func (c *Controller) enqueueTerminating() {
	all, err := c.cidrLister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, sc := range all {
		if sc.DeletionTimestamp != nil {
			c.queue.Add(sc.Name)
		}
	}
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
	requeue, err := c.sync(ctx, name)
	switch {
	case err != nil:
		klog.FromContext(ctx).Info("Sync failed, retrying", "servicecidr", name, "err", err)
		c.queue.AddRateLimited(name)
	case requeue:
		c.queue.AddAfter(name, 5*time.Second)
		c.queue.Forget(name)
	default:
		c.queue.Forget(name)
	}
	return true
}

// sync reconciles one ServiceCIDR; requeue asks for a later re-check.
func (c *Controller) sync(ctx context.Context, name string) (requeue bool, err error) {
	sc, err := c.cidrLister.Get(name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if sc.DeletionTimestamp == nil {
		if !slices.Contains(sc.Finalizers, Finalizer) {
			sc = sc.DeepCopy()
			sc.Finalizers = append(sc.Finalizers, Finalizer)
			if sc, err = c.client.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
				return false, fmt.Errorf("add finalizer: %w", err)
			}
		}
		return false, c.setReady(ctx, sc, metav1.ConditionTrue, "", readyMessage)
	}
	if !slices.Contains(sc.Finalizers, Finalizer) {
		return false, nil
	}
	ips, err := c.ipLister.List(labels.Everything())
	if err != nil {
		return false, err
	}
	blocking, err := c.orphanedIPs(sc, ips)
	if err != nil {
		return false, err
	}
	if blocking == 0 {
		// The cache may lag behind an IPAddress created a moment ago:
		// confirm from the API before letting the ServiceCIDR go.
		live, err := c.client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, fmt.Errorf("list IPAddresses: %w", err)
		}
		ips = ips[:0]
		for i := range live.Items {
			ips = append(ips, &live.Items[i])
		}
		if blocking, err = c.orphanedIPs(sc, ips); err != nil {
			return false, err
		}
	}
	if blocking > 0 {
		klog.FromContext(ctx).V(2).Info("ServiceCIDR deletion waits for IPAddresses", "servicecidr", name, "ipaddresses", blocking)
		return true, c.setReady(ctx, sc, metav1.ConditionFalse, networkingv1.ServiceCIDRReasonTerminating, TerminatingMessage)
	}
	sc = sc.DeepCopy()
	sc.Finalizers = slices.DeleteFunc(sc.Finalizers, func(f string) bool { return f == Finalizer })
	if _, err := c.client.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("remove finalizer: %w", err)
	}
	return false, nil
}

// orphanedIPs counts the IPAddresses in sc that no other ServiceCIDR (not
// being deleted) covers.
func (c *Controller) orphanedIPs(sc *networkingv1.ServiceCIDR, ips []*networkingv1.IPAddress) (int, error) {
	mine := prefixes(sc)
	var others []netip.Prefix
	all, err := c.cidrLister.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	for _, other := range all {
		if other.Name != sc.Name && other.DeletionTimestamp == nil {
			others = append(others, prefixes(other)...)
		}
	}
	n := 0
	for _, ip := range ips {
		addr, err := netip.ParseAddr(ip.Name)
		if err != nil {
			continue
		}
		if covered(mine, addr) && !covered(others, addr) {
			n++
		}
	}
	return n, nil
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

func covered(prefixes []netip.Prefix, addr netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(addr) {
			return true
		}
	}
	return false
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
