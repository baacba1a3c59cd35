package repair_test

import (
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/kubernetes"

	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"
)

// TestLeakWaitsForWritesInFlight: a leak whose grace is over is kept while
// a write lease that was alive when the grace ended lives (a write made
// with it may still store the Service that holds the key), and freed once
// that lease has ended, whatever leases were granted since. The leases are
// real: registered in etcd by internal/fence and read back by
// fence.InFlight, as the server's repairs read them.
func TestLeakWaitsForWritesInFlight(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24"})
	h := newHarness(t, srv, "map", true)
	layout := etcdlayout.Layout{Prefix: "/inflight-" + t.Name()}
	etcd := srv.Etcd.Client()
	h.r = newRepairer(t, h, fence.InFlight{KV: etcd.KV, Layout: layout})

	// A request of a server holds a write lease: its write's answer was
	// lost, say, and it has not settled yet.
	kc := &kubernetes.Client{Client: etcd}
	kc.Kubernetes = kc
	// write makes a fenced write as a request of a server with leases.
	write := func(leases *fence.Leases, name string) *fence.Fence {
		t.Helper()
		f := fence.New(layout)
		if _, err := fence.Guard(kc, leases).OptimisticPut(fence.NewContext(h.ctx, f), layout.Service("default", name), []byte("v"), 0, kubernetes.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		return f
	}
	inDoubt := write(fence.NewLeases(etcd, layout, 0), "in-doubt")

	h.allocate(30010)
	pass := func() (kept, inFlight, freed []int) {
		t.Helper()
		p := h.begin()
		for _, leak := range p.Leaks() {
			switch {
			case leak.Freed:
				freed = append(freed, leak.Key)
			case leak.InFlight:
				inFlight = append(inFlight, leak.Key)
			default:
				kept = append(kept, leak.Key)
			}
		}
		h.commit(p)
		return kept, inFlight, freed
	}
	for range repair.LeakPasses {
		pass()
	}
	h.now = h.now.Add(2 * time.Minute) // the grace is over
	if _, inFlight, freed := pass(); !slices.Equal(inFlight, []int{30010}) || len(freed) != 0 {
		t.Fatalf("past the grace, a write lease alive: in flight %v freed %v, want 30010 kept for the write in flight", inFlight, freed)
	}
	// A request of another server that starts later takes a lease of its
	// own; it is no write of the moment the grace ended.
	later := write(fence.NewLeases(etcd, layout, 0), "later")
	defer later.Done()
	h.now = h.now.Add(time.Second)
	if _, inFlight, _ := pass(); !slices.Equal(inFlight, []int{30010}) {
		t.Fatalf("the first lease still alive: in flight %v, want 30010 still kept", inFlight)
	}
	// The request settles: its lease is revoked once no request holds it.
	inDoubt.Done()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h.now = h.now.Add(time.Second)
		_, inFlight, freed := pass()
		if slices.Equal(freed, []int{30010}) {
			break
		}
		if time.Now().After(deadline) || len(inFlight) != 1 {
			t.Fatalf("after the lease in flight ended: in flight %v freed %v, want 30010 freed", inFlight, freed)
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.wantBits(map[int]bool{30010: false})
}

// newRepairer is h's repairer reading the writes in flight from inFlight.
func newRepairer(t *testing.T, h *harness, inFlight repair.InFlight) *repair.Repairer[int] {
	t.Helper()
	r, err := repair.New(repair.Config[int]{
		Options: repair.Options{Client: h.srv.Client, LeakGrace: time.Minute, Now: func() time.Time { return h.now }, InFlight: inFlight},
		Store:   h.store, Space: repair.PortSpace{Range: h.store.Range()},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
