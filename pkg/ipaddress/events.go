package ipaddress

import (
	"context"
	"maps"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/subrange"
)

// addIPAddress marks the address of an IPAddress added to the cache used.
func (a *Allocator) addIPAddress(obj any) { a.observe(obj, true) }

// deleteIPAddress marks the address of an IPAddress deleted from the cache
// free.
func (a *Allocator) deleteIPAddress(obj any) { a.observe(obj, false) }

// addServiceCIDR notes the added ServiceCIDR when it has a CIDR of this
// family.
func (a *Allocator) addServiceCIDR(obj any) {
	if concerns(obj, a.ipv6) {
		a.cidrsChanged(obj)
	}
}

// updateServiceCIDR notes the changed ServiceCIDR when the change moves
// what this family serves.
func (a *Allocator) updateServiceCIDR(old, obj any) {
	if changeConcerns(old, obj, a.ipv6) {
		a.cidrsChanged(obj)
	}
}

// deleteServiceCIDR notes the deleted ServiceCIDR when it had a CIDR of
// this family.
func (a *Allocator) deleteServiceCIDR(obj any) {
	name := ""
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, name = tomb.Obj, tomb.Key // a ServiceCIDR's key is its name
	}
	if !concerns(obj, a.ipv6) {
		return
	}
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
		name = sc.Name
	}
	a.changed(name)
}

// observe applies an informer's word on an IPAddress of this family: it
// exists (an add) or not (a delete).
func (a *Allocator) observe(obj any, exists bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ipObj, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	if !a.ready.Load() {
		// Before it is ready the allocator has no ranges and no claims, and
		// the event is already in the cache its first rebuild reads: the
		// informer stores an object before it delivers the event, and the
		// rebuild (becomeReady) starts after ready is set, so after this
		// read. Skipping the parse spares a start the million events of
		// the initial list, for each family.
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

// cidrsChanged notes a change of the ServiceCIDR obj.
func (a *Allocator) cidrsChanged(obj any) {
	name := ""
	if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
		name = sc.Name
	}
	a.changed(name)
}

// changed marks the ranges stale once the allocator is ready (before, the
// first rebuild runs once everything has synced), with the name of the
// ServiceCIDR that changed ("": unknown, rebuild them all). The next taker
// of a.mu (lock) applies the change, or else the rebuild loop within
// rebuildDelay: what reads the ranges sees every event its informer
// delivered before the read, as when each event rebuilt them.
func (a *Allocator) changed(name string) {
	if !a.ready.Load() {
		return
	}
	a.dirtyMu.Lock()
	if name == "" {
		a.dirtyAll = true
	} else {
		if a.dirty == nil {
			a.dirty = map[string]bool{}
		}
		a.dirty[name] = true
	}
	a.dirtyMu.Unlock()
	a.stale.Store(true)
	select {
	case a.rebuildCh <- struct{}{}:
	default: // a rebuild is already due
	}
}

// rebuildDelay is how long the rebuild loop gathers ServiceCIDR events
// before it applies those no reader has applied meanwhile.
const rebuildDelay = 50 * time.Millisecond

// rebuildLoop applies the ServiceCIDR events no reader applied, until ctx ends,
// so a ServiceCIDR refused or newly served is reported without waiting for
// an allocation.
func (a *Allocator) rebuildLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.rebuildCh:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(rebuildDelay):
		}
		a.mu.Lock()
		refused := a.freshenLocked()
		a.mu.Unlock()
		a.report(refused)
	}
}

// lock takes a.mu with the ranges fresh: a ServiceCIDR event since the
// last rebuild is applied first; what it newly refuses is reported apart.
func (a *Allocator) lock() {
	a.mu.Lock()
	if refused := a.freshenLocked(); len(refused) > 0 {
		go a.report(refused)
	}
}

// freshenLocked applies the ServiceCIDR events that came since the last
// rebuild or apply. The flag and the names are taken before the cache is
// read, so an event whose change the read misses marks the ranges stale
// again, with its name.
func (a *Allocator) freshenLocked() []RefusedCIDR {
	if !a.stale.CompareAndSwap(true, false) {
		return nil
	}
	a.dirtyMu.Lock()
	dirty, all := a.dirty, a.dirtyAll
	a.dirty, a.dirtyAll = nil, false
	a.dirtyMu.Unlock()
	if all || a.served == nil {
		return a.rebuildLocked()
	}
	return a.applyLocked(slices.Sorted(maps.Keys(dirty)))
}

// report logs each refused CIDR and passes it to Config.OnRefused.
func (a *Allocator) report(refused []RefusedCIDR) {
	for _, r := range refused {
		a.logger.Error(r.Err, "ServiceCIDR not served", "serviceCIDR", r.ServiceCIDR, "cidr", r.CIDR)
		if a.onRefused != nil {
			a.onRefused(r)
		}
	}
}
