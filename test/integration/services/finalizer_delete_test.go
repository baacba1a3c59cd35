package services_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
)

// releaseGate wraps a real allocator. The first Release of an address goes
// through at once and is announced; every later Release of the same address
// is held until the test opens the address's gate, so a late (double)
// release lands after another Service has taken the address.
type releaseGate struct {
	allocation.Interface
	mu    sync.Mutex
	count map[netip.Addr]int           // guarded by mu
	first map[netip.Addr]chan struct{} // closed after the first release; guarded by mu
	hold  map[netip.Addr]chan struct{} // closed by the test; guarded by mu
}

func newReleaseGate(inner allocation.Interface) *releaseGate {
	return &releaseGate{Interface: inner, count: map[netip.Addr]int{},
		first: map[netip.Addr]chan struct{}{}, hold: map[netip.Addr]chan struct{}{}}
}

func (g *releaseGate) chans(ip netip.Addr) (first, hold chan struct{}) {
	if g.first[ip] == nil {
		g.first[ip], g.hold[ip] = make(chan struct{}), make(chan struct{})
	}
	return g.first[ip], g.hold[ip]
}

func (g *releaseGate) Release(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	g.mu.Lock()
	g.count[ip]++
	n := g.count[ip]
	first, hold := g.chans(ip)
	g.mu.Unlock()
	if n > 1 {
		select {
		case <-hold:
		case <-time.After(30 * time.Second):
		}
	}
	err := g.Interface.Release(ctx, ip, owner)
	if n == 1 {
		close(first)
	}
	return err
}

func (g *releaseGate) releases(ip netip.Addr) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.count[ip]
}

func (g *releaseGate) firstReleased(ip netip.Addr) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	first, _ := g.chans(ip)
	return first
}

func (g *releaseGate) open(ip netip.Addr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, hold := g.chans(ip)
	close(hold)
}

const holdFinalizer = "example.com/hold"

// TestConcurrentFinalizerRemovalReleasesOnce: a Service with a finalizer is
// deleted, then several updates race to remove the finalizer. Each ends in
// the store's delete-without-finalizers path and k8s.io/apiserver runs
// AfterDelete for the losers too. The address must be released exactly once:
// after the first release another Service takes it (bitmap: any Service with
// that IP; IPAddress model: the Service re-created with the same name and IP,
// the GitOps pattern), and no late release may free it. Before the fix the
// losers released again, the second Service lost its address, and the next
// create got it too.
func TestConcurrentFinalizerRemovalReleasesOnce(t *testing.T) {
	t.Parallel()
	for _, model := range []string{"bitmap", "ipaddress"} {
		t.Run(model, func(t *testing.T) { testFinalizerRemovalReleasesOnce(t, model) })
	}
}

func testFinalizerRemovalReleasesOnce(t *testing.T, model string) {
	var gates []*releaseGate
	var gatesMu sync.Mutex
	srv := testserver.Start(t, testserver.Options{
		ServiceRange: "10.0.0.0/24",
		Model:        model,
		WrapAllocator: func(a allocation.Interface) allocation.Interface {
			g := newReleaseGate(a)
			gatesMu.Lock()
			gates = append(gates, g)
			gatesMu.Unlock()
			return g
		},
	})
	gatesMu.Lock()
	gate := gates[0]
	gatesMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	services := srv.Client.CoreV1().Services(metav1.NamespaceDefault)

	const updaters = 12
	raced := 0
	// Up to 24 rounds: with etcd in process the updates serialize more often,
	// and 8 rounds once saw no race under -race.
	for round := 0; round < 24 && raced < 2; round++ {
		ip := netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", 20+round))
		name := fmt.Sprintf("held-%d", round)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{holdFinalizer}},
			Spec: corev1.ServiceSpec{ClusterIP: ip.String(), Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d: create %s: %v", round, name, err)
		}
		if err := services.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("round %d: delete %s: %v", round, name, err)
		}
		deleting, err := services.Get(ctx, name, metav1.GetOptions{})
		if err != nil || deleting.DeletionTimestamp == nil {
			t.Fatalf("round %d: %s should be terminating: %v %v", round, name, err, deleting)
		}

		// All updaters send the same update: drop the finalizer.
		unheld := deleting.DeepCopy()
		unheld.Finalizers = nil
		var wg sync.WaitGroup
		results := make(chan error, updaters)
		start := make(chan struct{})
		for range updaters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := services.Update(ctx, unheld.DeepCopy(), metav1.UpdateOptions{})
				results <- err
			}()
		}
		close(start)

		select {
		case <-gate.firstReleased(ip):
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: %s was never released", round, ip)
		}
		// The address is free: another Service takes it.
		takerName := "taker-" + name
		if model == "ipaddress" {
			takerName = name // same name and IP: the re-created Service
		}
		taker := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: takerName},
			Spec: corev1.ServiceSpec{ClusterIP: ip.String(), Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		if err := createWithRetry(ctx, services, taker); err != nil {
			t.Fatalf("round %d: %s could not take the released %s: %v", round, takerName, ip, err)
		}
		// Let any late release through, then wait for every updater.
		gate.open(ip)
		wg.Wait()
		close(results)
		succeeded := 0
		for err := range results {
			switch {
			case err == nil:
				succeeded++
			case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			default:
				t.Fatalf("round %d: update: %v", round, err)
			}
		}
		// More than one success means more than one update reached the
		// store's delete-without-finalizers path: the race this test is about.
		if succeeded > 1 {
			raced++
		}
		has, err := gate.Has(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		if n := gate.releases(ip); n != 1 || !has {
			t.Fatalf("round %d (%d updates passed): %s released %d times, still allocated to %s: %v; want one release and the taker's allocation intact",
				round, succeeded, ip, n, takerName, has)
		}
		if model == "ipaddress" {
			obj, err := srv.Client.NetworkingV1().IPAddresses().Get(ctx, ip.String(), metav1.GetOptions{})
			if err != nil {
				t.Fatalf("round %d: the re-created Service's IPAddress %s: %v", round, ip, err)
			}
			if p := obj.Spec.ParentRef; p == nil || p.Name != takerName {
				t.Fatalf("round %d: IPAddress %s parentRef %+v, want %s", round, ip, p, takerName)
			}
		}
	}
	if raced == 0 {
		t.Fatalf("no round had two updates reach the delete-without-finalizers path; the race was not exercised")
	}
}

// createWithRetry creates svc, retrying briefly while the previous holder of
// its name or IP is still being removed.
func createWithRetry(ctx context.Context, services interface {
	Create(context.Context, *corev1.Service, metav1.CreateOptions) (*corev1.Service, error)
}, svc *corev1.Service) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := services.Create(ctx, svc.DeepCopy(), metav1.CreateOptions{})
		if err == nil || time.Now().After(deadline) || !(apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err)) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
