// Package releasetest holds the one scenario both ways an IPAddress-model
// allocator releases are tested against: through client-go
// (pkg/ipaddress) and through the server's own storage
// (test/integration). A release deletes the IPAddress as the allocator's
// informer last saw it, with its UID and resourceVersion as preconditions,
// so a stale copy must never free an object that changed.
package releasetest

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// Run claims n addresses from first on for one Service with a, lets a's
// cache see each, changes it behind a's back, and releases it for that
// Service, in turn:
//   - deleted and re-created for another Service: must be kept;
//   - updated (a label) by someone, same owner: must be released;
//   - given a finalizer: must be marked for deletion and kept until the
//     finalizer goes (the store's rules, not a bypass of them);
//   - deleted and re-created for a newer Service of the same name (another
//     UID), and the cache has seen the new object: must be kept (the
//     server's cache keeps no UID; its storage judges the stored one).
func Run(t *testing.T, ctx context.Context, a *ipaddress.Allocator, client kubernetes.Interface, first netip.Addr, n int) {
	t.Helper()
	s := scenario{t: t, ctx: ctx, a: a, ips: client.NetworkingV1().IPAddresses()}
	ip := first
	for i := range n {
		if err := a.Allocate(ctx, ip, s.owner(1)); err != nil {
			t.Fatal(err)
		}
		s.inCache(ip, true)
		switch i % 4 {
		case 0:
			s.reassigned(ip)
		case 1:
			s.touched(ip)
		case 2:
			s.held(ip)
		case 3:
			s.renewed(ip)
		}
		ip = ip.Next()
	}
}

// scenario is Run's state: the allocator releasing and the API its
// IPAddresses are changed through behind its back.
type scenario struct {
	t   *testing.T
	ctx context.Context
	a   *ipaddress.Allocator
	ips networkingclient.IPAddressInterface
}

// owner is the Service s<i>.
func (s scenario) owner(i int) allocation.Owner {
	return allocation.Owner{Namespace: "default", Name: fmt.Sprintf("s%d", i), UID: fmt.Sprintf("uid-s%d", i)}
}

func (s scenario) until(what string, cond func() (bool, error)) {
	s.t.Helper()
	if err := wait.PollUntilContextTimeout(s.ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond() }); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// inCache waits until the allocator's cache holds ip allocated, or not.
func (s scenario) inCache(ip netip.Addr, want bool) {
	s.t.Helper()
	s.until(fmt.Sprintf("%s in the cache: %v", ip, want), func() (bool, error) {
		cached := false
		err := s.a.ForEach(s.ctx, func(x netip.Addr) { cached = cached || x == ip })
		return cached == want, err
	})
}

// reassigned: deleted and re-created for another Service; s1's release
// must keep it.
func (s scenario) reassigned(ip netip.Addr) {
	s.t.Helper()
	if err := s.ips.Delete(s.ctx, ip.String(), metav1.DeleteOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.ips.Create(s.ctx, ipaddress.NewObject(ip, s.owner(2)), metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if err := s.a.Release(s.ctx, ip, s.owner(1)); err != nil {
		s.t.Fatal(err)
	}
	obj, err := s.ips.Get(s.ctx, ip.String(), metav1.GetOptions{})
	if err != nil || obj.Spec.ParentRef.Name != "s2" {
		s.t.Fatalf("%s, re-created for s2, was released by s1's release: %v %v", ip, obj, err)
	}
}

// touched: updated (a label) by someone, same owner; s1's release must
// delete it.
func (s scenario) touched(ip netip.Addr) {
	s.t.Helper()
	obj, err := s.ips.Get(s.ctx, ip.String(), metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	obj.Labels["example.com/touched"] = "yes"
	if _, err := s.ips.Update(s.ctx, obj, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	if err := s.a.Release(s.ctx, ip, s.owner(1)); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.ips.Get(s.ctx, ip.String(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		s.t.Fatalf("%s, updated, of the releasing owner: not released (%v)", ip, err)
	}
}

// held: given a finalizer; s1's release must mark it for deletion and
// keep it until the finalizer goes.
func (s scenario) held(ip netip.Addr) {
	s.t.Helper()
	obj, err := s.ips.Get(s.ctx, ip.String(), metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	obj.Finalizers = []string{"example.com/hold"}
	if _, err := s.ips.Update(s.ctx, obj, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.until(ip.String()+" with a finalizer marked for deletion", func() (bool, error) {
		if err := s.a.Release(s.ctx, ip, s.owner(1)); err != nil {
			return false, err
		}
		obj, err := s.ips.Get(s.ctx, ip.String(), metav1.GetOptions{})
		return err == nil && obj.DeletionTimestamp != nil, nil
	})
	obj, err = s.ips.Get(s.ctx, ip.String(), metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	obj.Finalizers = nil
	if _, err := s.ips.Update(s.ctx, obj, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// renewed: deleted and re-created for a newer s1 (another UID), and the
// cache has seen the new object; the older s1's release must keep it.
func (s scenario) renewed(ip netip.Addr) {
	s.t.Helper()
	if err := s.ips.Delete(s.ctx, ip.String(), metav1.DeleteOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.inCache(ip, false)
	newer := s.owner(1)
	newer.UID = "uid-s1-newer"
	if _, err := s.ips.Create(s.ctx, ipaddress.NewObject(ip, newer), metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.inCache(ip, true)
	if err := s.a.Release(s.ctx, ip, s.owner(1)); err != nil {
		s.t.Fatal(err)
	}
	obj, err := s.ips.Get(s.ctx, ip.String(), metav1.GetOptions{})
	if err != nil || obj.Annotations[ipaddress.AnnotationServiceUID] != newer.UID {
		s.t.Fatalf("%s, re-created for a newer s1, was released by the older s1's release: %v %v", ip, obj, err)
	}
}
