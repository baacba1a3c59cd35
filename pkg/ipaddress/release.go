package ipaddress

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/allocation"
)

// releaseAttempts bounds Release's get/conditional-delete loop when the
// object keeps changing under it.
const releaseAttempts = 3

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
	// OtherOwner: the IPAddress belongs to someone else, who holds the
	// address, and was kept.
	OtherOwner
	// NotHeld: the IPAddress names another Service, which does not hold the
	// address (gone, or holding others): a stale IPAddress. It was kept; the
	// repair removes it once its grace has passed. A second record of the
	// address (the dual-written bitmap) is the owner's to free.
	NotHeld
)

// ReleaseOwned is Release reporting what it found, so that a caller keeping
// a second record of the address (the dual-written bitmap) frees that one
// only when no other Service holds the address.
func (a *Allocator) ReleaseOwned(ctx context.Context, ip netip.Addr, owner allocation.Owner) (ReleaseOutcome, error) {
	if !ip.IsValid() || ip.Is6() != a.ipv6 {
		return Absent, nil
	}
	var cached *networkingv1.IPAddress
	if a.ready.Load() {
		cached, _ = a.ipLister.Get(ip.String()) // a miss is nil: read live
	}
	outcome, err := deleteOwned(ctx, a.objects, a.services, ip, owner, cached)
	if err == nil && outcome == Released {
		a.lock()
		if a.inflight[ip] == nil {
			delete(a.unobserved, ip)
			a.markLocked(ip, false) // free for reuse before the watch event arrives
		}
		a.mu.Unlock()
	}
	return outcome, err
}

// ExactDeleter is implemented by Objects that can delete an object as the
// caller read it, checked where it is stored (the server's own storage,
// internal/registry/ipaddresses.InProcess): the delete happens only if the
// object is still that one (same UID and resourceVersion) and, as stored,
// belongs to owner (OwnedBy). seen may lack the Service UID annotation (the
// server's informer keeps none): the stored object's is what is judged.
type ExactDeleter interface {
	DeleteExact(ctx context.Context, seen *networkingv1.IPAddress, owner allocation.Owner) error
}

// deleteExact deletes seen, which the caller judged owner's, only if it is
// still that object: its UID and resourceVersion are the preconditions.
func deleteExact(ctx context.Context, api Objects, seen *networkingv1.IPAddress, owner allocation.Owner) error {
	if d, ok := api.(ExactDeleter); ok {
		return d.DeleteExact(ctx, seen, owner)
	}
	return api.Delete(ctx, seen.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
		UID: &seen.UID, ResourceVersion: &seen.ResourceVersion,
	}})
}

// DeleteOwned deletes ip's IPAddress if it belongs to owner. The delete is
// conditional on the UID and resourceVersion just read, so an object that
// was re-created or re-assigned in between is never removed. An IPAddress
// of another Service is told apart (OtherOwner, NotHeld) by reading that
// Service through services. It needs no allocator: the bitmap model uses it
// to keep IPAddresses true during a transition.
func DeleteOwned(ctx context.Context, api Objects, services Services, ip netip.Addr, owner allocation.Owner) (ReleaseOutcome, error) {
	return deleteOwned(ctx, api, services, ip, owner, nil)
}

// deleteOwned is DeleteOwned trying cached, an informer's copy, first: its
// preconditions make a stale copy harmless, a copy without the Service UID
// is judged again as stored (ExactDeleter), and it saves the read. Any
// failure of that attempt (another owner, a conflict, gone, an error) is
// settled by the reads that follow. Its errors are allocation.Retriable:
// the delete is conditional on the owner's object, so sending it again can
// never remove another Service's address.
func deleteOwned(ctx context.Context, api Objects, services Services, ip netip.Addr, owner allocation.Owner, cached *networkingv1.IPAddress) (ReleaseOutcome, error) {
	if cached != nil && OwnedBy(cached, owner) && deleteExact(ctx, api, cached, owner) == nil {
		return Released, nil
	}
	for range releaseAttempts {
		obj, err := api.Get(ctx, ip.String(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return Absent, nil
		}
		if err != nil {
			return Absent, allocation.Retriable(fmt.Errorf("release %s of service %s: %w", ip, owner, err))
		}
		if !OwnedBy(obj, owner) {
			held, err := heldByParent(ctx, services, obj, ip)
			if err != nil {
				return Absent, allocation.Retriable(fmt.Errorf("release %s of service %s: %w", ip, owner, err))
			}
			klog.FromContext(ctx).V(2).Info("Not releasing an IPAddress owned by another parent", "ip", ip, "service", owner.String(),
				"parentRef", obj.Spec.ParentRef, "parentHoldsIt", held)
			if !held {
				return NotHeld, nil
			}
			return OtherOwner, nil
		}
		err = deleteExact(ctx, api, obj, owner)
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return Released, nil
		case apierrors.IsConflict(err):
			continue // changed since the read: look again
		default:
			return Absent, allocation.Retriable(fmt.Errorf("release %s of service %s: %w", ip, owner, err))
		}
	}
	return Absent, allocation.Retriable(fmt.Errorf("release %s of service %s: the IPAddress kept changing", ip, owner))
}

// Services reads a Service as stored now; nil, nil when there is none.
type Services func(ctx context.Context, namespace, name string) (*corev1.Service, error)

// ServicesOf reads Services through client, from storage (no resourceVersion:
// not from a cache).
func ServicesOf(client kubernetes.Interface) Services {
	return func(ctx context.Context, namespace, name string) (*corev1.Service, error) {
		svc, err := client.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("get service %s/%s: %w", namespace, name, err)
		}
		return svc, nil
	}
}

// heldByParent reports whether what obj names holds ip now. An IPAddress of
// another Service is the address's claim only while that Service holds it:
// the repair creates the IPAddresses of Services that lack one, and one it
// creates for a Service deleted meanwhile (an earlier Service of the same
// name, say) stays until the repair takes it back. A parent that is not a
// Service, or no services to ask, counts as holding it.
func heldByParent(ctx context.Context, services Services, obj *networkingv1.IPAddress, ip netip.Addr) (bool, error) {
	if services == nil || !ParentIsService(obj) {
		return true, nil
	}
	p := obj.Spec.ParentRef
	svc, err := services(ctx, p.Namespace, p.Name)
	if err != nil || svc == nil {
		return false, err
	}
	return holding.HoldsIP(svc, ip), nil
}
