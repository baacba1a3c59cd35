package iprepair

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// outcome is what reconciling one address found and did.
type outcome struct {
	problems []report.Problem
	events   []pendingEvent
	writes   int
	created  int
	deleted  int
	carried  int // created for a bitmap-model allocation (CarryOver)
	// retryAfter asks Run to look at the address again then (an orphan
	// still inside its grace period).
	retryAfter time.Duration
}

type pendingEvent struct {
	obj     runtime.Object
	reason  string
	message string
}

// report records a problem, and an event on obj when it has a reason.
func (o *outcome) note(obj runtime.Object, p report.Problem) {
	o.problems = append(o.problems, p)
	if obj != nil && p.Reason != "" {
		o.events = append(o.events, pendingEvent{obj: obj, reason: p.Reason, message: p.Message})
	}
}

// commit counts and emits what a reconcile found, unless dry-running.
func (r *IPAddressRepair) commit(o outcome) {
	if r.cfg.DryRun {
		return
	}
	for _, p := range o.problems {
		r.cfg.Metrics.ObserveProblem(p)
	}
	r.carried.Add(uint64(o.carried))
	if r.cfg.Recorder != nil {
		for _, e := range o.events {
			r.cfg.Recorder.Event(e.obj, corev1.EventTypeWarning, e.reason, e.message)
		}
	}
}

// reconcile judges one work key: an address, or an invalid ClusterIP.
func (r *IPAddressRepair) reconcile(ctx context.Context, view ipView, k string) (outcome, error) {
	var out outcome
	holders, err := view.holders(k)
	if err != nil {
		return out, err
	}
	if text, invalid := strings.CutPrefix(k, invalidKeyPrefix); invalid {
		// Upstream formats the unparsed net.IP here and prints "<nil>"; we
		// print the text the Service holds.
		for _, svc := range holders {
			out.note(svc, report.Problem{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: text, Service: report.ServiceKey(svc),
				Message: fmt.Sprintf("Cluster IP %s is not a valid IP; please recreate Service", text)})
		}
		return out, nil
	}
	ip, canonical := parseAddressKey(k)
	if !canonical {
		// Not an address in canonical form: an IPAddress the API server
		// would not have accepted, not ours to judge.
		return out, nil
	}
	ipa, err := view.ipAddress(k)
	if err != nil {
		return out, err
	}
	if len(holders) == 0 {
		err = r.reconcileOrphan(ctx, view, ip, ipa, &out)
		return out, err
	}
	ranges, err := view.cidrs()
	if err != nil {
		return out, err
	}
	if !ranges.contains(ip) {
		for _, svc := range holders {
			out.note(svc, report.Problem{Type: report.TypeOutOfRange, Reason: report.ReasonOutOfRange, IP: k, Service: report.ServiceKey(svc),
				Message: fmt.Sprintf("Cluster IP [%s]: %s is not within any configured Service CIDR; please recreate service", subrange.FamilyName(ip.Is6()), ip)})
		}
		return out, nil
	}
	if err := noteOutOfScope(view, ranges, ip, holders, &out); err != nil {
		return out, err
	}
	err = r.reconcileHeld(ctx, view, ip, holders, ipa, &out, true)
	return out, err
}

// noteOutOfScope reports each holder whose address lies outside the
// ServiceCIDRs its scope allows (a namespace relabelled, or a scope added or
// changed, after the address was allocated). The address stays: a scope
// never moves an existing Service's address. The repair keeps its IPAddress.
func noteOutOfScope(view ipView, ranges serviceCIDRs, ip netip.Addr, holders []*corev1.Service, out *outcome) error {
	if !ranges.scoped {
		return nil
	}
	for _, svc := range holders {
		nsLabels, err := view.namespaceLabels(svc.Namespace)
		if err != nil {
			return err
		}
		outside, allowed := ranges.outOfScope(ip, nsLabels, svc.Labels)
		if !outside {
			continue
		}
		may := "no ServiceCIDR of its family"
		if len(allowed) > 0 {
			may = "ServiceCIDR " + allocation.QuoteNames(allowed)
		}
		out.note(svc, report.Problem{Type: report.TypeOutOfScope, Reason: report.ReasonOutOfScope, IP: ip.String(), Service: report.ServiceKey(svc),
			Message: fmt.Sprintf("Cluster IP [%s]: %s is outside the ServiceCIDRs this Service's scope allows (it may use %s); it keeps the address until it is recreated",
				subrange.FamilyName(ip.Is6()), ip, may)})
	}
	return nil
}

