package iprepair

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/pkg/ipaddress/scope"
)

// watch registers run's event handlers on the Service, IPAddress,
// ServiceCIDR and Namespace informers of factory. It returns what reports
// each handler synced, and unwatch, which removes the handlers registered,
// the last first; the caller calls unwatch on error too.
func (run *repairRun) watch(factory informers.SharedInformerFactory) (synced []cache.InformerSynced, unwatch func(), err error) {
	var removes []func()
	unwatch = func() {
		for _, remove := range slices.Backward(removes) {
			remove()
		}
	}
	for _, h := range []struct {
		inf     cache.SharedIndexInformer
		handler cache.ResourceEventHandler
	}{
		{factory.Core().V1().Services().Informer(), cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    run.addService,
			UpdateFunc: run.updateService,
			DeleteFunc: run.deleteService,
		}},
		{factory.Networking().V1().IPAddresses().Informer(), cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    run.addIPAddress,
			UpdateFunc: run.updateIPAddress,
			DeleteFunc: run.deleteIPAddress,
		}},
		{factory.Networking().V1().ServiceCIDRs().Informer(), cache.ResourceEventHandlerDetailedFuncs{
			AddFunc:    run.addServiceCIDR,
			UpdateFunc: run.updateServiceCIDR,
			DeleteFunc: run.deleteServiceCIDR,
		}},
		{factory.Core().V1().Namespaces().Informer(), cache.ResourceEventHandlerFuncs{UpdateFunc: run.updateNamespace}},
	} {
		reg, err := h.inf.AddEventHandler(h.handler)
		if err != nil {
			return nil, unwatch, fmt.Errorf("ipaddress repair: watch: %w", err)
		}
		removes = append(removes, func() { _ = h.inf.RemoveEventHandler(reg) })
		synced = append(synced, reg.HasSynced)
	}
	return synced, unwatch, nil
}

// The Adds of an informer's initial list (isInInitialList) queue nothing:
// Run's first full pass starts once every handler has synced, and
// reconciles every address of the caches then, the initial lists'
// objects included. Queued as well, each address of a million would be
// reconciled a second time once the workers start, right after that pass.

// addService queues the addresses of a Service added.
func (run *repairRun) addService(obj any, isInInitialList bool) {
	if !isInInitialList {
		run.enqueueService(obj)
	}
}

// updateService queues the addresses the Service held and those it holds.
func (run *repairRun) updateService(old, cur any) { run.enqueueService(old); run.enqueueService(cur) }

// deleteService queues the addresses of a Service deleted.
func (run *repairRun) deleteService(obj any) { run.enqueueService(obj) }

// addIPAddress queues the address of an IPAddress added.
func (run *repairRun) addIPAddress(obj any, isInInitialList bool) {
	if !isInInitialList {
		run.enqueueIPAddress(obj)
	}
}

// updateIPAddress queues the address of an IPAddress changed.
func (run *repairRun) updateIPAddress(_, cur any) { run.enqueueIPAddress(cur) }

// deleteIPAddress queues the address of an IPAddress deleted.
func (run *repairRun) deleteIPAddress(obj any) { run.enqueueIPAddress(obj) }

// addServiceCIDR queues the held addresses a ServiceCIDR added can concern;
// one of the initial list only makes the view parse the ServiceCIDRs again.
func (run *repairRun) addServiceCIDR(obj any, isInInitialList bool) {
	if isInInitialList {
		run.view.cidrsChanged()
		return
	}
	run.cidrAddedOrDeleted(obj)
}

// deleteServiceCIDR queues the held addresses a ServiceCIDR deleted can
// concern.
func (run *repairRun) deleteServiceCIDR(obj any) { run.cidrAddedOrDeleted(obj) }

// updateServiceCIDR queues the held addresses a ServiceCIDR's change of
// prefixes or scope can concern; any other change moves nothing.
func (run *repairRun) updateServiceCIDR(old, cur any) {
	o, ok1 := old.(*networkingv1.ServiceCIDR)
	c, ok2 := cur.(*networkingv1.ServiceCIDR)
	if ok1 && ok2 && slices.Equal(o.Spec.CIDRs, c.Spec.CIDRs) && scope.SameScope(o.Annotations, c.Annotations) {
		return
	}
	if !run.enqueueAllIfScoped(old, cur) {
		run.enqueueInside(old, cur)
	}
}

// updateNamespace queues the addresses of a namespace's Services when its
// labels changed and some ServiceCIDR is scoped: a namespace relabelled
// moves its Services in or out of scopes.
func (run *repairRun) updateNamespace(old, cur any) {
	o, ok1 := old.(*corev1.Namespace)
	c, ok2 := cur.(*corev1.Namespace)
	if !ok1 || !ok2 || maps.Equal(o.Labels, c.Labels) {
		return
	}
	if ranges, err := run.view.cidrs(); err != nil || !ranges.scoped {
		return
	}
	svcs, err := run.view.serviceLister.Services(c.Name).List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range svcs {
		run.enqueueService(svc)
	}
}

// cidrAddedOrDeleted queues every held address when the ServiceCIDR is
// scoped, else those inside its prefixes.
func (run *repairRun) cidrAddedOrDeleted(obj any) {
	if !run.enqueueAllIfScoped(obj) {
		run.enqueueInside(obj)
	}
}

// enqueueService queues the addresses a Service (or its tombstone) holds.
func (run *repairRun) enqueueService(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if svc, ok := obj.(*corev1.Service); ok {
		for _, k := range addressKeys(svc) {
			run.queue.Add(k)
		}
	}
}

// enqueueIPAddress queues the address an IPAddress (or its tombstone) is
// named after.
func (run *repairRun) enqueueIPAddress(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if ipa, ok := obj.(*networkingv1.IPAddress); ok {
		run.queue.Add(ipa.Name)
	}
}

// enqueueInside queues the held addresses inside the prefixes of the
// ServiceCIDRs objs: a ServiceCIDR added, deleted or changed moves the
// addresses inside its prefixes in or out of range. A change of its status
// or metadata moves nothing.
func (run *repairRun) enqueueInside(objs ...any) {
	run.view.cidrsChanged()
	var prefixes []netip.Prefix
	for _, obj := range objs {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if sc, ok := obj.(*networkingv1.ServiceCIDR); ok {
			prefixes = append(prefixes, cidrPrefixes(sc)...)
		}
	}
	for _, k := range run.view.heldInside(prefixes) {
		run.queue.Add(k)
	}
}

// enqueueAllIfScoped queues every held address, and reports true, when one
// of the ServiceCIDRs objs is scoped: a scope added, changed or removed can
// move any held address in or out of its Service's scope (a Service newly
// in a strict scope holds an unscoped address). Scopes change rarely.
func (run *repairRun) enqueueAllIfScoped(objs ...any) bool {
	if !slices.ContainsFunc(objs, func(obj any) bool {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		sc, ok := obj.(*networkingv1.ServiceCIDR)
		return ok && scope.Scoped(sc.Annotations)
	}) {
		return false
	}
	run.view.cidrsChanged()
	for _, k := range run.view.heldKeys() {
		run.queue.Add(k)
	}
	return true
}
