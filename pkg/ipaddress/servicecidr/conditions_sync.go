package servicecidr

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/pkg/ipaddress/addrindex"
	"github.com/allocator/allocator/pkg/subrange"
)

// DefaultConditionInterval is the shortest time between two writes of a
// ServiceCIDR's conditions (see syncConditions).
const DefaultConditionInterval = 5 * time.Second

// conflictRetry is how soon a conditions write that lost to another
// writer is tried again, from the cache by then holding the other write.
const conflictRetry = 500 * time.Millisecond

// WithConditionInterval sets the shortest time between two writes of a
// ServiceCIDR's conditions (default DefaultConditionInterval). Tests
// shorten or lengthen it.
func WithConditionInterval(d time.Duration) Option {
	return func(c *Controller) { c.conditionInterval = d }
}

// ConditionWrites is how many conditions writes this controller made.
func (c *Controller) ConditionWrites() int64 { return c.conditionWrites.Load() }

// syncConditions writes the conditions of ServiceCIDR name when what the
// caches show differs from what is stored, at most once per
// conditionInterval: the messages carry exact counts, which change with
// every allocation, and a write per allocation would double the writes of
// a create. A change inside the interval is written when it ends (the
// returned requeue), so the lag is at most the interval plus a watch
// delay. The interval counts from the last write of our conditions by any
// replica (each replica notes the writes it sees through its informer,
// noteConditionsChanged), so replicas together write about once per
// interval, and one whose cache shows what is stored writes nothing. A
// write that conflicts with another is retried from the fresher cache.
func (c *Controller) syncConditions(ctx context.Context, name string) (time.Duration, error) {
	sc, err := c.cidrLister.Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetWrites(name)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("get ServiceCIDR %s: %w", name, err)
	}
	if wait := c.computeWait(name); wait > 0 {
		return wait, nil
	}
	started := c.now()
	want, err := conditionsFromCache(c.ipIndexer, sc, c.index.overlapping(prefixes(sc)))
	if err != nil {
		return 0, err
	}
	c.noteCompute(name, c.now().Sub(started))
	if conditionsStored(sc.Status.Conditions, want) {
		return 0, nil
	}
	if wait := c.conditionWait(name); wait > 0 {
		return wait, nil
	}
	sc = sc.DeepCopy()
	applyConditions(&sc.Status.Conditions, want, metav1.NewTime(c.now()))
	_, err = c.client.NetworkingV1().ServiceCIDRs().UpdateStatus(ctx, sc, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		klog.FromContext(ctx).V(4).Info("Conditions write lost to another writer, retrying", "servicecidr", name)
		return conflictRetry, nil
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("write conditions of ServiceCIDR %s: %w", name, err)
	}
	c.conditionWrites.Add(1)
	c.noteWrite(name)
	return 0, nil
}

// conditionsFromCache computes the conditions of sc from the IPAddresses
// of ipIndexer (with the addrindex index) inside sc's prefixes, and others,
// the ServiceCIDRs overlapping it. The addresses are counted from the
// index's keys; the IPAddresses themselves are read only when a message
// counts their Services.
func conditionsFromCache(ipIndexer cache.Indexer, sc *networkingv1.ServiceCIDR, others []namedCIDR) ([]metav1.Condition, error) {
	addrs, err := addrindex.Addresses(ipIndexer, prefixes(sc), netip.ParseAddr)
	if err != nil {
		return nil, fmt.Errorf("IPAddresses of ServiceCIDR %s: %w", sc.Name, err)
	}
	var servicesErr error
	services := func(ranges []subrange.Range) int {
		ips, err := addrindex.In(ipIndexer, prefixes(sc))
		if err != nil {
			servicesErr = err
			return 0
		}
		return servicesHolding(ips, ranges)
	}
	want := computeConditions(conditionInput{sc: sc, addrs: addrs, services: services, others: others})
	if servicesErr != nil {
		return nil, fmt.Errorf("IPAddresses of ServiceCIDR %s: %w", sc.Name, servicesErr)
	}
	return want, nil
}