// reconcileHeld makes sure the address held by holders (oldest first) has
// the right IPAddress. ipa is the IPAddress seen, nil if none. mayRetry
// allows one re-judgement when a create meets an object the snapshot missed.
func (r *IPAddressRepair) reconcileHeld(ctx context.Context, view ipView, ip netip.Addr, holders []*corev1.Service, ipa *networkingv1.IPAddress, out *outcome, mayRetry bool) error {
	owner := holders[0]
	if ipa != nil {
		for _, svc := range holders {
			if references(ipa, svc) {
				owner = svc
				break
			}
		}
	}
	reportDuplicates := func() {
		for _, svc := range holders {
			if svc != owner {
				out.note(svc, duplicateProblem(ip, svc))
			}
		}
	}
	if ipa == nil {
		return r.createMissing(ctx, view, ip, holders, owner, out, mayRetry, reportDuplicates)
	}
	reportDuplicates()
	return r.judgeExisting(ctx, view, ip, owner, ipa, out)
}

// createMissing creates the IPAddress of ip, held by owner (and maybe, as
// duplicates, by the other holders), which the snapshot lacks: after
// reading it again, for a Service read again too.
func (r *IPAddressRepair) createMissing(ctx context.Context, view ipView, ip netip.Addr, holders []*corev1.Service, owner *corev1.Service,
	out *outcome, mayRetry bool, reportDuplicates func()) error {
	family := subrange.FamilyName(ip.Is6())
	p := report.Problem{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: ip.String(), Service: report.ServiceKey(owner),
		Message: fmt.Sprintf("Cluster IP [%s]: %s is not allocated; repairing", family, ip)}
	if r.cfg.DryRun {
		out.note(owner, p)
		reportDuplicates()
		return nil
	}
	// The IPAddress is read before the Service. The cache may lag behind
	// it (an allocation writes it before its Service, but the two
	// informers are separate streams), and a Service deleted between a
	// read of the Service and this create had released its address
	// already: the create made an orphan, and a static create of the
	// address failed until the repair took it back. In this order a
	// Service still found after its IPAddress was found missing really
	// lacks it: a delete removes the Service before it releases.
	cur, err := r.cfg.Client.NetworkingV1().IPAddresses().Get(ctx, ip.String(), metav1.GetOptions{})
	switch {
	case err == nil && mayRetry:
		return r.reconcileHeld(ctx, view, ip, holders, cur, out, false)
	case err == nil:
		return fmt.Errorf("ipaddress %s: %w", ip, errChanged)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get ipaddress %s: %w", ip, err)
	}
	fresh, err := r.freshHolder(ctx, owner, ip)
	if err != nil || fresh == nil {
		return err // gone or changed since the snapshot: nothing to repair
	}
	err = r.create(ctx, ip, fresh)
	switch {
	case errors.Is(err, errHolderGone):
		return nil // deleted meanwhile: nothing to repair
	case err == nil && r.carryingOver():
		out.writes++
		out.created++
		out.carried++
		klog.FromContext(ctx).V(4).Info("Carried a bitmap-model allocation over to an IPAddress", "ip", ip, "service", report.ServiceKey(fresh))
		reportDuplicates()
		return nil
	case err == nil:
		out.writes++
		out.created++
		p.Fixed = true
		out.note(fresh, p)
		reportDuplicates()
		return nil
	case apierrors.IsAlreadyExists(err) && mayRetry:
		// Claimed since the snapshot (normally by the allocator, for
		// the Service being created): judge what is there.
		cur, err := r.cfg.Client.NetworkingV1().IPAddresses().Get(ctx, ip.String(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("ipaddress %s: %w", ip, errChanged)
		}
		if err != nil {
			return fmt.Errorf("get ipaddress %s: %w", ip, err)
		}
		return r.reconcileHeld(ctx, view, ip, holders, cur, out, false)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("create ipaddress %s for service %s: %w", ip, report.ServiceKey(fresh), errChanged)
	default:
		return fmt.Errorf("create ipaddress %s for service %s: %w", ip, report.ServiceKey(fresh), err)
	}

}

// judgeExisting checks the IPAddress of ip that owner holds: another
// controller's object is reported, not changed; ours gets its family label
// fixed or its parentRef pointed at owner.
func (r *IPAddressRepair) judgeExisting(ctx context.Context, view ipView, ip netip.Addr, owner *corev1.Service, ipa *networkingv1.IPAddress, out *outcome) error {
	if !ipaddress.IsManaged(ipa) {
		if references(ipa, owner) {
			out.note(nil, report.Problem{Type: report.TypeRepair, IP: ip.String(), Service: report.ServiceKey(owner),
				Message: fmt.Sprintf("IPAddress %s of Service %s has the labels %v, not the ones of %s; it is not managed by the repair and left as it is", ip, report.ServiceKey(owner), ipa.Labels, ipaddress.ManagedBy)})
		} else {
			// Another controller's object holds the address.
			out.note(owner, duplicateProblem(ip, owner))
		}
		return nil
	}
	if references(ipa, owner) {
		if want := subrange.FamilyName(ip.Is6()); ipa.Labels[ipaddress.LabelIPFamily] != want {
			return r.fixFamilyLabel(ctx, ip, owner, ipa, out)
		}
		return nil
	}
	return r.repoint(ctx, view, ip, owner, ipa, out)
}

func duplicateProblem(ip netip.Addr, svc *corev1.Service) report.Problem {
	return report.Problem{Type: report.TypeDuplicate, Reason: report.ReasonAlreadyAllocated, IP: ip.String(), Service: report.ServiceKey(svc),
		Message: fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services; please recreate service", subrange.FamilyName(ip.Is6()), ip)}
}

// fixFamilyLabel sets the ip-family label of an IPAddress of ours with a
// merge patch of that label, conditional on the resourceVersion seen: the
// rest stays as stored, what the kept copy lacks (the Service UID
// annotation, managedFields; internal/slim) included.
func (r *IPAddressRepair) fixFamilyLabel(ctx context.Context, ip netip.Addr, owner *corev1.Service, ipa *networkingv1.IPAddress, out *outcome) error {
	p := report.Problem{Type: report.TypeRepair, IP: ip.String(), Service: report.ServiceKey(owner),
		Message: fmt.Sprintf("IPAddress %s has the label %s=%q; repairing", ip, ipaddress.LabelIPFamily, ipa.Labels[ipaddress.LabelIPFamily])}
	if r.cfg.DryRun {
		out.note(nil, p)
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": ipa.ResourceVersion,
		"labels":          map[string]string{ipaddress.LabelIPFamily: subrange.FamilyName(ip.Is6())},
	}})
	if err != nil {
		return fmt.Errorf("label ipaddress %s: %w", ip, err)
	}
	_, err = r.cfg.Client.NetworkingV1().IPAddresses().Patch(ctx, ipa.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case err == nil:
		out.writes++
		p.Fixed = true
		out.note(nil, p)
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return fmt.Errorf("label ipaddress %s: %w", ip, errChanged)
	default:
		return fmt.Errorf("label ipaddress %s: %w", ip, err)
	}
}

