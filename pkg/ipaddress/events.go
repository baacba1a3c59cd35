package ipaddress

import (
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/subrange"
)

// addIPAddress marks the address of an IPAddress added to the cache used.
func (a *Allocator) addIPAddress(obj any) { a.observe(obj, true) }

// deleteIPAddress marks the address of an IPAddress deleted from the cache
// free.
func (a *Allocator) deleteIPAddress(obj any) { a.observe(obj, false) }

// addServiceCIDR rebuilds the ranges when the added ServiceCIDR has a CIDR
// of this family.
func (a *Allocator) addServiceCIDR(obj any) {
	if concerns(obj, a.ipv6) {
		a.cidrsChanged()
	}
}

// updateServiceCIDR rebuilds the ranges when the change moves what this
// family serves.
func (a *Allocator) updateServiceCIDR(old, obj any) {
	if changeConcerns(old, obj, a.ipv6) {
		a.cidrsChanged()
	}
}

// deleteServiceCIDR rebuilds the ranges when the deleted ServiceCIDR had a
// CIDR of this family.
func (a *Allocator) deleteServiceCIDR(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if concerns(obj, a.ipv6) {
		a.cidrsChanged()
	}
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

// cidrsChanged rebuilds the ranges from the ServiceCIDR cache once the
// allocator is ready, and reports the CIDRs it newly refuses.
func (a *Allocator) cidrsChanged() {
	if !a.ready.Load() {
		return // the first rebuild runs once everything has synced
	}
	a.mu.Lock()
	newlyRefused := a.rebuildLocked()
	a.mu.Unlock()
	a.report(newlyRefused)
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