// computeCostFactor bounds the CPU the conditions of one ServiceCIDR take:
// they are computed again only after computeCostFactor times the last
// computation's duration. Counting is linear in the IPAddresses inside the
// ServiceCIDR, so for one holding hundreds of thousands, computing it at
// every conditionInterval would take a good part of a core while Services
// are created (hack/scale.sh with a /12). With 20 it takes at most a
// twentieth of one, and the conditions of a ServiceCIDR that large trail
// by twenty times a count.
const computeCostFactor = 20

// conditionWait is how long ServiceCIDR name must wait before its
// conditions may be written again; 0 or less when they may be now.
func (c *Controller) conditionWait(name string) time.Duration {
	c.writesMu.Lock()
	defer c.writesMu.Unlock()
	last, ok := c.lastWrite[name]
	if !ok {
		return 0
	}
	return c.conditionInterval - c.now().Sub(last)
}

// computeWait is how long ServiceCIDR name must wait before its conditions
// may be computed again: computeCostFactor times the last computation's
// duration, from its start; 0 or less when they may be now.
func (c *Controller) computeWait(name string) time.Duration {
	c.writesMu.Lock()
	defer c.writesMu.Unlock()
	last, ok := c.lastCompute[name]
	if !ok {
		return 0
	}
	return computeCostFactor*last.cost - c.now().Sub(last.at)
}

// computed is when the conditions of a ServiceCIDR were last computed, and
// how long that took.
type computed struct {
	at   time.Time
	cost time.Duration
}

// noteCompute records a computation of ServiceCIDR name's conditions that
// took cost, ending now.
func (c *Controller) noteCompute(name string, cost time.Duration) {
	c.writesMu.Lock()
	defer c.writesMu.Unlock()
	c.lastCompute[name] = computed{at: c.now().Add(-cost), cost: cost}
}

// noteWrite records a write of ServiceCIDR name's conditions, now.
func (c *Controller) noteWrite(name string) {
	c.writesMu.Lock()
	defer c.writesMu.Unlock()
	c.lastWrite[name] = c.now()
}

// forgetWrites drops what is recorded of a ServiceCIDR that is gone.
func (c *Controller) forgetWrites(name string) {
	c.writesMu.Lock()
	defer c.writesMu.Unlock()
	delete(c.lastWrite, name)
	delete(c.lastCompute, name)
}

// queueConditions queues ServiceCIDR name for its conditions: now when a
// write is allowed, else when the interval ends. Waiting items are kept
// once, so a burst of events costs one sync per interval.
func (c *Controller) queueConditions(name string) {
	if wait := max(c.conditionWait(name), c.computeWait(name)); wait > 0 {
		c.queue.AddAfter(name, wait)
		return
	}
	c.queue.Add(name)
}

// noteConditionsChanged records, for an update of a ServiceCIDR, whether
// our conditions changed: a write by this or another replica, from which
// the interval counts.
func (c *Controller) noteConditionsChanged(old, cur *networkingv1.ServiceCIDR) {
	if !apiequality.Semantic.DeepEqual(ourConditions(old.Status.Conditions), ourConditions(cur.Status.Conditions)) {
		c.noteWrite(cur.Name)
	}
}

// queueOverlapping queues, for their Overlapping condition, the
// ServiceCIDRs other than name whose prefixes overlap one of ps.
func (c *Controller) queueOverlapping(name string, ps []netip.Prefix) {
	for _, o := range c.index.overlapping(ps) {
		if o.name != name {
			c.queueConditions(o.name)
		}
	}
}

// queueCapacity queues, for their capacity, the ServiceCIDRs that contain
// the address of an IPAddress added or deleted.
func (c *Controller) queueCapacity(obj any) {
	addr, ok := ipAddressAddr(obj)
	if !ok {
		return
	}
	for _, name := range c.index.containing(addr) {
		c.queueConditions(name)
	}
}