// repoint re-creates an IPAddress of ours that references another parent for
// owner, the Service that holds the address, when that is safe (see the
// type's doc).
func (r *IPAddressRepair) repoint(ctx context.Context, view ipView, ip netip.Addr, owner *corev1.Service, ipa *networkingv1.IPAddress, out *outcome) error {
	family := subrange.FamilyName(ip.Is6())
	parentExists, err := parentStored(view, ipa)
	if err != nil {
		return err
	}
	var p report.Problem
	var on runtime.Object
	if parentExists {
		p = report.Problem{Type: report.TypeRepair, Reason: report.ReasonWrongReference, IP: ip.String(), Service: report.ServiceKey(owner),
			Message: fmt.Sprintf("IPAddress: %s for Service %s/%s has a wrong reference; cleaning up", ip, ipa.Spec.ParentRef.Namespace, ipa.Spec.ParentRef.Name)}
		on = ipa
	} else {
		p = report.Problem{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: ip.String(), Service: report.ServiceKey(owner),
			Message: fmt.Sprintf("the ClusterIP [%s]: %s for Service %s/%s has a wrong reference; repairing", family, ip, owner.Namespace, owner.Name)}
		on = owner
	}
	if r.cfg.DryRun {
		out.note(on, p)
		return nil
	}
	if remaining := r.cfg.OrphanGrace - r.cfg.Now().Sub(ipa.CreationTimestamp.Time); remaining > 0 {
		out.note(nil, report.Problem{Type: report.TypeRepair, IP: ip.String(), Service: report.ServiceKey(owner),
			Message: fmt.Sprintf("IPAddress %s references %s, not Service %s that holds the address; it is re-created for that Service once it is %v old", ip, ipaddress.Parent(ipa), report.ServiceKey(owner), r.cfg.OrphanGrace)})
		out.retryAfter = remaining
		return nil
	}

	// Fresh reads: the object as it is now, the holder, the referenced parent.
	api := r.cfg.Client.NetworkingV1().IPAddresses()
	cur, err := api.Get(ctx, ip.String(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("ipaddress %s: %w", ip, errChanged)
	}
	if err != nil {
		return fmt.Errorf("get ipaddress %s: %w", ip, err)
	}
	if cur.UID != ipa.UID || cur.ResourceVersion != ipa.ResourceVersion {
		return fmt.Errorf("ipaddress %s: %w", ip, errChanged)
	}
	fresh, err := r.freshHolder(ctx, owner, ip)
	if err != nil || fresh == nil {
		return err
	}
	if ipaddress.ParentIsService(cur) {
		parent, err := r.getService(ctx, cur.Spec.ParentRef.Namespace, cur.Spec.ParentRef.Name)
		if err != nil {
			return err
		}
		if parent != nil && holding.HoldsIP(parent, ip) {
			// Both hold it after all: the referenced one keeps it.
			out.note(fresh, duplicateProblem(ip, fresh))
			return nil
		}
	}
	if err := r.deleteIfUnchanged(ctx, cur); err != nil {
		return err
	}
	out.writes++
	out.deleted++
	err = r.create(ctx, ip, fresh)
	switch {
	case errors.Is(err, errHolderGone):
		return nil // the holder was deleted meanwhile: the address is free
	case err == nil:
		out.writes++
		out.created++
		p.Fixed = true
		out.note(on, p)
		return nil
	case apierrors.IsAlreadyExists(err):
		// An allocation took the address between the delete and the create.
		out.note(on, p)
		out.note(fresh, duplicateProblem(ip, fresh))
		return nil
	default:
		// The address is now free; the next look creates it for the holder.
		out.note(on, p)
		return fmt.Errorf("re-create ipaddress %s for service %s: %w", ip, report.ServiceKey(fresh), err)
	}
}

// reconcileOrphan handles an IPAddress that no Service holds.
func (r *IPAddressRepair) reconcileOrphan(ctx context.Context, view ipView, ip netip.Addr, ipa *networkingv1.IPAddress, out *outcome) error {
	if ipa == nil {
		return nil
	}
	if !ipaddress.IsManaged(ipa) {
		if ipaddress.ParentIsService(ipa) {
			// Reported because it blocks the address; written by someone
			// else, so only they (or a person) may remove it.
			out.note(nil, report.Problem{Type: report.TypeLeak, IP: ip.String(), Service: ipaddress.Parent(ipa),
				Message: fmt.Sprintf("IPAddress %s references Service %s, which does not hold it; it is managed by %q, not %s, and left untouched", ip, ipaddress.Parent(ipa), ipa.Labels[ipaddress.LabelManagedBy], ipaddress.ManagedBy)})
		}
		return nil
	}
	orphanProblem := func(ipa *networkingv1.IPAddress, parentExists bool) report.Problem {
		p := report.Problem{Type: report.TypeLeak, Reason: report.ReasonIPNotAllocated, IP: ip.String()}
		switch {
		case !ipaddress.ParentIsService(ipa):
			p.Message = fmt.Sprintf("IPAddress %s appears to have been modified, not referencing a Service %v: cleaning up", ip, ipa.Spec.ParentRef)
		case parentExists:
			p.Service = ipaddress.Parent(ipa)
			p.Reason = report.ReasonWrongReference
			p.Message = fmt.Sprintf("IPAddress: %s for Service %s has a wrong reference; cleaning up", ip, p.Service)
		default:
			p.Service = ipaddress.Parent(ipa)
			p.Message = fmt.Sprintf("IPAddress: %s for Service %s appears to have leaked: cleaning up", ip, p.Service)
		}
		return p
	}
	parentExists, err := parentStored(view, ipa)
	if err != nil {
		return err
	}
	if r.cfg.DryRun {
		out.note(ipa, orphanProblem(ipa, parentExists))
		return nil
	}
	if r.pendingOrphan(ip, ipa, out) {
		return nil
	}

	// Fresh reads right before the delete: the object, then its owner.
	cur, err := r.cfg.Client.NetworkingV1().IPAddresses().Get(ctx, ip.String(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // released meanwhile
	}
	if err != nil {
		return fmt.Errorf("get ipaddress %s: %w", ip, err)
	}
	if !ipaddress.IsManaged(cur) || r.pendingOrphan(ip, cur, out) {
		return nil
	}
	if waiting, err := r.waitInFlight(ctx, ip, cur, out); err != nil || waiting {
		return err
	}
	parentExists = false
	if ipaddress.ParentIsService(cur) {
		parent, err := r.getService(ctx, cur.Spec.ParentRef.Namespace, cur.Spec.ParentRef.Name)
		if err != nil {
			return err
		}
		if parent != nil && holding.HoldsIP(parent, ip) {
			return nil // its owner holds it after all
		}
		parentExists = parent != nil
	}
	if err := r.deleteIfUnchanged(ctx, cur); err != nil {
		return err
	}
	out.writes++
	out.deleted++
	p := orphanProblem(cur, parentExists)
	p.Fixed = true
	out.note(cur, p)
	return nil
}

// pendingOrphan reports an orphan still inside its grace period and asks for
// a second look when it ends.
func (r *IPAddressRepair) pendingOrphan(ip netip.Addr, ipa *networkingv1.IPAddress, out *outcome) bool {
	remaining := r.cfg.OrphanGrace - r.cfg.Now().Sub(ipa.CreationTimestamp.Time)
	if remaining <= 0 {
		return false
	}
	out.note(nil, report.Problem{Type: report.TypeLeak, IP: ip.String(), Service: ipaddress.Parent(ipa),
		Message: fmt.Sprintf("IPAddress %s (parent %s) is held by no Service; it is deleted once it is %v old", ip, ipaddress.Parent(ipa), r.cfg.OrphanGrace)})
	out.retryAfter = remaining
	return true
}

// deleteIfUnchanged deletes ipa on condition that its UID and
// resourceVersion are still the ones read.
func (r *IPAddressRepair) deleteIfUnchanged(ctx context.Context, ipa *networkingv1.IPAddress) error {
	err := r.cfg.Client.NetworkingV1().IPAddresses().Delete(ctx, ipa.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &ipa.UID, ResourceVersion: &ipa.ResourceVersion},
	})
	switch {
	case err == nil:
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return fmt.Errorf("delete ipaddress %s: %w", ipa.Name, errChanged)
	default:
		return fmt.Errorf("delete ipaddress %s: %w", ipa.Name, err)
	}
}

