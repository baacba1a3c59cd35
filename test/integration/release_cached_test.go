package integration

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipallocator/dualwrite"
	"github.com/allocator/allocator/pkg/ipallocator/ipaddress"
)

// TestReleaseThroughCachedObject: the server's own allocator releases an
// IPAddress by handing the storage the informer's copy
// (ipaddresses.InProcess.DeleteCached: no read before the delete). An
// IPAddress deleted and re-created for another Service just before the
// release (the cache most likely still shows the old one) must be kept; one
// updated since the cache saw it (same owner) must still be released; one
// with a finalizer is marked for deletion, not removed.
func TestReleaseThroughCachedObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var v4 *ipaddress.Allocator
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress",
		WrapAllocator: func(a allocation.Interface) allocation.Interface {
			mu.Lock()
			defer mu.Unlock()
			switch x := a.(type) {
			case *ipaddress.Allocator:
				v4 = x
			case *dualwrite.Allocator:
				v4 = x.IPAddress()
			}
			return a
		}})
	mu.Lock()
	a := v4
	mu.Unlock()
	if a == nil {
		t.Fatal("the server's IPAddress allocator was not seen")
	}
	ips := srv.Client.NetworkingV1().IPAddresses()
	owner := func(i int) allocation.Owner {
		return allocation.Owner{Namespace: "default", Name: fmt.Sprintf("s%d", i)}
	}
	cached := func(ip netip.Addr) bool {
		found := false
		_ = a.ForEach(ctx, func(x netip.Addr) { found = found || x == ip })
		return found
	}
	for i := range 30 {
		ip := netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", 20+i))
		if err := a.Allocate(ctx, ip, owner(1)); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cached(ip), nil }); err != nil {
			t.Fatalf("%s never reached the cache", ip)
		}
		switch i % 3 {
		case 0: // re-created for another Service
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
				t.Fatalf("%s re-created for s2 was released by s1's release: %v %v", ip, obj, err)
			}
		case 1: // updated by someone, same owner
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
		case 2: // a finalizer: the store marks it deleted and keeps it
			obj, err := ips.Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			obj.Finalizers = []string{"example.com/hold"}
			if _, err := ips.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				if err := a.Release(ctx, ip, owner(1)); err != nil {
					return false, err
				}
				obj, err := ips.Get(ctx, ip.String(), metav1.GetOptions{})
				return err == nil && obj.DeletionTimestamp != nil, nil
			}); err != nil {
				t.Fatalf("%s with a finalizer: not marked for deletion: %v", ip, err)
			}
			obj, err = ips.Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			obj.Finalizers = nil
			if _, err := ips.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
