package servicecidrs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/ipaddress/prefixindex"
	"github.com/allocator/allocator/pkg/subrange"
)

// Overlaps finds the ServiceCIDRs whose CIDRs overlap given prefixes, for
// the overlap warnings, from an index of an informer's ServiceCIDRs kept by
// its event handlers. A warning then reads the few ServiceCIDRs it
// concerns: listing and parsing every ServiceCIDR would make each create
// cost in proportion to the ServiceCIDRs stored.
//
// The informer's cache trails the store by a moment, where the store's
// list was a consistent read. So that a client's write still warns of the
// ServiceCIDR it wrote just before, Overlapping first waits, for at most
// maxLag, until the handlers have been delivered every write this process
// made (Wrote); past that it does not answer, and the warnings list every
// ServiceCIDR as before. A write through another server sharing the etcd
// may still be missed for a moment, and a ServiceCIDR whose finalizer was
// just removed still named (a delete's object carries the resourceVersion
// it had): that only affects the warnings, which are advisory.
//
// Invariant: Overlapping answers, among the ServiceCIDRs the informer
// delivered, those a scan of their CIDRs (parsed as the warnings parse
// them) would find overlapping, once each, by name: the order of a store
// List (by key), in which the warnings name them.
type Overlaps struct {
	// synced reports whether the handlers have been delivered the
	// informer's initial list; until then Overlapping does not answer.
	synced func() bool
	// maxLag bounds how long Overlapping waits for the informer to deliver
	// this process's writes.
	maxLag time.Duration

	mu sync.RWMutex
	// index files the name of each ServiceCIDR in cidrs under each of its
	// CIDRs that parse; guarded by mu.
	index *prefixindex.Index[string]
	// cidrs are the ServiceCIDRs filed in index, by name, as the informer
	// last delivered them (shared with its cache: read only); guarded by mu.
	cidrs map[string]*networkingv1.ServiceCIDR
	// delivered is the highest resourceVersion delivered to the handlers,
	// written the highest of this process's writes (Wrote); grew is closed,
	// and replaced, when delivered grows. Guarded by mu.
	delivered, written uint64
	grew               chan struct{}
}

// defaultMaxLag is how long Overlapping waits for the in-process informer
// to deliver this process's last write, which takes milliseconds.
const defaultMaxLag = time.Second

// NewOverlaps returns the Overlaps of informer's ServiceCIDRs, kept by
// event handlers it adds to informer, for as long as informer runs.
func NewOverlaps(informer cache.SharedInformer) (*Overlaps, error) {
	o := newOverlaps()
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    o.addServiceCIDR,
		UpdateFunc: o.updateServiceCIDR,
		DeleteFunc: o.deleteServiceCIDR,
	})
	if err != nil {
		return nil, fmt.Errorf("watch ServiceCIDRs for the overlap warnings: %w", err)
	}
	o.synced = reg.HasSynced
	return o, nil
}

// newOverlaps returns an empty Overlaps that never reports itself synced;
// NewOverlaps sets synced.
func newOverlaps() *Overlaps {
	return &Overlaps{
		synced: func() bool { return false },
		maxLag: defaultMaxLag,
		index:  prefixindex.New[string](nil),
		cidrs:  map[string]*networkingv1.ServiceCIDR{},
		grew:   make(chan struct{}),
	}
}

// Wrote records a write of obj by this process (the store's hooks), which
// Overlapping waits for the informer to deliver.
func (o *Overlaps) Wrote(obj runtime.Object) {
	rv, ok := resourceVersion(obj)
	if !ok {
		return // a dry run, which stores nothing
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.written = max(o.written, rv)
}

// Overlapping returns the ServiceCIDRs with a CIDR that overlaps one of
// prefixes, by name, and true; nil and false, when the caller has to read
// every ServiceCIDR, while the informer has not synced (or o is nil), or
// when it has not delivered this process's writes within maxLag.
func (o *Overlaps) Overlapping(ctx context.Context, prefixes []netip.Prefix) ([]*networkingv1.ServiceCIDR, bool) {
	if o == nil || !o.synced() || !o.caughtUp(ctx) {
		return nil, false
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	names := prefixindex.OverlappingAny(o.index, prefixes)
	found := make([]*networkingv1.ServiceCIDR, len(names))
	for i, name := range names {
		found[i] = o.cidrs[name]
	}
	return found, true
}

// caughtUp waits until the handlers have been delivered every write
// recorded before it is called, for at most maxLag, and reports whether
// they have.
func (o *Overlaps) caughtUp(ctx context.Context) bool {
	o.mu.RLock()
	want := o.written
	o.mu.RUnlock()
	var timeout <-chan time.Time
	for {
		o.mu.RLock()
		delivered, grew := o.delivered, o.grew
		o.mu.RUnlock()
		if delivered >= want {
			return true
		}
		if timeout == nil {
			timer := time.NewTimer(o.maxLag)
			defer timer.Stop()
			timeout = timer.C
		}
		select {
		case <-grew:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// deliveredLocked records the resourceVersion of an object delivered to
// the handlers; o.mu is held.
func (o *Overlaps) deliveredLocked(sc *networkingv1.ServiceCIDR) {
	if rv, ok := resourceVersion(sc); ok && rv > o.delivered {
		o.delivered = rv
		close(o.grew)
		o.grew = make(chan struct{})
	}
}

// resourceVersion is obj's resourceVersion as a number: this server's are
// etcd revisions, which grow with every write.
func resourceVersion(obj runtime.Object) (uint64, bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0, false
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return rv, err == nil
}

// addServiceCIDR files a ServiceCIDR the informer added.
func (o *Overlaps) addServiceCIDR(obj any) {
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
		o.file(sc)
	}
}

// updateServiceCIDR files the new state of an updated ServiceCIDR.
func (o *Overlaps) updateServiceCIDR(_, obj any) {
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
		o.file(sc)
	}
}

// deleteServiceCIDR removes a deleted ServiceCIDR, delivered as itself or
// as a tombstone.
func (o *Overlaps) deleteServiceCIDR(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	sc, ok := obj.(*networkingv1.ServiceCIDR)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unfileLocked(sc.Name)
	o.deliveredLocked(sc)
}

// file replaces what is filed under sc's name with sc.
func (o *Overlaps) file(sc *networkingv1.ServiceCIDR) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deliveredLocked(sc)
	// Most updates (status, finalizers, annotations) keep the CIDRs, which
	// are immutable but for a single-stack ServiceCIDR gaining a family.
	if old, ok := o.cidrs[sc.Name]; ok && slices.Equal(old.Spec.CIDRs, sc.Spec.CIDRs) {
		o.cidrs[sc.Name] = sc
		return
	}
	o.unfileLocked(sc.Name)
	for _, text := range sc.Spec.CIDRs {
		if p, err := subrange.ParsePrefix(text); err == nil {
			o.index.Add(p, sc.Name)
		}
	}
	o.cidrs[sc.Name] = sc
}

// unfileLocked removes what is filed under name, if anything; o.mu is held.
func (o *Overlaps) unfileLocked(name string) {
	old, ok := o.cidrs[name]
	if !ok {
		return
	}
	for _, text := range old.Spec.CIDRs {
		if p, err := subrange.ParsePrefix(text); err == nil {
			o.index.Remove(p, name)
		}
	}
	delete(o.cidrs, name)
}
