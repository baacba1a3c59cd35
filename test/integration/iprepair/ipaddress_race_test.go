package iprepair_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
)

// TestIPAddressRepairRaceWithCreates races IPAddress repair passes, back to
// back, against Service creates that hold their
// claimed IPAddress for up to 400 ms before the Service is stored, and
// against orphaned IPAddresses planted throughout, for several grace periods
// (grace 2 s, race 8 s), so the delete branch runs during the race. The
// orphans must go, and no IPAddress of a Service may: at the end every
// Service's address is claimed by it and no two Services share one.
func TestIPAddressRepairRaceWithCreates(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/22", Model: "ipaddress",
		WrapAllocator: func(a allocation.Interface) allocation.Interface {
			return slowAllocator{Interface: a, hold: 400 * time.Millisecond}
		}})
	ctrl, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: srv.Client, OrphanGrace: grace}})
	if err != nil {
		t.Fatal(err)
	}

	stop := time.Now().Add(4 * grace)
	var (
		wg      sync.WaitGroup
		created atomic.Int64
		mu      sync.Mutex
		planted []string // guarded by mu
	)
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				if _, err := createService(ctx, srv, fmt.Sprintf("w%d-%d", w, i), ""); err != nil {
					errs <- err
					return
				}
				created.Add(1)
			}
		})
	}
	wg.Go(func() { // orphans in the lower band, which dynamic creates avoid
		for i := 2; time.Now().Before(stop) && i <= 41; i++ {
			ip := netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i))
			obj := ipaddress.NewObject(ip, allocation.Owner{Namespace: "default", Name: fmt.Sprintf("never-%d", i)})
			if _, err := srv.Client.NetworkingV1().IPAddresses().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("plant orphan %s: %w", ip, err)
				return
			}
			mu.Lock()
			planted = append(planted, ip.String())
			mu.Unlock()
			time.Sleep(150 * time.Millisecond)
		}
	})
	passes := 0
	for time.Now().Before(stop) {
		if _, err := ctrl.RunOnce(ctx); err != nil {
			t.Fatalf("pass %d: %v", passes, err)
		}
		passes++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	byIP := servicesByIP(t, ctx, srv.Client)
	for ip, svc := range byIP {
		namespace, name, _ := strings.Cut(svc, "/")
		checkClaim(t, srv, ip, namespace, name)
	}
	gone := 0
	for _, ip := range planted {
		_, err := srv.Client.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone++
		case err != nil:
			t.Fatal(err)
		}
	}
	t.Logf("%d passes, %d services created, %d orphans planted, %d deleted during the race", passes, created.Load(), len(planted), gone)
	if gone == 0 {
		t.Fatalf("no orphan was deleted during the race: the delete branch never ran")
	}
}
