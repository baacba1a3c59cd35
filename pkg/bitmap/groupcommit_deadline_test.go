package bitmap

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/bitmap/bitset"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestEtcdShortDeadlinesLeakNothing stresses group commit on real etcd with
// callers whose deadlines are 0–3 ms, on a /24, for a few seconds, with
// reliable releases keeping the range from filling up. Afterwards the stored
// map must hold exactly the slots whose AllocateNextSlot returned success and
// that were not released: a set bit nobody was told about is a leak, a
// success whose bit is missing would be a duplicate waiting to happen, and no
// slot may be handed out twice while held. Without the floor on a batch's
// time (batchContext), nearly every write would time out after it may have
// landed and the whole /24 would leak within seconds.
func TestEtcdShortDeadlinesLeakNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a 4 s stress of 24 workers; runs in the full suite")
	}
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	a := newTestStore(t, etcd.Client(), EtcdOptions{})
	if _, err := a.Create(ctx); err != nil {
		t.Fatal(err)
	}

	var (
		mu            sync.Mutex
		held          = map[int]bool{} // guarded by mu
		successes     int              // guarded by mu
		lateSuccesses int              // succeeded after the caller's own deadline; guarded by mu
		failures      int              // guarded by mu
	)
	const workers = 24
	stop := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 11))
			for time.Now().Before(stop) && ctx.Err() == nil {
				mu.Lock()
				victim := -1
				if len(held) > 200 {
					for slot := range held {
						victim = slot
						break
					}
					delete(held, victim)
				}
				mu.Unlock()
				if victim >= 0 {
					// Releases are reliable here (no deadline) so the
					// bookkeeping stays exact.
					if err := a.ReleaseSlot(ctx, victim); err != nil {
						t.Errorf("release %d: %v", victim, err)
						return
					}
					continue
				}
				deadline := time.Duration(rnd.IntN(3001)) * time.Microsecond
				cctx, cancel := context.WithTimeout(ctx, deadline)
				slot, err := a.AllocateNextSlot(cctx)
				late := cctx.Err() != nil
				cancel()
				mu.Lock()
				if err == nil {
					if held[slot] {
						mu.Unlock()
						t.Errorf("slot %d handed out twice", slot)
						return
					}
					held[slot] = true
					successes++
					if late {
						lateSuccesses++
					}
				} else {
					failures++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	stored, _ := storedSlots(t, etcd.Client())
	storedSet := map[int]bool{}
	for _, slot := range stored {
		storedSet[slot] = true
	}
	var leaked, missing []int
	for slot := range storedSet {
		if !held[slot] {
			leaked = append(leaked, slot)
		}
	}
	for slot := range held {
		if !storedSet[slot] {
			missing = append(missing, slot)
		}
	}
	t.Logf("%d successes (%d after the caller's deadline), %d failures, %d held, stats %+v",
		successes, lateSuccesses, failures, len(held), a.Stats())
	if len(leaked) > 0 || len(missing) > 0 {
		t.Fatalf("stored map disagrees with the callers: %d leaked (set, no caller told) e.g. %v; %d missing (told success, not set) e.g. %v",
			len(leaked), first(leaked), len(missing), first(missing))
	}
	if successes == 0 || lateSuccesses == 0 {
		t.Fatalf("the stress did not exercise short deadlines: %d successes, %d after the deadline", successes, lateSuccesses)
	}
}

func first(slots []int) []int { return slots[:min(len(slots), 5)] }

// TestEtcdResolveAmbiguousWrite drives resolveWrite, the answer to an
// etcd transaction that failed after it may have landed, through its three
// cases on real etcd.
func TestEtcdResolveAmbiguousWrite(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	etcd := etcdtest.New(t)
	client := etcd.Client()

	// prepare returns a store and the write its leader would have failed to
	// learn the outcome of: slot 5 allocated on top of the stored map, with
	// the operations (value and stamp) that write was.
	prepare := func(t *testing.T) (*Store, ambiguousWrite, []clientv3.Op) {
		t.Helper()
		if _, err := client.Delete(ctx, testKey); err != nil {
			t.Fatal(err)
		}
		a := newTestStore(t, client, EtcdOptions{})
		if _, err := a.Create(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.load(ctx); err != nil {
			t.Fatal(err)
		}
		baseValue, err := etcdlayout.EncodeRangeAllocation(testSpace.Spec(), a.bits.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		a.apply([]*request{{kind: opAllocate, slot: 5}})
		value, err := etcdlayout.EncodeRangeAllocation(testSpace.Spec(), a.bits.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		ops, stamp := a.putOps(value)
		w := ambiguousWrite{base: mapState{rev: a.rev, stamp: a.stamp}, baseValue: baseValue, value: value, stamp: stamp}
		return a, w, ops
	}
	casWrite := func(t *testing.T, rev int64, ops []clientv3.Op) {
		t.Helper()
		resp, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(testKey), "=", rev)).Then(ops...).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("cas write at %d: %v %v", rev, err, resp)
		}
	}
	casPut := func(t *testing.T, rev int64, value []byte) {
		t.Helper()
		resp, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(testKey), "=", rev)).
			Then(clientv3.OpPut(testKey, string(value))).Commit()
		if err != nil || !resp.Succeeded {
			t.Fatalf("cas put at %d: %v %v", rev, err, resp)
		}
	}
	t.Run("not landed: fenced", func(t *testing.T) {
		a, w, _ := prepare(t)
		res, err := a.resolveWrite(ctx, w)
		if err != nil || res.landed || !res.fenced {
			t.Fatalf("resolveWrite = %+v, %v; want fenced, not landed", res, err)
		}
		// The lost write can never land now.
		resp, err := client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(testKey), "=", w.base.rev)).
			Then(clientv3.OpPut(testKey, string(w.value))).Commit()
		if err != nil || resp.Succeeded {
			t.Fatalf("the write landed after the fence: %v %v", err, resp)
		}
		if slots, _ := storedSlots(t, client); len(slots) != 0 {
			t.Fatalf("stored %v, want nothing", slots)
		}
	})

	t.Run("landed, then overwritten", func(t *testing.T) {
		a, w, ops := prepare(t)
		casWrite(t, w.base.rev, ops) // our write landed...
		_, rev := storedSlots(t, client)
		other, err := bitset.New(testSpace.Slots(), testSpace.StaticSlots())
		if err != nil {
			t.Fatal(err)
		}
		other.Set(5)
		other.Set(8)
		later, err := etcdlayout.EncodeRangeAllocation(testSpace.Spec(), other.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		casPut(t, rev, later) // ...and another replica wrote on top of it
		res, err := a.resolveWrite(ctx, w)
		if err != nil || !res.landed {
			t.Fatalf("resolveWrite = %+v, %v; want landed", res, err)
		}
	})

	// Another instance picked the same free slot from the same base: its
	// map is byte for byte ours, its stamp is not. Taking its write for ours
	// would hand slot 5 out twice.
	t.Run("another writer's identical map won", func(t *testing.T) {
		a, w, _ := prepare(t)
		theirs, _ := a.putOps(w.value) // same value, a stamp of its own
		casWrite(t, w.base.rev, theirs)
		res, err := a.resolveWrite(ctx, w)
		if err != nil || res.landed || res.fenced {
			t.Fatalf("resolveWrite = %+v, %v; want not landed", res, err)
		}
	})

	t.Run("another write won", func(t *testing.T) {
		a, w, _ := prepare(t)
		other, err := bitset.New(testSpace.Slots(), testSpace.StaticSlots())
		if err != nil {
			t.Fatal(err)
		}
		other.Set(8)
		theirs, err := etcdlayout.EncodeRangeAllocation(testSpace.Spec(), other.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		casPut(t, w.base.rev, theirs)
		res, err := a.resolveWrite(ctx, w)
		if err != nil || res.landed || res.fenced {
			t.Fatalf("resolveWrite = %+v, %v; want not landed", res, err)
		}
	})
}
