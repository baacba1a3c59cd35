package iprepair_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/repairtest"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// slowAllocator holds every dynamic reservation for a while before the
// Service is stored, as a create waiting on admission webhooks does: the
// window in which a repair pass sees an allocated address with no Service.
type slowAllocator struct {
	allocation.Interface
	hold time.Duration
}

func (s slowAllocator) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	ip, err := s.Interface.AllocateNext(ctx, owner)
	if err == nil {
		time.Sleep(time.Duration(rand.Int64N(int64(s.hold))))
	}
	return ip, err
}

func slowBitmapServer(t *testing.T, cidr string, hold time.Duration) *testserver.Server {
	return testserver.Start(t, testserver.Options{ServiceRange: cidr, Model: "bitmap",
		WrapAllocator: func(a allocation.Interface) allocation.Interface {
			return slowAllocator{Interface: a, hold: hold}
		}})
}

// TestBitmapRepairRaceWithCreates races repair passes, back to back, against
// Service creates that hold their reserved address unstored for up to 400 ms,
// and against real leaks (addresses allocated with no Service) planted
// throughout, for several grace periods (grace 2 s, race 8 s), so the branch
// that frees leaks runs during the race. It must free the planted leaks and
// never an address a Service holds or is about to hold: every Service's
// address is allocated at the end and no two Services share one.
func TestBitmapRepairRaceWithCreates(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	ctx := repairtest.Context(t)
	srv := slowBitmapServer(t, "10.0.0.0/22", 400*time.Millisecond)
	store := bitmapStore(t, srv.Etcd.Client(), "10.0.0.0/22")
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client, LeakGrace: grace}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}

	stop := time.Now().Add(4 * grace)
	var (
		wg      sync.WaitGroup
		created atomic.Int64
		mu      sync.Mutex
		planted = map[netip.Addr]bool{} // guarded by mu
		freed   = map[netip.Addr]bool{} // leaks a pass reported fixed; guarded by mu
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
	wg.Go(func() { // leaks: statically in the lower band, which dynamic creates avoid
		for i := 2; time.Now().Before(stop) && i <= 41; i++ { // 10.0.0.1 is the kubernetes Service
			ip := netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i))
			if err := store.Allocate(ctx, ip, allocation.Owner{}); err != nil {
				errs <- fmt.Errorf("plant leak %s: %w", ip, err)
				return
			}
			mu.Lock()
			planted[ip] = true
			mu.Unlock()
			time.Sleep(150 * time.Millisecond)
		}
	})
	passes := 0
	for time.Now().Before(stop) {
		rep, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", passes, err)
		}
		passes++
		mu.Lock()
		for _, p := range rep.Problems {
			if p.Type == report.TypeLeak && p.Fixed {
				freed[netip.MustParseAddr(p.IP)] = true
			}
		}
		mu.Unlock()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	byIP := servicesByIP(t, ctx, srv.Client)
	for ip, svc := range byIP {
		if !storedHas(t, store, ip) {
			t.Fatalf("%s of %s was freed by the repair", ip, svc)
		}
	}
	for ip := range freed {
		if !planted[ip] {
			t.Fatalf("the repair freed %s, which was not a planted leak", ip)
		}
	}
	t.Logf("%d passes, %d services created, %d leaks planted, %d freed during the race", passes, created.Load(), len(planted), len(freed))
	if len(freed) == 0 {
		t.Fatalf("no leak was freed during the race: the free branch never ran")
	}
}

// TestBitmapRepairProgressUnderSustainedAllocations: another replica
// allocates and releases without pause on the same map while every pass has
// something to write (a Service's address is knocked out of the map before
// each pass). Each pass must succeed. Before the merge, a pass rebuilt the
// whole map from a new Service list after every lost compare-and-swap and
// gave up after 10 ("gave up after 10 writes lost to concurrent
// allocations"), so a replica started under load stayed unready.
func TestBitmapRepairProgressUnderSustainedAllocations(t *testing.T) {
	t.Parallel()
	ctx := repairtest.Context(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/22", Model: "bitmap"})
	store := bitmapStore(t, srv.Etcd.Client(), "10.0.0.0/22")
	for i := range 200 {
		if _, err := createService(ctx, srv, fmt.Sprintf("s%d", i), ""); err != nil {
			t.Fatal(err)
		}
	}
	victim, err := createService(ctx, srv, "victim", "10.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	ctrl, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: repair.Options{Client: srv.Client}, Stores: []iprepair.BitmapStore{store}})
	if err != nil {
		t.Fatal(err)
	}

	churnCtx, stopChurn := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var churned atomic.Int64
	for range 4 {
		other := bitmapStore(t, srv.Etcd.NewClient(t), "10.0.0.0/22") // another replica
		wg.Go(func() {
			for churnCtx.Err() == nil {
				ip, err := other.AllocateNext(churnCtx, allocation.Owner{})
				if err != nil {
					continue
				}
				_ = other.Release(context.Background(), ip, allocation.Owner{})
				churned.Add(2)
			}
		})
	}
	defer func() {
		stopChurn()
		wg.Wait()
	}()

	ip := netip.MustParseAddr(victim.Spec.ClusterIP)
	for pass := range 10 {
		// The planted fault (the victim's bit cleared) is this test's own
		// write, and four churning writers can out-race it 100 times in a
		// row on a loaded machine; it is retried, a few times at most. The
		// repair pass is what is tested.
		var err error
		for range 5 {
			if err = store.Release(ctx, ip, allocation.Owner{}); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		rep, err := ctrl.RunOnce(ctx)
		if err != nil {
			t.Fatalf("pass %d under sustained allocations (%d so far): %v", pass, churned.Load(), err)
		}
		if p, ok := rep.Find(report.TypeRepair, ip.String()); !ok || !p.Fixed {
			t.Fatalf("pass %d did not re-mark %s: %+v", pass, ip, rep.Problems)
		}
		if !hasUnderChurn(ctx, t, store, ip) {
			t.Fatalf("pass %d: %s not allocated after the repair", pass, ip)
		}
	}
	t.Logf("%d allocations and releases by the other replica during the passes", churned.Load())
}

// hasUnderChurn is storedHas on a map other writers churn: a read is
// confirmed against etcd, and four churning writers can out-race it 100
// times in a row on a loaded machine, as they can the planted fault; it is
// retried, a few times at most.
func hasUnderChurn(ctx context.Context, t *testing.T, store *clusterip.EtcdAllocator, ip netip.Addr) bool {
	t.Helper()
	var err error
	for range 5 {
		var has bool
		if has, err = store.Has(ctx, ip); err == nil {
			return has
		}
	}
	t.Fatal(err)
	return false
}
