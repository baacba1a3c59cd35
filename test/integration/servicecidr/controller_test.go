package servicecidr_test

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

func newServiceCIDR(ctx context.Context, t *testing.T, srv *testserver.Server, name string, cidrs ...string) {
	t.Helper()
	_, err := srv.Client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ServiceCIDR %s: %v", name, err)
	}
}

func poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v (last error %v)", what, timeout, last)
}

// TestDeletionGraceAndNetworkAddress runs the server's own controller. A
// deleted ServiceCIDR that nothing depends on keeps its finalizer through the
// grace period (10 s from its deletionTimestamp) and goes after it; before,
// it went ~130 ms after the delete. A deleted ServiceCIDR holding an
// IPAddress that is the network address of the only other CIDR containing
// it stays, Terminating, because that CIDR would never hand the address out;
// before, covered() counted it and let the ServiceCIDR go.
func TestDeletionGraceAndNetworkAddress(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress"})
	cidrs := srv.Client.NetworkingV1().ServiceCIDRs()
	newServiceCIDR(ctx, t, srv, "free", "10.1.0.0/24")
	newServiceCIDR(ctx, t, srv, "wide", "10.2.0.0/24")
	newServiceCIDR(ctx, t, srv, "narrow", "10.2.0.128/25")
	ip := ipaddress.NewObject(netip.MustParseAddr("10.2.0.128"), ownerOf("default", "edge"))
	if _, err := srv.Client.NetworkingV1().IPAddresses().Create(ctx, ip, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"free", "wide", "narrow"} {
		poll(ctx, t, 30*time.Second, name+" has the finalizer", func() (bool, error) {
			sc, err := cidrs.Get(ctx, name, metav1.GetOptions{})
			return err == nil && slices.Contains(sc.Finalizers, servicecidr.Finalizer), err
		})
	}

	for _, name := range []string{"free", "wide"} {
		if err := cidrs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	free, err := cidrs.Get(ctx, "free", metav1.GetOptions{})
	if err != nil || free.DeletionTimestamp == nil {
		t.Fatalf("free should be terminating: %v %v", err, free)
	}
	deleted := free.DeletionTimestamp.Time // second precision: the grace ends at deleted+10s or later

	// Through the grace period: still there, finalizer kept.
	for time.Now().Before(deleted.Add(servicecidr.DefaultDeletionGrace - 1500*time.Millisecond)) {
		sc, err := cidrs.Get(ctx, "free", metav1.GetOptions{})
		if err != nil || !slices.Contains(sc.Finalizers, servicecidr.Finalizer) {
			t.Fatalf("free lost its finalizer %v after the delete, within the grace period: %v", time.Since(deleted), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	poll(ctx, t, 15*time.Second, "free gone after the grace period", func() (bool, error) {
		_, err := cidrs.Get(ctx, "free", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})

	// The grace is over for "wide" too: it stays only because of the IPAddress.
	sc, err := cidrs.Get(ctx, "wide", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("wide went although 10.2.0.128 is the network address of narrow, which never serves it: %v", err)
	}
	cond := meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != networkingv1.ServiceCIDRReasonTerminating {
		t.Fatalf("wide Ready condition %+v, want False/Terminating", cond)
	}
}

// TestPeriodicResync builds a controller as the server does (shared informer
// factory with resync 0) and checks that it re-checks every ServiceCIDR
// periodically with no event at all. Before, the period was a handler resync
// that such a factory ignores ("resyncPeriod is invalid"), so it never ran.
func TestPeriodicResync(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress"})
	syncs := startController(ctx, t, srv, servicecidr.WithResyncPeriod(200*time.Millisecond))
	poll(ctx, t, 30*time.Second, "first sync", func() (bool, error) { return syncs.Load() > 0, nil })
	time.Sleep(time.Second) // let the start-up events settle
	before := syncs.Load()
	time.Sleep(2 * time.Second)
	if n := syncs.Load() - before; n < 4 {
		t.Fatalf("%d syncs in 2 s without events; want a re-check every 200 ms", n)
	}
}

// startController runs a controller of its own beside the server's, built
// as the server builds it (a shared informer factory with resync 0), until
// the test ends. It returns the count of the controller's syncs.
func startController(ctx context.Context, t *testing.T, srv *testserver.Server, opts ...servicecidr.Option) *atomic.Int64 {
	t.Helper()
	factory := informers.NewSharedInformerFactory(srv.Client, 0)
	syncs := &atomic.Int64{}
	cidrs := countingCIDRs{ServiceCIDRInformer: factory.Networking().V1().ServiceCIDRs(), gets: syncs}
	ctrl, err := servicecidr.New(srv.Client, cidrs, factory.Networking().V1().IPAddresses(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	factory.Start(runCtx.Done())
	go func() { done <- ctrl.Run(runCtx, 1) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
		factory.Shutdown()
	})
	return syncs
}

// countingCIDRs is a ServiceCIDR informer whose lister counts its Gets. A
// sync reads its ServiceCIDR with one Get, and nothing else calls Get, so
// the count is the number of syncs the controller has run.
type countingCIDRs struct {
	networkinginformers.ServiceCIDRInformer
	gets *atomic.Int64
}

func (c countingCIDRs) Lister() networkinglisters.ServiceCIDRLister {
	return countingLister{ServiceCIDRLister: c.ServiceCIDRInformer.Lister(), gets: c.gets}
}

type countingLister struct {
	networkinglisters.ServiceCIDRLister
	gets *atomic.Int64
}

func (l countingLister) Get(name string) (*networkingv1.ServiceCIDR, error) {
	l.gets.Add(1)
	return l.ServiceCIDRLister.Get(name)
}

func ownerOf(namespace, name string) allocation.Owner {
	return allocation.Owner{Namespace: namespace, Name: name}
}

// TestBlockedDeletionEndsOnLastIPAddress: a ServiceCIDR whose deletion waits
// for an IPAddress is checked again when that IPAddress is deleted, not by
// polling (each check lists every IPAddress of the cluster): with the
// periodic re-check an hour away, it is gone within seconds of the delete.
func TestBlockedDeletionEndsOnLastIPAddress(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress"})
	// Grace 0: this controller lets the ServiceCIDR go as soon as nothing
	// holds it, before the server's own (10 s grace) would.
	startController(ctx, t, srv, servicecidr.WithResyncPeriod(time.Hour), servicecidr.WithDeletionGrace(0))

	cidrs := srv.Client.NetworkingV1().ServiceCIDRs()
	newServiceCIDR(ctx, t, srv, "busy", "10.3.0.0/24")
	ip := ipaddress.NewObject(netip.MustParseAddr("10.3.0.5"), ownerOf("default", "web"))
	if _, err := srv.Client.NetworkingV1().IPAddresses().Create(ctx, ip, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 30*time.Second, "busy has the finalizer", func() (bool, error) {
		sc, err := cidrs.Get(ctx, "busy", metav1.GetOptions{})
		return err == nil && slices.Contains(sc.Finalizers, servicecidr.Finalizer), err
	})
	if err := cidrs.Delete(ctx, "busy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	poll(ctx, t, 5*time.Second, "busy blocked: Ready=False/Terminating", func() (bool, error) {
		sc, err := cidrs.Get(ctx, "busy", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == networkingv1.ServiceCIDRReasonTerminating, nil
	})
	if err := srv.Client.NetworkingV1().IPAddresses().Delete(ctx, "10.3.0.5", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 5*time.Second, "busy gone after its last IPAddress", func() (bool, error) {
		_, err := cidrs.Get(ctx, "busy", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if since := time.Since(deleted); since >= servicecidr.DefaultDeletionGrace {
		t.Fatalf("took %v: the server's own controller may have let it go, not the event", since)
	}
}
