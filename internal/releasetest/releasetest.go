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
	ips := client.NetworkingV1().IPAddresses()
	owner := func(i int) allocation.Owner {
		return allocation.Owner{Namespace: "default", Name: fmt.Sprintf("s%d", i), UID: fmt.Sprintf("uid-s%d", i)}
	}
	until := func(what string, cond func() (bool, error)) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond() }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	ip := first
	for i := range n {
		if err := a.Allocate(ctx, ip, owner(1)); err != nil {
			t.Fatal(err)
		}
		inCache := func(want bool) {
			t.Helper()
			until(fmt.Sprintf("%s in the cache: %v", ip, want), func() (bool, error) {
				cached := false
				err := a.ForEach(ctx, func(x netip.Addr) { cached = cached || x == ip })
				return cached == want, err
			})
		}
		inCache(true)
		switch i % 4 {
		case 0:
			if err := ips.Delete(ctx, ip.String(), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := ips.Create(ctx, ipaddress.NewObject(ip, owner(2)), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := a.Release(ctx, ip, owner(1)); err != nil {
				t.Fatal(err)
			}
			obj, err := ips.Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil || obj.Spec.ParentRef.Name != "s2" {
				t.Fatalf("%s, re-created for s2, was released by s1's release: %v %v", ip, obj, err)
			}
		case 1:
			obj, err := ips.Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			obj.Labels["example.com/touched"] = "yes"
			if _, err := ips.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := a.Release(ctx, ip, owner(1)); err != nil {
				t.Fatal(err)
			}
			if _, err := ips.Get(ctx, ip.String(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("%s, updated, of the releasing owner: not released (%v)", ip, err)
			}
		case 2:
			obj, err := ips.Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			obj.Finalizers = []string{"example.com/hold"}
			if _, err := ips.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			until(ip.String()+" with a finalizer marked for deletion", func() (bool, error) {
				if err := a.Release(ctx, ip, owner(1)); err != nil {
					return false, err
				}
				obj, err := ips.Get(ctx, ip.String(), metav1.GetOptions{})
				return err == nil && obj.DeletionTimestamp != nil, nil
			})
			obj, err = ips.Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			obj.Finalizers = nil
			if _, err := ips.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		case 3:
			if err := ips.Delete(ctx, ip.String(), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			inCache(false)
			newer := owner(1)
			newer.UID = "uid-s1-newer"
			if _, err := ips.Create(ctx, ipaddress.NewObject(ip, newer), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			inCache(true)
			if err := a.Release(ctx, ip, owner(1)); err != nil {
				t.Fatal(err)
			}
			obj, err := ips.Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil || obj.Annotations[ipaddress.AnnotationServiceUID] != newer.UID {
				t.Fatalf("%s, re-created for a newer s1, was released by the older s1's release: %v %v", ip, obj, err)
			}
		}
		ip = ip.Next()
	}
}
