package iprepair_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
)

// leaseList is a repair.InFlight whose alive leases the test sets.
type leaseList struct {
	mu    sync.Mutex
	alive []string
}

func (l *leaseList) set(alive ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.alive = alive
}

func (l *leaseList) Leases(context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.alive), nil
}

// TestIPAddressRepairOrphanWaitsForWritesInFlight: an orphan of ours past
// its grace is kept while a write lease alive when the grace was first seen
// over lives (its Service's write may still land), whatever leases appear
// after, and deleted once that lease has ended.
func TestIPAddressRepairOrphanWaitsForWritesInFlight(t *testing.T) {
	t.Parallel()
	orphan := ours("10.0.0.10", "slow")
	client := fake.NewClientset(tableServiceCIDR(), orphan)
	clock := clocktesting.NewFakeClock(tableEpoch.Add(time.Hour))
	leases := &leaseList{}
	leases.set("a")
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{
		Client: client, Recorder: &eventLog{}, OrphanGrace: tableGrace, Now: clock.Now, InFlight: leases,
	}})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(step string) bool {
		t.Helper()
		clock.Step(time.Second)
		rep, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		_, err = client.NetworkingV1().IPAddresses().Get(context.Background(), "10.0.0.10", metav1.GetOptions{})
		if err == nil {
			for _, p := range rep.Problems {
				if p.IP == "10.0.0.10" && !strings.Contains(p.Message, "writes in flight") {
					t.Errorf("%s: the kept orphan is reported as %q, want the writes in flight named", step, p.Message)
				}
			}
		}
		return err == nil
	}
	if !pass("lease a alive") {
		t.Fatal("the orphan was deleted while a write lease alive at its grace's end lived")
	}
	leases.set("a", "b") // a request that started since
	if !pass("leases a and b alive") {
		t.Fatal("the orphan was deleted while lease a lived")
	}
	leases.set("b")
	if pass("lease a ended") {
		t.Fatal("the orphan was kept after every lease alive at its grace's end had ended")
	}
}

// TestHorizon: the writes in flight at a moment have ended once no lease
// first seen at or before it is alive; without a source every moment has.
func TestHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := clocktesting.NewFakeClock(tableEpoch)
	leases := &leaseList{}
	h := repair.NewHorizon(leases, clock.Now)
	observe := func() time.Time {
		t.Helper()
		clock.Step(time.Second)
		at, err := h.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	leases.set("a")
	t1 := observe()
	if h.Ended(t1) {
		t.Error("lease a alive: the moment it was seen has ended")
	}
	leases.set("a", "b")
	t2 := observe()
	leases.set("b")
	observe()
	if !h.Ended(t1) {
		t.Error("a ended, b first seen after t1: t1 has not ended")
	}
	if h.Ended(t2) {
		t.Error("b alive at t2: t2 has ended")
	}
	leases.set()
	observe()
	if !h.Ended(t2) || h.InFlightCount() != 0 {
		t.Errorf("no lease alive: t2 ended %v, in flight %d", h.Ended(t2), h.InFlightCount())
	}
	if none := repair.NewHorizon(nil, clock.Now); !none.Ended(clock.Now()) {
		t.Error("without a source a moment has not ended")
	}
}

// TestHorizonConcurrentObserves: an Observe that took its moment first and
// finishes last still finds the lease it listed alive at that moment, though
// a later Observe recorded it first.
func TestHorizonConcurrentObserves(t *testing.T) {
	t.Parallel()
	clock := clocktesting.NewFakeClock(tableEpoch)
	leases := &leaseList{}
	leases.set("a")
	listing := make(chan struct{})
	slow := &blockingList{leaseList: leases, hold: listing, entered: make(chan struct{})}
	h := repair.NewHorizon(slow, clock.Now)
	early := make(chan time.Time)
	go func() {
		at, _ := h.Observe(context.Background()) // its moment: tableEpoch; waits in its list
		early <- at
	}()
	<-slow.entered
	clock.Step(time.Second)
	slow.pass.Store(true)
	if _, err := h.Observe(context.Background()); err != nil { // a later moment, done first
		t.Fatal(err)
	}
	close(listing)
	at := <-early
	if h.Ended(at) {
		t.Errorf("lease a, listed by the Observe of %v, counts as ended at that moment", at)
	}
}

// blockingList is a leaseList whose first listing waits for hold.
type blockingList struct {
	*leaseList
	hold    chan struct{}
	entered chan struct{}
	pass    atomic.Bool
	once    sync.Once
}

func (b *blockingList) Leases(ctx context.Context) ([]string, error) {
	if !b.pass.Load() {
		b.once.Do(func() { close(b.entered) })
		<-b.hold
	}
	return b.leaseList.Leases(ctx)
}