// freshHolder reads svc again and returns it if it is the same object and
// still holds ip, nil if not.
func (r *IPAddressRepair) freshHolder(ctx context.Context, svc *corev1.Service, ip netip.Addr) (*corev1.Service, error) {
	fresh, err := r.getService(ctx, svc.Namespace, svc.Name)
	if err != nil || fresh == nil {
		return nil, err
	}
	if fresh.UID != svc.UID || !holding.HoldsIP(fresh, ip) {
		return nil, nil
	}
	return fresh, nil
}

// getService reads a Service from the API server, nil if there is none.
func (r *IPAddressRepair) getService(ctx context.Context, namespace, name string) (*corev1.Service, error) {
	return ipaddress.ServicesOf(r.cfg.Client)(ctx, namespace, name)
}

// create claims ip for svc, as the allocator would.
// errHolderGone: the Service an IPAddress was created for was deleted (or
// let the address go) meanwhile; the IPAddress was taken back.
var errHolderGone = errors.New("the Service let the address go while its IPAddress was created")

// settleTimeout bounds the read and delete that finish a create (create).
const settleTimeout = 10 * time.Second

// create claims ip for svc, which freshHolder has just read. The read and
// the create are two steps: a Service deleted between them has released
// its address already (its release found no IPAddress), so the one created
// here would be an orphan held until the grace period ends, and a bitmap
// replica in a transition keeps the bit of an address whose IPAddress names
// another Service. So the Service is read once more after the create, and
// if it no longer holds ip the IPAddress is deleted again (conditional on
// the object created): whichever comes last, the Service's delete and its
// release, or this read, sees the other. That read and delete finish the
// create, so they run even when ctx ends after it (the server stopping),
// for settleTimeout at most.
func (r *IPAddressRepair) create(ctx context.Context, ip netip.Addr, svc *corev1.Service) error {
	obj := ipaddress.NewObject(ip, allocation.Owner{Namespace: svc.Namespace, Name: svc.Name, UID: string(svc.UID)})
	created, err := r.cfg.Client.NetworkingV1().IPAddresses().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	still, err := r.freshHolder(ctx, svc, ip)
	if err != nil {
		return err // the IPAddress stays; a later pass judges it with its grace
	}
	if still != nil {
		return nil
	}
	if err := r.deleteIfUnchanged(ctx, created); err != nil && !errors.Is(err, errChanged) {
		return err
	}
	return errHolderGone
}

// references reports whether the IPAddress's parent is svc, by namespace and
// name: a UID recorded for an earlier Service of that name is not a wrong
// reference to report (the address is svc's to hold, and releases compare
// the UID).
func references(ipa *networkingv1.IPAddress, svc *corev1.Service) bool {
	return ipaddress.OwnedBy(ipa, allocation.Owner{Namespace: svc.Namespace, Name: svc.Name})
}

// parentStored reports whether ipa references a Service and the view holds
// that Service.
func parentStored(view ipView, ipa *networkingv1.IPAddress) (bool, error) {
	if !ipaddress.ParentIsService(ipa) {
		return false, nil
	}
	parent, err := view.service(ipa.Spec.ParentRef.Namespace, ipa.Spec.ParentRef.Name)
	return parent != nil, err
}
