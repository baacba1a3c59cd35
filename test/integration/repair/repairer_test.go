package repair_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"

	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/repair"
)

// The core is tested on ports (a small node-port range on a key of its own,
// so the server's own node-port map never interferes); the Services it reads
// again are real, served by an API server on a real etcd.

const testRange = "30000-30099"

type harness struct {
	t     *testing.T
	ctx   context.Context
	srv   *testserver.Server
	store *nodeport.EtcdAllocator
	now   time.Time
	r     *repair.Repairer[int]
}

// newHarness returns a repairer of a fresh map at a key named after the test
// and name; open creates the map first.
func newHarness(t *testing.T, srv *testserver.Server, name string, open bool) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	key := "/registry/repair-test/" + t.Name() + "/" + name
	store, err := nodeport.NewEtcd(srv.Etcd.Client(), key, nodeport.MustParse(testRange), bitmap.EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if open {
		if _, _, err := store.Open(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{t: t, ctx: ctx, srv: srv, store: store, now: time.Now()}
	h.r, err = repair.New(repair.Config[int]{
		Options: repair.Options{Client: srv.Client, LeakGrace: time.Minute, Now: func() time.Time { return h.now }},
		Store:   store, Space: repair.PortSpace{Range: store.Range()},
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// begin reads the map and starts a pass over it.
func (h *harness) begin() *repair.Pass[int] {
	h.t.Helper()
	p, err := h.r.Begin(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// leaked runs p.Leaks and returns the kept and the freed keys.
func leaked(p *repair.Pass[int]) (kept, freed []int) {
	for _, leak := range p.Leaks() {
		if leak.Freed {
			freed = append(freed, leak.Key)
		} else {
			kept = append(kept, leak.Key)
		}
	}
	return kept, freed
}

func (h *harness) commit(p *repair.Pass[int]) repair.Result[int] {
	h.t.Helper()
	res, err := p.Commit(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) allocate(ports ...int) {
	h.t.Helper()
	for _, port := range ports {
		if err := h.store.Allocate(h.ctx, port); err != nil {
			h.t.Fatalf("allocate %d: %v", port, err)
		}
	}
}

// wantBits fails unless exactly the ports of want are set among ports.
func (h *harness) wantBits(want map[int]bool) {
	h.t.Helper()
	for port, set := range want {
		has, err := h.store.Has(h.ctx, port)
		if err != nil || has != set {
			h.t.Errorf("bit of %d = %v (%v), want %v", port, has, err, set)
		}
	}
}

// createService creates a NodePort Service holding port through the API.
func (h *harness) createService(name string, port int32) *corev1.Service {
	h.t.Helper()
	svc, err := h.srv.Client.CoreV1().Services(metav1.NamespaceDefault).Create(h.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: port}}},
	}, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatalf("create %s: %v", name, err)
	}
	return svc
}

func (h *harness) deleteService(name string) {
	h.t.Helper()
	if err := h.srv.Client.CoreV1().Services(metav1.NamespaceDefault).Delete(h.ctx, name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatalf("delete %s: %v", name, err)
	}
}

// svc is a Service that exists only in the pass's list (never read again).
func svc(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
}

func TestRepairer(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24"})

	t.Run("HoldOutcomes", func(t *testing.T) {
		h := newHarness(t, srv, "map", true)
		h.allocate(30010)
		p := h.begin()
		got := []repair.Outcome{
			p.Hold(svc("a"), 30010), // allocated
			p.Hold(svc("b"), 30020), // not allocated
			p.Hold(svc("c"), 30020), // b holds it
			p.Hold(svc("d"), 29999), // below the range
			p.Hold(svc("e"), 30100), // above it
		}
		want := []repair.Outcome{repair.Held, repair.Missing, repair.Duplicate, repair.OutOfRange, repair.OutOfRange}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("outcomes (-want +got):\n%s", diff)
		}
		if kept, freed := leaked(p); len(kept)+len(freed) != 0 {
			t.Errorf("leaks %v %v, want none", kept, freed)
		}
		if n := p.Allocated(); n != 2 {
			t.Errorf("Allocated = %d, want 2", n)
		}
	})

	// A key allocated with no Service is freed on the LeakPasses-th pass that
	// sees it and no sooner than the grace after the first; a pass that
	// finds it held again forgets the count.
	t.Run("LeakFreedAfterPassesAndGrace", func(t *testing.T) {
		h := newHarness(t, srv, "map", true)
		h.allocate(30010, 30011)
		for pass := 1; pass <= repair.LeakPasses; pass++ {
			p := h.begin()
			if pass == 2 {
				if o := p.Hold(svc("back"), 30011); o != repair.Held {
					t.Fatalf("hold 30011: %v", o)
				}
			}
			kept, freed := leaked(p)
			wantKept := []int{30010, 30011}
			if pass == 2 {
				wantKept = []int{30010}
			}
			if diff := cmp.Diff(wantKept, kept); diff != "" || len(freed) != 0 {
				t.Errorf("pass %d (within the grace): kept (-want +got):\n%s freed %v", pass, diff, freed)
			}
			h.commit(p)
		}
		h.now = h.now.Add(2 * time.Minute)
		p := h.begin()
		kept, freed := leaked(p)
		// 30011 was seen leaked again from pass 3 on: this is its 2nd pass.
		if !slices.Equal(freed, []int{30010}) || !slices.Equal(kept, []int{30011}) {
			t.Errorf("pass past the grace: freed %v kept %v, want freed [30010] kept [30011]", freed, kept)
		}
		if res := h.commit(p); !res.Wrote {
			t.Error("freeing a leak wrote nothing")
		}
		h.wantBits(map[int]bool{30010: false, 30011: true})
	})

	// Counts move only with Commit: a pass that is not committed (a dry
	// run, a lost write) counts nothing.
	t.Run("LeakCountsCommittedOnlyByCommit", func(t *testing.T) {
		h := newHarness(t, srv, "map", true)
		h.allocate(30010)
		h.now = h.now.Add(-time.Hour) // the grace is long over by pass 3
		p := h.begin()                // pass 1
		leaked(p)
		h.commit(p)
		for range 3 {
			leaked(h.begin()) // never committed
		}
		h.now = time.Now()
		p = h.begin() // pass 2
		if kept, freed := leaked(p); !slices.Equal(kept, []int{30010}) || len(freed) != 0 {
			t.Fatalf("pass 2: kept %v freed %v, want 30010 kept", kept, freed)
		}
		h.commit(p)
		p = h.begin() // pass 3
		if _, freed := leaked(p); !slices.Equal(freed, []int{30010}) {
			t.Fatalf("pass 3: freed %v, want [30010]", freed)
		}
		h.commit(p)
		h.wantBits(map[int]bool{30010: false})
	})

	// A lost compare-and-swap merges the pass's changes onto a fresh read:
	// the concurrent allocation stays, the missing key is set, the confirmed
	// leak cleared, and a key set meanwhile is not missing.
	t.Run("CommitMergesOntoFreshRead", func(t *testing.T) {
		h := newHarness(t, srv, "map", true)
		a := h.createService("merge-a", 30020)
		b := h.createService("merge-b", 30030)
		h.allocate(30010)
		h.now = h.now.Add(-time.Hour)
		for range repair.LeakPasses - 1 {
			p := h.begin()
			leaked(p)
			h.commit(p)
		}
		h.now = time.Now()
		p := h.begin()
		if o := p.Hold(a, 30020); o != repair.Missing {
			t.Fatalf("hold 30020: %v", o)
		}
		if o := p.Hold(b, 30030); o != repair.Missing {
			t.Fatalf("hold 30030: %v", o)
		}
		if _, freed := leaked(p); !slices.Equal(freed, []int{30010}) {
			t.Fatalf("freed %v, want [30010]", freed)
		}
		h.allocate(30030, 30040) // b's own allocation, and a create in flight
		res := h.commit(p)
		if !res.Wrote {
			t.Error("the merged write did not happen")
		}
		if diff := cmp.Diff(map[int]bool{30030: true}, res.NotMissing); diff != "" {
			t.Errorf("NotMissing (-want +got):\n%s", diff)
		}
		h.wantBits(map[int]bool{30010: false, 30020: true, 30030: true, 30040: true})
	})

	// Before a missing key is set on a fresh map its Service is read again:
	// deleted, recreated (another UID) or no longer holding the key, it gets
	// no bit; one that still holds it does.
	t.Run("CommitReadsServicesAgain", func(t *testing.T) {
		h := newHarness(t, srv, "map", true)
		listed := map[int]*corev1.Service{
			30060: h.createService("again-gone", 30060),
			30061: h.createService("again-recreated", 30061),
			30062: h.createService("again-moved", 30062),
			30070: h.createService("again-kept", 30070),
		}
		p := h.begin()
		for port, s := range listed {
			if o := p.Hold(s, port); o != repair.Missing {
				t.Fatalf("hold %d: %v", port, o)
			}
		}
		h.deleteService("again-gone")
		h.deleteService("again-recreated")
		h.createService("again-recreated", 30061)
		moved := listed[30062].DeepCopy()
		moved.Spec.Ports[0].NodePort = 30063
		if _, err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).Update(h.ctx, moved, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		leaked(p)
		h.allocate(30080) // the pass's compare-and-swap now fails
		res := h.commit(p)
		if diff := cmp.Diff(map[int]bool{30060: true, 30061: true, 30062: true}, res.NotMissing); diff != "" {
			t.Errorf("NotMissing (-want +got):\n%s", diff)
		}
		h.wantBits(map[int]bool{30060: false, 30061: false, 30062: false, 30070: true, 30080: true})
	})

	// The first write is the rebuilt map on the pass's revision: no Service
	// is read again then, an unchanged map is not rewritten, and a missing
	// map is created.
	t.Run("CommitWritesOnlyChanges", func(t *testing.T) {
		h := newHarness(t, srv, "map", true)
		h.allocate(30010)
		before, err := h.store.ReadStored(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := h.begin()
		p.Hold(svc("held"), 30010)
		leaked(p)
		if res := h.commit(p); res.Wrote || len(res.NotMissing) != 0 {
			t.Errorf("unchanged map: %+v, want no write", res)
		}
		after, err := h.store.ReadStored(h.ctx)
		if err != nil || after.Revision != before.Revision {
			t.Errorf("revision %d → %d (%v), want unchanged", before.Revision, after.Revision, err)
		}

		absent := newHarness(t, srv, "absent", false)
		p = absent.begin()
		if o := p.Hold(svc("not-read-again"), 30010); o != repair.Missing {
			t.Fatalf("hold: %v", o)
		}
		leaked(p)
		if res := absent.commit(p); !res.Wrote {
			t.Error("the missing map was not created")
		}
		absent.wantBits(map[int]bool{30010: true})
	})

	// Rounds passes again, from a fresh read and list, over the maps whose
	// write lost with bitmap.ErrConflict, and gives up after
	// MaxConflictReruns rounds; any other error is not a lost write.
	t.Run("RoundsRerunConflicts", func(t *testing.T) {
		// rounds drives n maps whose finish returns finish(i, round) and
		// records "i@round" for each.
		rounds := func(n int, finish func(i, round int) error) (calls []string, rounds int, err error) {
			r := repair.NewRounds(n)
			for r.Next() {
				rounds++
				for _, i := range r.Pending() {
					calls = append(calls, fmt.Sprintf("%d@%d", i, rounds))
					if err := finish(i, rounds); r.Lost(i, err) {
						continue
					} else if err != nil {
						return calls, rounds, err
					}
				}
			}
			return calls, rounds, r.Err()
		}
		calls, _, err := rounds(2, func(i, round int) error {
			if i == 1 && round == 1 {
				return fmt.Errorf("write: %w", bitmap.ErrConflict)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"0@1", "1@1", "1@2"}, calls); diff != "" {
			t.Errorf("calls (-want +got):\n%s", diff)
		}

		_, n, err := rounds(1, func(int, int) error { return bitmap.ErrConflict })
		if err == nil || n != repair.MaxConflictReruns {
			t.Errorf("always conflicting: %v after %d rounds, want giving up after %d", err, n, repair.MaxConflictReruns)
		}

		boom := errors.New("boom")
		if _, _, err := rounds(2, func(int, int) error { return boom }); !errors.Is(err, boom) {
			t.Errorf("other error: %v, want boom", err)
		}
	})
}

// Commit before Leaks would write a map without the leaks still counted.
func TestCommitNeedsLeaks(t *testing.T) {
	t.Parallel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24"})
	h := newHarness(t, srv, "map", true)
	h.allocate(30010)
	if _, err := h.begin().Commit(h.ctx); err == nil {
		t.Error("Commit before Leaks succeeded")
	}
	h.wantBits(map[int]bool{30010: true})
}
